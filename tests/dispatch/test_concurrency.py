"""Concurrent calls: threads and asyncio tasks, each in its own backend scope, get exactly
what the same call gets alone; the numpy backend's shared thread pool serves many caller
threads at once without deadlock or crossed outputs."""
import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import fastmath
from fastmath.dispatch import _config, _parallel
from fastmath._registry import ROWS

from helpers import BACKENDS

BIG = 300_000  # past every threading threshold
TIMEOUT = 120  # seconds: a deadlock fails the test instead of hanging CI


def _call(spec, x):
    fn = getattr(fastmath, spec.name)
    return fn(x, axis=-1) if spec.kind == "logsumexp" else fn(x)


def _inputs():
    rng = np.random.default_rng(0)
    big = rng.uniform(0.01, 5, BIG)
    return [big, big.reshape(600, 500)[:, ::2], rng.uniform(0.01, 5, 37),
            np.asfortranarray(big.reshape(500, 600))[::-1]]


def _jobs():
    return [(spec, b, i) for spec in ROWS if spec.kind in ("unary", "elementwise", "logsumexp")
            for b in BACKENDS for i in range(4)]


def _serial(jobs, xs):
    out = {}
    for spec, b, i in jobs:
        with fastmath.backend(b):
            out[spec.name, b, i] = _call(spec, xs[i])
    return out


def _same(a, b):
    assert np.asarray(a).dtype == np.asarray(b).dtype
    assert np.asarray(a).tobytes() == np.asarray(b).tobytes()


# the inputs lie outside arcsin's, arccos's and arccosh's domains, where NumPy itself warns
# (in the pool's threads too); these tests compare values, so NumPy's warning is expected
@pytest.mark.filterwarnings("ignore:invalid value encountered in arc:RuntimeWarning")
@pytest.mark.slow
def test_threads_with_different_backends_match_serial_calls():
    xs = _inputs()
    jobs = _jobs()
    expected = _serial(jobs, xs)

    def work(job):
        spec, b, i = job
        with fastmath.backend(b):
            r = _call(spec, xs[i])
            assert fastmath.get_backend() == b  # no other thread's scope leaks in
        return job, r

    with ThreadPoolExecutor(8) as pool:
        futures = [pool.submit(work, j) for j in jobs * 3]
        for f in futures:
            (spec, b, i), r = f.result(timeout=TIMEOUT)
            _same(r, expected[spec.name, b, i])
    for x, y in zip(xs, _inputs()):
        assert x.tobytes() == y.tobytes()


# the inputs lie outside arcsin's, arccos's and arccosh's domains, where NumPy itself warns
# (in the pool's threads too); these tests compare values, so NumPy's warning is expected
@pytest.mark.filterwarnings("ignore:invalid value encountered in arc:RuntimeWarning")
@pytest.mark.slow
def test_asyncio_tasks_keep_their_own_backend():
    xs = _inputs()
    jobs = _jobs()
    expected = _serial(jobs, xs)

    async def task(job):
        spec, b, i = job
        with fastmath.backend(b):
            await asyncio.sleep(0)  # let the other tasks enter their scopes
            assert fastmath.get_backend() == b
            r = _call(spec, xs[i])
            await asyncio.sleep(0)
            assert fastmath.get_backend() == b
        return r

    async def main():
        return await asyncio.gather(*(task(j) for j in jobs))

    for (spec, b, i), r in zip(jobs, asyncio.run(main())):
        _same(r, expected[spec.name, b, i])
    assert fastmath.get_backend() == "auto"


@pytest.mark.parametrize("threads", [2, 3, 8])
def test_shared_pool_under_many_callers(threads, monkeypatch):
    """8 callers share the numpy backend's pool; with more pool threads than cores the
    chunk counts differ per layout, so the pool is resized while other callers use it."""
    monkeypatch.setenv("FASTMATH_NUM_THREADS", str(threads))
    _config.reload()
    try:
        rng = np.random.default_rng(1)
        arrays = [rng.uniform(-3, 3, (n, 400_000 // n)) for n in (2, 3, 5, 400)]
        arrays += [a.T for a in arrays] + [a[:, ::2] for a in arrays]
        expected = [np.exp(a) for a in arrays]

        def work(k):
            a = arrays[k % len(arrays)]
            out = np.empty_like(a)
            with fastmath.backend("numpy"):
                r = fastmath.exp(a, out=out)
            return k, r

        with ThreadPoolExecutor(8) as pool:
            for f in [pool.submit(work, k) for k in range(64)]:
                k, r = f.result(timeout=TIMEOUT)
                _same(r, expected[k % len(arrays)])
    finally:
        monkeypatch.delenv("FASTMATH_NUM_THREADS")
        _config.reload()


def test_calls_during_patch():
    patch = getattr(fastmath, "patch", None)
    if patch is None:
        pytest.skip("fastmath.patch is not in this version")
    x = _inputs()[0]
    expected = {b: None for b in BACKENDS}
    for b in BACKENDS:
        with fastmath.backend(b):
            expected[b] = fastmath.exp(x)
    stop = threading.Event()
    errors = []

    def caller(b):
        while not stop.is_set():
            with fastmath.backend(b):
                r = np.exp(x)  # numpy's or, while patched, fastmath's
            if r.tobytes() != expected[b].tobytes() and r.tobytes() != np.exp(x).tobytes():
                errors.append(b)

    threads = [threading.Thread(target=caller, args=(b,)) for b in BACKENDS]
    for t in threads:
        t.start()
    try:
        for _ in range(20):
            with patch():
                pass
    finally:
        stop.set()
        for t in threads:
            t.join(TIMEOUT)
    assert not errors


def test_pool_is_not_left_running_work():
    # after every caller above returned, no chunk is still computing into an output
    import queue

    jobs = _parallel._jobs
    while jobs is not None:
        try:
            job = jobs.get_nowait()
        except queue.Empty:
            break
        assert job is None or job.tasks is None  # a finished call's leftover handoff
