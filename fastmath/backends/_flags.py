"""Whether a kernel that keeps no FPU flags can skip the front end's search for them.

Shared by the backends whose kernels cannot see NumPy's floating-point flags (torch, mkl,
numexpr).
"""
from __future__ import annotations

import math

from .._numpy import np

from ..dispatch import _fpe


def flags_possible(out) -> bool:
    """Whether NumPy could have raised a flag computing what is now in ``out``.

    Divide-by-zero, overflow and invalid only ever leave an inf or a NaN, and either makes
    the sum of the output an inf or a NaN (a finite sum that overflows only sends the call
    to the full check). One read-only, allocation-free SIMD pass answers where the front
    end would otherwise test every element into a temporary mask and then scan the mask.
    Underflow leaves no such trace: when it is watched, the front end's full check runs.
    """
    modes = _fpe.error_modes()
    if not _fpe.watched(True, modes) or out.size == 0:
        return False
    if _fpe.underflow_matters(modes):
        return True
    with np.errstate(over="ignore", invalid="ignore"):
        return not math.isfinite(np.add.reduce(out, axis=None))
