"""Benchmark runner behind ``fastmath bench`` and bench/run.py.

For each function, dtype and size it times the NumPy/SciPy reference, each available
backend that has a kernel for it (forced through fastmath) and fastmath's default
(``auto``); prints the time per backend, the fastest backend, the backend auto chose
(``fastmath.explain``) and auto's time over the fastest; and checks the acceptance bound:
from 10^4 elements auto within 1.15x of the fastest backend, below that within the
reference's time + 0.5 us. Timings are medians of repeated runs, interleaved so that a
noisy neighbour slows every column alike. ``--plot`` draws time per element against size, one line per backend, with the
time of copying the same array as the floor no elementwise kernel can beat.
"""
from __future__ import annotations

import json
import time

import numpy as np

FUNCTIONS = ("exp", "log", "log1p", "expm1", "erf", "logsumexp")
SIZES = (10, 1000, 10**4, 10**5, 10**6, 10**7)
QUICK_SIZES = (10, 1000, 10**5, 10**7)
DTYPES = ("float64", "float32")
LARGE = 10**4  # from here auto is held to a ratio of the fastest backend, below to an overhead
MAX_RATIO = 1.15
MAX_OVERHEAD = 0.5e-6
TARGET = 0.02  # seconds per timed sample: enough calls that the clock's resolution is noise


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
    p.add_argument("--plot", metavar="FILE.png",
                   help="also draw time per element against size (needs matplotlib: "
                        "pip install 'fastmath-shim[bench]')")
    p.add_argument("--peers", action="store_true",
                   help="time fastmath beside numexpr, torch, mkl_umath, numba and jax, where "
                        "installed, on the peers grid (fastmath/_peers.py)")


def _input(name, n, dtype, rng):
    from ._registry import BY_NAME

    return BY_NAME[name].sample(n, dtype, rng)[0]


def _reference(name):
    from ._registry import BY_NAME

    return BY_NAME[name].reference()


def runs(name, backend) -> bool:
    """Whether ``backend`` has its own kernel for ``name`` (forced, it would run numpy's)."""
    from . import backends
    from ._registry import BY_NAME

    return backend == "numpy" or backends.get(backend).kernel(BY_NAME[name]) is not None


def _timer(fn, arg, kwargs, target):
    reps = [1]

    def once():
        n = reps[0]
        t = time.perf_counter()
        for _ in range(n):
            fn(arg, **kwargs)
        per = (time.perf_counter() - t) / n
        reps[0] = max(1, min(100_000, int(target / max(per, 1e-8))))
        return per
    return once


def measure(name, arg, kwargs, columns, rounds, target=TARGET):
    """Median time per call of each column, the columns' runs interleaved.

    A column is "reference" (NumPy/SciPy called directly), "copy" (copying the array:
    the memory-bandwidth floor), or a selection ("auto" or a backend) forced through
    fastmath.
    """
    import fastmath

    timers = {}
    for col in columns:
        if col == "copy":
            dst = np.empty_like(arg)
            fn, scope = (lambda a, dst=dst, **_: np.copyto(dst, a)), None
        elif col == "reference":
            fn, scope = _reference(name), None
        else:
            fn, scope = getattr(fastmath, name), col
        timers[col] = (_timer(fn, arg, kwargs, target), scope)
    samples = {c: [] for c in columns}
    for r in range(rounds + 2):
        for col, (once, scope) in timers.items():
            if scope is None:
                t = once()
            else:
                with fastmath.backend(scope):
                    t = once()
            if r > 1:  # the first rounds warm caches, pools, lazy imports and size the reps
                samples[col].append(t)
    return {c: float(np.median(v)) for c, v in samples.items()}


def _fmt(t):
    return f"{t * 1e6:9.1f}us" if t < 1e-3 else f"{t * 1e3:9.2f}ms"


def _verdict(size, times, best):
    if size >= LARGE:
        return times["auto"] <= MAX_RATIO * times[best]
    return times["auto"] <= times["reference"] + MAX_OVERHEAD


