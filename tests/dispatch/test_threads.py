"""The native runtime's thread budget: FASTMATH_NUM_THREADS, else OMP_NUM_THREADS, else the
cores this process may use; threadpoolctl sees the runtime and limits it.

Oracle: the conventions of OpenMP (OMP_NUM_THREADS, its first level), and threadpoolctl's
own behaviour for the libraries it knows (threadpool_info lists them, threadpool_limits
sets a limit for the block and restores it after).
"""
import contextlib
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

import fastmath
from fastmath.dispatch import _config

_runtime = pytest.importorskip("fastmath.dispatch._runtime")
ROOT = Path(__file__).parents[2]


@pytest.mark.parametrize("env, want", [
    ({"OMP_NUM_THREADS": "3"}, 3),
    ({"OMP_NUM_THREADS": "3,2"}, 3),  # nested levels: the first is the outer region's
    ({"OMP_NUM_THREADS": "3", "FASTMATH_NUM_THREADS": "5"}, 5),  # fastmath's own wins
    ({"OMP_NUM_THREADS": "zero"}, _config.default_threads()),  # OpenMP's to complain of
    ({"OMP_NUM_THREADS": ""}, _config.default_threads()),
])
def test_the_budget_follows_the_ecosystems_variables(env, want):
    cfg = _config.read(env)
    assert cfg.num_threads == want


def test_a_bad_fastmath_value_falls_back_to_omps():
    with pytest.warns(_config.ConfigWarning, match=r"using 2 \(OMP_NUM_THREADS\)"):
        cfg = _config.read({"OMP_NUM_THREADS": "2", "FASTMATH_NUM_THREADS": "many"})
    assert cfg.num_threads == 2


def _child(code, **env):
    full = dict(os.environ, PYTHONPATH=str(ROOT), **env)
    for var in ("FASTMATH_NUM_THREADS", "OMP_NUM_THREADS"):
        if var not in env:
            full.pop(var, None)
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                       text=True, timeout=120, env=full, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-2000:]
    return r.stdout.split()


def test_omp_num_threads_limits_the_runtime_and_info_says_so():
    out = _child("""
        import fastmath
        from fastmath.dispatch import _runtime
        s = fastmath.info()["settings"]["threads"]
        print(_runtime.threads(), s["value"], s["source"])
    """, OMP_NUM_THREADS="1")
    assert out == ["1", "1", "OMP_NUM_THREADS=1"]


@pytest.mark.parametrize("first", ["fastmath", "threadpoolctl"])
def test_threadpoolctl_sees_the_runtime_whichever_is_imported_first(first):
    pytest.importorskip("threadpoolctl")
    other = "threadpoolctl" if first == "fastmath" else "fastmath"
    out = _child(f"""
        import {first}, {other}
        from fastmath.dispatch import _runtime
        from threadpoolctl import threadpool_info, threadpool_limits
        found = [i for i in threadpool_info() if i["user_api"] == "fastmath"]
        print(len(found), found[0]["num_threads"], found[0]["version"])
        with threadpool_limits(1):
            print(_runtime.threads())
        print(_runtime.threads())
    """, FASTMATH_NUM_THREADS="2")
    assert out == ["1", "2", fastmath.fastmath_version, "1", "2"]


def test_under_threadpool_limits_a_call_runs_in_the_callers_thread():
    threadpoolctl = pytest.importorskip("threadpoolctl")
    if _runtime.threads() < 2:
        pytest.skip("one thread: nothing splits")
    x = np.random.default_rng(0).standard_normal(2_000_000)
    before = _runtime.set_pacing(False)  # every call that may split does
    try:
        with fastmath.backend("numpy"):
            fastmath.exp(x)
            joins = _runtime.stats()["joins"]
            with threadpoolctl.threadpool_limits(1, user_api="fastmath"):
                got = fastmath.exp(x)
            assert _runtime.stats()["joins"] == joins
            for _ in range(50):  # (a parked worker may wake too late for one call, loaded)
                fastmath.exp(x)
                if _runtime.stats()["joins"] > joins:
                    break
            assert _runtime.stats()["joins"] > joins  # the limit is gone after the block
    finally:
        _runtime.set_pacing(before)
    assert got.tobytes() == np.exp(x).tobytes()


