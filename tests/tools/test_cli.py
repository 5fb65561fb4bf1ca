"""The ``fastmath`` command: --help everywhere, --version, ``info`` (table and JSON),
``check`` (and that it can fail), a usage error naming the valid choices for every bad
option value."""
import json
import os
from pathlib import Path
import re
import subprocess
import sys

import numpy as np
import pytest

import fastmath
from fastmath.tools import _check, cli
from fastmath.dispatch import _calibration, _config
from fastmath import _registry, backends
from fastmath._registry import BY_NAME, ROWS, Spec


def fastmath_cmd(*args):
    return subprocess.run([sys.executable, "-m", "fastmath", *args], capture_output=True,
                          text=True, timeout=300)


def subcommands():
    r = fastmath_cmd("--help")
    assert r.returncode == 0, r.stderr
    return re.search(r"\{([a-z,]+)\}", r.stdout).group(1).split(",")


def test_help_on_every_subcommand():
    names = subcommands()
    assert {"info", "bench", "check"} <= set(names)
    for name in names:
        r = fastmath_cmd(name, "--help")
        assert r.returncode == 0, (name, r.stderr)
        assert r.stdout.startswith(f"usage: fastmath {name}"), r.stdout


def test_info_json_is_machine_readable():
    r = fastmath_cmd("info", "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    for key in ("fastmath", "python", "platform", "versions", "backends", "threads",
                "selection", "config", "cpu", "gpus"):
        assert key in d
    assert d["backends"]["numpy"] == "available"
    assert d["versions"]["numpy"] == np.__version__
    assert d["cpu"]["logical_cores"] >= 1
    assert d["processes"]["calling"] >= 0
    assert d["processes"]["registry"] is None or os.path.exists(d["processes"]["registry"])


def test_info_table_names_every_backend_and_the_selection(capsys):
    assert cli.main(["info"]) == 0
    out = capsys.readouterr().out
    for name, why in fastmath.info()["backends"].items():
        assert name in out
    assert "auto" in out and "default" in out
    assert fastmath.info()["cpu"]["simd"] in out


def test_check_passes_here_and_says_so(capsys):
    assert cli.main(["check"]) == 0
    out = capsys.readouterr().out
    assert "match numpy/scipy" in out and "MISMATCH" not in out
    for name in fastmath.available_backends():
        assert name in out


def test_check_detects_a_result_that_differs():
    # fastmath.exp computes exp; a row claiming its reference is exp2 must fail the check
    wrong = Spec("exp", "numpy:exp2", "unary", ulp=(3, 2))
    worst, limit, detail = _check._compare_elementwise(wrong, "numpy", "float64")
    assert worst > limit == 0 and "at x=" in detail
    worst, limit, _ = _check._compare_elementwise(wrong, "auto", "float32")
    assert worst > limit == 3


def test_ulp_distance_counts_representable_steps():
    x = np.array([1.0, -0.0, 1e-310, np.inf, np.nan])
    y = x.copy()
    for _ in range(3):
        y = np.nextafter(y, np.inf)
    d = _check.ulp_distance(x, y)
    assert list(d[:3]) == [3, 3, 3]
    assert d[3] == 0 and d[4] == 0  # inf stays inf, NaN against NaN
    assert _check.ulp_distance(np.array([np.nan]), np.array([1.0]))[0] > 10**18