def run(functions, dtypes, sizes, backends, rounds, lse_shape=None, out=print, target=TARGET):
    import fastmath

    rng = np.random.default_rng(0)
    header = ["reference"] + list(backends) + ["auto", "copy"]
    rows = []
    out(f"{'function':<10}{'dtype':<8}{'size':>10}  " + "".join(f"{c:>11}" for c in header)
        + f"  {'fastest':>10} {'auto ran':>10} {'auto/best':>9}  ok")
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
            own = [b for b in backends if runs(name, b)]
            columns = ["reference"] + own + ["auto", "copy"]
            for kwargs in kw_list:
                times = measure(name, arg, kwargs, columns, rounds, target)
                best = min(own, key=times.__getitem__)
                chose = fastmath.explain(name, arg).backend
                ok = _verdict(size, times, best)
                label = "x".join(map(str, shape)) + (f" ax={kwargs['axis']}" if kwargs else "")
                out(f"{name:<10}{dtype:<8}{label:>10}  "
                    + "".join(f"{_fmt(times[c]) if c in times else '-':>11}" for c in header)
                    + f"  {best:>10} {chose:>10} {times['auto'] / times[best]:8.2f}x  "
                    + ("yes" if ok else "NO"))
                rows.append({"function": name, "dtype": dtype, "shape": list(shape),
                             "kwargs": kwargs, "times": times, "fastest": best,
                             "auto_chose": chose, "auto_over_best": times["auto"] / times[best],
                             "speedup": times["reference"] / times["auto"],
                             "auto_overhead_s": times["auto"] - times["reference"],
                             "within_bound": ok})
    return {"info": fastmath.info(), "backends": list(backends), "rows": rows}


def plot(result, path) -> None:
    """Time per element against size: one panel per function and dtype, a line per column."""
    try:
        import matplotlib
    except ImportError:
        raise SystemExit("--plot needs matplotlib: pip install 'fastmath-shim[bench]'") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in result["rows"] if len(r["shape"]) == 1]
    panels = sorted({(r["function"], r["dtype"]) for r in rows},
                    key=lambda p: (FUNCTIONS.index(p[0]), p[1]))
    dtypes = sorted({d for _, d in panels})
    names = list(dict.fromkeys(n for n, _ in panels))
    fig, axes = plt.subplots(len(names), len(dtypes), squeeze=False,
                             figsize=(5 * len(dtypes), 3.2 * len(names)))
    style = {"copy": dict(color="grey", linestyle=":", label="memory copy (floor)"),
             "auto": dict(color="black", linestyle="--", linewidth=2),
             "reference": dict(color="C0", linestyle="-.")}
    # a backend keeps its colour in panels where another has no line
    style.update({b: dict(color=f"C{i + 1}") for i, b in enumerate(result["backends"])})
    for (name, dtype) in panels:
        ax = axes[names.index(name)][dtypes.index(dtype)]
        cells = sorted((r for r in rows if (r["function"], r["dtype"]) == (name, dtype)),
                       key=lambda r: r["shape"][0])
        sizes = [r["shape"][0] for r in cells]
        for col in ["reference"] + result["backends"] + ["auto", "copy"]:
            if col not in cells[0]["times"]:
                continue  # no kernel of its own for this function
            per = [r["times"][col] / n * 1e9 for r, n in zip(cells, sizes)]
            kw = {"label": col, **style.get(col, {})}
            ax.plot(sizes, per, marker="o", markersize=3, **kw)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_title(f"{name} {dtype}")
        ax.set_xlabel("elements")
        ax.set_ylabel("ns per element")
        ax.grid(True, which="both", alpha=0.3)
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(args) -> int:
    import fastmath

    if getattr(args, "peers", False):
        from . import _peers

        return _peers.main(args)

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
    print(f"fastmath bench: {fastmath.info()['threads']} threads; median time per call; "
          f"ok = auto within {MAX_RATIO}x of the fastest backend from {LARGE} elements, "
          f"within the reference + {MAX_OVERHEAD * 1e6:.1f} us below\n")
    result = run(functions, args.dtypes.split(","), sizes, backends,
                 rounds=3 if args.quick else 7, lse_shape=shape,
                 target=0.005 if args.quick else TARGET)
    bad = [r for r in result["rows"] if not r["within_bound"]]
    print(f"\n{len(result['rows']) - len(bad)}/{len(result['rows'])} cells within the bound")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
        print(f"wrote {args.json}")
    if args.plot:
        plot(result, args.plot)
        print(f"wrote {args.plot}")
    return 0
