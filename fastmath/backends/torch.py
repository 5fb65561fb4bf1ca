"""torch-cpu and torch-cuda: one class, parameterised by device.

On the CPU, NumPy arrays go in zero-copy (``torch.from_numpy`` shares their memory) and results are
written into an output NumPy allocated (NumPy asks the OS for huge pages; torch's
allocator does not, which measured 3x slower for 80 MB), under ``torch.inference_mode()``.
On a CUDA device, NumPy arrays are streamed through it in bounded chunks
(backends/_stream.py) and results land in the NumPy output; arrays that already live on a
device (torch tensors, DLPack producers such as CuPy) are computed there (:func:`native`).
torch is imported the first time this backend is asked whether it is available.

Where torch's own CPU op is a call of VML's (exp, log, erf and others:
aten/src/ATen/cpu/vml.h; torch links a copy of MKL into ``libtorch_cpu``) or a loop over one
of SLEEF's vector functions (log1p, expm1; also in ``libtorch_cpu``), the kernel calls that
same entry point of torch's library (in torch's VML mode) on fastmath's native runtime
(backends/_vml.py): torch's very bits (checked once per function, else torch's op runs),
NumPy's flags read from each piece while it is in cache, where torch's op on its OpenMP
threads left a second pass over the whole output to do, on a core its threads still spun
on (exp of 10^5 float32: 160 us against torch's own 73).
"""
from __future__ import annotations

import ctypes
import operator
import os
import sys
import threading
import time

from .._numpy import FLOATS as _FLOATS, np

import warnings

from ..dispatch import _config, _fpe, _log, _parallel, _verify
from . import UNCHECKED, _stream, _load_once
from ._flags import flags_possible
from ._vml import RuntimeVml, address

try:
    from ..dispatch import _runtime
except ImportError:  # built without a C compiler
    _runtime = None

_torch = None


_init = threading.Lock()


def _import_torch():
    return _load_once(globals(), "_torch", _init, _configured)


# GNU OpenMP's spins before a waiting thread sleeps: about 0.17 ms on the 2-core AMD EPYC
# (50 us where a spin is quickest). See _configured.
SPINCOUNT = "5000"


def _configured():
    # torch's OpenMP workers spin for a while after each parallel region (GNU OpenMP's
    # default: 300000 spins, about 8 ms here); on a 2-core machine that spin took the
    # cores from the numpy backend's threads and made the next threaded numpy call up to
    # 1.6x slower. Passive waiting (no spin) freed them, but then every call torch splits
    # waits for a sleeping worker to wake: erf of 10^5 float32 took 158-199 us against
    # 71-82 us with the default. A short spin keeps the workers awake from one call to
    # the next (74-78 us) and frees the core within a fraction of a millisecond.
    # Only what the user has not chosen is set, and only matters if torch is not loaded.
    before = os.environ.get("GOMP_SPINCOUNT"), os.environ.get("OMP_WAIT_POLICY")
    if "OMP_WAIT_POLICY" not in os.environ and "GOMP_SPINCOUNT" not in os.environ:
        os.environ["GOMP_SPINCOUNT"] = SPINCOUNT
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    fresh, t = "torch" not in sys.modules, time.perf_counter()
    import torch

    global _spin
    # what GNU OpenMP read as it loaded: these settings if torch loads now, else the user's
    count, policy = ((os.environ.get("GOMP_SPINCOUNT"), os.environ.get("OMP_WAIT_POLICY"))
                     if fresh else before)
    _spin = spin_seconds(count, policy, _runtime.pause_seconds()) if (
        _runtime is not None and _gnu_openmp(torch)) else 0.0

    if fresh:  # the one slow first call: say why it was slow, and how to move it
        _log.logger.info("imported torch %s in %.2f s for the first torch-backed call "
                         "(fastmath.warmup() does this ahead of time)",
                         torch.__version__, time.perf_counter() - t)
    n = _config.get().sources.get("FASTMATH_NUM_THREADS")
    if n is not None and not _parallel.torch_forked():
        torch.set_num_threads(_config.get().num_threads)
    return torch


