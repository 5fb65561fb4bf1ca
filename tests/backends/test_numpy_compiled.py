"""The numpy backend's large unary calls on the compiled pool (``_Unary._compiled``:
NumPy's own loop on each chunk through ``fastmath.integrations._loops.foreach``) and their
back-off per call size (``_parallel.sized_contention``).

Oracle: NumPy's own call on the same input, bit for bit (the very loop runs on every
chunk), with NumPy's warnings and exceptions under ``np.errstate``.
"""
import warnings

import numpy as np
import pytest

import fastmath
from fastmath.backends import numpy as numpy_backend
from fastmath.dispatch import _parallel

from helpers import FakeClock

_loops = pytest.importorskip("fastmath.integrations._loops")
N = 1_000_000  # above the numpy backend's split size for exp and log


@pytest.fixture
def fresh(monkeypatch):
    if _parallel.threads() < 2:
        pytest.skip("one thread: nothing splits")
    monkeypatch.setattr(_parallel, "_sized", {})
    monkeypatch.setattr(_parallel.contention, "left", 0)


@pytest.fixture
def spy(monkeypatch):
    """The chunk lists the compiled pool ran."""
    seen = []
    real = _loops.foreach

    def foreach(loops, ins, *rest):
        result = real(loops, ins, *rest)
        if rest[0] is not None and len(result[1]) < len(ins):  # out= chunks taken (not
            # the one-element probe of each dtype's loop when a kernel first looks them up)
            seen.append(len(ins))
        return result
    numpy_backend._compiled_loops(np.exp)  # binds the module global
    monkeypatch.setattr(numpy_backend._loops, "foreach", foreach)
    return seen


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


def test_flags_raised_in_the_pool_reach_errstate(fresh, spy):
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
    assert kernel._compiled(x[::2], np.empty(N), 2) is None
    assert kernel._compiled(x[:N], np.empty(N, np.float32), 2) is None
    assert kernel._compiled(overlap[:N], overlap[1:N + 1], 2) is None
    assert kernel._compiled(x.astype(np.int64), np.empty(2 * N), 2) is None
    assert not spy
    with fastmath.backend("numpy"):
        same(fastmath.exp(x[::2]), np.exp(x[::2]))
        fastmath.exp(overlap[:N], out=overlap[1:N + 1])
        want = x.copy()
        np.exp(want[:N], out=want[1:N + 1])
        same(overlap, want)


@pytest.fixture
def clock(monkeypatch):
    """The back-off's wall clock, made up: each call reads it twice, so every call, split or
    whole, takes one tick (1 ms unless a test says otherwise)."""
    fake = FakeClock(tick=1e-3)
    monkeypatch.setattr(_parallel, "clock", fake)
    return fake


def test_a_size_whose_splits_lose_runs_in_one_piece(fresh, spy, clock, monkeypatch):
    """A split whose wall time exceeded its threads' CPU time lost: the next calls of
    that size run as NumPy's own call, while other sizes go on splitting."""
    x = np.random.default_rng(3).standard_normal(N)
    big = np.random.default_rng(4).standard_normal(4 * N)
    monkeypatch.setattr(numpy_backend._loops, "last_cpu", lambda: 1e-9)  # every split lost
    with fastmath.backend("numpy"):
        for _ in range(8):
            same(fastmath.exp(x), np.exp(x))
        assert len(spy) == 3  # split, paused 1, split, paused 2, split, paused 2 (of 4)
        pace = _parallel.sized_contention(x.nbytes)
        assert pace.left == 2 and pace.skip == 8
        same(fastmath.exp(big), np.exp(big))  # another size: its own record
        assert len(spy) == 4
    monkeypatch.setattr(numpy_backend._loops, "last_cpu", lambda: 1.0)  # splits win again,
    clock.tick = 0.5e-3  # in half the time of the calls that ran whole before
    with fastmath.backend("numpy"):
        for _ in range(3):
            fastmath.exp(x)
    assert pace.skip == 4 and len(spy) == 5  # paused 2 more, then a split that won


def test_a_split_slower_than_the_calls_run_whole_lost(fresh, spy, clock, monkeypatch):
    """The second call of a size runs whole and is timed; a later split slower than such
    calls lost even where the caller's CPU time for its chunks, scaled up, says it won
    (that reading runs high when the two threads slow each other)."""
    x = np.random.default_rng(6).standard_normal(N)
    monkeypatch.setattr(numpy_backend._loops, "last_cpu", lambda: 1.0)  # "won", by CPU time
    pace = _parallel.sized_contention(x.nbytes)
    with fastmath.backend("numpy"):
        same(fastmath.exp(x), np.exp(x))  # split
        same(fastmath.exp(x), np.exp(x))  # whole, timed
        assert len(spy) == 1 and len(pace.whole) == 1
        assert pace.one_thread(x.size) == pytest.approx(1e-3)  # its two readings apart
        clock.tick = 2e-3  # a split twice as long as the call run whole: lost
        same(fastmath.exp(x), np.exp(x))
        assert len(spy) == 2 and pace.left == 1
        same(fastmath.exp(x), np.exp(x))  # paused, and timed
        assert len(spy) == 2 and len(pace.whole) == 2
        assert pace.one_thread(x.size) == pytest.approx(2e-3)  # the median of 1 and 2 ms
        clock.tick = 1e-3  # half as long as that: the next split wins
        same(fastmath.exp(x), np.exp(x))
        assert len(spy) == 3 and pace.left == 0


def test_in_one_thread_nothing_is_split(fresh, spy):
    x = np.random.default_rng(5).standard_normal(N)
    token = _parallel.serial.set(True)
    try:
        with fastmath.backend("numpy"):
            same(fastmath.exp(x), np.exp(x))
    finally:
        _parallel.serial.reset(token)
    assert not spy


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
