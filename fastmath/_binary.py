"""The front end for two-argument ufuncs (power, arctan2, hypot, logaddexp, xlogy, ...).

It keeps the unary front end's order of business (see _ufunc.py) and adds broadcasting:
the result dtype comes from the reference's own ``resolve_dtypes`` on both operands (a
Python int/float/complex scalar is passed as its type, which is how NumPy 2 spells a
"weak" scalar), both inputs are cast to the loop's dtype and broadcast with
``np.broadcast_to`` (views, no copies), and a backend gets two arrays of the output's
shape. Anything else (``out=`` of another shape, ``where=`` that is not a boolean array,
object dtypes, subclasses, NumPy 1.x scalar promotion) is the reference's to answer.
"""
from __future__ import annotations

from ._numpy import np

from . import _selection
from ._ufunc import (_BAD_OUT, _KEYWORDS, _NUMERIC, _ORDERS, Ufunc, _single_out,
                     _where_mask, _where_outside)

_ndarray = np.ndarray
_scoped_get = _selection._scoped.get
_state = _selection.state
_PY_SCALARS = (float, int, complex)
_CONTAINERS = (list, tuple)
# Python scalars are weak only under NumPy 2's promotion rules (NEP 50); before that the
# value decided, which resolve_dtypes cannot express: such calls go to the reference.
_WEAK_TYPES = int(np.__version__.split(".")[0]) >= 2


_MISSING = object()


class BinaryUfunc(Ufunc):
    """A NumPy-compatible two-argument ufunc that runs on the backend fastmath selects."""

    def __call__(self, x1=_MISSING, x2=_MISSING, /, *args, **kwargs):
        # The hot path: small arrays under auto go straight to the reference.
        if (not args and not kwargs and type(x1) is _ndarray and x1.size < self._small
                and (type(x2) is not _ndarray or x2.size < self._small)):
            scoped = _scoped_get()
            if (_state.default if scoped is None else scoped) == "auto":
                return self._ref(x1, x2)
        if x2 is _MISSING:  # NumPy's own TypeError for too few arguments
            return self.reference(*(() if x1 is _MISSING else (x1,)), *args, **kwargs)
        return self._call2(x1, x2, args, kwargs)

    def _operand(self, x):
        """(array, what resolve_dtypes gets for it), or None if the reference must decide."""
        tx = type(x)
        if tx is _ndarray:
            return x, x.dtype
        if tx in _PY_SCALARS:
            if not _WEAK_TYPES or tx is bool:
                return None
            return x, tx
        if tx in _CONTAINERS or isinstance(x, np.generic):
            try:
                a = np.asarray(x)
            except Exception:
                return None
            return a, a.dtype
        return None

    def _resolve2(self, t1, t2, dtype):
        key = (t1, t2, dtype)
        try:
            return self._resolved[key]
        except KeyError:
            pass
        kw = {} if dtype is None else {"signature": (None, None, np.dtype(dtype))}
        res = self._resolved[key] = self.reference.resolve_dtypes((t1, t2, None), **kw)
        return res

    def _call2(self, x1, x2, args, kwargs):
        ref = self.reference

        def reference():
            if "where" in kwargs and self._spec.ref.startswith("scipy"):
                return _where_outside(ref, (x1, x2), args, kwargs)
            return ref(x1, x2, *args, **kwargs)

        if kwargs.keys() - _KEYWORDS or len(args) > 1 or (args and "out" in kwargs):
            return reference()
        out = args[0] if args else kwargs.get("out")
        where = kwargs.get("where", True)
        casting = kwargs.get("casting", "same_kind")
        order = kwargs.get("order", "K")
        dtype = kwargs.get("dtype")
        if kwargs.get("signature") is not None or order not in _ORDERS:
            return reference()
        p1, p2 = self._operand(x1), self._operand(x2)
        if p1 is None or p2 is None:
            return reference()
        (a1, t1), (a2, t2) = p1, p2
        try:
            in1, in2, out_dt = self._resolve2(t1, t2, dtype)
        except Exception:
            return reference()
        if out_dt.kind not in _NUMERIC or in1.kind not in _NUMERIC or in2.kind not in _NUMERIC:
            return reference()
        arrays = []
        for a, t, dt in ((a1, t1, in1), (a2, t2, in2)):
            if type(t) is type:  # a weak Python scalar takes the loop's dtype
                if dt.kind not in "fc":
                    return reference()  # integer loops: NumPy checks the value's range
                a = np.asarray(a, dtype=dt)
            elif a.dtype.kind not in _NUMERIC or (a.dtype != dt
                                                   and not np.can_cast(a.dtype, dt, casting)):
                return reference()
            arrays.append(a)
        try:
            shape = np.broadcast_shapes(arrays[0].shape, arrays[1].shape)
        except ValueError:
            return reference()
        o = _single_out(out)
        if o is _BAD_OUT:
            return reference()
        if o is not None and (type(o) is not _ndarray or o.shape != shape
                              or not o.flags.writeable or o.dtype != out_dt):
            return reference()
        size = 1
        for n in shape:
            size *= n
        chain = _selection.plan(self._spec, out_dt.name, size)
        if not chain or size == 0:
            return reference()
        mask = _where_mask(where, shape)
        if mask is _BAD_OUT:
            return reference()

        ins = []
        like = None  # the result follows the layout of an operand of the full shape
        for a, dt in zip(arrays, (in1, in2)):
            a = a if a.dtype == dt else a.astype(dt)
            if o is not None and a is not o and np.may_share_memory(a, o):
                a = a.copy()  # out overlaps an input: NumPy buffers the same way
            if a.shape == shape:
                like = a if like is None else like
            else:
                a = np.broadcast_to(a, shape)
            ins.append(a)
        if o is not None:
            res = o
        elif like is not None:
            res = np.empty_like(like, dtype=out_dt, order=order)
        else:
            res = np.empty(shape, out_dt, order="F" if order == "F" else "C")
        if mask is None:
            self._run(chain, tuple(ins), res)
        elif mask.any():
            part = np.empty(int(np.count_nonzero(mask)), out_dt)
            self._run(chain, (ins[0][mask], ins[1][mask]), part)
            res[mask] = part
        if out is None:
            return res[()] if res.ndim == 0 else res
        return o
