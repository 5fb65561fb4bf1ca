"""The one place that reads ``FASTMATH_*`` environment variables.

Every variable is parsed here, once, at import (and again by :func:`reload`, which tests
use). A bad value never crashes an import: it warns once, at the line of the caller's code
that imported fastmath (not at fastmath's own), says how to fix it, and the default is used
instead. An empty (or blank) variable counts as unset, as a shell's ``VAR= cmd`` means.
Names (backends, log levels, booleans) are case-insensitive everywhere: ``TORCH-CPU`` in
FASTMATH_BACKEND or in :func:`fastmath.set_backend` is ``torch-cpu``.
"""
from __future__ import annotations

import os
import warnings
from dataclasses import dataclass, field, replace

from .. import backends as _backends
from . import _fpe

# every variable read() reads (the docs test holds the pages to this list)
# (and FASTMATH_PATCH, which the start-up hook reads before fastmath is imported: _startup;
# and FASTMATH_REGISTRY, which the native runtime reads as it loads: _runtime.c)
VARIABLES = ("FASTMATH_BACKEND", "FASTMATH_AUTO", "FASTMATH_NUM_THREADS", "FASTMATH_STRICT",
             "FASTMATH_VERIFY",
             "FASTMATH_CALIBRATION", "FASTMATH_LOG", "FASTMATH_CUDA_MEMORY", "FASTMATH_PATCH",
             "FASTMATH_REGISTRY")
BACKEND_NAMES = ("auto",) + _backends.NAMES


def _names_changed():
    global BACKEND_NAMES
    BACKEND_NAMES = ("auto",) + _backends.NAMES


_backends.on_register(_names_changed)
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off", "")
LOG_LEVELS = ("debug", "info", "warning", "error", "critical")
AUTO_MODES = ("learn", "fixed", "off")  # how auto chooses (dispatch/_learn.py)


def canonical(name):
    """A name as fastmath compares it: stripped and lower-case (other objects unchanged)."""
    return name.strip().lower() if isinstance(name, str) else name


