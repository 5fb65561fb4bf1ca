"""Which backend runs a call: the process default, scoped overrides, and ``auto``.

The process default comes from FASTMATH_BACKEND or :func:`set_backend`; :class:`backend`
overrides it in a ``ContextVar``, so each thread and each asyncio task sees only its own
scope. Each (selection, function) pair is resolved to kernels once and cached, so the hot
path is a context-variable read and a dict lookup.
"""
from __future__ import annotations

import contextlib
import contextvars
import functools
import inspect
import warnings

from .._numpy import np
from . import _calibration, _config, _fpe, _learn, _log, _parallel, _verify
from .. import backends
from ._config import canonical

_scoped: contextvars.ContextVar = contextvars.ContextVar("fastmath_backend", default=None)
# (token, rest): the tokens of this context's open ``with backend()`` blocks, innermost first
_tokens: contextvars.ContextVar = contextvars.ContextVar("fastmath_backend_tokens", default=())


class _State:
    """The process-wide default, in an object so hot paths can hold it without a lookup
    (a slot: the ufuncs' fast path in C reads it where the slot lies, frontends/_hot.c)."""

    __slots__ = ("default",)

    def __init__(self):
        self.default = "auto"  # FASTMATH_BACKEND's, once checked: see _env_default


state = _State()
_plans: dict = {}
_warned: set = set()


class FallbackError(RuntimeError):
    """Raised under ``FASTMATH_STRICT=1`` when the chosen backend cannot run a call.

    Without strict mode the call would have been handed to NumPy (and logged at DEBUG);
    strict mode makes that an error, for jobs that must not silently run elsewhere.

    Examples
    --------
    >>> import fastmath
    >>> issubclass(fastmath.FallbackError, RuntimeError)
    True
    """


def current() -> str:
    name = _scoped.get()
    return state.default if name is None else name


def _check(name) -> str:
    name = canonical(name)  # one rule for case, as FASTMATH_BACKEND reads it
    names = _config.BACKEND_NAMES  # (a backend registered later is among them)
    if not isinstance(name, str) or name not in names:
        raise ValueError(f"unknown backend {name!r}; valid choices: {', '.join(names)}")
    if name != "auto":
        why = backends.why_unavailable(name)
        if why is not None:
            raise ValueError(f"backend {name!r} is unavailable: {why}. "
                             f"Available here: {', '.join(available_backends())}")
    return name


def set_backend(name: str) -> None:
    """Set the process-wide default backend.

    The default applies wherever no :class:`backend` scope is in force, in every thread.
    It starts as ``FASTMATH_BACKEND``, or ``"auto"``.

    Parameters
    ----------
    name : str
        ``"auto"`` or a backend: ``"numpy"``, ``"numexpr"``, ``"mkl"``, ``"torch-cpu"``,
        ``"torch-cuda"`` (``available_backends()`` says which run here).

    Raises
    ------
    ValueError
        For an unknown name (the message lists the valid ones), or a backend that cannot
        run on this machine (the message says why).

    Examples
    --------
    >>> import fastmath
    >>> fastmath.set_backend("numpy")
    >>> fastmath.get_backend()
    'numpy'
    >>> fastmath.set_backend("auto")
    """
    state.default = _check(name)
    _log.logger.debug("default backend set to %r by set_backend()", name)


def get_backend() -> str:
    """The backend in force here: the innermost ``backend()`` scope, else the default.

    Returns
    -------
    str
        ``"auto"`` or a backend: ``"numpy"``, ``"numexpr"``, ``"mkl"``, ``"torch-cpu"``,
        ``"torch-cuda"`` (``available_backends()`` says which run here).

    Examples
    --------
    >>> import fastmath
    >>> with fastmath.backend("numpy"):
    ...     fastmath.get_backend()
    'numpy'
    """
    return current()


def available_backends() -> list:
    """Names of the backends that can run here, ``"auto"`` first.

    ``fastmath.info()["backends"]`` says why each of the others cannot.

    Returns
    -------
    list of str

    Examples
    --------
    >>> import fastmath
    >>> fastmath.available_backends()[:2]
    ['auto', 'numpy']
    """
    return ["auto"] + [n for n in backends.NAMES if backends.why_unavailable(n) is None]


