"""fastmath's native runtime (fastmath/dispatch/_runtime.c) as a program meets it.

    python bench/runtime.py [--rounds 9] [--busy]
                            [--sections cost,split,bursts,idle,blas,threads,processes,rows]
                            [--sizes 1e4,1e5,1e6,1e7]

- cost: the fixed cost of a parallel call with nothing to do, its workers warm (calls
  back to back) and parked (calls further apart than the workers' spin).
- split: exp and log of float64 at 10^4..10^7 elements: NumPy's own call, fastmath's numpy
  backend, and the loop mode (``fastmath.patch(mode="loops")``), bitwise NumPy's all three;
  at 10^7 also a two-thread copy of the same bytes into a fresh output (what memory allows)
  and the ceiling of a split, NumPy's time over the runtime's threads (what the cores
  allow), each as the loop mode's time over it: where the ceiling is above the copy, the
  ceiling is what a split can reach.
- bursts: exp of 10^5 float64 elements in bursts of 3 ms of calls, 0-50 ms apart (a
  program's calls come in bursts: after a pause the workers have parked, and one woken
  beside its caller on the caller's CPU moves off it), NumPy's and the numpy backend's.
- idle: the CPU time the process uses in the second after a burst of calls.
- changes: exp of 10^4 float64 under the loop mode, the pacing's trace of 1000 calls a
  round: the median time of a split and of a whole run by how the run before it ran (at a
  change of way the output's lines move between the cores' caches: the pacing times each
  way after its own kind).
- crossover: for NumPy's own one-argument functions whose calibration row runs the numpy
  backend, the smallest size from which the numpy backend (through fastmath's front end,
  as ``auto`` runs it) is at least 1.05x NumPy's own call at that size and every larger
  one measured, in a process that runs nothing else (best of three batches a round: what
  a split can give, not what the pacing keeps of it among other pools' threads).
- blas: code that alternates matrix products with elementwise math (a batched product
  and a softmax over its rows), plain and under the loop mode, the function patch and
  ``fastmath`` as ``np``.
- threads: the program's own threads (as many as the cores, and one), each calling exp on
  its own float64 array, NumPy's and under the loop mode and fastmath's: several threads
  of a program calling at once (a thread pool, Dask's threaded scheduler) each compute on
  a core of their own, and a split beside them takes another caller's core.
- processes: as many processes as cores (a process pool), each calling exp on its own
  float64 array, plainly or each under the loop mode: each would split its calls over
  every core, and the registry of fastmath's processes keeps them from splitting beside
  each other (docs/configuration.md).
- rows: calls NumPy cuts into rows or casts in buffers, plain and under the loop mode
  (which runs them by rows over the pool): a bias added in place, a column subtracted, an
  outer product, exp of a strided view, at 200,000 x 64 float64; log of int64 counts and
  a float64 array times them, 12.8 million elements.

Every column is timed in interleaved rounds in one process; a round keeps the best of three
batches (a batch the scheduler cut into is not the call's cost); figures are medians.
``--busy`` runs all of it with another process spinning on one core (bench/busy.py's).
The load average is printed first: rerun when it is high.
"""
from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import sys
import threading
import time

# fastmath first, as `fastmath run` and FASTMATH_PATCH load it: before NumPy loads OpenBLAS
# (OPENBLAS_THREAD_TIMEOUT, docs/backends.md)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import fastmath  # noqa: E402
from fastmath.dispatch import _runtime  # noqa: E402

import numpy as np  # noqa: E402

from busy import _spin  # noqa: E402 - bench/busy.py's process spinning on one core


def per_call(fn, target=0.005, batches=3):
    """Seconds per call of ``fn()``: the best of ``batches`` batches filling ``target`` s."""
    fn()
    reps = 1
    while True:
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        t = time.perf_counter() - t0
        if t >= target or reps >= 1 << 16:
            break
        reps *= 2
    best = t / reps
    for _ in range(batches - 1):
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        best = min(best, (time.perf_counter() - t0) / reps)
    return best


