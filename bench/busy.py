"""fastmath, NumPy/SciPy and torch side by side while another process keeps one core busy.

A user's machine is rarely idle. This starts a process that spins on one core (pinned
there where the OS allows), then times, in interleaved rounds (medians), for each function,
dtype and size: the NumPy/SciPy reference, fastmath's default (auto), fastmath's numpy
backend, and torch writing into a NumPy output with its own threads. The goal: with a
busy core, auto is never slower than the reference at any size (ratio >= 1.00, within
the noise: the ratio is the median of the rounds' ratios, each round timing the columns
side by side, and the spread their quartiles). Each round keeps the best of three
batches of a column, so a batch the scheduler cut into does not count as the call's cost.

python bench/busy.py [--idle] [--sizes 1e4,1e5,1e6,1e7] [--functions exp,log,erf]
                     [--dtypes float64,float32] [--rounds 9]
"""
import argparse
import multiprocessing as mp
import os
import time

import numpy as np

import fastmath
from fastmath.tools import _bench


def _spin(core):
    if hasattr(os, "sched_setaffinity"):
        try:
            os.sched_setaffinity(0, {core})
        except OSError:
            pass
    x = 0
    while True:
        x += 1


def _torch_call(name):
    """torch writing into a NumPy-allocated output, as the peers grid times it."""
    try:
        import torch  # noqa: F401 - only to know it is there
    except ImportError:
        return None
    from fastmath.tools._peers import _torch_into_numpy

    return _torch_into_numpy(name)


def _per_call(fn, x, target=0.01, batches=3):
    """Seconds per call of ``fn(x)``: the best of ``batches`` batches of enough calls to
    fill ``target`` seconds (a batch the scheduler cut into is not the call's cost)."""
    fn(x)
    reps = 1
    while True:
        t0 = time.perf_counter()
        for _ in range(reps):
            fn(x)
        t = time.perf_counter() - t0
        if t >= target or reps >= 1 << 16:
            break
        reps *= 2
    for _ in range(batches - 1):
        t0 = time.perf_counter()
        for _ in range(reps):
            fn(x)
        t = min(t, time.perf_counter() - t0)
    return t / reps


def _backend(name, b):
    fn = getattr(fastmath, name)

    def call(x):
        with fastmath.backend(b):
            return fn(x)
    return call


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--idle", action="store_true", help="no competing process")
    p.add_argument("--sizes", default="1e4,1e5,1e6,1e7")
    p.add_argument("--functions", default="exp,log,erf")
    p.add_argument("--dtypes", default="float64,float32")
    p.add_argument("--rounds", type=int, default=9)
    args = p.parse_args()
    sizes = [int(float(s)) for s in args.sizes.split(",")]
    spinner = None
    if not args.idle:
        spinner = mp.get_context("spawn").Process(target=_spin, args=(0,), daemon=True)
        spinner.start()
        time.sleep(0.5)
    try:
        print(f"cores {os.cpu_count()}, fastmath threads {fastmath.info()['threads']}, "
              f"{'idle' if args.idle else 'one core busy'}; load average "
              + " ".join(f"{v:.2f}" for v in os.getloadavg()))
        print(f"{'function':<9}{'dtype':<9}{'size':>7}{'reference':>11}{'auto':>9}"
              f"{'numpy-be':>10}{'torch':>9}   auto vs reference (spread)")
        rng = np.random.default_rng(0)
        for name in args.functions.split(","):
            for dtype in args.dtypes.split(","):
                for n in sizes:
                    row(name, dtype, n, rng, args.rounds)
        print("load average " + " ".join(f"{v:.2f}" for v in os.getloadavg()))
    finally:
        if spinner is not None:
            spinner.terminate()
            spinner.join()


def row(name, dtype, n, rng, rounds):
    x = _bench._input(name, n, dtype, rng)
    calls = {"reference": _bench._reference(name), "auto": getattr(fastmath, name),
             "numpy-be": _backend(name, "numpy"), "torch": _torch_call(name)}
    calls = {k: v for k, v in calls.items() if v is not None}
    times = {k: [] for k in calls}
    with np.errstate(all="ignore"):
        names = list(calls)
        for r in range(rounds):  # interleaved: a noisy neighbour slows every column alike
            for k in names[r % len(names):] + names[:r % len(names)]:  # no column always first
                times[k].append(_per_call(calls[k], x))
    med = {k: float(np.median(v)) for k, v in times.items()}
    # each round's ratio (reference and auto timed side by side), median of them: a ratio
    # of the columns' medians mixes rounds the machine ran at different speeds (log float32
    # 10^6 read 0.86x so while its rounds' ratios ran 0.99-1.00)
    ratios = np.array(times["reference"]) / np.array(times["auto"])
    mid, (lo, hi) = np.median(ratios), np.percentile(ratios, [25, 75])
    cells = "".join(f"{med[k] * 1e3:>{w}.3f}" if k in med else f"{'-':>{w}}"
                    for k, w in (("reference", 11), ("auto", 9), ("numpy-be", 10),
                                 ("torch", 9)))
    print(f"{name:<9}{dtype:<9}{n:>7.0e}{cells}   {mid:.2f}x "
          f"({lo:.2f}-{hi:.2f})", flush=True)


if __name__ == "__main__":
    main()