@contextlib.contextmanager
def _pieces(body, threads):
    """Calls of the runtime's vml() over 2^16 elements, in pieces that run ``body()`` (a
    ctypes function in a VML entry point's signature), pacing off, on ``threads``
    threads: yields the call."""
    import ctypes

    @ctypes.CFUNCTYPE(None, ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)
    def piece(n, a, r, mode):
        body()
    address = ctypes.cast(piece, ctypes.c_void_p).value
    x = np.ones(1 << 16)
    out = np.empty_like(x)
    pace = _runtime.new_pace()
    before, pacing = _runtime.threads(), _runtime.set_pacing(False)
    try:
        _runtime.set_threads(threads)
        yield lambda: _runtime.vml(address, (x,), out, 0, pace, 0, 0, False)
    finally:
        _runtime.set_threads(before)
        _runtime.set_pacing(pacing)


def test_a_call_uses_no_more_threads_than_its_limit():
    """Workers started for a larger limit stay out of a call made under a smaller one
    (the limit lowered by set_threads, FASTMATH_NUM_THREADS or threadpoolctl): every
    spinning worker once joined every call. The call's pieces here record their thread
    and sleep 2 ms, so that every worker has time to come."""
    import threading
    import time

    seen = set()

    def piece():
        seen.add(threading.get_ident())
        time.sleep(0.002)
    with _pieces(piece, 3) as call:
        for _ in range(20):  # until three threads took pieces (one may wake late)
            seen.clear()
            call()
            if len(seen) == 3:
                break
        if len(seen) < 3:
            pytest.skip("three threads never ran at once here")
        _runtime.set_threads(2)
        for _ in range(10):
            seen.clear()
            call()
            assert len(seen) <= 2


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="thread names: Linux")
def test_the_pools_workers_are_named_for_top_and_ps():
    """Workers show as fastmath-1, fastmath-2, ... in top -H, ps -L and py-spy (each
    thread's comm): a user who sees CPU spent can tell whose threads spend it."""
    import threading
    import time

    seen = set()

    def piece():
        seen.add(threading.get_native_id())
        time.sleep(0.002)
    with _pieces(piece, 2) as call:
        for _ in range(20):
            call()
            if len(seen) == 2:
                break
    me = threading.get_native_id()
    if seen == {me}:
        pytest.skip("no worker took a piece here")
    names = {Path(f"/proc/self/task/{t}/comm").read_text().strip() for t in seen - {me}}
    assert len(names) == len(seen - {me})
    assert all(n.startswith("fastmath-") and n[9:].isdigit() for n in names), names


