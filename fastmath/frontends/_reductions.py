"""Reduction front ends with SciPy's semantics: logsumexp, softmax, log_softmax.

The front end resolves dtypes, axes and weights as scipy.special.logsumexp does; a backend
computes only SciPy's (M, m, s) decomposition over the reduced axes (see
backends/_lse.py), which is small; the front end finishes it with SciPy's own formula,
including its treatment of infinite and NaN results, signs, keepdims and scalars.
Whatever is outside that (complex, float16, longdouble, objects, empty input, invalid
arguments) is SciPy's to answer.
"""
from __future__ import annotations

from .._numpy import FLOATS as _FLOATS, dtype_name, np

import operator
import os

from ..dispatch import _chain, _fpe, _selection
from . import _dask, _frames, _lse_steps, _pipeline, _ufunc
from .._registry import BY_NAME
from ..backends import UNCHECKED
from ..backends._lse import lse_finite, small_kernel

_SPEC = _lse_steps.SPEC
_ARRAYS = (np.ndarray, list, tuple, float, int)
_ref = None


def _first_small(a, axis, keepdims):
    """The compiled kernel's first call: look for it (and check it) once."""
    global _small
    _small = small_kernel() or _no_kernel
    return _small(a, axis, keepdims)


def _no_kernel(a, axis, keepdims):
    return None


_small = _first_small


def _reference():
    global _ref
    if _ref is None:
        _ref = _SPEC.reference()
    return _ref


def _valid_axes(axis, ndim):
    """``_lse_steps.normalize_axes``, or None where SciPy's own error should answer the call."""
    try:
        if axis is not None and type(axis) is not tuple:
            if isinstance(axis, (bool, np.bool_)):
                return None  # SciPy: "an integer is required"
            axis = operator.index(axis)  # a list is SciPy's TypeError, not a tuple
        return _lse_steps.normalize_axes(axis, ndim)
    except (TypeError, ValueError, np.exceptions.AxisError):
        return None


def _allocatable(xa) -> None:
    """NumPy's MemoryError, at once, for a broadcast input SciPy could not hold either
    (its temporaries have the input's full size). Where the system overcommits memory
    (``vm.overcommit_memory=1``) NumPy's allocation of a size no machine here could hold
    succeeds, SciPy would then be killed writing into it, and the kernels, which never
    hold it, would run for hours: above this machine's memory and swap (the kernel's own
    default limit) the answer is NumPy's MemoryError all the same."""
    nbytes = xa.size * xa.itemsize
    if nbytes >= 1 << 26 and not xa.flags.owndata:
        np.empty(xa.shape, xa.dtype)
        if nbytes > _memory_ceiling():
            raise _ArrayMemoryError(xa.shape, xa.dtype)


