"""logsumexp's steps shared by the eager front end (``_reductions``) and the Dask route
(``_dask``): axes as SciPy takes them, the (M, m, s) partial from the first backend in
line, and SciPy's formula that finishes it."""
from __future__ import annotations

from .._numpy import dtype_name, np

from ..dispatch import _chain, _selection
from .._registry import BY_NAME

SPEC = BY_NAME["logsumexp"]

try:
    from numpy.lib.array_utils import normalize_axis_tuple
except ImportError:  # numpy < 2
    from numpy.core.numeric import normalize_axis_tuple


def normalize_axes(axis, ndim):
    """Sorted, non-negative axes; NumPy's AxisError, or ValueError for a repeated axis."""
    if axis is None:
        return tuple(range(ndim))
    return tuple(sorted(normalize_axis_tuple(axis, ndim)))


def finish(part, a, b, axes, return_sign, total=None):
    M, m, s = part
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        s = np.where(s == 0, s, s / m)
        sgn = np.sign(s + 1) * np.sign(m)
        s = np.where(s < -1, -s - 2, s)
        out = np.log1p(s) + np.log(np.abs(m)) + M
        if not return_sign:
            out[sgn < 0] = np.nan
        bad = ~np.isfinite(out)
        if bad.any():
            # SciPy's rule: where the result is not finite, log(sum(b * exp(a))) decides.
            if total is None:
                total = np.sum(np.exp(a) if b is None else b * np.exp(a), axis=axes,
                               keepdims=True)
            if return_sign:
                sgn = np.where(bad, np.sign(total), sgn)
                total = np.abs(total)
            out = np.where(bad, np.log(total), out)
    return out, sgn


def partial(xa, axes, xb, dtype, chain=None):
    """(M, m, s) of ``xa`` over ``axes`` from the first backend in line that takes it."""
    if chain is None:
        chain = _selection.plan(SPEC, dtype_name(dtype), xa.size)
    return _chain.first(chain, (xa, axes, xb), "logsumexp")
