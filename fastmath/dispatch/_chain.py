"""Running a chain of backend kernels: one fault policy for every kind of function.

A chain is the tuple of ``(backend name, kernel)`` pairs ``_selection.plan`` returns, the
numpy backend last. Every front end (ufuncs of one or two arguments, elementwise
functions, logsumexp, softmax, and the Dask tasks through them) runs it here, and the list
functions can (``run`` is a plain function of the chain, inputs and output), so they agree
on:

- a kernel returning ``NotImplemented`` declines the call before writing anything: the
  next one takes it, quietly (a debug log line says so);
- a kernel that raises may have written part of the output: the next one computes the
  whole of it again, with one warning per (backend, kind of error); the last kernel's
  failure, like any ``FloatingPointError`` (NumPy's ``errstate(raise)``), is the user's;
- under ``FASTMATH_STRICT=1`` running on another backend than the one chosen raises
  :class:`fastmath.FallbackError` before it runs;
- with debug logging on, each call logs which backend ran it.
"""
from __future__ import annotations

from . import _fpe, _log, _selection
from ..backends import HANDLED, UNCHECKED

_log_state = _log.state
_logger = _log.logger
_scoped_get = _selection._scoped.get
_selection_state = _selection.state


def first(chain, args, function):
    """``kernel(*args)`` for the first kernel of ``chain`` that takes it; its result.

    ``function`` names the call in warnings and log lines; ``args[0]`` describes it there.
    """
    x = args[0]
    scoped = _scoped_get()  # _selection.current(), without a call on every kernel run
    explicit = _selection_state.default if scoped is None else scoped
    last = len(chain) - 1
    for i, (name, kernel) in enumerate(chain):
        if name != explicit and explicit != "auto":
            _selection.forbid_fallback(explicit, name, function, getattr(x, "dtype", None))
        try:
            result = kernel(*args)
        except FloatingPointError:
            raise  # NumPy's errstate 'raise', after the whole loop
        except Exception as e:
            if i == last:
                raise
            _selection.warn_failed(name, function, e, chain[i + 1][0])
            continue
        if result is NotImplemented:
            if _log_state.on:
                _logger.debug("%s(%s): %s declined it (chain: %s)", function, describe(x),
                              name, _log.chain_names(chain))
            continue
        if _log_state.on:
            _logger.debug("%s(%s): ran on %s (selection %s)", function, describe(x), name,
                          explicit, extra={"ran_on": name})
        return result
    raise AssertionError("the numpy backend ends every chain and never declines")


def run(chain, ins, out, function, derive=None):
    """Compute ``out`` from ``ins`` with the first kernel ``k(*ins, out)`` that takes them,
    and report its floating-point errors as NumPy would.

    A kernel returns what is left to do about FP errors: ``HANDLED``, flags to report, or
    ``UNCHECKED``, when ``derive(ins, out)`` (if given) finds the flags from the result.
    """
    status = first(chain, (*ins, out), function)
    if status is HANDLED:
        return
    if status == UNCHECKED:
        status = derive(ins, out) if derive is not None else 0
    _fpe.report(function, status)


def describe(x) -> str:
    """``float64[1000]``, ``int8 scalar`` or a type name, for log records."""
    dtype = getattr(x, "dtype", None)
    if dtype is None:
        return type(x).__name__
    shape = getattr(x, "shape", ())
    return f"{dtype}[{'x'.join(map(str, shape))}]" if shape else f"{dtype} scalar"
