"""``python -m fastmath calibrate``: measure this machine's cost table for ``auto``.

Times the NumPy/SciPy reference and every available backend that has a kernel for the
function (forced through fastmath, as ``auto`` would run it) for each function and dtype
at a grid of sizes, and writes the table (see _calibration.py) with this machine's key.
``auto`` reads it at the next process's first call.
"""
from __future__ import annotations

import datetime
import json
import os
import sys
import time
from pathlib import Path

from .._numpy import np

from . import _args, _bench
from ..dispatch import _calibration

SIZES = tuple(4 ** k for k in range(3, 12))  # 64 to 4M elements, a factor 4 apart
QUICK_SIZES = tuple(4 ** k for k in range(3, 12, 2))
DTYPES = ("float32", "float64")
TARGET = 0.003  # seconds per timed sample; medians of several rounds smooth the rest


def add_arguments(p) -> None:
    p.add_argument("--functions", default=",".join(_bench.FUNCTIONS),
                   help="comma-separated functions (default: all)")
    p.add_argument("--dtypes", default=",".join(DTYPES), help="comma-separated dtypes")
    p.add_argument("--sizes", default=None,
                   help="comma-separated element counts (default: 64 to 4M, a factor 4 apart)")
    p.add_argument("--rounds", type=_args.positive_int, default=5,
                   help="timed rounds per cell; the median is kept (default: 5)")
    p.add_argument("--quick", action="store_true", help="fewer sizes")
    p.add_argument("--output", metavar="FILE", default=None,
                   help="where to write (default: FASTMATH_CALIBRATION, else the cache dir)")


class Progress:
    """A one-line bar on a terminal; one line per step elsewhere (logs, CI)."""

    def __init__(self, total, stream=None, width=30):
        self.total, self.done, self.width = total, 0, width
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty()
        self.start = time.perf_counter()

    def step(self, label):
        self.done += 1
        filled = self.width * self.done // self.total
        bar = "#" * filled + "-" * (self.width - filled)
        line = (f"calibrating [{bar}] {self.done}/{self.total} {label} "
                f"({time.perf_counter() - self.start:.0f}s)")
        self.stream.write(("\r" + line.ljust(79)) if self.tty else line + "\n")
        if self.tty and self.done == self.total:
            self.stream.write("\n")
        self.stream.flush()


def measure(functions, dtypes, sizes, backends, rounds, progress=None) -> dict:
    """{name: {dtype: {"sizes": [...], "times": {column: [seconds per call]},
    "confidence": [...]}}}: medians of interleaved rounds, and at each size the share of
    rounds the chosen column beat the fastest other (see :func:`confidence`)."""
    rng = np.random.default_rng(0)
    table: dict = {}
    with np.errstate(all="ignore"):
        for name in functions:
            # a backend with no kernel of its own would time numpy's again: noise, no news
            columns = ["reference"] + [b for b in backends if _bench.runs(name, b)]
            for dtype in dtypes:
                times = {c: [] for c in columns}
                rounds_at = []
                for n in sizes:
                    arg = _bench._input(name, n, dtype, rng)
                    samples = _bench.timed_rounds(name, arg, {}, columns, rounds, TARGET)
                    for col, v in samples.items():
                        times[col].append(float(np.median(v)))
                    rounds_at.append(samples)
                    if progress is not None:
                        progress.step(f"{name} {dtype} n={n}")
                cell = {"sizes": list(sizes), "times": times}
                cell["confidence"] = confidence(cell, rounds_at)
                table.setdefault(name, {})[dtype] = cell
    return table


def confidence(cell, rounds_at) -> list:
    """At each grid size, [the column ``auto`` runs first there, the fastest other column,
    their ratio of medians, the share of rounds the first beat the other]. Where the two
    are within the table's margin (10%) either choice costs little; beyond it a share
    well below 1 says the rounds disagreed (a busy machine: run it again, or with more
    ``--rounds``)."""
    rows = _calibration.derive(cell["sizes"], cell["times"])
    out = []
    for i, n in enumerate(cell["sizes"]):
        names = next((b for m, b in reversed(rows) if n >= m), ())
        first = names[0] if names else "reference"
        times = {c: t[i] for c, t in cell["times"].items()}
        other = min((c for c in times if c != first), key=times.get, default=None)
        if other is None:
            out.append([first, None, 1.0, 1.0])
            continue
        won = [a < b for a, b in zip(rounds_at[i][first], rounds_at[i][other])]
        out.append([first, other, times[other] / times[first], sum(won) / max(len(won), 1)])
    return out


