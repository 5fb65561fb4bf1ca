"""Batched inner products and matrix products: every formulation, on the issue's shapes.

For (500, 500), (100000, 64), (64, 100000), (32, 512, 512) in float32 and float64, times
``numpy.vecdot`` (the reference for vecdot), ``numpy.einsum`` (the reference for einsum),
the other formulations fastmath chooses among, and fastmath's own calls. Rounds are
interleaved (a noisy neighbour slows every column alike); each cell is the median wall
time and, in brackets, the median process CPU time (threads add theirs). The shape rule
in fastmath/frontends/_linalg.py is read off these tables.

python bench/vecdot.py [--rounds 7] [--quick]
"""
import argparse
import time

import numpy as np

import fastmath
from fastmath.frontends import _linalg
from fastmath.dispatch import _parallel

SHAPES = [(500, 500), (100000, 64), (64, 100000), (32, 512, 512)]
# the matmul pattern timed on each shape: the Gram-matrix forms on the long thin ones
MATMUL = {(500, 500): ("ij,jk->ik", lambda a, b: (a, b)),
          (100000, 64): ("ij,ik->jk", lambda a, b: (a.T, b)),
          (64, 100000): ("ij,kj->ik", lambda a, b: (a, b.T)),
          (32, 512, 512): ("bij,bjk->bik", lambda a, b: (a, b))}


def _torch():
    try:
        import torch
    except ImportError:
        return None
    return torch


def dot_formulations(torch):
    def chunks(f):
        def run(a, b, out):
            n = out.shape[0]
            tasks = [lambda i=i, j=j: f(a[i:j], b[i:j], out[i:j])
                     for i, j in _parallel.bounds(n, _parallel.threads())]
            _parallel.run(tasks)
        return run

    def mulsum(a, b, out):
        np.sum(a * b, axis=-1, out=out)

    f = {"numpy.vecdot": lambda a, b, o: np.vecdot(a, b, out=o),
         "numpy.einsum": lambda a, b, o: np.einsum("...i,...i->...", a, b, out=o),
         "einsum optimize": lambda a, b, o: np.einsum("...i,...i->...", a, b, out=o,
                                                      optimize=True),
         "vecdot chunks": chunks(lambda a, b, o: np.vecdot(a, b, out=o)),
         "(a*b).sum chunks": chunks(mulsum),
         "matmul": _linalg._matmul_rows,
         "matmul chunks": chunks(_linalg._matmul_rows),
         "fastmath.vecdot": lambda a, b, o: fastmath.vecdot(a, b),
         "fastmath.einsum": lambda a, b, o: fastmath.einsum("...i,...i->...", a, b)}
    if torch is not None:
        def t(fn):
            def run(a, b, out):
                with torch.inference_mode():
                    fn(torch.as_tensor(a), torch.as_tensor(b), torch.as_tensor(out))
            return run
        f["torch matmul"] = t(lambda a, b, o: torch.matmul(a[..., None, :], b[..., :, None],
                                                           out=o[..., None, None]))
        f["torch (a*b).sum"] = t(lambda a, b, o: torch.sum(a * b, -1, out=o))
        f["torch linalg.vecdot"] = t(lambda a, b, o: torch.linalg.vecdot(a, b, out=o))
    return f


def matmul_formulations(torch, sub, prep):
    f = {"numpy.einsum": lambda a, b: np.einsum(sub, a, b),
         "einsum optimize": lambda a, b: np.einsum(sub, a, b, optimize=True),
         "matmul": lambda a, b: np.matmul(*prep(a, b)),
         "fastmath.einsum": lambda a, b: fastmath.einsum(sub, a, b)}
    if torch is not None:
        def tm(a, b):
            A, B = prep(a, b)
            with torch.inference_mode():
                return torch.matmul(torch.as_tensor(A), torch.as_tensor(B))
        f["torch matmul"] = tm
    return f


def measure(fns, args, rounds):
    calls = {}
    for k, fn in fns.items():
        fn(*args)  # warm up: threads, BLAS buffers
        t = time.perf_counter()
        fn(*args)
        # fast calls are timed in batches of about 2 ms, so timer and scheduler noise
        # does not swamp them
        calls[k] = max(1, int(2e-3 / max(time.perf_counter() - t, 1e-7)))
    wall = {k: [] for k in fns}
    cpu = {k: [] for k in fns}
    for _ in range(rounds):
        for k, fn in fns.items():
            c, t = time.process_time(), time.perf_counter()
            for _ in range(calls[k]):
                fn(*args)
            wall[k].append((time.perf_counter() - t) / calls[k])
            cpu[k].append((time.process_time() - c) / calls[k])
    return {k: (float(np.median(wall[k])), float(np.median(cpu[k]))) for k in fns}


def report(title, times, ref):
    print(f"\n{title}")
    base = times[ref][0]
    for k, (w, c) in sorted(times.items(), key=lambda kv: kv[1][0]):
        print(f"  {k:<22}{w * 1e3:>10.3f} ms ({c * 1e3:>8.2f} cpu){base / w:>7.2f}x vs {ref}")


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--quick", action="store_true", help="small shapes, 2 rounds: a smoke run")
    args = p.parse_args()
    torch = _torch()
    rng = np.random.default_rng(0)
    shapes = [(50, 50), (1000, 8)] if args.quick else SHAPES
    rounds = 2 if args.quick else args.rounds
    for shape in shapes:
        for dtype in ("float32", "float64"):
            a = rng.standard_normal(shape).astype(dtype)
            b = rng.standard_normal(shape).astype(dtype)
            out = np.empty(shape[:-1], dtype)
            times = measure(dot_formulations(torch), (a, b, out), rounds)
            report(f"batched dot {shape} {dtype}", times, "numpy.vecdot")
            sub, prep = MATMUL.get(shape, ("ij,jk->ik", lambda a, b: (a, b.T.copy())))
            if sub == "ij,jk->ik" and shape[0] != shape[1]:
                continue
            fns = matmul_formulations(torch, sub, prep)
            report(f"einsum {sub!r} {shape} {dtype}",
                   measure(fns, (a, b), max(1, rounds // 3) if a.size > 1e6 else rounds),
                   "numpy.einsum")


if __name__ == "__main__":
    main()