def spin_seconds(count, policy, pause) -> float:
    """How long GNU OpenMP's workers spin after a parallel region before they sleep, from
    the GOMP_SPINCOUNT (``count``) and OMP_WAIT_POLICY (``policy``) it read as it loaded
    (libgomp/env.c): GOMP_SPINCOUNT pause instructions (a number with an optional k, M,
    G or T, or "infinite"), else 300000 where neither is set, none under PASSIVE, 3e10
    under ACTIVE. ``pause``: seconds of one pause. 0.0 where that spin is not brief (over
    10 ms, or malformed): threads that spin that long take the cores for good, which the
    runtime's pacing is there to notice."""
    if count is None:
        policy = (policy or "").strip().lower()
        spins = (30_000_000_000 if policy.startswith("active") else
                 0 if policy.startswith("passive") else 300_000)
    else:
        text = count.strip().lower()
        if text.startswith(("infinite", "infinity")):
            return 0.0
        digits = len(text) - len(text.lstrip("0123456789"))
        unit = text[digits:].strip()
        scale = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}.get(unit)
        if not digits or scale is None:
            return 0.0  # libgomp ignores it too, but which default it then took is unclear
        spins = int(text[:digits]) * scale
    seconds = spins * pause
    return seconds if seconds <= 0.01 else 0.0


def _gnu_openmp(torch) -> bool:
    """Whether torch's threads are GNU OpenMP's (libgomp ships beside it on Linux)."""
    try:
        folder = os.path.join(os.path.dirname(torch.__file__), "lib")
        return any(f.startswith("libgomp") for f in os.listdir(folder))
    except OSError:
        return False


# Seconds torch's OpenMP workers spin after a call they shared (set as torch loads): the
# native runtime does not hold a split begun meanwhile against its kernel (foreign()).
_spin = 0.0


class _Shared:
    """Exposes an array's memory as writable so torch takes it without a warning.

    torch warns on read-only arrays because it cannot mark a tensor read-only; a kernel
    never writes into its input, so the flag carries no information here.
    """

    __slots__ = ("__array_interface__", "base")

    def __init__(self, a):
        face = dict(a.__array_interface__)
        face["data"] = (face["data"][0], False)
        self.__array_interface__ = face
        self.base = a


def takes(a) -> bool:
    """Whether torch can view ``a``'s memory as it is: native order, aligned, strides
    that are whole non-negative numbers of elements (a packed structured field's are not)."""
    flags = a.flags
    if not (a.dtype.isnative and flags.aligned):
        return False
    # one dimension, contiguous, several elements: the one stride is the item size
    # (a dimension of one element may carry any stride, which torch refuses)
    if a.ndim == 1 and flags.c_contiguous and a.size > 1:
        return True
    size = a.itemsize
    return all(s >= 0 and s % size == 0 for s in a.strides)


def _broadcast(a) -> bool:
    """A zero stride: torch would run an elementwise function over every repeat, and the
    front end would then check every element's flags; NumPy's loop reads it in place."""
    return 0 in a.strides and a.size > 1


def tensor(a):
    """``a``'s memory as a tensor (no copy). ``torch.from_numpy``, not ``torch.as_tensor``:
    the same tensor for an ndarray, 0.6 us instead of 1.7 us, twice or three times a call."""
    if not a.flags.writeable:
        a = np.asarray(_Shared(a))
    return _torch.from_numpy(a)


_MISSING = "torch is not installed (pip install torch)"


