"""``fastmath.patch()``: fastmath's functions in place of NumPy's and SciPy's, process-wide.

While a patch is active, ``numpy.exp`` *is* ``fastmath.exp``, ``scipy.special.erf`` is
``fastmath.erf``, and so on for every row of the registry. Code fastmath does not control
(scikit-learn, pandas, a colleague's module) then runs through fastmath wherever it looks
the name up at call time, as ``np.exp(x)`` does. A name bound before the patch began
(``from numpy import exp`` at import time, a ufunc stored in a dict) keeps the original:
nothing but the module attributes is touched.

Patches nest and repeat: one process-wide count decides, so the originals come back,
identical objects, when the last active patch ends, exception or not. fastmath's own code
never sees the swap: it reads NumPy through ``fastmath._numpy``, and every reference is
resolved (``Spec.reference``) before the first swap. A module first imported during the
patch that bound fastmath's object (``from numpy import exp``) gets the original back too,
and the originals stay picklable throughout (ufuncs by name, as NumPy pickles them; NumPy's
functions by the module that defines them, ``_pickle_by_definition``). A compiled
extension module imported during the patch sees the originals while it initialises, and
so does NumPy's C code that registers loops when it is called (``_Window``,
``_REGISTRARS``): such code uses the ufuncs it looks up by name at C level. Where SciPy
keys a table by function (its array-API capabilities), fastmath's object gets the
original's entry (``_Tables``).

``mode="loops"`` (fastmath/integrations/_loopmode.py) reaches further: it replaces the inner loops of
NumPy's ufuncs themselves, so no name changes at all; ``mode="both"`` does both.
"""
from __future__ import annotations

import contextlib
import copyreg
import importlib
import os
import sys
import threading

from . import _loopmode
from .. import _registry
from ..frontends._functions import FUNCTIONS
from ._nested import Nested

MODES = ("functions", "loops", "both")
_saved: list = []  # (module, attribute, original object, was it in the module's __dict__,
#                     fastmath's object)
_modules_before: set = set()  # sys.modules' names when the swap began
_numpy_reduce = None  # NumPy's pickle reducer for ufuncs, while ours stands in
_renamed: list = []  # (original, its __module__ before the patch): _pickle_by_definition

# C functions that look NumPy's ufuncs up by name when they are *called* (not when their
# module initialises) and register loops on what they find, unchecked or with
# PyObject_TypeCheck: NumPy's test DType (``_get_sfloat_dtype``: "numpy.hypot was not a
# ufunc!"). C code asks the module as Python code does (PyObject_GetAttrString), so no
# patch of the name can tell the two apart; such a function runs inside the window
# instead. NumPy 2.x's other look-ups by name at run time (npy_cache_import_runtime) are
# of names the patch leaves alone; an extension that calls PyUFunc_AddLoopsFromSpecs
# with a patched name after its import is not covered.
_REGISTRARS = ("numpy._core._multiarray_umath:_get_sfloat_dtype",)


_DEFINED_IN = "numpy._core._multiarray_umath"  # where NumPy's ufuncs live (umath re-exports)


def _reduce_ufunc(func):
    """Pickle a ufunc as NumPy does, by name, even while the name points at fastmath."""
    import numpy

    name = func.__name__
    if getattr(numpy, name, None) is func:
        return name  # what NumPy's own reducer returns
    from numpy._core import umath

    if getattr(umath, name, None) is func:
        # numpy.core._ufunc_reconstruct is NumPy's own unpickler for ufuncs (kept for
        # old pickles): the result loads anywhere NumPy does, fastmath or not. The module
        # named is the one NumPy's ufuncs are defined in, not umath: while patched, an old
        # pickle naming umath loads as what the name is now (_old_pickles), this one as
        # the very object pickled.
        from numpy.core import _ufunc_reconstruct

        return _ufunc_reconstruct, (_DEFINED_IN, name)
    return name  # SciPy's: pickle finds them in their own modules


