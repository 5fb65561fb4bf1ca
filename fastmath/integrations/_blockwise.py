"""Blockwise mode of ``fastmath.accelerate``: a whole NumPy function, block by block.

A function declared ``elementwise=True`` (each output element depends only on the
matching input elements, with NumPy broadcasting) or ``rows=True`` (each output row only
on the matching input rows) is run over blocks of about ``BLOCK`` elements: each block's
temporaries stay in the core's cache instead of making a pass over memory per operation,
and the blocks are shared out over the thread pool. Each block is the very computation the
whole call does on that slice, so on the numpy backend the result has NumPy's bits.

How a call keeps the unblocked call's meaning:

- outputs (one array or a tuple) are allocated once, with the dtype and trailing shape the
  first block gives; a block whose result is not an array of the block's shape (the
  function was not what it was declared) sends the whole call to the unblocked function;
- an exception in any block stops the others and the unblocked call runs instead, so the
  caller sees the exception the unblocked call raises (or its result);
- blocks run with ``np.errstate`` mode ``log`` for each category the caller does not
  ignore; NumPy's messages are replayed once per call under the caller's error state. Under ``raise`` the unblocked call runs instead, so the
  FloatingPointError comes from the very operation NumPy would stop at;
- every block runs in a copy of the caller's context (its ``fastmath.backend`` scope and
  ``np.errstate``), with ``_parallel.serial`` set so calls inside a block never split again.
"""
from __future__ import annotations

import contextvars
import functools
import inspect
import itertools
import math
import sys

from .._numpy import np

from ..dispatch import _alloc, _config, _fpe, _parallel, _selection

# Elements per block: 2**16 float64 is 512 KiB per temporary, two of them in a 1 MiB L2.
# Each NumPy call in a block costs 1-2 us besides its loop, so smaller blocks lose as much
# as the cache wins for cheap formulas: on one thread of a 2-core AMD EPYC (1 MiB L2 per
# core, 32 MiB L3), CPU time of softplus at 10^7 went 58 ms (2**15), 53 (2**16), 50
# (2**17), plain NumPy 59; GMM E-step 268, 256, 259, plain 282 (medians of 15).
# bench/workloads.py --block-sweep times 2**12..2**18 on any machine.
BLOCK = 1 << 16
# Below this many elements the call runs unblocked: too few blocks to share out.
MIN_SIZE = 1 << 17
# A call of few blocks is cut finer, down to blocks this small: the first block runs alone
# (its result sizes the outputs), so 2 blocks would run one after the other.
SMALLEST = 1 << 13
MODES = ("elementwise", "rows")


class _NotBlockable(Exception):
    """A block gave something other than an array of the block's shape and dtype."""


def _refuse_generators(fn):
    if inspect.isgeneratorfunction(fn) or inspect.isasyncgenfunction(fn):
        kind = "a generator"
    elif inspect.iscoroutinefunction(fn):
        kind = "a coroutine"
    else:
        return
    raise TypeError(f"fastmath.accelerate(elementwise=/rows=) cannot run "
                    f"{getattr(fn, '__qualname__', fn)}() block by block: it is {kind} "
                    "function, whose result is not an array. Use plain @fastmath.accelerate")


