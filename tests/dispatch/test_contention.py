"""The pool's back-off for compute-only calls: after a split call that took longer than
the CPU time of its chunks (``_parallel.run(adaptive=True)``), ``threads_now`` keeps the
next calls in one piece in the caller's thread, and splitting is tried again later."""
import threading

import numpy as np
import pytest

import fastmath
from fastmath._registry import BY_NAME
from fastmath.dispatch import _parallel

from helpers import FakeClock


@pytest.fixture(autouse=True)
def fresh(monkeypatch):
    if _parallel.threads() < 2:
        pytest.skip("one thread: nothing is ever split")
    monkeypatch.setattr(_parallel, "contention", _parallel._Contention())
    monkeypatch.setattr(_parallel, "own_contention", _parallel._OwnContention())


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


def test_a_losing_split_keeps_the_next_calls_in_one_thread(losing):
    assert _parallel.threads_now() == _parallel.threads()
    first = _parallel.run(paired_tasks(), adaptive=True)
    assert set(first) != {threading.current_thread().name}  # split: a helper took part
    skip = _parallel._Contention.FIRST
    assert [_parallel.threads_now() for _ in range(skip)] == [1] * skip
    assert _parallel.threads_now() == _parallel.threads()  # tried again...
    _parallel.run(paired_tasks(), adaptive=True)  # ...lost again: a longer pause
    assert [_parallel.threads_now() for _ in range(2 * skip)] == [1] * (2 * skip)
    assert _parallel.threads_now() == _parallel.threads()


def test_a_short_call_that_waited_for_a_helper_to_wake_is_not_a_loss():
    # erf on 10^5 float32: 0.14 ms of CPU; the caller ran most chunks while the helper woke
    c = _parallel.contention
    c.record(wall=0.15e-3, cpu=0.14e-3)
    assert c.left == 0 and _parallel.threads_now() == _parallel.threads()
    c.record(wall=4e-3, cpu=1e-3)  # a busy core: the helper's chunks waited milliseconds
    assert c.left == c.FIRST


def test_calls_that_wait_on_something_else_are_not_judged(losing):
    _parallel.run(paired_tasks(), adaptive=False)  # e.g. copies to a device
    assert _parallel.threads_now() == _parallel.threads()


def test_winning_splits_shorten_the_pauses_again():
    c = _parallel.contention
    c.record(wall=1.0, cpu=0.1)
    c.record(wall=1.0, cpu=0.1)
    assert c.skip == 4 * c.FIRST
    c.left = 0
    c.record(wall=0.6, cpu=1.0)  # two cores at work: wall about half the CPU time
    assert c.skip == 2 * c.FIRST and _parallel.threads_now() == _parallel.threads()
    c.record(wall=0.6, cpu=1.0)
    c.record(wall=0.6, cpu=1.0)
    assert c.skip == c.FIRST


# (exp's contiguous calls run on the native runtime, paced by its own policy:
# tests/backends/test_numpy_compiled.py)
@pytest.mark.parametrize("name", ["softmax", "logsumexp"])
def test_kernels_in_one_piece_give_the_same_results(name, monkeypatch):
    x = np.linspace(-5, 5, 3 * 10**6)
    with fastmath.backend("numpy"):
        split = getattr(fastmath, name)(x)
        with monkeypatch.context() as m:
            lose(m)
            _parallel.run(paired_tasks(), adaptive=True)
        pause = _parallel.contention.left
        whole = getattr(fastmath, name)(x)
    assert _parallel.contention.left == pause - 1  # it asked once, and ran in one piece
    np.testing.assert_array_equal(whole, split)


@pytest.mark.parametrize("axis", [None, -1, 0])
def test_logsumexp_gives_the_same_bits_on_one_thread_and_on_the_pool(axis, monkeypatch):
    # the back-off changes the thread count from call to call; the partial results must
    # be merged in one order regardless, or two equal calls would differ in the last bit
    x = np.asfortranarray(np.random.default_rng(1).uniform(0, 5, (500, 600)))[::-1]
    got = {}
    for threads in (1, 2, 3):
        monkeypatch.setattr(_parallel, "threads_now", lambda t=threads: t)
        with fastmath.backend("numpy"):
            got[threads] = fastmath.logsumexp(x, axis=axis)
    np.testing.assert_array_equal(got[1], got[2])
    np.testing.assert_array_equal(got[1], got[3])


