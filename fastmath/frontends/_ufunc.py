"""The ufunc object: what ``fastmath.exp``, ``fastmath.erf``, ... are, and their fast path.

A call with no options whose operands are small (NumPy and Python scalars, 0-d arrays,
arrays and short lists below ``auto``'s smallest accelerated size) is the reference's at
once under ``auto``: the whole overhead is a type check, a size and a context-variable
read. Every other call goes through the one pipeline in ``_pipeline.py``, which holds
NumPy's semantics for every arity.
"""
from __future__ import annotations

import functools

from .._numpy import np

from ..dispatch import _alloc, _chain, _config, _fpe, _learn, _log, _parallel, _selection
from . import _frames, _pipeline

try:  # the fast path in C (fastmath/frontends/_hot.c), an optional extension
    from ._hot import direct as _direct, hot as _native_hot, vectorcalled as _vectorcalled
    from ..dispatch._runtime import unary as _runtime_unary, vml_entry as _runtime_vml
except ImportError:
    _native_hot = _runtime_unary = _runtime_vml = _vectorcalled = _direct = None

_ndarray = np.ndarray
_current = _selection.current
_scoped_get = _selection._scoped.get
_state = _selection.state
_log_state = _log.state
_instances: list = []
_LEAN = 10  # the index of _hot.c's list of the calls it makes itself
_SMALLS = 14  # ... and of its sizes by dtype
_AUTOLEAN = 15  # ... and of the calls it makes itself under auto (numpy backend, reference)
_REPORT = 16  # ... and of what acts on those calls' FP flags
_FORCED = 17  # ... and of the VML calls it makes itself under a backend chosen by name
_NEED = 19  # ... and of what NumPy's error state asks of them (_fpe.need)
_DERIVE = 21  # ... and of what reports their FP flags from input and output
_LEARNED = {np.dtype(d): d for d in _learn.DTYPES}
_VML_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))  # what VML's calls take
_by_name: dict = {}  # registry name -> its instance: what a pickled one is found by
_BIG = 1 << 62
# types whose value is one element: sized without a call on the fast path
_ONE = dict.fromkeys((float, int, complex, bool, *{np.dtype(c).type for c in "?bhilqBHILQefdgFDG"}), 1)


def _short(xs, small, smalls) -> bool:
    """Whether every operand is a scalar, 0-d or small array, or a short flat list
    (``smalls``: {dtype: size}, an array of that dtype below it is small too)."""
    for x in xs:
        tx = type(x)
        if tx is _ndarray:
            n = x.size
            if n >= small and n < smalls.get(x.dtype, 0):
                continue
        elif tx is list:
            n = len(x) if not x or type(x[0]) in _ONE else _BIG
        else:
            n = _ONE.get(tx, _BIG)
        if n >= small:
            return False
    return True


class _Doc:
    """The class's own docstring on the class, the reference's on each instance."""

    def __init__(self, doc):
        self.doc = doc

    def __get__(self, obj, cls=None):
        return self.doc if obj is None else obj.reference.__doc__


