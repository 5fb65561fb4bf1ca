"""The numpy backend: NumPy's and SciPy's own kernels, run over chunks on every core.

Elementwise results are bitwise identical to the reference: each chunk runs the very same
ufunc loop on a view of the input, writing into a view of the output. Small arrays run in
the calling thread with no pool at all.
"""
from __future__ import annotations

import math

from .._numpy import FLOATS, np

from ..dispatch import _alloc, _parallel
from ..dispatch._npy_loops import PARALLEL_MIN_BYTES, native_loops
from ..dispatch._fpe import recorded
from . import HANDLED, UNCHECKED
from ._lse import block_kernel, lse_block, lse_merge

# Reductions work through memory in blocks of about this many elements (1 MiB of
# float64, the L2 cache of one core), so each block's several passes stay in cache.
# Measured in CPU time on a 3000x3000 logsumexp: 2**17 did the least work of 2**14..2**18.
BLOCK = 1 << 17


class NumpyBackend:
    name = "numpy"

    def why_unavailable(self):
        return None

    def kernel(self, spec):
        if spec.kind == "elementwise":
            return _Elementwise(spec.reference(), PARALLEL_MIN_BYTES / spec.cost)
        if spec.kind in ("unary", "binary"):
            return _Unary(spec.reference(), PARALLEL_MIN_BYTES / spec.cost,
                          maskable=spec.ref.startswith("numpy:"), cost=spec.cost)
        if spec.kind == "logsumexp":
            return lse_partial
        if spec.kind == "softmax":
            return _Softmax(spec.name == "log_softmax")
        return None

    def foreach(self, spec):
        """The list kernel for ``spec`` (:class:`_List`; one per row, kept: it holds the
        row's pacing records), or None for rows other than unary ones."""
        made = self.__dict__.setdefault("_list_kernels", {})
        kernel = made.get(spec.name)
        if kernel is None and spec.kind == "unary":
            kernel = made[spec.name] = _List(spec)
        return kernel


class _List:
    """fastmath.foreach's list kernel: the reference's own loop over every array of the
    list that NumPy's call would run it over as it is (a C-contiguous, aligned array of
    a dtype the ufunc takes without a cast, below ``limit`` elements), run by the list
    runner on the native runtime (fastmath/dispatch/_lists.c): no Python call per array,
    the list shared among the pool's threads where the runtime's pacing says a split wins,
    each array's FP flags its own. The other arrays are left to the front end.

    NumPy's own one-argument ufuncs only: SciPy's loops may report their errors through
    Python, which the runtime's threads (no GIL) cannot do. Without them (a SciPy row, or
    the runtime not built) it leaves every array."""

    __slots__ = ("loops", "paces", "limit", "stops")

    def __init__(self, spec):
        ok = _lists is not None and spec.ref.startswith("numpy:")
        self.loops = native_loops(spec.reference()) if ok else ()
        # the runtime's pacing records: one for new outputs, one for out= (the first take
        # about 1.3 times as long per element: the allocation, and writing memory not yet
        # in cache)
        self.paces = (_parallel.Pace(), _parallel.Pace())
        # from this size an array is left: the numpy backend splits it on its own; below
        # it, the numpy backend's call of one array is the reference's call as it is
        self.limit = int(PARALLEL_MIN_BYTES / spec.cost / 16)
        self.stops = bool(self.loops)

    def __call__(self, xs, outs, results, limit=None, stop=0):
        loops = self.loops
        if not loops:
            return None, range(len(xs))
        if limit is None:
            limit = self.limit
        if stop and outs is not None:  # one array after another, in this thread
            flags, left, _, _ = _lists.foreach(loops, xs, outs, results, limit, 0,
                                               LIST_PIECE, 1, -1, stop)
            return flags, left
        threads = _parallel.threads()
        pace = self.paces[outs is not None].id() if threads > 1 else -1
        flags, left, allocated, _ = _lists.foreach(loops, xs, outs, results, limit,
                                                   self.limit, LIST_PIECE, threads, pace)
        if allocated >= RECYCLE:
            # many small outputs freed together shrink glibc's heap, and the next call's
            # outputs fault every page in again (about 1000 faults, 10 ms, for 1000 x 1000
            # float64): let freed memory be recycled, as for one large output
            _alloc.tune()
        return flags, left


# Elements per piece of the list the list runner hands to a thread at a time (a list
# short of a piece per thread is shared out equally): small enough that a thread
# whose core is busy elsewhere holds back little of the call, large enough that taking
# a piece (a cache line passed between cores) costs little. 1000 x 1000 float64 exp on
# two threads: 2^13 0.76 ms (0.59 in place), 2^15 0.69 (0.54), 2^16 0.67 (0.54).
LIST_PIECE = 1 << 15
# Outputs allocated by one list call from which glibc is asked to keep freed memory for
# reuse.
RECYCLE = 1 << 20


