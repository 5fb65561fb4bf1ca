"""Special values: does a kernel give the reference's results where functions break?

A library's vector kernels take different code paths on different CPUs, sizes and
alignments, and the special values (infinities, NaN, signed zeros, subnormals, the
overflow and underflow thresholds) are where those paths differ: MKL's float32 exp in
one error mode gave NaN for +-inf on an Intel Xeon and inf on an AMD EPYC. So before
``auto`` or a chosen backend runs a kernel on a dtype, :func:`probe` runs it on the
special values, laid out short, long and unaligned, and compares with the reference
within the row's ULP bound; a kernel that disagrees is never used on this machine
(selection says why, once). ``fastmath check`` reports with the same words.
"""
from __future__ import annotations

from .._numpy import FLOATS as _FLOATS, np

# A long layout: past the widest SIMD main loop and its unrolling, so the vector path runs
# as well as the scalar tail (the short layout).
LONG = 1031


def special_values(dtype) -> np.ndarray:
    """The values where elementwise functions take their special paths, in ``dtype``.

    Signed zeros, the smallest subnormal and normal numbers, numbers near 1, the overflow
    and underflow thresholds of exp/exp2/expm1/sinh/cosh (just below and above), large
    and huge finite values, the largest finite value, infinities and NaN; both signs.
    """
    dt = np.dtype(dtype)
    f = np.finfo(dt)
    big = float(f.max)
    with np.errstate(all="ignore"):
        edges = [np.log(big), np.log(float(f.tiny)), np.log(float(f.smallest_subnormal)),
                 np.log2(big), np.log2(float(f.smallest_subnormal)), np.arcsinh(big)]
        around = [np.nextafter(dt.type(e), dt.type(s * np.inf)) for e in edges
                  for s in (-1, 1)]
        base = [0.0, float(f.smallest_subnormal), float(f.tiny), float(f.eps), 1e-7, 0.5,
                1.0 - float(f.epsneg), 1.0, 1.0 + float(f.eps), 2.0, 10.0, 30.0, 100.0,
                1e10, float(np.sqrt(big)), big, np.inf]
        pos = np.array(base + [float(a) for a in around], dtype=dt)
    return np.concatenate([pos, -pos, np.array([np.nan], dt)])


def operands(spec, dtype, layout: str) -> tuple:
    """The row's operands of ``dtype`` in ``layout``: "short" (the special values, every
    pair of them for a binary row), "long" (those repeated to past LONG elements) or
    "unaligned" (the long ones, one element in, so no vector load is aligned)."""
    s = special_values(dtype)
    xs = [s] if spec.nin == 1 else [np.repeat(s, s.size), np.tile(s, s.size)]
    if layout == "short":
        return tuple(xs)
    reps = -(-(LONG + 1) // xs[0].size)
    long = [np.tile(x, reps) for x in xs]
    return tuple(long) if layout == "long" else tuple(x[1:] for x in long)


LAYOUTS = ("short", "long", "unaligned")


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


FAR = int(np.iinfo(np.int64).max)


def _name(v) -> str:
    v = float(v)
    if np.isnan(v):
        return "nan"
    if np.isinf(v):
        return "inf" if v > 0 else "-inf"
    return repr(v)


def worst(got, expected, ins) -> tuple:
    """(the largest ULP distance, a sentence on the element where it is), for float
    arrays; the sentence reads "nan where NumPy/SciPy gives inf (at x=inf)" when one side
    is not a finite number, "2.5 where NumPy/SciPy gives 2.4999998 (3 ULP, at x=...)"
    otherwise, and is empty where the arrays are bitwise equal."""
    d = ulp_distance(got, expected)
    if d.size == 0:
        return 0, ""
    i = int(np.argmax(d))
    far = int(d.flat[i])
    if far == 0:
        # where every distance is 0 only the sign of a zero can differ; a NaN is any NaN
        # (NumPy keeps no NaN's payload or sign: CUDA gives 0x7fffffff for x86's 0x7fc00000)
        signs = (np.signbit(got) != np.signbit(expected)) & ~np.isnan(expected)
        if not signs.any():
            return 0, ""
        i = int(np.argmax(signs))
        far = 1
    at = ", ".join(f"{n}={_name(x.flat[i])}" for n, x in zip(("x", "y"), ins))
    g, e = got.flat[i], expected.flat[i]
    if far == FAR or not (np.isfinite(g) and np.isfinite(e)):
        return far, f"{_name(g)} where NumPy/SciPy gives {_name(e)} (at {at})"
    return far, f"{_name(g)} where NumPy/SciPy gives {_name(e)} ({far} ULP, at {at})"


def probe(spec, kernel, dtype, backend=None):
    """None if ``kernel`` (``backend``'s) gives the reference's results on the special
    values of ``dtype`` in every layout (within the row's bound, or where it declines
    them), else a sentence saying where it does not."""
    dt = np.dtype(dtype)
    if dt not in _FLOATS or spec.kind not in ("unary", "binary", "elementwise"):
        return None
    limit = spec.bound(dt, backend)
    for layout in LAYOUTS:
        ins = operands(spec, dt, layout)
        with np.errstate(all="ignore"):
            expected = np.asarray(spec.reference()(*ins))
            if expected.dtype != dt:
                return None
            out = np.empty_like(expected)
            try:
                if kernel(*ins, out) is NotImplemented:
                    continue
            except Exception as e:  # noqa: BLE001 - any failure here disqualifies the kernel
                return f"raised {type(e).__name__}: {e} ({layout} layout)"
        far, where = worst(out, expected, ins)
        if far > limit:
            return f"{where}, {layout} layout"
    return None
