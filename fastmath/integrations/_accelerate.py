"""``fastmath.accelerate``: a function's own NumPy/SciPy calls, run through fastmath.

Applied to a Python function, it returns a new function object with the same code,
defaults, closure and metadata, whose globals are a view of its module's globals: each
look-up reads the module as it is at that moment (later assignments are seen), and a
value that is ``numpy``, ``scipy``, ``scipy.special``, or a function fastmath accelerates
(``from numpy import exp``, ``from scipy.special import erf``) comes back as fastmath's
counterpart. The function's own name comes back as the accelerated function, so recursion
stays accelerated. Functions, lambdas and comprehensions defined inside it share the view.
The module, the original function and every other thread are untouched.

What it cannot reroute, by construction:

- functions it calls that live elsewhere: a third-party library's ``np.exp`` (use
  :func:`fastmath.patch`), or another function of the same module (accelerate it too);
- values reached other than as globals: a closure variable, a default argument, an
  attribute (``self.np``), a module imported inside the function body;
- functions that assign module globals (``global x``): such an assignment would land in
  the view instead of the module, so ``accelerate`` refuses them with a TypeError.

A global look-up costs a Python-level call (about 0.1-0.3 us) instead of a dict probe:
negligible next to array work, noticeable in a tight scalar loop.
"""
from __future__ import annotations

import dis
import functools
import inspect
import sys
import types

from .. import _registry
from ..frontends._functions import FUNCTIONS

_substitutes: dict = {}  # id(object) -> (object, fastmath's counterpart)
_has_scipy = False
# "numpy", "scipy.special" -> a callable giving the public module that stands in for it:
# handed down by the public face (see stand_ins), which this layer does not import
_namespaces: dict = {}


def stand_ins(numpy, special) -> None:
    """Name the modules that stand in for ``numpy`` and ``scipy.special`` (callables that
    return them: ``fastmath`` and ``fastmath.special``, the latter imported on demand)."""
    _namespaces.update({"numpy": numpy, "scipy.special": special})


def _face(name):
    return _namespaces[name]()


def _table() -> dict:
    """NumPy/SciPy objects and their fastmath counterparts, keyed by identity."""
    global _has_scipy
    if _substitutes and (_has_scipy or "scipy.special" not in sys.modules):
        return _substitutes
    import numpy

    table = {id(numpy): (numpy, _face("numpy"))}
    _has_scipy = "scipy.special" in sys.modules
    for spec in _registry.ROWS:
        if spec.ref.startswith("numpy:") or _has_scipy:
            original, ours = spec.reference(), FUNCTIONS[spec.name]
            table[id(original)] = (original, ours)
            table[id(ours)] = (ours, ours)
    if _has_scipy:
        import scipy
        import scipy.special

        special = _face("scipy.special")
        table[id(scipy.special)] = (scipy.special, special)
        table[id(scipy)] = (scipy, _scipy_view(scipy, special))
    _substitutes.clear()
    _substitutes.update(table)
    return _substitutes


def _scipy_view(scipy, special):
    """``scipy`` with ``fastmath.special`` as its ``special`` attribute."""
    view = types.ModuleType(scipy.__name__, scipy.__doc__)
    view.special = special
    view.__getattr__ = functools.partial(getattr, scipy)
    return view


def counterpart(obj):
    """fastmath's object for a NumPy/SciPy object it accelerates, else None."""
    hit = _table().get(id(obj))
    return hit[1] if hit is not None and hit[0] is obj else None


class _Globals(dict):
    """An accelerated function's globals: its module's, with fastmath in place of NumPy.

    Only the names set at creation live in this dict; every other look-up misses and
    reads the module through ``__missing__`` (a KeyError there sends the interpreter
    on to the builtins).
    """

    __slots__ = ("module", "own")

    def __missing__(self, name):
        value = self.module[name]
        if value is self.own[0]:
            return self.own[1]
        hit = _table().get(id(value))
        return hit[1] if hit is not None and hit[0] is value else value


def _writes_globals(code) -> bool:
    for ins in dis.get_instructions(code):
        if ins.opname in ("STORE_GLOBAL", "DELETE_GLOBAL"):
            return True
    return any(isinstance(c, types.CodeType) and _writes_globals(c) for c in code.co_consts)


def _reroute(fn):
    if _writes_globals(fn.__code__):
        raise TypeError(
            f"fastmath.accelerate cannot reroute {fn.__qualname__}(): it assigns module "
            "globals (a 'global' statement), which would no longer reach its module. "
            "Use fastmath.patch(), or 'import fastmath as np' in that module")
    _table()
    module = fn.__globals__
    view = _Globals()
    for name in ("__builtins__", "__name__"):
        if name in module:
            view[name] = module[name]
    view.module = module
    new = types.FunctionType(fn.__code__, view, fn.__name__, fn.__defaults__, fn.__closure__)
    new.__kwdefaults__ = fn.__kwdefaults__
    functools.update_wrapper(new, fn)
    view.own = (fn, new)
    return new