class TorchBackend:
    """``streamed``: send host arrays through the chunked pipeline (the default off the
    CPU; the tests also run it on the CPU, where it is the very same code)."""

    def __init__(self, device: str, streamed: bool | None = None):
        self.device = device
        self.name = f"torch-{device}"
        self.streamed = device != "cpu" if streamed is None else streamed

    def why_missing(self):
        """Without importing torch: None if it is installed (the optional
        ``why_missing`` of backends/_protocol.py)."""
        import importlib.util

        return None if importlib.util.find_spec("torch") is not None else _MISSING

    def loaded(self) -> bool:
        """Whether torch is imported already: ``auto`` tries this backend only then, or
        once the program's calls have done enough work to pay for the import (1.5 s)."""
        return "torch" in sys.modules

    def why_unavailable(self):
        try:
            torch = _import_torch()
        except ImportError:
            return _MISSING
        if self.device == "cuda" and not torch.cuda.is_available():
            return "torch sees no CUDA device"
        return None

    def kernel(self, spec):
        name = spec.kernels.get("torch")
        if name is None or self.why_unavailable() is not None:
            return None
        fn = _kernel_fn(_torch, name)
        if self.streamed:
            # the pipeline streams one input; two-input kinds stay on the CPU for now
            if spec.kind in ("unary", "elementwise", "logsumexp"):
                return _Streamed(self.stream_device, fn, spec)
            return None
        if spec.kind in ("unary", "elementwise"):
            return _on_runtime(fn, spec) or _Unary(fn, spec.fpe)
        if spec.kind == "binary":
            return _Binary(fn, spec.fpe)
        if spec.kind == "logsumexp":
            return lse_partial
        return None

    def foreach(self, spec):
        """A kernel over a list of arrays (fastmath.foreach), or None."""
        if self.why_unavailable() is not None:
            return None
        from ._torch_foreach import kernel

        return kernel(self, spec, _torch, takes, tensor)

    def native(self, spec, x):
        """``spec``'s function of ``x``, an array on a device, computed where it lives
        (the module's :func:`native`), or NotImplemented."""
        return native(spec, x)

    @property
    def own_threads(self):
        """``f(size)``: whether torch's own CPU threads share a call of ``size`` elements
        (None off the CPU); ``auto`` times those calls (dispatch/_parallel.OwnThreads)."""
        return None if self.streamed else _threaded

    _dev = None

    @property
    def stream_device(self):
        """The pipeline's device, shared by every kernel of this backend (one buffer pool)."""
        if self._dev is None:
            self._dev = _stream.Device(_torch, self.device)
        return self._dev


# The smallest call torch's threads may share: its loops over VML (erf among them) split
# past 2048 elements (aten/src/ATen/cpu/vml.h), its other loops past 32768
# (at::internal::GRAIN_SIZE); erf of 10^4 elements used 1.3 cores' time.
GRAIN = 2048


def _threaded(size) -> bool:
    return size > GRAIN and _torch.get_num_threads() > 1


class _Streamed:
    """A kernel for host arrays on a device: the streaming pipeline, with CPU fallback.

    Out of memory even at the smallest chunk, or any other device error, makes it decline
    (the next backend in line, NumPy at the latest, then writes the whole output again), with
    one warning per kind of error: the output is never left half written and the pool stays
    usable.
    """

    __slots__ = ("dev", "fn", "spec")

    def __init__(self, dev, fn, spec):
        self.dev, self.fn, self.spec = dev, fn, spec

    def __call__(self, x, out, *rest):
        if self.spec.kind == "logsumexp":
            return self._lse(x, out, *rest)
        if x.dtype not in _FLOATS:
            return NotImplemented
        flags = [0]
        suspect = None
        if self.spec.fpe and _fpe.watched():
            ref = self.spec.reference()

            def suspect(xb, ob):
                flags[0] |= _fpe.derive(ref, (xb,), ob)
        try:
            _stream.unary(self.dev, self.fn, x, out, suspect)
        except RuntimeError as e:  # torch's device errors, out-of-memory included
            return _declined(self.dev, e)
        return flags[0]

    def _lse(self, a, axes, b=None):
        if a.dtype not in _FLOATS or not axes:
            return NotImplemented
        from ._lse import lse_merge

        try:
            part = _stream.lse(self.dev, _lse, lse_merge, a, axes, b)
        except RuntimeError as e:
            return _declined(self.dev, e)
        return NotImplemented if part is None else part


_warned: set = set()


