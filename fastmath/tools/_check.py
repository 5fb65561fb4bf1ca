"""``fastmath check``: does every backend on this machine give NumPy's/SciPy's results?

Each registry row runs on each available backend (and ``auto``) over special values
(zeros of both signs, subnormals, huge values, infinities, NaN; every pair of them for
binary rows), a spread over the whole range and the row's own domain, in several dtypes
(over each axis of a 2-D array for logsumexp and softmax), and is compared with the
reference: where both raise, the exception types must match; else bitwise for the
numpy backend (it runs the reference's own loops), within the registry's ULP bound for
the others. Float rows also run on dispatch/_verify.py's special values (the overflow and
underflow thresholds too) laid out short, long and unaligned, each backend's own kernel is
held to them as selection holds it, and ``auto`` runs at every size where the calibration
table sends it to another backend, large sizes included, since vector kernels take other
paths there. The log records of each call say which backend really ran it, so a backend
that declined a dtype is reported as such rather than credited with NumPy's result.
"""
from __future__ import annotations

import logging
import warnings

from .._numpy import np

from ..dispatch import _selection
from ..dispatch._verify import FAR, LAYOUTS, operands as special_operands, ulp_distance, worst

DTYPES = ("float64", "float32", "float16", "int32", "complex128")
SPECIALS = (0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 2.0, 10.0, -10.0, 88.0, -88.0, 100.0, -100.0,
            700.0, -700.0, 750.0, -750.0, 1e-310, -1e-310, 1e-30, -1e-30, 1e300, -1e300,
            np.inf, -np.inf, np.nan)
BITWISE = ("numpy",)
SAME_ERROR = "both raised"  # a check's detail when reference and fastmath raise alike


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


