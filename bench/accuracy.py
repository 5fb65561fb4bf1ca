"""Accuracy of every function x backend x float dtype against a correctly rounded value.

    python bench/accuracy.py [--n N] [--out docs/accuracy.md]
    python bench/accuracy.py --check-precision [--n N]

The true value of each sample point is computed with mpmath at PREC bits, written so that
no step cancels (the inverse functions by Newton's method on their forward function,
compositions in the order that keeps relative accuracy), and kept as a float64 pair
(hi + lo, about 106 bits). An error is |result - true| / ulp(true) in the result's dtype
(0.5 is correctly rounded). NumPy's or SciPy's own error is measured on the same points,
side by side. Points where the reference's result or the true value is not a finite
normal nonzero number of the dtype are left out (those cases are held bitwise by the
parity tests). The sample is fixed (seeded), so the table is reproducible.
``--check-precision`` recomputes the true values at PREC + 64 bits and prints how far
apart the two are, in float64 ULPs.
"""
from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import NamedTuple

import mpmath
import numpy as np
import scipy.special

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
import fastmath
from fastmath._registry import ROWS

mp, mpf = mpmath.mp, mpmath.mpf
# 80 bits leaves 27 bits beyond float64 for the few ULPs the references lose;
# --check-precision (and tests/backends/test_accuracy.py) hold it against PREC + 64.
PREC = 80
DTYPES = ("float32", "float64")
WIDTH = 8  # the reduced axis of logsumexp, softmax, log_softmax
INF = math.inf


# Where each row is sampled is the row's own (Spec.domain, Spec.operands in the registry).


# --- true values (mpmath numbers in, out; precision is the caller's) ------------------

def _exp(v):
    # exp of a large negative argument only ever meets a term it cannot change
    # (or makes a result below the dtype's range, left out); mpmath is slow there
    return mpf(0) if v < -4000 else mpmath.exp(v)


def _erfcinv(q):
    """erfc(x) = q, for 0 < q < 2, by Newton's method from SciPy's float64 value."""
    if 0.5 <= q <= 1.5:
        return mpmath.erfinv(1 - q)  # 1 - q is exact; no cancellation in erf near 0
    if q > 1:
        return -_erfcinv(2 - q)
    x = mpf(float(scipy.special.erfcinv(float(q))))
    for _ in range(20):
        dx = (mpmath.erfc(x) - q) / (2 / mpmath.sqrt(mp.pi) * mpmath.exp(-x * x))
        x += dx
        if abs(dx) <= abs(x) * mpmath.ldexp(1, -mp.prec - 4):
            break
    return x


def _erfinv(y):
    return mpmath.erfinv(y) if abs(y) <= 0.5 else mpmath.sign(y) * _erfcinv(1 - abs(y))


def _erfcx(v):
    if v > 2 ** 26:  # exp(v*v) would need 2*log2(v) extra bits; the series is exact here
        s = 1 / (2 * v * v)
        return (1 - s + 3 * s * s - 15 * s ** 3) / (v * mpmath.sqrt(mp.pi))
    with mp.workprec(mp.prec + 2 * max(0, int(mpmath.log(abs(v) + 1, 2))) + 8):
        return mpmath.exp(v * v) * mpmath.erfc(v)


def _log_ndtr(v):
    if v < -(2 ** 26):  # asymptotic; erfc far out in the tail is slow in mpmath
        s = 1 / (v * v)
        return (-v * v / 2 - mpmath.log(-v) - mpmath.log(2 * mp.pi) / 2
                + mpmath.log1p(-s + 3 * s * s - 15 * s ** 3))
    if v > 0:  # log of a number near 1
        return mpmath.log1p(-mpmath.erfc(v / mpmath.sqrt(2)) / 2)
    return mpmath.log(mpmath.erfc(-v / mpmath.sqrt(2)) / 2)


def _logaddexp(a, b, base=mpmath.e):
    # m + log(1 + base**-d) cancels where the result is near 0: 120 bits more than asked
    with mp.workprec(mp.prec + 120):
        m, d = max(a, b), abs(a - b)
        return m + mpmath.log1p(_exp(-d * mpmath.log(base))) / mpmath.log(base)


def _gammaln(v):
    with mp.workprec(mp.prec + 40):  # near its zeros on the negative axis
        return mpmath.re(mpmath.loggamma(v)) if v < 0 else mpmath.loggamma(v)


