"""torch-cpu and torch-cuda: one class, parameterised by device.

NumPy arrays go in zero-copy (``torch.as_tensor`` shares their memory) and results are
written into an output NumPy allocated (NumPy asks the OS for huge pages; torch's
allocator does not, which measured 3x slower for 80 MB), under ``torch.inference_mode()``.
torch is imported the first time this backend is asked whether it is available.
"""
from __future__ import annotations

import os

import numpy as np

from .. import _config
from . import UNCHECKED

_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))
_torch = None


def _import_torch():
    global _torch
    if _torch is None:
        # torch's OpenMP workers spin for a while after each parallel region; on a
        # 2-core machine that spin took the cores from the numpy backend's threads and
        # made the next threaded numpy call up to 1.6x slower. Passive waiting is set
        # only if the user has not chosen, and only matters if torch is not loaded yet.
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
        import torch

        n = _config.get().sources.get("FASTMATH_NUM_THREADS")
        if n is not None:
            torch.set_num_threads(_config.get().num_threads)
        _torch = torch
    return _torch


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
    """Whether torch can view ``a``'s memory as it is: native order, no negative strides."""
    return a.dtype.isnative and all(s >= 0 for s in a.strides)


def tensor(a):
    torch = _torch
    if not a.flags.writeable:
        a = np.asarray(_Shared(a))
    return torch.as_tensor(a)


class TorchBackend:
    def __init__(self, device: str):
        self.device = device
        self.name = f"torch-{device}"

    def why_unavailable(self):
        try:
            torch = _import_torch()
        except ImportError:
            return "torch is not installed (pip install 'fastmath-shim[torch]')"
        if self.device == "cuda" and not torch.cuda.is_available():
            return "torch sees no CUDA device"
        if self.device == "cuda":
            return "the torch-cuda backend is not built yet"
        return None

    def kernel(self, spec):
        name = spec.kernels.get("torch")
        if name is None or self.why_unavailable() is not None:
            return None
        fn = _torch
        for part in name.split("."):
            fn = getattr(fn, part)
        if spec.kind == "unary":
            return _Unary(fn)
        if spec.kind == "logsumexp":
            return lse_partial
        return None


class _Unary:
    __slots__ = ("fn",)
    flagless = True  # no FPU flags: the front end derives them from the input afterwards

    def __init__(self, fn):
        self.fn = fn

    def __call__(self, x, out):
        if x.dtype not in _FLOATS or not takes(x):
            return NotImplemented
        with _torch.inference_mode():
            self.fn(tensor(x), out=tensor(out))
        return UNCHECKED


def lse_partial(a, axes, b=None):
    """SciPy's (M, m, s) decomposition (see backends/numpy.py), computed by torch."""
    if a.dtype not in _FLOATS or not takes(a) or (b is not None and not takes(b)):
        return NotImplemented
    torch = _torch
    with torch.inference_mode():
        t = tensor(a)
        if b is not None:
            tb = tensor(b)
            t = t.masked_fill(tb == 0, -torch.inf)
        M = torch.amax(t, dim=axes, keepdim=True)
        shift = torch.where(torch.isfinite(M), M, 0)
        top = t == M
        e = torch.exp(t - shift)
        if b is None:
            m = top.sum(dim=axes, keepdim=True, dtype=t.dtype)
        else:
            m = torch.where(top, tb, 0).sum(dim=axes, keepdim=True, dtype=t.dtype)
            e.mul_(tb)
        e.masked_fill_(top, 0)
        s = e.sum(dim=axes, keepdim=True, dtype=t.dtype)
        return M.numpy(), m.numpy(), s.numpy()
