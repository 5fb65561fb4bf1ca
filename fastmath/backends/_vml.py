"""VML's entry points run on fastmath's native runtime: shared by the mkl backend (oneMKL's
``libmkl_rt``) and the torch-cpu backend (the copy of MKL linked into ``libtorch_cpu``, whose
VML torch's own exp, log and erf call; and SLEEF's vector functions, which torch's own
log1p and expm1 loops call: ``bits``, the width of their one register argument).

A kernel holds the entry points' addresses by dtype, the VML mode, and the address of the
same library's ``MKL_Set_Num_Threads_Local``: each piece runs in its thread alone (MKL's own
threads would compete with the runtime's for the same cores), and each piece's output is
looked at for an inf or a NaN while it is in cache, where NumPy's flags are watched: VML
keeps none (backends/_flags.py). One pool, not two.
"""
from __future__ import annotations

import ctypes

from ..dispatch import _parallel
from . import UNCHECKED
from ._flags import LOOK, NOTHING, flags_possible, need

try:
    from ..dispatch import _runtime
except ImportError:  # built without a C compiler
    _runtime = None

# On the runtime, whose threads spin between calls, splitting may pay from this much output
# (over the row's cost); its pacing decides.
RUNTIME_MIN_BYTES = 1 << 15


def address(fn) -> int:
    """A ctypes function's address."""
    return ctypes.cast(fn, ctypes.c_void_p).value


class RuntimeVml:
    """The runtime's part of a VML kernel; ``_on_runtime`` sets it up."""

    __slots__ = ("fpe", "addresses", "mode", "setter", "bits", "pace", "pace_record",
                 "min_split")

    def done(self, out):
        """What the front end must do about NumPy's FP errors (see backends/_protocol.py)."""
        return UNCHECKED if self.fpe and flags_possible(out) else 0

    @property
    def runtime_pace(self):
        """The native runtime's pacing record of this kernel's calls (-1: none)."""
        return self.pace

    def _on_runtime(self, addresses, mode, setter, cost, bits=0):
        """``addresses``: dtype -> VML entry point; ``setter``: the library's
        MKL_Set_Num_Threads_Local (address). With ``bits`` (512 or 256), ``addresses`` are
        vector functions instead (the runtime's ``vector``), and mode and setter unused."""
        self.addresses, self.mode, self.setter, self.bits = addresses, mode, setter, bits
        # the runtime's pacing record, given back with this kernel
        self.pace_record = _parallel.Pace() if _runtime is not None else None
        self.pace = self.pace_record.id() if _runtime is not None else -1
        self.min_split = RUNTIME_MIN_BYTES / cost

    def vml_entry(self, dtype):
        """The settings of this kernel's runtime call on one operand of ``dtype``, for the
        front end's fast path in C (frontends/_hot.c, which makes the call as
        ``_runtime.vml_entry(settings, x, out, check)`` and acts on NumPy's flags as
        ``done`` would); None where it has none for ``dtype``."""
        fn = self.addresses.get(dtype) if self.pace >= 0 else None
        if fn is None:
            return None
        return (fn, self.bits, self.mode, 0 if self.bits else self.setter, self.pace,
                int(self.min_split / dtype.itemsize))

    def _on_pool(self, ins, out):
        """The call on the runtime, what is left to do about FP errors; None where it
        cannot take it (the caller's other path then runs)."""
        if self.pace < 0:
            return None
        todo = need(self.fpe)
        fn, min_split = self.addresses[out.dtype], int(self.min_split / out.itemsize)
        if self.bits:
            seen = _runtime.vector(fn, self.bits, ins[0], out, self.pace, min_split,
                                   _parallel.threads(), todo == LOOK)
        else:
            seen = _runtime.vml(fn, ins, out, self.mode, self.pace, min_split,
                                _parallel.threads(), todo == LOOK, self.setter)
        if seen is None:
            return None
        return 0 if todo == NOTHING or (todo == LOOK and not seen) else UNCHECKED
