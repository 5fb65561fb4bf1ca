"""torch's ``_foreach_<op>_`` kernels for fastmath.foreach: one call over a list of arrays.

Only for registry rows that have a torch kernel (their torch function is held to the row's
ULP bound against the reference) and whose torch function has a ``_foreach`` form: torch's
name for ``expit`` is ``sigmoid``. The in-place form runs on the outputs, after the inputs
are copied into them, so an input is never written unless it is its own output; an array
computed in place is copied first, and put back if torch fails part-way.
"""
from __future__ import annotations

from .._numpy import FLOATS as _FLOATS, np

from ..dispatch import _fpe

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
    return None if fn is None else _Foreach(fn, backend.device, torch, takes, tensor, spec)


class _Foreach:
    """The list kernel (backends/_protocol.py's ``LIST_KERNEL``): the float32/float64
    arrays torch takes as they are, in one call; each one's FP flags derived from its
    result, as for torch's other kernels (torch raises none)."""

    __slots__ = ("fn", "device", "torch", "_takes", "_tensor", "_spec")

    def __init__(self, fn, device, torch, takes, tensor, spec):
        self.fn, self.device, self.torch = fn, device, torch
        self._takes, self._tensor, self._spec = takes, tensor, spec

    def takes(self, x, o) -> bool:
        takes = self._takes
        return bool(type(x) is np.ndarray and x.dtype in _FLOATS and takes(x) and x.size
                    and o.dtype == x.dtype and o.shape == x.shape and takes(o)
                    and (o is x or not np.may_share_memory(x, o)))

    def __call__(self, xs, outs, results, limit=None, stop=0):
        take, ins, dest, left = [], [], [], []
        for i, x in enumerate(xs):
            o = None if outs is None else outs[i]
            d = o if o is not None else (np.empty_like(x) if type(x) is np.ndarray else None)
            if d is None or not self.takes(x, d):
                left.append(i)
                continue
            take.append(i)
            # an array computed in place is read from a copy: the flags are derived from
            # it afterwards, and it is put back if torch fails part-way
            ins.append(x.copy() if d is x else x)
            dest.append(d)
        if not take:
            return None, left
        try:
            self._run(ins, dest)
        except BaseException:
            for i, x, d in zip(take, ins, dest):
                if d is xs[i]:
                    np.copyto(d, x)
            raise
        spec = self._spec
        flags = None
        if spec.fpe and _fpe.watched():
            ref = spec.reference()
            for i, x, d in zip(take, ins, dest):
                f = _fpe.derive(ref, (x,), d)
                if f:
                    flags = flags or [0] * len(xs)
                    flags[i] = f
        for i, d in zip(take, dest):
            results[i] = d
        return flags, left

    def _run(self, xs, outs):
        tensor = self._tensor
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
