"""Worst ULP distance of torch's CUDA kernels from NumPy/SciPy, per registry row and dtype.

    python bench/gpu_ulp.py [--n N] [--json FILE]

For each row with a torch kernel (unary, binary, elementwise) and float32/float64: ``N``
points sampled over the row's domain (``Spec.sample``) plus, for one-operand rows, the
5000003 points tests/backends/test_cuda.py spreads over [-30, 30]; the kernel runs on the
GPU, the reference on the host, and the worst distance where the reference is finite is
printed with the row's bound for torch-cuda (``Spec.bound``) and a histogram. Then the
bits of the NaN CUDA writes for square and reciprocal. ``gpu_ulp`` in
fastmath/_registry.py comes from this script's output.
"""
from __future__ import annotations

import argparse
import json
import time

import numpy as np
import torch

from fastmath._registry import ROWS
from fastmath.dispatch._verify import ulp_distance


def kernel(name):
    f = torch
    for part in name.split("."):
        f = getattr(f, part)
    return f


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=1 << 22, help="sampled points per row and dtype")
    p.add_argument("--json", help="write the figures here")
    args = p.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("no CUDA device: this script measures torch's CUDA kernels")
    rng, out, t0 = np.random.default_rng(7), {}, time.time()
    print(torch.cuda.get_device_name(0), "torch", torch.__version__, "numpy", np.__version__)
    for spec in ROWS:
        name = spec.kernels.get("torch")
        if not name or spec.kind not in ("unary", "binary", "elementwise"):
            continue
        for dt in ("float32", "float64"):
            xs = spec.sample(args.n, dt, rng)
            if spec.nin == 1:
                spread = np.linspace(-30, 30, 5_000_003).astype(dt)
                xs = (np.concatenate([xs[0], np.abs(spread) if spec.name.startswith("log")
                                      else spread]),)
            with np.errstate(all="ignore"):
                ref = np.asarray(spec.reference()(*xs))
            if ref.dtype != np.dtype(dt):
                continue
            got = kernel(name)(*[torch.as_tensor(x, device="cuda") for x in xs]).cpu().numpy()
            keep = np.isfinite(ref)
            d = ulp_distance(got[keep], ref[keep])
            i = int(np.argmax(d))
            worst, bound = int(d[i]), spec.bound(dt, "torch-cuda")
            hist = {int(u): int((d == u).sum()) for u in np.unique(np.minimum(d, 99))}
            at = [float(x[keep][i]) for x in xs]
            print(f"{spec.name:12s} {dt:8s} worst {worst:3d} bound {bound:2d} "
                  f"{'OVER' if worst > bound else '':4s} at {at} hist {hist}", flush=True)
            out[f"{spec.name}/{dt}"] = dict(worst=worst, bound=bound, at=at, hist=hist)
    for name in ("square", "reciprocal"):
        for dt, it in (("float32", np.uint32), ("float64", np.uint64)):
            x = np.array([np.nan, -np.nan], dt)
            g = getattr(torch, name)(torch.as_tensor(x, device="cuda")).cpu().numpy()
            with np.errstate(all="ignore"):
                e = getattr(np, name)(x)
            print(f"{name} {dt} NaN bits: cuda {[hex(v) for v in g.view(it)]}, "
                  f"numpy {[hex(v) for v in e.view(it)]}")
    print(f"{time.time() - t0:.0f} s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
