"""The function table: fastmath's callable for every registry row, built from the registry.

``FRONT_ENDS`` says which front end makes a row of each kind; ``FUNCTIONS`` holds what they
made, by public name (aliases included). The public namespace and ``fastmath.special``,
the patch, ``accelerate`` and ``foreach`` all read this table: no module below the public
face imports ``fastmath`` to find a function.
"""
from __future__ import annotations

from .. import _registry
from . import _reductions
from ._binary import BinaryUfunc
from ._elementwise import Function
from ._ufunc import Ufunc

# kind -> what makes fastmath's callable for a row of that kind
FRONT_ENDS = {"unary": Ufunc, "binary": BinaryUfunc, "elementwise": Function,
              "logsumexp": _reductions.front_end, "softmax": _reductions.front_end}


def _build() -> dict:
    made = {}
    for spec in _registry.ROWS:
        made[spec.name] = FRONT_ENDS[spec.kind](spec)
        made.update(dict.fromkeys(spec.aliases, made[spec.name]))
    return made


FUNCTIONS = _build()
