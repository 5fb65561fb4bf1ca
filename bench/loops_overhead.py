"""What the loop mode costs where it does not split: small arrays and scalar-heavy code.

    python bench/loops_overhead.py [--rounds N] [--mode loops|functions|both]

Short runs call NumPy's original loop from fastmath's (one more indirect call). Each case
is timed plain and with ``fastmath.patch(mode="loops")`` installed (or the mode named:
``functions`` puts a Python-level call in front of each accelerated function's), in
interleaved rounds in one process; the figure is the median ratio patched/plain (1.00: no
cost; the goal is at most 1.03). None of these runs is long enough to split, so all of it
is the calling thread's work: it is timed as that thread's CPU time, which other processes
on a busy machine do not inflate the way they inflate wall time. Report ``uptime``'s load
average with it.
"""
from __future__ import annotations

import argparse
import functools
import os
import statistics
import sys
import time
import timeit

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import fastmath  # noqa: E402


def cases():
    import scipy.special
    import scipy.stats

    x10, y10 = np.linspace(0.1, 1, 10), np.linspace(1, 2, 10)
    x1k = np.linspace(0.1, 1, 1000)
    x3, x0 = x10[:3], np.array(0.3)
    x1k32 = x1k.astype(np.float32)
    m10 = x10 > 0.5
    return {
        "np.exp, 10 float64": lambda: np.exp(x10),
        "x + y, 10 float64": lambda: x10 + y10,
        "x * 2.0, 10 float64": lambda: x10 * 2.0,
        "x * x, 3 float64": lambda: x3 * x3,
        "np.log, 0-d float64": lambda: np.log(x0),
        "x > 0.5, 10 float64": lambda: x10 > 0.5,
        "np.isnan, 10 float64": lambda: np.isnan(x10),
        "m & m, 10 bool": lambda: m10 & m10,
        "np.exp, 1000 float64": lambda: np.exp(x1k),
        "np.log, 1000 float32": lambda: np.log(x1k32),
        "erf, 1000 float64": lambda: scipy.special.erf(x1k),
        "norm.cdf(scalar)": lambda: scipy.stats.norm.cdf(0.3),
        "norm.logpdf(scalar) x20": lambda: [scipy.stats.norm.logpdf(v) for v in x10[:2] for
                                             _ in range(10)],
        "poisson.logpmf(scalar)": lambda: scipy.stats.poisson.logpmf(3, 2.5),
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--mode", default="loops", choices=("loops", "functions", "both"))
    args = p.parse_args(argv)
    print(f"load average {os.getloadavg()[0]:.2f}, mode {args.mode}")
    repeat = functools.partial(timeit.repeat, timer=time.thread_time, repeat=3)
    for name, fn in cases().items():
        number = max(1, int(0.02 / min(timeit.repeat(fn, number=1, repeat=5))))
        ratios = []
        for _ in range(args.rounds):
            plain = min(repeat(fn, number=number))
            with fastmath.patch(mode=args.mode):
                patched = min(repeat(fn, number=number))
            ratios.append(patched / plain)
        per_call = plain / number * 1e6
        print(f"{name:28s} {per_call:9.2f} us plain (CPU)  patched/plain {statistics.median(ratios):.3f}")
    print(f"load average {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
