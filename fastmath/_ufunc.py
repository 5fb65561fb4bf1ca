"""The ufunc front end: NumPy's semantics for unary functions live here and only here.

A call is handled in this order:

1. ``auto`` with a small plain ndarray and no options: the reference ufunc is called
   directly (the whole overhead is one attribute check and a context-variable read).
2. Anything fastmath does not accelerate (subclasses, objects with ``__array_ufunc__``,
   object/string/longdouble dtypes, casting and ``out=`` corner cases, ``signature=``)
   is passed unchanged to the reference, so the user gets NumPy's own result or error.
3. Otherwise the front end does NumPy's work once: converts the input, resolves dtypes
   with the reference's own type resolution, casts, allocates the output with NumPy
   (or takes ``out=``), applies ``where=`` by computing only the selected elements, runs
   the first backend kernel that accepts the call, reports floating-point errors the way
   NumPy would, and returns a NumPy scalar for scalar input.
"""
from __future__ import annotations

import warnings

from ._numpy import np

from . import _config, _fpe, _log, _native, _selection
from . import dask as _dask
from .backends import HANDLED, UNCHECKED

_ndarray = np.ndarray
_current = _selection.current
_scoped_get = _selection._scoped.get
_state = _selection.state
_log_state = _log.state
_logger = _log.logger
_KEYWORDS = frozenset(("out", "where", "casting", "order", "dtype", "subok", "signature"))
_SCALARS = (float, int, bool, complex, list, tuple)
_ORDERS = ("K", "A", "C", "F")
_NUMERIC = "biufc"
_instances: list = []


class _Doc:
    """The class's own docstring on the class, the reference's on each instance."""

    def __init__(self, doc):
        self.doc = doc

    def __get__(self, obj, cls=None):
        return self.doc if obj is None else obj.reference.__doc__


