"""fastmath on Dask arrays: lazy results whose chunks run fastmath's kernels on the workers.

Every accelerated function takes a ``dask.array.Array`` and returns one, lazily. Dask is
the engine: elementwise functions become one ``map_blocks`` task per chunk, logsumexp a
``dask.array.reduction`` tree. Rules:

1. fastmath never imports Dask. A Dask array is recognised by looking for ``dask.array``
   in ``sys.modules`` (if it is not there, nothing can be a Dask array).
2. The backend in force when the graph is built (``fastmath.get_backend()``) travels
   with every task, and the chunk runs under it on the worker. A worker that cannot run
   that backend (no GPU for ``torch-cuda``) runs under its own ``auto`` policy instead
   and says so once, in its log (``logging.getLogger("fastmath")``); under
   FASTMATH_STRICT=1 on the worker it raises :class:`fastmath.FallbackError` instead.
3. Results are the eager function's, chunk by chunk: elementwise chunks are computed by
   the very same front end, so the numpy backend is bitwise equal to NumPy. logsumexp
   reduces each chunk to SciPy's (M, m, s) decomposition, merges the partials with the
   backends' own stable merge, and finishes with SciPy's formula.
4. Calls fastmath does not accelerate (``out=``, ``where=`` and other options on
   elementwise functions; dtypes logsumexp's kernels do not take) go to Dask's own
   implementation of the NumPy/SciPy function, still lazy.
"""
from __future__ import annotations

import functools
import logging
import sys
import threading

from .._numpy import FLOATS as _FLOATS, np

from ..dispatch import _selection
from .. import backends
from ..backends._lse import lse_merge
from . import _lse_steps

log = logging.getLogger("fastmath")
_FIELDS = ("M", "m", "s", "t")
_logged: set = set()
_log_lock = threading.Lock()


def is_dask_array(x) -> bool:
    """Whether ``x`` is a Dask array, without importing Dask."""
    mod = sys.modules.get("dask.array")
    return mod is not None and isinstance(x, mod.Array)


# --- on the worker ---------------------------------------------------------------------

def _scope(name: str):
    """The caller's backend, or this process's ``auto`` if it cannot run here."""
    if name != "auto":
        why = backends.why_unavailable(name)
        if why is not None:
            if _selection.strict():
                raise _selection.FallbackError(
                    f"backend {name!r} is unavailable on this worker: {why} "
                    "(FASTMATH_STRICT=1 forbids falling back)")
            with _log_lock:
                first = name not in _logged
                _logged.add(name)
            if first:
                log.warning("fastmath: backend %r, chosen by the caller, is unavailable in "
                            "this worker process (%s); its chunks run under 'auto' here",
                            name, why)
            name = "auto"
    return _selection.backend(name)


def _ufunc_chunk(block, f, backend, kwargs, *more):
    # ``f`` is fastmath's function itself: it pickles by name, for distributed workers
    with _scope(backend):
        return f(block, *more, **kwargs)


def _blocks_chunk(f, backend, kwargs, *blocks):
    return _ufunc_chunk(blocks[0], f, backend, kwargs, *blocks[1:])


def _lse_chunk(a, weights_chunk=None, axis=None, keepdims=True, backend="auto"):
    b = weights_chunk
    if a.size == 0:  # an empty chunk (uneven chunking can make one): the merge's identity
        shape = tuple(1 if i in axis else n for i, n in enumerate(a.shape))
        zero = np.zeros(shape, a.dtype)
        return np.full(shape, -np.inf, a.dtype), zero, zero, zero
    with _scope(backend):
        M, m, s = _lse_steps.partial(a, axis, b, a.dtype)
    # SciPy finishes rows whose result is not finite from log(sum(b * exp(a))) itself.
    # Where M is finite that sum is (m + s) * exp(M); it is summed directly only for
    # blocks that hold what the decomposition cannot carry: an infinite or NaN maximum,
    # or a zero weight on an infinite or NaN element (0 * inf is NaN in the direct sum).
    with np.errstate(all="ignore"):
        t = (m + s) * np.exp(M)
        hidden = b is not None and bool(np.any((b == 0) & ~(a < np.inf)))
        if hidden or not np.isfinite(M).all():
            e = np.exp(a) if b is None else b * np.exp(a)
            direct = np.sum(e, axis=axis, keepdims=True)
            t = direct if hidden else np.where(np.isfinite(M), t, direct)
    return M, m, s, t


def _flatten(parts):
    if isinstance(parts, list):
        for p in parts:
            yield from _flatten(p)
    else:
        yield parts


def _lse_merge(parts):
    parts = list(_flatten(parts))
    M, m, s = functools.reduce(lse_merge, (p[:3] for p in parts))
    with np.errstate(all="ignore"):
        return M, m, s, functools.reduce(np.add, (p[3] for p in parts))


