"""``fastmath bench --peers --learn``: what ``auto`` gets after warming up, with no calibration.

The peers grid (exp, log, log1p, expm1, erf x float32/float64 x 10^4..10^7 elements, and
logsumexp from 10^3) is run twice in one process, with no calibration file and an empty
store of learned choices (a fresh cache folder), under ``FASTMATH_AUTO=learn``: the first
pass is the program's warm-up, the second what it gets afterwards. Each cell times
NumPy/SciPy, ``auto`` and fastmath with each CPU backend forced, rounds interleaved
(``_peers.measure``), and reports ``auto`` over the fastest forced backend and over
NumPy/SciPy. Each pass's total is the mean time of every ``auto`` call of the pass, the
first calls (where it learns) included, summed over the cells; the wall time of each
whole pass (every column) is printed too.
"""
from __future__ import annotations

import os
import tempfile
import time

from .._numpy import np

from . import _peers

SIZES = (10**4, 10**5, 10**6, 10**7)
LSE_SIZES = (10**3,) + SIZES
FASTEST = 1.05  # auto over the fastest forced backend, at most
REFERENCE = 1.03  # auto over NumPy/SciPy, at most


def _forced_lse(backend):
    def run(a):
        import fastmath

        with fastmath.backend(backend):
            return fastmath.logsumexp(a)
    return run


def columns(name, backends):
    """(label, callable): NumPy/SciPy, auto, each forced backend."""
    import scipy.special

    import fastmath

    if name == "logsumexp":
        cols = [("numpy/scipy", scipy.special.logsumexp), ("fastmath auto", fastmath.logsumexp)]
        from .. import backends as _backends
        from .._registry import BY_NAME

        forced = {f"fastmath {b}": _forced_lse(b) for b in backends
                  if _backends.get(b).kernel(BY_NAME[name]) is not None}
    else:
        ref = getattr(scipy.special, name) if name == "erf" else getattr(np, name)
        cols = [("numpy/scipy", ref), ("fastmath auto", getattr(fastmath, name))]
        forced = {f"fastmath {b}": _peers._forced(b)(name) for b in backends}
    return cols + [(label, fn) for label, fn in forced.items() if fn is not None]


def cells(functions, dtypes, sizes=SIZES, lse_sizes=LSE_SIZES):
    for name in functions:
        for dtype in dtypes:
            for n in (lse_sizes if name == "logsumexp" else sizes):
                yield name, dtype, n


def one_pass(grid, backends, rounds, target, out=print, label=""):
    """Every cell of ``grid`` once: its rows, and the pass's total for auto."""
    import fastmath

    rng = np.random.default_rng(0)
    rows, total = [], 0.0
    for name, dtype, n in grid:
        x = _peers._input(name, (n,), dtype, rng)
        cols = columns(name, backends)
        spent = {}
        times, _ = _peers.measure(cols, x, rounds, target, totals=spent)
        seconds, calls = spent["fastmath auto"]
        forced = {k: v for k, v in times.items() if k.startswith("fastmath ")
                  and k != "fastmath auto"}
        best = min(forced, key=forced.get) if forced else "numpy/scipy"
        e = fastmath.explain(name, x)
        row = {"function": name, "dtype": dtype, "size": n, "times": times,
               "fastest_forced": best,
               "auto_over_fastest_forced": times["fastmath auto"] / times.get(best, times[
                   "numpy/scipy"]),
               "auto_over_reference": times["fastmath auto"] / times["numpy/scipy"],
               "auto_mean": seconds / max(calls, 1), "auto_calls": calls,
               "choice": e.backend, "how": e.how}
        total += row["auto_mean"]
        rows.append(row)
        out(f"{label}{_format(row)}")
        del x
    return rows, total


def _format(row):
    t = row["times"]
    flags = ("" if row["auto_over_fastest_forced"] <= FASTEST else " OVER-FASTEST") + (
        "" if row["auto_over_reference"] <= REFERENCE else " OVER-REFERENCE")
    return (f"{row['function']} {row['dtype']} {row['size']:.0e}: auto {_us(t['fastmath auto'])}"
            f" = {row['auto_over_fastest_forced']:.3f}x {row['fastest_forced']} "
            f"({_us(t[row['fastest_forced']])}), {row['auto_over_reference']:.3f}x numpy/scipy "
            f"({_us(t['numpy/scipy'])}); auto ran {row['choice']} ({row['how']}){flags}")