class _Unary:
    """The reference ufunc's own loop over the arrays as they are laid out: NumPy picks a
    SIMD or a scalar loop by layout, and the two can differ by an ULP, so the front end
    hands over negative strides unflipped (``any_strides``) and a ``where=`` mask whole
    (``masked``) rather than gathering the selected elements into a contiguous run.

    A contiguous call of one of NumPy's own ufuncs of one or two arguments (of one shape
    and dtype) from ``RUNTIME_MIN_BYTES`` (over the row's cost) runs on fastmath's native
    runtime (fastmath/dispatch/_runtime.c):
    NumPy's very loop, looked up once per dtype (``numpy.ufunc._get_strided_loop``), over
    pieces that the caller and the pool's threads claim, no Python per piece, the GIL
    released throughout; the runtime's pacing runs it whole where a split loses now.
    Everything else large splits on the Python pool, one NumPy call per chunk."""

    __slots__ = ("ufunc", "min_bytes", "maskable", "_native", "_pace", "_min_split",
                 "_pool_pace", "_pace_record")
    any_strides = True

    def __init__(self, ufunc, min_bytes, maskable=False, cost=1.0):
        self.ufunc = ufunc
        self.min_bytes = min_bytes
        self.maskable = maskable
        # NumPy's own ufuncs only (``maskable`` says so): SciPy's loops may report their
        # errors through Python, which the runtime's threads (no GIL) cannot do. Looked up
        # on the first call that could use them.
        self._native = None if maskable and _runtime is not None else ()
        self._pace = -1
        self._pool_pace = _parallel.Pace()  # the calls split on the Python pool
        self._min_split = RUNTIME_MIN_BYTES / cost

    def __call__(self, *ins):
        out = ins[-1]
        nbytes = out.nbytes
        if nbytes >= self._min_split and self._native != ():
            flags = self._compiled(ins[0] if len(ins) == 2 else ins[:-1], out)
            if flags is not None:
                return flags
        if nbytes < self.min_bytes:
            self.ufunc(*ins[:-1], out=out)
            return HANDLED
        return self._split(ins[:-1], out, None)

    def masked(self, mask):
        """This kernel on the elements ``mask`` selects, by NumPy's own masked loop; None
        for SciPy's ufuncs, which never see a mask (scipy/scipy#25127)."""
        if not self.maskable:
            return None

        def kernel(*ins):
            out = ins[-1]
            if out.size * out.itemsize < self.min_bytes:
                self.ufunc(*ins[:-1], out=out, where=mask)
                return HANDLED
            return self._split(ins[:-1], out, mask)
        return kernel

    def _split(self, ins, out, mask):
        """A large call, over chunks on the pool; the FP flags for the front end to report."""
        ufunc = self.ufunc
        kw = {} if mask is None else {"where": mask}
        plan = _parallel.plan(self._pool_pace, out.size)
        parts = plan.parts
        if parts < 2:  # one piece after all (one core, or a contended one): the flags are
            # reported as a split call's are, from the caller's line
            flags = recorded(ufunc, *ins, out=out, **kw)
            plan.done()
            return flags
        # chunks follow the output's layout; inputs and the mask may be broadcast views
        extra = () if mask is None else (mask,)
        views = _parallel.chunk_views((out,) + tuple(
            x if x.shape == out.shape else np.broadcast_to(x, out.shape) for x in ins) + extra,
            parts)
        n = len(ins) + 1
        if mask is None:
            tasks = [lambda v=v: recorded(ufunc, *v[1:n], out=v[0]) for v in views]
        else:
            tasks = [lambda v=v: recorded(ufunc, *v[1:n], out=v[0], where=v[n]) for v in views]
        flags = 0
        for f in _parallel.run(tasks, plan):
            flags |= f
        plan.done()
        return flags

    def _loops(self):
        native = self._native
        if native is None:
            native = self._native = native_loops(self.ufunc)
            if native:
                self._pace_record = _parallel.Pace()  # (given back with this kernel)
                self._pace = self._pace_record.id()
        return native

    @property
    def runtime_pace(self):
        """The native runtime's pacing record of this kernel's calls (-1: none)."""
        return self._pace if self._loops() else -1

    def runtime_entry(self):
        """For a front end that runs this kernel's calls itself, without Python in
        between (the ufuncs' fast path in C, frontends/_hot.c): ``(loops, pace, smallest
        size in bytes)`` where a contiguous call of one array of a dtype among ``loops``
        (``_runtime.unary``'s ``loops``) of at least that size runs on the runtime as
        ``_runtime.unary(loops, x, out, pace, 0, 0, 0)``, and a smaller one as NumPy's own
        call; None where this kernel has no such path."""
        if not self._loops():
            return None
        return self._native, self._pace, self._min_split

    def _compiled(self, xs, out):
        """The call on the native runtime, its FP flags; None where that cannot take it
        (broadcasting, another layout, a dtype NumPy's call would cast, an out= overlapping
        an input other than exactly). ``xs``: the operands, or one array.

        One array, the common call, is checked without a generator or a further call: the
        Python around the runtime's call was 1.1 us of a 4.3 us call of log on 10^4
        float32 elements, and auto, timing it so, kept NumPy's call (4.4 us) where the
        runtime's took 3.3 us."""
        native = self._native or self._loops()
        if not native:
            return None
        if type(xs) is tuple:
            if any(x.shape != out.shape for x in xs):
                return None
        elif xs.shape != out.shape:
            return None
        return _runtime.unary(native, xs, out, self._pace, 0, 0, _parallel.threads())


