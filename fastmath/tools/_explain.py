"""``fastmath.explain(func, *args, **kwargs)``: which backend ``auto`` picks for a call, and the row why."""
from __future__ import annotations

from dataclasses import dataclass, field

from .._numpy import FLOATS as _FLOATS, np

from ..backends._lse import FAST_MAX
from ..dispatch import _calibration, _learn, _selection
from .. import _registry
from .._registry import BY_NAME



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
    # where auto's choice comes from: "learned here", "learned here in an earlier run",
    # "calibration run (path)", "guessed (...)", "learning now", the first with "learning
    # again now" (a revisit of a learned choice), or FASTMATH_AUTO=off
    how: str = ""
    learned: dict | None = None  # the cell's state (dispatch/_learn.describe), if any

    def __str__(self):
        ref = BY_NAME[self.function].ref.replace(":", ".")
        pick = f"the reference {ref} directly" if self.backend == "reference" else self.backend
        if self.backend == "reference" and self.function in _REPLAYED:
            # the front end runs the reference's own NumPy calls, without its input checks
            pick = f"{ref}'s own formula in this thread (its results, warnings and errors)"
        lines = [f"fastmath.{self.function} on {self.dtype}, {_elements(self.size)}: "
                 f"auto runs {pick}"]
        decided = self.learned is not None and self.learned["choice"] is not None
        if decided:
            guess = " > ".join(self.row[1]) or "reference" if self.row else "reference"
            lines.append(f"  why: measured on this machine (the table's guess: {guess})")
        elif self.row is None:
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
        if self.how:
            lines.append(f"  chosen: {self.how}")
        if self.learned and self.learned.get("medians"):
            times = ", ".join(f"{k} {_fmt(v)}" for k, v in
                              sorted(self.learned["medians"].items(), key=lambda kv: kv[1]))
            lines.append(f"  typical times (lower quartiles) of up to {self.learned['samples']} "
                         f"calls each (an arm slower than the reference stops early): {times}")
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


def _operands(spec, args, kwargs):
    """The call's array operands, the second None unless the function takes two (then
    the first again if not given), and its keyword arguments as the function binds them:
    arguments the function would refuse raise its TypeError here."""
    import inspect

    import fastmath

    if spec.kind == "binary" and len(args) == 1:
        args = (args[0], args[0])
    try:
        bound = inspect.signature(getattr(fastmath, spec.name)).bind(*args, **kwargs)
    except TypeError as e:
        raise TypeError(f"explain(): fastmath.{spec.name} takes no such call ({e})") from None
    values = list(bound.arguments.values())
    operands = [v if isinstance(v, np.ndarray) else np.asarray(v)
                for v in values[:2 if spec.kind == "binary" else 1]]
    return operands[0], operands[-1], bound.arguments


def _loop(spec, a, b, given):
    """(the dtype auto plans with, or None where the front end always calls the reference;
    the number of elements)."""
    dtype = given.get("dtype") if spec.kind in ("unary", "binary") else None
    types = (a.dtype, b.dtype) if spec.kind == "binary" else (a.dtype,)
    # dtype= as the front end resolves it: the loop's output dtype, NumPy's own rules
    kw = {} if dtype is None else {"signature": (None,) * len(types) + (np.dtype(dtype),)}
    if spec.kind == "binary":
        size = int(np.prod(np.broadcast_shapes(a.shape, b.shape)))
        return spec.reference().resolve_dtypes(types + (None,), **kw)[2], size
    if spec.kind == "unary":
        return spec.reference().resolve_dtypes(types + (None,), **kw)[0], a.size
    if spec.kind == "logsumexp":
        w = given.get("b")  # weights take part in the dtype, as in the front end
        loop = a.dtype if w is None else np.result_type(a.dtype, np.asarray(w).dtype)
        return (np.dtype(np.float64) if loop.kind in "biu" else loop), a.size
    # elementwise functions and softmax take float32 and float64 arrays, of one dimension
    # at least for the former; the reference everything else
    if a.dtype not in _FLOATS or (spec.kind == "elementwise" and a.ndim == 0):
        return None, a.size
    return a.dtype, a.size


def explain(func, /, *args, **kwargs) -> Explanation:
    spec = _spec(func)
    a, b, given = _operands(spec, args, kwargs)
    loop, size = _loop(spec, a, b, given)
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
    source = entry.source if entry is not None else "not measured"
    how = ("guessed (the built-in defaults, measured on another machine)"
           if source in ("defaults", "not measured") else f"calibration run ({source})")
    learned = None
    mode = _learn.state.mode
    if mode == "off":
        names, how = (), "FASTMATH_AUTO=off: the reference at every size"
    elif mode == "learn" and size >= _learn.LEARN_FROM and not (
            # logsumexp's compiled path for finite input answers up to FAST_MAX elements
            # in one thread, learning nothing; past it, and for softmax, the plan learns
            spec.kind == "logsumexp" and size <= FAST_MAX):
        learned = _learn.describe(spec.name, dtype, size)
        floor = _learn.floor(spec.name)
        if learned is None and size < floor and dtype in _learn.DTYPES:
            names, how = (), (f"NumPy/SciPy won every size class learned for "
                              f"{spec.name} up to {_elements(floor)}: calls below that "
                              "take it directly")
        elif learned is None:
            how = (f"not learned yet: {how} until this program's first calls of about "
                   f"{_elements(size)} ({dtype}) measure it" if dtype in _learn.DTYPES
                   else how)
        elif learned["state"] == "learning" and learned["choice"] is None:
            how = f"learning now, {how} meanwhile"
        else:
            choice = learned["choice"]
            names = () if choice == "reference" else (choice,) + (
                () if choice == "numpy" else ("numpy",))
            how = learned["source"] if learned["state"] != "learning" else (
                f"{learned['source']}, learning again now (a revisit: each arm runs a few "
                "calls, then the fastest runs on)")
    return Explanation(spec.name, dtype, int(size), names[0] if names else "reference",
                       names[1:], row, source, measured, at, _selection.current(),
                       rows=entry.rows if entry is not None else (), how=how,
                       learned=learned)
