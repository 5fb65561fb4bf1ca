"""The cost table behind ``auto``: measured times, and the crossovers derived from them.

For each function and dtype the table holds the time per call of the NumPy/SciPy
reference and of every backend (forced through fastmath) at a grid of sizes. From it come
rows of (minimum size in elements, backends in order of preference): the last row whose
minimum the call's size reaches decides, and ``_selection`` resolves each row to kernels
once, so choosing at call time is a dict lookup and a short scan. Below the first row,
and in any row where the reference itself was fastest, ``auto`` calls NumPy/SciPy
directly with no machinery in between (a thread handoff costs about 50 us and a torch
round trip 2-3 us, more than the whole call on small arrays).

The defaults ship in ``calibration-defaults.json``, measured on the reference machine; an
entry there may give its rows directly instead of times (crossovers measured by hand), and
its dtype may be "*" (every dtype without an entry of its own).

Rows are about host (NumPy) data. A row may name ``torch-cuda`` only where the streaming
pipeline was measured faster than the best CPU backend for that function, dtype and size
(bench/gpu_stream.py prints such rows in this format); no default row does, so without a
measurement ``auto`` keeps host data on the CPU. Data already on a device is computed
there whatever the rows say (fastmath/frontends/_native.py).
``python -m fastmath calibrate`` measures this machine and writes the same format to
FASTMATH_CALIBRATION or ``$XDG_CACHE_HOME/fastmath/calibration.json`` (``~/.cache``
without XDG), under this Python environment's key (sys.prefix), beside any other
environments' tables, each recording the CPU model, core count, threads and library
versions it was measured with. The file is read at the first call, not at import; one that
is not a regular file, too large, corrupt, malformed (non-finite numbers included) or whose
table for this environment was measured on another machine or with other versions is
ignored with one warning, and the defaults are used. Other environments' tables are
ignored silently.
"""
from __future__ import annotations

import json
import math
import os
import stat
import sys
import threading
import warnings
from pathlib import Path

from . import _config, _fpe

FORMAT = 1
MAX_BYTES = 8 << 20  # a full table is about 50 KB per environment
DEFAULTS_PATH = Path(__file__).with_name("calibration-defaults.json")
# The libraries whose kernels a table times: another version of one may move a crossover.
LIBRARIES = ("numpy", "scipy", "torch", "numexpr", "mkl")
# The leader at a grid size keeps its place unless another beats it by this much: closer
# than this is within the noise of a calibration run on a busy machine, and flapping
# between backends (or leaving the reference, which has no overhead) gains nothing.
MARGIN = 0.10

_table = None  # (name, dtype) -> Entry, built at first use
_lock = threading.Lock()


class Entry:
    """One function on one dtype: the measured grid, its rows, and where it came from."""

    __slots__ = ("sizes", "times", "rows", "source")

    def __init__(self, sizes, times, source, rows=None):
        self.sizes = tuple(sizes)
        self.times = times
        self.source = source
        self.rows = derive(self.sizes, times) if rows is None else rows

    def row(self, size):
        """The deciding row for ``size``: (min_size, names), or None below the first."""
        for r in reversed(self.rows):
            if size >= r[0]:
                return r
        return None

    def nearest(self, size):
        """The grid size closest to ``size`` (in ratio) and the times measured there."""
        if not self.sizes:
            return None, {}
        i = min(range(len(self.sizes)), key=lambda k: abs(_log(self.sizes[k]) - _log(size)))
        return self.sizes[i], {b: t[i] for b, t in self.times.items()}


def _log(n):
    return math.log(max(n, 1))


def derive(sizes, times):
    """Rows of (min_size, backends by preference) from times measured at ``sizes``.

    ``times`` maps "reference" and each backend to its seconds per call at each size. At
    each grid size the backends are ranked by time; the leader so far (the reference, to
    begin with) stays unless the fastest beats it by MARGIN. An empty preference means
    "call the reference". Where the leader changes between two grid sizes, the row starts
    where the straight lines through the two leaders' times cross (time per call is close
    to linear in size).
    """
    rows = []
    ref = times["reference"]
    lead = ()
    for i, n in enumerate(sizes):
        ranked = tuple(b for _, b in sorted((t[i], b) for b, t in times.items()
                                            if b != "reference"))
        held = (times[lead[0]] if lead else ref)[i]
        best = min([ref[i]] + [times[b][i] for b in ranked])
        if best * (1 + MARGIN) >= held:
            continue
        names = () if best == ref[i] else ranked
        start = n
        if i:
            old = times[lead[0]] if lead else ref
            new = times[names[0]] if names else ref
            before, after = old[i - 1] - new[i - 1], old[i] - new[i]
            if before < 0 < after:
                start = sizes[i - 1] + (n - sizes[i - 1]) * (-before) / (after - before)
        rows.append((max(1, int(start)), names))
        lead = names
    return tuple(rows)


def machine() -> dict:
    """What a calibration is only valid for: this CPU, its cores, threads and libraries."""
    import importlib.metadata

    from .._version import VERSION as __version__

    versions = {"fastmath": __version__}
    for lib in LIBRARIES:
        try:
            versions[lib] = importlib.metadata.version(lib)
        except importlib.metadata.PackageNotFoundError:
            versions[lib] = None
    return {"cpu": cpu_model(), "cores": os.cpu_count(),
            "threads": _config.get().num_threads, "versions": versions}


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.partition(":")[2].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or platform.machine()


def user_path() -> Path:
    """Where ``calibrate`` writes and ``auto`` reads this machine's table."""
    explicit = _config.get().calibration
    if explicit:
        return Path(explicit)
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(cache) / "fastmath" / "calibration.json"


