"""The runtime's pacing for the splitters that run their own work: the Python pool
(``_parallel.plan``/``run``, for calls that run Python per chunk) and a library's own
threads under ``auto`` (``_parallel.OwnThreads``). A split that loses (slower than the
calls of its size run whole, or than the CPU time its tasks used) keeps the next calls of
that kernel and size whole, for a pause that doubles while splits keep losing; the same
records and rules as the native splitters' (tests/backends/test_numpy_compiled.py)."""
import threading

import numpy as np
import pytest

import fastmath
from fastmath._registry import BY_NAME
from fastmath.dispatch import _parallel, _runtime

from helpers import FakeClock

N = 10**5


@pytest.fixture(autouse=True)
def paced():
    if _parallel.threads() < 2:
        pytest.skip("one thread: nothing is ever split")
    before = _runtime.set_pacing(True)
    yield
    _runtime.set_pacing(before)


def lose(monkeypatch):
    """Clocks by which every split loses: a call takes a second, its tasks no CPU time."""
    monkeypatch.setattr(_parallel, "clock", FakeClock(tick=1.0))
    monkeypatch.setattr(_parallel, "thread_clock", FakeClock())
    monkeypatch.setattr(_parallel, "process_clock", FakeClock())


@pytest.fixture
def losing(monkeypatch):
    lose(monkeypatch)


def paired_tasks(n=4):
    """Tasks that each wait for a task in another thread (the timeout only guards against a
    hang): a split of them runs on at least two threads, however busy the cores are."""
    pair = threading.Barrier(2, timeout=60)

    def task():
        pair.wait()
        return threading.current_thread().name
    return [task] * n


def call(pace, n=N):
    """One call through the pool's pacing: split (paired tasks) or whole; its way."""
    plan = _parallel.plan(pace, n)
    if plan.parts < 2:
        plan.done()
        return "w"
    names = _parallel.run(paired_tasks(), plan)
    assert set(names) != {threading.current_thread().name}  # split: a helper took part
    plan.done()
    return "s"


def test_a_losing_split_keeps_the_next_calls_whole_for_doubling_pauses(losing):
    pace = _parallel.Pace()
    ways = "".join(call(pace) for _ in range(13))
    # the first split lost: a pause of one call, then a call run whole to time (the run
    # right after a split is not kept: the output's lines come back from the other cores
    # then). After each pause the first split is not judged (the lines move out again),
    # the next loses again, and the pause doubles.
    assert ways == "swwsswwsswwww", ways
    other = pace.stats(4 * N)  # another size: a record of its own
    assert other["left"] == 0 and other["kept"] == 0


def test_a_split_slower_than_the_calls_run_whole_lost(monkeypatch):
    """Where the tasks' CPU time says a split won (2 s of CPU in 1 s), one slower than the
    recent whole calls of its size (none take time on this clock) lost all the same."""
    clock = FakeClock()
    monkeypatch.setattr(_parallel, "clock", clock)
    monkeypatch.setattr(_parallel, "thread_clock", FakeClock(tick=1.0))
    pace = _parallel.Pace()
    plan = _parallel.plan(pace, N)
    assert plan.parts >= 2
    clock.advance(1.0)
    plan.cpu = 2.0
    plan.done()  # the first split: judged by CPU time alone, a win
    assert pace.stats(N)["left"] == 0
    assert call(pace) == "w"  # the second call runs whole: not kept, right after a split
    assert pace.stats(N)["kept"] == 0
    assert call(pace) == "w"  # the third too, timed: no time at all
    assert pace.stats(N)["kept"] == 1
    clock.tick = 1.0  # from now on a split takes a second (plan's reading to done()'s)
    assert call(pace) == "s"  # the first after a run kept whole: not counted lost
    assert pace.stats(N)["left"] == 0
    assert call(pace) == "s"
    assert pace.stats(N)["left"] == 1


