"""Per-call overhead of every registry row: the reference, ``auto``, each forced backend.

For a Python scalar, 10 and 1000 float64 elements, prints the median time per call (us)
of NumPy/SciPy's own function, fastmath under ``auto`` and under each available backend,
and, at 1000 elements, each backend's raw kernel writing into a preallocated output (what
the front end adds is the difference). Rounds are interleaved, so that a busy machine
slows every column alike; the load average is printed with the figures.

    python bench/overhead.py [--functions exp,power,...] [--sizes scalar,10]
                             [--backends numpy,...] [--rounds 7] [--cpu]
"""
import argparse
import os
import statistics
import time
import warnings

import numpy as np

import fastmath
from fastmath import backends
from fastmath._registry import ROWS

SIZES = ("scalar", 10, 1000)


def operands(spec, size):
    """Inputs inside the row's domain (arccosh starts at 1)."""
    lo = 1.5 if spec.name == "arccosh" else 0.1
    if size == "scalar":
        x = lo + 0.3
    else:
        x = np.linspace(lo, lo + 0.8, size)
    return (x, x) if spec.kind == "binary" else (x,)


def kernel_call(spec, backend, xs):
    """A call of ``backend``'s raw kernel for ``xs`` into a preallocated output, or None."""
    kernel = backends.get(backend).kernel(spec)
    if kernel is None:
        return None
    x = xs[0]
    if spec.kind == "logsumexp":
        return lambda: kernel(x, (0,), None)
    out = np.empty_like(x)
    if spec.kind == "softmax":
        return lambda: kernel(x, (0,), out)
    return lambda: kernel(*xs, out)


_clock = time.perf_counter


def per_call(fn, budget=0.004):
    """Seconds per call of ``fn``, from a batch lasting about ``budget`` seconds."""
    n, t = 1, 0.0
    while True:
        start = _clock()
        for _ in range(n):
            fn()
        t = _clock() - start
        if t >= budget:
            return t / n
        n *= 4 if t < budget / 4 else 2


def row_cells(spec, size, forced, rounds):
    """{column: median us per call} for one row and size."""
    ours, ref = getattr(fastmath, spec.name), spec.reference()
    xs = operands(spec, size)
    call = lambda: ours(*xs)  # noqa: E731
    cells = {"reference": ("auto", lambda: ref(*xs)), "auto": ("auto", call)}
    for b in forced:
        cells[b] = (b, call)
        raw = kernel_call(spec, b, xs) if size == 1000 else None
        if raw is not None:
            cells[b + " kernel"] = (b, raw)
    times = {}
    for k, (b, fn) in cells.items():
        try:
            with fastmath.backend(b):
                fn()
            times[k] = []
        except Exception:  # noqa: BLE001 - a call the function does not take: no figure
            pass
    for _ in range(rounds):
        for k in times:
            b, fn = cells[k]
            with fastmath.backend(b):  # entered outside the timed calls
                times[k].append(per_call(fn))
    return {k: statistics.median(v) * 1e6 for k, v in times.items()}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--functions", default="", help="comma-separated row names (all)")
    p.add_argument("--sizes", default=",".join(map(str, SIZES)),
                   help=f"comma-separated, of {', '.join(map(str, SIZES))} (all)")
    p.add_argument("--backends", default=None,
                   help="comma-separated forced backends to show (every available one)")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--cpu", action="store_true",
                   help="time in this process's CPU time, not wall time: steadier on a busy "
                        "machine, but counts every thread (use for the scalar and 10 sizes)")
    args = p.parse_args(argv)
    if args.cpu:
        global _clock
        _clock = time.process_time
    sizes = [s for s in SIZES if str(s) in args.sizes.split(",")]
    names = [n for n in args.functions.split(",") if n]
    unknown = set(names) - {r.name for r in ROWS}
    if unknown:
        p.error(f"unknown functions {sorted(unknown)}; valid: {', '.join(r.name for r in ROWS)}")
    rows = [r for r in ROWS if not names or r.name in names]
    forced = [b for b in fastmath.available_backends() if b != "auto"]
    if args.backends is not None:
        forced = [b for b in forced if b in args.backends.split(",")]
    print(f"load average {os.getloadavg()}; numpy {np.__version__}; "
          f"backends {', '.join(forced)}; median us per call ({'CPU' if args.cpu else 'wall'}"
          f" time) of {args.rounds} interleaved rounds")
    warnings.simplefilter("ignore")
    with np.errstate(all="ignore"):
        for size in sizes:
            print(f"\n== {size} {'elements' if size != 'scalar' else '(Python float)'}")
            header = None
            for spec in rows:
                cells = row_cells(spec, size, forced, args.rounds)
                if header is None or list(cells) != header:
                    header = list(cells)
                    print(f"{'function':<12}" + "".join(f"{k:>18}" for k in header)
                          + f"{'auto-ref':>10}")
                line = "".join(f"{cells.get(k, float('nan')):>18.2f}" for k in header)
                extra = cells.get("auto", np.nan) - cells.get("reference", np.nan)
                print(f"{spec.name:<12}{line}{extra:>10.2f}")


if __name__ == "__main__":
    main()
