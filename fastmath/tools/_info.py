"""``fastmath.info()`` and ``python -m fastmath info``: what fastmath sees on this machine."""
from __future__ import annotations

import importlib
import importlib.metadata
import os
import platform
import sys

from ..dispatch import _config, _hardware, _selection
from .. import backends


def _version(dist):
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _setting(cfg, var, value, default_source):
    """(value, where it came from) for one setting read from ``var``."""
    raw = cfg.sources.get(var)
    if raw is None:
        return {"value": value, "source": default_source}
    if var in cfg.ignored:
        return {"value": value, "source": f"{default_source}; {var}={raw!r} ignored: "
                                          f"{cfg.ignored[var]}"}
    return {"value": value, "source": f"{var}={raw}"}


def settings(cfg) -> dict:
    """Every setting a job script can make by environment variable, and its source."""
    default = _selection.state.default
    backend = _setting(cfg, "FASTMATH_BACKEND", default, "default")
    if default != cfg.backend:
        backend["source"] = "set_backend()"
    return {
        "backend": backend,
        "threads": _setting(cfg, "FASTMATH_NUM_THREADS", cfg.num_threads,
                            f"OMP_NUM_THREADS={cfg.sources['OMP_NUM_THREADS']}"
                            if "OMP_NUM_THREADS" in cfg.sources
                            else "default: the cores this process may use"),
        "strict": _setting(cfg, "FASTMATH_STRICT", cfg.strict, "default"),
        "auto": _setting(cfg, "FASTMATH_AUTO", cfg.auto, "default"),
        "calibration": calibration(cfg),
        "learned": learned(cfg),
    }


def learned(cfg) -> dict:
    """What ``auto`` has learned on this machine: the store's path (None where nothing is
    learned: FASTMATH_AUTO=fixed or off) and how many choices came from where."""
    from ..dispatch import _learn

    if cfg.auto != "learn":
        return {"value": None, "source": f"FASTMATH_AUTO={cfg.auto}: nothing is learned"}
    earlier = len(_learn.stored())
    here = sum(1 for c in list(_learn.cells.values()) if c.source == "learned here"
               and c.choice is not None)
    learning = sum(1 for c in list(_learn.cells.values()) if c.learning)
    return {"value": str(_learn.path()),
            "source": f"{earlier} choices from earlier runs on this machine, {here} learned "
                      f"by this process, {learning} being learned now"}


def calibration(cfg) -> dict:
    """The cost table ``auto`` uses: this machine's file (its path is the value), or the
    built-in defaults (value None) and why no file is used."""
    import warnings

    from ..dispatch import _calibration

    path = _calibration.user_path()
    raw = cfg.sources.get("FASTMATH_CALIBRATION")
    named = f"FASTMATH_CALIBRATION={raw}" if raw and "FASTMATH_CALIBRATION" not in cfg.ignored \
        else None
    if any(e.source == str(path) for e in _calibration.table().values()):
        return {"value": str(path), "source": named or "default path, written by calibrate"}
    if not path.exists():
        why = f"no such file: {path}; `fastmath calibrate` writes one"
    else:
        with warnings.catch_warnings(record=True) as caught:  # said once already, at load
            warnings.simplefilter("always")
            _calibration._read_user(path)
        why = (str(caught[0].message).partition("; auto uses")[0].removeprefix("fastmath: ")
               if caught else f"{path} is not used")
    return {"value": None, "source": f"{named + ': ' if named else ''}{why}"}


# The optional C extensions (setup.py), each with what runs in its place when it was not
# built (an install without a C compiler, or without NumPy's headers).
EXTENSIONS = {
    "fastmath.dispatch._runtime": "the numpy and mkl backends split calls on the Python pool",
    "fastmath.dispatch._lists": "fastmath.foreach computes array by array",
    "fastmath.frontends._hot": "the ufuncs' fast path runs in Python",
    "fastmath.integrations._loops": "fastmath.patch(mode='loops') is unavailable",
    "fastmath.backends._lse_kernel": "logsumexp takes its Python path",
}


def compiled() -> dict:
    """Each C extension -> "built", or why not and what runs instead."""
    out = {}
    for name, instead in EXTENSIONS.items():
        try:
            importlib.import_module(name)
            out[name] = "built"
        except ImportError as e:
            out[name] = f"not built ({e}): {instead}; reinstall fastmath with a C compiler"
    return out


