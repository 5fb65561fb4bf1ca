"""The pool's back-off for compute-only calls: after a split call that took longer than
the CPU time of its chunks (``_parallel.run(adaptive=True)``), ``threads_now`` keeps the
next calls in one piece in the caller's thread, and splitting is tried again later."""
import threading
import time

import numpy as np
import pytest

import fastmath
from fastmath._registry import BY_NAME
from fastmath.dispatch import _parallel
from helpers import ulp_distance


@pytest.fixture(autouse=True)
def fresh(monkeypatch):
    if _parallel.threads() < 2:
        pytest.skip("one thread: nothing is ever split")
    monkeypatch.setattr(_parallel, "contention", _parallel._Contention())
    monkeypatch.setattr(_parallel, "own_contention", _parallel._Contention())


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


# --- kernels on their library's own threads (torch's OpenMP) under auto -------------------

def _ran_on(calls):
    """The backend that ran each of ``calls`` (fastmath's DEBUG log), in order."""
    import logging

    from fastmath.dispatch import _log

    ran = []

    class Probe(logging.Handler):
        def emit(self, record):
            if getattr(record, "ran_on", None) is not None:
                ran.append(record.ran_on)
    probe, old = Probe(logging.DEBUG), _log.logger.level
    _log.logger.addHandler(probe)
    _log.logger.setLevel(logging.DEBUG)
    _log.refresh()
    try:
        results = [call() for call in calls]
    finally:
        _log.logger.removeHandler(probe)
        _log.logger.setLevel(old)
        _log.refresh()
    return ran, results


def _torch_first_for_erf():
    from fastmath.dispatch import _selection

    chain = _selection.plan(BY_NAME["erf"], "float64", 10**5)
    if not chain or chain[0][0] != "torch-cpu" or len(chain) < 2:
        pytest.skip("auto does not run erf on torch-cpu first here")
    return chain[1][0]


def test_auto_skips_torchs_own_threads_while_splitting_is_losing():
    import scipy.special

    after = _torch_first_for_erf()
    x = np.linspace(-3, 3, 10**5)
    c = _parallel.own_contention
    c.left = 1  # as a lost split of torch's leaves it
    ran, results = _ran_on([lambda: fastmath.erf(x)])
    assert ran == [after]
    assert c.left == 0  # the pause is over
    ran, more = _ran_on([lambda: fastmath.erf(x)])
    assert ran == ["torch-cpu"]
    for r in results + more:  # within the erf row's float64 bound
        assert ulp_distance(r, scipy.special.erf(x)).max() <= BY_NAME["erf"].ulp[1]
    c.left = 1
    with fastmath.backend("torch-cpu"):  # the user's own choice stands
        assert _ran_on([lambda: fastmath.erf(x)])[0] == ["torch-cpu"]
    # below torch's grain its threads take no part: nothing to judge, nothing skipped
    assert _ran_on([lambda: fastmath.erf(x[:10**4])])[0] == ["torch-cpu"]


@pytest.mark.skipif(not hasattr(__import__("os"), "sched_setaffinity"), reason="Linux only")
def test_torch_calls_that_lose_to_a_busy_core_send_auto_elsewhere():
    # two torch threads on one core: a split that cannot win, as with a busy core
    import subprocess
    import sys

    _torch_first_for_erf()
    code = (
        "import os; os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})\n"
        "import logging, numpy as np, fastmath\n"
        "from fastmath.dispatch import _parallel\n"
        "ran = []\n"
        "class H(logging.Handler):\n"
        "    def emit(self, r): ran.append(getattr(r, 'ran_on', None))\n"
        "log = logging.getLogger('fastmath'); log.addHandler(H()); log.setLevel(10)\n"
        "x = np.linspace(-3, 3, 2 * 10**6)\n"
        "for _ in range(12): fastmath.erf(x)\n"
        "ran = [r for r in ran if r]\n"
        "print(ran.count('torch-cpu'), len(ran), _parallel.own_contention.skip)\n")
    env = dict(__import__("os").environ, FASTMATH_NUM_THREADS="2")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=300, env=env)
    assert r.returncode == 0, r.stderr
    on_torch, calls, skip = map(int, r.stdout.split()[-3:])
    assert calls == 12 and on_torch < 6 and skip > _parallel._Contention.FIRST
