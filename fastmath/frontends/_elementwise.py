"""The front end for plain NumPy functions that map each element on its own (sinc, i0).

These are not ufuncs in NumPy: they take one argument, no ``out=`` or ``where=``, and
their quirks (``i0`` of a scalar is a 0-d array, ``sinc`` of float16 is float16, ``i0``
rejects complex) are theirs. So fastmath takes over only the case it can match exactly,
a floating ndarray of at least one dimension whose result has the input's dtype, and
hands everything else to the reference (Dask arrays go to their own route). Floating-point
errors are left to the reference too: when the error state watches any, it is re-run on
the elements that may raise them, in the caller's thread, and warns or raises with its
own messages.
"""
from __future__ import annotations

from .._numpy import FLOATS as _FLOATS, dtype_name, np

from ..dispatch import _fpe, _selection
from . import _frames, _pipeline
from . import _dask
from ._ufunc import _ONE, Ufunc

_ndarray = np.ndarray
_scoped_get = _selection._scoped.get
_state = _selection.state


class Function(Ufunc):
    """A NumPy-compatible elementwise function that runs on the backend fastmath selects."""

    _nin = 0  # no C fast path: its own (below) is not a ufunc's

    def _hot(self):
        small, ref = 0, None

        def fast(x):
            if type(x) is not _ndarray:
                if type(x) in _ONE or not _dask.is_dask_array(x):
                    return ref(x)
                return _dask.ufunc(self, (x,), (), {})
            if x.size < small and x.ndim:
                scoped = _scoped_get()
                if (_state.default if scoped is None else scoped) == "auto":
                    return ref(x)
            try:
                return self._call1(x)
            except Exception as e:  # NumPy's error, without the frames below this one
                _frames.trim(e)
                raise
        return fast

    def _call1(self, x):
        if x.ndim == 0 or x.dtype not in _FLOATS:
            return self._ref(x)
        if not self._small and _selection.current() == "auto":
            _pipeline.fill_small(self, self._spec)
        chain = _selection.plan(self._spec, dtype_name(x.dtype), x.size)
        if not chain or x.size == 0:
            return self._ref(x)
        res = _pipeline.allocate([x], x.shape, x.dtype, "K")
        self._run(chain, (x,), res)
        return res

    @property
    def __class__(self):
        # NumPy's sinc and i0 are plain functions, not ufuncs: no nin, no reduce
        return Function

    def __repr__(self):
        return f"<fastmath function {self.__name__!r} (accelerated {self._spec.ref.replace(':', '.')})>"

    def _resolve(self, types, dtype):
        """The reference's result dtype, found on one element (it has no type resolution)."""
        if dtype is not None:
            raise TypeError("a plain function takes no dtype=")
        return types[0], self.reference(np.zeros(1, types[0])).dtype

    def _derive(self, ins, res):
        suspect = _fpe.suspects(ins, res)
        if suspect is not None:
            self.reference(ins[0][suspect])  # NumPy reports its own errors
        return 0