def _memory_ceiling() -> float:
    """This machine's memory and swap in bytes (Linux's /proc/meminfo, else sysconf's
    physical pages); infinite where neither answers."""
    global _ceiling
    if _ceiling is None:
        _ceiling = float("inf")
        try:
            with open("/proc/meminfo") as f:
                kib = {k: int(v.split()[0]) for k, v in
                       (line.split(":", 1) for line in f if ":" in line)}
            _ceiling = float((kib["MemTotal"] + kib.get("SwapTotal", 0)) * 1024)
        except (OSError, KeyError, ValueError, IndexError):
            try:
                _ceiling = float(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
            except (AttributeError, OSError, ValueError):
                pass
    return _ceiling


_ceiling = None


def _ArrayMemoryError(shape, dtype):
    """NumPy's own MemoryError for an allocation it cannot make (its message)."""
    try:
        from numpy._core._exceptions import _ArrayMemoryError as error
        return error(tuple(shape), np.dtype(dtype))
    except (ImportError, TypeError):  # a NumPy that moved it: the same words
        return MemoryError(f"Unable to allocate an array with shape {tuple(shape)} "
                           f"and data type {np.dtype(dtype)}")


def _subtract_overflows(xa, maxima) -> bool:
    """Whether SciPy's ``a - max(a)`` could report an overflow, which the kernels (they
    ignore FP errors) cannot: True sends the call to SciPy. Only a slice with a huge finite
    maximum can overflow; its row is judged against the most negative finite element
    anywhere, which errs towards SciPy. NaNs and infinities elsewhere (in ``maxima``, the
    slices' maxima or any superset of them) must not hide it: SciPy warns for that slice."""
    if np.geterr()["over"] == "ignore":
        return False
    with np.errstate(all="ignore"):
        hi = np.max(maxima, where=np.isfinite(maxima), initial=-np.inf)
        # below this, hi - lo stays under half an ulp past the largest finite value
        if not hi > np.finfo(xa.dtype).max * 2.0 ** -60:
            return False
        lo = np.min(xa, where=np.isfinite(xa), initial=np.inf)
        return bool(np.isinf(lo - hi))


def _weights_overflow(wb, part, n) -> bool:
    """Whether SciPy's weighted sums (``m``, the weights at the maxima, and ``s``, the
    weighted terms) or its ``s / m`` could overflow, which the kernels cannot report: True
    sends the call to SciPy. ``wb``: the weights before broadcasting, ``n``: the elements
    per slice. Every term is at most ``B = max|b|`` (an exp of a shifted value is at most
    1), so every partial sum, in any order, is at most ``n * B``; below a quarter of the
    largest float no sum overflows, whatever rounding, and ``s / m`` cannot either while
    ``|m| * max / 4`` exceeds ``n * B``. ``m`` here may differ from SciPy's by the rounding
    of its sum (``n * eps * B`` at most), hence that margin."""
    if np.geterr()["over"] == "ignore":
        return False
    info = np.finfo(part[1].dtype)
    with np.errstate(all="ignore"):
        bound = n * max(float(np.max(wb)), -float(np.min(wb)))
        if not bound <= float(info.max) / 4:  # NaN weights too: SciPy judges them
            return True
        floor = bound * (4 / float(info.max) + n * float(info.eps))
        return bool(np.any(np.abs(part[1]) <= floor))


def _lse_operands(a, b, keepdims):
    """(a, b, b before broadcasting, dtype, chain) as the kernels take them, or None where
    SciPy must answer."""
    try:
        xa = np.asarray(a)
        xb = None if b is None else np.asarray(b)
    except Exception:
        return None
    # Python scalars are weak in NumPy's promotion (NEP 50), as they are in SciPy's
    weak = (float, int)
    dtype = np.result_type(a if type(a) in weak else xa.dtype,
                           *(() if xb is None else (b if type(b) in weak else xb.dtype,)))
    if dtype.kind in "biu":
        dtype = np.dtype(np.float64)
    if (dtype not in _FLOATS or xa.size == 0 or not isinstance(keepdims, bool)
            or np.geterr()["under"] != "ignore"  # SciPy does not silence underflow
            or (xb is not None and xb.dtype.kind not in "biuf")):
        return None
    chain = _selection.plan(_SPEC, dtype_name(dtype), xa.size)
    if not chain:
        return None
    xa = np.atleast_1d(xa).astype(dtype, copy=False)
    wb = xb
    if xb is not None:
        xb = wb = np.atleast_1d(xb).astype(dtype, copy=False)
        try:
            shape = np.broadcast_shapes(xa.shape, xb.shape)
        except ValueError:
            return None
        xa, xb = np.broadcast_to(xa, shape), np.broadcast_to(xb, shape)
        if xa.size == 0:  # empty weights: SciPy's -inf
            return None
    return xa, xb, wb, dtype, chain


def logsumexp(a, axis=None, b=None, keepdims=False, return_sign=False):
    """Compute the log of the sum of exponentials of input elements.

    Same signature, dtypes and results as ``scipy.special.logsumexp`` (within the
    bound documented for each backend), computed by the backend fastmath selects.

    Parameters
    ----------
    a : array_like
        Input array.
    axis : None or int or tuple of ints, optional
        Axis or axes to sum over; all of them by default.
    b : array_like, optional
        Weights for ``exp(a)``, broadcast against ``a``; may be negative.
    keepdims : bool, optional
        Keep the reduced axes with length one.
    return_sign : bool, optional
        Also return the sign of the sum (then the result is ``log(abs(sum))``).

    Returns
    -------
    res : ndarray or numpy scalar
        ``log(sum(b * exp(a)))`` over ``axis``.
    sgn : ndarray or numpy scalar
        The sign of the sum, if ``return_sign``.

    Notes
    -----
    Without weights or ``return_sign``, a C-contiguous float32 or float64 array of at
    most 2**18 elements, reduced over all axes or the last, takes one compiled call
    (where the package was built with a C compiler) that runs SciPy's steps through
    NumPy's own loops: SciPy's result bit for bit, without the cost of a dozen calls.
    Infinities, NaNs and floating-point errors the error state watches take SciPy's
    own route, with its warnings. Larger C-contiguous float32/float64 arrays reduced over
    all axes, the trailing or the leading ones go through memory once: the same kernel
    takes each cache-sized piece's maximum, then its exp-sum while it is in cache, on
    every core, merging the pieces' partials in a fixed order (the same bits whatever
    the number of threads).

    Examples
    --------
    >>> import numpy as np, fastmath
    >>> float(fastmath.logsumexp(np.array([0.0, 0.0])))  # log(2)
    0.6931471805599453
    >>> fastmath.logsumexp(np.array([1.0, 2.0]), b=np.array([1.0, -1.0]), return_sign=True)
    (np.float64(1.5413248546129181), np.float64(-1.0))
    """
    try:
        if (b is None and not return_sign and type(a) is np.ndarray and type(keepdims) is bool
                and _selection.current() == "auto"):
            # None unless SciPy's edge cases cannot arise; the error state matters only where
            # SciPy's exp could underflow
            done = _small(a, axis, keepdims)
            if done is not None:
                if not done[1] or np.geterr()["under"] == "ignore":
                    return done[0]
            elif a.dtype in _FLOATS and np.geterr()["under"] == "ignore":
                out = lse_finite(a, axis, keepdims)
                if out is not None:
                    return out
        ref = _reference()

        def reference():
            return ref(a, axis=axis, b=b, keepdims=keepdims, return_sign=return_sign)

        if type(a) not in _ARRAYS or (b is not None and type(b) not in _ARRAYS):
            if _dask.is_dask_array(a) or _dask.is_dask_array(b):
                lazy = _dask.logsumexp(a, axis, b, keepdims, return_sign)
                if lazy is not NotImplemented:
                    return lazy
            return reference()
        prepared = _lse_operands(a, b, keepdims)
        if prepared is None:
            return reference()
        xa, xb, wb, dtype, chain = prepared
        axes = _valid_axes(axis, xa.ndim)
        if axes is None:
            return reference()
        _allocatable(xa)
        part = _lse_steps.partial(xa, axes, xb, dtype, chain)
        if _subtract_overflows(xa, part[0]) or (
                xb is not None
                and _weights_overflow(wb, part, xa.size // max(part[0].size, 1))):
            return reference()
        out, sgn = _lse_steps.finish(part, xa, xb, axes, return_sign)
        if not keepdims:
            out = np.squeeze(out, axis=axes)
            sgn = np.squeeze(sgn, axis=axes)
        out = out[()] if out.ndim == 0 else out
        if return_sign:
            return out, (sgn[()] if sgn.ndim == 0 else sgn)
        return out
    except Exception as e:  # NumPy's or SciPy's error, without fastmath's frames
        _frames.trim(e)
        raise


# --- softmax, log_softmax ----------------------------------------------------------------
# Below auto's accelerated size the front end runs SciPy's formula itself, in this thread:
# the same NumPy calls on the same arrays, so the same values, warnings and exceptions,
# without SciPy's array-namespace dispatch (most of its time on small arrays). Above it, a
# backend kernel ``k(x, axes, out)`` writes SciPy's result into ``out`` and returns the FP
# flags it raised (or UNCHECKED, when it cannot see them); where the error state watches
# one of them, the reference is run instead, so its own warnings, exceptions and values
# are what the user gets.


def _softmax(x, axis):
    # axis None: the same reductions as scalars (the same values; fewer steps to a result)
    m = x.max() if axis is None else np.max(x, axis=axis, keepdims=True)
    e = np.subtract(x, m)
    np.exp(e, out=e)
    return np.divide(e, e.sum() if axis is None else np.sum(e, axis=axis, keepdims=True),
                     out=e)


def _log_softmax(x, axis):
    if axis is None:
        m = x.max()
        if np.isfinite(m):
            tmp = np.subtract(x, m)
            return np.subtract(tmp, np.log(np.exp(tmp).sum()), out=tmp)
        tmp = np.subtract(x, 0)  # SciPy's shift for a non-finite maximum
        with np.errstate(divide="ignore"):
            return np.subtract(tmp, np.log(np.exp(tmp).sum()), out=tmp)
    m = np.max(x, axis=axis, keepdims=True)
    finite = np.isfinite(m)
    if finite.all():
        tmp = np.subtract(x, m)
        s = np.log(np.sum(np.exp(tmp), axis=axis, keepdims=True))
    else:
        m[~finite] = 0
        tmp = np.subtract(x, m)
        with np.errstate(divide="ignore"):  # SciPy's: an all -inf slice sums to 0
            s = np.log(np.sum(np.exp(tmp), axis=axis, keepdims=True))
    return np.subtract(tmp, s, out=tmp)


class _Cache:
    """A softmax front end's reference and ``auto``'s smallest accelerated size for it,
    forgotten with the ufuncs' (configuration reloads, debug logging switched on)."""

    def __init__(self, spec):
        self.spec, self.ref, self._small = spec, None, 0
        _ufunc._instances.append(self)

    def reference(self, x, axis):
        if self.ref is None:
            self.ref = self.spec.reference()
        return self.ref(x, axis=axis)


def _softmax_front(name):
    spec = BY_NAME[name]
    cache = _Cache(spec)
    ref = cache.reference
    replay = _log_softmax if name == "log_softmax" else _softmax

    def front(x, axis=None):
        try:
            if (type(x) is np.ndarray and x.size < cache._small and x.dtype in _FLOATS
                    and x.ndim and x.size and (axis is None or type(axis) in (int, tuple))
                    and _selection.current() == "auto"):
                return replay(x, axis)
            if type(x) not in _ARRAYS:
                if _dask.is_dask_array(x):
                    return _dask.softmax(front, x, axis)
                return ref(x, axis)
            try:
                xa = np.asarray(x)
            except Exception:
                return ref(x, axis)
            if not cache._small and _selection.current() == "auto":
                _pipeline.fill_small(cache, spec)
            if xa.dtype not in _FLOATS or xa.size == 0 or xa.ndim == 0:
                return ref(x, axis)
            chain = _selection.plan(spec, dtype_name(xa.dtype), xa.size)
            axes = _valid_axes(axis, xa.ndim)
            if axes is None:
                return ref(x, axis)
            if not chain:  # below this dtype's first row
                return replay(x, axis) if type(x) is np.ndarray else ref(x, axis)
            out = _pipeline.allocate([xa], xa.shape, xa.dtype, "K")
            flags = _chain.first(chain, (xa, axes, out), name)
            if flags == UNCHECKED:
                if _fpe.watched() and (not np.isfinite(out).all()
                                       or _subtract_overflows(xa, xa)):
                    return ref(x, axis)
            elif _fpe.acted_on(flags):
                return ref(x, axis)
            return out
        except Exception as e:  # NumPy's or SciPy's error, without fastmath's frames
            _frames.trim(e)
            raise

    front.__name__ = front.__qualname__ = name
    front.__doc__ = (f"Same signature, dtypes and results as :func:`scipy.special.{name}` "
                     "(within the bound documented for each backend), computed by the "
                     "backend fastmath selects.")
    return front


softmax = _softmax_front("softmax")
log_softmax = _softmax_front("log_softmax")


def front_end(spec):
    """fastmath's function for a reduction row of the registry (made above, at import)."""
    return globals()[spec.name]