def operands(spec, dtype, n=4096):
    """The row's operands: special values (every pair of them for a binary row), a spread
    over the whole range, and the dense part of the row's own domain."""
    dt = np.dtype(dtype)
    if spec.nin == 1:
        xs = [samples(dt, n)]
    else:
        k = len(SPECIALS)
        grid = [np.repeat(samples(dt, k), k), np.tile(samples(dt, k), k)]
        xs = [np.concatenate([g, samples(dt, n, seed=i)[k:]]) for i, g in enumerate(grid)]
        if dt.kind in "iu":  # small exponents: a negative one makes integer power raise
            xs[1] = xs[1] % 8
    if dt.kind == "f":
        rng = np.random.default_rng(2)
        with np.errstate(all="ignore"):
            xs = [np.concatenate([x, d.draw(rng, dt, n // 4, False)])
                  for x, d in zip(xs, spec.operands)]
    return tuple(xs)


def bound(spec, backend, result_dtype) -> int:
    if backend in BITWISE or result_dtype not in (np.float32, np.float64):
        return 0
    return spec.bound(result_dtype, backend)


class _RanOn(logging.Handler):
    """Collects which backend ran each call, from the records fastmath logs at DEBUG."""

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.ran = set()

    def emit(self, record):
        name = getattr(record, "ran_on", None)
        if name is not None:
            self.ran.add(name)


def _both(reference, ours):
    """(expected, got, problem): both calls' results, or why they disagree on raising.

    Where both raise, the exception types must match. A function called wrongly (too
    few operands) raises alike on both sides and tests nothing, so the operands here are
    always well formed: a shared exception is a call the reference itself refuses (a
    dtype it has no loop for), shown as such in the report rather than as a result.
    """
    errors = []
    results = []
    for call in (reference, ours):
        try:
            with np.errstate(all="ignore"):
                results.append(call())
            errors.append(None)
        except Exception as e:  # compared below; fastmath must raise what NumPy raises
            results.append(None)
            errors.append(e)
    (expected, got), (theirs, mine) = results, errors
    if theirs is None and mine is None:
        return expected, got, None
    if theirs is not None and mine is not None and type(theirs) is type(mine):
        return None, None, f"{SAME_ERROR} {type(mine).__name__}"
    said = [f"raised {type(e).__name__}: {e}" if e is not None else "returned a result"
            for e in (theirs, mine)]
    return None, None, f"NumPy/SciPy {said[0]}; fastmath {said[1]}"


def _call(spec, backend, *args, **kwargs):
    import fastmath

    # a kernel that gets special values wrong is reported by the check itself
    with fastmath.backend(backend), warnings.catch_warnings():
        warnings.filterwarnings("ignore", "fastmath: backend .* gives ", RuntimeWarning)
        return getattr(fastmath, spec.name)(*args, **kwargs)


def _compare_elementwise(spec, backend, dtype):
    """Unary and binary ufuncs and elementwise functions, over :func:`operands`, then the
    special values in each layout and, for ``auto``, at each size it switches at."""
    xs = operands(spec, dtype)
    expected, got, problem = _both(lambda: spec.reference()(*xs),
                                   lambda: _call(spec, backend, *xs))
    if problem is not None:
        return (0, 0, problem) if problem.startswith(SAME_ERROR) else (None, 0, problem)
    if type(got) is not type(expected) or got.dtype != expected.dtype:
        return None, 0, f"returned {type(got).__name__} {got.dtype}, expected {expected.dtype}"
    limit = bound(spec, backend, expected.dtype)
    if expected.dtype.kind != "f":
        far = 0 if got.tobytes() == expected.tobytes() else FAR
        return far, limit, "" if not far else "integer results differ"
    far, where = worst(got, expected, xs)
    if expected.dtype in (np.float32, np.float64):
        # what selection found wrong with the backend's own kernel (its probe, cached)
        why = None if backend == "auto" else _selection.unsound(backend, spec,
                                                                str(expected.dtype))
        if why is not None:  # selection keeps such a kernel away from calls: say so here
            return FAR, limit, f"its kernel gives {why}; NumPy/SciPy's result is used instead"
        for label, ins in _more_operands(spec, backend, expected.dtype):
            with np.errstate(all="ignore"):
                want, have = spec.reference()(*ins), _call(spec, backend, *ins)
            f, w = worst(np.asarray(have), np.asarray(want), ins)
            if f > far:
                far, where = f, f"{w}, {label}"
    return far, limit, where if far > limit else ""


def _more_operands(spec, backend, dt):
    """(label, operands): the special values short, long and unaligned; for ``auto`` also
    at each size where its calibration row changes (special values and a spread, tiled)."""
    for layout in LAYOUTS:
        yield f"{layout} layout", special_operands(spec, dt, layout)
    if backend != "auto":
        return
    from ..dispatch import _calibration

    base = tuple(np.concatenate([s, x]) for s, x in
                 zip(special_operands(spec, dt, "short"), operands(spec, dt, 1024)))
    for min_size, names in _calibration.rows(spec.name, str(dt)):
        n = max(min_size, base[0].size) + 1  # just past the switch, and odd: a tail
        reps = -(-n // base[0].size)
        yield (f"{n} elements, where auto runs {names[0] if names else 'the reference'}",
               tuple(np.tile(b, reps)[:n] for b in base))


def _compare_rows(spec, backend, dtype):
    """logsumexp, softmax and log_softmax over each axis of a 2-D array."""
    a = samples(dtype, 200 * 60 + len(SPECIALS), seed=1)[len(SPECIALS):].reshape(200, 60)
    if a.dtype.kind in "fc":
        with np.errstate(all="ignore"):
            a = a / 10
        a[3, :4] = (np.inf, -np.inf, np.nan, 0.0)  # special values in one row and column
        a[7:, 5] = -np.inf
    worst, limit, raised = 0.0, 0, ""
    keep = spec.kind == "softmax"  # same shape as the input
    for axis in (None, 0, 1):
        expected, got, problem = _both(lambda: np.asarray(spec.reference()(a, axis=axis)),
                                       lambda: np.asarray(_call(spec, backend, a, axis=axis)))
        if problem is not None and problem.startswith(SAME_ERROR):
            raised = problem
            continue
        if problem is not None:
            return None, 0, f"axis={axis}: {problem}"
        if got.dtype != expected.dtype or got.shape != expected.shape:
            return None, 0, f"axis={axis}: returned {got.dtype}{got.shape}"
        # The row's bound is in ULPs of the largest of |max(a)|, |result| and 1: the
        # same sum taken in another order, then log1p.
        limit = bound(spec, backend, expected.dtype)
        same = (got == expected) | (np.isnan(got) & np.isnan(expected))
        if limit == 0:
            if not same.all():
                i = np.unravel_index(int(np.argmin(same)), same.shape)
                return None, 0, (f"axis={axis}: differs from SciPy's own result at {i}: "
                                 f"got {got[i]!r}, expected {expected[i]!r}")
            continue
        with np.errstate(all="ignore"):
            top = np.abs(np.nanmax(a, axis=axis, keepdims=keep))
            scale = np.maximum(np.maximum(top, 1), np.abs(expected))
            err = np.abs(got - expected) / (np.finfo(expected.dtype).eps * scale)
        worst = max(worst, float(np.where(same, 0, np.nan_to_num(err, nan=np.inf)).max()))
    return (int(np.ceil(worst)) if np.isfinite(worst) else None), limit, raised


_COMPARE = {"unary": _compare_elementwise, "binary": _compare_elementwise,
            "elementwise": _compare_elementwise, "logsumexp": _compare_rows,
            "softmax": _compare_rows}


def run(backends=None, functions=None, dtypes=DTYPES):
    """One dict per (function, backend, dtype): worst error, bound, who ran it, verdict."""
    import fastmath
    from ..dispatch import _log
    from .. import _registry

    names = [b for b in fastmath.available_backends() if b != "auto"] + ["auto"]
    backends = names if backends is None else backends
    for b in backends:
        if b not in names:
            raise ValueError(f"backend {b!r} cannot run here; valid choices: {', '.join(names)}")
    try:
        wanted = None if functions is None else {_registry.lookup(f).name for f in functions}
    except KeyError as e:
        raise ValueError(e.args[0]) from None
    specs = [s for s in _registry.ROWS if wanted is None or s.name in wanted]
    probe = _RanOn()
    logger = _log.logger
    old_level = logger.level
    logger.addHandler(probe)
    logger.setLevel(logging.DEBUG)
    _log.refresh()
    results = []
    try:
        for spec in specs:
            compare = _COMPARE[spec.kind]
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
    if r["detail"].startswith(SAME_ERROR):
        return "ok: same error"
    ran = [n for n in r["ran_on"] if n != r["backend"]]
    mark = f" ({'+'.join(ran)})" if ran and r["backend"] != "auto" else ""
    return f"ok {r['max_ulp']}/{r['bound_ulp']}{mark}"


def _distance(r) -> str:
    """The worst distance as a person reads it; where one side is not a finite number
    the detail says what each side gave instead ("nan where NumPy/SciPy gives inf")."""
    if r["max_ulp"] is None or r["max_ulp"] == FAR:
        return ""
    return f"{r['max_ulp']} ULP > {r['bound_ulp']} allowed: "


def report(results, dtypes=DTYPES) -> str:
    w = max([len("function")] + [len(r["function"]) for r in results]) + 2
    lines = [f"{'function':<{w}}{'backend':<12}" + "".join(f"{d:<20}" for d in dtypes)]
    rows: dict = {}
    for r in results:
        rows.setdefault((r["function"], r["backend"]), {})[r["dtype"]] = r
    for (fn, b), cells in rows.items():
        lines.append(f"{fn:<{w}}{b:<12}" + "".join(f"{_cell(cells[d]):<20}" for d in dtypes
                                                    if d in cells))
    return "\n".join(lines)


def main(args) -> int:
    from ._info import collect

    d = collect()
    from . import _args

    # the command line has checked both against the registry and this machine (cli.py)
    backends = _args.backends()(args.backends) if args.backends else None
    functions = _args.functions()(args.functions) if args.functions else None
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
                  f"{_distance(r)}{r['detail']}")
        print(f"\n{len(bad)} of {len(results)} checks do NOT match numpy/scipy.")
        return 1
    print(f"All {len(results)} checks match numpy/scipy (bitwise on numpy, within the "
          "documented ULP bounds elsewhere).")
    return 0


def add_arguments(p) -> None:
    p.add_argument("--backends", help="comma-separated backends (default: every available "
                   "one, and auto)")
    p.add_argument("--functions", help="comma-separated functions (default: all); binary "
                   "ones get two operands, softmax and logsumexp each axis")