@pytest.mark.parametrize("way", ["numpy backend", "loop mode"])
def test_calls_from_several_threads_run_whole_beside_each_other(way):
    """A call that finds the pool busy with another thread's call runs whole in its own
    thread, and from then on, while threads of the program keep calling together, no call
    splits over the pool beyond the cores their calls leave (here: none, two threads of
    two): each thread computes on its own core, as NumPy's calls from several threads do.
    Splitting beside them took the other caller's core (two threads each calling np.exp
    on 10^4 float64 under the loop mode: 0.85x as fast as NumPy's two). Once the span
    ends, calls split again."""
    import threading

    inside, done = threading.Event(), threading.Event()

    def piece():
        inside.set()
        time.sleep(0.002)
    x = np.random.default_rng(7).random(200_000)
    if way == "loop mode":
        from fastmath.integrations import _loopmode
        if not _loopmode.available():
            pytest.skip(_loopmode.why_unavailable())
        mode = fastmath.patch(mode="loops")
        exp = np.exp  # (NumPy's own, its loop replaced while the mode is on)
    else:
        mode, exp = fastmath.backend("numpy"), fastmath.exp
    before = _runtime.set_shared(60.0)  # a span long enough for a loaded machine
    try:
        with mode, _pieces(piece, 2) as call:
            other = threading.Thread(target=lambda: (call(), done.set()))
            other.start()
            assert inside.wait(10)
            found_busy = exp(x)  # the other thread's call holds the pool
            overlapped = not done.is_set()
            other.join()
        if not overlapped:
            pytest.skip("the other thread's call ended before this one did")
        stats = _runtime.stats()
        assert stats["shared"] > 0
        assert stats["shared_callers"] == 1
        joins, kept = stats["joins"], stats["kept_shared"]
        with mode:
            beside = [exp(x) for _ in range(20)]
        stats = _runtime.stats()
        assert stats["joins"] == joins  # nothing split
        assert stats["kept_shared"] >= kept + 20
        _runtime.set_shared(0.0)  # the span ends: calls split again
        with mode:
            for _ in range(50):  # (a parked worker may wake too late for one call)
                after = exp(x)
                if _runtime.stats()["joins"] > joins:
                    break
        assert _runtime.stats()["joins"] > joins
    finally:
        _runtime.set_shared(before)
    want = np.exp(x).tobytes()
    assert all(y.tobytes() == want for y in [found_busy, after, *beside])


def test_set_shared_checks_its_argument():
    with pytest.raises(ValueError, match="from 0 to 3600"):
        _runtime.set_shared(-1.0)
    before = _runtime.set_shared(0.02)
    assert _runtime.set_shared(before) == pytest.approx(0.02)


def test_a_split_whose_worker_took_few_pieces_counts_as_short_of_threads():
    """late() counts the caller's splits in which the pool's threads took under half their
    share of the pieces (auto's learning does not count such calls: on a VM, after the
    process slept, a worker woken on the other vCPU waited runnable for 8-20 ms). The
    pieces here sleep 1 ms on the pool's threads, 50 us on the caller's (it then takes
    almost every piece), or 200 us on both."""
    import threading
    import time

    caller = threading.get_ident()
    slow_pool = [True]
    took = []

    def piece():
        mine = threading.get_ident() == caller
        took.append(mine)
        time.sleep(0.0002 if not slow_pool[0] else 0.00005 if mine else 0.001)
    with _pieces(piece, 2) as call:
        calls = []  # (counted short, the worker's share of pieces)
        for slow, most in ((True, 10), (False, 60)):
            slow_pool[0] = slow
            for _ in range(most):
                took.clear()
                late, wakes = _runtime.late(), _runtime.stats()["wakes"]
                call()
                if _runtime.stats()["wakes"] == wakes:  # (a parked worker woke: its call
                    # counts as begun short of threads, whatever share it then took)
                    calls.append((_runtime.late() - late, took.count(False) / len(took)))
                if not slow and sum(share >= 1 / 3 for _, share in calls) >= 8:
                    break  # (on a loaded machine the worker often runs beside it late)
    # (the worker's share, not the phase, decides: the caller descheduled for a while
    # lets even the slow worker take its quarter)
    few = [late for late, share in calls if share < 1 / 4]
    fair = [late for late, share in calls if share >= 1 / 3]
    if len(few) < 5 or len(fair) < 5:
        pytest.skip("the pool's thread seldom ran beside the caller here")
    assert few == [1] * len(few)  # every split short of threads counted once
    assert fair == [0] * len(fair)  # none where it took its share


