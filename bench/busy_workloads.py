"""Library workloads with another process busy on one core: the loop mode with and without
the runtime's yield (docs/backends.md), and with one thread, the function patch, and
fastmath's functions called in NumPy's place, against plain NumPy.

A program that mixes matrix products with elementwise math, on a machine where another
process keeps a core busy, has more threads wanting CPU than there are cores: its caller,
BLAS's thread, the runtime's worker. This times such programs in interleaved rounds in one
process, plain and under ``fastmath.patch(mode="loops")`` three ways: as shipped
(``loops``), with the yield off (``set_yield(0)``: split whenever the pacing says so) and
with one thread (nothing splits); under ``fastmath.patch()`` (``patch``: NumPy's functions
replaced by fastmath's, ``auto``); and, for the built-in softmax, with its ``np.exp``
fastmath's as ``import fastmath as np`` has it (``as np``). For each it prints the median
time, the median of the rounds' ratios plain / mode with every round's ratio, and per fit
what the process's threads ran and waited runnable (``/proc/self/task/*/schedstat``: the
caller, the runtime's workers, and every other thread: BLAS's), the last look of the yield
(``others``, ``foreign``, ``share``, ``free``: see ``_runtime.set_yield``) and how many
times it yielded. A program's plain time is bimodal on such a machine (where the scheduler
leaves BLAS's woken thread decides it): judge by 20 rounds or more. Report the load
average.

python bench/busy_workloads.py [--only Gaussian Logit softmax] [--rounds 20] [--idle]
python bench/busy_workloads.py --paired [--only ...] [--rounds 20] [--idle]

``--paired`` times the softmax step by step instead, each mode's step beside a step of
its reference (see ``paired``), and the library workloads run by run, each run of the
function patch or the loop mode beside a plain run (``paired_runs``): finer than the
rounds of all modes, whose times move by tens of percent with a core busy.

``softmax`` is a batched matrix product and a softmax over its rows (16 x 256 x 256), 120
steps a run (the median time of its matrix products is printed too); the others are
``bench/library_workloads.py``'s.
"""
from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import fastmath  # noqa: E402 - before NumPy, as `fastmath run` loads it (OpenBLAS's spin)
import numpy as np  # noqa: E402

from fastmath.dispatch import _runtime  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import library_workloads  # noqa: E402
from busy import _spin  # noqa: E402 - bench/busy.py's process spinning on one core

MODES = ("plain", "loops", "yield off", "one thread", "patch", "as np")


PRODUCTS = [0.0]  # seconds the softmax workload spent in its matrix products


def softmax_workload():
    def setup():
        rng = np.random.default_rng(2)
        return rng.standard_normal((16, 256, 64)), rng.standard_normal((16, 64, 256))

    def run(s, np=np):  # `np`: NumPy, or fastmath as `import fastmath as np` has it
        q, k = s
        for _ in range(120):
            t = time.perf_counter()
            p = q @ k
            PRODUCTS[0] += time.perf_counter() - t
            e = np.exp(p - p.max(-1, keepdims=True))
            e / e.sum(-1, keepdims=True)
    run.takes_namespace = True
    return setup, run


def schedstat():
    """{thread id: (ns run, ns waited runnable)} of this process's threads."""
    out = {}
    for t in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{t}/schedstat") as f:
                run, wait = f.read().split()[:2]
            out[int(t)] = (int(run), int(wait))
        except (OSError, ValueError):
            pass
    return out


def runtime_workers() -> set:
    """The thread ids of the runtime's workers (named fastmath-1, fastmath-2, ...)."""
    out = set()
    for t in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{t}/comm") as f:
                if f.read().startswith("fastmath-"):
                    out.add(int(t))
        except OSError:
            pass
    return out


def timed(mode, fn, state):
    if mode == "patch":
        with fastmath.patch():
            t = time.perf_counter()
            fn(state)
            return time.perf_counter() - t
    if mode in ("plain", "as np"):
        namespace = (fastmath,) if mode == "as np" else ()  # `import fastmath as np`'s
        t = time.perf_counter()
        fn(state, *namespace)
        return time.perf_counter() - t
    threads = _runtime.threads()
    if mode == "one thread":
        _runtime.set_threads(1)
    seconds = _runtime.set_yield(0.0) if mode == "yield off" else None
    try:
        with fastmath.patch(mode="loops"):
            t = time.perf_counter()
            fn(state)
            return time.perf_counter() - t
    finally:
        if mode == "one thread":
            _runtime.set_threads(threads)
        if seconds is not None:
            _runtime.set_yield(seconds)