def rounds_of(columns, rounds, contexts=None):
    """{name: median seconds per call}, the columns interleaved round by round; a column
    named in ``contexts`` is timed inside a fresh ``contexts[name]()`` each round."""
    import contextlib

    contexts = contexts or {}
    times = {name: [] for name in columns}
    for _ in range(rounds):
        for name, fn in columns.items():
            with contexts.get(name, contextlib.nullcontext)():
                times[name].append(per_call(fn))
    return {name: statistics.median(t) for name, t in times.items()}


def _loop_mode():
    return fastmath.patch(mode="loops")


def cost(args):
    print("\n## fixed cost of a parallel call (nothing to do)")
    if _runtime.threads() < 2:
        print("one thread: nothing splits")
        return
    warm = statistics.median(_runtime.fixed_cost(2000, 0) for _ in range(args.rounds))
    spin = _runtime.stats()["spin"]
    print(f"workers warm (back to back): {warm * 1e6:.2f} us a call")
    for pause in (spin * 3 + 1e-3, 0.005, 0.05):
        before = _runtime.stats()
        _runtime.fixed_cost(20, pause)
        after = _runtime.stats()
        n = after["wakes"] - before["wakes"]
        mean = (after["wake"] * after["wakes"] - before["wake"] * before["wakes"]) / max(n, 1)
        print(f"workers parked (calls {pause * 1e3:.1f} ms apart): a parked worker running "
              f"{mean * 1e6:.0f} us after the call began (mean of {n}); the caller does not "
              "wait for it")


def _copy2(x):
    """x into a fresh output, two threads (NumPy's copy releases the GIL)."""
    out = np.empty_like(x)
    h = x.size // 2
    t = threading.Thread(target=np.copyto, args=(out[h:], x[h:]))
    t.start()
    np.copyto(out[:h], x[:h])
    t.join()
    return out


def split(args):
    print("\n## exp and log, float64: NumPy, the numpy backend, the loop mode "
          "(ratios: NumPy's time / theirs)")
    print(f"{'':12}{'n':>10}{'NumPy us':>11}{'backend':>9}{'loops':>8}{'2-thread copy':>15}"
          f"{'ceiling':>10}  loops / copy, / ceiling")
    rng = np.random.default_rng(0)
    for name in ("exp", "log"):
        ref = getattr(np, name)
        fm = getattr(fastmath, name)
        for n in args.sizes:
            x = rng.uniform(0.1, 10, n)
            for f in (fm,):
                with fastmath.backend("numpy"):
                    assert np.array_equal(f(x), ref(x))
            # the backend is chosen, and the loop mode's slots installed, around their
            # columns only
            columns = {"numpy": lambda: ref(x), "backend": lambda: fm(x), "loops": lambda: ref(x)}
            if n >= 10**7:
                columns["copy"] = lambda: _copy2(x)
            times = rounds_of(columns, args.rounds, {"loops": _loop_mode,
                                                     "backend": lambda: fastmath.backend("numpy")})
            t0 = times["numpy"]
            copy = ceiling = ""
            if "copy" in times:
                # a perfect split of NumPy's call: its time over the threads
                top = t0 / max(1, _runtime.threads())
                copy = f"{t0 / times['copy']:.2f}x ({times['copy'] * 1e3:.2f} ms)"
                ceiling = (f"{top * 1e3:>7.2f} ms  {times['loops'] / times['copy']:.2f}x, "
                           f"{times['loops'] / top:.2f}x")
            print(f"{name:12}{n:>10}{t0 * 1e6:>11.1f}{t0 / times['backend']:>8.2f}x"
                  f"{t0 / times['loops']:>7.2f}x {copy:>15} {ceiling}")


def idle(args):
    print("\n## idle after a burst")
    x = np.random.default_rng(1).uniform(0.1, 10, 10**5)
    with fastmath.backend("numpy"):
        for _ in range(2000):
            fastmath.exp(x)
    c0, t0 = time.process_time(), time.perf_counter()
    time.sleep(1.0)
    used = (time.process_time() - c0) / (time.perf_counter() - t0)
    print(f"CPU used during a 1 s sleep after 2000 calls: {used * 100:.2f}% of a core")