def _us(s):
    return f"{s * 1e6:.1f}us"


def run(functions, dtypes, rounds=5, target=_peers.TARGET, out=print, sizes=SIZES,
        lse_sizes=LSE_SIZES):
    """Both passes in this process, from an empty store and no calibration file."""
    import fastmath
    from ..dispatch import _config

    saved = {k: os.environ.get(k) for k in ("XDG_CACHE_HOME", "FASTMATH_CALIBRATION",
                                            "FASTMATH_AUTO")}
    with tempfile.TemporaryDirectory() as cache:
        os.environ.update(XDG_CACHE_HOME=cache, FASTMATH_AUTO="learn")
        os.environ.pop("FASTMATH_CALIBRATION", None)
        _config.reload()
        try:
            backends = [b for b in fastmath.available_backends()
                        if b not in ("auto", "torch-cuda")]
            grid = list(cells(functions, dtypes, sizes, lse_sizes))
            started = time.perf_counter()
            warm, warm_total = one_pass(grid, backends, rounds, target, out, "warm-up  ")
            middle = time.perf_counter()
            timed, timed_total = one_pass(grid, backends, rounds, target, out, "timed    ")
            ended = time.perf_counter()
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
            _config.reload()
    return {"load_average": os.getloadavg(), "rounds": rounds,
            "seconds": [middle - started, ended - middle],
            "warm_up": warm, "timed": timed, "warm_up_total": warm_total,
            "timed_total": timed_total,
            "over_fastest": [_cell(r) for r in timed if r["auto_over_fastest_forced"] > FASTEST],
            "over_reference": [_cell(r) for r in timed if r["auto_over_reference"] > REFERENCE]}


def _cell(row):
    return f"{row['function']} {row['dtype']} {row['size']}"


def main(args) -> int:
    """``fastmath bench --peers --learn`` or ``bench/peers.py --learn``."""
    rounds, functions, target = _peers.options(args)
    dtypes = [d for d in args.dtypes.split(",") if d]
    load = ", ".join(f"{v:.2f}" for v in os.getloadavg())
    print(f"fastmath bench --peers --learn: no calibration file, an empty store; a warm-up "
          f"pass then a timed pass; medians of {rounds} interleaved rounds; load average {load}")
    sizes = tuple(int(float(s)) for s in args.sizes.split(",")) if args.sizes else SIZES
    lse = tuple(n for n in LSE_SIZES if not args.sizes or n in sizes or n < min(sizes))
    r = run(functions, dtypes, rounds, target, sizes=sizes, lse_sizes=lse)
    print(f"timed pass: auto within {FASTEST}x of the fastest forced backend in "
          f"{len(r['timed']) - len(r['over_fastest'])} of {len(r['timed'])} cells"
          + (f" (not: {', '.join(r['over_fastest'])})" if r["over_fastest"] else ""))
    print(f"timed pass: auto within {REFERENCE}x of NumPy/SciPy in "
          f"{len(r['timed']) - len(r['over_reference'])} of {len(r['timed'])} cells"
          + (f" (not: {', '.join(r['over_reference'])})" if r["over_reference"] else ""))
    ratio = r["warm_up_total"] / r["timed_total"]
    print(f"auto's total (mean per call, summed over cells): warm-up pass "
          f"{r['warm_up_total'] * 1e3:.2f} ms, timed pass {r['timed_total'] * 1e3:.2f} ms: "
          f"{ratio:.3f}x; the whole passes (every column) {r['seconds'][0]:.1f} s and "
          f"{r['seconds'][1]:.1f} s; load average now "
          f"{', '.join(f'{v:.2f}' for v in os.getloadavg())}")
    if args.json:
        import json

        with open(args.json, "w") as f:
            json.dump(r, f, indent=1)
        print(f"wrote {args.json}")
    return 0
