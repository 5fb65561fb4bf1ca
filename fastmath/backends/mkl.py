"""mkl: Intel oneMKL's vector math functions (VML), called through ctypes.

The library is the ``mkl`` package's ``libmkl_rt`` (``pip install mkl``, or the ``mkl`` extra),
loaded the first time this backend is asked whether it is available; importing fastmath
never loads it. Every kernel calls VML's high-accuracy variant (``VML_HA``, below 1 ULP
from the true value) with errors ignored by MKL (``VML_ERRMODE_IGNORE``): VML keeps no NumPy
floating-point flags, so where the output shows a flag could have arisen kernels return
UNCHECKED and the front end derives NumPy's (backends/_flags.py).
Subnormal handling is left as the thread has it (NumPy's default: no flush to zero).

Calls run on fastmath's native runtime (fastmath/dispatch/_runtime.c): VML's entry point,
by its address, over pieces that the caller and the pool's threads claim, each piece in
its thread alone (MKL's own threading is off in the pool's threads, and in the caller's for
the call only), paced as every other splitter is; where NumPy's flags are watched, VML's
own error status of each piece says whether NumPy could have raised one (where that is
sound on this machine: backends/_vml.py), else each piece's output is looked at for an
inf or a NaN while it is in cache. One pool, not two:
MKL's OpenMP threads spin for a while after each of its calls (Intel OpenMP, 200 ms unless
KMP_BLOCKTIME says otherwise) and would compete with fastmath's and BLAS's for the same
cores. Without the runtime (no C compiler) the Python pool runs one chunk per thread. The
64-bit-count entry points (``vmdExp_64``) take any size, whatever MKL's integer interface.

Only native float32/float64 arrays laid out contiguously in one order are taken (input
and output alike); anything else is declined and goes to the next backend. On a CPU
without Intel's fast paths (AMD) MKL still computes, more slowly: ``calibrate`` decides
whether ``auto`` uses it.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys

from .._numpy import np

from ..dispatch import _parallel
from ._vml import RuntimeVml, address

# mkl_vml_defines.h: high accuracy, errors ignored, FTZ/DAZ as is. Not VML_ERRMODE_NOERR
# (0x2000): with it, float32 exp of +-inf gave NaN on an Intel Xeon (AVX-512, oneMKL
# 2026.2), where NumPy gives inf and 0; VML_HA alone or with IGNORE gave inf there. On an
# AMD EPYC both modes take MKL's generic code path and agree. Every kernel is also held to
# NumPy's special values on the CPU it runs on (dispatch/_verify.py) before it is used.
VML_HA = 0x2
VML_ERRMODE_IGNORE = 0x100
MODE = VML_HA | VML_ERRMODE_IGNORE
# Below this much output one thread does the whole call (a thread handoff costs several
# us, up to about 50 on a busy machine); costlier functions split sooner (Spec.cost): erf
# at 10^5 float32 elements took 144 us of CPU on one core of the 2-core AMD EPYC, where
# two threads finish in about half that.
PARALLEL_MIN_BYTES = 1 << 19
_PREFIX = {np.dtype(np.float32): "vms", np.dtype(np.float64): "vmd"}
_NAMES = {"linux": ("libmkl_rt.so.3", "libmkl_rt.so.2", "libmkl_rt.so"),
          "darwin": ("libmkl_rt.2.dylib", "libmkl_rt.dylib"),
          "win32": ("mkl_rt.2.dll", "mkl_rt.dll")}.get(sys.platform, ("libmkl_rt.so",))

# float64 results past the row's ULP bound (tests/frontends/test_parity.py): VML's erfc and cdfnorm
# keep the subnormal tail that SciPy's flush to zero, and its erfcinv is up to 6 ULP from
# SciPy's. Their float64 calls are declined; float32 is within 1 ULP.
FLOAT32_ONLY = ("Erfc", "CdfNorm", "ErfcInv")
# VML's hypot is within 1 ULP of NumPy's but not equal to it, and NumPy's own tests hold
# hypot.accumulate bitwise equal to hypot called element by element: hypot has no kernel.

_MISSING = "MKL is not installed (pip install mkl)"
BLOCKTIME = "1"  # ms Intel OpenMP's threads spin after a region (KMP_BLOCKTIME), unless set
_lib = None
_why = None
_set_local_threads = None
_setter = 0  # its address, for the runtime
_status_setter = 0  # vmlSetErrStatus's address (backends/_vml.py)


def library_path():
    """Where the ``mkl`` package installed ``libmkl_rt``, or None."""
    from importlib import metadata

    try:
        files = metadata.files("mkl") or ()
    except metadata.PackageNotFoundError:
        files = ()
    for f in files:
        if f.name in _NAMES:
            return str(f.locate())
    # conda puts it in the environment's own library folder, without pip's record
    libdir = os.path.join(sys.prefix, "Library", "bin") if sys.platform == "win32" else \
        os.path.join(sys.prefix, "lib")
    for name in _NAMES:
        if os.path.exists(os.path.join(libdir, name)):
            return os.path.join(libdir, name)
    for name in ("mkl_rt", "mkl_rt.2"):
        found = ctypes.util.find_library(name)
        if found:
            return found
    return None


def load():
    """The loaded ``libmkl_rt``, or None with the reason kept for ``why_unavailable``."""
    global _lib, _why, _set_local_threads, _setter, _status_setter
    if _lib is not None or _why is not None:
        return _lib
    path = library_path()
    if path is None:
        _why = _MISSING
        return None
    if "KMP_BLOCKTIME" not in os.environ:
        # MKL's threads are Intel OpenMP's, which spin 200 ms after each parallel region
        # by default; torch's VML calls (erf, ...) run on them once MKL is loaded. Measured
        # on the 2-core AMD EPYC: after a torch erf of 10^7 float64 the process burned 200 ms
        # of a core in the next 0.3 s asleep, and the numpy backend's exp of 10^7 float64
        # took 5.5-5.8 ms instead of 4.7 beside it; with 1 ms, none of that, and torch's
        # erf of 10^5 float32 took 74 us (103 us by default; 149 us with 0, a wake-up a
        # call). Intel OpenMP reads it as it starts, at MKL's first threaded call.
        os.environ["KMP_BLOCKTIME"] = BLOCKTIME
    try:
        lib = ctypes.CDLL(path)
        # the capitalised names are the C interface; the lower-case ones are Fortran's
        setter = lib.MKL_Set_Num_Threads_Local
        lib.vmdExp_64  # noqa: B018 - the 64-bit-count entry points arrived in oneMKL 2023
    except (OSError, AttributeError) as e:
        _why = f"{path} could not be used ({e}); oneMKL 2023 or newer is needed"
        return None
    setter.argtypes, setter.restype = [ctypes.c_int], ctypes.c_int
    _set_local_threads, _setter, _lib = setter, address(setter), lib
    _status_setter = address(lib.vmlSetErrStatus) if hasattr(lib, "vmlSetErrStatus") else 0
    return lib


def version():
    """MKL's version string, or None if it is not loaded."""
    if _lib is None:
        return None
    buf = ctypes.create_string_buffer(256)
    _lib.MKL_Get_Version_String(buf, len(buf))
    return buf.value.decode(errors="replace")


