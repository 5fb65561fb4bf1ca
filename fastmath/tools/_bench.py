"""Benchmark runner behind ``fastmath bench`` and bench/run.py.

For each function, dtype and size it times the NumPy/SciPy reference, each available
backend that has a kernel for it (forced through fastmath), fastmath's default (``auto``)
and copying the array (the memory-bandwidth floor). The columns run in interleaved rounds,
so a neighbour that slows one round slows every column of it alike, and every comparison is
made round by round: auto's time over the fastest column (the reference included) in the
same round. The median of those per-round figures is printed with their spread.

Each cell is judged against the acceptance bound (from 10^4 elements auto within 1.15x of
the fastest, below that within the reference's time + 0.5 us) only when the evidence is
clear: ``yes`` when the median meets the bound, ``NO`` when every round misses it, and
``noisy`` when the rounds disagree, which on a shared machine is noise, not a verdict.
The load average is printed before and after, and a plain summary ends the run.

Before a cell is timed, auto is called on it until it has learned its choice there
(:func:`settle`): its first calls of a cell try each backend once or twice, and at 10^7
elements on a CPU where one backend is 6-10x slower (MKL's log1p on an AMD EPYC: 39 ms
a call against NumPy's loops on the runtime at 6.7 ms) those calls filled the timed
rounds, and the cell read as a miss where auto then runs the fastest. The summary says
how many calls and seconds that learning took: a program pays it once (what auto learns
is kept for the next run).
"""
from __future__ import annotations

import json
import os
import time

from .._numpy import np

from . import _args, _peers

FUNCTIONS = ("exp", "log", "log1p", "expm1", "erf", "logsumexp")
SIZES = (10, 1000, 10**4, 10**5, 10**6, 10**7)
QUICK_SIZES = (10, 1000, 10**5, 10**7)
DTYPES = ("float64", "float32")
LARGE = 10**4  # from here auto is held to a ratio of the fastest, below to an overhead
MAX_RATIO = 1.15
MAX_OVERHEAD = 0.5e-6
TARGET = 0.02  # seconds per timed sample: enough calls that the clock's resolution is noise
SETTLE_CALLS, SETTLE_SECONDS = 60, 5.0  # auto's learning of a cell before it is timed, at most
DEFAULT_PLOT = "fastmath-bench.png"
PLOT_HINT = "pip install matplotlib"


def add_arguments(p) -> None:
    """The options of ``fastmath bench`` and bench/run.py (one argument per call, so that
    further options are a line each)."""
    p.add_argument("--functions", default=",".join(FUNCTIONS),
                   help="comma-separated functions (default: all)")
    p.add_argument("--dtypes", default=",".join(DTYPES), help="comma-separated dtypes")
    p.add_argument("--sizes", default=None,
                   help="comma-separated element counts (default: 10 to 10^7)")
    p.add_argument("--backends", default=None,
                   help="comma-separated backends to force (default: every available one)")
    p.add_argument("--quick", action="store_true", help="fewer sizes and repeats (~2 minutes)")
    p.add_argument("--rounds", type=_args.positive_int, default=None,
                   help="interleaved timing rounds per cell (default: 5 with --quick, else 7)")
    p.add_argument("--lse-shape", default="3000x3000",
                   help="shape of the 2-D logsumexp case timed in addition to 1-D sizes")
    p.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    p.add_argument("--plot", metavar="FILE.png", default=None,
                   help=f"where to draw time per element against size (default: {DEFAULT_PLOT} "
                        f"when matplotlib is installed: {PLOT_HINT})")
    p.add_argument("--no-plot", action="store_true", help="draw no plot")
    p.add_argument("--peers", action="store_true",
                   help="time fastmath beside numexpr, torch, mkl_umath, numba and jax, where "
                        "installed, on the peers grid (fastmath/tools/_peers.py)")
    p.add_argument("--learn", action="store_true",
                   help="with --peers: the grid auto learns, run twice in one process with "
                        "no calibration file (warm-up pass, then timed pass; "
                        "fastmath/tools/_warm.py)")


def _input(name, n, dtype, rng):
    from .._registry import BY_NAME

    return BY_NAME[name].sample(n, dtype, rng)[0]


def _reference(name):
    from .._registry import BY_NAME

    return BY_NAME[name].reference()


def runs(name, backend) -> bool:
    """Whether ``backend`` has its own kernel for ``name`` (forced, it would run numpy's)."""
    from .. import backends
    from .._registry import BY_NAME

    return backend == "numpy" or backends.get(backend).kernel(BY_NAME[name]) is not None