def test_version_names_fastmath_and_numpy(capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["--version"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("fastmath 0.") and f"numpy {np.__version__}" in out


@pytest.mark.parametrize("argv, named", [
    (["check", "--functions", "nosuch"], "exp, log"),
    (["check", "--functions", ","], "no function given"),
    (["check", "--backends", "gpu"], "auto, numpy, numexpr, torch-cpu, torch-cuda"),
    (["calibrate", "--sizes", "abc"], "such as 1000"),
    (["calibrate", "--sizes", "0"], "such as 1000"),
    (["calibrate", "--rounds", "0"], "at least 1"),
    (["calibrate", "--rounds", "-2"], "at least 1"),
    (["calibrate", "--functions", "sin"], "exp, log"),
    (["calibrate", "--dtypes", "int8"], "float32, float64"),
    (["bench", "--sizes", "1e6,x"], "such as 1000"),
    (["bench", "--backends", "gpu"], "numpy, numexpr"),
    (["bench", "--dtypes", "int8"], "float32"),
    (["bench", "--lse-shape", "3000x"], "3000x3000"),
    (["bench", "--functions", "nosuch"], "exp, log"),
    (["bench", "--json", "/nonexistent/folder/b.json"], "not an existing folder"),
    (["bench", "--plot", "/"], "is a directory"),
])
def test_a_bad_option_value_is_a_usage_error_naming_the_choices(argv, named, capsys,
                                                                   tmp_path, monkeypatch):
    monkeypatch.setenv("FASTMATH_CALIBRATION", str(tmp_path / "c.json"))  # never written
    with pytest.raises(SystemExit) as e:
        cli.main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert f"usage: fastmath {argv[0]}" in err and f"argument {argv[1]}:" in err
    assert "Traceback" not in err and (named is None or named in err), err
    assert not (tmp_path / "c.json").exists()


@pytest.mark.parametrize("value", ["-3", "0", "two"])
def test_bench_rounds_below_one_is_a_usage_error(value):
    # a small grid: before the check, 0 became 7 rounds and -3 crashed inside the bench
    r = fastmath_cmd("bench", "--functions", "exp", "--dtypes", "float64", "--sizes", "10",
                     "--backends", "numpy", "--no-plot", "--rounds", value)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert r.stderr.startswith("usage: fastmath bench") and r.stdout == ""
    assert f"argument --rounds: {value!r} is not a whole number of at least 1" in r.stderr


def test_check_refuses_a_backend_that_cannot_run_here(capsys):
    missing = [n for n in backends.NAMES if backends.why_unavailable(n) is not None]
    if not missing:
        pytest.skip("every backend runs here")
    with pytest.raises(SystemExit) as e:
        cli.main(["check", "--backends", missing[0]])
    assert e.value.code == 2 and "unavailable here" in capsys.readouterr().err
    with pytest.raises(ValueError, match="cannot run here"):
        _check.run([missing[0]], ["exp"])


def test_check_run_refuses_an_unknown_function_and_takes_aliases():
    with pytest.raises(ValueError, match="valid choices: exp"):
        _check.run(["numpy"], ["nosuch"])
    r = _check.run(["numpy"], ["psi"], dtypes=("float64",))
    assert [(x["function"], x["ok"]) for x in r] == [("digamma", True)]


def test_calibrate_refuses_an_output_it_cannot_write(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("")
    code = cli.main(["calibrate", "--output", str(blocker / "c.json"), "--functions", "exp",
                     "--sizes", "64"])
    assert code == 2 and "cannot write" in capsys.readouterr().err


@pytest.mark.parametrize("row", [r for r in ROWS if r.kind == "binary"], ids=lambda r: r.name)
def test_check_calls_binary_rows_with_two_operands(row):
    # a reference of the same arity that computes something else must be caught: with
    # one operand, both sides raised TypeError and that counted as a match
    other = "numpy:arctan2" if row.name != "arctan2" else "numpy:hypot"
    wrong = Spec(row.name, other, "binary", ulp=row.ulp)
    worst, limit, detail = _check._compare_elementwise(wrong, "numpy", "float64")
    assert worst is None or worst > limit, detail
    assert "x=" in detail and "y=" in detail


@pytest.mark.parametrize("name", ["softmax", "log_softmax", "logsumexp"])
def test_check_runs_reductions_over_each_axis(name, monkeypatch):
    # a reference that ignores axis agrees on axis=None only: the check must see it
    true = BY_NAME[name].reference()
    monkeypatch.setitem(_registry._originals, "fake:whole",
                        lambda a, axis=None: true(a, axis=None) if name != "logsumexp"
                        else np.broadcast_to(true(a), true(a, axis=axis).shape))
    wrong = Spec(name, "fake:whole", BY_NAME[name].kind, ulp=BY_NAME[name].ulp)
    worst, limit, detail = _check._compare_rows(wrong, "numpy", "float64")
    assert worst is None and "axis=0" in detail, detail


def test_check_compares_exception_types(monkeypatch):
    def raises(*args, **kwargs):
        raise ValueError("no")

    monkeypatch.setitem(_registry._originals, "fake:raises", raises)
    worst, _, detail = _check._compare_elementwise(Spec("exp", "fake:raises", "unary"),
                                                   "numpy", "float64")
    assert worst is None and "raised ValueError" in detail and "returned a result" in detail

    def type_error():
        raise TypeError("bad")
    _, _, problem = _check._both(raises, type_error)
    assert "ValueError" in problem and "TypeError" in problem
    _, _, same = _check._both(type_error, type_error)
    assert same.startswith(_check.SAME_ERROR)


def _broken_check(monkeypatch, capsys, target, attr, wrong, argv):
    """``fastmath check`` with one real kernel broken; (exit status, output)."""
    try:
        with monkeypatch.context() as m:
            m.setattr(target, attr, wrong)
            _config.reload()  # kernels are resolved once and cached: resolve them again
            code = cli.main(["check", *argv])
    finally:
        _config.reload()
    return code, capsys.readouterr().out


@pytest.mark.skipif(backends.why_unavailable("torch-cpu") is not None, reason="no torch")
def test_check_fails_when_a_torch_kernel_is_broken(monkeypatch, capsys):
    import torch

    atan2 = torch.atan2
    code, out = _broken_check(monkeypatch, capsys, torch, "atan2",
                              lambda a, b, out=None: atan2(b, a, out=out),  # swapped
                              ["--functions", "arctan2", "--backends", "numpy,torch-cpu"])
    assert code == 1
    assert "MISMATCH arctan2 on torch-cpu (float64)" in out
    assert "MISMATCH arctan2 on numpy" not in out
    assert "do NOT match" in out


@pytest.mark.skipif(backends.why_unavailable("numexpr") is not None, reason="no numexpr")
def test_check_fails_when_a_numexpr_kernel_is_broken(monkeypatch, capsys):
    from fastmath.backends import numexpr as nx

    def off_by_a_little(self, x, out):  # the real kernel, then a relative error of 1e-6
        status = real(self, x, out)
        out *= 1 + 1e-6
        return status
    real = nx._Unary.__call__
    code, out = _broken_check(monkeypatch, capsys, nx._Unary, "__call__", off_by_a_little,
                              ["--functions", "log1p", "--backends", "numexpr"])
    assert code == 1 and "MISMATCH log1p on numexpr (float32)" in out
    assert cli.main(["check", "--functions", "log1p", "--backends", "numexpr"]) == 0


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    """The default calibration path under a fresh cache folder, no FASTMATH_CALIBRATION."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv("FASTMATH_CALIBRATION", raising=False)
    _config.reload()
    yield tmp_path / "fastmath" / "calibration.json"
    monkeypatch.undo()
    _config.reload()


def test_info_shows_the_calibration_file_in_force(cache_dir, capsys):
    assert fastmath.info()["settings"]["calibration"]["value"] is None
    assert cli.main(["calibrate", "--functions", "exp", "--dtypes", "float64", "--sizes",
                     "64,4096", "--rounds", "1"]) == 0
    assert cache_dir.exists()
    assert fastmath.explain("exp", np.ones(64)).source == str(cache_dir)
    setting = fastmath.info()["settings"]["calibration"]
    assert setting["value"] == str(cache_dir) and "written by calibrate" in setting["source"]
    capsys.readouterr()
    assert cli.main(["info"]) == 0
    out = capsys.readouterr().out
    # the path whole, folded over the lines of its table cell
    assert str(cache_dir) in "".join(re.findall(r"│ *([^│ ]*) *│ *[^│]*│$", out, re.M)), out
    assert "built-in crossovers" not in out


def test_info_says_why_a_calibration_file_is_not_used(cache_dir):
    cache_dir.parent.mkdir(parents=True)
    data = json.loads(_calibration.DEFAULTS_PATH.read_text())
    data["machine"] = {"cpu": "another"}
    cache_dir.write_text(json.dumps(data))
    with pytest.warns(_config.ConfigWarning, match="another machine"):
        setting = fastmath.info()["settings"]["calibration"]
    assert setting["value"] is None
    assert "another machine" in setting["source"] and str(cache_dir) in setting["source"]


def test_info_settings_are_a_table_not_a_dict(capsys):
    assert cli.main(["info"]) == 0
    out = capsys.readouterr().out
    assert "{'value'" not in out and "'source'" not in out
    for name in fastmath.info()["settings"]:
        assert re.search(rf"^\W*{name}\b", out, re.M), name
    from fastmath.tools._info import render  # the plain text shown without rich

    plain = render(fastmath.info())
    assert "{'value'" not in plain and "calibration None" not in plain