def _function(name, dtype, arity, suffix=""):
    fn = getattr(_lib, f"{_PREFIX[dtype]}{name}{suffix}_64")
    args = [ctypes.c_int64] + [ctypes.c_void_p] * (arity + 1) + [ctypes.c_int64]
    if suffix == "x":  # the second operand is one number, passed by value
        args.insert(2, ctypes.c_float if dtype == np.float32 else ctypes.c_double)
    fn.argtypes, fn.restype = args, None
    return fn


def _address(a):
    return a.__array_interface__["data"][0]


def _layout(arrays):
    """"C" or "F" if every array is contiguous in that one order, else None."""
    for order, flag in (("C", "C_CONTIGUOUS"), ("F", "F_CONTIGUOUS")):
        if all(a.flags[flag] for a in arrays):
            return order
    return None


# the calls the runtime does not take (built without a compiler, or a layout it declines)
_POOL_PACE = _parallel.Pace()


def _run(call, arrays, nbytes, min_bytes):
    """``call(n, *addresses)`` over matching chunks of contiguous ``arrays``, one thread
    of the pool per chunk, each with MKL's own threading off."""
    def task(chunk):
        before = _set_local_threads(1)
        try:
            call(chunk[0].size, *map(_address, chunk))
        finally:
            _set_local_threads(before)
    if nbytes < min_bytes:
        task(arrays)
        return
    plan = _parallel.plan(_POOL_PACE, arrays[-1].size)
    if plan.parts < 2:
        task(arrays)
    else:
        _parallel.run([lambda c=c: task(c) for c in _parallel.chunk_views(arrays, plan.parts)],
                      plan)
    plan.done()


