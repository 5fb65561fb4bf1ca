"""``fastmath.patch()``: fastmath's functions in place of NumPy's and SciPy's, process-wide.

While a patch is active, ``numpy.exp`` *is* ``fastmath.exp``, ``scipy.special.erf`` is
``fastmath.erf``, and so on for every row of the registry. Code fastmath does not control
(scikit-learn, pandas, a colleague's module) then runs through fastmath wherever it looks
the name up at call time, as ``np.exp(x)`` does. A name bound before the patch began
(``from numpy import exp`` at import time, a ufunc stored in a dict) keeps the original:
nothing but the module attributes is touched.

Patches nest and repeat: one process-wide count decides, so the originals come back,
identical objects, when the last active patch ends, exception or not. fastmath's own code
never sees the swap: it reads NumPy through ``fastmath._numpy``, and every reference is
resolved (``Spec.reference``) before the first swap.
"""
from __future__ import annotations

import contextlib
import importlib
import threading

from . import _registry

_lock = threading.Lock()
_depth = 0
_saved: list = []  # (module, attribute, original object, was it in the module's __dict__)


def _swap_in() -> None:
    import fastmath

    targets = []
    for spec in _registry.ROWS:
        original = spec.reference()
        module_name, _, attr = spec.ref.partition(":")
        module = importlib.import_module(module_name)
        targets.append((module, attr, original, attr in vars(module),
                        getattr(fastmath, spec.name)))
    for module, attr, original, own, replacement in targets:
        _saved.append((module, attr, original, own))
        setattr(module, attr, replacement)


def _restore() -> None:
    while _saved:
        module, attr, original, own = _saved.pop()
        if own:
            setattr(module, attr, original)
        else:  # it came from the module's __getattr__: let it do so again
            delattr(module, attr)


def start() -> None:
    """Swap fastmath's functions into numpy and scipy.special (or count one more user)."""
    global _depth
    with _lock:
        if _depth == 0:
            try:
                _swap_in()
            except BaseException:
                _restore()
                raise
        _depth += 1


def stop() -> None:
    """End one :func:`start`; the last one to end puts NumPy's and SciPy's objects back."""
    global _depth
    with _lock:
        if _depth == 0:
            raise RuntimeError("fastmath.patch.stop() called with no active patch")
        _depth -= 1
        if _depth == 0:
            _restore()


def active() -> bool:
    """Whether fastmath's functions are swapped into numpy and scipy.special now."""
    return _depth > 0


class patch(contextlib.ContextDecorator):
    """Run NumPy's and SciPy's accelerated functions through fastmath, process-wide.

    A context manager (or decorator) that swaps ``fastmath.exp`` in for ``numpy.exp``,
    ``fastmath.erf`` for ``scipy.special.erf``, ... for every accelerated function, and
    puts the original objects back on exit, even on an exception. Uses nest; the
    originals return when the outermost ends. ``fastmath.patch.start()`` and
    ``fastmath.patch.stop()`` do the same without a ``with`` block.

    Only look-ups made while the patch is active are affected: a module that did
    ``from numpy import exp`` before keeps NumPy's function. The swap is seen by every
    thread; to change the backend for one thread only, use :class:`fastmath.backend`.

    Examples
    --------
    >>> import numpy, fastmath
    >>> with fastmath.patch():
    ...     numpy.exp is fastmath.exp
    True
    >>> numpy.exp is fastmath.exp
    False
    """

    start = staticmethod(start)
    stop = staticmethod(stop)
    active = staticmethod(active)

    def __enter__(self):
        start()
        return self

    def __exit__(self, *exc):
        stop()
        return False

    def __repr__(self):
        return "fastmath.patch()"