def wrap(fn, mode, verify, raw=None, reroute=None):
    """``fn`` (already rerouted through fastmath) run block by block in ``mode``.

    ``raw`` is the function as written, if ``fn`` was rerouted from it: blocks on the
    numpy backend call it, since inside a block fastmath would run NumPy's very loops on
    one thread there, and its front end would be overhead only. ``reroute`` (accelerate
    itself, handed down) reroutes a function again where a Dask task lands.
    """
    if mode not in MODES:
        raise ValueError(f"unknown blockwise mode {mode!r}; valid choices: {', '.join(MODES)}")
    _refuse_generators(fn)
    state = {"verified": False}

    @functools.wraps(fn)
    def blocked(*args, **kwargs):
        if _parallel.serial.get():  # already inside a block or a chunk: this is a block
            return fn(*args, **kwargs)
        if "dask.array" in sys.modules and _has_dask(args, kwargs):
            from . import _blockwise_dask
            return _blockwise_dask.map_blocks(fn, mode, args, kwargs,
                                              lambda a, k: blocked(*a, **k), _Plan, reroute)
        plan = _Plan.make(mode, args, kwargs)
        if plan is None:
            return fn(*args, **kwargs)
        if not state["verified"] and (_config.get().verify if verify is None else verify):
            check(fn, mode, plan, args, kwargs)
            state["verified"] = True
        inner = raw if raw is not None and _selection.current() == "numpy" else fn
        return plan.call(fn, args, kwargs, _parallel.threads(), inner)

    blocked.__fastmath_blockwise__ = mode
    return blocked


def _has_dask(args, kwargs):
    from dask.array import Array
    return any(isinstance(v, Array) for v in itertools.chain(args, kwargs.values()))


class _Plan:
    """Where a call's array arguments are, and how to cut them into blocks."""

    def __init__(self, mode, args, kwargs, operands, shape, blocks):
        self.mode, self.args, self.kwargs = mode, args, kwargs
        self.operands = operands  # [(position or keyword, array)]
        self.shape = shape        # elementwise: the broadcast shape; rows: (N,)
        self.blocks = blocks      # [index tuple over ``shape``]

    @classmethod
    def make(cls, mode, args, kwargs):
        """A plan, or None where the call should run unblocked."""
        operands = _operands(args, kwargs)
        if not operands:
            return None
        cut = _rows_cut(operands) if mode == "rows" else _elementwise_cut(operands)
        if cut is None:
            return None
        operands, shape, k, inner = cut
        return cls(mode, args, kwargs, operands, shape, _blocks(shape, k, inner))

    def block_args(self, index):
        args, kwargs = list(self.args), dict(self.kwargs)
        nd = len(self.shape)
        for key, v in self.operands:
            if self.mode == "rows":
                part = v[index[0]]
            elif v.shape == self.shape:  # most operands: no broadcasting to undo
                part = v[index]
            else:
                # an operand's own dims, right-aligned; broadcast (length 1) dims kept whole
                own = tuple(slice(None) if n == 1 else index[nd - v.ndim + t]
                            if nd - v.ndim + t < len(index) else slice(None)
                            for t, n in enumerate(v.shape))
                part = v[own]
            if type(key) is int:
                args[key] = part
            else:
                kwargs[key] = part
        return args, kwargs

    def block_shape(self, index):
        """The shape (elementwise) or the row count (rows) a block's result must have."""
        extents = tuple(s.stop - s.start for s in index)  # make() writes both, in bounds
        return extents[0] if self.mode == "rows" else extents + self.shape[len(index):]

    def call(self, fn, args, kwargs, threads, inner=None):
        """The blocked call (``inner`` in the blocks, default ``fn``); the unblocked one
        wherever the blocks cannot stand for it."""
        try:
            return self.run(fn if inner is None else inner, threads)
        except _NotBlockable:
            pass
        except Exception:  # noqa: BLE001 - the unblocked call raises its own, or succeeds
            pass
        return fn(*args, **kwargs)

    def run(self, fn, threads):
        # what the caller ignores stays ignored in the blocks (no checks for nothing);
        # the rest is written to a log, to be acted on once the blocks are done
        self.modes = {k: "ignore" if v == "ignore" else "log" for k, v in np.geterr().items()}
        head = _fpe.Log()
        first = _Context().run(self._one, fn, self.blocks[0], head)
        outs, single = self._allocate(first, self.blocks[0])
        self._store(outs, first, self.blocks[0])
        counter = itertools.count(1)
        stop = []
        n = len(self.blocks)

        def loop(log):
            # one error state for all of a worker's blocks: entering one costs a few us,
            # as much as the rest of a block's bookkeeping
            with np.errstate(call=log, **self.modes):
                while not stop:
                    b = next(counter)
                    if b >= n:
                        return
                    try:
                        index = self.blocks[b]
                        args, kwargs = self.block_args(index)
                        self._store(outs, fn(*args, **kwargs), index)
                    except BaseException:
                        stop.append(True)  # the other workers end after their current block
                        raise

        workers = max(1, min(threads, n - 1))
        logs = [_fpe.Log() for _ in range(workers)]
        contexts = [_Context() for _ in range(workers)]
        if n > 1:
            _parallel.run([lambda c=c, g=g: c.run(loop, g) for c, g in zip(contexts, logs)])
        lines = list(dict.fromkeys(head.lines + [x for g in logs for x in g.lines]))
        if lines:
            modes = np.geterr()
            if any(modes[key] == "raise" for key, bit, _ in _fpe.CATEGORIES
                   for line in lines if _fpe.parse(line)[1] & bit):
                raise _NotBlockable  # the unblocked call raises where NumPy would
            _fpe.replay(lines)
        return outs[0] if single else tuple(outs)

    def _one(self, fn, index, log):
        args, kwargs = self.block_args(index)
        with np.errstate(call=log, **self.modes):
            return fn(*args, **kwargs)

    def _allocate(self, result, index):
        single = not isinstance(result, tuple)
        results = (result,) if single else result
        want = self.block_shape(index)
        outs = []
        for r in results:
            if type(r) is not np.ndarray or not _fits(r, want, self.mode):
                raise _NotBlockable
            shape = self.shape + r.shape[1:] if self.mode == "rows" else self.shape
            # a fresh 80 MB output is a fresh mmap, zeroed page by page as blocks land in
            # it (about 30000 faults a call in 4 KiB pages): recycle freed memory as
            # fastmath's own outputs do; on the numpy backend nothing else would
            _alloc.expect(math.prod(shape) * r.dtype.itemsize)
            outs.append(np.empty(shape, r.dtype))
        return outs, single

    def _store(self, outs, result, index):
        results = result if isinstance(result, tuple) else (result,)
        if len(results) != len(outs):
            raise _NotBlockable
        want = self.block_shape(index)
        for o, r in zip(outs, results):
            if (type(r) is not np.ndarray or r.dtype != o.dtype or not _fits(r, want, self.mode)
                    or (self.mode == "rows" and r.shape[1:] != o.shape[1:])):
                raise _NotBlockable
            o[index] = r


