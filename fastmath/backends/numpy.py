"""The numpy backend: NumPy's and SciPy's own kernels, run over chunks on every core.

Elementwise results are bitwise identical to the reference: each chunk runs the very same
ufunc loop on a view of the input, writing into a view of the output. Small arrays run in
the calling thread with no pool at all.
"""
from __future__ import annotations

import math

from .._numpy import np

from .. import _parallel
from .._fpe import recorded
from . import HANDLED, UNCHECKED

# A thread handoff costs about 50 us on the reference machine: below about 1 MiB of
# input to numpy's exp (about 120 us of work) one thread is faster. Costlier functions
# split sooner (Spec.cost).
PARALLEL_MIN_BYTES = 1 << 20
# Reductions work through memory in blocks of about this many elements (1 MiB of
# float64, the L2 cache of one core), so each block's several passes stay in cache.
# Measured in CPU time on a 3000x3000 logsumexp: 2**17 did the least work of 2**14..2**18.
BLOCK = 1 << 17


class NumpyBackend:
    name = "numpy"

    def why_unavailable(self):
        return None

    def kernel(self, spec):
        if spec.kind in _KERNELS:
            return _KERNELS[spec.kind](spec.reference(), PARALLEL_MIN_BYTES / spec.cost)
        if spec.kind == "logsumexp":
            return lse_partial
        if spec.kind == "softmax":
            return _Softmax(spec.name == "log_softmax")
        return None


class _Unary:
    __slots__ = ("ufunc", "min_bytes")

    def __init__(self, ufunc, min_bytes):
        self.ufunc = ufunc
        self.min_bytes = min_bytes

    def __call__(self, *ins):
        out = ins[-1]
        parts = _parallel.threads_now() if out.size * out.itemsize >= self.min_bytes else 1
        if parts < 2:
            self.ufunc(*ins[:-1], out=out)
            return HANDLED
        ufunc = self.ufunc
        # chunks follow the output's layout; inputs may be broadcast views
        views = _parallel.chunk_views((out,) + tuple(
            x if x.shape == out.shape else np.broadcast_to(x, out.shape) for x in ins[:-1]), parts)
        tasks = [lambda v=v: recorded(ufunc, *v[1:], out=v[0]) for v in views]
        flags = 0
        for f in _parallel.run(tasks, adaptive=True):
            flags |= f
        return flags


class _Elementwise(_Unary):
    """A plain NumPy function (no ``out=``): each chunk's result is copied into place."""

    def __call__(self, x, out):
        parts = _parallel.threads_now() if out.size * out.itemsize >= self.min_bytes else 1
        fn = self.ufunc

        def task(xs, os):
            with np.errstate(all="ignore"):  # the front end re-runs the reference to report
                os[...] = fn(xs)
        if parts < 2:
            task(x, out)
        else:
            _parallel.run([lambda v=v: task(*v) for v in _parallel.chunk_views((x, out), parts)],
                          adaptive=True)
        return UNCHECKED


