"""Benchmark runner behind ``fastmath bench`` and bench/run.py.

For each function, dtype and size it times the NumPy/SciPy reference, each available
backend forced through fastmath, and fastmath's default (``auto``), and prints the times
with the speedup of the default over the reference. Timings are the median of repeated
runs, interleaved so that a noisy neighbour slows every column alike.
"""
from __future__ import annotations

import json
import time

import numpy as np

FUNCTIONS = ("exp", "log", "log1p", "expm1", "erf", "logsumexp")
SIZES = (10, 1000, 10**4, 10**5, 10**6, 10**7)
QUICK_SIZES = (10, 1000, 10**5, 10**7)
DTYPES = ("float64", "float32")


def add_arguments(p) -> None:
    p.add_argument("--functions", default=",".join(FUNCTIONS),
                   help="comma-separated functions (default: all)")
    p.add_argument("--dtypes", default=",".join(DTYPES), help="comma-separated dtypes")
    p.add_argument("--sizes", default=None,
                   help="comma-separated element counts (default: 10 to 10^7)")
    p.add_argument("--backends", default=None,
                   help="comma-separated backends to force (default: every available one)")
    p.add_argument("--quick", action="store_true", help="fewer sizes and repeats (~1 minute)")
    p.add_argument("--lse-shape", default="3000x3000",
                   help="shape of the 2-D logsumexp case timed in addition to 1-D sizes")
    p.add_argument("--json", metavar="FILE", help="also write the results as JSON")


def _input(name, n, dtype, rng):
    if name == "logsumexp":
        return rng.standard_normal(n).astype(dtype)
    lo, hi = {"log": (0.01, 100), "log1p": (-0.9, 100), "erf": (-3, 3)}.get(name, (-10, 10))
    return rng.uniform(lo, hi, n).astype(dtype)


def _reference(name):
    import scipy.special

    return getattr(scipy.special, name) if name in ("erf", "logsumexp") else getattr(np, name)


def _timer(fn, arg, kwargs, size):
    reps = 1 if size >= 10**7 else 3 if size >= 10**6 else max(5, min(20000, 2 * 10**6 // size))

    def once():
        t = time.perf_counter()
        for _ in range(reps):
            fn(arg, **kwargs)
        return (time.perf_counter() - t) / reps
    return once


def measure(name, arg, kwargs, columns, rounds):
    """Median time per call of each column, the columns' runs interleaved."""
    import fastmath

    timers = {}
    for col in columns:
        if col == "reference":
            fn, scope = _reference(name), None
        else:
            fn, scope = getattr(fastmath, name), col
        timers[col] = (_timer(fn, arg, kwargs, arg.size), scope)
    samples = {c: [] for c in columns}
    for r in range(rounds + 1):
        for col, (once, scope) in timers.items():
            if scope is None:
                t = once()
            else:
                with fastmath.backend(scope):
                    t = once()
            if r:  # the first round warms caches, pools and lazy imports
                samples[col].append(t)
    return {c: float(np.median(v)) for c, v in samples.items()}


def _fmt(t):
    return f"{t * 1e6:9.1f}us" if t < 1e-3 else f"{t * 1e3:9.2f}ms"


def run(functions, dtypes, sizes, backends, rounds, lse_shape=None, out=print):
    import fastmath

    rng = np.random.default_rng(0)
    columns = ["reference"] + [b for b in backends] + ["auto"]
    rows = []
    head = f"{'function':<10}{'dtype':<8}{'size':>10}  " + "".join(f"{c:>12}" for c in columns)
    out(head + f"{'speedup':>9}")
    cases = [(f, d, (n,)) for f in functions for d in dtypes for n in sizes]
    if lse_shape and "logsumexp" in functions:
        cases += [("logsumexp", d, lse_shape) for d in dtypes]
    with np.errstate(all="ignore"):
        for name, dtype, shape in cases:
            size = int(np.prod(shape))
            arg = _input(name, size, dtype, rng).reshape(shape)
            kw_list = [{}]
            if name == "logsumexp" and len(shape) > 1:
                kw_list = [{"axis": None}, {"axis": 0}, {"axis": 1}]
            for kwargs in kw_list:
                times = measure(name, arg, kwargs, columns, rounds)
                speedup = times["reference"] / times["auto"]
                label = "x".join(map(str, shape)) + (f" ax={kwargs['axis']}" if kwargs else "")
                out(f"{name:<10}{dtype:<8}{label:>10}  "
                    + "".join(f"{_fmt(times[c]):>12}" for c in columns) + f"{speedup:8.2f}x")
                rows.append({"function": name, "dtype": dtype, "shape": list(shape),
                             "kwargs": kwargs, "times": times, "speedup": speedup,
                             "auto_overhead_s": times["auto"] - times["reference"]})
    return {"info": fastmath.info(), "rows": rows}


def main(args) -> int:
    import fastmath

    functions = [f for f in args.functions.split(",") if f]
    unknown = set(functions) - set(FUNCTIONS)
    if unknown:
        raise SystemExit(f"unknown function(s) {sorted(unknown)}; choose from {', '.join(FUNCTIONS)}")
    sizes = (tuple(int(float(s)) for s in args.sizes.split(",")) if args.sizes
             else QUICK_SIZES if args.quick else SIZES)
    avail = [b for b in fastmath.available_backends() if b != "auto"]
    backends = args.backends.split(",") if args.backends else avail
    for b in backends:
        if b not in avail:
            raise SystemExit(f"backend {b!r} is not available here; available: {', '.join(avail)}")
    shape = tuple(int(s) for s in args.lse_shape.split("x")) if args.lse_shape else None
    print(f"fastmath bench: {fastmath.info()['threads']} threads; "
          f"median time per call; speedup = reference / fastmath default (auto)\n")
    result = run(functions, args.dtypes.split(","), sizes, backends,
                 rounds=3 if args.quick else 7, lse_shape=shape)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
        print(f"\nwrote {args.json}")
    return 0