def _scoped(fn, name):
    from ..dispatch._selection import backend

    scope = backend(name)  # checks the name now, not at the first call
    if inspect.iscoroutinefunction(fn):
        @functools.wraps(fn)
        async def coroutine(*args, **kwargs):
            with backend(name):
                return await fn(*args, **kwargs)
        return coroutine
    return scope(fn)


def accelerate(fn=None, *, backend=None, elementwise=False, rows=False, verify=None):
    """Run a function's NumPy and scipy.special calls through fastmath.

    ``@fastmath.accelerate`` on a function makes its global references to ``numpy``,
    ``scipy``, ``scipy.special`` and to functions imported from them (``from numpy
    import exp``, ``import scipy.special as sc``) resolve to fastmath's while it runs,
    without changing its module or any other thread. ``backend=`` also runs each call
    with that backend (see :class:`fastmath.backend`). Methods, ``staticmethod`` and
    ``classmethod`` objects, closures, generators, coroutines and recursion keep working.

    ``elementwise=True`` or ``rows=True`` declares more about the function, and fastmath
    then runs it over cache-sized blocks on every core (see docs/blockwise.md):

    - ``elementwise=True``: each output element depends only on the matching elements
      of the array arguments, broadcast together as NumPy broadcasts them
      (``exp(-x*x) * erf(y)``; not ``x - x.mean()``, not ``np.sort(x)``);
    - ``rows=True``: each output row depends only on the matching rows (first axis) of
      the array arguments whose first axis has the first array argument's length; other
      arguments are passed whole (per-sample log-likelihoods, ``logsumexp(..., axis=1)``).

    Results, dtypes, exceptions and floating-point warnings (once per call) are the
    unblocked call's; small inputs run unblocked. ``verify=True`` (or
    ``FASTMATH_VERIFY=1``) compares the first blocked call with the unblocked one, bit
    for bit on the numpy backend, and raises ValueError naming the function where they
    differ. Generators and coroutines are refused in these modes.

    ``fastmath.accelerate(numpy.exp)`` returns ``fastmath.exp``; any other NumPy or
    SciPy function (one fastmath does not accelerate) is returned unchanged.

    Calls made inside other modules (a library's own ``np.exp``) are not rerouted; for
    those, use :func:`fastmath.patch`.

    Parameters
    ----------
    fn : callable, optional
        The function; without it, ``accelerate(...)`` returns a decorator.
    backend : str, optional
        A backend for the duration of each call.
    elementwise, rows : bool
        Declare the function elementwise, or row by row, to run it block by block.
    verify : bool, optional
        Check the first blocked call against the unblocked one; default
        ``FASTMATH_VERIFY``.

    Examples
    --------
    >>> import numpy as np, fastmath
    >>> @fastmath.accelerate
    ... def softplus(x):
    ...     return np.log1p(np.exp(x))
    >>> float(softplus(np.float64(0.0)))  # log(2)
    0.6931471805599453
    >>> fastmath.accelerate(np.exp) is fastmath.exp
    True
    >>> @fastmath.accelerate(elementwise=True)
    ... def gauss(x):
    ...     return np.exp(-0.5 * x * x)
    >>> x = np.linspace(-3, 3, 1_000_000)
    >>> bool((gauss(x) == np.exp(-0.5 * x * x)).all())
    True
    """
    opts = dict(backend=backend, elementwise=elementwise, rows=rows, verify=verify)
    if elementwise and rows:
        raise ValueError("fastmath.accelerate: elementwise=True and rows=True exclude each "
                         "other; choose the one the function keeps")
    if fn is None:
        return functools.partial(accelerate, **opts)
    if isinstance(fn, (staticmethod, classmethod)):
        return type(fn)(accelerate(fn.__func__, **opts))
    if isinstance(fn, types.MethodType):
        return types.MethodType(accelerate(fn.__func__, **opts), fn.__self__)
    if not callable(fn):
        raise TypeError(f"fastmath.accelerate expects a function, got {type(fn).__name__}")
    new = counterpart(fn)
    if new is None:
        library = (getattr(fn, "__module__", None) or "").partition(".")[0] in ("numpy", "scipy")
        # a NumPy/SciPy function fastmath does not accelerate is returned as it is:
        # rerouting its own internals would be patch()'s job, not this decorator's
        new = _reroute(fn) if isinstance(fn, types.FunctionType) and not library else fn
    if elementwise or rows:
        from . import _blockwise

        raw = fn if getattr(new, "__wrapped__", None) is fn else None  # rerouted from fn
        new = _blockwise.wrap(new, "rows" if rows else "elementwise", verify, raw, accelerate)
    return new if backend is None else _scoped(new, backend)