def test_winning_splits_shorten_the_pauses_again(monkeypatch):
    clock = FakeClock()
    monkeypatch.setattr(_parallel, "clock", clock)
    pace = _parallel.Pace()
    ident = pace.id()
    for _ in range(3):
        _runtime.judge(ident, N, 1.0, 0.1)  # lost: a second of wall, 0.1 s of CPU
    assert pace.stats(N)["skip"] == 8
    _runtime.judge(ident, N, 0.6, 1.0)  # two cores at work: wall about half the CPU time
    assert pace.stats(N)["skip"] == 4


def _calls_to_a_sample(ident):
    """How many calls decide() splits before one runs whole, sampled."""
    for k in range(4096):
        if _runtime.decide(ident, N) == _runtime.WHOLE_SAMPLED:
            return k
    raise AssertionError("no call sampled")


def test_samples_grow_rarer_while_the_whole_runs_time_holds():
    """One call in 64 runs whole to keep the whole runs' time, each such sample two
    changes of way (the run right after a split is not kept); while what a sample keeps
    stays within an eighth of the record's time the next comes twice as late, up to one in
    512; a time that moved, or a split that lost, brings them back to one in 64."""
    ident = _runtime.new_pace()
    try:
        _runtime.kept(ident, N, 1e-3)
        gaps = []
        for ns in (1.05e-3, 0.95e-3, 1e-3, 1e-3, 1e-3, 1.5e-3):
            gaps.append(_calls_to_a_sample(ident))
            _runtime.kept(ident, N, ns)
        gaps.append(_calls_to_a_sample(ident))
        assert gaps == [64, 128, 256, 512, 512, 512, 64]
        _runtime.kept(ident, N, 1.5e-3)  # the record's time moves to 1.5 ms...
        _runtime.kept(ident, N, 1.5e-3)  # ... and holds: one in 128
        assert _runtime.pace(ident, N)["every"] == 128
        _runtime.judge(ident, N, 1e-3, -1.0, False, _runtime.CAME)  # the change of way
        _runtime.judge(ident, N, 5e-3, -1.0, False, _runtime.CAME)  # lost
        assert _runtime.pace(ident, N)["every"] == 64
    finally:
        _runtime.free_pace(ident)


def test_a_split_no_worker_came_to_is_judged_neither_way():
    """A split whose pool threads did not come ran whole in the caller: judged neither way.
    Where a running one should have come (ABSENT: none had to be woken, and the call was
    long enough for one to notice it), its core is taken, and the workers park at once for
    a while (test_threads.py): the next split wakes one, which takes the core back, and is
    judged. (Counted lost, such splits paused statsmodels' calls after each matrix product,
    OpenBLAS's thread spinning: Logit.fit 0.99x plain; counted won, they halved the pause
    while a busy core kept the worker away: log on 10^6 float64 elements split every third
    to fifth call, each 8% slower than a whole run.)"""
    ident = _runtime.new_pace()
    try:
        _runtime.kept(ident, N, 1e-3)  # whole runs take a millisecond
        _runtime.judge(ident, N, 0.5e-3, -1.0, False, _runtime.CAME)  # the change of way
        _runtime.judge(ident, N, 4e-3, -1.0, False, _runtime.CAME)  # lost: a pause of 1
        assert _runtime.pace(ident, N)["left"] == 1 and _runtime.pace(ident, N)["skip"] == 2
        _runtime.resume(ident, N)
        for wall in (0.5e-3, 5e-3):  # a win or a loss by the clock: neither
            _runtime.judge(ident, N, wall, -1.0, True, _runtime.UNSEEN)
            _runtime.judge(ident, N, wall, -1.0, False, _runtime.UNSEEN)
            _runtime.judge(ident, N, wall, -1.0, False, _runtime.ABSENT)
        assert _runtime.pace(ident, N)["left"] == 0 and _runtime.pace(ident, N)["skip"] == 2
        _runtime.judge(ident, N, 0.5e-3, -1.0, False, _runtime.CAME)  # came, and won
        assert _runtime.pace(ident, N)["skip"] == 1
        _runtime.judge(ident, N, 5e-3, -1.0, False, _runtime.CAME)  # came, and lost
        assert _runtime.pace(ident, N)["left"] == 1
        with pytest.raises(ValueError, match="came must be"):
            _runtime.judge(ident, N, 5e-3, -1.0, False, 7)
    finally:
        _runtime.free_pace(ident)


