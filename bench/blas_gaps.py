"""Matrix products after other work: what OpenBLAS's spin between calls saves them.

    OPENBLAS_THREAD_TIMEOUT=24 python bench/blas_gaps.py

OpenBLAS's threads spin 2^OPENBLAS_THREAD_TIMEOUT cycles after each threaded call (28 by
default; ``import fastmath`` before NumPy sets 24 where it is unset), then sleep; a product
that comes later pays their wake-up. Each product here follows a busy wait of the gap (a
program's other work), 60 times; the figure is the median of the last 50, in us. Run it
once per setting in fresh processes (OpenBLAS reads the variable as NumPy loads it) and
report ``uptime``'s load average with it.
"""
from __future__ import annotations

import os
import statistics
import time

import numpy as np


def main():
    rng = np.random.default_rng(0)
    print(f"OPENBLAS_THREAD_TIMEOUT={os.environ.get('OPENBLAS_THREAD_TIMEOUT', '(unset)')}; "
          f"load average {os.getloadavg()[0]:.2f}")
    for n in (128, 256, 512):
        a, b = rng.standard_normal((n, n)), rng.standard_normal((n, n))
        row = []
        for gap_ms in (0.0, 0.5, 2.0, 10.0):
            times = []
            for _ in range(60):
                end = time.perf_counter() + gap_ms / 1e3
                while time.perf_counter() < end:
                    pass
                t0 = time.perf_counter()
                a @ b
                times.append(time.perf_counter() - t0)
            row.append(f"{gap_ms:g} ms: {statistics.median(times[10:]) * 1e6:.0f}")
        print(f"{n}x{n} float64 product after " + ", ".join(row) + " us")


if __name__ == "__main__":
    main()
