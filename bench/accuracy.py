"""Accuracy of every function x backend x float dtype against a correctly rounded value.

    python bench/accuracy.py [--n N] [--out docs/accuracy.md]

The true value of each sample point is computed with mpmath at 128 bits; an error is
|result - true| / ulp(true) in the result's dtype (0.5 is correctly rounded). NumPy's or
SciPy's own error is measured on the same points, side by side. Points where the true
result is not a finite nonzero number of the dtype are left out (those cases are held
bitwise by the parity tests). The sample is fixed (seeded), so the table is reproducible.
"""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import mpmath
import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import fastmath  # noqa: E402
from fastmath._registry import ROWS  # noqa: E402

mp = mpmath.mp
# The correctly rounded reference of each registry row; a new row needs one here.
TRUE = {
    "exp": mpmath.exp, "log": mpmath.log, "log1p": mpmath.log1p, "expm1": mpmath.expm1,
    "erf": mpmath.erf,
    "logsumexp": lambda row: mpmath.log(mpmath.fsum(mpmath.exp(v) for v in row)),
}
DTYPES = ("float32", "float64")
LSE_WIDTH = 8
HEADER = """# Accuracy

Written by `python bench/accuracy.py` (do not edit by hand; tests/test_accuracy.py checks
it lists every function, backend and dtype and that no backend exceeds its bound).

Error is |result - true value| / ulp(true value), the true value from mpmath at 128 bits,
over a fixed sample of {n} points per function and dtype across the whole domain (half
spread over every binade of the dtype, half in [-10, 10]; logsumexp: rows of {w} values in
[-30, 30]). "max / mean" per column; `numpy/scipy` is the reference fastmath mirrors.
The bound is the one fastmath documents: a backend's maximum error is at most the
reference's maximum plus the row's ULP bound against the reference (`Spec.ulp`, held by
tests/test_parity.py); the target is the reference's maximum plus 1 ULP.

"""


def sample(spec, dtype, n, seed=0):
    """Inputs across the domain of ``spec`` where the true result is finite and nonzero."""
    rng = np.random.default_rng(seed)
    dt = np.dtype(dtype)
    f = np.finfo(dt)
    if spec.kind == "logsumexp":
        return rng.uniform(-30, 30, (n, LSE_WIDTH)).astype(dt)
    ref = spec.reference()
    pool = []
    while sum(len(p) for p in pool) < n:
        m = 4 * n
        wide = (rng.choice([-1.0, 1.0], m) * 2.0 ** rng.uniform(np.log2(f.tiny),
                                                                 np.log2(float(f.max)), m))
        x = np.concatenate([wide[: m // 2], rng.uniform(-10, 10, m // 2)]).astype(dt)
        with np.errstate(all="ignore"):
            y = ref(x)
        pool.append(x[np.isfinite(y) & (y != 0) & (np.abs(y) >= f.tiny)])
    x = np.concatenate(pool)
    half = n // 2
    wide, dense = x[np.abs(x) > 10][:half], x[np.abs(x) <= 10]
    return np.concatenate([wide, dense[: n - len(wide)]])


def truth(spec, x):
    """The true results as mpmath numbers."""
    fn = TRUE[spec.name]
    with mp.workprec(128):
        if spec.kind == "logsumexp":
            return [fn([mpmath.mpf(float(v)) for v in row]) for row in x]
        return [fn(mpmath.mpf(float(v))) for v in x]


def ulp_errors(got, true, dtype):
    """|got - true| / ulp(true) in ``dtype``, for each point (inf if got is not finite)."""
    f = np.finfo(dtype)
    p = f.nmant + 1
    errs = np.empty(len(true))
    with mp.workprec(128):
        for i, (g, t) in enumerate(zip(np.asarray(got, dtype=np.float64), true)):
            if not math.isfinite(g):
                errs[i] = math.inf
                continue
            e = max(int(mpmath.floor(mpmath.log(abs(t), 2))), f.minexp)
            errs[i] = float(abs(mpmath.mpf(g) - t) / mpmath.ldexp(1, e - p + 1))
    return errs


def measure(n=4000, seed=0):
    """{(name, dtype): {"reference": errors, backend: errors, ...}} over the fixed sample."""
    backends = [b for b in fastmath.available_backends() if b != "auto"]
    table = {}
    for spec in ROWS:
        for dtype in DTYPES:
            x = sample(spec, dtype, n, seed)
            true = truth(spec, x)
            fn, ref = getattr(fastmath, spec.name), spec.reference()
            call = ((lambda f: f(x, axis=1)) if spec.kind == "logsumexp" else (lambda f: f(x)))
            with np.errstate(all="ignore"):
                row = {"reference": ulp_errors(call(ref), true, dtype)}
                for b in backends:
                    with fastmath.backend(b):
                        row[b] = ulp_errors(call(fn), true, dtype)
            table[spec.name, dtype] = row
    return table


def bound(spec, dtype, reference_max):
    """The documented bound: the reference's own maximum plus the row's ULP bound."""
    return reference_max + spec.ulp[0 if dtype == "float32" else 1]


def render(table, n):
    backends = [b for b in fastmath.available_backends() if b != "auto"]
    lines = [HEADER.format(n=n, w=LSE_WIDTH),
             "| function | dtype | numpy/scipy | " + " | ".join(backends)
             + " | bound | target (ref + 1) |",
             "|---" * (len(backends) + 5) + "|"]
    for spec in ROWS:
        for dtype in DTYPES:
            row = table[spec.name, dtype]
            ref_max = row["reference"].max()
            cells = [f"{row[k].max():.2f} / {row[k].mean():.3f}" for k in ["reference"] + backends]
            worst = max(row[b].max() for b in backends)
            miss = worst - (ref_max + 1)
            target = "met" if miss <= 0 else f"missed by {miss:.2f}"
            lines.append(f"| {spec.name} | {dtype} | " + " | ".join(cells)
                         + f" | {bound(spec, dtype, ref_max):.2f} | {target} |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=4000, help="points per function and dtype")
    p.add_argument("--out", default=str(ROOT / "docs" / "accuracy.md"))
    args = p.parse_args(argv)
    text = render(measure(args.n), args.n)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(text)
    print(text)


if __name__ == "__main__":
    main()