class backend:
    """Use a backend within a ``with`` block, or for every call of a decorated function.

    The choice is scoped to the current thread and asyncio task and restored on exit,
    exception or not. The name is checked at once: an unknown or unavailable backend
    raises ValueError before anything runs.

    Parameters
    ----------
    name : str
        As for ``set_backend``; ValueError as there.

    Examples
    --------
    >>> import fastmath, numpy
    >>> with fastmath.backend("numpy"):
    ...     float(fastmath.exp(numpy.float64(0.0)))
    1.0

    As a decorator, for every call of a function:

    >>> @fastmath.backend("numpy")
    ... def where_am_i():
    ...     return fastmath.get_backend()
    >>> where_am_i(), fastmath.get_backend()
    ('numpy', 'auto')
    """

    def __init__(self, name: str):
        self.name = _check(name)

    def __enter__(self):
        # One object may be entered from several threads or tasks at once, or nested:
        # each context keeps its own stack of tokens, in one variable shared by every
        # scope, which is back to () once they have all exited (nothing left behind).
        _tokens.set((_scoped.set(self.name), _tokens.get()))
        return self

    def __exit__(self, *exc):
        token, rest = _tokens.get()
        _tokens.set(rest)
        _scoped.reset(token)
        return False

    def __call__(self, fn):
        name = self.name
        if inspect.isgeneratorfunction(fn):
            @functools.wraps(fn)
            def gen_wrapper(*args, **kwargs):
                return (yield from _scoped_steps(fn(*args, **kwargs), name))
            return gen_wrapper
        if inspect.isasyncgenfunction(fn):
            @functools.wraps(fn)
            def agen_wrapper(*args, **kwargs):
                return _scoped_async_steps(fn(*args, **kwargs), name)
            return agen_wrapper
        if inspect.iscoroutinefunction(fn):
            @functools.wraps(fn)
            async def async_wrapper(*args, **kwargs):
                token = _scoped.set(name)  # the awaiting task's own context
                try:
                    return await fn(*args, **kwargs)
                finally:
                    _scoped.reset(token)
            return async_wrapper

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            token = _scoped.set(name)
            try:
                return fn(*args, **kwargs)
            finally:
                _scoped.reset(token)
        return wrapper

    def __repr__(self):
        return f"fastmath.backend({self.name!r})"


@contextlib.contextmanager
def _in_scope(name):
    token = _scoped.set(name)
    try:
        yield
    finally:
        _scoped.reset(token)


def _scoped_steps(gen, name):
    """Run ``gen`` with backend ``name`` in force only while the generator itself runs.

    A ``with`` block around ``yield from`` would leave the scope set in the caller's
    context each time the generator is suspended.
    """
    message, step = None, gen.send
    while True:
        try:
            with _in_scope(name):
                item = step(message)
        except StopIteration as stop:
            return stop.value
        try:
            message, step = (yield item), gen.send
        except GeneratorExit:
            with _in_scope(name):
                gen.close()
            raise
        except BaseException as exc:
            message, step = exc, gen.throw


async def _scoped_async_steps(agen, name):
    """:func:`_scoped_steps` for an async generator."""
    message, step = None, agen.asend
    while True:
        try:
            with _in_scope(name):
                item = await step(message)
        except StopAsyncIteration:
            return
        try:
            message, step = (yield item), agen.asend
        except GeneratorExit:
            with _in_scope(name):
                await agen.aclose()
            raise
        except BaseException as exc:
            message, step = exc, agen.athrow


def _warn_once(key, message):
    if key not in _warned:
        _warned.add(key)
        warnings.warn(message, RuntimeWarning, stacklevel=_fpe.user_stacklevel())


def forbid_fallback(explicit, name, function, dtype) -> None:
    """Under FASTMATH_STRICT=1, refuse to run on ``name`` a call chosen for ``explicit``."""
    if name != explicit and explicit != "auto" and strict():
        raise FallbackError(f"backend {explicit!r} cannot run {function} on this {dtype} "
                            f"input, and FASTMATH_STRICT=1 forbids falling back to {name}")


def warn_failed(name, function, error, instead):
    """One warning per (backend, kind of error) when a kernel fails part-way."""
    _warn_once(("failed", name, type(error).__name__),
               f"fastmath: backend {name!r} failed on {function} ({type(error).__name__}: "
               f"{error}); {instead} computed it instead")


def _kernel(name, spec):
    b = backends.get(name)
    return None if b.why_unavailable() is not None else b.kernel(spec)