def test_a_slow_split_among_fast_ones_is_not_lost_a_run_of_them_is():
    """A split lost to the whole runs where it and the splits' moving average (an eighth
    each, a split counting at most three times the average) took longer than they do: a
    split's time has a long tail (exp on 10^4 float64, Intel Xeon: a quarter over the whole
    runs' time where the median is 0.7 of it), and judged one by one a fifth of such
    splits paused the calls."""
    ident = _runtime.new_pace()
    try:
        _runtime.kept(ident, N, 1e-3)  # whole runs take a millisecond
        for _ in range(9):  # the change of way (not judged), then splits of half that
            _runtime.judge(ident, N, 0.5e-3, -1.0, False, _runtime.CAME)
        lefts = []
        for _ in range(4):  # slow splits: the average 0.5 ms -> 0.625, 0.78, 0.98, 1.22
            _runtime.judge(ident, N, 5e-3, -1.0, False, _runtime.CAME)
            lefts.append(_runtime.pace(ident, N)["left"])
        assert lefts == [0, 0, 0, 1]
    finally:
        _runtime.free_pace(ident)


def test_a_worker_woken_on_purpose_is_judged_as_any():
    """A split that had to wake a parked worker is not counted lost (a wake-up, 30 us to
    over a millisecond on a VM, is no sign of a busy core), unless the runtime parked it
    on purpose (after a worker was shut out of its core): then the wake-up is the price
    it chose, and a loss pauses as any does."""
    ident = _runtime.new_pace()
    try:
        _runtime.kept(ident, N, 1e-3)
        _runtime.judge(ident, N, 5e-3, -1.0, True, _runtime.CAME)  # woke: not counted
        assert _runtime.pace(ident, N)["left"] == 0
        _runtime.judge(ident, N, 5e-3, -1.0, _runtime.WOKE_ON_PURPOSE, _runtime.CAME)
        assert _runtime.pace(ident, N)["left"] == 1 and _runtime.pace(ident, N)["skip"] == 2
        with pytest.raises(ValueError, match="woke must be"):
            _runtime.judge(ident, N, 5e-3, -1.0, 3, _runtime.CAME)
    finally:
        _runtime.free_pace(ident)


def test_calls_that_wait_on_something_else_are_not_judged(losing):
    pace = _parallel.Pace()
    plan = _parallel.plan(pace, N)
    _parallel.run(paired_tasks())  # no plan: e.g. copies to a device
    assert pace.stats(N)["left"] == 0
    del plan


def test_without_threads_to_spare_nothing_is_paced(monkeypatch):
    monkeypatch.setattr(_parallel, "threads", lambda: 1)
    plan = _parallel.plan(_parallel.Pace(), N)
    assert plan.parts == 1 and plan.pace is None


@pytest.mark.parametrize("name", ["softmax", "logsumexp"])
def test_kernels_whole_and_split_give_the_same_results(name, monkeypatch):
    x = np.linspace(-5, 5, 3 * 10**6)
    before = _runtime.set_pacing(False)  # every call splits
    try:
        with fastmath.backend("numpy"):
            split = getattr(fastmath, name)(x)
            with monkeypatch.context() as m:
                m.setattr(_parallel, "threads", lambda: 1)
                whole = getattr(fastmath, name)(x)
    finally:
        _runtime.set_pacing(before)
    np.testing.assert_array_equal(whole, split)