def _timer(fn, arg, kwargs, target):
    reps = [1]

    def once():
        n = reps[0]
        t = time.perf_counter()
        for _ in range(n):
            fn(arg, **kwargs)
        per = (time.perf_counter() - t) / n
        reps[0] = max(1, min(100_000, int(target / max(per, 1e-8))))
        return per
    return once


def measure(name, arg, kwargs, columns, rounds, target=TARGET):
    """Median time per call of each column over interleaved rounds (see :func:`timed_rounds`)."""
    return {c: float(np.median(v))
            for c, v in timed_rounds(name, arg, kwargs, columns, rounds, target).items()}


def timed_rounds(name, arg, kwargs, columns, rounds, target=TARGET):
    """Time per call of each column in each of ``rounds`` interleaved rounds.

    A column is "reference" (NumPy/SciPy called directly), "copy" (copying the array:
    the memory-bandwidth floor), or a selection ("auto" or a backend) forced through
    fastmath. Returns column -> list of per-round times (seconds).

    A selection's timed batch follows an untimed one, so that it is timed as a program's
    calls run one after another: after the other columns' batches its threads have
    parked, and waking they now and then land on the caller's CPU and stay there a while
    (on a 2-vCPU VM torch's erf of 16384 float64 elements took 300 us a call so, against
    28 us, until the scheduler moved them, within 3 ms of calls in 39 batches of 40;
    fastmath's own workers move off at once). Without it two ``calibrate --quick`` runs
    ranked torch-cpu and mkl apart by 1.3-10x in three cells.
    """
    import fastmath

    timers = {}
    for col in columns:
        if col == "copy":
            dst = np.empty_like(arg)
            fn, scope = (lambda a, dst=dst, **_: np.copyto(dst, a)), None
        elif col == "reference":
            fn, scope = _reference(name), None
        else:
            fn, scope = getattr(fastmath, name), col
        timers[col] = (_timer(fn, arg, kwargs, target), scope)
    samples = {c: [] for c in columns}
    for r in range(rounds + 2):
        for col, (once, scope) in timers.items():
            if scope is None:
                t = once()
            else:
                with fastmath.backend(scope):
                    once()  # untimed: its threads wake, and the scheduler places them
                    t = once()
                if leaves_threads(scope):
                    _peers.quiesce()
            if r > 1:  # the first rounds warm caches, pools, lazy imports and size the reps
                samples[col].append(t)
    return samples


def settle(name, arg, kwargs):
    """Call auto on ``arg`` until the cell of the call has learned its choice (at most
    SETTLE_CALLS calls or SETTLE_SECONDS); ``(calls, seconds)``, (0, 0.0) where the cell was
    learned already or is not one auto learns (below its smallest size, a reduction's own
    plan, FASTMATH_AUTO=fixed or off)."""
    import fastmath
    from ..dispatch import _learn

    fn = getattr(fastmath, name)
    dtype, size = str(arg.dtype), int(arg.size)
    if size < _learn.LEARN_FROM:
        return 0, 0.0
    t0 = time.perf_counter()
    calls = 0
    while calls < SETTLE_CALLS and time.perf_counter() - t0 < SETTLE_SECONDS:
        cell = _learn.describe(name, dtype, size)
        if cell is None and calls >= 2:
            return 0, 0.0  # its calls made no cell: not one auto learns
        if cell is not None and cell["state"] != "learning":
            break
        with fastmath.backend("auto"):
            fn(arg, **kwargs)
        calls += 1
    return (calls, time.perf_counter() - t0) if calls and cell is not None else (0, 0.0)


def leaves_threads(selection) -> bool:
    """Whether a column forced to ``selection`` may run on a library's own threads, which
    can keep computing after the call: the next column then waits for them to stop.

    torch's OpenMP threads wait for the next call actively, for milliseconds, when torch
    was loaded before fastmath (fastmath asks for passive waiting only when it loads torch
    itself): the column after torch's then ran with one core held by them, and fastmath's
    pool, splitting over two threads, was timed on one.
    """
    from .. import backends

    return selection == "auto" or getattr(backends.get(selection), "own_threads", None) is not None


