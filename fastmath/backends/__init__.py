"""Backends: where a kernel runs.

Rules every backend keeps:

1. Importing this package imports no numerical library beyond NumPy. A backend imports
   its library the first time it is asked whether it is available, never before.
2. A backend may be unavailable. ``why_unavailable()`` returns None when it can run, or a
   sentence saying why not and how to fix it.
3. ``kernel(spec)`` returns a callable for a registry row, or None if this backend has no
   kernel for it. A kernel gets a well-formed array (the front end has done NumPy's
   argument handling and type resolution) and writes only into the output it is given:
   never into its input, which it may share memory with.
4. A kernel may decline a particular call (a dtype or layout it cannot take) by returning
   ``NotImplemented`` before writing anything; the next backend in line then takes it.
5. A unary kernel ``k(x, out)`` returns what the front end must do about floating-point
   errors: ``HANDLED`` (NumPy already acted on them in this thread, or there can be none),
   an int of flags to report, or ``UNCHECKED`` (the backend cannot see FPU flags, so the
   front end derives them, from the input: for an in-place call with another backend
   behind this one, the front end keeps a copy of the input).
6. A kernel that raises part-way may have written some of its output; the front end then
   runs the next backend in line over the whole output, so a result or ``out=`` is never
   left half written. The numpy backend, last in every chain, runs NumPy's own loops:
   their failures are NumPy's, raised as NumPy raises them.
7. A kernel that runs the reference's own loop may say so: ``any_strides`` (it takes
   negative strides as they are) and ``masked(mask)`` (a kernel for the elements a
   ``where=`` mask selects, or None). NumPy picks its loop by layout, so the front end
   then hands the arrays over untouched instead of flipping them or gathering the
   selected elements, and the result is the reference's bit for bit.
8. A backend whose ``why_unavailable()`` must import its library may also have
   ``why_missing()``: the part of the answer that costs no import (is the package there
   at all?), which ``import fastmath`` uses to check FASTMATH_BACKEND.
"""
from __future__ import annotations

import importlib
import threading

HANDLED = None
UNCHECKED = -1

# The one list of backends, in the order they are shown; every other list of backend names
# (FASTMATH_BACKEND's choices, set_backend, the docs, info) derives from it.
_FACTORIES = {
    "numpy": ("fastmath.backends.numpy", "NumpyBackend", {}),
    "numexpr": ("fastmath.backends.numexpr", "NumexprBackend", {}),
    "torch-cpu": ("fastmath.backends.torch", "TorchBackend", {"device": "cpu"}),
    "torch-cuda": ("fastmath.backends.torch", "TorchBackend", {"device": "cuda"}),
    "mkl": ("fastmath.backends.mkl", "MklBackend", {}),
}
NAMES = tuple(_FACTORIES)
_instances: dict = {}
_lock = threading.RLock()


class Unavailable:
    """Stands in for a backend this version of fastmath does not have."""

    def __init__(self, name, why):
        self.name = name
        self._why = why

    def why_unavailable(self):
        return self._why

    def kernel(self, spec):
        return None


def get(name: str):
    """The backend object for ``name`` (created once; creating it imports nothing heavy)."""
    try:
        return _instances[name]
    except KeyError:
        pass
    with _lock:  # threads' first calls at once: one object per name
        if name in _instances:
            return _instances[name]
        if name not in _FACTORIES:
            backend = Unavailable(name, "this version of fastmath does not have it yet")
        else:
            module, cls, kwargs = _FACTORIES[name]
            backend = getattr(importlib.import_module(module), cls)(**kwargs)
        _instances[name] = backend
    return backend


def _load_once(namespace: dict, name: str, lock, load):
    """``namespace[name]``, set by ``load()`` the first time: many threads' first calls
    give one import and one configuration, and none sees the library before it is
    configured (rule 1's import, done safely)."""
    value = namespace[name]
    if value is None:
        with lock:
            value = namespace[name]
            if value is None:
                value = namespace[name] = load()
    return value


def why_unavailable(name: str):
    """None if backend ``name`` can run here, else the reason it cannot."""
    return get(name).why_unavailable()


def why_missing(name: str):
    """What :func:`why_unavailable` can tell without importing the backend's library
    (rule 8): None if it may run here."""
    b = get(name)
    cheap = getattr(b, "why_missing", None)
    return b.why_unavailable() if cheap is None else cheap()