def _declined(dev, error):
    key = type(error).__name__
    if (dev.device, key) not in _warned:
        _warned.add((dev.device, key))
        warnings.warn(f"fastmath: torch-cuda could not run this call on {dev.device} "
                      f"({key}: {error}); the CPU computes it instead", RuntimeWarning,
                      stacklevel=_fpe.user_stacklevel())
    return NotImplemented


class _Unary:
    __slots__ = ("fn", "fpe")

    def __init__(self, fn, fpe=True):
        self.fn, self.fpe = fn, fpe

    def __call__(self, x, out):
        if x.dtype not in _FLOATS or not takes(x) or _broadcast(x):
            return NotImplemented
        # No inference_mode here (1.5 us a call, a fifth of the front end's time): tensors
        # made by from_numpy never require grad, so autograd records nothing either way
        self.fn(tensor(x), out=tensor(out))
        if _spin and out.size > GRAIN:  # its threads shared the call: they spin a while
            _runtime.foreign(_spin)
        return UNCHECKED if self.fpe and flags_possible(out) else 0


# torch's VML mode (aten/src/ATen/cpu/vml.h): high accuracy, no flush to zero, errors ignored
VML_MODE = 0x2 | 0x140000 | 0x100
_VML_PREFIX = {np.dtype(np.float32): "vms", np.dtype(np.float64): "vmd"}
_library = None  # libtorch_cpu through ctypes, False where it cannot be had


def _torch_cpu_library():
    global _library
    if _library is None:
        try:
            path = os.path.join(os.path.dirname(_torch.__file__), "lib", "libtorch_cpu.so")
            _library = ctypes.CDLL(path)  # loaded already: the same handle
            _library.MKL_Set_Num_Threads_Local  # noqa: B018 - built with MKL
        except (OSError, AttributeError):
            _library = False
    return _library


def _on_runtime(fn, spec):
    """A kernel that runs the entry point torch's own op for ``spec`` (``fn``, unary)
    calls, on the native runtime: its VML's, else SLEEF's vector function. Else None.
    Which one (if any) is decided once per function: see :func:`_route`."""
    if spec.kind != "unary" or _runtime is None:
        return None
    route = _routes.get(spec.name, False)
    if route is False:
        route = _routes[spec.name] = _route(fn, spec)
    if route is None:
        return None
    return _RuntimeUnary(fn, spec.fpe, spec.cost, *route, reference=spec.reference)


_routes: dict = {}  # function name -> _route's answer


def _route(fn, spec):
    """``(addresses, mode, setter, bits, status_setter)`` of the entry point whose bits
    ``fn`` gives on the row's sample and its special values, in float32 and float64:
    torch's VML where it has the row's VML name (in torch's VML mode, with its MKL's
    thread setter and vmlSetErrStatus), else SLEEF's vector function of torch's name,
    widest register first; None for neither."""
    lib = _torch_cpu_library()
    candidates = []
    name = spec.kernels.get("mkl")
    if name is not None and lib and not _vml_bound_elsewhere(lib):
        try:
            candidates.append(({dt: address(getattr(lib, f"{p}{name}_64"))
                                for dt, p in _VML_PREFIX.items()},
                               VML_MODE, address(lib.MKL_Set_Num_Threads_Local), 0,
                               address(lib.vmlSetErrStatus)
                               if hasattr(lib, "vmlSetErrStatus") else 0))
        except AttributeError:  # not linked in, or no library
            pass
    name = spec.kernels["torch"].rpartition(".")[2]
    for bits, lanes, isa in _VECTOR_NAMES:
        try:
            candidates.append(({dt: address(getattr(lib, f"Sleef_{name}{w}_u10{isa}"))
                                for dt, w in lanes.items()}, 0, 0, bits, 0))
        except AttributeError:
            pass
    for route in candidates:
        kernel = _RuntimeUnary(fn, spec.fpe, spec.cost, *route, reference=spec.reference)
        if all(_same_as_torch(kernel, fn, spec, dt) for dt in _VML_PREFIX):
            return route
    return None


# What torch's VML entry points call inside its copy of MKL (its threaders, by dtype)
_VML_SERVICE = ("mkl_vml_serv_threader_s_1i_1o", "mkl_vml_serv_threader_d_1i_1o")


