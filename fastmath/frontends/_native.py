"""Recognising arrays that live on a device, without importing the library that made them.

A torch tensor is recognised only if torch is already imported (whoever made the tensor
imported it); any other array counts only if it says, through DLPack, that it lives on a
GPU. Such arrays are computed where they are, by the first backend whose ``native`` member
takes them (the backend protocol, backends/_protocol.py): copying them to the host for
NumPy would cost more than the whole computation.
"""
from __future__ import annotations

import sys

from .. import backends

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
    for native in _natives or _find_natives():
        r = native(spec, xs[0])
        if r is not NotImplemented:
            return r
    return NotImplemented


_natives: tuple = ()  # the available backends' ``native`` members, in backends.NAMES order


def _find_natives() -> tuple:
    """The ``native`` members of the backends that are available, looked up once (and
    again after a backend is registered)."""
    global _natives
    found = []
    for name in backends.NAMES:
        b = backends.get(name)
        native = getattr(b, "native", None)
        if native is not None and b.why_unavailable() is None:
            found.append(native)
    _natives = tuple(found)
    return _natives


def _forget(*_args) -> None:
    global _natives
    _natives = ()


backends.on_register(_forget)