def beside(reference, mode, reference_first: bool) -> tuple:
    """(reference's time, mode's time): the two run one right after the other, in the
    order given (pairs flip it each time, so neither side always runs first)."""
    if reference_first:
        ta = reference()
        return ta, mode()
    tb = mode()
    return reference(), tb


def paired(rounds: int, steps: int = 20) -> None:
    """The softmax workload step by step, each step of a mode beside a step of its
    reference, alternating (the order flipping each step): a whole run's time moves by
    tens of percent on a shared machine with a core busy (where BLAS's woken thread lands),
    and a step's neighbour sees the same machine. Pairs: fastmath's exp in NumPy's place
    (``as np``) against NumPy's; under ``fastmath.patch()`` against plain; under the loop
    mode as shipped against the loop mode on one thread (nothing splits: NumPy's loops
    called as NumPy calls them). A round is ``steps`` steps of each; printed: the median
    and quartiles of the ratios of the pairs of steps (the reference's time over the
    mode's, the two steps run side by side), then of the rounds' (their steps' sums, which
    a few steps a hundred times as long decide: BLAS's woken thread waiting behind the busy
    core), and the median step time of each side."""
    rng = np.random.default_rng(2)
    q, k = rng.standard_normal((16, 256, 64)), rng.standard_normal((16, 64, 256))

    def step(ns):
        t0 = time.perf_counter()
        p = q @ k
        e = ns.exp(p - p.max(-1, keepdims=True))
        e / e.sum(-1, keepdims=True)
        return time.perf_counter() - t0

    def in_patch():
        with fastmath.patch():
            return step(np)

    threads = _runtime.threads()

    def one_thread():
        _runtime.set_threads(1)
        try:
            return step(np)
        finally:
            _runtime.set_threads(threads)

    pairs = {"as np": (lambda: step(np), lambda: step(fastmath)),
             "patch": (lambda: step(np), in_patch),
             "loops": (one_thread, lambda: step(np))}
    print(f"\nproduct + softmax, step by step ({steps} steps of each side a round, "
          f"{rounds} rounds): reference / mode")
    for name, (reference, mode) in pairs.items():
        loops = fastmath.patch(mode="loops") if name == "loops" else None
        if loops is not None:
            loops.__enter__()
        try:
            for _ in range(3):  # warm
                reference(), mode()
            ratios, ref_steps, mode_steps = [], [], []
            for r in range(rounds):
                a = b = 0.0
                for i in range(steps):
                    ta, tb = beside(reference, mode, (i + r) % 2 == 1)
                    a, b = a + ta, b + tb
                    ref_steps.append(ta)
                    mode_steps.append(tb)
                ratios.append(a / b)
        finally:
            if loops is not None:
                loops.__exit__(None, None, None)
        lo, mid, hi = statistics.quantiles(ratios, n=4)
        plo, pmid, phi = statistics.quantiles([a / b for a, b in zip(ref_steps, mode_steps)],
                                              n=4)
        reference_name = {"as np": "NumPy", "patch": "plain",
                          "loops": "the loop mode on one thread"}[name]
        print(f"  {name:6s} pairs of steps {pmid:.3f}x (quartiles {plo:.3f}-{phi:.3f}), "
              f"rounds {mid:.3f}x ({lo:.3f}-{hi:.3f}); a step "
              f"{statistics.median(mode_steps) * 1e3:.2f} ms, {reference_name}'s "
              f"{statistics.median(ref_steps) * 1e3:.2f} ms", flush=True)


