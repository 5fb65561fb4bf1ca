"""``fastmath.explain(func, x)``: which backend ``auto`` picks for a call, and the row why."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from . import _calibration, _selection
from ._registry import BY_NAME


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

    def __str__(self):
        ref = BY_NAME[self.function].ref.replace(":", ".")
        pick = f"the reference {ref} directly" if self.backend == "reference" else self.backend
        lines = [f"fastmath.{self.function} on {self.dtype}, {self.size} elements: "
                 f"auto runs {pick}"]
        if self.row is None:
            why = ("below the table's first row" if self.source != "not measured"
                   else f"{self.dtype} is not in the table")
            lines.append(f"  why: {why}; the call goes straight to the reference")
        else:
            names = " > ".join(self.row[1]) or "reference"
            lines.append(f"  table row: from {self.row[0]} elements, {names}")
        lines.append(f"  source: {self.source}")
        if self.measured:
            times = ", ".join(f"{k} {_fmt(v)}" for k, v in
                              sorted(self.measured.items(), key=lambda kv: kv[1]))
            lines.append(f"  measured at {self.measured_at} elements: {times}")
        if self.then:
            lines.append(f"  if {self.backend} declines this input: {', then '.join(self.then)}")
        if self.selected != "auto":
            lines.append(f"  note: the selection in force here is {self.selected!r}, not auto")
        return "\n".join(lines)

    __repr__ = __str__


def _fmt(t):
    return f"{t * 1e6:.2f} us" if t < 1e-3 else f"{t * 1e3:.2f} ms"


def _spec(func):
    import fastmath

    name = func if isinstance(func, str) else getattr(func, "__name__", None)
    spec = BY_NAME.get(name)
    if spec is not None and (func is name or func is getattr(fastmath, name)
                             or func is spec.reference()):
        return spec
    raise ValueError(f"explain() takes an accelerated function or its name; got {func!r}. "
                     f"Valid choices: {', '.join(BY_NAME)}")


def _dtype(spec, a):
    if spec.kind == "logsumexp":
        return np.dtype(np.float64) if a.dtype.kind in "biu" else a.dtype
    return spec.reference().resolve_dtypes((a.dtype, None))[0]


def explain(func, x) -> Explanation:
    spec = _spec(func)
    a = x if isinstance(x, np.ndarray) else np.asarray(x)
    dtype = _dtype(spec, a).name
    entry = _calibration.entry(spec.name, dtype)
    row = entry.row(a.size) if entry is not None else None
    chain = ()
    if row is not None:
        for min_size, c in _selection._build("auto", spec, dtype):
            if a.size >= min_size:
                chain = c
                break
    names = tuple(n for n, _ in chain)
    measured, at = {}, None
    if entry is not None:
        at, measured = entry.nearest(a.size)
    return Explanation(spec.name, dtype, int(a.size), names[0] if names else "reference",
                       names[1:], row, entry.source if entry is not None else "not measured",
                       measured, at, _selection.current())
