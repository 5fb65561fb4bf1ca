"""Every accelerated function at 10^6 and 10^7 elements, float64 and float32: median
time of the NumPy/SciPy reference and of fastmath's default (auto), and the speedup.

python bench/functions.py [--sizes 1e6,1e7] [--functions sin,cos] [--rounds 5]
"""
import argparse
import time

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


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--sizes", default="1e6,1e7")
    p.add_argument("--functions", default=None)
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args()
    sizes = [int(float(s)) for s in args.sizes.split(",")]
    names = args.functions.split(",") if args.functions else [s.name for s in ROWS]
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
