"""The ``fastmath`` command: --help everywhere, ``info`` (table and JSON), ``check``."""
import json
import re
import subprocess
import sys

import numpy as np
import pytest

import fastmath
from fastmath import _check, cli
from fastmath._registry import Spec


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
    worst, limit, detail = _check._compare_unary(wrong, "numpy", "float64")
    assert worst > limit == 0 and "at x=" in detail
    worst, limit, _ = _check._compare_unary(wrong, "auto", "float32")
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