def blas(args):
    print("\n## matrix products and elementwise math, alternating (ratio: plain / fastmath)")
    rng = np.random.default_rng(2)
    q = rng.standard_normal((16, 256, 64))
    k = rng.standard_normal((16, 64, 256))

    def program(np_):
        s = q @ k
        e = np_.exp(s - s.max(-1, keepdims=True))
        return e / e.sum(-1, keepdims=True)

    def plain():
        program(np)

    def patched():  # the same: the patch is installed around this column only
        program(np)

    columns = {"plain": plain, "fastmath as np": lambda: program(fastmath),
               "patch loops": patched, "patch functions": patched}
    times = rounds_of(columns, args.rounds, {
        "patch loops": _loop_mode, "patch functions": lambda: fastmath.patch(mode="functions")})
    t0 = times.pop("plain")
    print(f"plain: {t0 * 1e3:.2f} ms a step; " + ", ".join(
        f"{name} {t0 / t:.2f}x" for name, t in times.items()))


def user_threads(args):
    print("\n## the program's own threads, each calling exp on its own float64 array (out="
          "given), side by side (ratio: NumPy / fastmath, median of the rounds' ratios)")
    from concurrent.futures import ThreadPoolExecutor

    cores = len(os.sched_getaffinity(0))
    rng = np.random.default_rng(6)
    for users in sorted({1, cores}):
        pool = ThreadPoolExecutor(users)
        for n in args.sizes:
            xs = [rng.random(n) for _ in range(users)]
            outs = [np.empty(n) for _ in range(users)]
            reps = max(10, int(1e8 // n))  # about 0.1 s of calls a thread a round

            def run(fn):
                def one(i):
                    for _ in range(reps):
                        fn(xs[i], out=outs[i])
                t0 = time.perf_counter()
                list(pool.map(one, range(users)))
                return time.perf_counter() - t0

            times = {"numpy": [], "loops": [], "fastmath.exp": []}
            joins = {"loops": 0, "fastmath.exp": 0}
            shared = _runtime.stats().get("kept_shared", 0)
            for r in range(args.rounds):
                for name in list(times)[r % 3:] + list(times)[:r % 3]:
                    before = _runtime.stats()["joins"]
                    if name == "loops":
                        with _loop_mode():
                            times[name].append(run(np.exp))
                    else:
                        times[name].append(run(np.exp if name == "numpy" else fastmath.exp))
                    if name in joins:
                        joins[name] += _runtime.stats()["joins"] - before
            base = statistics.median(times["numpy"])
            line = f"{users} thread{'s' if users > 1 else ' '} {n:>9,}: NumPy {base * 1e3:6.1f} ms"
            for name in ("loops", "fastmath.exp"):
                ratio = statistics.median(a / b for a, b in zip(times["numpy"], times[name]))
                line += (f"; {'loop mode' if name == 'loops' else name} {ratio:.2f}x "
                         f"({joins[name] / (args.rounds * reps * users):.2f} joins a call)")
            kept = _runtime.stats().get("kept_shared", 0) - shared
            print(line + f"; {kept} calls kept whole beside another thread's", flush=True)
        pool.shutdown()


def _process_calls(job):
    """In a pool's process: seconds for ``reps`` calls of exp on n float64 (out= given),
    plainly or under the loop mode, after 20 calls to warm up."""
    n, mode, reps = job
    x = np.random.default_rng(os.getpid()).random(n)
    out = np.empty(n)
    patch = fastmath.patch(mode="loops") if mode == "loops" else None
    if patch is not None:
        patch.__enter__()
    try:
        for _ in range(20):
            np.exp(x, out=out)
        t0 = time.perf_counter()
        for _ in range(reps):
            np.exp(x, out=out)
        return time.perf_counter() - t0, _runtime.stats().get("processes", 0)
    finally:
        if patch is not None:
            patch.__exit__(None, None, None)


def processes(args):
    cores = len(os.sched_getaffinity(0))
    print(f"\n## {cores} processes at once (a process pool), each calling exp on its own float64 "
          "array, plainly or under the loop mode (ratio: plain / loop mode, the slowest "
          "process's time, median of the rounds' ratios)")
    if cores < 2:
        print("one core: nothing splits")
        return
    registry = _runtime.registry() if hasattr(_runtime, "registry") else {"path": None,
                                                                         "why": "none"}
    print(f"registry of fastmath's processes: {registry['path'] or 'none: ' + registry['why']}")
    with mp.get_context("spawn").Pool(cores) as pool:
        for n in args.sizes:
            reps = max(10, int(1.5e8 // n))  # about 0.1-0.2 s a process a round
            times = {"plain": [], "loops": []}
            seen = []
            for r in range(args.rounds):
                for mode in ("plain", "loops") if r % 2 else ("loops", "plain"):
                    got = pool.map(_process_calls, [(n, mode, reps)] * cores)
                    times[mode].append(max(t for t, _ in got))
                    if mode == "loops":
                        seen += [p for _, p in got]
            ratio = statistics.median(a / b for a, b in zip(times["plain"], times["loops"]))
            print(f"{n:>11,}: plain {statistics.median(times['plain']) * 1e3:6.1f} ms, loop mode "
                  f"{statistics.median(times['loops']) * 1e3:6.1f} ms, {ratio:.2f}x (other "
                  f"processes seen calling at the end: {statistics.median(seen):.0f})",
                  flush=True)


def rows(args):
    print("\n## calls NumPy cuts into rows or casts in buffers, 200000 x 64 (ratio: plain / "
          "loop mode)")
    rng = np.random.default_rng(5)
    a = rng.standard_normal((200_000, 64))
    wide = rng.standard_normal((200_000, 128))
    bias, col = rng.standard_normal(64), rng.standard_normal((200_000, 1))
    counts = rng.integers(1, 1000, a.size)
    flat = a.reshape(-1)
    cases = {
        "a += bias": lambda: np.add(a, bias, out=a),
        "a - column": lambda: a - col,
        "outer product": lambda: col * bias,
        "exp(wide[:, :64])": lambda: np.exp(wide[:, :64]),
        "log(int64 counts)": lambda: np.log(counts),
        "x * int64 counts": lambda: flat * counts,
    }
    for name, fn in cases.items():
        times = rounds_of({"plain": fn, "loops": fn}, args.rounds, {"loops": _loop_mode})
        print(f"{name:18} plain {times['plain'] * 1e3:6.2f} ms, loop mode "
              f"{times['loops'] * 1e3:6.2f} ms: {times['plain'] / times['loops']:.2f}x")


def bursts(args):
    print("\n## bursts of calls with pauses between them (ratio: NumPy's time / the numpy "
          "backend's; each burst 3 ms of calls, its mean per call; median of the bursts)")
    x = np.random.default_rng(4).uniform(0.1, 10, 10**5)
    out = np.empty_like(x)

    def burst(fn):
        t0, k = time.perf_counter(), 0
        while time.perf_counter() - t0 < 0.003:
            fn(x, out=out)
            k += 1
        return (time.perf_counter() - t0) / k

    for pause in (0.0, 0.002, 0.01, 0.05):
        before = _runtime.stats().get("moves", 0)
        times = {"numpy": [], "backend": []}
        with fastmath.backend("numpy"):
            for _ in range(max(args.rounds, 3) * 3):
                for name, fn in (("numpy", np.exp), ("backend", fastmath.exp)):
                    time.sleep(pause)
                    times[name].append(burst(fn))
        t0, t1 = statistics.median(times["numpy"]), statistics.median(times["backend"])
        slower = sum(t > t0 for t in times["backend"])
        print(f"exp float64 10^5, {pause * 1e3:4.0f} ms apart: NumPy {t0 * 1e6:.1f} us, "
              f"{t0 / t1:.2f}x; bursts slower than NumPy's median {slower} of "
              f"{len(times['backend'])}; a worker moved off the caller's CPU "
              f"{_runtime.stats().get('moves', 0) - before} times")


CROSSOVER_SIZES = (4096, 8192, 16384, 32768, 65536, 131072, 262144, 524288)


def crossover(args):
    print("\n## crossovers: the numpy backend through the front end against NumPy's own call")
    from fastmath._registry import BY_NAME

    rng = np.random.default_rng(3)
    for name, spec in BY_NAME.items():
        if spec.kind != "unary" or not spec.ref.startswith("numpy:"):
            continue
        for dtype in ("float32", "float64"):
            x = spec.sample(max(CROSSOVER_SIZES), np.dtype(dtype), rng)[0]
            ref, fm = spec.reference(), getattr(fastmath, name)
            ratios = []
            for n in CROSSOVER_SIZES:
                xn = x[:n].copy()
                times = rounds_of({"numpy": lambda: ref(xn), "backend": lambda: fm(xn)},
                                  args.rounds, {"backend": lambda: fastmath.backend("numpy")})
                ratios.append(times["numpy"] / times["backend"])
            at = None
            for i in range(len(ratios) - 1, -1, -1):
                if ratios[i] < 1.05:
                    break
                at = CROSSOVER_SIZES[i]
            shown = " ".join(f"{r:.2f}" for r in ratios)
            print(f"{name:10} {dtype:8} from {at}  ({shown})")


def changes(args):
    print("\n## a split or a whole run, by how the run before it ran (the loop mode, the "
          "pacing's trace)")
    x = np.random.default_rng(0).uniform(0.1, 10, 10**4)
    with fastmath.patch(mode="loops"):
        for _ in range(300):
            np.exp(x)
        _runtime.trace(True)
        for _ in range(1000 * args.rounds):
            np.exp(x)
        events = _runtime.trace(False)
    # kind 0 a run kept whole, 1 a split, 2 a whole run right after a split (not kept)
    ways = {}
    for before, e in zip(events, events[1:]):
        key = ("split" if e[0] == 1 else "whole") + " after " + (
            "a split" if before[0] == 1 else "a whole run")
        ways.setdefault(key, []).append(e[3] * 1e-3)
    print(f"exp of 10^4 float64, {len(events)} runs: " + "; ".join(
        f"{k} {statistics.median(v):.1f} us (x{len(v)})" for k, v in sorted(ways.items())))


SECTIONS = {"cost": cost, "split": split, "bursts": bursts, "idle": idle, "blas": blas,
            "threads": user_threads, "processes": processes, "rows": rows,
            "crossover": crossover, "changes": changes}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=9)
    p.add_argument("--busy", action="store_true", help="another process busy on one core")
    p.add_argument("--sections", default="cost,split,bursts,idle,blas,threads,processes,rows",
                   help=f"comma-separated, of: {', '.join(SECTIONS)}")
    p.add_argument("--sizes", default="1e4,1e5,1e6,1e7",
                   help="the split section's sizes, comma-separated (1e4, 30000, ...)")
    args = p.parse_args(argv)
    try:
        args.sizes = [int(float(v)) for v in args.sizes.split(",")]
    except ValueError:
        p.error(f"--sizes: comma-separated element counts, not {args.sizes!r}")
    if any(n < 1 for n in args.sizes):
        p.error(f"--sizes: element counts from 1, not {args.sizes}")
    wanted = args.sections.split(",")
    bad = [s for s in wanted if s not in SECTIONS]
    if bad:
        p.error(f"unknown sections {bad}; valid: {', '.join(SECTIONS)}")
    busy = None
    if args.busy:
        busy = mp.get_context("spawn").Process(target=_spin, args=(0,), daemon=True)
        busy.start()
    print(f"load average {os.getloadavg()}; {_runtime.threads()} threads; "
          f"another process busy on one core: {bool(busy)}")
    try:
        for s in wanted:
            SECTIONS[s](args)
    finally:
        if busy is not None:
            busy.terminate()


if __name__ == "__main__":
    main()
