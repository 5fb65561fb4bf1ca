"""Reductions along rows, over the first axis and over every axis: plain NumPy vs the loop
mode.

NumPy's iterator calls a ufunc's loop once a row for ``x.sum(axis=1)`` and for
``x.sum(axis=0)`` of a C-contiguous array; for tall, narrow arrays (statistics' samples x
features) that costs several times the loop's work. The loop mode makes the same calls from
a plain C loop and splits them over the pool where that is NumPy's result bit for bit (see
docs/loops.md); a reduction over every axis (``x.sum()``) is one call of the loop, which
the loop mode cuts along the pairwise sum's own tree (add) or into parts (maximum,
minimum). This times, per case, plain NumPy, the loop mode, and the loop mode on one
thread (the calls run whole: what the plain C loop alone gives), each as the median of a
burst of calls, in interleaved rounds in one process; prints the medians over the rounds,
plain's ratio to each, whether the results are bitwise NumPy's, and the load average.

python bench/reductions.py [--rounds 7] [--burst 10]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import numpy as np  # noqa: E402

import fastmath  # noqa: E402
from fastmath.dispatch import _runtime  # noqa: E402

CASES = [  # (shape, ufunc name, axis, dtype)
    ((200_000, 8), "maximum", 1, "float64"),
    ((200_000, 8), "add", 1, "float64"),
    ((200_000, 4), "add", 1, "float64"),
    ((500_000, 6), "maximum", 0, "float64"),
    ((500_000, 6), "minimum", 0, "float64"),
    ((200_000, 8), "add", 0, "float64"),
    ((200_000, 8), "add", 0, "float32"),
    ((100_000, 20), "multiply", 0, "float64"),
    ((20_000, 50), "maximum", 0, "float64"),
    ((4_000, 250), "add", 0, "float64"),
    ((1_000, 1_000), "maximum", 0, "float64"),
    ((16, 100_000), "add", 0, "float64"),
    ((10_000,), "add", None, "float64"),  # over every axis: x.sum(), np.max(x)
    ((100_000,), "add", None, "float64"),
    ((1_000_000,), "add", None, "float64"),
    ((10_000_000,), "add", None, "float64"),
    ((1_000_000,), "add", None, "float32"),
    ((2_000, 500), "add", None, "float64"),
    ((1_000_000,), "maximum", None, "float64"),
    ((10_000_000,), "minimum", None, "float32"),
]
MODES = ("plain", "loops", "loops, one thread")


def _ms(seconds):
    """A time in ms, or in us below a tenth of a millisecond (a sum of 10^4 elements)."""
    return (f"{seconds * 1e6:7.2f} us" if seconds < 1e-4 else f"{seconds * 1e3:7.3f} ms")


def _burst(fn, k):
    times = []
    for _ in range(k):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def _timed(mode, fn, k):
    if mode == "plain":
        return _burst(fn, k)
    with fastmath.patch(mode="loops"):
        if mode == "loops":
            return _burst(fn, k)
        threads = _runtime.threads()
        _runtime.set_threads(1)
        try:
            return _burst(fn, k)
        finally:
            _runtime.set_threads(threads)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--burst", type=int, default=10, help="calls a burst (its median counts)")
    args = p.parse_args(argv)
    print(f"load average {os.getloadavg()[0]:.2f}, {os.cpu_count()} cores, numpy "
          f"{np.__version__}; medians of {args.rounds} interleaved rounds of bursts of "
          f"{args.burst} calls")
    rng = np.random.default_rng(0)
    for shape, name, axis, dtype in CASES:
        ufunc = getattr(np, name)
        x = rng.standard_normal(shape).astype(dtype)
        plain = ufunc.reduce(x, axis=axis)
        with fastmath.patch(mode="loops"):
            got = ufunc.reduce(x, axis=axis)
            same = np.asarray(got).tobytes() == np.asarray(plain).tobytes()
            for _ in range(20):  # the pacing's first whole runs
                ufunc.reduce(x, axis=axis)
        times = {m: [] for m in MODES}
        for r in range(args.rounds):
            for mode in MODES[r % len(MODES):] + MODES[:r % len(MODES)]:
                times[mode].append(_timed(mode, lambda: ufunc.reduce(x, axis=axis),
                                          args.burst))
        med = {m: statistics.median(v) for m, v in times.items()}
        cells = "  ".join(f"{m} {_ms(med[m])} {med['plain'] / med[m]:5.2f}x"
                          for m in MODES[1:])
        print(f"{name:8s} axis {axis} {str(shape):15s} {dtype:7s} plain "
              f"{_ms(med['plain'])}  {cells}  {'bitwise' if same else 'DIFFERS'}")
    print(f"load average {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
