"""NumPy as fastmath's own code sees it: NumPy's original functions, always.

While :func:`fastmath.patch` is active, ``numpy.exp`` is ``fastmath.exp``. fastmath's
kernels and front ends compute with NumPy (logsumexp's finishing step calls ``exp`` and
``log1p``, the numpy backend runs NumPy's loops); reaching fastmath again from there would
change results and could nest thread pools. So fastmath's modules import ``np`` from here:
a copy of the numpy namespace taken when fastmath is imported, before any patch can exist.
Names NumPy creates lazily later (``numpy.testing``) are still found, through NumPy's own
module ``__getattr__``, which the copy carries.
"""
from __future__ import annotations

import types

import numpy as _numpy

np = types.ModuleType(_numpy.__name__, _numpy.__doc__)
np.__dict__.update(_numpy.__dict__)

# the two dtypes nearly every kernel is written for
FLOATS = (np.dtype(np.float32), np.dtype(np.float64))
_names: dict = {}


def dtype_name(dt) -> str:
    """``dt.name``, which NumPy computes in Python on every access (several us)."""
    try:
        return _names[dt]
    except KeyError:
        name = _names[dt] = dt.name
        return name