@pytest.mark.parametrize("first, own", [("fastmath", None), ("fastmath", "26"), ("numpy", None)])
def test_openblas_threads_sleep_soon_after_a_call(first, own):
    """OpenBLAS keeps its threads spinning 2^28 cycles (about 0.1 s) after each threaded
    call, without yielding their cores: an elementwise call split right after a matrix
    product shared its second core with one (scikit-learn's MLPClassifier.predict_proba
    under the loop mode, 1.11x plain; 1.48x with 2^24). fastmath, imported before NumPy,
    sets OPENBLAS_THREAD_TIMEOUT=24 where the user has not set it; a user's own setting is
    kept, and info() says which it is (after NumPy, it is too late to change)."""
    code = f"""
        import os, time
        import {first}
        import numpy as np, fastmath
        from threadpoolctl import threadpool_info
        threads = max([p["num_threads"] for p in threadpool_info()
                       if p["internal_api"] == "openblas"] or [1])
        a = np.random.default_rng(0).standard_normal((800, 800))
        for _ in range(3):
            a @ a
        time.sleep(0.02)
        cpu = time.process_time()
        time.sleep(0.08)
        asleep = time.process_time() - cpu
        spin = fastmath.info()["openblas_spin"]
        print(os.environ.get("OPENBLAS_THREAD_TIMEOUT"), threads, asleep, spin["value"],
              "|", spin["source"])
    """
    env = {} if own is None else {"OPENBLAS_THREAD_TIMEOUT": own}
    full = dict(os.environ, PYTHONPATH=str(ROOT), **env)
    if own is None:
        full.pop("OPENBLAS_THREAD_TIMEOUT", None)
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                       text=True, timeout=120, env=full, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-2000:]
    words, source = r.stdout.split("|")
    setting, threads, asleep, shown = words.split()
    if first == "numpy":
        assert setting == shown == "None" and "NumPy was imported before" in source
        return
    assert setting == shown == (own or fastmath._OPENBLAS_THREAD_TIMEOUT)
    assert source.strip() == ("environment" if own else
                              "set by fastmath before NumPy loaded OpenBLAS")
    if own is None and int(threads) > 1:
        assert float(asleep) < 0.04  # 0.06-0.08 s with OpenBLAS's own 2^28 cycles


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs")
def test_a_worker_that_joins_on_its_callers_cpu_moves_off_it():
    """The scheduler now and then wakes a worker on its caller's CPU, and there it stays:
    on a 2-vCPU VM, after pauses of 10 ms between bursts of calls, every split of a burst
    then ran at one core's speed or slower (exp of 10^5 float64 on the numpy backend: the
    same time as NumPy's, 1.55x with the worker elsewhere). A worker that joins a call on
    its caller's CPU moves to another CPU it may use, and may then run anywhere again.
    Here the caller is held on one CPU and its worker put beside it (its affinity then
    widened again, as a running thread it stays) before each call; the kernel's load
    balancer may move it first, so some tries find nothing to do: tries go on until one
    moved (15 at most)."""
    code = """
        import os
        import numpy as np, fastmath
        from fastmath.dispatch import _runtime as R
        cpus = set(os.sched_getaffinity(0))
        c = min(cpus)
        R.set_spin(1.0)  # between calls the worker spins (yielding), so it can be placed
        R.set_pacing(False)
        x = np.linspace(0, 1, 4_000_000)
        out = np.empty_like(x)
        with fastmath.backend("numpy"):
            fastmath.exp(x, out=out)  # the pool starts
            workers = [int(t) for t in os.listdir("/proc/self/task") if int(t) != os.getpid()]
            os.sched_setaffinity(0, {c})  # this thread, the caller
            def cpu_of(tid):
                with open(f"/proc/self/task/{tid}/stat") as f:
                    return int(f.read().rsplit(")", 1)[1].split()[36])
            def migrations(tid):  # None where the kernel does not say
                try:
                    with open(f"/proc/self/task/{tid}/sched") as f:
                        for line in f:
                            if line.startswith("se.nr_migrations"):
                                return int(line.split(":")[1])
                except OSError:
                    pass
                return None
            moved = tried = 0
            for _ in range(5000):  # (mostly the balancer has moved it first: no call then)
                if moved or tried >= 15:
                    break
                for w in workers:
                    os.sched_setaffinity(w, {c})
                    os.sched_setaffinity(w, cpus)
                if any(cpu_of(w) != c for w in workers):
                    continue  # moved by the kernel already
                tried += 1
                before, went = R.stats()["moves"], [migrations(w) for w in workers]
                fastmath.exp(x, out=out)
                assert np.array_equal(out, np.exp(x))
                if R.stats()["moves"] > before:
                    moved += 1
                    # it left the CPU (where it is now says nothing: its affinity is given
                    # back at once, and a busy machine may put it beside its caller again)
                    after = [migrations(w) for w in workers]
                    assert all(a is None or a > b for a, b in zip(after, went))
                    assert os.sched_getaffinity(workers[0]) == cpus  # its affinity given back
        print(len(workers), tried, moved)
    """
    env = dict(os.environ, PYTHONPATH=str(ROOT), OPENBLAS_NUM_THREADS="1",
               FASTMATH_NUM_THREADS="2")
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                       text=True, timeout=120, env=env, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-2000:]
    workers, tried, moved = map(int, r.stdout.split())
    assert workers == 1, r.stdout
    if not moved and tried < 15:
        # a try only finds the worker on its caller's CPU as the call begins; on a 2-vCPU
        # VM about 4 in 10 then joined there (the rest were moved by the kernel first)
        pytest.skip(f"the kernel moved the worker off its caller's CPU first ({tried} tries)")
    assert moved > 0, r.stdout


