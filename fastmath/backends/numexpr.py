"""numexpr: its elementwise functions, run by its own thread pool, into NumPy's output.

Each kernel is ``numexpr.evaluate("f(x)", local_dict=..., out=...)`` writing into the
array the front end allocated. numexpr computes float32 in float32 and float64 in
float64 (checked: results keep the input's dtype and stay within 2 ULPs of NumPy's in
float32, 1 in float64), so only those two dtypes, in native byte order, are taken; the
rest is declined and goes to the next backend. numexpr has no erf (and no approximation
stands in for it) and no logsumexp kernel: without Intel's VML its exp is 4-10x slower
than NumPy's SIMD exp per element, so a fused max-subtracted pass measured 2.7x slower
than the numpy backend's blocked logsumexp at 10^6 elements, and 20x at 10^4.

numexpr keeps no floating-point flags, so kernels return UNCHECKED where a flag is
possible (backends/_flags.py) and the front end derives NumPy's errors from the result.
"""
from __future__ import annotations

import sys

import threading

from .._numpy import FLOATS as _FLOATS

from ..dispatch import _config
from . import UNCHECKED, _load_once
from ._flags import flags_possible

_ne = None


_init = threading.Lock()


def _import_numexpr():
    return _load_once(globals(), "_ne", _init, _configured)


def _configured():
    import numexpr

    # numexpr's set_num_threads restarts its pool, and hangs if another thread is
    # evaluating meanwhile: kernels see the module only once it is set
    _threads(numexpr)
    return numexpr


def _threads(ne):
    ne.set_num_threads(min(_config.get().num_threads, ne.MAX_THREADS))


def _set_threads():
    with _init:
        if _ne is not None:
            _threads(_ne)


_MISSING = "numexpr is not installed (pip install numexpr)"


class NumexprBackend:
    name = "numexpr"

    def why_missing(self):
        """Without importing numexpr: None if it is installed (the optional
        ``why_missing`` of backends/_protocol.py)."""
        import importlib.util

        return None if importlib.util.find_spec("numexpr") is not None else _MISSING

    def loaded(self) -> bool:
        """Whether numexpr is imported already (see TorchBackend.loaded)."""
        return "numexpr" in sys.modules

    def why_unavailable(self):
        try:
            _import_numexpr()
        except ImportError:
            return _MISSING
        return None

    def kernel(self, spec):
        name = spec.kernels.get("numexpr")
        if spec.kind != "unary" or name is None or self.why_unavailable() is not None:
            return None
        return _Unary(f"{name}(x)", spec.fpe)


class _Unary:
    __slots__ = ("expr", "fpe")

    def __init__(self, expr, fpe):
        self.expr = expr
        self.fpe = fpe  # whether NumPy's function can raise FP flags at all

    def __call__(self, x, out):
        # a zero stride (a broadcast input): numexpr would copy it whole; NumPy reads it
        if (x.dtype not in _FLOATS or not x.dtype.isnative or out.dtype != x.dtype
                or (0 in x.strides and x.size > 1)):
            return NotImplemented
        _ne.evaluate(self.expr, local_dict={"x": x}, out=out)
        return UNCHECKED if self.fpe and flags_possible(out) else 0


_config.on_reload(_set_threads)