def judge(samples, size, fastest):
    """The verdict on one cell from its per-round samples: ``(verdict, figure, spread)``.

    From LARGE elements the figure is auto's time over ``fastest``'s, round by round, held
    to MAX_RATIO; below, auto's time minus the reference's, held to MAX_OVERHEAD. The
    verdict is "yes" when the median meets the bound, "NO" only when every round misses it
    (the difference is larger than the noise measured between rounds), else "noisy".
    ``spread`` is half the range of the per-round figures.
    """
    auto = np.asarray(samples["auto"])
    if size >= LARGE:
        per_round, bound = auto / np.asarray(samples[fastest]), MAX_RATIO
    else:
        per_round, bound = auto - np.asarray(samples["reference"]), MAX_OVERHEAD
    figure = float(np.median(per_round))
    spread = float(per_round.max() - per_round.min()) / 2
    verdict = "yes" if figure <= bound else "NO" if per_round.min() > bound else "noisy"
    return verdict, figure, spread


def speedup(samples):
    """NumPy/SciPy's time over auto's, round by round: ``(median, low, high, word)``, the
    word saying "faster", "slower" or "same" only when every round agrees, else "noisy"."""
    s = np.asarray(samples["reference"]) / np.asarray(samples["auto"])
    lo, hi = float(s.min()), float(s.max())
    word = ("faster" if lo > 1.1 else "slower" if hi < 0.9
            else "same" if lo >= 0.9 and hi <= 1.1 else "noisy")
    return float(np.median(s)), lo, hi, word


def load():
    """The 1-minute load average (None where the OS has none)."""
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return None


def _load_words(before, after) -> str:
    cores = os.cpu_count() or 1
    if before is None:
        return f"load average unknown, {cores} cores"
    busy = max(before, after or 0) > 0.5 * cores
    return (f"load average {before:.2f} at the start, {after:.2f} at the end, on {cores} cores"
            + (": busy, so figures are noisier than on a quiet machine" if busy else ": quiet"))


def _fmt(t):
    return f"{t * 1e6:9.1f}us" if t < 1e-3 else f"{t * 1e3:9.2f}ms"


def _fmt_figure(size, figure, spread):
    if size >= LARGE:
        return f"{figure:6.2f}x ±{spread / figure * 100 if figure else 0:3.0f}%"
    return f"{figure * 1e6:+5.2f}us ±{spread * 1e6:4.2f}"


def run(functions, dtypes, sizes, backends, rounds, lse_shape=None, out=print, target=TARGET):
    import fastmath

    rng = np.random.default_rng(0)
    header = ["reference"] + list(backends) + ["auto", "copy"]
    rows = []
    out(f"{'function':<10}{'dtype':<8}{'size':>14}  " + "".join(f"{c:>11}" for c in header)
        + f"  {'fastest':>10} {'auto ran':>10} {'auto vs bound':>16}  ok")
    cases = [(f, d, (n,)) for f in functions for d in dtypes for n in sizes]
    if lse_shape and "logsumexp" in functions:
        cases += [("logsumexp", d, lse_shape) for d in dtypes]
    with np.errstate(all="ignore"):
        for name, dtype, shape in cases:
            size = int(np.prod(shape))
            arg = _input(name, size, dtype, rng).reshape(shape)
            kw_list = [{}]
            if name == "logsumexp" and len(shape) > 1:
                kw_list = [{"axis": None}, {"axis": 0}, {"axis": 1}]
            own = [b for b in backends if runs(name, b)]
            columns = ["reference"] + own + ["auto", "copy"]
            for kwargs in kw_list:
                learned = settle(name, arg, kwargs)
                samples = timed_rounds(name, arg, kwargs, columns, rounds, target)
                times = {c: float(np.median(v)) for c, v in samples.items()}
                best = min(["reference"] + own, key=times.__getitem__)
                chose = fastmath.explain(name, arg).backend
                verdict, figure, spread = judge(samples, size, best)
                fast = speedup(samples)
                label = "x".join(map(str, shape)) + (f" ax={kwargs['axis']}" if kwargs else "")
                out(f"{name:<10}{dtype:<8}{label:>14}  "
                    + "".join(f"{_fmt(times[c]) if c in times else '-':>11}" for c in header)
                    + f"  {best:>10} {chose:>10} {_fmt_figure(size, figure, spread):>16}  "
                    + verdict)
                rows.append({"function": name, "dtype": dtype, "shape": list(shape),
                             "label": label, "kwargs": kwargs, "times": times,
                             "samples": samples, "fastest": best, "auto_chose": chose,
                             "auto_over_best": times["auto"] / times[best],
                             "speedup": fast[0], "speedup_range": list(fast[1:3]),
                             "speedup_word": fast[3],
                             "auto_overhead_s": times["auto"] - times["reference"],
                             "verdict": verdict, "figure": figure, "spread": spread,
                             "auto_learning": {"calls": learned[0], "seconds": learned[1]},
                             "within_bound": {"yes": True, "NO": False}.get(verdict)})
    return {"info": fastmath.info(), "backends": list(backends), "rows": rows}