class MklBackend:
    name = "mkl"

    def why_missing(self):
        """Without loading MKL: None if its library is installed (the optional
        ``why_missing`` of backends/_protocol.py)."""
        if _why is not None or library_path() is not None:
            return _why
        return _MISSING

    def why_unavailable(self):
        load()
        return _why

    def kernel(self, spec):
        name = spec.kernels.get("mkl")
        if name is None or spec.kind not in ("unary", "binary") or load() is None:
            return None
        min_bytes = PARALLEL_MIN_BYTES / spec.cost
        if spec.kind == "unary":
            return _Unary(name, spec.fpe, min_bytes, spec.cost, spec.reference)
        return _Binary(name, spec.fpe, min_bytes, spec.cost)


class _Kernel(RuntimeVml):
    __slots__ = ("fns", "scalar", "min_bytes")

    def _on_runtime(self, fns, cost, reference=None):
        super()._on_runtime({dt: address(fn) for dt, fn in fns.items()}, MODE, _setter, cost,
                            status_setter=_status_setter, reference=reference)


class _Unary(_Kernel):
    __slots__ = ()

    def __init__(self, name, fpe, min_bytes, cost, reference=None):
        self.fpe, self.scalar, self.min_bytes = fpe, None, min_bytes
        self.fns = {dt: _function(name, dt, 1) for dt in _PREFIX
                    if name not in FLOAT32_ONLY or dt == np.float32}
        self._on_runtime(self.fns, cost, reference)

    def __call__(self, x, out):
        fn = self.fns.get(x.dtype)
        if fn is None or out.dtype != x.dtype or not x.dtype.isnative or x.shape != out.shape:
            return NotImplemented
        if x.size == 0:
            return 0
        if _layout((x, out)) is None:
            return NotImplemented
        status = self._on_pool((x,), out)
        if status is not None:
            return status
        _run(lambda n, xp, op: fn(n, xp, op, MODE), (x, out), out.nbytes, self.min_bytes)
        return self.done(out)


class _Binary(_Kernel):
    """``f(x1, x2)`` on operands of one shape; ``Pow`` also with a single exponent."""

    __slots__ = ()

    def __init__(self, name, fpe, min_bytes, cost):
        self.fpe, self.min_bytes = fpe, min_bytes
        self.fns = {dt: _function(name, dt, 2) for dt in _PREFIX}
        self._on_runtime(self.fns, cost)
        self.scalar = {dt: _function(name, dt, 1, "x") for dt in _PREFIX} if name == "Pow" else None

    def __call__(self, x1, x2, out):
        dt = out.dtype
        fn = self.fns.get(dt)
        if fn is None or x1.dtype != dt or x2.dtype != dt or not dt.isnative or x1.shape != out.shape:
            return NotImplemented
        if out.size == 0:
            return 0
        if x2.shape == out.shape and _layout((x1, x2, out)) is not None:
            status = self._on_pool((x1, x2), out)
            if status is not None:
                return status
            _run(lambda n, p1, p2, po: fn(n, p1, p2, po, MODE), (x1, x2, out), out.nbytes,
                 self.min_bytes)
            return self.done(out)
        if self.scalar is not None and x2.size == 1 and _layout((x1, out)) is not None:
            b, fx = x2.reshape(()).item(), self.scalar[dt]
            _run(lambda n, p1, po: fx(n, p1, b, po, MODE), (x1, out), out.nbytes, self.min_bytes)
            return self.done(out)
        return NotImplemented