_probed: dict = {}  # (backend, function, dtype) -> None, or why the kernel is not used


def unsound(name, spec, dtype, kernel=None):
    """None if backend ``name``'s kernel for ``spec`` gives the reference's special values
    on ``dtype`` (a string) on this machine, else where it does not (_verify.probe, once per
    backend, function and dtype; the numpy backend runs the reference's own loops).
    ``kernel``: the backend's kernel for ``spec``, if the caller has it already."""
    if name == "numpy":
        return None
    key = (name, spec.name, dtype)
    if key not in _probed:
        kernel = _kernel(name, spec) if kernel is None else kernel
        _probed[key] = (None if kernel is None
                        else _verify.probe(spec, kernel, dtype, name))
    return _probed[key]


def _sound(name, spec, dtype, kernel, explicit) -> bool:
    """Whether ``kernel`` may run ``spec`` on ``dtype`` here (:func:`unsound`). A kernel
    that may not is never used: a chosen backend says so once, ``auto`` logs it."""
    why = unsound(name, spec, dtype, kernel)
    if why is None:
        return True
    message = (f"fastmath: backend {name!r} gives {why} for {spec.name} on {dtype} on this "
               "machine; NumPy/SciPy's result is used instead")
    _log.logger.info(message)
    if explicit:
        _warn_once(("unsound", name, spec.name, dtype), message)
    return False


def _auto_chain(chain, spec, dtype):
    """``chain`` as ``auto`` runs it: a kernel on its library's own threads is held to the
    busy-core rule of fastmath's pool (_parallel.OwnThreads), passing calls to the next
    kernel of the row while its splits lose, where that kernel computes the very same
    bits (torch's erf and mkl's are both VML's), so ``auto``'s results never depend on the
    load; the log names the row's backend either way. A backend the user chose runs as
    it is."""
    out = list(chain)
    for i, (name, kernel) in enumerate(chain[:-1]):
        grain = getattr(backends.get(name), "own_threads", None)
        if (grain is not None and spec.kind in ("unary", "binary", "elementwise")
                and getattr(kernel, "runtime_pace", -1) < 0  # not on the library's threads
                and _same_bits(kernel, chain[i + 1][1], spec, dtype)):
            out[i] = (name, _parallel.OwnThreads(kernel, grain, chain[i + 1][1]))
    return tuple(out)


def _same_bits(first, then, spec, dtype) -> bool:
    """Whether two kernels give bitwise the same results on the row's sample domain."""
    try:
        with np.errstate(all="ignore"):
            ins = spec.sample(4096, dtype, np.random.default_rng(0))
            outs = [np.empty_like(ins[0]) for _ in (first, then)]
            if any(k(*ins, o) is NotImplemented for k, o in zip((first, then), outs)):
                return False
    except Exception:  # noqa: BLE001 - a kernel that cannot run here is no match
        return False
    return outs[0].tobytes() == outs[1].tobytes()


def _build(sel, spec, dtype):
    if sel == "auto":
        if _learn.state.mode == "off":
            return ()  # FASTMATH_AUTO=off: the reference at every size
        rows = []
        for min_size, names in _calibration.rows(spec.name, dtype):
            # no names: the reference itself measured fastest at these sizes
            chain = tuple((n, k) for n in dict.fromkeys(names + ("numpy",))
                          if (k := _kernel(n, spec)) is not None
                          and _sound(n, spec, dtype, k, False)) if names else ()
            chain = _auto_chain(chain, spec, dtype)
            rows.append((min_size, chain))
        if rows:
            e = _calibration.entry(spec.name, dtype)
            _log.logger.info(
                "auto's table for %s(%s): %s%s", spec.name, dtype,
                "guessed (the built-in defaults, measured on another machine)"
                if e.source == "defaults" else f"from a calibration run ({e.source})",
                f"; learned on this program's calls from {_LEARN_FROM} elements"
                if _learn_state.on and dtype in _LEARNED else "")
        return tuple(reversed(rows))
    chain = []
    why = backends.why_unavailable(sel)
    if why is not None:
        if strict():
            raise FallbackError(f"backend {sel!r} is unavailable: {why} (FASTMATH_STRICT=1 "
                                "forbids falling back to numpy)")
        if sel == state.default:
            # FASTMATH_BACKEND's, found unusable only now (torch-cuda with torch installed
            # but no GPU: that takes importing torch, which import fastmath does not do)
            _overrule(sel, why)
            return None
        _log.logger.debug("%s is unavailable (%s): %s falls back to numpy", sel, why, spec.name)
        _warn_once(("unavailable", sel),
                   f"fastmath: backend {sel!r} is unavailable ({why}); numpy runs instead. "
                   f"Set FASTMATH_BACKEND to one of: {', '.join(available_backends())}")
    else:
        k = _kernel(sel, spec)
        if k is not None and _sound(sel, spec, dtype, k, True):
            chain.append((sel, k))
    if sel != "numpy":
        chain.append(("numpy", _kernel("numpy", spec)))
    return tuple(chain)