def _fits(r, want, mode):
    return (r.ndim >= 1 and r.shape[0] == want) if mode == "rows" else r.shape == want


class _Context:
    """A copy of the caller's context, marked so that nothing inside splits again."""

    __slots__ = ("ctx",)

    def __init__(self):
        self.ctx = contextvars.copy_context()
        self.ctx.run(_parallel.serial.set, True)

    def run(self, fn, *args):
        return self.ctx.run(fn, *args)


def check(fn, mode, plan, args, kwargs):
    """Compare the blocked and the unblocked call on the numpy backend, bit for bit."""
    from ..dispatch._selection import backend

    with backend("numpy"), np.errstate(all="ignore"):
        expected = fn(*args, **kwargs)
        try:
            got = plan.run(fn, _parallel.threads())
        except _NotBlockable:
            got = None
    name = getattr(fn, "__qualname__", repr(fn))
    why = _difference(got, expected)
    if why:
        raise ValueError(
            f"fastmath.accelerate({mode}=True): {name}() gives a different result block by "
            f"block than called whole ({why}), so it is not {_MEANING[mode]}. Remove "
            f"{mode}=True from its decorator (see docs/blockwise.md for what qualifies)")


_MEANING = {"elementwise": "elementwise (each output element from the matching input "
                           "elements alone)",
            "rows": "row by row (each output row from the matching input rows alone)"}