try:
    from ..dispatch import _runtime
except ImportError:  # built without a C compiler: the Python pool splits
    _runtime = None
try:
    from ..dispatch import _lists
except ImportError:  # built without a C compiler: foreach computes array by array
    _lists = None

# From this much output (over the row's cost) a contiguous call of NumPy's own loop may
# split on the native runtime, whose pacing then decides: a split with the pool's
# threads spinning costs a few microseconds.
RUNTIME_MIN_BYTES = 1 << 15


class _Elementwise(_Unary):
    """A plain NumPy function (no ``out=``): each chunk's result is copied into place."""

    def __call__(self, x, out):
        fn = self.ufunc

        def task(xs, os):
            with np.errstate(all="ignore"):  # the front end re-runs the reference to report
                os[...] = fn(xs)
        if out.size * out.itemsize < self.min_bytes:
            task(x, out)
            return UNCHECKED
        plan = _parallel.plan(self._pool_pace, out.size)
        if plan.parts < 2:
            task(x, out)
        else:
            _parallel.run([lambda v=v: task(*v)
                           for v in _parallel.chunk_views((x, out), plan.parts)], plan)
        plan.done()
        return UNCHECKED


class _Softmax:
    """SciPy's softmax/log_softmax formulas, over blocks of the axes they keep.

    Each block is the very computation SciPy does on its slice, so the results are
    SciPy's; with all axes reduced (SciPy's default) a contiguous array runs as the
    leaves of NumPy's own pairwise sum (``_whole``). Returns the FP flags raised, for the
    front end to decide whether SciPy must say what they were.
    """

    __slots__ = ("log", "paces")

    def __init__(self, log):
        self.log = log
        self.paces = (_parallel.Pace(), _parallel.Pace())  # blocks; the whole-array formula

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
        if not kept or x.nbytes * 4 < PARALLEL_MIN_BYTES:
            return recorded(self.block, x, axes, out)
        plan = _parallel.plan(self.paces[0], x.size)
        parts = plan.parts
        if parts < 2:
            flags = recorded(self.block, x, axes, out)
            plan.done()
            return flags
        axis = max(kept, key=lambda a: x.shape[a])
        tasks = []
        for i, j in _parallel.bounds(x.shape[axis], min(parts, x.shape[axis])):
            index = (slice(None),) * axis + (slice(i, j),)
            tasks.append(lambda index=index: recorded(self.block, x[index], axes, out[index]))
        flags = 0
        for f in _parallel.run(tasks, plan):
            flags |= f
        plan.done()
        return flags

    def _whole(self, x, out):
        """The formula over a 1-D ``x`` in cache-sized leaves: ``exp(x - max)`` and its sum
        in one pass, then the division (or subtraction of the log) in another. The leaves'
        sums add up along NumPy's pairwise tree, so the sum is bitwise NumPy's. None for
        a non-finite maximum (the one-block formula answers)."""
        plan = _parallel.plan(self.paces[1], x.size)
        parts = plan.parts

        def pieces(a):
            return _parallel.chunk_views((a,), parts) if parts > 1 else [(a,)]
        top = np.max(_parallel.run([lambda v=v[0]: np.max(v) for v in pieces(x)], plan))
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
        for f, part in _parallel.run([lambda g=g: group(*g) for g in groups], plan):
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
        for f in _parallel.run(tasks, plan):
            flags |= f
        plan.done()
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


# --- logsumexp: SciPy's decomposition (backends/_lse.py) over blocks on the pool ---------


