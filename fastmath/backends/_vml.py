"""VML's entry points run on fastmath's native runtime: shared by the mkl backend (oneMKL's
``libmkl_rt``) and the torch-cpu backend (the copy of MKL linked into ``libtorch_cpu``, whose
VML torch's own exp, log and erf call; and SLEEF's vector functions, which torch's own
log1p and expm1 loops call: ``bits``, the width of their one register argument).

A kernel holds the entry points' addresses by dtype, the VML mode, and the address of the
same library's ``MKL_Set_Num_Threads_Local``: each piece runs in its thread alone (MKL's own
threads would compete with the runtime's for the same cores), and each piece's output is
looked at for an inf or a NaN while it is in cache, where NumPy's flags are watched: VML
keeps none (backends/_flags.py). One pool, not two.

Where this machine's VML passes :func:`status_sound`, a one-input function's pieces are not
looked at: VML's own error status of each piece (each thread's own, read and cleared after
the piece) says whether NumPy could have raised a flag. The look cost 13-16% of a call of
float32 exp on 10^7 elements and 17% at 10^5 float64 (Intel Xeon, AVX-512).
"""
from __future__ import annotations

import ctypes
import threading

from .._numpy import np
from ..dispatch import _parallel, _verify
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
                 "min_split", "status_setter", "reference", "statuses")

    def done(self, out):
        """What the front end must do about NumPy's FP errors (see backends/_protocol.py)."""
        return UNCHECKED if self.fpe and flags_possible(out) else 0

    @property
    def runtime_pace(self):
        """The native runtime's pacing record of this kernel's calls (-1: none)."""
        return self.pace

    def _on_runtime(self, addresses, mode, setter, cost, bits=0, status_setter=0,
                    reference=None):
        """``addresses``: dtype -> VML entry point; ``setter``: the library's
        MKL_Set_Num_Threads_Local (address). With ``bits`` (512 or 256), ``addresses`` are
        vector functions instead (the runtime's ``vector``), and mode and setter unused.
        ``status_setter``: the library's vmlSetErrStatus (address; 0: none), whose status
        stands in for the look where :func:`status_sound` says so against ``reference``
        (the NumPy/SciPy function, called on the special values)."""
        self.addresses, self.mode, self.setter, self.bits = addresses, mode, setter, bits
        self.status_setter, self.reference, self.statuses = status_setter, reference, {}
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
                int(self.min_split / dtype.itemsize), self.status(dtype))

    def status(self, dtype) -> int:
        """The address of the library's vmlSetErrStatus where VML's status of a call on
        ``dtype`` shows every flag NumPy would raise (:func:`status_sound`, once per dtype),
        else 0 (the runtime looks at the output)."""
        got = self.statuses.get(dtype)
        if got is None:
            sound = (not self.bits and self.status_setter and self.reference is not None
                     and status_sound(self.addresses[dtype], self.mode, self.setter,
                                      self.status_setter, self.reference(), dtype))
            got = self.statuses[dtype] = self.status_setter if sound else 0
        return got

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
            status = self.status(out.dtype) if todo == LOOK and len(ins) == 1 else 0
            seen = _runtime.vml(fn, ins, out, self.mode, self.pace, min_split,
                                _parallel.threads(), todo == LOOK, self.setter, status)
        if seen is None:
            return None
        return 0 if todo == NOTHING or (todo == LOOK and not seen) else UNCHECKED


_VML1 = ctypes.CFUNCTYPE(None, ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)
_SET_STATUS = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int64)  # MKL_INT: see _runtime.c
_SET_THREADS = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int)
_own_status: dict = {}  # vmlSetErrStatus address -> whether each thread has its own status


def _each_thread_its_own(set_status) -> bool:
    """Whether VML's error status is each thread's own (oneMKL's documentation calls it
    global; oneMKL 2026.2 keeps one a thread): a status set in another thread is not
    seen here, nor this thread's there."""
    mine = set_status(3)
    there = []

    def other():
        there.append(set_status(2))
        there.append(set_status(0))

    t = threading.Thread(target=other)
    try:
        t.start()
    except RuntimeError:  # no new thread now (the interpreter is shutting down)
        set_status(mine)
        return False
    t.join()
    return set_status(mine) == 3 and there == [0, 2]


def status_sound(fn, mode, setter, status_setter, reference, dtype) -> bool:
    """Whether VML's error status of function ``fn`` (one input, ``dtype``, in ``mode``)
    can stand in for the look at its output, on this machine: each thread keeps its own,
    and every special value (dispatch/_verify.py) that NumPy/SciPy's ``reference`` raises
    divide-by-zero, overflow or invalid on sets it, alone, as a whole SIMD register
    (aligned and not) and as one lane among ordinary values. A status NumPy raises no
    flag for (underflow) sends the piece to the look, so the values that set one need no
    more; the values that set none must raise no flag in NumPy."""
    set_status = _SET_STATUS(status_setter)
    if status_setter not in _own_status:
        _own_status[status_setter] = _each_thread_its_own(set_status)
    if not _own_status[status_setter]:
        return False
    dt = np.dtype(dtype)
    call, values = _VML1(fn), _verify.special_values(dt)
    x, out = np.empty(65, dt), np.empty(65, dt)
    threads = _SET_THREADS(setter)(1) if setter else None
    kept = set_status(0)

    def errs(n, at=0):  # VML on x[at:at + n]: did it set the status?
        call(n, x.ctypes.data + at * dt.itemsize, out.ctypes.data + at * dt.itemsize, mode)
        return set_status(0) != 0

    try:
        plain = None  # a value VML computes without a status, for the mixed register
        for v in (1.0, 0.5, 2.0):
            x[:] = v
            if not errs(64):
                plain = v
                break
        if plain is None:
            return False
        set_by = np.zeros(values.size, bool)
        for k, v in enumerate(values):
            x[:] = v
            alone = errs(1) and errs(64) and errs(64, 1)
            x[:] = plain
            x[37] = v
            set_by[k] = alone and errs(64)
    finally:
        set_status(kept)
        if threads is not None:
            _SET_THREADS(setter)(threads)
    try:
        with np.errstate(divide="raise", over="raise", invalid="raise", under="ignore"):
            reference(values[~set_by])
    except Exception:  # noqa: BLE001 - a flag raised (FloatingPointError), or no answer
        return False
    return True
