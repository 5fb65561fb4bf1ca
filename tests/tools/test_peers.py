"""``fastmath bench --peers`` runs end to end on a tiny grid: every installed peer gets a
time and an error against NumPy/SciPy, and the errors are real distances (its figures
are bench/'s business)."""
import json
import subprocess
import sys
import time

import numpy as np
import pytest
import scipy.special

from fastmath.tools import _peers

from helpers import FakeClock


@pytest.mark.slow
def test_peers_grid_json_and_plot(tmp_path):
    pytest.importorskip("matplotlib")
    out, png = tmp_path / "p.json", tmp_path / "p.png"
    r = subprocess.run([sys.executable, "-m", "fastmath", "bench", "--peers", "--quick",
                        "--functions", "exp,erf,logsumexp", "--dtypes", "float32",
                        "--sizes", "2000", "--json", str(out), "--plot", str(png)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    data = json.loads(out.read_text())
    assert len(data["load_average"]) == 3
    names = [(row["function"], row["dtype"], row["shape"]) for row in data["rows"]]
    assert names == [("exp", "float32", [2000]), ("erf", "float32", [2000]),
                     ("logsumexp", "float64", [2000])]
    for row in data["rows"]:
        labels = [label for label, _ in _peers.columns(row["function"], row["axis"])]
        assert list(row["times"]) == labels == list(row["max_ulps"])
        assert row["max_ulps"]["numpy/scipy"] == 0
        assert all(t > 0 for t in row["times"].values())
        assert row["speedup_vs_reference"] == (row["times"]["numpy/scipy"]
                                               / row["times"]["fastmath auto"])
    assert "auto/fastest-other" in r.stdout
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("name", _peers.FUNCTIONS)
def test_every_installed_peer_computes_the_function(name):
    x = np.linspace(0.1, 2.5, 1001).astype(np.float32)
    ref = scipy.special.erf(x) if name == "erf" else getattr(np, name)(x)
    for label, fn in _peers.columns(name):
        # float32 kernels of independent libraries: a few ULPs, never garbage
        assert _peers.max_ulps(fn(x), ref) <= 4, label


def test_logsumexp_peers_match_scipy_on_both_axes():
    a = np.random.default_rng(0).normal(size=(40, 30))
    for axis in (None, 0):
        ref = scipy.special.logsumexp(a, axis=axis)
        for label, fn in _peers.columns("logsumexp", axis):
            assert _peers.max_ulps(fn(a), ref) <= 64, label


def test_max_ulps_is_a_distance():
    a = np.array([1.0, 2.0], np.float32)
    assert _peers.max_ulps(a, a) == 0
    assert _peers.max_ulps(np.nextafter(a, np.float32(3)), a) == 1


@pytest.fixture
def busy_for(monkeypatch):
    """quiesce() on made-up clocks: ``busy_for(s)`` makes the process's threads compute on
    a whole core for ``s`` seconds of its sleeps, then go quiet."""
    wall, cpu = FakeClock(), FakeClock()
    left = [0.0]

    def sleep(seconds):  # the process's threads compute while this one sleeps
        busy = min(seconds, left[0])
        left[0] -= busy
        wall.advance(seconds)
        cpu.advance(busy + 0.01 * seconds)  # and a little stray work of its own
    monkeypatch.setattr(_peers, "clock", wall)
    monkeypatch.setattr(_peers, "cpu_clock", cpu)
    monkeypatch.setattr(_peers, "sleep", sleep)

    def set_busy(seconds):
        left[0] = seconds
        return left
    return set_busy


def test_quiesce_waits_for_the_process_threads_to_stop_computing(busy_for):
    left = busy_for(0.3)
    assert _peers.quiesce() == pytest.approx(0.3 + _peers.INTERVAL)  # and one quiet look
    assert left == [0.0]


def test_quiesce_gives_up_after_its_limit_and_is_quick_when_quiet(busy_for):
    left = busy_for(1.5)
    assert _peers.quiesce(limit=0.2) == pytest.approx(0.2)
    assert left[0] == pytest.approx(1.3)  # still computing: given up on
    busy_for(0.0)
    assert _peers.quiesce() == pytest.approx(_peers.INTERVAL)


def test_quiesce_on_the_real_clocks_returns():
    # what the process's CPU time tells is the business of the tests above; here only that
    # the real clocks are the default and a wait ends within its limit
    assert _peers.clock is time.perf_counter and _peers.cpu_clock is time.process_time
    assert 0 < _peers.quiesce(limit=0.05)


def test_the_fastest_peer_is_the_fastest_within_the_rows_ulp_bound():
    times = {"numpy/scipy": 5.0, "fastmath auto": 2.0, "jax.jit": 1.0, "torch": 3.0}
    errors = {"numpy/scipy": 0, "fastmath auto": 1, "jax.jit": 7, "torch": 1}
    assert _peers.fastest(times, errors, 2) == ("torch", 3.0)
    assert _peers.fastest(times, errors, 7) == ("jax.jit", 1.0)
    errors["torch"] = 3
    assert _peers.fastest(times, errors, 2) == ("numpy/scipy", 5.0)
    assert _peers.ulp_bound("erf", "float32") == 2  # the registry row's, per dtype
    assert _peers.ulp_bound("erf", "float64") == 4


def test_forced_columns_are_fastmaths_own_and_compute_the_function():
    """--forced adds fastmath with each available backend chosen, and VML called directly
    where MKL is installed; fastmath's own columns never count as the fastest other way."""
    from fastmath import backends

    cols = dict(_peers.columns("exp", forced=True))
    want = {"fastmath numpy"} | {f"fastmath {b}" for b in ("torch-cpu", "mkl")
                                 if backends.why_unavailable(b) is None}
    assert want <= set(cols)
    if backends.why_unavailable("mkl") is None:
        want.add("VML direct")
    x = np.linspace(-3, 3, 5000)
    for label in want:
        assert _peers.max_ulps(cols[label](x), np.exp(x)) <= 2, label
    times = {"numpy/scipy": 5.0, "fastmath auto": 2.0, "fastmath numpy": 1.0, "torch": 3.0}
    errors = dict.fromkeys(times, 0)
    assert _peers.fastest(times, errors, 2) == ("torch", 3.0)


def test_measure_totals_every_call_of_each_column_without_wrapping_them():
    """The learning grid's pass totals (``bench/peers.py --learn``) come from here: every
    call of a column is counted, the first ones too, and timed around its batch (a wrapper
    around each call once added 0.7 us to auto's every call, 11% at 10^4 elements)."""
    calls = {"a": 0, "b": 0}

    def column(label):
        def run(x):
            calls[label] += 1
            return np.exp(x)
        return run
    x = np.linspace(0, 1, 1000)
    totals = {}
    times, _ = _peers.measure([("a", column("a")), ("b", column("b"))], x, 3,
                              target=1e-4, quiet=False, totals=totals)
    assert {k: v[1] for k, v in totals.items()} == calls
    assert all(seconds > 0 for seconds, _ in totals.values())
    assert set(times) == {"a", "b"}


def test_a_slow_first_call_does_not_make_a_columns_batches_short(monkeypatch):
    """A column's batches are sized on the fastest of its first calls and then on its
    median so far: one slow call (a column still learning) once made every batch of it a
    few calls long, and their cold starts (after each quiet wait) counted against it."""
    clock = FakeClock()
    monkeypatch.setattr(time, "perf_counter", clock)
    costs = iter([1e-6] + [50e-6] + [1e-6] * 100_000)  # its first timed call is slow
    calls = []

    def column(x):
        calls.append(1)
        clock.advance(next(costs))
        return x
    totals = {}
    _peers.measure([("a", column)], np.zeros(3), 3, target=1e-3, quiet=False, totals=totals)
    # sized on the fastest of the first calls: about target / 1 us calls a batch
    assert totals["a"][1] >= 3 * 900
