"""The numpy backend's contiguous unary calls on fastmath's native runtime
(``_Unary._compiled``: NumPy's own loop over pieces claimed by the caller and the pool's
threads, fastmath/dispatch/_runtime.c) and the runtime's back-off per call size.

Oracle: NumPy's own call on the same input, bit for bit (the very loop runs on every
piece), with NumPy's warnings and exceptions under ``np.errstate``.
"""
import time
import warnings

import numpy as np
import pytest

import fastmath
from fastmath.backends import numpy as numpy_backend
from fastmath.dispatch import _config, _parallel

from helpers import FakeClock

_runtime = pytest.importorskip("fastmath.dispatch._runtime")
N = 1_000_000  # large enough that a worker always joins a split


@pytest.fixture
def fresh():
    if _parallel.threads() < 2:
        pytest.skip("one thread: nothing splits")
    before = _runtime.set_pacing(False)  # every call from the split size splits
    yield
    _runtime.set_pacing(before)


class _Spy:
    def __init__(self, real):
        self.real, self.taken = real, []

    def __getattr__(self, name):
        return getattr(self.real, name)

    def unary(self, loops, xs, out, *rest):
        flags = self.real.unary(loops, xs, out, *rest)
        if flags is not None and out.size > 1:  # not the one-element probe of the loops
            self.taken.append(out.size)
        return flags


@pytest.fixture
def spy(monkeypatch):
    """The calls the native runtime took. The front ends' C fast paths forget the calls
    they make themselves (a kernel's runtime entry, learned at an earlier test's first
    call of the numpy backend on that dtype, tests/dispatch/test_threads.py's for one):
    each test's first call of a dtype goes through the backend, where the spy sits."""
    _config.reload()
    spy = _Spy(_runtime)
    monkeypatch.setattr(numpy_backend, "_runtime", spy)
    return spy.taken


def same(a, b):
    assert a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


