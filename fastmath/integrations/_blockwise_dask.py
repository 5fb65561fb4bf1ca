"""A blockwise function given a Dask array: one ``blockwise`` layer, one task per chunk.

``elementwise``: every array argument takes part, broadcast as NumPy broadcasts (trailing
dimensions aligned, chunks unified by Dask). ``rows``: the arguments whose first axis has
the first array's length are cut along that axis only (their other axes become one chunk);
the other arguments are passed whole. Each task runs the function over cache-sized blocks
of its chunk in its own thread (Dask's workers already use the cores), under the backend
scope in force when the graph was built. Tuple outputs come from one task per chunk too:
each output picks its item from the chunk's tuple.
"""
from __future__ import annotations

import contextvars
import itertools
import operator

from .._numpy import np

from ..dispatch import _parallel


class _Chunk:
    """The task run on each chunk: picklable, so it reaches distributed workers."""

    def __init__(self, fn, mode, scope, args, kwargs, keys, plan, reroute):
        self.fn, self.mode, self.scope = fn, mode, scope
        self.args, self.kwargs, self.keys = args, kwargs, keys
        # _blockwise's block plan and accelerate, handed down (both pickle by name)
        self.plan, self.reroute = plan, reroute

    def __getstate__(self):
        state = dict(self.__dict__)
        # a rerouted function's globals are a view that does not pickle: send the
        # original and reroute it again where it lands
        state["fn"] = getattr(self.fn, "__wrapped__", self.fn)
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        if self.reroute is not None:
            self.fn = self.reroute(self.fn)

    def __call__(self, *blocks):
        from ..dispatch._selection import backend

        args, kwargs = list(self.args), dict(self.kwargs)
        for key, block in zip(self.keys, blocks):
            if type(key) is int:
                args[key] = block
            else:
                kwargs[key] = block
        ctx = contextvars.copy_context()

        def run():
            with backend(self.scope):
                plan = self.plan.make(self.mode, args, kwargs)
                if plan is None:
                    return self.fn(*args, **kwargs)
                _parallel.serial.set(True)  # this context only: the blocks, one thread
                return plan.call(self.fn, args, kwargs, 1)
        return ctx.run(run)


def _sample(x, mode):
    """A one-element-per-axis NumPy stand-in for an operand, for the output's dtypes."""
    shape = (1,) + tuple(x.shape[1:]) if mode == "rows" else (1,) * x.ndim
    return np.ones(shape, dtype=x.dtype)


def map_blocks(fn, mode, args, kwargs, local, plan, reroute):
    """The Dask array(s) ``fn(*args, **kwargs)`` gives; ``local(args, kwargs)`` where the
    rows are all NumPy's (only a parameter was a Dask array: it is computed). ``plan``
    cuts a chunk into blocks (_blockwise._Plan); ``reroute`` reroutes ``fn`` again on a
    worker (accelerate; None: ``fn`` is sent as it is)."""
    import dask.array as da

    from ..dispatch._selection import current

    operands = [(k, v) for k, v in itertools.chain(enumerate(args), kwargs.items())
                if isinstance(v, (da.Array, np.ndarray, list)) and np.ndim(v) >= 1]
    template_args, template_kwargs = list(args), dict(kwargs)
    if mode == "rows":
        operands = _rows_only(operands, template_args, template_kwargs)
        if not any(isinstance(v, da.Array) for _, v in operands):
            return local(template_args, template_kwargs)
    arrays = _dask_arrays([v for _, v in operands], mode)
    keys = [k for k, _ in operands]
    task = _Chunk(fn, mode, current(), template_args, template_kwargs, keys, plan, reroute)
    sample_args, sample_kwargs = list(template_args), dict(template_kwargs)
    for k, v in zip(keys, arrays):
        _put(sample_args, sample_kwargs, k, _sample(v, mode))
    with np.errstate(all="ignore"):
        sample = fn(*sample_args, **sample_kwargs)
    outputs = [np.asarray(o) for o in (sample if isinstance(sample, tuple) else (sample,))]
    return _graph(task, arrays, outputs, mode, getattr(fn, "__name__", "blockwise"))


def _rows_only(operands, args, kwargs):
    """The operands cut along the first axis (the first one's length); the others are
    computed if need be and passed whole to every task, through ``args``/``kwargs``."""
    import dask.array as da

    n = np.shape(operands[0][1])[0]
    for k, v in operands:
        if np.shape(v)[0] != n:
            _put(args, kwargs, k, v.compute() if isinstance(v, da.Array) else v)
    return [(k, v) for k, v in operands if np.shape(v)[0] == n]


def _dask_arrays(values, mode):
    """Every operand as a Dask array, NumPy ones chunked as the Dask ones they meet."""
    import dask.array as da

    chunks = {}  # output axis (counted from the end) and length -> the chunks to match
    for v in values:
        if isinstance(v, da.Array):
            for t, c in enumerate(v.chunks[:1] if mode == "rows" else v.chunks):
                chunks.setdefault((_axis(v.ndim, t, mode), sum(c)), c)
    arrays = []
    for v in values:
        if not isinstance(v, da.Array):
            v = np.asarray(v)
            v = da.from_array(v, chunks=tuple(chunks.get((_axis(v.ndim, t, mode), n), -1)
                                              for t, n in enumerate(v.shape)))
        if mode == "rows":
            v = v.rechunk({a: -1 for a in range(1, v.ndim)})
        arrays.append(v)
    return arrays


def _graph(task, arrays, outputs, mode, name):
    """One ``blockwise`` layer running ``task`` per chunk; a tuple of outputs picks each
    item from the chunk's tuple."""
    import dask.array as da

    nd = max(a.ndim for a in arrays)
    if mode == "rows":
        pairs = [p for i, a in enumerate(arrays)
                 for p in (a, ("r",) + tuple(f"in{i}_{t}" for t in range(1, a.ndim)))]
        out_ind = ("r",)
    else:
        pairs = [p for a in arrays for p in (a, tuple(range(nd - a.ndim, nd)))]
        out_ind = tuple(range(nd))
    if len(outputs) == 1:
        o = outputs[0]
        extra = {f"out_{t}": o.shape[t] for t in range(1, o.ndim)} if mode == "rows" else {}
        return da.blockwise(task, out_ind + tuple(extra), *pairs, new_axes=extra, token=name,
                            dtype=o.dtype, concatenate=True, meta=np.empty((0,) * o.ndim,
                                                                           o.dtype))
    tmp = da.blockwise(task, out_ind, *pairs, dtype=object, concatenate=True, token=name,
                       meta=np.empty((0,) * len(out_ind), object))
    results = []
    for i, o in enumerate(outputs):
        pick = operator.itemgetter(i)
        if mode == "rows":
            chunks = tmp.chunks[:1] + tuple((s,) for s in o.shape[1:])
            results.append(tmp.map_blocks(pick, chunks=chunks, new_axis=list(range(1, o.ndim)),
                                          dtype=o.dtype, meta=np.empty((0,) * o.ndim, o.dtype)))
        else:
            results.append(tmp.map_blocks(pick, dtype=o.dtype, meta=np.empty((0,) * nd, o.dtype)))
    return tuple(results)


def _axis(ndim, t, mode):
    """Axis ``t`` of an operand as an axis of the output: from the end (broadcasting)."""
    return 0 if mode == "rows" else ndim - t


def _put(args, kwargs, key, value):
    if type(key) is int:
        args[key] = value
    else:
        kwargs[key] = value