def _difference(got, expected):
    """Why two results differ, or '' where they are the same bits."""
    if got is None:
        return "its blocks do not give arrays of the block's shape"
    gs = got if isinstance(got, tuple) else (got,)
    es = expected if isinstance(expected, tuple) else (expected,)
    if len(gs) != len(es):
        return f"{len(gs)} outputs instead of {len(es)}"
    for i, (g, e) in enumerate(zip(gs, es)):
        e = np.asarray(e)
        if g.dtype != e.dtype or g.shape != e.shape:
            return f"output {i}: {g.dtype}{list(g.shape)} instead of {e.dtype}{list(e.shape)}"
        bad = differ(g, e)
        if bad.any():
            where = np.unravel_index(int(np.argmax(bad)), bad.shape)
            return (f"output {i}: {int(bad.sum())} of {bad.size} elements differ, first at "
                    f"index {tuple(map(int, where))}: {g[where]!r} instead of {e[where]!r}")
    return ""


def differ(a, b):
    """Elementwise: whether two arrays of one dtype and shape hold different bits."""
    a, b = np.ascontiguousarray(a), np.ascontiguousarray(b)
    size = a.dtype.itemsize
    if a.dtype.kind in "OUSV" or size not in (1, 2, 4, 8):
        if a.dtype.kind == "O" or size == 0:
            return a != b
        raw = (a.view(np.uint8).reshape(a.shape + (size,))
               != b.view(np.uint8).reshape(b.shape + (size,)))
        return raw.any(axis=-1)
    unsigned = np.dtype(f"u{size}")
    return a.view(unsigned) != b.view(unsigned)


def _operands(args, kwargs):
    """[(position or keyword, ndarray)] of the array arguments (lists made arrays); None
    where one rules blocking out (a subclass, a list of objects)."""
    operands = []
    for key, v in itertools.chain(enumerate(args), kwargs.items()):
        if type(v) is list:
            v = np.asarray(v)
            if v.dtype == object:
                return None
        elif type(v) is not np.ndarray:
            if isinstance(v, np.ndarray):  # a subclass: its own rules, unblocked
                return None
            continue
        if v.ndim:
            operands.append((key, v))
    return operands


def _rows_cut(operands):
    """(operands, shape, axis cut, elements per step along it) for rows, or None."""
    n = operands[0][1].shape[0]
    operands = [(k, v) for k, v in operands if v.shape[0] == n]
    width = max(math.prod(v.shape[1:]) for _, v in operands)
    if n < 2 or n * width < MIN_SIZE:
        return None
    return operands, (n,), 0, max(1, width)


def _elementwise_cut(operands):
    """The same for elementwise: the broadcast shape, cut along its outermost axis whose
    trailing part fits a block."""
    try:
        shape = np.broadcast_shapes(*(v.shape for _, v in operands))
    except ValueError:
        return None
    if math.prod(shape) < MIN_SIZE:
        return None
    k = len(shape) - 1
    while k > 0 and math.prod(shape[k:]) <= BLOCK:
        k -= 1
    return operands, shape, k, math.prod(shape[k + 1:])


def _blocks(shape, k, inner):
    """Index tuples over ``shape``, cutting axis ``k`` (``inner`` elements a step)."""
    parts = -(-shape[k] // max(1, BLOCK // inner))
    # the first block alone, then at least two for each thread
    wanted = -(-(1 + 2 * _parallel.threads()) // math.prod(shape[:k]))
    if parts < wanted:
        parts = max(parts, min(wanted, shape[k] * inner // SMALLEST, shape[k]))
    ranges = [slice(i, j) for i, j in _parallel.bounds(shape[k], parts)]
    lead = [tuple(slice(i, i + 1) for i in ix) for ix in np.ndindex(*shape[:k])]
    blocks = [ix + (r,) for ix in lead for r in ranges]
    first, small = blocks[0][-1], max(1, SMALLEST // inner)
    if len(blocks) > 1 and first.stop - first.start > 2 * small:
        # the first block runs alone while the other threads wait: keep it small
        cut = first.start + small
        blocks[:1] = [blocks[0][:-1] + (slice(first.start, cut),),
                      blocks[0][:-1] + (slice(cut, first.stop),)]
    return blocks