def _size_words(n):
    return f"10^{len(str(n)) - 1}" if n >= 10**4 and str(n).strip("0") == "1" else str(n)


def summary(result, plot_note, load_before, load_after) -> str:
    """A few plain lines: what is faster here and by how much, what was too noisy to tell,
    whether auto met its bound, and where the plot went."""
    rows = result["rows"]
    lines = [f"Summary ({_load_words(load_before, load_after)})."]
    lines += _large_lines(rows)
    small = [r for r in rows if int(np.prod(r["shape"])) < LARGE]
    wrapped = [r["figure"] * 1e6 for r in small if r["auto_chose"] == "reference"]
    if wrapped:
        lines.append(f"Below {_size_words(LARGE)} elements auto runs NumPy/SciPy's own code; "
                     f"the call through fastmath added {np.median(wrapped):.2f} us (median of "
                     f"{len(wrapped)} cells).")
    lines.append(_bound_line(rows))
    learning = [r["auto_learning"] for r in rows if r.get("auto_learning", {}).get("calls")]
    if learning:
        cells = f"{len(learning)} cell" + ("s" if len(learning) > 1 else "")
        lines.append(f"Before timing, auto learned its choice in {cells} on its "
                     f"first calls there: {sum(c['calls'] for c in learning)} calls, "
                     f"{sum(c['seconds'] for c in learning):.1f} s in all (a program pays "
                     "that once: what auto learns is kept for the next run).")
    lines.append(plot_note)
    return "\n".join(lines)


_TITLES = {"faster": "faster in every round", "same": "about the same (within 10%)",
           "slower": "slower in every round",
           "noisy": "too noisy to tell (the rounds disagreed)"}


def _large_lines(rows):
    """The speedups at the largest 1-D size (and of 2-D logsumexp), grouped by verdict."""
    flat = [r for r in rows if len(r["shape"]) == 1]
    biggest = max((r["shape"][0] for r in flat), default=0)
    big = [r for r in rows if (len(r["shape"]) > 1 or r["shape"][0] == biggest)
           and int(np.prod(r["shape"])) >= LARGE]
    if not big:
        return []
    two_d = any(len(r["shape"]) > 1 for r in big)
    lines = [f"At {_size_words(biggest)} elements"
             + (" (and logsumexp on the 2-D array)" if two_d else "")
             + ", fastmath's default against calling NumPy/SciPy directly:"]
    for word, title in _TITLES.items():
        members = [r for r in big if r["speedup_word"] == word]
        if members:
            lines.append(f"  {title}: " + ", ".join(_cell_words(r, word) for r in members))
    return lines


def _cell_words(r, word):
    label = f" {r['label']}" if len(r["shape"]) > 1 else ""
    if word == "noisy":
        low, high = r["speedup_range"]
        return f"{r['function']} {r['dtype']}{label} ({low:.1f}-{high:.1f}x)"
    return f"{r['function']} {r['dtype']}{label} {r['speedup']:.1f}x"


def _bound_line(rows):
    counts = {v: [r for r in rows if r["verdict"] == v] for v in ("yes", "noisy", "NO")}
    line = f"auto met its bound in {len(counts['yes'])} of {len(rows)} cells"
    if counts["noisy"]:
        line += (f"; {len(counts['noisy'])} too noisy to tell (the rounds disagreed: "
                 "rerun when `uptime` shows a lower load)")
    if counts["NO"]:
        line += (f"; {len(counts['NO'])} missed it in every round: "
                 + ", ".join(f"{r['function']} {r['dtype']} {r['label']}" for r in counts["NO"]))
    return line + "."