_SHUT_OUT = """
    import os, sys
    import numpy as np, fastmath
    from fastmath.dispatch import _runtime as R
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})  # the worker can't run beside
    R.set_threads(2)
    R.set_spin(0.5)  # without the shut-out a worker spins through all the calls below
    R.set_shut_out(float(sys.argv[1]))
    x = np.random.default_rng(0).uniform(1, 2, 200_000)
    with fastmath.backend("numpy"):
        fastmath.exp(x)  # the pool starts
        R.trace(True)
        for _ in range(200):
            assert np.array_equal(fastmath.exp(x), np.exp(x))
        events = R.trace(False)
    splits = [e for e in events if e[0] == 1]  # (kind, at, n, wall, alone, whole, woke, came..)
    absent = sum(e[7] == R.ABSENT for e in splits)
    print(absent, sum(e[6] == R.WOKE_ON_PURPOSE for e in splits), len(splits))
"""


def _counts(code, *args):
    """The integers a subprocess running ``code`` with ``args`` prints (one BLAS thread)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), OPENBLAS_NUM_THREADS="1")
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(code), *map(str, args)],
                       capture_output=True, text=True, timeout=120, env=env, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-2000:]
    return tuple(map(int, r.stdout.split()))


def _shut_out(seconds):
    return _counts(_SHUT_OUT, seconds)


def test_a_worker_shut_out_of_its_core_parks_so_that_the_next_split_wakes_it():
    """A worker spinning beside a thread that does not yield its core (OpenBLAS's spin for
    2^24 cycles after a matrix product; here the caller itself, on the one CPU the process
    may use) misses the split (ABSENT). A woken thread takes a core back at once where a
    spinning one waits out a time slice: so for 20 ms after such a split the workers park
    as soon as a call is done (once the worker runs to see it), and the splits then wake
    one, on purpose (judged as any). statsmodels Logit.fit, quiet, Intel Xeon: 0.99x
    plain before, 1.04-1.05x after. (Here 1.4 ms apart, 200 calls: 20 absent, then 104
    woken on purpose; without it 162 absent, none woken.)"""
    absent, on_purpose, splits = _shut_out(0.02)
    assert 0 < absent <= on_purpose, (absent, on_purpose, splits)
    absent_off, on_purpose, splits = _shut_out(0.0)  # off: the worker keeps spinning
    assert absent_off > absent and on_purpose == 0, (absent_off, on_purpose, splits)


_YIELD = """
    import os, subprocess, sys, threading, time
    import numpy as np, fastmath
    from fastmath.dispatch import _runtime as R
    cpu = min(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {cpu})  # the worker can't run beside its caller: shut out
    spinner, foreign = sys.argv[1] == "1", sys.argv[2] == "1"
    others, share, free = float(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5])
    R.set_threads(2)
    R.set_spin(0.5)
    R.set_yield(0.3, others=others, foreign=0.05, share=share, free=free)
    busy = None
    if spinner:  # another process, busy on that CPU
        busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
        os.sched_setaffinity(busy.pid, {cpu})
    stop = threading.Event()
    def work():  # another thread of this process that wants CPU (BLAS's, say)
        a = np.random.default_rng(1).random(300_000)
        while not stop.is_set():
            np.sort(a)  # without the GIL
    helper = threading.Thread(target=work)
    if foreign:
        helper.start()
    try:
        x = np.random.default_rng(0).uniform(1, 2, 200_000)
        with fastmath.backend("numpy"):
            fastmath.exp(x)  # the pool starts
            t = time.monotonic()
            while time.monotonic() - t < 2.0:
                assert np.array_equal(fastmath.exp(x), np.exp(x))
        s = R.stats()
        print(s["yields"], s["kept_yielding"])
    finally:
        stop.set()
        if foreign:
            helper.join()
        if busy is not None:
            busy.kill()