def _lse(row):
    return mpmath.log(mpmath.fsum(mpmath.exp(v) for v in row))


def _log_softmax(row):
    # x_i - logsumexp cancels where x_i dominates; this form does not
    return [-mpmath.log1p(mpmath.fsum(mpmath.exp(w - v) for j, w in enumerate(row) if j != i))
            for i, v in enumerate(row)]


def _softmax(row):
    e = [mpmath.exp(v) for v in row]
    s = mpmath.fsum(e)
    return [t / s for t in e]


class Truth(NamedTuple):
    fn: object


# The correctly rounded reference of each registry row; a new row needs one here.
TRUE = {
    "exp": Truth(mpmath.exp), "log": Truth(mpmath.log), "log1p": Truth(mpmath.log1p),
    "expm1": Truth(mpmath.expm1), "erf": Truth(mpmath.erf),
    "exp2": Truth(lambda v: mpf(2) ** v),
    "log2": Truth(lambda v: mpmath.log(v, 2)), "log10": Truth(mpmath.log10),
    "sqrt": Truth(mpmath.sqrt), "cbrt": Truth(lambda v: mpmath.sign(v) * mpmath.cbrt(abs(v))),
    "square": Truth(lambda v: v * v), "reciprocal": Truth(lambda v: 1 / v),
    "sin": Truth(mpmath.sin), "cos": Truth(mpmath.cos), "tan": Truth(mpmath.tan),
    "arcsin": Truth(mpmath.asin), "arccos": Truth(mpmath.acos),
    "arctan": Truth(mpmath.atan), "sinh": Truth(mpmath.sinh), "cosh": Truth(mpmath.cosh),
    "tanh": Truth(mpmath.tanh), "arcsinh": Truth(mpmath.asinh),
    "arccosh": Truth(mpmath.acosh),
    "arctanh": Truth(mpmath.atanh),
    # NumPy's sinc is the normalized one
    "sinc": Truth(lambda v: mpf(1) if v == 0 else mpmath.sinpi(v) / (mp.pi * v)),
    "i0": Truth(lambda v: mpmath.besseli(0, v)),
    "power": Truth(lambda x, y: x ** y), "float_power": Truth(lambda x, y: x ** y),
    "arctan2": Truth(mpmath.atan2),
    "hypot": Truth(mpmath.hypot),
    "logaddexp": Truth(_logaddexp),
    "logaddexp2": Truth(lambda a, b: _logaddexp(a, b, 2)),
    "erfc": Truth(mpmath.erfc), "erfinv": Truth(_erfinv),
    "erfcinv": Truth(_erfcinv),
    "erfcx": Truth(_erfcx),
    "expit": Truth(lambda v: 1 / (1 + _exp(-v)) if v >= 0 else _exp(v) / (1 + _exp(v))),
    # log1p where p/(1 - p) is near 1 (p near 1/2), log where it is not
    "logit": Truth(lambda p: mpmath.log1p((2 * p - 1) / (1 - p)) if p > 0.25
                   else mpmath.log(p / (1 - p))),
    "log_expit": Truth(lambda v: -mpmath.log1p(_exp(-v)) if v >= 0
                       else v - mpmath.log1p(_exp(v))),
    "ndtr": Truth(lambda v: mpmath.erfc(-v / mpmath.sqrt(2)) / 2),
    "ndtri": Truth(lambda p: -mpmath.sqrt(2) * _erfcinv(2 * p)),
    "log_ndtr": Truth(_log_ndtr),
    "gammaln": Truth(_gammaln), "digamma": Truth(mpmath.digamma),
    "entr": Truth(lambda v: -v * mpmath.log(v)),
    "xlogy": Truth(lambda x, y: x * mpmath.log(y)),
    "xlog1py": Truth(lambda x, y: x * mpmath.log1p(y)),
    "logsumexp": Truth(_lse),
    "softmax": Truth(_softmax),
    "log_softmax": Truth(_log_softmax),
}
REDUCTIONS = ("logsumexp", "softmax")  # registry kinds whose input is rows of WIDTH


def domain(spec):
    """The sample domain of ``spec``, in words, for the table."""
    args = spec.operands
    if spec.kind in REDUCTIONS:
        return f"rows of {WIDTH} in [{args[0].dense[0]:g}, {args[0].dense[1]:g}]"
    if len(args) == 1:
        return str(args[0])
    return "; ".join(f"{n}: {a}" for n, a in zip("xy", args))