def _swap_in() -> None:
    targets = []
    for spec in _registry.ROWS:
        original = spec.reference()
        module_name, _, attr = spec.ref.partition(":")
        module = importlib.import_module(module_name)
        targets.append((module, attr, original, attr in vars(module),
                        FUNCTIONS[spec.name]))
    global _numpy_reduce
    import numpy

    _modules_before.update(sys.modules)
    _numpy_reduce = copyreg.dispatch_table.get(numpy.ufunc)
    copyreg.pickle(numpy.ufunc, _reduce_ufunc)
    core = importlib.import_module("numpy.core")
    reconstruct = vars(core).get("_ufunc_reconstruct")
    if reconstruct is not None:
        swapped = {id(t[2]): (t[2], t[4]) for t in targets}
        targets.append((core, "_ufunc_reconstruct", reconstruct, True,
                        _old_pickles(reconstruct, swapped)))
    targets += _registrars()
    _pickle_by_definition(targets)
    _tables.register(targets)
    with _window.lock:
        for module, attr, original, own, replacement in targets:
            _saved.append((module, attr, original, own, replacement))
            if not _window.inside:  # else the window's end puts it in place
                setattr(module, attr, replacement)
    _extensions.install()


def _registrars() -> list:
    """Swap targets that run each of ``_REGISTRARS`` present here inside the window."""
    targets = []
    for ref in _REGISTRARS:
        module_name, _, attr = ref.partition(":")
        module = sys.modules.get(module_name)
        func = getattr(module, attr, None)
        if func is not None:  # else another NumPy, or not imported: nothing has bound it
            targets.append((module, attr, func, attr in vars(module), _in_window(func)))
    return targets


def _in_window(func):
    """``func``, called with NumPy's and SciPy's own objects in their modules."""
    import functools

    @functools.wraps(func)
    def in_window(*args, **kwargs):
        with _window.originals():
            return func(*args, **kwargs)
    return in_window


def _pickle_by_definition(targets) -> None:
    """Let the originals that are not ufuncs pickle by reference during the patch.

    Pickle finds a function by ``__module__`` and ``__qualname__`` and insists that the name
    gives back the very object; NumPy's ``sinc`` and ``i0`` say ``numpy``, where the name
    is fastmath's now ("it's not the same object as numpy.sinc"; SciPy holds the original
    as ``scipy.special.sinc``). While patched they name the module that defines them,
    which still holds them, and so load as themselves anywhere. (Ufuncs pickle through
    ``_reduce_ufunc``; SciPy's functions already name their defining modules.)
    """
    import numpy

    for module, attr, original, _, _ in targets:
        if isinstance(original, numpy.ufunc) or getattr(original, "__qualname__", None) != attr \
                or getattr(original, "__module__", None) != module.__name__:
            continue
        # NumPy's dispatchers keep the undecorated function, SciPy's wrappers __wrapped__
        inner = getattr(original, "_implementation", None) or \
            getattr(original, "__wrapped__", None)
        home = sys.modules.get(getattr(inner, "__module__", None) or "")
        if home is not None and home is not module and getattr(home, attr, None) is original:
            _renamed.append((original, original.__module__))
            original.__module__ = home.__name__


class _Tables:
    """fastmath's objects as keys wherever SciPy keys a table by the function it swapped.

    SciPy's tests find a function's array-API capabilities by the function object
    (``make_xp_test_case(logsumexp)``), and under the patch the name they imported is
    fastmath's: a KeyError at collection. fastmath's ufuncs already compare and hash as
    their references do; its other functions get the original's entry while patched.
    """

    # (module, attribute) of each dict keyed by function
    TABLES = (("scipy._lib._array_api", "xp_capabilities_table"),)

    def __init__(self):
        self.added: list = []  # (table, key) put in by register

    def register(self, targets):
        for module_name, attr in self.TABLES:
            table = getattr(sys.modules.get(module_name), attr, None)
            if not isinstance(table, dict):
                continue
            for _, _, original, _, replacement in targets:
                try:
                    if original in table and replacement not in table:
                        table[replacement] = table[original]
                        self.added.append((table, replacement))
                except TypeError:  # unhashable
                    continue

    def remove(self):
        while self.added:
            table, key = self.added.pop()
            table.pop(key, None)


_tables = _Tables()


def _old_pickles(reconstruct, swapped: dict):
    """NumPy's unpickler of pre-1.20 ufunc pickles (``numpy.core._ufunc_reconstruct``), for
    the patch: a ufunc the patch swapped loads as what its name is now, as a pickle by name
    does, so an old pickle of ``numpy.cos`` loads as ``numpy.cos`` (NumPy's
    test_pickle_withstring). A pickle of an original that ``_reduce_ufunc`` made during the
    patch names NumPy's defining module and loads as that very original. The function
    pickles under NumPy's own name, so a pickle of it loads where fastmath is absent."""

    def _ufunc_reconstruct(module, name):
        func = reconstruct(module, name)
        if module == _DEFINED_IN:  # made by _reduce_ufunc: the very object pickled
            return func
        pair = swapped.get(id(func))
        return pair[1] if pair is not None and pair[0] is func else func
    _ufunc_reconstruct.__module__ = reconstruct.__module__
    _ufunc_reconstruct.__qualname__ = reconstruct.__qualname__
    _ufunc_reconstruct.__doc__ = reconstruct.__doc__
    return _ufunc_reconstruct