class Ufunc:
    """A NumPy-compatible ufunc that runs on the backend fastmath selects.

    ``fastmath.exp``, ``fastmath.log``, ``fastmath.erf``, ... are instances, one per
    registry row. Calls take exactly the reference ufunc's arguments
    (``x, /, out=None, *, where=True, casting="same_kind", order="K", dtype=None,
    subok=True``) and return what it returns; every attribute fastmath does not define
    (``nin``, ``types``, ``reduce``, ``outer``, ...) is the reference's own, and so is
    ``__doc__``: its examples are NumPy's/SciPy's, tested by them, and not run again
    here.

    Examples
    --------
    >>> import numpy, fastmath
    >>> fastmath.exp.reference is numpy.exp
    True
    >>> x = numpy.array([0.0, 1.0, -numpy.inf])
    >>> fastmath.exp(x)
    array([1.        , 2.71828183, 0.        ])
    >>> fastmath.exp(numpy.int8(1)).dtype  # numpy's type resolution: int8 -> float16
    dtype('float16')
    >>> with numpy.errstate(divide="raise"):
    ...     fastmath.log(numpy.zeros(3))
    Traceback (most recent call last):
    ...
    FloatingPointError: divide by zero encountered in log
    """

    def __init__(self, spec):
        self._spec = spec
        self.__name__ = self.__qualname__ = spec.name
        # Below this size ``auto`` calls the reference at once. It comes from the cost
        # table, which is read at the first call, not at import: 0 until then, and 0
        # while debug logging is on, so that every call takes the logged path.
        self._small = 0
        _instances.append(self)
        self._resolved: dict = {}
        module = spec.ref.partition(":")[0]
        # NumPy is imported already; SciPy is imported on the first call.
        self._ref = spec.reference() if module == "numpy" else self._load

    @property
    def __signature__(self):
        import inspect

        return inspect.signature(self.reference)

    def _load(self, *args, **kwargs):
        self._ref = self._spec.reference()
        return self._ref(*args, **kwargs)

    @property
    def reference(self):
        """The NumPy/SciPy ufunc this one mirrors."""
        if self._ref == self._load:
            self._ref = self._spec.reference()
        return self._ref

    def __getattr__(self, name):
        if name.startswith("__") or name in ("_ref", "_spec", "_small", "_resolved"):
            raise AttributeError(name)
        return getattr(self.reference, name)

    @property
    def __class__(self):
        # isinstance(fastmath.exp, numpy.ufunc) is True, as code that dispatches on
        # ufuncs expects (numpy.ufunc cannot be subclassed); type() is still Ufunc.
        return np.ufunc


    def __repr__(self):
        return f"<fastmath ufunc {self.__name__!r} (accelerated {self._spec.ref.replace(':', '.')})>"

    def __reduce__(self):
        return (_lookup, (self.__name__,))

    def __call__(self, x, /, *args, **kwargs):
        # The hot path: one of the few things that runs on every call. The arguments are
        # numpy's (see __signature__); they are parsed only off this path.
        if not args and not kwargs and type(x) is _ndarray and x.size < self._small:
            scoped = _scoped_get()
            if (_state.default if scoped is None else scoped) == "auto":
                return self._ref(x)
        return self._call(x, args, kwargs)

    def _resolve(self, in_dtype, dtype):
        key = (in_dtype, dtype)
        try:
            return self._resolved[key]
        except KeyError:
            pass
        kw = {} if dtype is None else {"signature": (None, np.dtype(dtype))}
        res = self._resolved[key] = self.reference.resolve_dtypes((in_dtype, None), **kw)
        return res

    def _call(self, x, args, kwargs):
        if not self._small and _current() == "auto" and not _log_state.on:
            self._small = _selection.small_size(self._spec)
        ref = self.reference

        def reference(why="a case fastmath hands over unchanged"):
            if _log_state.on:
                _logger.debug("%s(%s): %s runs it (%s)", self.__name__, _describe(x),
                              self._spec.ref.replace(":", "."), why)
            if "where" in kwargs and self._spec.ref.startswith("scipy"):
                return _where_outside(ref, (x,), args, kwargs)
            return ref(x, *args, **kwargs)

        if kwargs.keys() - _KEYWORDS or len(args) > 1 or (args and "out" in kwargs):
            return reference()  # numpy's own TypeError
        out = args[0] if args else kwargs.get("out")
        where = kwargs.get("where", True)
        casting = kwargs.get("casting", "same_kind")
        order = kwargs.get("order", "K")
        dtype = kwargs.get("dtype")
        signature = kwargs.get("signature")

        tx = type(x)
        if tx is _ndarray:
            xa = x
        elif tx in _SCALARS or isinstance(x, np.generic):
            try:
                xa = np.asarray(x)
            except Exception:  # ragged lists and the like: NumPy's own error
                return reference()
        elif _dask.is_dask_array(x):  # lazy, with fastmath's kernels in every chunk
            return _dask.ufunc(self, x, args, kwargs)
        else:  # subclasses, __array_ufunc__ overrides, array-likes: NumPy dispatches,
            # except for arrays on a device, which are computed there
            if not args and not kwargs and _native.resident(x):
                r = _native.call(self._spec, x)
                if r is not NotImplemented:
                    return r
            return reference()
        o = _single_out(out)
        if o is _BAD_OUT:
            return reference()
        if (signature is not None or xa.dtype.kind not in _NUMERIC or order not in _ORDERS
                or (o is not None and (type(o) is not _ndarray or o.shape != xa.shape
                                       or not o.flags.writeable))):
            return reference()
        try:
            in_dt, out_dt = self._resolve(xa.dtype, dtype)
        except Exception:
            return reference()
        if ((xa.dtype != in_dt and not np.can_cast(xa.dtype, in_dt, casting))
                or (o is not None and o.dtype != out_dt)):
            return reference()
        chain = _selection.plan(self._spec, in_dt.name, xa.size)
        if not chain or xa.size == 0:
            return reference(f"below auto's smallest size for {in_dt.name}, or empty")
        mask = _where_mask(where, xa.shape)
        if mask is _BAD_OUT:
            return reference()

        if xa.dtype == in_dt:
            xin = xa
        else:
            xin = np.empty_like(xa, dtype=in_dt)
            # a cast that overflows: NumPy words and orders its report its own way
            if _fpe.recorded(np.copyto, xin, xa, casting="unsafe") and _fpe.watched():
                return reference()
        if o is None:
            if mask is not None:
                _warn_where()
            res = np.empty_like(xin, dtype=out_dt, order=order)
        else:
            res = o
            if xin is not o and np.may_share_memory(xin, o):
                xin = xin.copy()  # a partial overlap: NumPy buffers the same way
        if mask is None:
            if xin is res and len(chain) > 1:
                # in place with a fallback: a kernel failing part-way, or one whose FP
                # flags are derived from the input afterwards, needs the input intact
                xin = xin.copy()
            self._run(chain, (xin,), res)
        elif mask.any():
            part = np.empty(int(np.count_nonzero(mask)), out_dt)
            try:
                self._run(chain, (xin[mask],), part)
            except FloatingPointError:
                res[mask] = part  # raised after the loop: NumPy has written out= too
                raise
            res[mask] = part
        if out is None:
            return res[()] if res.ndim == 0 else res
        return o

    def _run(self, chain, ins, res):
        """Run the first kernel of ``chain`` that takes ``kernel(*ins, res)``.

        A kernel that fails part-way (a device error, say) may have written some of
        ``res``; the next kernel in line then writes all of it again, with one warning.
        The last kernel is NumPy's own loop, whose failure is NumPy's and is raised as is.
        """
        explicit = _current()
        last = len(chain) - 1
        for i, (name, kernel) in enumerate(chain):
            _selection.forbid_fallback(explicit, name, self.__name__, ins[0].dtype)
            try:
                status = kernel(*ins, res)
            except FloatingPointError:
                raise  # NumPy's errstate 'raise', after the whole loop
            except Exception as e:
                if i == last:
                    raise
                _selection.warn_failed(name, self.__name__, e, chain[i + 1][0])
                continue
            if status is NotImplemented:
                if _log_state.on:
                    _logger.debug("%s(%s): %s declined it (chain: %s)", self.__name__,
                                  _describe(ins[0]), name, _log.chain_names(chain))
                continue
            if _log_state.on:
                _logger.debug("%s(%s): ran on %s (selection %s)", self.__name__,
                              _describe(ins[0]), name, explicit, extra={"ran_on": name})
            if status is HANDLED:
                return
            if status == UNCHECKED:
                status = self._derive(ins, res) if self._spec.fpe else 0
            _fpe.report(self.__name__, status)
            return
        raise AssertionError("the numpy backend ends every chain and never declines")

    def _derive(self, ins, res):
        return _fpe.derive(self.reference, ins, res)


