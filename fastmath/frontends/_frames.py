"""NumPy's errors as NumPy raises them: without fastmath's frames in the traceback.

An error NumPy's C functions raise names only the caller's line. Raised through fastmath
it would also name the front end's frames (``np.exp()`` naming ``Ufunc._hot.<locals>.fast``
and four more), which say nothing to the user. The public entry points hand such errors
to ``trim``: the compiled ufunc entry (_hot.c, which has no frame of its own) drops every
fastmath frame; an entry written in Python keeps its own first frame, which Python adds
as the error leaves it anyway. Frames of other code on the way (SciPy's Python functions,
an ``__array_ufunc__`` override, an error-state callback) stay, in order.

What looks like a fault in fastmath itself (an AttributeError, a NameError, ...) keeps
every frame, and so does every error while fastmath's debug log is on
(``FASTMATH_LOG=debug``): that is how to see where inside fastmath something failed.
"""
from __future__ import annotations

import os

from ..dispatch import _log

_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
# what NumPy's and SciPy's calls never raise for a bad argument or an error state
_FAULTS = (AttributeError, NameError, KeyError, AssertionError, SystemError, ImportError,
           RecursionError, NotImplementedError)
_ours: dict = {}  # code filename -> whether it is fastmath's


def _is_ours(code) -> bool:
    name = code.co_filename
    try:
        return _ours[name]
    except KeyError:
        mine = _ours[name] = os.path.abspath(name).startswith(_PACKAGE)
        return mine


def trim(exc, keep_first=True):
    """``exc``'s traceback without fastmath's frames (the first kept if ``keep_first``),
    also set as its ``__traceback__``; unchanged for what looks like a fault of fastmath's."""
    tb = exc.__traceback__
    if tb is None or _log.state.on or isinstance(exc, _FAULTS):
        return tb
    kept = [tb] if keep_first else []
    t = tb.tb_next if keep_first else tb
    while t is not None:
        if not _is_ours(t.tb_frame.f_code):
            kept.append(t)
        t = t.tb_next
    for a, b in zip(kept, kept[1:] + [None]):
        a.tb_next = b
    tb = kept[0] if kept else None
    exc.__traceback__ = tb
    return tb


def trim_all(exc):
    """``trim`` for an entry with no frame of its own (_hot.c)."""
    return trim(exc, False)
