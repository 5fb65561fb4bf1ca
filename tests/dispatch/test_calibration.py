"""The cost table behind auto: rows derived from times, the calibration file (used when it
fits this machine, ignored with one warning when not), `fastmath calibrate`, explain()."""
import io
import json
import os
import subprocess
import sys
import warnings

import numpy as np
import pytest

import fastmath
from fastmath.tools import _bench, _calibrate
from fastmath.dispatch import _calibration, _config, _selection
from fastmath._registry import BY_NAME

SIZES = [100, 1000, 10_000, 100_000]


def linear(fixed, per_element, sizes=SIZES):
    return [fixed + per_element * n for n in sizes]


def synthetic(machine=None, backend="numexpr"):
    """A file in which ``backend`` overtakes the reference on exp float64 at 2000 elements."""
    times = {"reference": linear(1e-6, 2e-9), "numpy": linear(3e-6, 2e-9),
             backend: linear(3e-6, 1e-9)}
    return {"format": _calibration.FORMAT,
            "machine": _calibration.machine() if machine is None else machine,
            "table": {"exp": {"float64": {"sizes": SIZES, "times": times}}}}


@pytest.fixture
def calibration_file(tmp_path, monkeypatch):
    """Point FASTMATH_CALIBRATION at a file in tmp_path; restore the real config after."""
    path = tmp_path / "calibration.json"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))

    def use(content):
        if isinstance(content, bytes):
            path.write_bytes(content)
        elif content is not None:
            path.write_text(content if isinstance(content, str) else json.dumps(content))
        monkeypatch.setenv("FASTMATH_CALIBRATION", str(path))
        _config.reload()
        return path

    yield use
    monkeypatch.undo()
    _config.reload()


def test_rows_start_where_the_measured_lines_cross():
    rows = _calibration.derive(SIZES, synthetic()["table"]["exp"]["float64"]["times"])
    # reference 1us + 2ns/el against 3us + 1ns/el: equal at 2000 elements
    assert rows == ((2000, ("numexpr", "numpy")),)


def test_reference_regains_the_lead():
    times = {"reference": [1.0, 1.0, 1.0, 1.0], "numpy": [2.0, 0.5, 1.0, 2.0]}
    rows = _calibration.derive(SIZES, times)
    assert [r[1] for r in rows] == [("numpy",), ()]
    assert _calibration.Entry(SIZES, times, "x").row(10**6)[1] == ()


def test_a_backend_within_the_margin_does_not_displace_the_reference():
    times = {"reference": [1.0] * 4, "numpy": [1.0 - _calibration.MARGIN / 2] * 4}
    assert _calibration.derive(SIZES, times) == ()


def test_choice_is_deterministic_for_a_table(calibration_file):
    if "numexpr" not in fastmath.available_backends():
        pytest.skip("needs numexpr")
    path = calibration_file(synthetic())
    spec = BY_NAME["exp"]
    sizes = [1, 10, 1999, 2000, 2001, 10**4, 10**7]

    def choices():
        with fastmath.backend("auto"):
            return [tuple(n for n, _ in _selection.plan(spec, "float64", n)) for n in sizes]

    first = choices()
    assert first == [(), (), (), ("numexpr", "numpy"), ("numexpr", "numpy"),
                     ("numexpr", "numpy"), ("numexpr", "numpy")]
    _config.reload()  # read the file afresh
    assert choices() == first
    assert [fastmath.explain("exp", np.ones(n)).backend for n in sizes] == \
        [c[0] if c else "reference" for c in first]
    # below the first row the ufunc calls numpy at once, with the table's threshold
    x = np.linspace(0, 1, 1999)
    np.testing.assert_array_equal(fastmath.exp(x), np.exp(x))
    assert fastmath.exp._small == 2000
    # what the table does not measure (float32 here is the defaults'; float16 nowhere)
    assert fastmath.explain("exp", np.ones(10**6, np.float16)).backend == "reference"


def test_the_key_changes_with_every_timed_librarys_version(monkeypatch):
    import importlib.metadata

    real = importlib.metadata.version
    installed = _calibration.machine()["versions"]
    for lib in ("numpy", "scipy", "torch", "numexpr", "mkl"):
        monkeypatch.setattr(importlib.metadata, "version",
                            lambda name, lib=lib: "0.0.1" if name == lib else real(name))
        versions = _calibration.machine()["versions"]
        assert versions[lib] == "0.0.1" != installed[lib], lib
        assert {k: v for k, v in versions.items() if k != lib} == \
            {k: v for k, v in installed.items() if k != lib}


