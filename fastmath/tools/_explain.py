"""``fastmath.explain(func, x)``: which backend ``auto`` picks for a call, and the row why."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..dispatch import _calibration, _selection
from .. import _registry
from .._registry import BY_NAME

_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


@dataclass(frozen=True)
class Explanation:
    function: str
    dtype: str
    size: int
    backend: str  # what auto runs first: a backend name, or "reference"
    then: tuple  # the backends tried next if the first declines this input
    row: tuple | None  # (min_size, preference) from the table, None below its first row
    source: str  # "defaults", the calibration file's path, or "not measured"
    measured: dict = field(default_factory=dict)  # nearest grid size's times, seconds
    measured_at: int | None = None
    selected: str = "auto"  # the selection in force where explain() was called
    reason: str = ""  # why the front end hands such a call to the reference at any size
    rows: tuple = ()  # every row of the table for this function and dtype

    def __str__(self):
        ref = BY_NAME[self.function].ref.replace(":", ".")
        pick = f"the reference {ref} directly" if self.backend == "reference" else self.backend
        if self.backend == "reference" and self.function in _REPLAYED:
            # the front end runs the reference's own NumPy calls, without its input checks
            pick = f"{ref}'s own formula in this thread (its results, warnings and errors)"
        lines = [f"fastmath.{self.function} on {self.dtype}, {_elements(self.size)}: "
                 f"auto runs {pick}"]
        if self.row is None:
            if self.reason:
                why = self.reason
            elif self.source == "not measured":
                why = f"{self.dtype} is not in the table"
            elif self.rows:
                why = "below the table's first row"
            else:
                why = "the table sends every size to the reference"
            then = ("the front end replays the reference's formula" if self.function in _REPLAYED
                    else "the call goes straight to the reference")
            lines.append(f"  why: {why}; {then}")
        else:
            names = " > ".join(self.row[1]) or "reference"
            lines.append(f"  table row: from {_elements(self.row[0])}, {names}")
        if not self.reason:
            lines.append(f"  source: {self.source}")
        if self.measured:
            times = ", ".join(f"{k} {_fmt(v)}" for k, v in
                              sorted(self.measured.items(), key=lambda kv: kv[1]))
            lines.append(f"  measured at {_elements(self.measured_at)}: {times}")
        if self.then:
            lines.append(f"  if {self.backend} declines this input: {', then '.join(self.then)}")
        if self.selected != "auto":
            lines.append(f"  note: the selection in force here is {self.selected!r}, not auto")
        return "\n".join(lines)

    __repr__ = __str__


# reductions whose front end replays SciPy's formula for float ndarrays below the table
_REPLAYED = ("logsumexp", "softmax", "log_softmax")


def _elements(n):
    return f"{n} element" + ("" if n == 1 else "s")


def _fmt(t):
    return f"{t * 1e6:.2f} us" if t < 1e-3 else f"{t * 1e3:.2f} ms"


def _spec(func):
    import fastmath

    name = func if isinstance(func, str) else getattr(func, "__name__", None)
    try:
        spec = _registry.lookup(name) if isinstance(name, str) else None
    except KeyError:
        spec = None
    if spec is not None and (func is name or func is getattr(fastmath, spec.name)
                             or func is spec.reference()):
        return spec
    raise ValueError(f"explain() takes an accelerated function or its name; got {func!r}. "
                     f"Valid choices: {', '.join(BY_NAME)}")


def _loop(spec, a, b):
    """(the dtype auto plans with, or None where the front end always calls the reference;
    the number of elements)."""
    if spec.kind == "binary":
        size = int(np.prod(np.broadcast_shapes(a.shape, b.shape)))
        return spec.reference().resolve_dtypes((a.dtype, b.dtype, None))[2], size
    if spec.kind == "unary":
        return spec.reference().resolve_dtypes((a.dtype, None))[0], a.size
    if spec.kind == "logsumexp":
        return (np.dtype(np.float64) if a.dtype.kind in "biu" else a.dtype), a.size
    # elementwise functions and softmax take float32 and float64 arrays, of one dimension
    # at least for the former; the reference everything else
    if a.dtype not in _FLOATS or (spec.kind == "elementwise" and a.ndim == 0):
        return None, a.size
    return a.dtype, a.size


def explain(func, x, y=None) -> Explanation:
    spec = _spec(func)
    a = x if isinstance(x, np.ndarray) else np.asarray(x)
    b = a if y is None else y if isinstance(y, np.ndarray) else np.asarray(y)
    loop, size = _loop(spec, a, b)
    if loop is None:
        return Explanation(spec.name, a.dtype.name, int(size), "reference", (), None,
                           "not measured", selected=_selection.current(),
                           reason=f"fastmath.{spec.name} hands {a.dtype.name} "
                           f"{'scalars' if a.ndim == 0 else 'arrays'} to the reference")
    dtype = loop.name
    entry = _calibration.entry(spec.name, dtype)
    row = entry.row(size) if entry is not None else None
    chain = ()
    if row is not None:
        for min_size, c in _selection._build("auto", spec, dtype):
            if size >= min_size:
                chain = c
                break
    names = tuple(n for n, _ in chain)
    measured, at = {}, None
    if entry is not None:
        at, measured = entry.nearest(size)
    return Explanation(spec.name, dtype, int(size), names[0] if names else "reference",
                       names[1:], row, entry.source if entry is not None else "not measured",
                       measured, at, _selection.current(),
                       rows=entry.rows if entry is not None else ())
