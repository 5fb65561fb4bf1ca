"""Whether a kernel that keeps no FPU flags can skip the front end's search for them.

Shared by the backends whose kernels cannot see NumPy's floating-point flags (torch, mkl,
numexpr).
"""
from __future__ import annotations

import math

from .._numpy import np

from ..dispatch import _fpe


# What a kernel that keeps no flags must do about them now (dispatch/_fpe.py's ``need``)
NOTHING, LOOK, UNKNOWN, need = _fpe.NOTHING, _fpe.LOOK, _fpe.UNKNOWN, _fpe.need


def flags_possible(out) -> bool:
    """Whether NumPy could have raised a flag computing what is now in ``out``.

    Divide-by-zero, overflow and invalid only ever leave an inf or a NaN in the output.
    One read-only, allocation-free pass answers (the runtime's ``finite``: one add and one
    or an element, split over the pool when long; else the sum of the output, which an
    inf or a NaN makes non-finite), where the front end would otherwise test every
    element into a temporary mask and then scan the mask. Underflow leaves no such trace:
    when it is watched, the front end's full check runs.
    """
    if out.size == 0:
        return False
    todo = need(True)
    if todo != LOOK:
        return todo == UNKNOWN
    if _runtime is not None:
        finite = _runtime.finite(out)
        if finite is not None:
            return not finite
    with np.errstate(over="ignore", invalid="ignore"):
        return not math.isfinite(np.add.reduce(out, axis=None))


try:
    from ..dispatch import _runtime
except ImportError:  # built without a C compiler
    _runtime = None
