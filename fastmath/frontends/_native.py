"""Recognising arrays that live on a device, without importing the library that made them.

A torch tensor is recognised only if torch is already imported (whoever made the tensor
imported it); any other array counts only if it says, through DLPack, that it lives on a
GPU. Such arrays are computed where they are (``backends.torch.native``): copying them to
the host for NumPy would cost more than the whole computation.
"""
from __future__ import annotations

import sys

_HOST_DEVICES = (1, 3)  # DLPack's kDLCPU and kDLCUDAHost: memory NumPy can read


def resident(x) -> bool:
    """Whether ``x`` is a torch tensor or an array on a device NumPy cannot read."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(x, torch.Tensor):
        return True
    where = getattr(x, "__dlpack_device__", None)
    if where is None or not hasattr(x, "__dlpack__"):
        return False
    try:
        return where()[0] not in _HOST_DEVICES
    except Exception:  # noqa: BLE001 - a producer that cannot say is left to NumPy
        return False


def call(spec, xs):
    """``spec``'s function of device-resident operands ``xs``, or NotImplemented."""
    if len(xs) != 1 or not resident(xs[0]):  # one operand only, for now
        return NotImplemented
    x = xs[0]
    from ..backends import torch as backend

    if backend.TorchBackend("cpu").why_unavailable() is not None:
        return NotImplemented
    return backend.native(spec, x)