def test_a_paused_kernel_runs_whole(monkeypatch):
    """softmax over blocks while its pace says splits lose: the call runs in this thread."""
    from fastmath.backends import numpy as numpy_backend

    kernel = numpy_backend.NumpyBackend().kernel(BY_NAME["softmax"])
    x = np.random.default_rng(2).standard_normal((600, 500))
    out, want = np.empty_like(x), np.empty_like(x)
    kernel(x, (1,), want)
    _runtime.judge(kernel.paces[0].id(), x.size, 1.0, 0.0)  # a split that lost
    left = kernel.paces[0].stats(x.size)["left"]
    ran = []
    real = _parallel.run
    monkeypatch.setattr(_parallel, "run", lambda *a, **k: ran.append(1) or real(*a, **k))
    kernel(x, (1,), out)
    assert ran == [] and kernel.paces[0].stats(x.size)["left"] == left - 1
    np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("axis", [None, -1, 0])
def test_logsumexp_gives_the_same_bits_on_one_thread_and_on_the_pool(axis, monkeypatch):
    # the pacing changes the thread count from call to call; the partial results must
    # be merged in one order regardless, or two equal calls would differ in the last bit
    x = np.asfortranarray(np.random.default_rng(1).uniform(0, 5, (500, 600)))[::-1]
    got = {}
    before = _runtime.set_pacing(False)
    try:
        for threads in (1, 2, 3):
            monkeypatch.setattr(_parallel, "threads", lambda t=threads: t)
            with fastmath.backend("numpy"):
                got[threads] = fastmath.logsumexp(x, axis=axis)
    finally:
        _runtime.set_pacing(before)
    np.testing.assert_array_equal(got[1], got[2])
    np.testing.assert_array_equal(got[1], got[3])


# --- kernels on their library's own threads (torch's OpenMP) under auto -------------------

def _erf_chain(dtype="float64", n=N):
    """auto's chain for erf at n elements, if torch-cpu's own threads lead it."""
    from fastmath.dispatch import _selection

    chain = _selection.plan(BY_NAME["erf"], dtype, n)
    if not chain or not isinstance(chain[0][1], _parallel.OwnThreads):
        pytest.skip("auto does not run erf on torch-cpu's own threads first here")
    return chain


class Counted:
    """Counts the calls of a kernel it passes through (what ran, not a stand-in)."""

    def __init__(self, kernel):
        self.kernel, self.calls = kernel, 0

    def __call__(self, *args):
        self.calls += 1
        return self.kernel(*args)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_while_torchs_splits_lose_the_next_kernel_computes_the_same_bits(dtype):
    (name, guarded), (after, then) = _erf_chain(dtype)[:2]
    assert (name, after) == ("torch-cpu", "mkl")
    own, nxt = Counted(guarded.kernel), Counted(then)
    k = _parallel.OwnThreads(own, guarded.splits, nxt)
    x = BY_NAME["erf"].sample(N, dtype, np.random.default_rng(1))[0]
    outs = [np.empty_like(x) for _ in range(3)]
    ident = k.pace.id()
    _runtime.judge(ident, x.size, 1.0, 0.0)  # as a lost split of torch's leaves it
    k(x, outs[0])
    assert (own.calls, nxt.calls, k.pace.stats(x.size)["left"]) == (0, 1, 0)
    k(x, outs[1])  # the pause is over: torch's threads again
    assert (own.calls, nxt.calls) == (1, 1)
    half = x[::2]
    _runtime.judge(ident, half.size, 1.0, 0.0)
    k(half, outs[2][::2])  # a strided input mkl declines: torch computes it after all
    assert (own.calls, nxt.calls) == (2, 2)
    assert outs[0].tobytes() == outs[1].tobytes()
    assert outs[2][::2].tobytes() == outs[0][::2].tobytes()


def test_only_a_next_kernel_with_the_same_bits_takes_over():
    from fastmath.dispatch import _selection

    for spec in (BY_NAME["erf"], BY_NAME["sin"]):
        for dtype in ("float32", "float64"):
            for _, chain in _selection._build("auto", spec, dtype):
                for i, (name, k) in enumerate(chain):
                    if isinstance(k, _parallel.OwnThreads):
                        assert _selection._same_bits(k.kernel, k.then, spec, dtype)
                        assert k.then is chain[i + 1][1]