def default_threads() -> int:
    """The cores this process may run on (its CPU affinity), not the machine's total."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # not on Linux
        return max(1, os.cpu_count() or 1)


def _omp_threads(raw):
    """OMP_NUM_THREADS's first level ("4", or "4,2" for nested regions), or None where it
    is unset or not a positive integer (OpenMP runtimes say so themselves)."""
    if not raw:
        return None
    try:
        n = int(raw.split(",")[0].strip())
    except ValueError:
        return None
    return n if n >= 1 else None


@dataclass(frozen=True)
class Config:
    backend: str = "auto"
    auto: str = "learn"
    num_threads: int = field(default_factory=default_threads)
    strict: bool = False
    verify: bool = False  # accelerate(elementwise/rows) checks its first blocked call
    calibration: str | None = None
    log: str | None = None
    cuda_memory: int | None = None  # bytes the CUDA pipeline may hold; None: its default
    # variable name -> the raw value it was read from, for ``fastmath info``
    sources: dict = field(default_factory=dict)
    # variable name -> why its value was not used (the default was used instead)
    ignored: dict = field(default_factory=dict)


class ConfigWarning(UserWarning):
    """A FASTMATH_* variable had a value fastmath could not use."""


def read(environ=None) -> Config:
    env = os.environ if environ is None else environ
    kw: dict = {}
    ignored: dict = {}

    def _warn(var: str, value: str, problem: str, fix: str) -> None:
        ignored[var] = problem
        warnings.warn(f"{var}={value!r} {problem}; {fix}", ConfigWarning,
                      stacklevel=_fpe.user_stacklevel())
    # an empty variable is an unset one, for every variable alike
    sources = {k: v for k, v in env.items() if k.startswith("FASTMATH_") and v.strip()}
    omp = _omp_threads(env.get("OMP_NUM_THREADS"))
    if omp is not None:  # the ecosystem's thread budget, where FASTMATH_NUM_THREADS is unset
        sources["OMP_NUM_THREADS"] = env["OMP_NUM_THREADS"]
    env = sources

    def choose(var, key, valid, problem, fallback):
        raw = env.get(var)
        if raw is None:
            return
        if canonical(raw) in valid:
            kw[key] = canonical(raw)
        else:
            _warn(var, raw, problem, f"{fallback}. Valid choices: {', '.join(valid)}")

    choose("FASTMATH_BACKEND", "backend", BACKEND_NAMES, "is not a backend", "using 'auto'")
    choose("FASTMATH_AUTO", "auto", AUTO_MODES, "is not a mode of auto", "using 'learn'")

    if omp is not None:
        kw["num_threads"] = omp
    raw = env.get("FASTMATH_NUM_THREADS")
    if raw is not None:
        try:
            n = int(raw.strip())
            if n < 1:
                raise ValueError
            kw["num_threads"] = n
        except ValueError:
            _warn("FASTMATH_NUM_THREADS", raw, "is not a positive integer",
                  f"using {omp} (OMP_NUM_THREADS)" if omp is not None else
                  f"using {default_threads()} (the cores this process may use)")

    for var, key, what in (("FASTMATH_STRICT", "strict", "strict mode"),
                           ("FASTMATH_VERIFY", "verify", "verification")):
        raw = env.get(var)
        if raw is not None:
            v = canonical(raw)
            if v in _TRUE:
                kw[key] = True
            elif v not in _FALSE:
                _warn(var, raw, "is not a boolean", f"use 1 or 0; {what} stays off")

    raw = env.get("FASTMATH_CALIBRATION")
    if raw:
        kw["calibration"] = os.path.expanduser(raw.strip())

    choose("FASTMATH_LOG", "log", LOG_LEVELS, "is not a logging level", "no log is written")

    raw = env.get("FASTMATH_CUDA_MEMORY")
    if raw:
        n = parse_bytes(raw)
        if n is None or n < MIN_CUDA_MEMORY:
            _warn("FASTMATH_CUDA_MEMORY", raw, "is not a size of at least 1 MiB",
                  "write bytes with an optional unit (512M, 2GiB, 1.5G); using the default")
        else:
            kw["cuda_memory"] = n

    return Config(sources=sources, ignored=ignored, **kw)


MIN_CUDA_MEMORY = 1 << 20
_UNITS = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def parse_bytes(text: str):
    """``"512M"``, ``"2GiB"``, ``"1.5g"``, ``"1048576"`` -> bytes (units are binary), else None."""
    t = text.strip().lower().replace(" ", "")
    for tail in ("ib", "b"):
        if t.endswith(tail) and t[:-len(tail)][-1:] in "kmgt" and len(t) > len(tail):
            t = t[:-len(tail)]
            break
    unit = t[-1:] if t[-1:] in "kmgtb" else ""
    try:
        value = float(t[:len(t) - len(unit)])
    except ValueError:
        return None
    if not value >= 0 or value == float("inf"):
        return None
    return int(value * _UNITS[unit])


_current = read()
_reload_hooks: list = []


def get() -> Config:
    return _current


def on_reload(hook) -> None:
    """Register a callable run after :func:`reload` (modules caching config values use it)."""
    _reload_hooks.append(hook)


def overrule(var: str, problem: str, **defaults) -> Config:
    """Record that ``var``'s value, though well formed, cannot be used here (a backend
    this machine lacks, found by a layer that knows backends): the settings in
    ``defaults`` are in force instead, and ``fastmath info`` says why."""
    global _current
    _current = replace(_current, ignored={**_current.ignored, var: problem}, **defaults)
    return _current


def reload(environ=None) -> Config:
    """Re-read the environment (for tests and long-running programs)."""
    global _current
    _current = read(environ)
    for hook in _reload_hooks:
        hook()
    return _current
