"""Why each call went where it went: ``logging.getLogger("fastmath")`` at DEBUG.

Plans (which backends a function tries, per selection and dtype) are logged when they are
built, declines and fallbacks when they happen, and each call only while the logger is
enabled for DEBUG. ``FASTMATH_LOG=debug`` attaches a handler to stderr; standard logging
configuration (``logging.basicConfig(level=logging.DEBUG)``) works as well.

The hot path never asks the logging module anything. It reads ``state.on``, a flag
refreshed at import, on ``fastmath.dispatch._config.reload()``, whenever a plan is built, and by
:func:`refresh`; while the flag is set, every ufunc call leaves the fast path so that it
can be logged. Logging configured after fastmath's first calls is therefore picked up at
the next plan built, or at once by calling ``fastmath.dispatch._log.refresh()``.
"""
from __future__ import annotations

import logging
import sys

from . import _config

logger = logging.getLogger("fastmath")
DEBUG = logging.DEBUG


class _State:
    on = False


state = _State()
_handler = None


def _apply_env() -> None:
    """Attach (or remove) the stderr handler FASTMATH_LOG asks for."""
    global _handler
    level = _config.get().log
    if _handler is not None:
        logger.removeHandler(_handler)
        _handler = None
    if level is None:
        return
    _handler = logging.StreamHandler(sys.stderr)
    _handler.setFormatter(logging.Formatter("fastmath %(levelname)s: %(message)s"))
    logger.addHandler(_handler)
    logger.setLevel(level.upper())


def refresh() -> bool:
    """Re-read whether DEBUG records would be emitted, and route ufunc calls to match."""
    on = logger.isEnabledFor(DEBUG)
    if on != state.on:
        state.on = on
        _route_ufuncs(on)
    return on


_route_hooks: list = []


def on_route(hook) -> None:
    """Register a callable run when debug logging is switched on or off: a front end whose
    fast path skips the logged path forgets what lets it skip (this layer is below the
    front ends, so they hand it the hook)."""
    _route_hooks.append(hook)


def _route_ufuncs(on: bool) -> None:
    # A ufunc's fast path is taken below its ``_small`` size; zero sends every call
    # through the logged path. Ufuncs refill it from the cost table at their next call
    # under ``auto`` once logging is off again.
    for hook in _route_hooks:
        hook()


def chain_names(chain) -> str:
    return " -> ".join(name for name, _ in chain) or "the reference"


def plan_built(spec, sel, dtype, plan) -> None:
    refresh()
    if not state.on:
        return
    if sel == "auto":
        if not plan:
            logger.debug("plan %s(%s) under auto: the reference at every size", spec.name, dtype)
            return
        steps = "; ".join(f"from {n} elements {chain_names(c)}" for n, c in reversed(plan))
        logger.debug("plan %s(%s) under auto: %s%s", spec.name, dtype,
                     f"below {plan[-1][0]} elements the reference; " if plan[-1][0] > 1 else "",
                     steps)
    else:
        logger.debug("plan %s(%s) under %s: %s", spec.name, dtype, sel, chain_names(plan))


def _on_reload() -> None:
    _apply_env()
    refresh()


_apply_env()
# Ufuncs made after this read the flag in their constructor; nothing to re-route yet.
state.on = logger.isEnabledFor(DEBUG)
_config.on_reload(_on_reload)