def calibrate(functions=_bench.FUNCTIONS, dtypes=DTYPES, sizes=SIZES, rounds=5, path=None,
              stream=None):
    """Measure, write the file (atomically), make this process use it; (path, data)."""
    import fastmath

    from ..dispatch import _config

    path = Path(path) if path else _calibration.user_path()
    tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
    _writable(path, tmp)  # minutes of measuring are not lost to a path that cannot be written
    backends = [b for b in fastmath.available_backends() if b != "auto"]
    progress = Progress(len(functions) * len(dtypes) * len(sizes), stream)
    table = measure(functions, dtypes, sizes, backends, rounds, progress)
    data = {"format": _calibration.FORMAT, "machine": _calibration.machine(),
            "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "rounds": rounds, "table": table}
    whole = _others(path)
    whole["environments"][_calibration.environment()] = data
    tmp.write_text(json.dumps(whole, indent=1) + "\n")
    os.replace(tmp, path)
    _config.reload()  # drop the cached table and plans
    return path, data


def _writable(path, tmp):
    """Raise OSError, saying what to do, unless a file can be written beside ``path``."""
    try:
        if path.is_dir():
            raise IsADirectoryError(21, "it is a directory", str(path))
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "x"):
            pass
        tmp.unlink()
    except OSError as e:
        raise type(e)(e.errno, f"cannot write the calibration file {path} "
                               f"({e.strerror or e}); choose another path with --output or "
                               "FASTMATH_CALIBRATION") from e


def _others(path):
    """The file at ``path`` as a table of environments, keeping the others' measurements
    (a file from before environments were kept, or an unusable one, starts afresh)."""
    try:
        old = _calibration.load(path)
    except (OSError, ValueError):
        old = None
    if (isinstance(old, dict) and old.get("format") == _calibration.FORMAT
            and isinstance(old.get("environments"), dict)):
        return old
    return {"format": _calibration.FORMAT, "environments": {}}


def main(args) -> int:
    """Values were checked by the command line (fastmath/tools/cli.py): a bad one never gets here."""
    functions = _args.functions(_bench.FUNCTIONS)(args.functions)
    dtypes = [d for d in args.dtypes.split(",") if d]
    sizes = (_args.sizes(args.sizes) if args.sizes else QUICK_SIZES if args.quick else SIZES)
    rounds = args.rounds  # --quick: fewer sizes, as many rounds (3 made noisy tables)
    path = Path(args.output) if args.output else _calibration.user_path()
    try:  # an unwritable destination is found before minutes of measuring, not after
        path, data = calibrate(functions, dtypes, sizes, rounds, path)
    except OSError as e:
        print(f"fastmath calibrate: error: {e}", file=sys.stderr)
        return 2
    print(f"wrote {path}")
    for name in functions:
        for dtype in dtypes:
            cell = data["table"][name][dtype]
            rows = ", ".join(f">={n}: {'/'.join(b) or 'reference'}"
                             for n, b in _calibration.derive(cell["sizes"], cell["times"]))
            print(f"  {name:<10}{dtype:<8}{rows or 'reference at every size'}"
                  f"  [{_confidence_line(cell)}]")
    print("confidence: at the sizes where the choice beat the next column by more than "
          f"{_calibration.MARGIN:.0%}, the fewest of the rounds it won (1.00: all of them)")
    return 0


def _confidence_line(cell) -> str:
    clear = [(share, n) for (first, other, ratio, share), n
             in zip(cell["confidence"], cell["sizes"]) if ratio > 1 + _calibration.MARGIN]
    if not clear:
        return "every choice within the margin"
    share, n = min(clear)
    return f"confidence {share:.2f}" + (f" (n={n})" if share < 1 else "")
