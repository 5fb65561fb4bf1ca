"""Make the documentation's pictures and measured tables:
``python docs/make_pictures.py [--bench-json FILE] [--ways-json FILE]``.

docs/img/bench.png and docs/img/bench-table.md: ``fastmath bench --quick`` on this machine,
its results kept in docs/img/bench.json (or drawn from an earlier run's ``--json`` file
given as ``--bench-json``), the plot by the command's own ``--plot`` code with the machine
and its load in the title, the table (the Benchmarks page) from the same file, so the two
cannot disagree. docs/img/ways-table.md: ``bench/ways.py`` (the ways of using fastmath on
examples/probit.py), kept in docs/img/ways.json. Take them on a quiet machine: the page
shows the load average each was taken at. docs/img/architecture.png: how a call flows
through fastmath, and docs/img/layout.png: its layers (``--diagrams`` draws these two only).
Needs matplotlib (the ``bench`` extra).
"""
import argparse
import json
import subprocess
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from fastmath.tools import _bench  # noqa: E402

IMG = Path(__file__).resolve().parent / "img"


def bench(json_path):
    if json_path is None:
        json_path = IMG / "bench.json"
        subprocess.run([sys.executable, "-m", "fastmath", "bench", "--quick", "--no-plot",
                        "--json", str(json_path)], check=True)
    result = json.loads(Path(json_path).read_text())
    _bench.plot(result, IMG / "bench.png")
    (IMG / "bench-table.md").write_text(bench_table(result))


def _time(s):
    return f"{s * 1e6:.1f} us" if s < 1e-3 else f"{s * 1e3:.2f} ms"


def machine_words(info):
    cpu = info.get("cpu", {})
    v = info.get("versions", {})
    libs = ", ".join(f"{k} {v[k]}" for k in ("numpy", "scipy", "torch", "numexpr", "mkl")
                     if k in v)
    return f"{cpu.get('model', '?')}, {info.get('threads', '?')} threads; {libs}"


def bench_table(result):
    """The Benchmarks page's table: every cell of the run, from its own JSON file."""
    load = result.get("load_average", {})
    lines = [f"Measured by `fastmath bench --quick` on {machine_words(result['info'])}; load "
             f"average {load.get('start', 0):.2f} at the start, {load.get('end', 0):.2f} at "
             "the end. Medians of interleaved rounds.", "",
             "| function | dtype | size | NumPy/SciPy | fastmath `auto` | auto ran | speedup "
             "| fastest here |",
             "|---|---|---|---|---|---|---|---|"]
    for r in result["rows"]:
        t = r["times"]
        lines.append(f"| `{r['function']}` | {r['dtype']} | {r['label']} | "
                     f"{_time(t['reference'])} | {_time(t['auto'])} | {r['auto_chose']} | "
                     f"{r['speedup']:.2f}x | {r['fastest']} |")
    return "\n".join(lines) + "\n"


def ways(json_path):
    """docs/img/ways-table.md from bench/ways.py (run now, unless given its ``--json``)."""
    if json_path is None:
        json_path = IMG / "ways.json"
        subprocess.run([sys.executable, str(IMG.parent.parent / "bench" / "ways.py"),
                        "--json", str(json_path)], check=True)
    w = json.loads(Path(json_path).read_text())
    load = w["load_average"]
    lines = [f"Measured by `python bench/ways.py` ({w['n']:,} rows, {w['rounds']} rounds, "
             f"medians) on {w['machine']}; load average {load['start']:.2f} at the start, "
             f"{load['end']:.2f} at the end.", "",
             "| way | the script's own work | speedup | speedup after its first step "
             "| whole process | same result |",
             "|---|---|---|---|---|---|"]
    for r in w["rows"]:
        lines.append(f"| {r['way']} | {r['work_s']:.3f} s | {r['speedup']:.2f}x | "
                     f"{r['rest_speedup']:.2f}x | {r['process_s']:.2f} s | "
                     f"{'yes' if r['agrees'] else 'NO'} |")
    (IMG / "ways-table.md").write_text("\n".join(lines) + "\n")


# (x, y, text) of each box; arrows between them below
BOXES = {
    "user": (0.08, 0.5, "your code\nnp.exp(x)"),
    "fe": (0.33, 0.5, "frontends/: _ufunc, _binary -> _pipeline;\n_elementwise, _reductions, _linalg\n"
                      "NumPy semantics: dtypes, out=, where=,\nscalars, errstate; "
                      "dispatch/_chain runs it"),
    "sel": (0.33, 0.14, "dispatch/_selection\nscope, default, FASTMATH_BACKEND,\n"
                        "auto's cost table (dispatch/_calibration)"),
    "reg": (0.33, 0.86, "registry\n_registry.py\none row per function"),
    "np": (0.78, 0.86, "backends/numpy\nNumPy/SciPy loops\nover a thread pool"),
    "torch": (0.78, 0.62, "backends/torch: torch-cpu, torch-cuda\nzero-copy views, writes\ninto NumPy's output"),
    "ne": (0.78, 0.40, "backends/numexpr, backends/mkl\n(Intel VML) into NumPy's output"),
    "ref": (0.78, 0.14, "NumPy / SciPy directly\nsmall arrays under auto,\n"
                        "and what no backend takes"),
}
# (from, to, where on the first box the arrow leaves, where on the second it lands, label)
ARROWS = [("user", "fe", (1, .5), (0, .5), ""),
          ("reg", "fe", (.5, 0), (.5, 1), ""),
          ("fe", "sel", (.35, 0), (.35, 1), "function, dtype, size"),
          ("sel", "fe", (.65, 1), (.65, 0), "plan (cached)"),
          *[("fe", b, (1, .5), (0, .5), "") for b in ("np", "torch", "ne", "ref")]]