def _call(spec, f, xs):
    if spec.kind in REDUCTIONS:
        return f(xs[0], axis=1)
    return f(*xs)


def sample(spec, dtype, n, seed=0):
    """Inputs (a tuple of arrays) where the reference's result is finite, normal, nonzero:
    half with every input from its dense interval, half from its spread."""
    rng = np.random.default_rng(seed)
    dt = np.dtype(dtype)
    tiny = np.finfo(dt).tiny
    args = spec.operands
    if spec.kind in REDUCTIONS:
        rows = n if spec.kind == "logsumexp" else -(-n // WIDTH)  # about n results
        return (rng.uniform(*args[0].dense, (rows, WIDTH)).astype(dt),)
    ref = spec.reference()
    parts = []
    for spread, want in ((False, n - n // 2), (True, n // 2)):
        pool, got = [], 0
        for _ in range(50):
            xs = [a.draw(rng, dt, 4 * n, spread) for a in args]
            with np.errstate(all="ignore"):
                y = np.asarray(ref(*xs))
            keep = np.isfinite(y) & (np.abs(y) >= tiny)
            pool.append([x[keep] for x in xs])
            got += int(keep.sum())
            if got >= want:
                break
        parts.append([np.concatenate(c)[:want] for c in zip(*pool)])
    return tuple(np.concatenate(c) for c in zip(*parts))


def truth(spec, xs, prec=PREC):
    """The true results as a float64 pair (hi, lo), flattened like the results."""
    fn = TRUE[spec.name].fn
    with mp.workprec(prec):
        if spec.kind in REDUCTIONS:
            vals = []
            for row in xs[0]:
                t = fn([mpf(float(v)) for v in row])
                vals.extend(t if isinstance(t, list) else [t])
        else:
            vals = [fn(*(mpf(float(v)) for v in p)) for p in zip(*xs)]
        hi = np.array([float(t) for t in vals])
        lo = np.array([float(t - h) if math.isfinite(h) else 0.0 for t, h in zip(vals, hi)])
    return hi, lo


def ulp_errors(got, hi, lo, dtype):
    """|got - (hi + lo)| / ulp(hi + lo) in ``dtype`` per point (inf where got is not finite)."""
    f = np.finfo(dtype)
    got = np.asarray(got, dtype=np.float64).ravel()
    m, e = np.frexp(hi)
    # hi rounded up to a power of two: the true value lies in the binade below
    e = e - 1 - ((np.abs(m) == 0.5) & (np.sign(lo) == -np.sign(hi)))
    ulp = np.ldexp(1.0, np.maximum(e, f.minexp) - f.nmant)
    with np.errstate(all="ignore"):
        err = np.abs((got - hi) - lo) / ulp
    err[~np.isfinite(got)] = INF
    return err


def measure(n=4000, seed=0):
    """{(name, dtype): {"reference": errors, backend: errors, ...}} over the fixed sample."""
    backends = [b for b in fastmath.available_backends() if b != "auto"]
    table = {}
    for spec in ROWS:
        for dtype in DTYPES:
            xs = sample(spec, dtype, n, seed)
            hi, lo = truth(spec, xs)
            fn, ref = getattr(fastmath, spec.name), spec.reference()
            with np.errstate(all="ignore"):
                expected = np.asarray(_call(spec, ref, xs))
                got = {"reference": expected}
                for b in backends:
                    with fastmath.backend(b):
                        got[b] = np.asarray(_call(spec, fn, xs))
            out = expected.dtype  # float_power's is float64 for float32 input
            f = np.finfo(out)
            keep = np.isfinite(hi) & (np.abs(hi) >= f.tiny) & (np.abs(hi) <= f.max)
            row = {}
            for k, r in got.items():
                assert r.dtype == out, (spec.name, k, r.dtype, out)
                row[k] = ulp_errors(r.ravel()[keep], hi[keep], lo[keep], out)
            table[spec.name, dtype] = row
    return table


def check_precision(n=200, seed=0, extra=64):
    """{(name, dtype): max |true at PREC - true at PREC + extra| in float64 ULPs}."""
    worst = {}
    for spec in ROWS:
        for dtype in DTYPES:
            xs = sample(spec, dtype, n, seed)
            hi, lo = truth(spec, xs)
            hi2, lo2 = truth(spec, xs, PREC + extra)
            keep = np.isfinite(hi2) & (hi2 != 0)
            d = np.abs((hi[keep] - hi2[keep]) + (lo[keep] - lo2[keep])) / np.spacing(
                np.abs(hi2[keep]))
            worst[spec.name, dtype] = float(d.max()) if d.size else 0.0
    return worst


def bound(spec, dtype, reference_max):
    """The documented bound: the reference's own maximum plus the row's ULP bound."""
    return reference_max + spec.ulp[0 if dtype == "float32" else 1]


HEADER = """# Accuracy

Written by `python bench/accuracy.py` (do not edit by hand; tests/backends/test_accuracy.py checks
it lists every function, backend and dtype and that no backend exceeds its bound).

Error is |result - true value| / ulp(true value) in the result's dtype, the true value
from mpmath at {prec} bits (no step of it cancels; checked against {prec2} bits by
`--check-precision` and by the tests), over a fixed sample of {n} points per function and
dtype: half drawn uniformly from the dense interval of the domain column, half with
magnitudes spread log-uniformly over the range after the ∪ (tiny and max are the dtype's),
keeping the points where NumPy's/SciPy's result is a finite, normal, nonzero number.
Reductions (logsumexp, softmax, log_softmax) run over axis 1 of rows of {w} values.
"max / mean" per column; `numpy/scipy` is the reference fastmath mirrors.
The bound is the one fastmath documents: a backend's maximum error is at most the
reference's maximum plus the row's ULP bound against the reference (`Spec.ulp`, held by
tests/frontends/test_parity.py); the target is the reference's maximum plus 1 ULP. A backend with
no kernel for a function runs NumPy's/SciPy's, so its column repeats the reference's.

Large errors in the `numpy/scipy` column are NumPy's and SciPy's own, which fastmath
mirrors: `sinc` rounds pi * x before the sine, so its relative error has no bound near
a nonzero whole number; SciPy's `log_softmax` takes the log of a sum that rounds to 1
at a row's dominant element, and `softmax` exponentiates rounded differences; `erfc`,
`erfcx`, `ndtr` and `log_ndtr` lose about x² ULPs in the tail (beyond |x| = 8);
`gammaln` and `digamma` lose accuracy near their zeros on the negative axis. torch's
`ndtri` is not used: in float32 it is up to 3.1 ULPs off where SciPy's is 0.5.
The `mkl` column is Intel MKL's vector math in its high-accuracy mode (under 1 ULP from
the true value); its float64 `erfc` and `ndtr` keep the subnormal tail SciPy flushes to
zero, and its float64 `erfcinv` is up to 6 ULPs from SciPy's (which is 4.8 from the
true value): those three run SciPy's in float64, so their float64 `mkl` cells repeat it.

"""


def render(table, n):
    backends = [b for b in fastmath.available_backends() if b != "auto"]
    lines = [HEADER.format(n=n, w=WIDTH, prec=PREC, prec2=PREC + 64),
             "| function | dtype | domain | numpy/scipy | " + " | ".join(backends)
             + " | bound | target (ref + 1) |",
             "|---" * (len(backends) + 6) + "|"]
    for spec in ROWS:
        for dtype in DTYPES:
            row = table[spec.name, dtype]
            ref_max = row["reference"].max()
            cells = [f"{row[k].max():.2f} / {row[k].mean():.3f}" for k in ["reference"] + backends]
            worst = max(row[b].max() for b in backends)
            miss = worst - (ref_max + 1)
            target = "met" if miss <= 0 else f"missed by {miss:.2f}"
            lines.append(f"| {spec.name} | {dtype} | {domain(spec)} | " + " | ".join(cells)
                         + f" | {bound(spec, dtype, ref_max):.2f} | {target} |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=4000, help="points per function and dtype")
    p.add_argument("--out", default=str(ROOT / "docs" / "accuracy.md"))
    p.add_argument("--check-precision", action="store_true",
                   help=f"compare the true values at {PREC} and {PREC + 64} bits instead")
    args = p.parse_args(argv)
    if args.check_precision:
        for (name, dtype), d in check_precision(args.n).items():
            print(f"{name:12s} {dtype}  {d:.2e} float64 ULPs")
        return
    text = render(measure(args.n), args.n)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(text)
    print(text)


if __name__ == "__main__":
    main()