def _vml_bound_elsewhere(lib) -> bool:
    """Whether torch's copy of MKL would call another MKL's services: where oneMKL's own
    library (the mkl backend's ``libmkl_rt``, a NumPy built on MKL) made them global before
    ``libtorch_cpu`` was loaded, the dynamic linker bound ``libtorch_cpu``'s calls of the
    services it exports to that library's, and torch's VML entry points called directly
    crash there (measured on an Intel Xeon: a segfault in libmkl_intel_thread's threader,
    or "cpu specific dynamic library is not loaded" and an exit). An MKL loaded after
    torch is harmless: torch's calls were bound as it loaded (Python loads with RTLD_NOW)."""
    everywhere = ctypes.CDLL(None)
    others = set()
    for name in _VML_SERVICE:  # (one torch does not export is bound inside it)
        found, own = getattr(everywhere, name, None), getattr(lib, name, None)
        if found is not None and own is not None and address(found) != address(own):
            info = _DlInfo()
            if not everywhere.dladdr(ctypes.c_void_p(address(found)), ctypes.byref(info)):
                return True
            others.add(info.fname)
    if not others:
        return False
    order = _loaded_in_order(everywhere)
    torch_at = next((i for i, n in enumerate(order) if n.endswith(b"/libtorch_cpu.so")), -1)
    return torch_at < 0 or any(n not in order or order.index(n) < torch_at for n in others)


class _DlInfo(ctypes.Structure):
    _fields_ = [("fname", ctypes.c_char_p), ("fbase", ctypes.c_void_p),
                ("sname", ctypes.c_char_p), ("saddr", ctypes.c_void_p)]


class _PhdrInfo(ctypes.Structure):  # the head of glibc's struct dl_phdr_info
    _fields_ = [("addr", ctypes.c_void_p), ("name", ctypes.c_char_p)]


def _loaded_in_order(libc):
    """The paths of the libraries loaded in this process, in the order they were loaded."""
    names = []
    step = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(_PhdrInfo), ctypes.c_size_t,
                            ctypes.c_void_p)

    def visit(info, size, data):
        names.append(info.contents.name or b"")
        return 0

    libc.dl_iterate_phdr(step(visit), None)
    return names


# SLEEF's vector functions in libtorch_cpu, which torch's own loops call on this CPU: the
# widest register first (its AVX-512 build's, then its AVX2 build's)
_VECTOR_NAMES = ((512, {np.dtype(np.float32): "f16", np.dtype(np.float64): "d8"}, "avx512f"),
                 (256, {np.dtype(np.float32): "f8", np.dtype(np.float64): "d4"}, "avx2"))


def _same_as_torch(kernel, fn, spec, dtype) -> bool:
    with np.errstate(all="ignore"):
        x = np.concatenate([spec.sample(4096, dtype, np.random.default_rng(0))[0],
                            _verify.special_values(dtype)])
        out = np.empty_like(x)
        if kernel._on_pool((x,), out) is None:
            return False
    return out.tobytes() == fn(tensor(x)).numpy().tobytes()


class _RuntimeUnary(RuntimeVml):
    """torch's op as the entry point torch's own loop calls (its VML's, or SLEEF's vector
    function: ``bits``), on the runtime (see the module's notes); torch's op where the
    runtime declines the call (a layout it does not take)."""

    __slots__ = ("torch_op",)

    def __init__(self, fn, fpe, cost, addresses, mode=0, setter=0, bits=0, status_setter=0,
                 reference=None):
        self.fpe, self.torch_op = fpe, _Unary(fn, fpe)
        self._on_runtime(addresses, mode, setter, cost, bits, status_setter, reference)

    def __call__(self, x, out):
        if x.dtype in self.addresses and out.dtype == x.dtype and x.shape == out.shape:
            status = self._on_pool((x,), out)
            if status is not None:
                return status
        return self.torch_op(x, out)