def test_the_calibration_file_is_used(calibration_file):
    path = calibration_file(synthetic(backend="numpy"))
    e = fastmath.explain(np.exp, np.ones(5000))
    assert e.source == str(path) and e.backend == "numpy" and e.row[0] == 2000
    assert "table row: from 2000 elements" in str(e) and str(path) in str(e)
    # functions the file does not cover keep the defaults
    assert fastmath.explain(fastmath.log, np.ones(5000)).source == "defaults"


def _machine_with(**changes):
    m = _calibration.machine()
    m.update(changes)
    return m


def _with_cell(change):
    """synthetic(), its exp float64 entry replaced by ``change(entry)``."""
    data = synthetic()
    cell = data["table"]["exp"]["float64"]
    data["table"]["exp"]["float64"] = change(cell)
    return data


@pytest.mark.parametrize("content,words", [
    (None, "does not exist"),
    ("{ not json", "cannot be read"),
    (json.dumps({"format": 1, "table": {"exp": {"float64": {"sizes": [1, 2]}}}}), "cannot be read"),
    (json.dumps(dict(synthetic(), format=99)), "cannot be read"),
    (synthetic(machine=_machine_with(cpu="Some Other CPU")), "another machine"),
    (synthetic(machine=_machine_with(cores=1024)), "another machine"),
    (synthetic(machine=_machine_with(versions={"numpy": "0.1"})), "versions"),
    # nested deeper than Python's recursion limit: json raises RecursionError
    ("[" * 100_000 + "]" * 100_000, "nested deeper"),
    ('{"format": 1, "table": ' + '{"a": ' * 100_000 + "1" + "}" * 100_001, "nested deeper"),
    (b'{"format": 1, "\xff": 1}', "cannot be read"),  # not UTF-8
    ("null", "cannot be read"),
    (dict(synthetic(), machine=["a", "list"]), "another machine"),
    (dict(synthetic(), machine="a string"), "another machine"),
    (dict(synthetic(), table=["a", "list"]), "cannot be read"),
    (_with_cell(lambda t: "a string"), "cannot be read"),
    (_with_cell(lambda t: {"rows": [[10, "numpy"]]}), "cannot be read"),  # not its letters
    (_with_cell(lambda t: {"rows": [["10", ["numpy"]]]}), "cannot be read"),
    (_with_cell(lambda t: {"rows": [[True, ["numpy"]]]}), "cannot be read"),
    (_with_cell(lambda t: {"rows": [[10.5, ["numpy"]]]}), "cannot be read"),
    (_with_cell(lambda t: {"rows": [[10, ["numpy"], 1]]}), "cannot be read"),
    (_with_cell(lambda t: {"rows": {"10": ["numpy"]}}), "cannot be read"),
    (_with_cell(lambda t: dict(t, times=dict(t["times"], numpy=[[1], [2], [3], [4]]))),
     "cannot be read"),
    (_with_cell(lambda t: dict(t, sizes={"1": 1})), "cannot be read"),
], ids=["missing", "corrupt", "malformed", "format", "other-cpu", "other-cores", "stale",
        "deep-list", "deep-dict", "not-utf8", "null", "machine-list", "machine-str",
        "table-list", "cell-str", "row-names-str", "row-size-str", "row-size-bool",
        "row-size-float", "row-long", "rows-dict", "times-nested", "sizes-dict"])
def test_unusable_file_falls_back_to_defaults_with_one_warning(calibration_file, content, words):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        path = calibration_file(content)
        for n in (10, 10**4, 10**6):
            for f in (fastmath.exp, fastmath.log, fastmath.erf):
                f(np.linspace(0.1, 1, n))
            fastmath.logsumexp(np.ones(n))
        e = fastmath.explain("exp", np.ones(10**6))
    mine = [w for w in caught if issubclass(w.category, _config.ConfigWarning)]
    assert len(mine) == 1, [str(w.message) for w in mine]
    assert str(path) in str(mine[0].message) and words in str(mine[0].message)
    assert "fastmath calibrate" in str(mine[0].message)
    assert e.source == "defaults"