def collect() -> dict:
    import fastmath

    cfg = _config.get()
    sel = _selection.current()
    source = ("scoped by fastmath.backend()" if _selection._scoped.get() is not None
              else "FASTMATH_BACKEND" if "FASTMATH_BACKEND" in cfg.sources
              and "FASTMATH_BACKEND" not in cfg.ignored
              and cfg.backend == _selection.state.default else
              "set_backend()" if _selection.state.default != "auto" else "default")
    return {
        "fastmath": fastmath.fastmath_version,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "versions": {d: _version(d) for d in ("numpy", "scipy", "torch", "numexpr", "dask")},
        "backends": {n: backends.why_unavailable(n) or "available" for n in backends.NAMES},
        "compiled": compiled(),
        "threads": cfg.num_threads,
        "selection": {"backend": sel, "source": source},
        "config": {"strict": cfg.strict, "calibration": cfg.calibration,
                   "environment": dict(cfg.sources)},
        "settings": settings(cfg),
        # after "backends": probing them loads torch, which the GPU lookup then asks
        "cpu": _hardware.cpu(),
        "gpus": _hardware.gpus(),
        "thread_pools": _hardware.thread_pools(),
        # how long OpenBLAS's threads spin after a call, as 2^value TSC cycles (None:
        # OpenBLAS's own, 28), and who said so (fastmath/__init__.py)
        "openblas_spin": {"value": os.environ.get("OPENBLAS_THREAD_TIMEOUT"),
                          "source": fastmath._blas_spin_source},
        "processes": processes(),
    }


def processes() -> dict:
    """The registry of fastmath's processes on this machine (dispatch/_runtime.c): its file
    (None: none, `why` says why) and the other processes calling now on this one's CPUs."""
    try:
        from ..dispatch import _runtime
    except ImportError:
        return {"registry": None, "why": "the native runtime is not built", "calling": 0}
    said = _runtime.registry()
    return {"registry": said["path"], "why": said["why"] or None, "calling": said["processes"]}


def shown(setting, value) -> str:
    """A setting's value for people: no calibration file means the built-in defaults."""
    if value is None and setting == "calibration":
        return "built-in defaults"
    return "nothing learned" if value is None and setting == "learned" else str(value)


def processes_shown(p) -> str:
    """info()'s "processes" for people."""
    if p["registry"] is None:
        return f"no registry of fastmath's processes ({p['why']})"
    return f"{p['calling']} other fastmath processes calling now (registry {p['registry']})"


def spin_shown(spin) -> str:
    """info()'s "openblas_spin" for people (no value: OpenBLAS's own, 2^28 cycles)."""
    return f"2^{spin['value'] or 28} cycles after a call ({spin['source']})"


def render(d: dict) -> str:
    cpu = d["cpu"]
    lines = [f"fastmath {d['fastmath']}  (python {d['python']}, {d['platform']})", "",
             f"cpu:       {cpu['model']} ({cpu['arch']}), SIMD {cpu['simd']}, "
             f"{cpu['usable_cores']} of {cpu['logical_cores']} cores usable",
             "gpus:      " + (", ".join(g["name"] for g in d["gpus"]["devices"])
                              or d["gpus"]["note"]), "", "versions:"]
    lines += [f"  {k:<9} {v or 'not installed'}" for k, v in d["versions"].items()]
    lines += ["", "backends:"]
    lines += [f"  {k:<11} {v}" for k, v in d["backends"].items()]
    lines += ["", "compiled:"]
    lines += [f"  {k:<29} {v}" for k, v in d["compiled"].items()]
    lines += ["", f"threads:   {d['threads']}",
              f"selection: {d['selection']['backend']} ({d['selection']['source']})",
              f"strict:    {d['config']['strict']}", "", "settings:"]
    lines += [f"  {k:<11} {shown(k, v['value'])}  ({v['source']})"
              for k, v in d["settings"].items()]
    lines.append("openblas spin: " + spin_shown(d["openblas_spin"]))
    lines.append("processes: " + processes_shown(d["processes"]))
    env = d["config"]["environment"]
    lines.append("environment: " + (", ".join(f"{k}={v}" for k, v in env.items()) or "none set"))
    return "\n".join(lines)