def paired_runs(chosen: dict, rounds: int) -> None:
    """Each library workload run by run: a run under the function patch, or under the loop
    mode, beside a plain run, alternating (the order flipping each pair), ``rounds`` pairs
    of each. Printed: the median and quartiles of the pairs' ratios (plain's time over the
    mode's) and the median run of each side. A pair's two runs see the same machine; the
    rounds of all six modes (main) are spread over seconds, in which the machine's other
    load moves."""
    for name, (setup, fn) in chosen.items():
        if getattr(fn, "takes_namespace", False):  # the softmax: paired() steps it
            continue
        state = setup()
        print(f"\n{name}, run by run ({rounds} pairs of each): plain / mode")
        for mode in ("patch", "loops"):
            for _ in range(2):  # warm
                timed("plain", fn, state), timed(mode, fn, state)
            plain, ours = [], []
            for r in range(rounds):
                ta, tb = beside(lambda: timed("plain", fn, state),
                                lambda: timed(mode, fn, state), r % 2 == 1)
                plain.append(ta)
                ours.append(tb)
            lo, mid, hi = statistics.quantiles([a / b for a, b in zip(plain, ours)], n=4)
            print(f"  {mode:6s} pairs of runs {mid:.3f}x (quartiles {lo:.3f}-{hi:.3f}); a run "
                  f"{statistics.median(ours) * 1e3:.0f} ms, plain's "
                  f"{statistics.median(plain) * 1e3:.0f} ms", flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--only", nargs="*", default=["Gaussian", "Logit", "softmax"],
                   help="workloads whose name contains these (softmax: the built-in one; "
                        "by default the three the runtime's acceptance names)")
    p.add_argument("--rounds", type=int, default=20)
    p.add_argument("--idle", action="store_true", help="no competing process")
    p.add_argument("--paired", action="store_true",
                   help="the softmax step by step, each mode beside its reference (paired()), "
                        "and the library workloads run by run beside plain (paired_runs())")
    args = p.parse_args()
    if not os.path.isdir("/proc/self/task"):
        sys.exit("busy_workloads.py reads /proc: Linux only")
    found = library_workloads.workloads(False)
    found["product + softmax, 120 steps"] = softmax_workload()
    chosen = {name: w for name, w in found.items()
              if any(o.lower() in name.lower() for o in args.only)}
    if not chosen:
        sys.exit(f"--only matched none of: {', '.join(found)}")
    spinner = None
    if not args.idle:
        spinner = mp.get_context("spawn").Process(target=_spin, args=(0,), daemon=True)
        spinner.start()
    try:
        print(f"load average {os.getloadavg()[0]:.2f}, {os.cpu_count()} cores, one core "
              f"{'idle' if args.idle else 'busy'}, {args.rounds} interleaved rounds")
        if args.paired:
            if any(getattr(fn, "takes_namespace", False) for _, fn in chosen.values()):
                paired(args.rounds)
            paired_runs(chosen, args.rounds)
            print(f"\nload average {os.getloadavg()[0]:.2f}")
            return
        x = np.random.default_rng(0).random(10**6)
        with fastmath.patch(mode="loops"):
            np.exp(x)  # the pool starts
        ours = runtime_workers()
        me = os.getpid()
        for name, (setup, fn) in chosen.items():
            state = setup()
            modes = tuple(m for m in MODES
                          if m != "as np" or getattr(fn, "takes_namespace", False))
            for mode in modes:
                timed(mode, fn, state)  # warm
            times = {m: [] for m in modes}
            threads = {m: {"caller": [0, 0], "workers": [0, 0], "others": [0, 0]}
                       for m in modes}
            yields = {m: 0 for m in modes}
            products = {m: [] for m in modes}
            for r in range(args.rounds):
                for mode in modes[r % len(modes):] + modes[:r % len(modes)]:
                    a, y = schedstat(), _runtime.stats()["yields"]
                    PRODUCTS[0] = 0.0
                    times[mode].append(timed(mode, fn, state))
                    products[mode].append(PRODUCTS[0])
                    b = schedstat()
                    yields[mode] += _runtime.stats()["yields"] - y
                    for t in b.keys() & a.keys():
                        who = "caller" if t == me else "workers" if t in ours else "others"
                        for i in (0, 1):
                            threads[mode][who][i] += b[t][i] - a[t][i]
            plain = times["plain"]
            looked = ", ".join(f"{v:.2f}" for v in _runtime.stats()["looked"])
            print(f"\n{name}: plain {statistics.median(plain) * 1e3:.0f} ms; the yield's "
                  f"last look (others, foreign, share, free): {looked}")
            for mode in modes:
                ratios = sorted(a / b for a, b in zip(plain, times[mode]))
                spent = (f"; its matrix products {statistics.median(products[mode]) * 1e3:.0f}"
                         " ms" if any(products[mode]) else "")
                ran = "; ".join(
                    f"{who} ran {v[0] / 1e6 / args.rounds:.0f} ms waited "
                    f"{v[1] / 1e6 / args.rounds:.0f} ms" for who, v in threads[mode].items())
                print(f"  {mode:10s} {statistics.median(times[mode]) * 1e3:7.0f} ms "
                      f"{statistics.median(ratios):.3f}x [{' '.join(f'{r:.2f}' for r in ratios)}]"
                      f" yields {yields[mode]}\n             a run: {ran}{spent}")
        print(f"\nload average {os.getloadavg()[0]:.2f}")
    finally:
        if spinner is not None:
            spinner.terminate()


if __name__ == "__main__":
    main()