def test_unreadable_file_falls_back_to_defaults_with_one_warning(calibration_file,
                                                                monkeypatch):
    # root reads a mode-000 file: refuse it at open() as the kernel would for anyone else
    path = calibration_file(synthetic())
    real_open = os.open

    def refusing(p, *args, **kwargs):
        if os.fspath(p) == str(path):
            raise PermissionError(13, "Permission denied", str(p))
        return real_open(p, *args, **kwargs)

    monkeypatch.setattr(os, "open", refusing)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for n in (10, 10**4, 10**6):
            fastmath.exp(np.ones(n))
            fastmath.logsumexp(np.ones(n))
    mine = [str(w.message) for w in caught if issubclass(w.category, _config.ConfigWarning)]
    assert len(mine) == 1 and "Permission denied" in mine[0], mine
    assert fastmath.explain("exp", np.ones(10**6)).source == "defaults"


def test_no_file_in_the_cache_dir_is_silent(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            _config.reload({})
            assert _calibration.user_path() == tmp_path / "fastmath" / "calibration.json"
            fastmath.exp(np.ones(10**6))
            assert fastmath.explain("exp", np.ones(10**6)).source == "defaults"
    finally:
        monkeypatch.undo()
        _config.reload()


def test_calibrate_writes_a_file_that_is_then_used(calibration_file):
    path = calibration_file(None)
    stream = io.StringIO()
    with warnings.catch_warnings():
        # measuring forces each backend, which never needs the table not yet written
        warnings.simplefilter("error")
        written, data = _calibrate.calibrate(functions=("exp", "logsumexp"),
                                             dtypes=("float64",), sizes=(64, 4096), rounds=1,
                                             stream=stream)
    whole = json.loads(path.read_text())
    assert written == path and whole["environments"][_calibration.environment()] == data
    assert data["machine"] == _calibration.machine()
    assert "calibrating" in stream.getvalue() and "4/4" in stream.getvalue()
    cell = data["table"]["exp"]["float64"]
    assert set(cell["times"]) == {"reference"} | {
        b for b in fastmath.available_backends()[1:] if _bench.runs("exp", b)}
    assert "numexpr" not in data["table"]["logsumexp"]["float64"]["times"]  # no kernel
    entry = _calibration.entry("exp", "float64")
    assert entry.source == str(path) and entry.times == cell["times"]
    assert entry.rows == _calibration.derive(cell["sizes"], cell["times"])


@pytest.mark.slow
def test_calibrate_command(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("FASTMATH_")}
    env["XDG_CACHE_HOME"] = str(tmp_path)
    r = subprocess.run([sys.executable, "-m", "fastmath", "calibrate", "--functions", "erf",
                        "--dtypes", "float32", "--sizes", "100,10000", "--rounds", "1"],
                       capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    path = tmp_path / "fastmath" / "calibration.json"
    assert f"wrote {path}" in r.stdout and "2/2" in r.stderr
    r = subprocess.run([sys.executable, "-W", "error", "-c",
                        "import fastmath, numpy; print(fastmath.explain('erf', "
                        "numpy.ones(10**4, 'float32')).source)"],
                       capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == str(path)


def test_explain_names_the_valid_functions():
    with pytest.raises(ValueError, match="exp.*logsumexp"):
        fastmath.explain(np.floor, np.ones(3))
    with pytest.raises(ValueError, match="Valid choices"):
        fastmath.explain("floor", np.ones(3))


def test_explain_agrees_with_the_plan_across_sizes():
    for name in ("exp", "erf", "logsumexp"):
        for dtype in ("float32", "float64"):
            for n in (1, 10, 10**3, 10**4, 10**5, 10**6, 10**7):
                e = fastmath.explain(name, np.broadcast_to(np.ones(1, dtype), (n,)))
                chain = _selection.plan(BY_NAME[name], dtype, n)
                assert e.backend == (chain[0][0] if chain else "reference")
                assert e.size == n and e.dtype == dtype
    with fastmath.backend("numpy"):
        assert "not auto" in str(fastmath.explain("exp", np.ones(3)))


def test_calibrate_starts_afresh_over_a_deeply_nested_file(tmp_path):
    # what `fastmath calibrate` would write over: the nesting must not stop it
    path = tmp_path / "calibration.json"
    path.write_text("[" * 100_000 + "]" * 100_000)
    assert _calibrate._others(path) == {"format": _calibration.FORMAT, "environments": {}}
