"""scipy.special, with fastmath's accelerated functions in place of SciPy's.

Every name this module does not accelerate is scipy.special's own object; SciPy is
imported when the first such name is looked up, not before.
"""
from __future__ import annotations

from . import _registry
from .frontends._functions import FUNCTIONS as _FUNCTIONS

_ACCELERATED = tuple(n for s in _registry.ROWS if s.ref.startswith("scipy.special:")
                     for n in (s.name,) + s.aliases)
for _name in _ACCELERATED:
    globals()[_name] = _FUNCTIONS[_name]
del _name


def __getattr__(name):
    import scipy.special

    try:
        return getattr(scipy.special, name)
    except AttributeError:
        raise AttributeError(f"module 'fastmath.special' has no attribute {name!r} "
                             "(nor has scipy.special)") from None


def __dir__():
    import scipy.special

    return sorted(set(globals()) | set(dir(scipy.special)))
