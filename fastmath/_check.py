"""``fastmath check``: does every backend on this machine give NumPy's/SciPy's results?

Each registry row runs on each available backend (and ``auto``) over special values
(zeros of both signs, subnormals, huge values, infinities, NaN) and a spread over the
whole domain, in several dtypes, and is compared with the reference: bitwise for the
numpy backend (it runs the reference's own loops), within the registry's ULP bound for
the others. The log records of each call say which backend really ran it, so a backend
that declined a dtype is reported as such rather than credited with NumPy's result.
"""
from __future__ import annotations

import logging

import numpy as np

DTYPES = ("float64", "float32", "float16", "int32", "complex128")
SPECIALS = (0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 2.0, 10.0, -10.0, 88.0, -88.0, 100.0, -100.0,
            700.0, -700.0, 750.0, -750.0, 1e-310, -1e-310, 1e-30, -1e-30, 1e300, -1e300,
            np.inf, -np.inf, np.nan)
BITWISE = ("numpy",)


def ulp_distance(a, b):
    """Elementwise distance in units in the last place between two float arrays.

    NaN against NaN counts as 0; NaN against a number, or infinities against anything
    else, count as the largest distance.
    """
    a, b = np.asarray(a), np.asarray(b)
    itype = {2: np.int16, 4: np.int32, 8: np.int64}[a.dtype.itemsize]
    lo = np.iinfo(itype).min
    ai, bi = a.view(itype).astype(np.int64), b.view(itype).astype(np.int64)
    # sign-magnitude bit patterns onto one monotonic integer line
    ai, bi = np.where(ai < 0, lo - ai, ai), np.where(bi < 0, lo - bi, bi)
    d = np.where(np.isnan(a) & np.isnan(b), 0, np.abs(ai - bi))
    return np.where(np.isnan(a) ^ np.isnan(b), np.iinfo(np.int64).max, d)


def samples(dtype, n=4096, seed=0):
    """Special values, then values from 1e-8 to 1e3 in magnitude, both signs."""
    rng = np.random.default_rng(seed)
    dt = np.dtype(dtype)
    if dt.kind in "iu":
        return rng.integers(-1000, 1000, n).astype(dt)
    spread = rng.uniform(-1, 1, n) * 10.0 ** rng.uniform(-8, 3, n)
    with np.errstate(all="ignore"):
        base = np.concatenate([np.array(SPECIALS), spread])[:n]
        return (base + 1j * base[::-1]).astype(dt) if dt.kind == "c" else base.astype(dt)


def bound(spec, backend, result_dtype) -> int:
    if backend in BITWISE or result_dtype not in (np.float32, np.float64):
        return 0
    return spec.ulp[0] if result_dtype == np.float32 else spec.ulp[1]


class _RanOn(logging.Handler):
    """Collects which backend ran each call, from the records fastmath logs at DEBUG."""

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.ran = set()

    def emit(self, record):
        name = getattr(record, "ran_on", None)
        if name is not None:
            self.ran.add(name)


def _compare_unary(spec, backend, dtype):
    import fastmath

    x = samples(dtype)
    with np.errstate(all="ignore"):
        try:
            expected = spec.reference()(x)
        except TypeError as e:  # no loop for this dtype: fastmath must refuse alike
            try:
                with fastmath.backend(backend):
                    getattr(fastmath, spec.name)(x)
            except type(e):
                return 0, 0, ""
            return None, 0, f"NumPy/SciPy raised {type(e).__name__}; fastmath did not"
        with fastmath.backend(backend):
            got = getattr(fastmath, spec.name)(x)
    if type(got) is not type(expected) or got.dtype != expected.dtype:
        return None, 0, f"returned {type(got).__name__} {got.dtype}, expected {expected.dtype}"
    limit = bound(spec, backend, expected.dtype)
    if expected.dtype.kind == "f":
        d = ulp_distance(got, expected)
        worst = int(d.max())
        if limit == 0 and got.tobytes() != expected.tobytes():
            worst = max(worst, 1)  # the sign of a zero differs
    else:
        worst = 0 if got.tobytes() == expected.tobytes() else int(np.iinfo(np.int64).max)
    detail = ""
    if worst > limit:
        i = int(np.argmax(ulp_distance(got, expected))) if expected.dtype.kind == "f" else 0
        detail = f"at x={x.flat[i]!r}: got {got.flat[i]!r}, expected {expected.flat[i]!r}"
    return worst, limit, detail


