"""logsumexp's shared math, neutral ground for every backend and front end: SciPy's
(M, m, s) decomposition of a block, the exact merge of two blocks' partials, and the
finite-input fast path. No backend imports another; both that need this import it here."""
from __future__ import annotations

import math

from .._numpy import np

# A partial result for a block is (M, m, s): M the maximum along the reduced axes, m the
# weight carried by the elements equal to M (their count, or the sum of their b), and s
# the weighted sum of exp(a - M) over all the other elements. This is SciPy's own
# decomposition (it finishes with log1p(s/m) + log(m) + M), so it keeps SciPy's accuracy
# when one element dominates. Partials of neighbouring blocks merge exactly.


def lse_block(a, axes, b=None):
    """(M, m, s) of one block, reduced over ``axes`` with keepdims."""
    with np.errstate(all="ignore"):
        if b is not None:
            a = np.where(b == 0, -np.inf, a)
        M = np.max(a, axis=axes, keepdims=True)
        finite = np.isfinite(M)
        shift = M if finite.all() else np.where(finite, M, 0)
        e = np.subtract(a, shift, dtype=a.dtype)
        np.exp(e, out=e)
        top = a == M
        if b is None:
            # counting through a uint8 view is 2-3x faster than summing bools as floats;
            # a block is far smaller than 2**32 elements
            m = np.add.reduce(top.view(np.uint8), axis=axes, keepdims=True,
                              dtype=np.uint32).astype(a.dtype)
        else:
            m = np.sum(np.where(top, b, 0), axis=axes, keepdims=True, dtype=a.dtype)
            np.multiply(e, b, out=e)
        np.copyto(e, 0, where=top)
        s = np.sum(e, axis=axes, keepdims=True, dtype=a.dtype)
    return M, m, s


def lse_merge(p, q):
    """Combine the partials of two blocks reduced along the same axes."""
    M1, m1, s1 = p
    M2, m2, s2 = q
    with np.errstate(all="ignore"):
        M = np.maximum(M1, M2)
        top1, top2 = M1 == M, M2 == M
        m = np.where(top1, m1, 0) + np.where(top2, m2, 0)
        s = (np.where(top1, s1, (m1 + s1) * np.exp(M1 - M))
             + np.where(top2, s2, (m2 + s2) * np.exp(M2 - M)))
    return M, m, s


# --- logsumexp of finite input, small enough for one thread ------------------------------
# SciPy's logsumexp checks for infinities and NaNs in about twenty small NumPy calls before
# it computes. With a finite maximum none of that can change the result, which is then
# SciPy's own formula, log1p(s / m) + log(m) + M, over the same arrays with the same
# reductions: bitwise equal to SciPy's, in a third of the calls.
FAST_MAX = 1 << 18  # two of the numpy backend's reduction blocks


def lse_finite(a, axis, keepdims):
    """``scipy.special.logsumexp(a, axis, keepdims=keepdims)`` for a float ndarray whose
    maxima along ``axis`` are all finite; None for anything else (the caller's general
    path answers). ``axis`` is None or an int."""
    if a.ndim == 0 or a.size == 0 or a.size > FAST_MAX:
        return None
    if axis is None and (a.ndim == 1 or a.flags.c_contiguous):
        # one reduction over contiguous memory: SciPy's sums add in this very order
        out = _lse_flat(a.reshape(-1))
        if out is None or not keepdims:
            return out
        return np.full((1,) * a.ndim, out, a.dtype)
    if axis is None:
        axes = tuple(range(a.ndim))
    elif type(axis) is int and -a.ndim <= axis < a.ndim:
        axes = (axis % a.ndim,)
    else:
        return None
    M = np.max(a, axis=axes, keepdims=True)
    if not np.isfinite(M).all():
        return None
    top = a == M
    e = np.subtract(a, M)
    np.exp(e, out=e)
    np.copyto(e, 0, where=top)
    s = np.sum(e, axis=axes, keepdims=True, dtype=a.dtype)
    m = np.add.reduce(top, axis=axes, keepdims=True, dtype=a.dtype)
    out = np.log1p(s / m) + np.log(m) + M
    if not keepdims:
        out = out.reshape([n for i, n in enumerate(a.shape) if i not in axes])
    return out[()] if out.ndim == 0 else out