# --- kernels on their library's own threads (torch's OpenMP) under auto -------------------

def _erf_chain(dtype="float64"):
    """auto's chain for erf at 10^5 elements, if torch-cpu's own threads lead it."""
    from fastmath.dispatch import _selection

    chain = _selection.plan(BY_NAME["erf"], dtype, 10**5)
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
def test_while_torchs_splits_lose_the_next_kernel_computes_the_same_bits(dtype, monkeypatch):
    (name, guarded), (after, then) = _erf_chain(dtype)[:2]
    assert (name, after) == ("torch-cpu", "mkl")
    own, nxt = Counted(guarded.kernel), Counted(then)
    k = _parallel.OwnThreads(own, guarded.splits, nxt)
    x = BY_NAME["erf"].sample(10**5, dtype, np.random.default_rng(1))[0]
    outs = [np.empty_like(x) for _ in range(3)]
    k.alone[x.size.bit_length()] = 1.0  # the next kernel already timed alone (slowly)
    c = _parallel.own_contention
    c.left = 1  # as a lost split of torch's leaves it
    k(x, outs[0])
    assert (own.calls, nxt.calls, c.left) == (0, 1, 0)
    # the pause is over: torch's threads again, the call timed (1 ms: faster than the
    # next kernel alone, and its CPU time says it won)
    monkeypatch.setattr(_parallel, "clock", FakeClock(tick=1e-3))
    monkeypatch.setattr(_parallel, "process_clock", FakeClock(tick=2e-3))
    k(x, outs[1])
    assert (own.calls, nxt.calls) == (1, 1)
    c.left = 1
    k(x[::2], outs[2][::2])  # a strided input mkl declines: torch computes it after all
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
    _erf_chain()
    c = _parallel.own_contention
    x = np.linspace(-3, 3, 10**5)
    out = np.empty_like(x)
    c.record(wall=4e-3, cpu=1e-3)  # a busy core held a part for milliseconds
    assert c.left == c.FIRST
    fastmath.erf(x, out=out)
    assert c.left == c.FIRST - 1 > 0


@pytest.mark.skipif(not hasattr(__import__("os"), "sched_setaffinity"), reason="Linux only")
def test_torch_calls_that_lose_to_a_busy_core_are_judged_lost():
    # two torch threads on one core: a split that cannot win, as with a busy core. Timed on
    # the real clocks, and still not the load's to decide: a process held to one core gets
    # at most as much CPU time as wall time, so each torch call (milliseconds) reads lost
    # by record's rule, and other processes on that core only lengthen its wall time.
    import subprocess
    import sys

    _erf_chain()
    code = (
        "import os; os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})\n"
        "import numpy as np, fastmath\n"
        "from fastmath.dispatch import _parallel\n"
        "x = np.linspace(-3, 3, 2 * 10**6)\n"
        "for _ in range(12): fastmath.erf(x)\n"
        "print(_parallel.own_contention.skip)\n")
    env = dict(__import__("os").environ, FASTMATH_NUM_THREADS="2")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=300, env=env)
    assert r.returncode == 0, r.stderr
    assert int(r.stdout.split()[-1]) > _parallel._OwnContention.FIRST


def test_a_torch_call_slower_than_the_next_kernel_alone_is_judged_lost(monkeypatch):
    """torch's threads waiting at the barrier for a preempted part spin (CPU time that
    looks like work): a call slower than the next kernel, timed alone on the first call of
    each size, lost all the same."""
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
    c = _parallel.own_contention
    k(x, out)
    assert ran == ["then"]  # the first call of this size: the next kernel, timed alone
    k(x, out)
    assert ran == ["then", "own"] and c.left == c.FIRST  # 2 ms against microseconds
    k(x, out)
    assert ran[-1] == "then" and c.left == c.FIRST - 1
    np.testing.assert_array_equal(out, x)