def plan(spec, dtype, size: int, layout: int = 0):
    """The (name, kernel) pairs to try in order for this call; empty means "call numpy".

    ``dtype`` is the loop's dtype, as a string; ``layout`` 0 for contiguous operands, 1
    otherwise (``auto`` learns each apart: dispatch/_learn.py).
    """
    sel = current()
    key = (sel, spec.name, dtype)
    p = _plans.get(key)
    if p is None:
        p = _build(sel, spec, dtype)
        if p is None:  # the default was overruled just now: auto is in force
            return plan(spec, dtype, size)
        _plans[key] = p
        _log.plan_built(spec, sel, dtype, p)
    if sel != "auto":
        return p
    if size >= _LEARN_FROM and _learn_state.on and dtype in _LEARNED:
        key = (spec.name, dtype, size.bit_length() >> 1, layout)
        s = _settled.get(key)
        if s is not None:
            s.left -= 1
            if s.left > 0:
                return s.chain
        return _learn.choose(key, spec, dtype, size, arms)
    for min_size, chain in p:
        if size >= min_size:
            return chain
    return ()


def list_chain(sel, spec, per_array):
    """fastmath.foreach's chain under selection ``sel``: the ``(name, list kernel)`` pairs
    to try in order (a backend's optional ``foreach(spec)``, backends/_protocol.py's
    ``LIST_KERNEL``), with ``per_array`` (NumPy's call per array, which the front end hands
    in) behind any backend's but numpy's. Under ``auto``, numpy's alone: the list runs
    the arrays below :func:`small_size`, which ``auto`` leaves to the reference. Empty
    where the backend has no list kernel: each array then runs as ``fastmath.<name>``."""
    name = "numpy" if sel == "auto" else sel
    make = getattr(backends.get(name), "foreach", None)
    kernel = make(spec) if make is not None else None
    if kernel is None:
        return ()
    return ((name, kernel),) if name == "numpy" else ((name, kernel), ("numpy", per_array))


def small_size(spec) -> int:
    """Below this size ``auto`` calls the reference directly, whatever the dtype."""
    if _learn_state.mode == "off":
        return 1 << 62
    table = _calibration.smallest(spec.name)
    if not _learn_state.on or table < _LEARN_FROM:
        return table  # (the table decides below the sizes auto learns)
    return _learn.floor(spec.name)


def small_sizes(spec) -> dict:
    """{numpy dtype: size}: below these sizes ``auto`` calls the reference directly for
    operands of that dtype, where that is above :func:`small_size` (a dtype whose calls
    ``auto`` learned to leave to the reference further up than another's)."""
    if not _learn_state.on or _calibration.smallest(spec.name) < _LEARN_FROM:
        return {}
    return {np.dtype(d): n for d, n in _learn.dtype_floors(spec.name).items()}


def on_small_changed(hook) -> None:
    """Register a callable run when :func:`small_size` may have changed (``auto`` has
    learned that a size class is the reference's): front ends that cache it forget it."""
    _learn.on_floor(hook)


_LEARN_FROM = _learn.LEARN_FROM
_LEARNED = _learn.DTYPES
_learn_state = _learn.state
_settled = _learn.settled


class _Reference:
    """The reference ufunc run into the front end's output in the caller's thread: the
    baseline ``auto`` measures every backend against while it learns (NumPy acts on its
    FP errors itself, as in the numpy backend's small calls)."""

    __slots__ = ("ufunc",)
    any_strides = True

    def __init__(self, ufunc):
        self.ufunc = ufunc

    def __call__(self, *ins):
        self.ufunc(*ins[:-1], out=ins[-1])
        return backends.HANDLED


_arms: dict = {}  # (function, dtype) -> arms(): every cell of the pair shares its kernels