def _lse_flat(a):
    M = a.max()
    if not math.isfinite(M):
        return None
    top = a == M
    e = a - M
    np.exp(e, out=e)
    count = np.count_nonzero(top)
    if count == 1:
        e[top.argmax()] = 0
        return np.log1p(e.sum()) + M  # SciPy adds log(1) = 0, which changes nothing
    np.copyto(e, 0, where=top)
    m = a.dtype.type(count)
    return np.log1p(e.sum() / m) + np.log(m) + M


# --- the same in one compiled call -------------------------------------------------------
# fastmath/backends/_lse_kernel.c runs lse_finite's steps through NumPy's own loops in one
# call, for C-contiguous input with axis None or the last. It is used only once it has
# given lse_finite's very bits on the samples below (its sums follow the way NumPy's
# reduction calls its pairwise sum, which a NumPy release could change).


def _spread(shape, seed):
    """Values in [0, 1) that look random enough to round differently in another order
    (without numpy.random, whose import would cost more than this whole check)."""
    k = np.arange(np.prod(shape), dtype=np.float64).reshape(shape)
    return np.modf(np.abs(np.sin(k * 12.9898 + seed * 78.233)) * 43758.5453)[0]


def _samples():
    for n in (1, 2, 7, 8, 9, 127, 128, 129, 1000, 2049, 4097, 5000, 9001):
        # one maximum, at 0, and a small sum s of the others' terms: the result is
        # log1p(s), close to s, which shows the last bits of s (a result far from 0 hides
        # them); even so a sum in another order may round the same, hence several draws
        for seed in range(3):
            a = -8 * _spread(n, seed) - 5 - np.log(n)
            a[n // 2] = 0
            yield a, None
            yield a.astype(np.float32), None
        a[::3] = 0  # ties: m > 1
        yield a, None
        yield a.astype(np.float32), None
    for shape in ((40, 9), (3, 700), (2, 9001)):
        a = -8 * _spread(shape, 3) - 5 - np.log(shape[1])
        a[:, 1] = 0
        yield a, -1
        yield a.astype(np.float32), -1


def agrees(kernel) -> bool:
    """Whether ``kernel(a, axis, keepdims)`` gives ``lse_finite``'s results bit for bit."""
    with np.errstate(all="ignore"):
        for a, axis in _samples():
            got = kernel(a, axis, False)
            want = lse_finite(a, axis, False)
            if (got is None or type(got[0]) is not type(want)
                    or np.asarray(got[0]).tobytes() != np.asarray(want).tobytes()):
                return False
    return True


_kernel = False  # not looked for yet


def small_kernel():
    """The compiled kernel ``(a, axis, keepdims) -> (result, underflow possible) or None``,
    or None: not built, or not agreeing with ``lse_finite`` under this NumPy."""
    global _kernel
    if _kernel is False:
        module = block_kernel()
        kernel = None if module is None else module.logsumexp
        _kernel = kernel if kernel is not None and agrees(kernel) else None
    return _kernel


_module = False  # not looked for yet


def block_kernel():
    """The compiled kernel's module (``logsumexp``; ``partial`` and ``merge`` for large
    arrays: see _lse_kernel.c), with NumPy's loops bound; None where it was not built."""
    global _module
    if _module is False:
        try:
            from . import _lse_kernel
            # NumPy's own ufuncs, also while fastmath.patch() has numpy.exp replaced
            _lse_kernel.bind(np.exp, np.log, np.log1p, np.add, np.maximum)
            _module = _lse_kernel
        except (ImportError, ValueError):
            _module = None
    return _module