def _compare_logsumexp(spec, backend, dtype):
    import fastmath

    a = samples(dtype, 200 * 60 + len(SPECIALS), seed=1)[len(SPECIALS):].reshape(200, 60)
    if a.dtype.kind in "fc":
        with np.errstate(all="ignore"):
            a = a / 10
        a[3, :4] = (np.inf, -np.inf, np.nan, 0.0)  # special values in one row and column
        a[7:, 5] = -np.inf
    worst = 0.0
    for axis in (None, 0, 1):
        with np.errstate(all="ignore"):
            expected = np.asarray(spec.reference()(a, axis=axis))
            with fastmath.backend(backend):
                got = np.asarray(fastmath.logsumexp(a, axis=axis))
        if got.dtype != expected.dtype or got.shape != expected.shape:
            return None, 0, f"axis={axis}: returned {got.dtype}{got.shape}"
        # The row's bound is in ULPs of the largest of |max(a)|, |result| and 1: the
        # same sum taken in another order, then log1p.
        limit = bound(spec, backend, expected.dtype)
        same = (got == expected) | (np.isnan(got) & np.isnan(expected))
        if limit == 0:
            if not same.all():
                return None, 0, f"axis={axis}: differs from SciPy's own result"
            continue
        scale = np.maximum(np.maximum(np.abs(np.nanmax(a, axis=axis)), 1), np.abs(expected))
        with np.errstate(invalid="ignore"):
            err = np.abs(got - expected) / (np.finfo(expected.dtype).eps * scale)
        worst = max(worst, float(np.where(same, 0, np.nan_to_num(err, nan=np.inf)).max()))
    return (int(np.ceil(worst)) if np.isfinite(worst) else None), limit, ""


def run(backends=None, functions=None, dtypes=DTYPES):
    """One dict per (function, backend, dtype): worst error, bound, who ran it, verdict."""
    import fastmath
    from . import _log, _registry

    names = [b for b in fastmath.available_backends() if b != "auto"] + ["auto"]
    backends = names if backends is None else backends
    specs = [s for s in _registry.ROWS if functions is None or s.name in functions]
    probe = _RanOn()
    logger = _log.logger
    old_level = logger.level
    logger.addHandler(probe)
    logger.setLevel(logging.DEBUG)
    _log.refresh()
    results = []
    try:
        for spec in specs:
            compare = _compare_logsumexp if spec.kind == "logsumexp" else _compare_unary
            for backend in backends:
                for dtype in dtypes:
                    probe.ran = set()
                    worst, limit, detail = compare(spec, backend, dtype)
                    ok = worst is not None and worst <= limit
                    results.append({"function": spec.name, "backend": backend, "dtype": dtype,
                                    "max_ulp": worst, "bound_ulp": limit, "ok": ok,
                                    "ran_on": sorted(probe.ran) or ["reference"],
                                    "detail": detail})
    finally:
        logger.removeHandler(probe)
        logger.setLevel(old_level)
        _log.refresh()
    return results


def _cell(r) -> str:
    if not r["ok"]:
        return "MISMATCH"
    ran = [n for n in r["ran_on"] if n != r["backend"]]
    mark = f" ({'+'.join(ran)})" if ran and r["backend"] != "auto" else ""
    return f"ok {r['max_ulp']}/{r['bound_ulp']}{mark}"


def report(results, dtypes=DTYPES) -> str:
    lines = [f"{'function':<11}{'backend':<12}" + "".join(f"{d:<20}" for d in dtypes)]
    rows: dict = {}
    for r in results:
        rows.setdefault((r["function"], r["backend"]), {})[r["dtype"]] = r
    for (fn, b), cells in rows.items():
        lines.append(f"{fn:<11}{b:<12}" + "".join(f"{_cell(cells[d]):<20}" for d in dtypes
                                                   if d in cells))
    return "\n".join(lines)


def main(args) -> int:
    from ._info import collect

    d = collect()
    backends = args.backends.split(",") if args.backends else None
    functions = args.functions.split(",") if args.functions else None
    print(f"fastmath check: each backend against NumPy/SciPy on this machine "
          f"({', '.join(n for n, v in d['backends'].items() if v == 'available')} available)")
    print("cells: worst ULP distance / allowed; a backend in parentheses ran the calls that "
          "the named one declined\n")
    results = run(backends, functions)
    print(report(results))
    bad = [r for r in results if not r["ok"]]
    print()
    if bad:
        for r in bad:
            print(f"MISMATCH {r['function']} on {r['backend']} ({r['dtype']}): "
                  f"{r['max_ulp']} ULP > {r['bound_ulp']}; {r['detail']}")
        print(f"\n{len(bad)} of {len(results)} checks do NOT match numpy/scipy.")
        return 1
    print(f"All {len(results)} checks match numpy/scipy (bitwise on numpy, within the "
          "documented ULP bounds elsewhere).")
    return 0


def add_arguments(p) -> None:
    p.add_argument("--backends", help="comma-separated backends (default: every available "
                   "one, and auto)")
    p.add_argument("--functions", help="comma-separated functions (default: all)")