class _Window:
    """The originals back in their modules while a compiled extension module initialises.

    Extension modules look NumPy's ufuncs up by name when they are imported, and use what
    they find as a ufunc at C level, unchecked: ml_dtypes (which JAX and TensorFlow import)
    and NumPy's own ``_rational_tests`` register their loops on ``numpy.square``,
    ``numpy.logaddexp``, ... that way, and found fastmath's Python objects there while a
    patch was active: "AssertionError: ufunc logaddexp takes -1913271464 arguments", or
    worse, a read of memory that is not a ufunc. While one initialises, every thread sees
    NumPy's and SciPy's own objects (the same results, only not through fastmath); the
    swap is put back when the last such import ends, if a patch is active then.
    """

    def __init__(self):
        self.lock = threading.RLock()
        self.inside: dict = {}  # thread ident -> extension imports it has under way

    def after_fork_in_child(self):
        """The child has only the thread that forked: imports the parent's other threads
        had under way (the lock held, the originals in place) will not end there."""
        self.lock = threading.RLock()
        me = threading.get_ident()
        mine = self.inside.get(me, 0)
        if self.inside and not mine:
            for module, attr, _, _, replacement in _saved:
                setattr(module, attr, replacement)
        self.inside = {me: mine} if mine else {}

    @contextlib.contextmanager
    def originals(self):
        me = threading.get_ident()
        with self.lock:
            if not self.inside:
                for module, attr, original, _, _ in _saved:
                    setattr(module, attr, original)
            self.inside[me] = self.inside.get(me, 0) + 1
        try:
            yield
        finally:
            with self.lock:
                if self.inside[me] > 1:
                    self.inside[me] -= 1
                else:
                    del self.inside[me]
                if not self.inside:  # the patch active now, if any (_saved is empty if none)
                    for module, attr, _, _, replacement in _saved:
                        setattr(module, attr, replacement)


_window = _Window()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_window.after_fork_in_child)


class _Extensions:
    """importlib's loader of compiled extension modules, run inside ``_window.originals``
    while a patch is active (its ``create_module`` runs a single-phase module's init, its
    ``exec_module`` a multi-phase one's)."""

    def __init__(self):
        self.saved = None

    def install(self):
        from importlib.machinery import ExtensionFileLoader as loader

        if self.saved is not None:
            return
        create, execute = loader.create_module, loader.exec_module
        self.saved = (create, execute)

        def create_module(self, spec):
            with _window.originals():
                return create(self, spec)

        def exec_module(self, module):
            with _window.originals():
                return execute(self, module)
        create_module.__doc__, exec_module.__doc__ = create.__doc__, execute.__doc__
        loader.create_module, loader.exec_module = create_module, exec_module

    def remove(self):
        from importlib.machinery import ExtensionFileLoader as loader

        if self.saved is not None:
            loader.create_module, loader.exec_module = self.saved
            self.saved = None


_extensions = _Extensions()


def _unbind_in_new_modules(originals: dict) -> None:
    # Modules imported during the patch may hold fastmath's objects under their own names
    # (``from numpy import exp``, a namespace copied into a module object): give them the
    # originals. Dicts and classes inside them are not searched.
    import types

    namespaces = []
    registered = {id(m) for m in list(sys.modules.values())}
    for name in [n for n in list(sys.modules) if n not in _modules_before]:
        module = sys.modules.get(name)
        if isinstance(module, types.ModuleType):
            namespaces.append(vars(module))
            namespaces += [vars(v) for v in list(vars(module).values())
                           if isinstance(v, types.ModuleType) and id(v) not in registered]
    for namespace in namespaces:
        for key, value in list(namespace.items()):
            original = originals.get(id(value))
            if original is not None and original[0] is value:
                namespace[key] = original[1]