_BAD_OUT = object()  # an out= or where= fastmath leaves to NumPy


def _single_out(out):
    """The one output array of ``out=`` (an array, None, or a 1-tuple), else _BAD_OUT."""
    if type(out) is tuple:
        return out[0] if len(out) == 1 else _BAD_OUT
    return out


def _where_mask(where, shape):
    """``where=`` as a boolean mask of ``shape``, None for True, or _BAD_OUT if NumPy must
    answer (a non-boolean or unbroadcastable mask)."""
    if where is True:
        return None
    mask = np.asarray(where)
    if mask.dtype != bool:
        return _BAD_OUT
    try:
        return np.broadcast_to(mask, shape)
    except ValueError:
        return _BAD_OUT


def _where_outside(ref, ins, args, kwargs):
    """``ref(*ins, *args, **kwargs)`` with ``where=`` applied here, not by the ufunc.

    SciPy's ufuncs corrupt the heap when ``where=`` meets a casting loop (scipy/scipy#25127;
    seen for erf with float32 input and a float64 out=), so they never see ``where=``.
    """
    kwargs = dict(kwargs)
    where = kwargs.pop("where")
    out = args[0] if args else kwargs.pop("out", None)
    o = _single_out(out)
    if o is None:
        _warn_where()
        return ref(*ins, **kwargs)
    if not isinstance(o, np.ndarray):
        return ref(*ins, out=out, **kwargs)  # NumPy's own error for a bad out=
    tmp = ref(*ins, out=np.empty_like(o), **kwargs)
    np.copyto(o, tmp, where=where)
    return o


_where_warning: list = []


def _warn_where():
    """NumPy's warning for ``where=`` without ``out=``, if this NumPy version gives one."""
    if not _where_warning:
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            np.negative(np.zeros(1), where=np.ones(1, bool))
        _where_warning.append([(x.category, str(x.message)) for x in w])
    for category, message in _where_warning[0]:
        warnings.warn(message, category, stacklevel=_fpe.user_stacklevel())


def _forget_small():
    for u in _instances:
        u._small = 0


_config.on_reload(_forget_small)


Ufunc.__doc__ = _Doc(Ufunc.__doc__)


def _describe(x) -> str:
    """``float64[1000]``, ``int8 scalar`` or a type name, for log records."""
    dtype = getattr(x, "dtype", None)
    if dtype is None:
        return type(x).__name__
    shape = getattr(x, "shape", ())
    return f"{dtype}[{'x'.join(map(str, shape))}]" if shape else f"{dtype} scalar"


def _lookup(name):
    import fastmath

    return getattr(fastmath, name)