class Ufunc(functools.partial):
    """A NumPy-compatible ufunc that runs on the backend fastmath selects.

    ``fastmath.exp``, ``fastmath.log``, ``fastmath.erf``, ... are instances, one per
    registry row. Calls take exactly the reference ufunc's arguments
    (``x, /, out=None, *, where=True, casting="same_kind", order="K", dtype=None,
    subok=True``) and return what it returns; every attribute fastmath does not define
    (``nin``, ``types``, ``reduce``, ``outer``, ...) is the reference's own, and so is
    ``__doc__``: its examples are NumPy's/SciPy's, tested by them, and not run again
    here.

    Examples
    --------
    >>> import numpy, fastmath
    >>> fastmath.exp.reference is numpy.exp
    True
    >>> x = numpy.array([0.0, 1.0, -numpy.inf])
    >>> fastmath.exp(x)
    array([1.        , 2.71828183, 0.        ])
    >>> fastmath.exp(numpy.int8(1)).dtype  # numpy's type resolution: int8 -> float16
    dtype('float16')
    >>> with numpy.errstate(divide="raise"):
    ...     fastmath.log(numpy.zeros(3))
    Traceback (most recent call last):
    ...
    FloatingPointError: divide by zero encountered in log
    """

    # An instance is called through functools.partial's C call slot, straight into the
    # closure ``_hot`` makes: a class-level __call__ would cost a slot lookup and an
    # argument tuple and dict on every call, and reading attributes of the instance (whose
    # class has __getattr__) costs more than a closure's variables, several times NumPy's
    # whole scalar call. With the extension built, that slot is entered by vectorcall
    # (_hot.vectorcalled: Python 3.10 and 3.11 do not pass partial's on to a subclass), so
    # a call makes no argument tuple either, and an instance's own vectorcall enters the
    # C fast path at once (_hot.direct), without partial's in between.
    # With the extension built, the closure is entered only for what the C fast path
    # (_hot.c) does not answer: it reads the same variables from ``_native``.
    _nin = 1  # operands the C fast path takes; 0: none, the closure is entered at once
    _native = None

    def __init_subclass__(cls, **kwargs):
        # A subclass's own docstring would hide the reference's on its instances (SciPy's
        # tests read ``xlogy.__doc__`` for the note SciPy adds to it at import)
        super().__init_subclass__(**kwargs)
        if isinstance(cls.__dict__.get("__doc__"), str):
            cls.__doc__ = _Doc(cls.__doc__)
        if _vectorcalled is not None:
            _vectorcalled(cls)

    def __new__(cls, spec):
        self = super().__new__(cls, cls._hot)
        fast = entry = self._hot()
        native = None
        if _native_hot is not None and cls._nin:
            # _hot.c's order: reference, small, ones, fallback, operands, ndarray, the
            # backend context variable, the selection state, "auto", the trimmer, the
            # numpy backend's calls it makes itself (_remember_lean), "numpy", the
            # one-thread context variable, the runtime's call, the sizes by dtype (_smalls),
            # the numpy backend's calls it makes itself under auto (_remember_auto), what
            # acts on the FP flags of those calls (_fpe.report for this function: __init__),
            # the VML calls it makes itself under a backend chosen by name
            # (_remember_forced), the runtime's VML call, what NumPy's error state asks of
            # it (__init__), NumPy's error state's context variable, what reports their
            # flags from input and output (__init__)
            native = [None, 0, {}, fast, cls._nin, _ndarray, _selection._scoped, _state, "auto",
                      _frames.trim_all, [], "numpy", _parallel.serial, _runtime_unary, {}, [],
                      None, [], _runtime_vml, None, _fpe._extobj, None]
            entry = _native_hot(native)
        self.__setstate__((entry, (), {}, None))  # (this empties the instance's __dict__)
        if native is not None:
            _direct(self)  # (after __setstate__, which sets partial's own call back)
        self._cells = dict(zip(fast.__code__.co_freevars, fast.__closure__))
        self._native = native
        return self

    def __init__(self, spec):
        self._spec = spec
        self.__name__ = self.__qualname__ = spec.named or spec.name  # the reference's
        if self._native is not None:
            self._native[_REPORT] = functools.partial(_fpe.report, self.__name__)
            # (None: the function raises none of NumPy's flags. The C side keeps what the
            # error state asks by the state object, shared by every function that can)
            self._native[_NEED] = functools.partial(_fpe.need, True) if spec.fpe else None
            self._native[_DERIVE] = self._report_derived
        # Below this size ``auto`` calls the reference at once. It comes from the cost
        # table, which is read at the first call, not at import: 0 until then, and 0
        # while debug logging is on, so that every call takes the logged path.
        self._small = 0
        _instances.append(self)
        _by_name[spec.name] = self
        self._resolved: dict = {}
        self._lean: dict = {}  # operand dtypes -> their result dtype (see _pipeline.lean)
        self._lean_seen: set = set()  # dtypes _remember_lean has looked at
        self._auto_seen: dict = {}  # (dtype, size class) -> the learned choice remembered
        self._forced_seen: set = set()  # (backend, dtype) _remember_forced has looked at
        module = spec.ref.partition(":")[0]
        # NumPy is imported already; SciPy is imported on the first call.
        self._ref = spec.reference() if module == "numpy" else self._load

    @classmethod
    def entry_code(cls):
        """The code object every call of this class's instances enters first."""
        return next(c for c in cls._hot.__code__.co_consts if hasattr(c, "co_freevars"))

    def _hot(self):
        """The function a call runs: the fast path, else ``_call``."""
        small, ones, ref, smalls = 0, {}, None, {}

        def fast(x, /, *args, **kwargs):
            # The hot path: the arguments are numpy's (see __signature__), parsed only
            # off this path. Each test here costs a sizeable part of NumPy's own scalar
            # call, so a scalar's is one lookup of its type (``ones``), not a size.
            if (((t := type(x)) is _ndarray and (x.size < small or x.size < smalls.get(
                    x.dtype, 0))) or t in ones) and not (args or kwargs):
                scoped = _scoped_get()
                if (_state.default if scoped is None else scoped) == "auto":
                    return ref(x)
            try:
                return self._call((x,), args, kwargs)
            except Exception as e:  # NumPy's error, without the frames below this one
                _frames.trim(e)
                raise
        return fast

    # the fast path's own variables, held in its closure cells; ``ones``: the types of one
    # element (_ONE) while one element is below ``small``, else none, so that the fast
    # path tests a scalar with a single lookup
    def _set_small(self, v):
        ones = _ONE if 1 < v else {}
        self._cells["small"].cell_contents = v
        if "ones" in self._cells:
            self._cells["ones"].cell_contents = ones
        if self._native is not None:
            self._native[1:3] = v, ones

    def _set_smalls(self, v):
        if "smalls" in self._cells:  # (the two-operand and plain functions' fast paths
            self._cells["smalls"].cell_contents = v  # in Python have none)
        if self._native is not None:
            self._native[_SMALLS] = v

    def _get_smalls(self):
        cell = self._cells.get("smalls")
        return {} if cell is None else cell.cell_contents

    def _set_ref(self, v):
        self._cells["ref"].cell_contents = v
        if self._native is not None:
            self._native[0] = v

    _small = property(lambda self: self._cells["small"].cell_contents, _set_small)
    # {dtype: size}: an array of that dtype below it is small too (auto learned that its
    # calls are the reference's further up than another dtype's)
    _smalls = property(_get_smalls, _set_smalls)
    _ref = property(lambda self: self._cells["ref"].cell_contents, _set_ref)

    @property
    def __signature__(self):
        import inspect

        return inspect.signature(self.reference)

    def _load(self, *args, **kwargs):
        self._ref = self._spec.reference()
        return self._ref(*args, **kwargs)

    @property
    def reference(self):
        """The NumPy/SciPy ufunc this one mirrors."""
        if self._ref == self._load:
            self._ref = self._spec.reference()
        return self._ref

    def __getattr__(self, name):
        if name.startswith("__") or name in ("_ref", "_spec", "_small", "_resolved", "_cells",
                                             "_lean", "_lean_seen", "_auto_seen",
                                             "_forced_seen"):
            raise AttributeError(name)
        return getattr(self.reference, name)

    @property
    def __class__(self):
        # isinstance(fastmath.exp, numpy.ufunc) is True, as code that dispatches on
        # ufuncs expects (numpy.ufunc cannot be subclassed); type() is still Ufunc.
        return np.ufunc


    # Equal to the reference, with its hash: code compares ufuncs by value (NumPy's own
    # tests ask ``ufunc in [np.log, np.log2]`` of the ufuncs in numpy._core.umath; a
    # library's __array_ufunc__ looks the ufunc it is handed up in a dict keyed by
    # ``np.log``). Under fastmath.patch() those names are fastmath's, while what NumPy
    # hands around is its own ufunc: without this they would be strangers.
    def __eq__(self, other):
        if isinstance(other, Ufunc):
            return other.reference is self.reference
        return other is self.reference or NotImplemented

    def __hash__(self):
        return hash(self.reference)

    def __repr__(self):
        return f"<fastmath ufunc {self.__name__!r} (accelerated {self._spec.ref.replace(':', '.')})>"

    def __reduce__(self):
        return (_lookup, (self._spec.name,))

    def _call(self, xs, args, kwargs):
        sel = _current()
        out_kw = not args and len(kwargs) == 1 and "out" in kwargs  # out= its one option
        if sel == "auto":
            if not self._small:
                _pipeline.fill_small(self, self._spec)
            if not args and not kwargs and _short(xs, self._small, self._smalls):
                return self._ref(*xs)
            if self._native is not None and len(xs) == 1 and not args and (
                    not kwargs or out_kw):  # (see _hot.c)
                self._remember_auto(xs[0])
        elif (sel == "numpy" and self._native is not None and len(xs) == 1
              and type(xs[0]) is _ndarray and xs[0].dtype not in self._lean_seen):
            self._remember_lean(xs[0].dtype)
        elif (self._native is not None and len(xs) == 1 and type(xs[0]) is _ndarray
              and xs[0].dtype in _VML_DTYPES and (sel, xs[0].dtype) not in self._forced_seen):
            self._remember_forced(sel, xs[0].dtype)
        if not args and not kwargs:
            result = _pipeline.lean(self, xs)
            if result is not NotImplemented:
                return result
        elif out_kw or (not kwargs and len(args) == 1):  # the output array, as NumPy takes it
            out = args[0] if args else kwargs["out"]
            if out is not None and not (args and type(out) is tuple):  # (NumPy's TypeError)
                result = _pipeline.lean_out(self, xs, out)
                if result is not NotImplemented:
                    return result
        return _pipeline.call(self, xs, args, kwargs)

    def _remember_lean(self, dt):
        """Let the C fast path (_hot.c) make the numpy backend's call on one contiguous
        array of dtype ``dt`` itself, where that backend's kernel has a runtime entry for
        it (see NumpyBackend's ``runtime_entry``): NumPy's own call below the size that
        splits, the runtime's from it, up to the size from which outputs are allocated
        otherwise (_alloc.LARGE). Not while debug logging is on (each call is logged)."""
        if _log_state.on:
            return
        self._lean_seen.add(dt)
        chain = _selection.plan(self._spec, _pipeline.dtype_name(dt), 1)
        entry = _lean_entry(chain[0][1], dt) if len(chain) == 1 else None
        if entry is not None:
            self._native[_LEAN].append(entry)

    def _remember_forced(self, sel, dt):
        """Let the C fast path (_hot.c) make the runtime's VML call itself, under backend
        ``sel`` chosen by name, for one C-contiguous array of dtype ``dt``, where that
        backend's kernel runs VML's or SLEEF's entry point on the runtime for it (its
        ``vml_entry``, backends/_vml.py). Not while debug logging is on."""
        if _log_state.on or _runtime_vml is None:
            return
        self._forced_seen.add((sel, dt))
        chain = _selection.plan(self._spec, _pipeline.dtype_name(dt), 1)
        entry = self._vml_entry(chain, dt) if chain and chain[0][0] == sel else None
        if entry is not None:
            self._native[_FORCED].append(entry)

    def _vml_entry(self, chain, dt):
        """_hot.c's entry for the runtime's VML call of the first kernel of ``chain`` (a
        backend's that runs VML's or SLEEF's entry point there: its ``vml_entry``) on one
        array of dtype ``dt`` with a result of that dtype: (dtype, the call's settings, the
        backend's name, 0, largest size, the result's dtype, the kernel); None where it
        has none."""
        name, kernel = chain[0]
        vml_entry = getattr(kernel, "vml_entry", None)
        if vml_entry is None or dt not in _VML_DTYPES or self._resolve((dt,), None)[-1] != dt:
            return None
        spec = vml_entry(dt)
        return None if spec is None else (dt, spec, name, 0, _alloc.LARGE // dt.itemsize, dt,
                                          kernel)

    def _report_derived(self, x, out):
        """NumPy's FP flags for ``out`` computed from ``x`` by a kernel that keeps none,
        acted on as NumPy's error state says (_hot.c, when its VML call saw an inf or a
        NaN)."""
        _fpe.report(self.__name__, self._derive((x,), out))

    def _remember_auto(self, x):
        """Let the C fast path (_hot.c) make the numpy backend's runtime call itself for
        one C-contiguous array of a dtype and size class that ``auto`` learned to run on
        that backend (or the runtime's VML call, for mkl or torch-cpu learned: see
        ``_remember_forced``), and the reference's call for a class learned for the reference
        (where the classes below it run a backend, the fast path's size test does not
        reach it), while the learned choice holds (its revisit is the Python path's): the
        learned table's path in Python costs 2-5 us a call, a tenth of a call of log on
        10^5 float32 elements."""
        if type(x) is not _ndarray or _log_state.on or not _learn.state.on:
            return
        dt = _LEARNED.get(x.dtype)
        if dt is None:
            return
        c = _learn.size_class(x.size)
        settled = _learn.settled.get((self._spec.name, dt, c, 0))
        if settled is None or self._auto_seen.get((dt, c)) is settled:
            return
        self._auto_seen[(dt, c)] = settled
        lo, hi = _learn.class_bounds(c)
        entries = [e for e in self._native[_AUTOLEAN] if (e[0], e[3]) != (x.dtype, lo)]
        chain = settled.chain
        entry = _lean_entry(chain[0][1], x.dtype) if len(chain) == 1 and chain[0][
            0] == "numpy" else self._vml_entry(chain, x.dtype) if chain else None
        if entry is not None and entry[3] <= lo:  # (the class's sizes all run on the runtime)
            entries.append(entry[:3] + (lo, min(hi, entry[4])) + entry[5:] + (settled,))
        elif not chain:  # the reference's own call
            entries.append((x.dtype, None, -1, lo, hi, None, None, settled))
        self._native[_AUTOLEAN] = entries

    def _forget_lean(self):
        self._lean_seen = set()
        self._auto_seen = {}
        self._forced_seen = set()
        if self._native is not None:
            self._native[_LEAN] = []
            self._native[_AUTOLEAN] = []
            self._native[_FORCED] = []

    def _resolve(self, types, dtype):
        """The loop's dtypes for operands ``types`` (dtypes, or a Python scalar's type)."""
        key = (types, dtype)
        try:
            return self._resolved[key]
        except KeyError:
            pass
        kw = {} if dtype is None else {"signature": (None,) * len(types) + (np.dtype(dtype),)}
        res = self._resolved[key] = self.reference.resolve_dtypes(types + (None,), **kw)
        return res

    def _run(self, chain, ins, res):
        """Compute ``res`` from ``ins`` on ``chain`` (see ``_chain.run``)."""
        _chain.run(chain, ins, res, self.__name__, self._derive)

    def _derive(self, ins, res):
        return _fpe.derive(self.reference, ins, res) if self._spec.fpe else 0