def plot(result, path, title=None) -> None:
    """Time per element against size: one panel per function and dtype, a line per column;
    ``title`` (default: the CPU and the load average of the run) heads the figure."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in result["rows"] if len(r["shape"]) == 1]
    panels = sorted({(r["function"], r["dtype"]) for r in rows},
                    key=lambda p: (FUNCTIONS.index(p[0]), p[1]))
    dtypes = sorted({d for _, d in panels})
    names = list(dict.fromkeys(n for n, _ in panels))
    fig, axes = plt.subplots(len(names), len(dtypes), squeeze=False,
                             figsize=(5 * len(dtypes), 3.2 * len(names)))
    style = {"copy": dict(color="grey", linestyle=":", label="memory copy (floor)"),
             "auto": dict(color="black", linestyle="--", linewidth=2),
             "reference": dict(color="C0", linestyle="-.")}
    # a backend keeps its colour in panels where another has no line
    style.update({b: dict(color=f"C{i + 1}") for i, b in enumerate(result["backends"])})
    for (name, dtype) in panels:
        ax = axes[names.index(name)][dtypes.index(dtype)]
        cells = sorted((r for r in rows if (r["function"], r["dtype"]) == (name, dtype)),
                       key=lambda r: r["shape"][0])
        sizes = [r["shape"][0] for r in cells]
        for col in ["reference"] + result["backends"] + ["auto", "copy"]:
            if col not in cells[0]["times"]:
                continue  # no kernel of its own for this function
            per = [r["times"][col] / n * 1e9 for r, n in zip(cells, sizes)]
            kw = {"label": col, **style.get(col, {})}
            ax.plot(sizes, per, marker="o", markersize=3, **kw)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_title(f"{name} {dtype}")
        ax.set_xlabel("elements")
        ax.set_ylabel("ns per element")
        ax.grid(True, which="both", alpha=0.3)
    axes[0][0].legend(fontsize=7)
    if title is None:
        cpu, load_avg = result["info"]["cpu"], result.get("load_average", {})
        title = (f"fastmath bench on {cpu['model']} ({cpu['usable_cores']} cores), "
                 f"load average {load_avg.get('start') or 0:.1f}-{load_avg.get('end') or 0:.1f}")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout(rect=(0, 0, 1, 0.98))
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _plot_path(args):
    """The plot's path (None for no plot), failing now, before the timing, when asked for
    one that cannot be drawn."""
    try:
        import matplotlib  # noqa: F401
        have = True
    except ImportError:
        have = False
    if args.no_plot:
        return None
    if args.plot:
        if not have:
            raise SystemExit(f"--plot needs matplotlib: {PLOT_HINT}")
        return args.plot
    return DEFAULT_PLOT if have else None


def main(args) -> int:
    import fastmath

    if getattr(args, "peers", False):
        from . import _peers, _warm

        return (_warm.main if getattr(args, "learn", False) else _peers.main)(args)

    functions = [f for f in args.functions.split(",") if f]
    unknown = set(functions) - set(FUNCTIONS)
    if unknown:
        raise SystemExit(f"unknown function(s) {sorted(unknown)}; choose from {', '.join(FUNCTIONS)}")
    sizes = (tuple(int(float(s)) for s in args.sizes.split(",")) if args.sizes
             else QUICK_SIZES if args.quick else SIZES)
    avail = [b for b in fastmath.available_backends() if b != "auto"]
    backends = args.backends.split(",") if args.backends else avail
    for b in backends:
        if b not in avail:
            raise SystemExit(f"backend {b!r} is not available here; available: {', '.join(avail)}")
    shape = tuple(int(s) for s in args.lse_shape.split("x")) if args.lse_shape else None
    plot_path = _plot_path(args)
    rounds = args.rounds or (5 if args.quick else 7)
    before = load()
    print(f"fastmath bench: {fastmath.info()['threads']} threads; load average "
          f"{'unknown' if before is None else f'{before:.2f}'} on {os.cpu_count()} cores.\n"
          f"Median time per call over {rounds} interleaved rounds. 'auto vs bound': from "
          f"{LARGE} elements auto's time over the fastest column (bound {MAX_RATIO}x), below "
          f"it auto's time minus the reference's (bound +{MAX_OVERHEAD * 1e6:.1f} us), "
          "± half the spread between rounds. ok: yes, NO (every round missed the bound) "
          "or noisy (the rounds disagree).\n")
    result = run(functions, args.dtypes.split(","), sizes, backends, rounds=rounds,
                 lse_shape=shape, target=0.005 if args.quick else TARGET)
    result["load_average"] = {"start": before, "end": load(), "cores": os.cpu_count()}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
        print(f"wrote {args.json}")
    if plot_path:
        plot(result, plot_path)
        note = f"Plot: {os.path.abspath(plot_path)} (ns per element against size)."
    else:
        note = ("No plot drawn" + (" (--no-plot)." if args.no_plot else
                f": for one, install matplotlib ({PLOT_HINT})."))
    print("\n" + summary(result, note, before, result["load_average"]["end"]))
    return 0