class _Binary:
    __slots__ = ("fn", "fpe")

    def __init__(self, fn, fpe=True):
        self.fn, self.fpe = fn, fpe

    def __call__(self, x1, x2, out):
        if (x1.dtype not in _FLOATS or x2.dtype != x1.dtype or not takes(x1)
                or not takes(x2)):
            return NotImplemented
        self.fn(tensor(x1), tensor(x2), out=tensor(out))  # no inference_mode: see _Unary
        if _spin and out.size > GRAIN:  # its threads shared the call: they spin a while
            _runtime.foreign(_spin)
        return UNCHECKED if self.fpe and flags_possible(out) else 0


def lse_partial(a, axes, b=None):
    """SciPy's (M, m, s) decomposition (see backends/numpy.py), computed by torch."""
    # torch reads dim=() as "every axis"; SciPy's axis=() reduces none
    if (a.dtype not in _FLOATS or not takes(a) or (b is not None and not takes(b))
            or not axes):
        return NotImplemented
    with _torch.inference_mode():
        part = _lse(tensor(a), axes, None if b is None else tensor(b))
        return tuple(p.numpy() for p in part)


def _lse(t, axes, tb=None):
    """(M, m, s) of tensor ``t`` over ``axes``, with keepdims, on ``t``'s device."""
    torch = _torch
    if tb is not None:
        t = t.masked_fill(tb == 0, -torch.inf)
    M = torch.amax(t, dim=axes, keepdim=True)
    shift = torch.where(torch.isfinite(M), M, 0)
    top = t == M
    e = torch.exp(t - shift)
    if tb is None:
        m = top.sum(dim=axes, keepdim=True, dtype=t.dtype)
    else:
        m = torch.where(top, tb, 0).sum(dim=axes, keepdim=True, dtype=t.dtype)
        e.mul_(tb)
    e.masked_fill_(top, 0)
    s = e.sum(dim=axes, keepdim=True, dtype=t.dtype)
    return M, m, s


def _kernel_fn(torch, name):
    """torch's function named by a registry row (``"exp"``, ``"special.erf"``)."""
    return operator.attrgetter(name)(torch)


_NATIVE: dict = {}  # (spec name, torch dtype) -> (kernel, cast to or None) or NotImplemented


def _native_plan(torch, spec, dtype):
    """The torch kernel for ``spec`` on tensors of ``dtype`` and the dtype it must cast
    to first (NumPy's result dtype; None when the same), or NotImplemented."""
    name = spec.kernels.get("torch")
    if name is None or spec.kind != "unary" or dtype.is_complex:
        return NotImplemented
    try:
        in_dt = np.dtype(str(dtype).replace("torch.", ""))
        out_dt = spec.reference().resolve_dtypes((in_dt, None))[1]
    except (TypeError, ValueError):
        return NotImplemented
    if out_dt not in _FLOATS:
        return NotImplemented
    cast = getattr(torch, out_dt.name)
    return _kernel_fn(torch, name), (None if cast == dtype else cast)


def native(spec, x):
    """``spec``'s function of an array that lives on a device, computed there.

    ``x`` is a torch tensor, or a DLPack producer whose library has ``from_dlpack``
    (CuPy): the result is of the same type, on the same device, with NumPy's result dtype;
    nothing is transferred. Returns NotImplemented for what NumPy must answer (options,
    dtypes NumPy would not compute in float32/float64, tensors that require grad).
    """
    torch = _import_torch()
    back = None
    if not isinstance(x, torch.Tensor):
        import sys

        back = getattr(sys.modules.get(type(x).__module__.partition(".")[0]), "from_dlpack", None)
        if back is None:
            return NotImplemented
        x = torch.from_dlpack(x)
    if x.requires_grad:
        return NotImplemented
    key = (spec.name, x.dtype)
    plan = _NATIVE.get(key)
    if plan is None:
        plan = _NATIVE[key] = _native_plan(torch, spec, x.dtype)
    if plan is NotImplemented:
        return NotImplemented
    fn, out_dt = plan
    # (no no_grad needed: x does not require grad, so neither does the result, and the
    # result stays usable with autograd)
    r = fn(x if out_dt is None else x.to(out_dt))
    return r if back is None else back(r)