def lse_partial(a, axes, b=None):
    """(M, m, s) of ``a`` over ``axes``, in cache-sized blocks across the thread pool."""
    if b is not None or a.size < 2 * BLOCK or a.ndim == 0:
        return lse_block(a, axes, b)
    if a.flags.c_contiguous and a.flags.aligned and a.dtype.isnative:
        part = _lse_groups(a, axes)
        if part is not None:
            return part
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
        partials = []
        for start in range(lo * rows, min(hi * rows, n), rows):
            index = (slice(None),) * axis + (slice(start, min(start + rows, n)),)
            part = lse_block(a[index], axes)
            if reduced:
                partials.append(part)
            else:
                for dst, src in zip(result, part):
                    dst[index] = src
        return partials

    plan = _parallel.plan(_LSE_PACE, a.size)
    tasks = [lambda lo=lo, hi=hi: work(lo, hi)
             for lo, hi in _parallel.bounds(nblocks, min(plan.parts, nblocks))]
    parts = [p for task in _parallel.run(tasks, plan) for p in task]
    plan.done()
    if not reduced:
        return tuple(result)
    # merged block by block in order, however many threads ran: the same bits every call
    acc = parts[0]
    for part in parts[1:]:
        acc = lse_merge(acc, part)
    return acc


# The compiled kernel (backends/_lse_kernel.c) reduces a group of rows in one call, each
# cache-sized sub-block read from memory once: its maximum, then its exp-sum while in
# cache (the Python blocks above make about ten passes, each with a temporary). Groups
# have a fixed size, so the partials, merged in order, have the same bits whatever the
# number of threads; more groups than threads share out a busy core's slack.
GROUP = 1 << 19


def _lse_groups(a, axes):
    """``lse_partial`` of a C-contiguous array through the compiled kernel, reduced over
    all axes, trailing ones (a result per row) or leading ones (per column); None where
    it cannot take the call (not built, other axes, a maximum that is not finite)."""
    kernel = block_kernel()
    nd = a.ndim
    k = len(axes)
    if kernel is None or a.dtype not in _LSE_DTYPES:
        return None
    if k == nd:
        mode, rows = 0, 1
    elif axes == tuple(range(nd - k, nd)):
        mode, rows = 1, a.size // math.prod(a.shape[nd - k:])
    elif axes == tuple(range(k)):
        mode, rows = 2, math.prod(a.shape[:k])
    else:
        return None
    n = a.size // rows
    out_shape = tuple(1 if i in axes else d for i, d in enumerate(a.shape))
    if mode == 0 or (mode == 1 and n > GROUP):
        # runs of GROUP elements, merged in order within each row
        per = -(-n // GROUP)
        res = [np.empty(rows, a.dtype) for _ in range(3)]
        pieces = [(r * n + lo, 1, min(GROUP, n - lo), r * per + j)
                  for r in range(rows) for j, lo in enumerate(range(0, n, GROUP))]
        parts = [np.empty(len(pieces), a.dtype) for _ in range(3)]
        if not _groups(kernel, a, 0, pieces, parts):
            return None
        for r in range(rows):
            acc = [p[r * per:r * per + 1] for p in parts]
            for i in range(r * per + 1, (r + 1) * per):
                kernel.merge(*acc, *(p[i:i + 1] for p in parts))
            for dst, src in zip(res, acc):
                dst[r] = src[0]
        return tuple(x.reshape(out_shape) for x in res)
    per_group = max(1, GROUP // n)
    starts = range(0, rows, per_group)
    if mode == 1:
        # whole rows per group, each row's result its own
        res = [np.empty(rows, a.dtype) for _ in range(3)]
        pieces = [(lo * n, min(per_group, rows - lo), n, lo) for lo in starts]
    else:
        # groups of rows, each a partial per column, merged in order
        res = [np.empty((len(starts), n), a.dtype) for _ in range(3)]
        pieces = [(lo * n, min(per_group, rows - lo), n, i * n) for i, lo in enumerate(starts)]
    if not _groups(kernel, a, mode, pieces, res):
        return None
    if mode == 2:
        acc = [x[0] for x in res]
        for i in range(1, len(starts)):
            kernel.merge(*acc, *(x[i] for x in res))
        res = acc
    return tuple(x.reshape(out_shape) for x in res)


def _groups(kernel, a, mode, pieces, outs):
    """The compiled kernel's partials of ``pieces`` ((offset, rows, n, out index) each, a
    contiguous block of ``a``) on the native runtime's pool, paced by its policy; False
    where a piece declined. Each piece's partials land in place, so the results have the
    same bits however many threads ran."""
    table = np.array(pieces, dtype=np.int64).reshape(-1, 4)
    return kernel.groups(a, mode, table, *(x.reshape(-1) for x in outs), _parallel.threads())


_LSE_DTYPES = FLOATS


# the pace of the Python blocks (lse_partial)
_LSE_PACE = _parallel.Pace()