def _lse_combine(parts, axis=None, keepdims=True):
    return _lse_merge(parts)


def _lse_aggregate(parts, axis=None, keepdims=True):
    merged = _lse_merge(parts)
    out = np.empty(merged[0].shape, _record(merged[0].dtype))
    for field, value in zip(_FIELDS, merged):
        out[field] = value
    return out if keepdims else np.squeeze(out, axis=axis)


def _lse_finish(block, return_sign, which):
    M, m, s, t = (np.atleast_1d(block[f]) for f in _FIELDS)
    res = _lse_steps.finish((M, m, s), None, None, None, return_sign, total=t)[which]
    res = res.reshape(block.shape)
    return res[()] if res.ndim == 0 else res


def _record(dtype):
    return np.dtype([(f, dtype) for f in _FIELDS])


# --- building the graph ----------------------------------------------------------------

def ufunc(f, xs, args, kwargs):
    """``f(*xs, *args, **kwargs)`` for a fastmath function ``f`` and Dask array operands."""
    from dask.array.core import elemwise
    from dask.base import tokenize

    def reference():
        return f.reference(*xs, *args, **kwargs)

    dtype = kwargs.get("dtype")
    casting = kwargs.get("casting", "same_kind")
    if args or kwargs.keys() - {"dtype", "casting"}:
        return reference()
    types = tuple(x.dtype if hasattr(x, "dtype") else type(x) for x in xs)
    try:
        *in_dts, out_dt = f._resolve(types, dtype)
        if any(type(t) is not type and t != dt and not np.can_cast(t, dt, casting)
               for t, dt in zip(types, in_dts)):
            return reference()  # NumPy's own casting error
    except Exception:
        return reference()
    backend = _selection.current()
    chunk = functools.partial(_blocks_chunk, f, backend, dict(kwargs))
    # the function by its name: a front end tokenizes as a partial of its closure,
    # which Dask cannot hash deterministically
    token = tokenize(f._spec.name, backend, kwargs, out_dt, *xs)
    name = f"fastmath-{f._spec.name}-{token}"
    return elemwise(chunk, *xs, dtype=out_dt, name=name)


def softmax(f, x, axis):
    """``f(x, axis)`` (softmax, log_softmax) of Dask array ``x``: a block holds whole rows."""
    axes = _lse_steps.normalize_axes(axis, x.ndim)  # NumPy's AxisError, or "repeated axis"
    whole = x.rechunk({a: -1 for a in axes})
    chunk = functools.partial(_blocks_chunk, f, _selection.current(), {"axis": axis})
    dtype = f(np.zeros((1,) * max(x.ndim, 1), x.dtype)).dtype
    return whole.map_blocks(chunk, dtype=dtype, token=f"fastmath-{f.__name__}")


def logsumexp(a, axis=None, b=None, keepdims=False, return_sign=False):
    """scipy.special.logsumexp's semantics on Dask arrays, lazily (see the module docs).

    Returns NotImplemented for what the kernels do not take; the caller then asks SciPy.
    """
    import dask.array as da
    from dask.array.utils import meta_from_array

    a = da.asarray(a)
    if b is not None:
        b = da.asarray(b)
    dtype = np.result_type(a.dtype) if b is None else np.result_type(a.dtype, b.dtype)
    if dtype.kind in "biu":
        dtype = np.dtype(np.float64)
    if (dtype not in _FLOATS or a.size == 0 or not isinstance(keepdims, bool)
            or (b is not None and b.dtype.kind not in "biuf")):
        return NotImplemented
    a = da.atleast_1d(a).astype(dtype)
    if b is not None:
        b = da.atleast_1d(b).astype(dtype)
        shape = np.broadcast_shapes(a.shape, b.shape)
        a = da.broadcast_to(a, shape)  # the reduction broadcasts b to a's chunks
    axes = _lse_steps.normalize_axes(axis, a.ndim)  # NumPy's AxisError, or "repeated axis"
    chunk = functools.partial(_lse_chunk, backend=_selection.current())
    record = _record(dtype)
    ndim = a.ndim if keepdims else a.ndim - len(axes)
    part = da.reduction(a, chunk, _lse_aggregate, axis=axes, keepdims=keepdims,
                        dtype=record, combine=_lse_combine, concatenate=False,
                        meta=meta_from_array(a._meta, ndim=ndim, dtype=record),
                        weights=b, name="fastmath-logsumexp-partial")
    meta = meta_from_array(a._meta, ndim=ndim, dtype=dtype)
    out = part.map_blocks(_lse_finish, return_sign, 0, dtype=dtype, meta=meta,
                          token="fastmath-logsumexp")
    if not return_sign:
        return out
    return out, part.map_blocks(_lse_finish, True, 1, dtype=dtype, meta=meta,
                                token="fastmath-logsumexp-sign")