def _boxes(ax, specs, shaded):
    """A rounded text box per ``{key: (x, y, text)}``; the ``shaded`` keys in blue."""
    boxes = {}
    for key, (x, y, text) in specs.items():
        face = "#e8f0fe" if key in shaded else "#f5f5f5"
        t = ax.text(x, y, text, ha="center", va="center", fontsize=8.5,
                    bbox=dict(boxstyle="round,pad=0.5", facecolor=face, edgecolor="#555"))
        boxes[key] = t.get_bbox_patch()
    return boxes


def _arrow(ax, a, b, start, end):
    """An arrow from box ``a`` to box ``b``, leaving and landing at fractions of each."""
    ax.annotate("", xy=end, xycoords=b, xytext=start, textcoords=a,
                arrowprops=dict(arrowstyle="->", color="#333", shrinkA=2, shrinkB=2))


def architecture():
    fig, ax = plt.subplots(figsize=(10, 5.2))
    ax.set_axis_off()
    boxes = _boxes(ax, BOXES, shaded=("fe", "sel", "reg"))
    for a, b, start, end, label in ARROWS:
        _arrow(ax, boxes[a], boxes[b], start, end)
        if label:
            left = start[0] > .5
            # beside its arrow, in the gap below the front end
            ax.annotate(label, xy=(start[0] + (0.03 if left else -0.03), -0.35),
                        xycoords=boxes["fe"], fontsize=7.5, ha="left" if left else "right",
                        color="#333")
    ax.set_title("How a call flows: front end, then selection, then a backend kernel",
                 fontsize=10)
    fig.tight_layout()
    fig.savefig(IMG / "architecture.png", dpi=110)
    plt.close(fig)


# the layers, top to bottom: each imports only those below it (tests/test_layout.py)
PACKAGES = {
    "top": (0.5, 0.93, "the public face: fastmath/__init__ (NumPy's names + the function table), "
                       "special, foreach, _startup;\ntools/ (the fastmath command): cli, _bench, "
                       "_peers, _calibrate, _check, _explain, _info, ..."),
    "int": (0.5, 0.75, "integrations/: _patch, _loopmode, _loops.c (the loop mode's trampolines), "
                       "_accelerate, _blockwise,\n_blockwise_dask, _nested"),
    "fe": (0.5, 0.57, "frontends/: _functions (the function table), _pipeline, _ufunc with "
                      "_hot.c (its fast path), _binary,\n_elementwise, _reductions, _lse_steps, "
                      "_linalg, _foreach; the operand routes _dask and _native"),
    "be": (0.5, 0.39, "backends/: numpy, torch (cpu, cuda), numexpr, mkl: one module each, "
                      "none imports another;\n_lse (logsumexp's shared math)"),
    "disp": (0.5, 0.21, "dispatch/: _selection, _calibration, _chain (one fault policy), _config, "
                        "_fpe,\n_runtime.c (the native pool), _lists.c (the list runner), "
                        "_npy_loops, _parallel, _threads, _alloc, _log, _hardware"),
    "reg": (0.5, 0.04, "_registry (one row per function), backends/__init__ and _protocol "
                       "(the backend list and protocol), _numpy"),
}
USES = [("top", "int"), ("int", "fe"), ("fe", "be"), ("be", "disp"), ("disp", "reg")]


def layout():
    fig, ax = plt.subplots(figsize=(10, 5.6))
    ax.set_axis_off()
    boxes = _boxes(ax, PACKAGES, shaded=[k for k in PACKAGES if k != "top"])
    for a, b in USES:
        _arrow(ax, boxes[a], boxes[b], (.5, 0), (.5, 1))
    ax.set_title("Where the code lives: a layer imports only those below it (the arrows); "
                 "a lower one is handed hooks", fontsize=10)
    fig.tight_layout()
    fig.savefig(IMG / "layout.png", dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--bench-json", help="draw from this `fastmath bench --json` file")
    p.add_argument("--ways-json", help="tabulate this `bench/ways.py --json` file")
    p.add_argument("--diagrams", action="store_true",
                   help="draw the two diagrams only (how a call flows, where the code lives); "
                   "measure nothing")
    args = p.parse_args()
    IMG.mkdir(exist_ok=True)
    architecture()
    layout()
    if not args.diagrams:
        bench(args.bench_json)
        ways(args.ways_json)