"""


def _yield(spinner, foreign, others=0.05, share=2.0, free=-100.0):
    return _counts(_YIELD, int(spinner), int(foreign), others, share, free)


def test_on_an_oversubscribed_machine_calls_run_whole():
    """Another process busy on a core, threads of this process other than the caller and
    the pool wanting CPU too (OpenBLAS's between matrix products), and calls the pool could
    split a small part of the program: splitting then slowed it outside the splits
    (GaussianMixture.fit, one core busy: 0.79-0.93x plain, every split winning; its worker
    waited 1.1 s a fit behind the other process, and the scheduler moved OpenBLAS's thread
    onto the caller's CPU). Once a split finds its worker shut out there, calls run whole
    (set_yield), looked at again each window. Here on one CPU: the busy process and a
    sorting thread, the share gate open (share=2: whatever part of the time the calls take)."""
    yields, kept = _yield(spinner=True, foreign=True)
    assert yields > 0 and kept > 0, (yields, kept)
    assert _yield(spinner=True, foreign=False) == (0, 0)  # no other thread
    ncpu = os.cpu_count()  # more than the machine has: never "others"
    assert _yield(spinner=True, foreign=True, others=ncpu + 1.0) == (0, 0)
    assert _yield(spinner=True, foreign=True, share=0.0) == (0, 0)  # no share is under 0


def test_where_no_cpu_is_left_for_a_worker_calls_run_whole_whatever_their_share():
    """With the CPUs this process may use taken by the other process, the foreign threads
    and the caller (under `free` left), calls run whole even where they are much of the
    program: a batched matrix product and a softmax of its rows, one core of two busy, ran
    0.81-1.02x plain with every split the pacing allowed (each split winning), 0.83-0.97x
    under the share's gate alone, 1.04-1.08x with this one too (bench/busy_workloads.py).
    Here the share gate shut (share=0): the one CPU left no room (free 0.5, the default),
    and none is short of -100."""
    yields, kept = _yield(spinner=True, foreign=True, share=0.0, free=0.5)
    assert yields > 0 and kept > 0, (yields, kept)
    assert _yield(spinner=True, foreign=False, share=0.0, free=0.5) == (0, 0)


def test_set_yield_checks_its_arguments():
    before = _runtime.set_yield(0.3)
    try:
        for bad in [(-1.0,), (61.0,), (0.3, -0.1), (0.3, 0.5, -1.0), (0.3, 0.5, 0.05, -1.0),
                    (0.3, 0.5, 0.05, 0.15, float("nan")), (0.3, 0.5, 0.05, 0.15, 1e10),
                    (float("nan"),)]:
            with pytest.raises(ValueError, match="set_yield"):
                _runtime.set_yield(*bad)
        assert _runtime.set_yield(0.0) == pytest.approx(0.3)
        assert _runtime.stats()["yielding"] == 0.0
    finally:
        _runtime.set_yield(before)