def _restore() -> None:
    global _numpy_reduce
    originals = {}
    _extensions.remove()
    with _window.lock:
        while _saved:
            module, attr, original, own, replacement = _saved.pop()
            originals[id(replacement)] = (replacement, original)
            if own:
                setattr(module, attr, original)
            else:  # it came from the module's __getattr__: let it do so again
                delattr(module, attr)
    _unbind_in_new_modules(originals)
    _modules_before.clear()
    _tables.remove()
    while _renamed:
        original, module_name = _renamed.pop()
        original.__module__ = module_name
    if _numpy_reduce is not None:
        import numpy

        copyreg.pickle(numpy.ufunc, _numpy_reduce)
        _numpy_reduce = None


def _modes(mode: str) -> tuple:
    if mode not in MODES:
        raise ValueError(f"fastmath.patch: mode must be one of {', '.join(map(repr, MODES))}, "
                         f"got {mode!r}")
    return {"functions": ("functions",), "loops": ("loops",),
            "both": ("functions", "loops")}[mode]


_swapped = Nested(_swap_in, _restore,
                  "fastmath.patch.stop() called with no active patch")
_start_functions, _stop_functions = _swapped.start, _swapped.stop


def start(mode: str = "functions") -> None:
    """Begin a patch of the given mode (or count one more user of it)."""
    parts = _modes(mode)
    if "loops" in parts and not _loopmode.available():
        raise RuntimeError(f"fastmath.patch(mode={mode!r}) is unavailable: "
                           f"{_loopmode.why_unavailable()}")
    if "functions" in parts:
        _start_functions()
    if "loops" in parts:
        try:
            _loopmode.start()
        except BaseException:
            if "functions" in parts:
                _stop_functions()
            raise


def stop(mode: str = "functions") -> None:
    """End one :func:`start` of that mode; the last one to end puts the originals back."""
    parts = _modes(mode)
    if "loops" in parts:
        _loopmode.stop()
    if "functions" in parts:
        _stop_functions()


def active(mode: str = "functions") -> bool:
    """Whether a patch of that mode is in place now (``"both"``: both kinds are)."""
    flags = {"functions": _swapped.active(), "loops": _loopmode.active()}
    return all(flags[part] for part in _modes(mode))


class patch(contextlib.ContextDecorator):
    """Run NumPy's and SciPy's accelerated functions through fastmath, process-wide.

    A context manager (or decorator). With ``mode="functions"`` (the default) it swaps
    ``fastmath.exp`` in for ``numpy.exp``, ``fastmath.erf`` for ``scipy.special.erf``, ...
    for every accelerated function, and puts the original objects back on exit, even on an
    exception. Only look-ups made while the patch is active are affected: a module that
    did ``from numpy import exp`` before keeps NumPy's function.

    With ``mode="loops"`` it replaces, instead, the float32/float64 inner loops inside
    NumPy's ufuncs and the accelerated SciPy ufuncs (and NumPy's int64 arithmetic and
    comparisons, and the logical loops of bool masks) with loops that run NumPy's own loop
    on every core for long arrays. Every caller reaches them (operators, names bound at
    import, pandas and xarray objects), results stay NumPy's bit for bit, and exit puts
    the original loops back. It needs the compiled extension ``fastmath.integrations._loops``;
    :func:`fastmath.patch.why_unavailable` says why it is missing. ``mode="both"`` does both.

    Uses nest; the originals return when the outermost of a mode ends.
    ``fastmath.patch.start(mode)`` and ``fastmath.patch.stop(mode)`` do the same without a
    ``with`` block. The patch is seen by every thread; to change the backend for one
    thread only, use :class:`fastmath.backend`.

    Parameters
    ----------
    mode : {"functions", "loops", "both"}, optional
        What is replaced: NumPy's and SciPy's function objects, their ufuncs' inner loops,
        or both.

    Examples
    --------
    >>> import numpy, fastmath
    >>> with fastmath.patch():
    ...     numpy.exp is fastmath.exp
    True
    >>> numpy.exp is fastmath.exp
    False
    """

    start = staticmethod(start)
    stop = staticmethod(stop)
    active = staticmethod(active)
    why_unavailable = staticmethod(_loopmode.why_unavailable)

    def __init__(self, mode: str = "functions"):
        _modes(mode)
        self.mode = mode

    def __enter__(self):
        start(self.mode)
        return self

    def __exit__(self, *exc):
        stop(self.mode)
        return False

    def __repr__(self):
        return "fastmath.patch()" if self.mode == "functions" else \
            f"fastmath.patch(mode={self.mode!r})"
