"""Two-argument ufuncs (power, arctan2, hypot, logaddexp, xlogy, ...).

Everything but the signature is the one pipeline's (``_pipeline.py``): broadcasting, and
Python scalars passed to the reference's ``resolve_dtypes`` as their type (NumPy 2's
"weak" scalars), are its two-operand case.
"""
from __future__ import annotations

from .._numpy import np

from . import _frames
from ._ufunc import Ufunc, _scoped_get, _state

_ndarray = np.ndarray
_MISSING = object()


class BinaryUfunc(Ufunc):
    """A NumPy-compatible two-argument ufunc that runs on the backend fastmath selects."""

    _nin = 2

    def _hot(self):
        small, ones, ref = 0, {}, None

        def fast(x1=_MISSING, x2=_MISSING, /, *args, **kwargs):
            # The hot path: small operands under auto go straight to the reference; a
            # scalar is one lookup of its type (``ones``, see Ufunc._hot).
            if (((t := type(x1)) is _ndarray and x1.size < small) or t in ones) and (
                    ((t := type(x2)) is _ndarray and x2.size < small) or t in ones) and not (
                    args or kwargs):
                scoped = _scoped_get()
                if (_state.default if scoped is None else scoped) == "auto":
                    return ref(x1, x2)
            if x2 is _MISSING:  # NumPy's own TypeError for too few arguments
                return self.reference(*(() if x1 is _MISSING else (x1,)), *args, **kwargs)
            try:
                return self._call((x1, x2), args, kwargs)
            except Exception as e:  # NumPy's error, without the frames below this one
                _frames.trim(e)
                raise
        return fast
