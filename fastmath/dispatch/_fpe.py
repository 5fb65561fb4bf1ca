"""NumPy's floating-point error state, honoured for work NumPy did not do in this thread.

NumPy reports FPU flags after each ufunc loop according to ``np.errstate``. When fastmath
runs a loop in a worker thread, or on a backend that has no FPU flags at all (torch), the
flags are gathered or derived there and reported here, in the caller's thread, exactly as
NumPy's own handler would: same categories in the same order, same messages, same modes
(ignore, warn, raise, call, print, log).
"""
from __future__ import annotations

import os
import sys
import warnings

from .._numpy import np

DIVIDE, OVER, UNDER, INVALID = 1, 2, 4, 8
CATEGORIES = (
    ("divide", DIVIDE, "divide by zero"),
    ("over", OVER, "overflow"),
    ("under", UNDER, "underflow"),
    ("invalid", INVALID, "invalid value"),
)
# fastmath's root folder: frames in any of its sub-packages are fastmath's own
_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
try:  # NumPy 2 keeps the error state in a context variable, replaced on every change
    from numpy._core.umath import _extobj_contextvar as _extobj
except ImportError:  # pragma: no cover - older NumPy: ask it every time
    _extobj = None
_modes = (None, None)  # (the state object last read, its modes), replaced as one tuple


class Recorder:
    """An ``np.errstate(call=...)`` callback that only collects the flags raised."""

    __slots__ = ("flags",)

    def __init__(self):
        self.flags = 0

    def __call__(self, _kind, flags):
        self.flags |= flags


def recorded(fn, *args, **kwargs) -> int:
    """Run ``fn`` with every FP error recorded instead of acted on; return the flags."""
    rec = Recorder()
    with np.errstate(all="call", call=rec):
        fn(*args, **kwargs)
    return rec.flags


def user_stacklevel() -> int:
    """``stacklevel`` for a ``warnings.warn`` made by the caller of this function that
    points at the first frame outside fastmath: the user's call, or their ``import``.
    importlib's own frames are not counted, as ``warnings`` skips them too."""
    level, frame = 0, sys._getframe(1)
    while frame is not None:
        name = frame.f_code.co_filename
        if not ("importlib" in name and "_bootstrap" in name):
            level += 1
            if not os.path.abspath(name).startswith(_PACKAGE):
                return level
        frame = frame.f_back
    return max(level, 1)


def error_modes() -> dict:
    """``np.geterr()``, which costs about a microsecond: read once per state object.

    The state object is held in the cache, so its identity cannot be reused by another
    while it is compared. The dict returned is shared: do not change it.
    """
    global _modes
    if _extobj is None:
        return np.geterr()
    state = _extobj.get()
    last = _modes
    if last[0] is state:
        return last[1]
    current = np.geterr()
    _modes = (state, current)
    return current


def report(name: str, flags: int) -> None:
    """Act on ``flags`` raised while computing ufunc ``name`` as NumPy's handler would."""
    if not flags:
        return
    modes = error_modes()
    for key, bit, text in CATEGORIES:
        if not flags & bit:
            continue
        mode = modes[key]
        if mode == "ignore":
            continue
        msg = f"{text} encountered in {name}"
        if mode == "warn":
            warnings.warn(msg, RuntimeWarning, stacklevel=user_stacklevel())
        elif mode == "raise":
            raise FloatingPointError(msg)
        elif mode == "call":
            np.geterrcall()(text, flags)
        elif mode == "print":
            # NumPy writes with C's fprintf, below sys.stderr: do the same
            os.write(2, f"Warning: {msg}\n".encode())
        elif mode == "log":
            np.geterrcall().write(f"Warning: {msg}\n")


def watched(under: bool = True, modes=None) -> bool:
    """Whether any category a ufunc can raise is not 'ignore' right now (or in ``modes``)."""
    if modes is None:
        modes = error_modes()
    return (modes["divide"] != "ignore" or modes["over"] != "ignore"
            or modes["invalid"] != "ignore" or (under and modes["under"] != "ignore"))


def acted_on(flags, modes=None) -> bool:
    """Whether the error state (``modes``, else the current one) acts on any of ``flags``."""
    if not flags:
        return False
    modes = error_modes() if modes is None else modes
    return any(flags & bit and modes[key] != "ignore" for key, bit, _ in CATEGORIES)


def derive(ref, ins, out) -> int:
    """Flags NumPy would raise computing ``ref(*ins)`` when ``out`` came from a flagless backend.

    Divide-by-zero, overflow and invalid only ever produce inf or nan; underflow only
    results below the smallest normal number, or inputs below its square root (float32
    sin and cos of 1e-30 underflow squaring it). So NumPy is re-run on just those elements (usually none) to
    get its exact flags. ``ins`` holds the inputs, already broadcast against ``out``.
    """
    suspect = suspects(ins, out)
    if suspect is None:
        return 0
    return recorded(ref, *(np.broadcast_to(x, out.shape)[suspect] for x in ins))


# What a kernel that keeps no flags must do about them now (``need``): nothing (no category
# is watched), look for an inf or a NaN in its output, or leave the search to the front end
# (underflow is watched, and leaves no trace in the output).
NOTHING, LOOK, UNKNOWN = 0, 1, 2


def need(fpe: bool) -> int:
    """NOTHING, LOOK or UNKNOWN for a function that can raise flags (``fpe``) or not."""
    if not fpe:
        return NOTHING
    modes = error_modes()
    if not watched(True, modes):
        return NOTHING
    return UNKNOWN if underflow_matters(modes) else LOOK


def underflow_matters(modes) -> bool:
    """Whether an underflow must be found: watched itself, or reported with the others to
    an ``errstate(call=...)`` callback, which NumPy hands every flag raised."""
    return modes["under"] != "ignore" or "call" in modes.values()


def suspects(ins, out):
    """The mask of elements whose FP flags matter under the current error state, or None."""
    modes = error_modes()
    under = underflow_matters(modes)
    if not watched(under, modes):
        return None
    finite = np.isfinite(out)
    if not under and finite.all():
        return None  # the common case: one pass and no mask to build
    suspect = ~finite
    if under and out.dtype.kind in "fc":
        suspect |= np.abs(out) < np.finfo(out.dtype).tiny
        for x in ins:
            if x.dtype.kind in "fc":
                ax = np.abs(x)
                suspect |= (ax < np.sqrt(np.finfo(x.dtype).tiny)) & (ax != 0)
    return suspect if suspect.any() else None


# --- NumPy's messages recorded, to act on later --------------------------------------------
# Work split over threads runs under ``np.errstate(all="log", call=Log())``: each thread's
# messages are recorded in order, and the caller acts on them once the work is done, under
# its own error state, as NumPy would have (blockwise, foreach).

_CATEGORY = {text: bit for _, bit, text in CATEGORIES}


class Log:
    """An ``np.errstate(all="log")`` sink: NumPy's messages, in order, with the ufunc named."""

    __slots__ = ("lines",)

    def __init__(self):
        self.lines = []

    def write(self, line):
        self.lines.append(line)


def parse(line):
    """(ufunc name, flag bit) of a recorded ``Warning: <text> encountered in <name>`` line."""
    text, _, name = line.strip().partition("Warning: ")[2].partition(" encountered in ")
    return name, _CATEGORY.get(text, 0)


def replay(lines):
    """Act on recorded lines as NumPy would have, in order."""
    for line in lines:
        report(*parse(line))