def test_a_losing_torch_call_pauses_torchs_threads():
    k = _erf_chain()[0][1]
    x = np.linspace(-3, 3, N)
    out = np.empty_like(x)
    _runtime.judge(k.pace.id(), N, 4e-3, 1e-3)  # a busy core held a part for milliseconds
    left = k.pace.stats(N)["left"]
    assert left >= 1
    fastmath.erf(x, out=out)
    assert k.pace.stats(N)["left"] == left - 1


def test_a_torch_call_slower_than_the_next_kernel_alone_is_judged_lost(monkeypatch):
    """torch's threads waiting at the barrier for a preempted part spin (CPU time that
    looks like work): a call slower than the next kernel's whole runs lost all the same."""
    ran = []
    clock, cpu = FakeClock(), FakeClock()  # time passes only where a kernel below says so
    monkeypatch.setattr(_parallel, "clock", clock)
    monkeypatch.setattr(_parallel, "process_clock", cpu)

    def own(x, out):  # stands for torch's split held up by a busy core
        clock.advance(0.002)
        cpu.advance(0.004)  # two threads busy all along: by CPU time alone, a win
        np.copyto(out, x)
        ran.append("own")
        return 0

    def then(x, out):
        np.copyto(out, x)
        ran.append("then")
        return 0

    k = _parallel.OwnThreads(own, lambda n: True, then)
    x, out = np.arange(1000.0), np.empty(1000)
    for _ in range(6):
        k(x, out)
    # the first split has nothing to be compared with but its CPU time (a win); the second
    # call runs the next kernel (not kept: right after a split), the third too, timed; the
    # next split is the change of way, not judged; the one after is slower than the next
    # kernel: lost, paused
    assert ran == ["own", "then", "then", "own", "own", "then"]
    assert k.pace.stats(x.size)["skip"] == 2


def test_pacing_records_of_kernels_made_again_and_again_are_reused():
    """A record goes back to the runtime with its owner: a program (or a test suite) that
    rebuilds its kernels, as every configuration reload does, never runs out of them (there
    are 4096 at a time)."""
    from fastmath.backends import numpy as numpy_backend

    for _ in range(5000):
        _parallel.Pace().id()  # each given back at once
    for _ in range(5000):  # the numpy backend's kernels (and NumPy's loops' check)
        kernel = numpy_backend.NumpyBackend().kernel(BY_NAME["exp"])
        assert kernel._compiled(np.ones(4), np.empty(4)) == 0
    used = _parallel.Pace()
    _runtime.kept(used.id(), N, 1e-3)
    ident = used.id()
    del used
    again = _parallel.Pace()
    assert again.id() == ident and again.stats(N)["kept"] == 0  # reused, and cleared


def test_a_split_begun_beside_another_librarys_spin_is_not_judged():
    """Another library's threads spin a while after their own call (torch's OpenMP
    workers, which announce it: foreign()). A split begun meanwhile lost for want of
    cores, not for its kernel or the machine: it pauses nothing; once the spin is over,
    the same loss pauses the next calls."""
    wall = FakeClock()  # the runtime's clocks, moved by the test alone
    _runtime._set_clock(wall, FakeClock())
    ident = _runtime.new_pace()
    try:
        _runtime.foreign(0.5)
        _runtime.judge(ident, N, 1e-3, 1e-4)  # begun before: that library's own next call
        assert _runtime.pace(ident, N)["left"] == 1
        _runtime.resume(ident, N)
        wall.advance(2e-3)
        _runtime.judge(ident, N, 1e-3, 1e-4)  # lost: ten times one thread's time
        assert _runtime.pace(ident, N)["left"] == 0
        wall.advance(1.0)  # the spin is over
        _runtime.judge(ident, N, 1e-3, 1e-4)
        assert _runtime.pace(ident, N)["left"] == 2  # the pause doubled after the first loss
    finally:
        _runtime.foreign(0)  # (an empty spin on these clocks: none left for later tests)
        _runtime._set_clock(None, None)
    _runtime.free_pace(ident)