def arms(spec, dtype):
    """What ``auto`` may try for ``spec`` on ``dtype`` (see :func:`_arms_of`), built once
    per function and dtype: a kernel holds resources (the runtime's pacing records)."""
    key = (spec.name, dtype)
    found = _arms.get(key)
    if found is None:
        found = _arms[key] = _arms_of(spec, dtype)
    baseline, chains, deferred = found
    return baseline, dict(chains), list(deferred)


def _arms_of(spec, dtype):
    """What ``auto`` may try for ``spec`` on ``dtype`` (dispatch/_learn.py): (the baseline,
    {arm: chain}, arms deferred until their library is imported). The baseline is the
    reference itself for ufuncs, the numpy backend (NumPy's kernels) for the rest. Every
    backend arm passed the same checks as a table's row (a kernel, sound here); a backend
    off the CPU is not tried (host data would travel: only a measured row sends it)."""
    chains, deferred = {}, []
    if spec.kind in ("unary", "binary"):
        baseline = "reference"
        chains[baseline] = (("numpy", _Reference(spec.reference())),)
    else:
        baseline = "numpy"
    for name in backends.NAMES:
        b = backends.get(name)
        if getattr(b, "device", "cpu") != "cpu" or backends.why_missing(name) is not None:
            continue
        loaded = getattr(b, "loaded", None)
        if loaded is not None and not loaded():
            deferred.append(name)
            continue
        chain = _arm(spec, dtype, name)
        if chain:
            chains[name] = chain
    return baseline, chains, deferred


def _arm(spec, dtype, name):
    """The chain ``auto`` runs for arm ``name``, the numpy backend behind it; None if it
    has no sound kernel here. Built once per function, dtype and backend."""
    key = (spec.name, dtype, name)
    if key not in _arms:
        _arms[key] = _arm_of(spec, dtype, name)
    return _arms[key]


def _arm_of(spec, dtype, name):
    if backends.why_unavailable(name) is not None:
        return None
    k = _kernel(name, spec)
    if k is None or not _sound(name, spec, dtype, k, False):
        return None
    chain = ((name, k),) if name == "numpy" else ((name, k), ("numpy", _kernel("numpy", spec)))
    return _auto_chain(chain, spec, dtype)


def _guess(spec, dtype, size):
    """(what the table would run first at ``size``: a backend or "reference", the table's
    source: "defaults" or a calibration file's path)."""
    e = _calibration.entry(spec.name, dtype)
    row = e.row(size) if e is not None else None
    first = row[1][0] if row is not None and row[1] else "reference"
    return first, (e.source if e is not None else "defaults")


arms.build = _arm
arms.guess = _guess


def strict() -> bool:
    return _config.get().strict


def _env_default() -> str:
    """FASTMATH_BACKEND's backend, checked at each reading of the environment, as
    set_backend() checks its name, as far as that can be told without importing its
    library (import fastmath imports no torch): one that cannot run here warns once, at
    the user's import (or reload) line, and ``auto`` is in force instead; one found
    unusable only at its first call (no GPU for torch-cuda) does the same there. Under
    FASTMATH_STRICT=1 it stays in force, so that its calls raise FallbackError rather
    than run elsewhere."""
    cfg = _config.get()
    name = cfg.backend
    why = None if name == "auto" else backends.why_missing(name)
    if why is None:
        return name
    if cfg.strict:
        _say_unavailable(name, why, "FASTMATH_STRICT=1 keeps it, so each call raises "
                                    "fastmath.FallbackError")
        return name
    _overrule(name, why)
    return "auto"


def _overrule(name, why):
    _config.overrule("FASTMATH_BACKEND", f"unavailable here ({why})", backend="auto")
    state.default = "auto"
    _plans.clear()
    _say_unavailable(name, why, "using 'auto'")


def _say_unavailable(name, why, fix):
    cfg = _config.get()
    said = f"FASTMATH_BACKEND={cfg.sources.get('FASTMATH_BACKEND', name)!r} is unavailable here"
    warnings.warn(f"{said} ({why}); {fix}. Available here: {', '.join(available_backends())}",
                  _config.ConfigWarning, stacklevel=_fpe.user_stacklevel())


def _reload():
    _plans.clear()
    _arms.clear()
    _warned.clear()
    _probed.clear()
    state.default = _env_default()


state.default = _env_default()
_config.on_reload(_reload)