if _vectorcalled is not None:
    _vectorcalled(Ufunc)


def _lean_entry(kernel, dt):
    """_hot.c's entry for ``kernel``'s runtime call on one array of dtype ``dt`` (see the
    kernel's ``runtime_entry``): (dtype, loops, pace, smallest size on the runtime,
    largest size, the result's dtype, the kernel, last: it holds the pacing record
    ``pace`` names); None where the kernel has no such call for ``dt``."""
    entry = getattr(kernel, "runtime_entry", None)
    entry = entry() if entry is not None else None
    if entry is None:
        return None
    loops, pace, min_bytes = entry
    for in_dt, out_dt, _ in loops:
        if in_dt is dt:
            size = out_dt.itemsize
            return (dt, loops, pace, -int(-min_bytes // size), _alloc.LARGE // size, out_dt,
                    kernel)
    return None


def _forget_small():
    for u in _instances:
        u._small = 0
        if isinstance(u, Ufunc):
            u._smalls = {}
        forget = getattr(u, "_forget_lean", None)  # (the reductions' caches have none)
        if forget is not None:
            forget()


_config.on_reload(_forget_small)
_log.on_route(_forget_small)
_selection.on_small_changed(_forget_small)


Ufunc.__doc__ = _Doc(Ufunc.__doc__)


def _lookup(name):
    # unpickling imports fastmath first, which makes every instance
    return _by_name[name]