def environment() -> str:
    """This Python environment's key in a calibration file: several virtual environments
    (each with its own library versions) may share one file without fighting over it."""
    return sys.prefix


def load(path) -> dict:
    """The parsed file at ``path``: only a regular file, at most MAX_BYTES, finite
    numbers only. OSError or ValueError otherwise; never blocks (a FIFO, a device)."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ValueError("it is not a regular file")
        raw = f.read(MAX_BYTES + 1)
    if len(raw) > MAX_BYTES:
        raise ValueError(f"it is larger than {MAX_BYTES} bytes")
    try:
        return json.loads(raw.decode("utf-8"), parse_constant=_not_finite)
    except RecursionError:  # json's decoder recurses once per level of nesting
        raise ValueError("it is nested deeper than Python's recursion limit") from None


def _not_finite(word):
    raise ValueError(f"it holds {word}, not a finite number")


_OTHERS = object()  # a file of other environments' tables only


def _mine(data):
    """The part of a parsed file measured in this environment: a file of several
    environments holds one such part per key; _OTHERS if none is this one's."""
    if isinstance(data, dict) and isinstance(data.get("environments"), dict):
        return data["environments"].get(environment(), _OTHERS)
    return data


def _entries(data, source):
    """(name, dtype) -> Entry from a parsed file; ValueError if it is malformed."""
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ValueError(f"not a format-{FORMAT} calibration file")
    out = {}
    for name, per_dtype in data["table"].items():
        for dtype, cell in per_dtype.items():
            if "times" not in cell:
                out[name, dtype] = Entry((), {}, source, _rows(cell["rows"], name, dtype))
                continue
            sizes, times = cell["sizes"], cell["times"]
            if ("reference" not in times or not sizes or any(
                    len(t) != len(sizes) or not all(_positive(v) for v in t)
                    for t in times.values())
                    or not all(_positive(n) for n in sizes) or list(sizes) != sorted(sizes)):
                raise ValueError(f"the {name} {dtype} entry is malformed")
            out[name, dtype] = Entry(sizes, times, source)
    return out


def _positive(v) -> bool:
    # 1e999 parses as inf without ever spelling "Infinity"
    return isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v < math.inf


def _rows(raw, name, dtype):
    """Rows given as such ([[min_size, [backend, ...]], ...]) rather than as times."""
    if type(raw) is not list or not all(_row(r) for r in raw):
        raise ValueError(f"the {name} {dtype} rows are malformed")
    rows = tuple((n, tuple(names)) for n, names in raw)
    if [n for n, _ in rows] != sorted({n for n, _ in rows}):
        raise ValueError(f"the {name} {dtype} rows are out of order")
    return rows


def _row(r) -> bool:
    # exact types: int("10"), int(True) or the letters of a string would pass for a row
    return (type(r) is list and len(r) == 2 and type(r[0]) is int and r[0] >= 1
            and type(r[1]) is list and all(type(b) is str for b in r[1]))


def _read_user(path: Path):
    """This machine's entries from ``path``, or None after one warning if unusable."""
    try:
        data = _mine(load(path))
        if data is _OTHERS:  # other environments' measurements only: not this one's business
            return None
        entries = _entries(data, str(path))
    except FileNotFoundError:
        if _config.get().calibration:
            _warn(path, "it does not exist")
        return None
    except (OSError, ValueError, KeyError, TypeError, AttributeError, OverflowError) as e:
        _warn(path, f"it cannot be read ({e})")
        return None
    here = machine()
    if data.get("machine") != here:
        theirs = data.get("machine")
        theirs = theirs if isinstance(theirs, dict) else {}
        diff = [k for k in here if theirs.get(k) != here[k]]
        _warn(path, f"it was measured for another machine or other library versions "
                    f"(differs in: {', '.join(diff) or 'machine key'})")
        return None
    return entries


def _warn(path, why):
    warnings.warn(f"fastmath: ignoring the calibration file {path}: {why}; auto uses the "
                  "built-in defaults. Run `python -m fastmath calibrate` to measure this "
                  "machine.", _config.ConfigWarning, stacklevel=_fpe.user_stacklevel())


def _defaults():
    data = json.loads(DEFAULTS_PATH.read_text())
    # written by `calibrate --output`: the one environment measured on the reference machine
    if isinstance(data.get("environments"), dict) and len(data["environments"]) == 1:
        data, = data["environments"].values()
    return data


def table() -> dict:
    """(name, dtype) -> Entry: the defaults, overridden by this machine's file if usable."""
    global _table
    if _table is None:
        with _lock:  # threads' first calls at once: one read, one warning
            if _table is None:
                t = _entries(_defaults(), "defaults")
                t.update(_read_user(user_path()) or {})
                _table = t
    return _table


def entry(name: str, dtype: str):
    """The entry for ``name`` on ``dtype``, else its entry for every dtype ("*"), if any."""
    t = table()
    return t.get((name, dtype)) or t.get((name, "*"))


def rows(name: str, dtype: str):
    """The rows for ``name`` on ``dtype``; none (so: the reference) if never measured."""
    e = entry(name, dtype)
    return e.rows if e is not None else ()


def smallest(name: str) -> int:
    """The size below which ``auto`` never leaves the reference, for any dtype."""
    sizes = [e.rows[0][0] for (n, _), e in table().items() if n == name and e.rows]
    return min(sizes) if sizes else 1 << 62


def _reset():
    global _table
    _table = None


_config.on_reload(_reset)
