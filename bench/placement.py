"""Where the output lies against the input: a kernel's time per element past the caches,
by the distance between them modulo 4 KiB (the figure behind the prefetch in
fastmath/dispatch/_runtime.c's loop over SLEEF's vector functions).

One thread (FASTMATH_NUM_THREADS=1, torch.set_num_threads(1)), one input of N elements at
a page's start, outputs at each distance; per distance the best of ROUNDS calls, for:
fastmath's forced torch-cpu (SLEEF's function in the runtime's loop: log1p, expm1), torch
itself writing into the same output, NumPy, and fastmath's forced mkl. On the 2-vCPU Intel
Xeon VM (AVX-512, load 1.0), expm1 of 4x10^6 float64, distances 0-3584 by 512: torch
3.45-6.18 ns an element, fastmath's torch-cpu (the prefetching loop) 2.65-2.76, NumPy
1.64-2.02, fastmath's mkl 1.35-1.53.

python bench/placement.py [--function expm1] [--dtype float64] [--size 4000000]
"""
import argparse
import os
import time

os.environ.setdefault("FASTMATH_NUM_THREADS", "1")

import numpy as np  # noqa: E402

import fastmath  # noqa: E402
from fastmath import backends  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--function", default="expm1")
    ap.add_argument("--dtype", default="float64")
    ap.add_argument("--size", type=int, default=4_000_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--step", type=int, default=256, help="bytes between distances")
    a = ap.parse_args()
    dt, n = np.dtype(a.dtype), a.size
    isz = dt.itemsize
    ref = getattr(np, a.function)
    mine = getattr(fastmath, a.function)
    ways = {"numpy": lambda x, o: ref(x, out=o)}
    for backend in ("torch-cpu", "mkl"):
        if backends.why_unavailable(backend) is None:
            ways[f"fastmath {backend}"] = (
                lambda x, o, b=backend: _forced(mine, b, x, o))
    if backends.why_unavailable("torch-cpu") is None:
        import torch

        torch.set_num_threads(1)
        op = getattr(torch, a.function)
        ways["torch"] = lambda x, o: op(torch.as_tensor(x), out=torch.as_tensor(o))
    xb = np.empty(n + 4096 // isz, dt)
    x = xb[(-xb.ctypes.data % 4096) // isz:][:n]
    x[:] = np.random.default_rng(0).uniform(0.1, 10, n)
    ob = np.empty(n + 8192 // isz, dt)
    start = (-ob.ctypes.data % 4096) // isz
    print(f"{a.function} {dt} {n} elements, one thread; ns an element, best of {a.rounds}; "
          f"load average {os.getloadavg()[0]:.2f}")
    print(f"{'distance':>8s} " + " ".join(f"{w:>18s}" for w in ways))
    for d in range(0, 4096, a.step):
        o = ob[start + d // isz:][:n]
        best = {}
        for _ in range(a.rounds):
            for w, f in ways.items():
                f(x, o)
                t = time.perf_counter()
                f(x, o)
                best[w] = min(best.get(w, 1e9), time.perf_counter() - t)
        print(f"{d:8d} " + " ".join(f"{best[w] / n * 1e9:18.2f}" for w in ways))


def _forced(f, backend, x, o):
    with fastmath.backend(backend):
        f(x, out=o)


if __name__ == "__main__":
    main()