@pytest.mark.parametrize("name", ["exp", "log", "sqrt", "sin"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_bitwise_numpys_on_the_compiled_pool(name, dtype, fresh, spy):
    rng = np.random.default_rng(1)
    x = (rng.standard_normal((1000, N // 1000)) * 3).astype(dtype)
    x[0, :4] = [np.nan, np.inf, -np.inf, -0.0]
    ref = getattr(np, name)
    before = x.copy()
    with fastmath.backend("numpy"), np.errstate(all="ignore"):
        got = getattr(fastmath, name)(x)
        out = np.empty_like(x)
        got_out = getattr(fastmath, name)(x, out=out)
        inplace = x.copy()
        getattr(fastmath, name)(inplace, out=inplace)
        want = ref(x)
    assert spy, "the compiled pool was not used"
    same(x, before)
    same(got, want)
    assert got_out is out
    same(out, want)
    same(inplace, want)


@pytest.mark.parametrize("name", ["power", "arctan2", "logaddexp", "hypot"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_two_argument_ufuncs_run_there_too(name, dtype, fresh, spy):
    """NumPy's own two-argument loops, operands of one shape and dtype; what broadcasts
    (a scalar, a row against a column) or overlaps out= partly is left to the Python pool,
    with NumPy's results either way."""
    rng = np.random.default_rng(2)
    x = rng.uniform(0.1, 10, N).astype(dtype)
    y = rng.uniform(-3, 3, N).astype(dtype)
    x[:3] = [np.nan, np.inf, 0.0]
    ref, fm = getattr(np, name), getattr(fastmath, name)
    with fastmath.backend("numpy"), np.errstate(all="ignore"):
        same(fm(x, y), ref(x, y))
        assert spy == [N]
        inplace = x.copy()
        fm(inplace, y, out=inplace)
        same(inplace, ref(x, y))
        assert spy == [N, N]
        same(fm(x, 2.0), ref(x, 2.0))
        col, row = x[:1000, None], y[:1000]
        same(fm(col, row), ref(col, row))
        shifted = x.copy()
        fm(shifted[:-1], y[:-1], out=shifted[1:])
        want = x.copy()
        ref(want[:-1], y[:-1], out=want[1:])
        same(shifted, want)
    # the scalar and the broadcast pair (1000 x 1000: N elements too) were left to the
    # Python pool; the shifted out= ran on a copy of the overlapping operand, as NumPy's
    # buffering does
    assert spy == [N, N, N - 1]


def test_flags_raised_in_the_pool_reach_errstate(fresh, spy):
    # (the Python path's call, the first after this: the C fast path's are
    # tests/frontends/test_pipeline.py's)
    fastmath.exp._forget_lean()
    x = np.linspace(-800, 800, N)
    with fastmath.backend("numpy"), warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        got = fastmath.exp(x)
    assert spy
    assert [str(m.message) for m in w] == ["overflow encountered in exp"]
    with np.errstate(over="ignore"):
        same(got, np.exp(x))
    with fastmath.backend("numpy"), np.errstate(over="raise"), pytest.raises(FloatingPointError):
        fastmath.exp(x)


def test_layouts_the_pool_does_not_take_are_declined(fresh, spy):
    """What the front end hands over as it is (strided views, an out= overlapping its input
    other than exactly, a dtype NumPy would cast) is declined, for the Python pool's
    chunks of NumPy's own call; the front end's results stay NumPy's whatever it does."""
    from fastmath._registry import BY_NAME

    kernel = numpy_backend.NumpyBackend().kernel(BY_NAME["exp"])
    x = np.random.default_rng(2).standard_normal(2 * N)
    overlap = x.copy()
    assert kernel._compiled(x[::2], np.empty(N)) is None
    assert kernel._compiled(x[:N], np.empty(N, np.float32)) is None
    assert kernel._compiled(overlap[:N], overlap[1:N + 1]) is None
    assert kernel._compiled(x.astype(np.int64), np.empty(2 * N)) is None
    assert kernel._compiled(x[:N].reshape(1000, -1)[:, :500], np.empty((1000, 500))) is None
    assert not spy
    with fastmath.backend("numpy"):
        same(fastmath.exp(x[::2]), np.exp(x[::2]))
        fastmath.exp(overlap[:N], out=overlap[1:N + 1])
        want = x.copy()
        np.exp(want[:N], out=want[1:N + 1])
        same(overlap, want)


@pytest.fixture
def clocks():
    """The runtime's back-off on made-up clocks (wall, the caller's CPU time)."""
    if _parallel.threads() < 2:
        pytest.skip("one thread: nothing splits")
    wall, cpu = FakeClock(tick=1e-3), FakeClock()
    _runtime._set_clock(wall, cpu)
    before = _runtime.set_pacing(True)
    every = _runtime.set_cpu_every(1)  # every split reads the caller's CPU time
    # workers that never park between the calls: a split that woke a parked one is not
    # judged (its wake-up is no sign of a busy core), and these tests judge every split
    spin = _runtime.set_spin(0.5)
    yield wall, cpu
    _runtime._set_clock(None, None)
    _runtime.set_pacing(before)
    _runtime.set_cpu_every(every)
    _runtime.set_spin(spin)


def _splits_take_three_times_a_whole_call(wall, cpu):
    """Every call reads the wall clock twice (1 ms apart), and a split also reads the
    caller's CPU time twice, each reading moving the wall clock on by 1 ms: a whole call
    takes 1 ms, a split 3 ms, with no CPU time of the caller's."""
    cpu.tick = 0.0

    def cpu_reading():
        wall.advance(1e-3)
        return cpu()
    _runtime._set_clock(wall, cpu_reading)


def _kernel():
    from fastmath._registry import BY_NAME

    return numpy_backend.NumpyBackend().kernel(BY_NAME["exp"])  # its own pacing record


def test_a_size_whose_splits_lose_runs_in_one_piece(clocks):
    """A split slower than the calls of its size run whole lost: the next calls of that
    size run whole, for a pause that doubles while splits keep losing, while other sizes
    keep records of their own. Here a whole call takes 1 ms and a split 3 ms (the caller's
    two CPU-time readings move the wall clock on by 1 ms each)."""
    _splits_take_three_times_a_whole_call(*clocks)
    kernel = _kernel()
    x = np.random.default_rng(3).standard_normal(N)
    out = np.empty_like(x)
    want = np.exp(x)
    ways = ""
    for _ in range(30):
        assert kernel._compiled(x, out) == 0
        same(out, want)
        ways += _runtime.pace(kernel._pace, N)["last"][0]
    # The first split has no whole call to be compared with (nor, if the pool's thread
    # took every piece, a CPU time of the caller's): lost or not, the second call runs
    # whole, and the third, timed (the run right after a split is not kept: the output's
    # lines come back from the other cores). From then on the first split after a pause is
    # not judged (the lines move out again), the next loses, and the pauses double.
    assert ways[:3] == "sww", ways
    assert set(ways[3:].split("w")) == {"ss", ""}, ways
    pauses = [len(p) for p in ways[3:].split("ss")[1:-1]]
    assert len(pauses) >= 3 and all(b == 2 * a for a, b in zip(pauses, pauses[1:])), ways
    big = _runtime.pace(kernel._pace, 4 * N)
    assert big["left"] == 0 and big["kept"] == 0  # another size: its own record


def test_a_split_slower_than_the_calls_run_whole_lost(clocks):
    """The second call of a size runs whole and is timed; a later split slower than such
    calls lost even where the caller's CPU time for its pieces, scaled up, says it won
    (that reading runs high when the two threads slow each other)."""
    wall, cpu = clocks
    cpu.tick = 1.0  # "won", by CPU time
    kernel = _kernel()
    x = np.random.default_rng(6).standard_normal(N)
    out = np.empty_like(x)
    want = np.exp(x)
    kernel._compiled(x, out)  # split
    kernel._compiled(x, out)  # whole, not kept: right after a split
    kernel._compiled(x, out)  # whole, timed: 1 ms
    same(out, want)
    pace = _runtime.pace(kernel._pace, N)
    assert pace["kept"] == 1 and pace["left"] == 0 and pace["last"] == "whole"
    assert pace["one_thread"] == pytest.approx(1e-3, rel=1e-3)
    kernel._compiled(x, out)  # the split after a run kept whole: not judged (won, here)
    wall.tick = 2e-3  # a split twice as long as the call run whole: lost
    kernel._compiled(x, out)
    assert _runtime.pace(kernel._pace, N)["left"] == 1
    wall.tick = 1e-3
    kernel._compiled(x, out)  # paused: whole, not kept (right after a split)
    pace = _runtime.pace(kernel._pace, N)
    assert pace["left"] == 0 and pace["kept"] == 1 and pace["last"] == "whole"
    kernel._compiled(x, out)  # the change of way: not judged
    kernel._compiled(x, out)  # as long as a whole run: won
    same(out, want)
    pace = _runtime.pace(kernel._pace, N)
    assert pace["left"] == 0 and pace["skip"] == 1 and pace["last"] == "split"


def test_in_one_thread_nothing_is_split(fresh, spy):
    """Inside a task that is itself one part of a split computation (``serial``), the
    runtime runs NumPy's loop in the calling thread: no worker joins."""
    x = np.random.default_rng(5).standard_normal(N)
    token = _parallel.serial.set(True)
    joins = _runtime.stats()["joins"]
    try:
        with fastmath.backend("numpy"):
            same(fastmath.exp(x), np.exp(x))
    finally:
        _parallel.serial.reset(token)
    assert spy == [N] and _runtime.stats()["joins"] == joins


def test_scipys_ufuncs_never_run_on_the_compiled_pool(fresh, spy):
    """SciPy's loops may report their errors through Python (scipy.special.errstate),
    which the compiled pool's threads, running without the GIL, cannot do: the numpy
    backend splits them on the Python pool, as before."""
    import scipy.special

    x = np.random.default_rng(6).standard_normal(N)
    with fastmath.backend("numpy"):
        same(fastmath.erf(x), scipy.special.erf(x))
        same(fastmath.expit(x), scipy.special.expit(x))
    assert not spy


def test_one_split_in_eight_reads_the_callers_cpu_time(clocks):
    """Reading a thread's CPU clock is a system call (about 0.55 us on a VM, two a split):
    the first split of a kernel and length reads it, then one in eight."""
    wall, cpu = clocks
    cpu.tick = 1.0  # every split wins: as fast as a whole call, and the caller's CPU time
    _runtime.set_cpu_every(8)
    kernel = _kernel()
    x = np.random.default_rng(7).standard_normal(N // 2 + 1)  # a length of its own
    out = np.empty_like(x)
    reads = []
    for _ in range(40):
        before = cpu.reads
        kernel._compiled(x, out)
        reads.append(cpu.reads - before)
    same(out, np.exp(x))
    timed = [i for i, r in enumerate(reads) if r]
    assert all(reads[i] == 2 for i in timed), reads
    splits = [i for i in range(40) if i not in (1, 2)]  # the 2nd and 3rd calls run whole
    assert timed == [splits[k] for k in range(0, len(splits), 8)], reads


def test_a_split_that_woke_a_parked_worker_is_not_judged(clocks):
    """A worker parks once its spin runs out; waking it takes 30 us to over a millisecond on
    a VM, which says nothing about a busy core. Counting such a split a loss made every
    pause end in a longer one (the paused calls leave the workers time to park). Here
    workers park at once and every split is slower than the calls run whole: none is
    judged, so no call is kept whole beyond the timed samples."""
    _splits_take_three_times_a_whole_call(*clocks)
    _runtime.set_spin(0.0)
    _runtime.fixed_cost(1, 0)  # the pool started, then its workers parked (a spin begun
    for _ in range(200):       # before set_spin runs its old course)
        stats = _runtime.stats()
        if stats["parked"] == stats["workers"]:
            break
        time.sleep(0.01)
    kernel = _kernel()
    x = np.random.default_rng(8).standard_normal(N // 4 + 3)  # a length of its own
    out = np.empty_like(x)
    for _ in range(12):
        kernel._compiled(x, out)
        assert _runtime.pace(kernel._pace, x.size)["left"] == 0
    same(out, np.exp(x))
    _runtime.set_spin(0.5)  # the workers spin again: the same splits now lose
    for _ in range(200):  # woken (which takes up to a millisecond or more here), spinning
        _runtime.fixed_cost(1, 0)
        if _runtime.stats()["parked"] == 0:
            break
        time.sleep(0.01)
    kernel._compiled(x, out)
    assert _runtime.pace(kernel._pace, x.size)["left"] >= 1


def test_rest_parks_the_spinning_workers_at_once(fresh):
    """``rest()`` (what auto's learning calls before timing the reference) parks workers
    that spin for the next call, long before their spin would have run out; the next
    call wakes them and computes as ever."""
    before = _runtime.set_spin(1.0)
    try:
        for _ in range(200):  # the pool started and its workers spinning (a parked one
            _runtime.fixed_cost(1, 0)  # takes up to a millisecond or more to wake here)
            if _runtime.stats()["parked"] == 0:
                break
            time.sleep(0.01)
        assert _runtime.stats()["parked"] == 0
        start = time.monotonic()
        _runtime.rest()
        while _runtime.stats()["parked"] < _runtime.stats()["workers"]:
            assert time.monotonic() - start < 0.8, "still spinning: rest() did not park it"
            time.sleep(0.001)
        x = np.random.default_rng(9).standard_normal(N)
        out = np.empty_like(x)
        _kernel()._compiled(x, out)
        same(out, np.exp(x))
    finally:
        _runtime.set_spin(before)


def test_resume_ends_a_pause_and_keeps_the_next_one_doubled():
    pace = _runtime.new_pace()
    try:
        _runtime.judge(pace, N, 1.0, 0.0)  # a split that lost: the next call runs whole
        _runtime.judge(pace, N, 1.0, 0.0)  # and again: two
        before = _runtime.pace(pace, N)
        assert before["left"] == 2 and before["skip"] == 4
        _runtime.resume(pace, N)
        assert _runtime.pace(pace, N)["left"] == 0 and _runtime.pace(pace, N)["skip"] == 4
        assert _runtime.decide(pace, N) == _runtime.SPLIT
    finally:
        _runtime.free_pace(pace)


def test_no_flag_but_the_loops_reaches_the_caller(tmp_path):
    """The runtime's own bookkeeping (times per element, in floating point) once read
    fields a call that was not timed left unset: converting the garbage raised FE_INVALID
    in the caller, and ``exp`` of numbers in (0.1, 10) warned "invalid value" (seen with
    torch's calls in between, which left that garbage on the stack). Every call here must
    come back clean, pacing on, as ``auto`` runs them: a fresh interpreter, as a script
    runs, for the stack a script has."""
    pytest.importorskip("torch")
    if _parallel.threads() < 2:
        pytest.skip("one thread: nothing splits")
    import subprocess
    import sys
    import textwrap
    from pathlib import Path

    code = textwrap.dedent("""
        import warnings, numpy as np, fastmath, torch
        from fastmath.dispatch import _selection
        warnings.simplefilter("error")  # NumPy's default error state: warn
        x = np.random.default_rng(0).uniform(0.1, 10, 200_000)
        tx, to = torch.as_tensor(x), torch.empty(200_000, dtype=torch.float64)
        want = np.exp(x)
        assert [b for b, _ in _selection.plan(fastmath.exp._spec, "float64", x.size)] \\
            == ["numpy"]  # auto runs the numpy backend (calibration-defaults.json)
        for i in range(1000):
            torch.exp(tx, out=to)
            y = fastmath.exp(x)
            assert y.tobytes() == want.tobytes()
        print("clean")
    """)
    root = Path(__file__).parents[2]
    env = {**__import__("os").environ, "PYTHONPATH": str(root),
           "XDG_CACHE_HOME": str(tmp_path)}  # no calibration file: the built-in defaults
    for var in ("FASTMATH_BACKEND", "FASTMATH_CALIBRATION"):
        env.pop(var, None)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=120, cwd=root, env=env)
    assert r.stdout.split() == ["clean"], r.stderr[-1500:]


def test_unary_reads_its_arguments_as_they_are():
    """unary() reads its seven arguments without a parse (a parse was a tenth of a call on
    10^4 float32 elements): NumPy's integers count as ints, and each bad one gets an
    error naming it."""
    x = np.linspace(0.5, 1.0, 5000)
    kernel = numpy_backend.NumpyBackend().kernel(fastmath.exp._spec)
    loops, pace, _ = kernel.runtime_entry()
    out = np.empty_like(x)
    assert _runtime.unary(loops, x, out, np.int64(pace), 0, 0, np.intp(1)) == 0
    same(out, np.exp(x))
    with pytest.raises(TypeError, match="loops: tuple"):
        _runtime.unary(list(loops), x, out, pace, 0, 0, 1)
    with pytest.raises(TypeError, match="loops: tuple"):
        _runtime.unary(loops, x, out, pace, 0, 0)
    for k, name in [(3, "pace"), (4, "min_split"), (5, "piece"), (6, "threads")]:
        for bad in (-1, 1.5, 1 << 40):
            args = [loops, x, out, pace, 0, 0, 1]
            args[k] = bad
            with pytest.raises((ValueError, TypeError), match=name):
                _runtime.unary(*args)
    with pytest.raises(ValueError, match="new_pace"):
        _runtime.unary(loops, x, out, 10_000, 0, 0, 1)
    with pytest.raises(TypeError, match="capsule"):
        _runtime.unary(((1, 2),), x, out, pace, 0, 0, 1)


def test_the_runtimes_bookkeeping_raises_no_error_flag(fresh):
    """The runtime's bookkeeping (times per element in floating point) must leave no error
    flag behind it, split, whole or judged (it tests the flags now rather than reloading
    the whole FP environment on every call)."""
    import ctypes
    import ctypes.util
    import platform

    if platform.machine() not in ("x86_64", "AMD64"):
        pytest.skip("the flags' bits are x86's here")
    libm = ctypes.CDLL(ctypes.util.find_library("m") or "libm.so.6")
    x = np.linspace(0.5, 1.0, N)
    kernel = numpy_backend.NumpyBackend().kernel(fastmath.exp._spec)
    loops, pace, _ = kernel.runtime_entry()
    out = np.empty_like(x)
    _runtime.set_pacing(True)
    libm.feclearexcept(0x3D)
    for _ in range(80):  # splits, whole runs timed (one in SAMPLE), splits judged
        assert _runtime.unary(loops, x, out, pace, 0, 0, 2) == 0
        assert libm.fetestexcept(0x1D) == 0  # divide, overflow, underflow, invalid
    same(out, np.exp(x))
