"""The numpy backend: NumPy's and SciPy's own kernels, run over chunks on every core.

Elementwise results are bitwise identical to the reference: each chunk runs the very same
ufunc loop on a view of the input, writing into a view of the output. Small arrays run in
the calling thread with no pool at all.
"""
from __future__ import annotations

import numpy as np

from .. import _parallel
from .._fpe import recorded
from . import HANDLED

# A thread handoff costs about 50 us on the reference machine: below about 1 MiB of
# input to numpy's exp (about 120 us of work) one thread is faster. Costlier functions
# split sooner (Spec.cost).
PARALLEL_MIN_BYTES = 1 << 20
# Reductions work through memory in blocks of about this many elements, so each
# block's several passes stay in cache.
BLOCK = 1 << 15
LSE_COST = 3.0  # a block's passes (max, subtract, exp, compare, sums) against one exp


class NumpyBackend:
    name = "numpy"

    def why_unavailable(self):
        return None

    def kernel(self, spec):
        if spec.kind == "unary":
            return _Unary(spec.reference(), PARALLEL_MIN_BYTES / spec.cost)
        if spec.kind == "logsumexp":
            return lse_partial
        return None


class _Unary:
    __slots__ = ("ufunc", "min_bytes")

    def __init__(self, ufunc, min_bytes):
        self.ufunc = ufunc
        self.min_bytes = min_bytes

    def splits(self, x, out) -> bool:
        """Whether this call writes ``out`` in chunks (one may fail after others wrote)."""
        return out.size * x.itemsize >= self.min_bytes and _parallel.threads() > 1

    def __call__(self, x, out):
        parts = _parallel.threads() if out.size * x.itemsize >= self.min_bytes else 1
        if parts < 2:
            self.ufunc(x, out=out)
            return HANDLED
        if x.shape != out.shape:
            x = np.broadcast_to(x, out.shape)
        ufunc = self.ufunc
        tasks = [lambda xs=xs, os=os: recorded(ufunc, xs, out=os)
                 for xs, os in _parallel.chunk_views((x, out), parts)]
        flags = 0
        for f in _parallel.run(tasks):
            flags |= f
        return flags


# --- logsumexp -------------------------------------------------------------------------
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
            m = np.sum(top, axis=axes, keepdims=True, dtype=a.dtype)
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


def lse_partial(a, axes, b=None):
    """(M, m, s) of ``a`` over ``axes``, in cache-sized blocks across the thread pool."""
    nthreads = _parallel.threads()
    if b is not None or a.nbytes < PARALLEL_MIN_BYTES / LSE_COST or a.ndim == 0:
        return lse_block(a, axes, b)
    axis = _parallel.split_axis(a.shape, a.strides)
    n = a.shape[axis]
    per_row = a.size // n
    rows = max(1, BLOCK // per_row)
    nblocks = -(-n // rows)
    if nblocks < 2:
        return lse_block(a, axes)
    reduced = axis in axes
    out_shape = tuple(1 if i in axes else d for i, d in enumerate(a.shape))
    if not reduced:
        result = [np.empty(out_shape, a.dtype) for _ in range(3)]

    def work(lo, hi):
        acc = None
        for start in range(lo * rows, min(hi * rows, n), rows):
            index = (slice(None),) * axis + (slice(start, min(start + rows, n)),)
            part = lse_block(a[index], axes)
            if reduced:
                acc = part if acc is None else lse_merge(acc, part)
            else:
                for dst, src in zip(result, part):
                    dst[index] = src
        return acc

    tasks = [lambda lo=lo, hi=hi: work(lo, hi)
             for lo, hi in _parallel.bounds(nblocks, min(nthreads, nblocks))]
    parts = _parallel.run(tasks)
    if not reduced:
        return tuple(result)
    acc = parts[0]
    for part in parts[1:]:
        acc = lse_merge(acc, part)
    return acc
