"""Backends: where a kernel runs.

The protocol a backend keeps is written once, in ``_protocol.py``: its required and
optional members, the kernel signature of each kind, and what a kernel returns. The rules
around it:

1. Importing this package imports no numerical library beyond NumPy. A backend imports
   its library the first time it is asked whether it is available, never before.
2. A backend may be unavailable: ``why_unavailable()`` says why not and how to fix it.
3. A kernel gets a well-formed array and writes only into the output it is given, never
   into its input, which it may share memory with; it may decline a call before writing
   anything, and the next backend in line takes it (numpy ends every line).
4. No backend imports another; shared math (logsumexp's partials) lives in ``_lse.py``.
5. Adding a backend is one module that implements the protocol and one entry in the
   backend list below (or, from outside fastmath, :func:`register`); every other list of
   backend names derives from it.
"""
from __future__ import annotations

import importlib
import threading

from ._protocol import HANDLED, UNCHECKED, missing

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
_on_register: list = []  # hooks of the layers above that keep a list of names


def on_register(hook) -> None:
    """Register a callable run after :func:`register` adds a backend."""
    _on_register.append(hook)


def register(name: str, module: str, cls: str, **kwargs) -> None:
    """Add backend ``name``: ``module.cls(**kwargs)``, made on first use, which keeps the
    protocol (``_protocol.Backend``). The name is then valid wherever a backend name is
    (``fastmath.set_backend``, ``fastmath.backend``, ``available_backends``, ``info``);
    ``auto`` does not choose it unless a calibration table names it.

    Raises ValueError for a name already taken.
    """
    global NAMES
    with _lock:
        if name == "auto" or name in _FACTORIES:
            raise ValueError(f"backend {name!r} exists already")
        _FACTORIES[name] = (module, cls, dict(kwargs))
        NAMES = tuple(_FACTORIES)
    for hook in _on_register:
        hook()


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
            lacks = missing(backend)
            if lacks:
                raise TypeError(f"backend {name!r} ({module}.{cls}) lacks {', '.join(lacks)}: "
                                "see fastmath/backends/_protocol.py")
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
    (the optional ``why_missing``): None if it may run here."""
    b = get(name)
    cheap = getattr(b, "why_missing", None)
    return b.why_unavailable() if cheap is None else cheap()
