"""Every accelerated function at 10^6 and 10^7 elements, float64 and float32: median
time of the NumPy/SciPy reference and of fastmath's default (auto), and the speedup.

python bench/functions.py [--sizes 1e6,1e7] [--functions sin,cos] [--rounds 5]
python bench/functions.py --patched [--functions sin,cos] [--rounds 15]

``--patched`` measures instead what ``fastmath.patch()`` costs the calls it does not
accelerate: each function on a Python float, a 0-d array and 10 float64 elements (and a few
scalar scipy.stats calls), called through NumPy's/SciPy's name, plain and patched, in
interleaved rounds in one process. These calls run in the calling thread only, so they
are timed in its CPU time, which a busy machine inflates less than wall time; the figure
is the median ratio patched/plain. Report ``uptime``'s load average with it.
"""
import argparse
import functools
import importlib
import os
import statistics
import time
import timeit

import numpy as np

import fastmath
from fastmath._registry import ROWS


def median_time(fn, args, rounds):
    fn(*args)
    times = []
    for _ in range(rounds):
        t = time.perf_counter()
        fn(*args)
        times.append(time.perf_counter() - t)
    return float(np.median(times))


def patched_cases(names):
    """{label: call} of small calls through the patched module attribute."""
    cases = {}
    for spec in ROWS:
        if spec.name not in names or spec.kind not in ("unary", "binary"):
            continue
        module_name, _, attr = spec.ref.partition(":")
        module = importlib.import_module(module_name)
        rng = np.random.default_rng(0)
        x10 = spec.sample(10, "float64", rng)
        shapes = {"float": tuple(float(x[0]) for x in x10),
                  "0-d": tuple(np.asarray(x[0]) for x in x10), "10 float64": x10}
        for label, xs in shapes.items():
            # looked up at each call, as library code does: the patch is what is measured
            cases[f"{spec.ref.replace(':', '.')}, {label}"] = (
                lambda m=module, a=attr, xs=xs: getattr(m, a)(*xs))
    if "ndtr" in names or "xlogy" in names:
        import scipy.stats

        cases["scipy.stats.norm.cdf(0.3)"] = lambda: scipy.stats.norm.cdf(0.3)
        cases["scipy.stats.poisson.logpmf(3, 2.5)"] = lambda: scipy.stats.poisson.logpmf(3, 2.5)
    return cases


def patched(names, rounds):
    print(f"load average {os.getloadavg()}; median patched/plain of {rounds} interleaved "
          "rounds (CPU time)")
    repeat = functools.partial(timeit.repeat, timer=time.thread_time, repeat=3)
    with np.errstate(all="ignore"):
        for label, fn in patched_cases(names).items():
            with fastmath.patch():
                fn()  # the first call reads the cost table
            number = max(1, int(0.01 / min(timeit.repeat(fn, number=1, repeat=5))))
            ratios, plains = [], []
            for _ in range(rounds):
                plain = min(repeat(fn, number=number))
                with fastmath.patch():
                    ratios.append(min(repeat(fn, number=number)) / plain)
                plains.append(plain / number)
            print(f"{label:44s} {statistics.median(plains) * 1e6:8.2f} us plain  "
                  f"patched/plain {statistics.median(ratios):.3f}", flush=True)
    print(f"load average {os.getloadavg()}")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default="1e6,1e7")
    p.add_argument("--functions", default=None)
    p.add_argument("--rounds", type=int, default=None, help="5; 15 with --patched")
    p.add_argument("--patched", action="store_true",
                   help="what fastmath.patch() costs small calls (see above)")
    args = p.parse_args()
    names = args.functions.split(",") if args.functions else [s.name for s in ROWS]
    if args.patched:
        return patched(names, args.rounds or 15)
    args.rounds = args.rounds or 5
    sizes = [int(float(s)) for s in args.sizes.split(",")]
    rng = np.random.default_rng(0)
    print(f"{'function':<12}{'dtype':<9}{'size':>9}{'reference':>12}{'auto':>12}{'speedup':>9}")
    for spec in ROWS:
        if spec.name not in names:
            continue
        ref, fn = spec.reference(), getattr(fastmath, spec.name)
        for dtype in ("float64", "float32"):
            for n in sizes:
                # inside the row's domain: the timings are of real work, not NaN paths
                call = spec.sample(n, dtype, rng)
                with np.errstate(all="ignore"):
                    # interleaved rounds, so a noisy neighbour slows both alike
                    tr, ta = [], []
                    for _ in range(args.rounds):
                        tr.append(median_time(ref, call, 1))
                        ta.append(median_time(fn, call, 1))
                    t_ref, t_auto = float(np.median(tr)), float(np.median(ta))
                print(f"{spec.name:<12}{dtype:<9}{n:>9.0e}{t_ref * 1e3:>10.2f}ms"
                      f"{t_auto * 1e3:>10.2f}ms{t_ref / t_auto:>8.2f}x", flush=True)


if __name__ == "__main__":
    main()
