"""torch's ``_foreach_<op>_`` kernels for fastmath.foreach: one call over a list of arrays.

Only for registry rows that have a torch kernel (their torch function is held to the row's
ULP bound against the reference) and whose torch function has a ``_foreach`` form: torch's
name for ``expit`` is ``sigmoid``. The in-place form runs on the outputs, after the inputs
are copied into them, so an input is never written unless it is its own output.
"""
from __future__ import annotations

from .._numpy import FLOATS as _FLOATS, np

from . import UNCHECKED

_ALIASES = {"expit": "sigmoid"}


def kernel(backend, spec, torch, takes, tensor):
    """The list kernel for ``spec``, or None; ``takes`` and ``tensor`` are torch.py's (whether
    torch takes an array as it is, and the tensor sharing its memory): handed in, as this
    module sits below the backend that uses it."""
    name = spec.kernels.get("torch")
    if name is None or spec.kind != "unary":
        return None
    name = name.rpartition(".")[2]
    fn = getattr(torch, f"_foreach_{_ALIASES.get(name, name)}_", None)
    return None if fn is None else _Foreach(fn, backend.device, torch, takes, tensor)


class _Foreach:
    """``k(xs, outs)``: computes every pair (each one ``takes``), returns UNCHECKED; or
    NotImplemented, before writing anything, if it cannot take them all."""

    __slots__ = ("fn", "device", "torch", "_takes", "_tensor")

    def __init__(self, fn, device, torch, takes, tensor):
        self.fn, self.device, self.torch = fn, device, torch
        self._takes, self._tensor = takes, tensor

    def takes(self, x, o) -> bool:
        takes = self._takes
        return bool(type(x) is np.ndarray and x.dtype in _FLOATS and takes(x) and x.size
                    and o.dtype == x.dtype and o.shape == x.shape and takes(o)
                    and (o is x or not np.may_share_memory(x, o)))

    def __call__(self, xs, outs):
        tensor = self._tensor
        if not all(self.takes(x, o) for x, o in zip(xs, outs)):
            return NotImplemented
        torch = self.torch
        with torch.inference_mode():
            ts = [tensor(o) for o in outs]
            if self.device == "cpu":
                for x, o, t in zip(xs, outs, ts):
                    if x is not o:
                        t.copy_(tensor(x))
                self.fn(ts)
            else:
                dev = [tensor(x).to(self.device, non_blocking=True) for x in xs]
                self.fn(dev)
                for t, d in zip(ts, dev):
                    t.copy_(d)
        return UNCHECKED
