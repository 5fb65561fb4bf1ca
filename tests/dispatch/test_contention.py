"""The pool's back-off for compute-only calls: after a split call that took longer than
the CPU time of its chunks (``_parallel.run(adaptive=True)``), ``threads_now`` keeps the
next calls in one piece in the caller's thread, and splitting is tried again later."""
import threading
import time

import numpy as np
import pytest

import fastmath
from fastmath.dispatch import _parallel


@pytest.fixture(autouse=True)
def fresh(monkeypatch):
    if _parallel.threads() < 2:
        pytest.skip("one thread: nothing is ever split")
    monkeypatch.setattr(_parallel, "contention", _parallel._Contention())


def waiting_tasks(n=4, seconds=0.01):
    """Tasks that take wall time but almost no CPU: a split of them always loses."""
    def task():
        time.sleep(seconds)
        return threading.current_thread().name
    return [task] * n


def test_a_losing_split_keeps_the_next_calls_in_one_thread():
    assert _parallel.threads_now() == _parallel.threads()
    first = _parallel.run(waiting_tasks(), adaptive=True)
    assert set(first) != {threading.current_thread().name}  # split: a helper took part
    skip = _parallel._Contention.FIRST
    assert [_parallel.threads_now() for _ in range(skip)] == [1] * skip
    assert _parallel.threads_now() == _parallel.threads()  # tried again...
    _parallel.run(waiting_tasks(), adaptive=True)  # ...lost again: a longer pause
    assert [_parallel.threads_now() for _ in range(2 * skip)] == [1] * (2 * skip)
    assert _parallel.threads_now() == _parallel.threads()


def test_a_short_call_that_waited_for_a_helper_to_wake_is_not_a_loss():
    # erf on 10^5 float32: 0.14 ms of CPU; the caller ran most chunks while the helper woke
    c = _parallel.contention
    c.record(wall=0.15e-3, cpu=0.14e-3)
    assert c.left == 0 and _parallel.threads_now() == _parallel.threads()
    c.record(wall=4e-3, cpu=1e-3)  # a busy core: the helper's chunks waited milliseconds
    assert c.left == c.FIRST


def test_calls_that_wait_on_something_else_are_not_judged():
    _parallel.run(waiting_tasks(), adaptive=False)  # e.g. copies to a device
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


@pytest.mark.parametrize("name", ["exp", "softmax", "logsumexp"])
def test_kernels_in_one_piece_give_the_same_results(name):
    x = np.linspace(-5, 5, 3 * 10**6)
    with fastmath.backend("numpy"):
        split = getattr(fastmath, name)(x)
        _parallel.run(waiting_tasks(), adaptive=True)
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