class _Softmax:
    """SciPy's softmax/log_softmax formulas, over blocks of the axes they keep.

    Each block is the very computation SciPy does on its slice, so the results are
    SciPy's; with all axes reduced (SciPy's default) a contiguous array runs as the
    leaves of NumPy's own pairwise sum (``_whole``). Returns the FP flags raised, for the
    front end to decide whether SciPy must say what they were.
    """

    __slots__ = ("log",)

    def __init__(self, log):
        self.log = log

    def block(self, x, axes, out):
        m = np.max(x, axis=axes, keepdims=True)
        if self.log:
            m[~np.isfinite(m)] = 0
        np.subtract(x, m, out=out)
        if self.log:
            s = np.log(np.sum(np.exp(out), axis=axes, keepdims=True))
            np.subtract(out, s, out=out)
        else:
            np.exp(out, out=out)
            np.divide(out, np.sum(out, axis=axes, keepdims=True), out=out)

    def __call__(self, x, axes, out):
        if len(axes) == x.ndim and x.size > 2 * LEAF:
            for order, flag in (("C", "C_CONTIGUOUS"), ("F", "F_CONTIGUOUS")):
                if x.flags[flag] and out.flags[flag]:
                    flags = self._whole(x.reshape(-1, order=order), out.reshape(-1, order=order))
                    if flags is not None:
                        return flags
        kept = [a for a in range(x.ndim) if a not in axes and x.shape[a] > 1]
        parts = _parallel.threads_now() if kept and x.nbytes * 4 >= PARALLEL_MIN_BYTES else 1
        if parts < 2:
            return recorded(self.block, x, axes, out)
        axis = max(kept, key=lambda a: x.shape[a])
        tasks = []
        for i, j in _parallel.bounds(x.shape[axis], min(parts, x.shape[axis])):
            index = (slice(None),) * axis + (slice(i, j),)
            tasks.append(lambda index=index: recorded(self.block, x[index], axes, out[index]))
        flags = 0
        for f in _parallel.run(tasks, adaptive=True):
            flags |= f
        return flags

    def _whole(self, x, out):
        """The formula over a 1-D ``x`` in cache-sized leaves: ``exp(x - max)`` and its sum
        in one pass, then the division (or subtraction of the log) in another. The leaves'
        sums add up along NumPy's pairwise tree, so the sum is bitwise NumPy's. None for
        a non-finite maximum (the one-block formula answers)."""
        parts = _parallel.threads_now()

        def pieces(a):
            return _parallel.chunk_views((a,), parts) if parts > 1 else [(a,)]
        top = np.max(_parallel.run([lambda v=v[0]: np.max(v) for v in pieces(x)], adaptive=True))
        if not np.isfinite(top):
            return None
        tree = _pairwise(0, x.size)
        leaves = list(_leaves(tree))
        log = self.log

        def shifted(lo, hi, sums):
            for i, j in leaves[lo:hi]:
                o = out[i:j]
                np.subtract(x[i:j], top, out=o)
                sums.append(np.sum(np.exp(o)) if log else np.sum(np.exp(o, out=o)))

        def group(lo, hi):
            sums = []
            return recorded(shifted, lo, hi, sums), sums

        groups = _parallel.bounds(len(leaves), min(len(leaves), 4 * parts if parts > 1 else 1))
        flags, sums = 0, []
        for f, part in _parallel.run([lambda g=g: group(*g) for g in groups], adaptive=True):
            flags |= f
            sums += part
        total = _fold(tree, iter(sums))
        if log:
            total = np.log(total)
            finish = np.subtract
        else:
            finish = np.divide
        tasks = [lambda v=v[0]: recorded(finish, v, total, out=v)
                 for v in pieces(out)]
        for f in _parallel.run(tasks, adaptive=True):
            flags |= f
        return flags


# NumPy sums a contiguous run by halving it (rounded down to a multiple of 8) until the
# halves are short; the halves' sums are added last. Leaves of this size or less are
# whole subtrees, so np.sum of each, added up along the tree, is NumPy's sum bit for bit.
LEAF = 1 << 15


def _pairwise(lo, n):
    if n <= LEAF:
        return (lo, lo + n)
    half = n // 2
    half -= half % 8
    return [_pairwise(lo, half), _pairwise(lo + half, n - half)]


def _leaves(tree):
    if isinstance(tree, tuple):
        yield tree
    else:
        yield from _leaves(tree[0])
        yield from _leaves(tree[1])


def _fold(tree, sums):
    if isinstance(tree, tuple):
        return next(sums)
    return _fold(tree[0], sums) + _fold(tree[1], sums)


_KERNELS = {"unary": _Unary, "binary": _Unary, "elementwise": _Elementwise}


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


def lse_partial(a, axes, b=None):
    """(M, m, s) of ``a`` over ``axes``, in cache-sized blocks across the thread pool."""
    if b is not None or a.size < 2 * BLOCK or a.ndim == 0:
        return lse_block(a, axes, b)
    nthreads = _parallel.threads_now()
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
    parts = _parallel.run(tasks, adaptive=True)
    if not reduced:
        return tuple(result)
    acc = parts[0]
    for part in parts[1:]:
        acc = lse_merge(acc, part)
    return acc


# --- logsumexp of finite input, small enough for one thread ------------------------------
# SciPy's logsumexp checks for infinities and NaNs in about twenty small NumPy calls before
# it computes. With a finite maximum none of that can change the result, which is then
# SciPy's own formula, log1p(s / m) + log(m) + M, over the same arrays with the same
# reductions: bitwise equal to SciPy's, in a third of the calls.
FAST_MAX = 2 * BLOCK


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
