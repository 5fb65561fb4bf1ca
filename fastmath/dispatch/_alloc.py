"""Outputs as cheap as a reused buffer: large arrays recycled by the C allocator.

A fresh NumPy output costs more than the computation that fills it: the kernel maps new
pages for it and zeroes them, one fault per page. Measured on the reference machine
(2-core AMD EPYC, Linux 6.x, transparent huge pages on ``madvise``), ``np.log`` of
10^7 float32 took 8.4 ms into a reused buffer and 17 ms into a fresh one (568 faults,
huge pages), 58 ms with 4 KiB pages (9766 faults, torch's own allocator's way); float64,
17.5 ms, 43 ms and 171 ms.

The difference is glibc's: below its mmap threshold (grown dynamically to at most 32 MiB)
a freed block stays in the heap and the next allocation of that size reuses it, already
mapped; above it every array is a fresh ``mmap``. Raising the threshold and the trim
threshold (``mallopt``) makes large arrays recycle the same way: the same ``np.log``
into a fresh output then took 7.9 ms (float32) and 19 ms (float64), with no page faults
at all. The arrays are NumPy's own, from NumPy's allocator: ordinary ndarrays that own
their memory. The cost is that up to ``TRIM`` bytes of freed memory stay with the process
instead of going back to the OS at once, which is why this is done only when fastmath
first allocates a large output, and only under glibc.
"""
from __future__ import annotations

import sys

from .._numpy import np

M_TRIM_THRESHOLD = -1  # glibc's malloc.h
M_MMAP_THRESHOLD = -3
# Blocks up to this size come from the heap and are reused (10^7 float64 is 80 MB)...
MMAP = 1 << 28
# ... and up to this much freed memory at the heap's top is kept for the next output.
TRIM = 1 << 29
# Below glibc's own largest dynamic threshold, it already recycles blocks by itself.
LARGE = 32 << 20

_tuned = None  # None: not tried yet; True/False: whether mallopt took the settings


def tune() -> bool:
    """Ask glibc to recycle large blocks (once per process); False where it cannot."""
    global _tuned
    if _tuned is None:
        _tuned = False
        if sys.platform.startswith("linux"):
            import ctypes  # here, not at import: ctypes.util alone costs several ms
            import ctypes.util

            try:
                libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
                mallopt = libc.mallopt
            except (OSError, AttributeError):  # musl and others: no mallopt
                return False
            mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
            _tuned = bool(mallopt(M_MMAP_THRESHOLD, MMAP)) and bool(mallopt(M_TRIM_THRESHOLD, TRIM))
    return _tuned


def empty_like(a, dtype=None, order="K"):
    """``np.empty_like(a, dtype, order)``, recycling the memory of freed large outputs.

    Parameters
    ----------
    a : ndarray
        The array whose shape (and, by default, dtype and layout) the result takes.
    dtype : data-type, optional
    order : {"K", "A", "C", "F"}, optional

    Returns
    -------
    ndarray
        An ordinary array that owns its memory, as ``np.empty_like`` returns.

    Examples
    --------
    >>> import numpy as np
    >>> from fastmath.dispatch import _alloc
    >>> out = _alloc.empty_like(np.zeros((2, 3)), dtype=np.float32)
    >>> out.shape, out.dtype, out.flags.owndata
    ((2, 3), dtype('float32'), True)
    """
    expect(a.size * np.dtype(dtype or a.dtype).itemsize)
    return np.empty_like(a, dtype=dtype, order=order)


def expect(nbytes) -> None:
    """Say that an output of ``nbytes`` is about to be allocated (tunes glibc once)."""
    if _tuned is None and nbytes >= LARGE:
        tune()
