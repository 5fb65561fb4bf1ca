"""Two-argument ufuncs (power, arctan2, hypot, logaddexp, xlogy, ...).

Everything but the signature is the one pipeline's (``_pipeline.py``): broadcasting, and
Python scalars passed to the reference's ``resolve_dtypes`` as their type (NumPy 2's
"weak" scalars), are its two-operand case.
"""
from __future__ import annotations

from .._numpy import np

from ._ufunc import _BIG, _ONE, Ufunc, _scoped_get, _state

_ndarray = np.ndarray
_MISSING = object()


class BinaryUfunc(Ufunc):
    """A NumPy-compatible two-argument ufunc that runs on the backend fastmath selects."""

    def _hot(self):
        small, ref = 0, None

        def fast(x1=_MISSING, x2=_MISSING, /, *args, **kwargs):
            # The hot path: small operands under auto go straight to the reference.
            if ((x1.size if type(x1) is _ndarray else _ONE.get(type(x1), _BIG)) < small
                    and (x2.size if type(x2) is _ndarray else _ONE.get(type(x2), _BIG)) < small
                    and not args and not kwargs):
                scoped = _scoped_get()
                if (_state.default if scoped is None else scoped) == "auto":
                    return ref(x1, x2)
            if x2 is _MISSING:  # NumPy's own TypeError for too few arguments
                return self.reference(*(() if x1 is _MISSING else (x1,)), *args, **kwargs)
            return self._call((x1, x2), args, kwargs)
        return fast
