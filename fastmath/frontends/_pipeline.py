"""NumPy's ufunc semantics, written once for functions of one or two arguments.

A call that is not on the fast path (see ``Ufunc.__call__``) goes through these steps:

1. parse NumPy's arguments (``out``, ``where``, ``casting``, ``order``, ``dtype``,
   ``signature``, ``subok``); anything unusual is the reference's to answer;
2. classify the operands: ndarrays, NumPy and Python scalars, lists; Dask arrays and
   arrays on a device take their own routes; subclasses and ``__array_ufunc__``
   overrides go to the reference, which dispatches them;
3. resolve dtypes with the reference's own ``resolve_dtypes`` (a Python scalar in a
   two-argument call is passed as its type: NumPy 2's "weak" scalar), cast, broadcast;
4. allocate the result with NumPy's layout rules, or take ``out=``;
5. apply ``where=`` by computing only the selected elements;
6. run the backend chain (``_chain.run``), which reports floating-point errors;
7. unwrap: a NumPy scalar for scalar input, ``out=`` itself when given.

Only step 2 depends on the number of operands.

The most common call, ndarrays of one shape and dtype, no options, takes ``lean``: the
steps above reduced to what applies to it, with what they decide cached per operand
dtypes; anything else it hands back to ``call``.
"""
from __future__ import annotations

import math
import warnings

from .._numpy import dtype_name, np

from ..dispatch import _alloc, _chain, _fpe, _log, _parallel, _selection
from . import _native
from . import _dask

_ndarray = np.ndarray
_KEYWORDS = frozenset(("out", "where", "casting", "order", "dtype", "subok", "signature"))
_CASTINGS = ("no", "equiv", "safe", "same_kind", "unsafe")
_ORDERS = ("K", "A", "C", "F")
_NUMERIC = "biufc"
_PY_SCALARS = (float, int, complex)
_CONTAINERS = (list, tuple)
# Python scalars are weak only under NumPy 2's promotion rules (NEP 50); before that the
# value decided, which resolve_dtypes cannot express: such calls go to the reference.
_WEAK_TYPES = int(np.__version__.split(".")[0]) >= 2
BAD = object()  # an operand, out= or where= that NumPy must answer
_ROUTED = object()


def call(f, xs, args, kwargs):
    """``f(*xs, *args, **kwargs)`` for a fastmath ufunc ``f`` with NumPy's semantics."""

    def reference(why="a case fastmath hands over unchanged"):
        if _log.state.on:
            _log.logger.debug("%s(%s): %s runs it (%s)", f.__name__, _chain.describe(xs[0]),
                              f._spec.ref.replace(":", "."), why)
        return call_reference(f, xs, args, kwargs)

    if (kwargs and kwargs.keys() - _KEYWORDS) or len(args) > 1 or (args and (
            "out" in kwargs or type(args[0]) is tuple)):
        return reference()  # numpy's own TypeError
    out = args[0] if args else kwargs.get("out")
    casting = kwargs.get("casting", "same_kind")
    order = kwargs.get("order", "K")
    if (kwargs.get("signature") is not None or order not in _ORDERS
            or casting not in _CASTINGS):
        return reference()
    ops = [_operand(x, len(xs) > 1) for x in xs]
    if _ROUTED in ops:
        return _route(f, xs, args, kwargs, reference)
    if BAD in ops:
        return reference()
    o = single_out(out)
    prepared = _prepare(f, ops, o, kwargs.get("dtype"), casting)
    if prepared is None:
        return reference()
    arrays, in_dts, out_dt, shape, size = prepared
    name = dtype_name(in_dts[0])
    chain = _selection.plan(f._spec, name, size, 0 if all(
        a.flags.c_contiguous and a.shape == shape for a in arrays) else 1)
    if not chain or size == 0:
        return reference(f"below auto's smallest size for {name}, or empty")
    mask = where_mask(kwargs.get("where", True), shape)
    if mask is BAD:
        return reference()
    ins = _cast(arrays, in_dts, o)
    if ins is None:
        return reference()
    if o is None:
        if mask is not None and "out" not in kwargs:  # see where_warns
            warn_where()
        res = allocate(ins, shape, out_dt, order)
    else:
        res = o
    ins = [a if a.shape == shape else np.broadcast_to(a, shape) for a in ins]
    if o is None:  # out=None and out=(None,) alike
        _compute(f, chain, ins, res, mask)
        return res[()] if res.ndim == 0 else res
    token = _parallel.whole.set(True)  # an interrupt leaves the caller's out= whole
    try:
        _compute(f, chain, ins, res, mask)
    finally:
        _parallel.whole.reset(token)
    return o


def _entry(f, xs):
    """(result dtype, loop dtype's name) for ndarrays of one shape in their loop's dtypes
    (see _lean_entry, kept per operand dtypes in ``f._lean``), else None."""
    x = xs[0]
    if type(x) is not _ndarray:
        return None
    if len(xs) == 1:
        key = x.dtype
    else:
        y = xs[1]
        if type(y) is not _ndarray or y.shape != x.shape:
            return None
        key = (x.dtype, y.dtype)
    try:
        return f._lean[key]
    except KeyError:
        entry = f._lean[key] = _lean_entry(f, xs)
        return entry


def lean(f, xs):
    """``f(*xs)`` for ndarrays of one shape, or NotImplemented when the call needs more
    than the common steps (see ``call``)."""
    entry = _entry(f, xs)
    if entry is None:
        return NotImplemented
    x = xs[0]
    out_dt, name = entry
    size = x.size
    contiguous = x.flags.c_contiguous and (len(xs) == 1 or xs[1].flags.c_contiguous)
    chain = _selection.plan(f._spec, name, size, 0 if contiguous else 1)
    if not chain or not size:
        # the reference's own call, as ``call`` would make it for these operands
        return f._ref(*xs) if size and not _log.state.on else NotImplemented
    if _alloc._tuned is None and size * out_dt.itemsize >= _alloc.LARGE:
        _alloc.tune()
    if contiguous:
        res = _empty(x.shape, out_dt)
        f._run(chain, xs, res)
    else:
        res = allocate(list(xs), x.shape, out_dt, "K")
        _compute(f, chain, xs, res, None)
    return res if res.ndim else res[()]


_empty = np.empty


def lean_out(f, xs, out):
    """``f(*xs, out=out)`` for ndarrays of one shape and an output array of that shape and
    of the result's dtype (or a 1-tuple of one), both C-contiguous, or NotImplemented
    when the call needs more than that (see ``call``). ``call``'s parse of the call (its
    keywords, casting, broadcasting, ``where=``) cost 5-7 us more than this, where the mkl
    backend's whole call of erf on 10^3 float32 elements takes 2 us."""
    if type(out) is tuple:
        if len(out) != 1:
            return NotImplemented
        out = out[0]
    entry = _entry(f, xs)
    x = xs[0]
    if entry is None or type(out) is not _ndarray or out.shape != x.shape or not (
            out.flags.c_contiguous and out.flags.writeable) or entry[0] != out.dtype:
        return NotImplemented
    if not all(a.flags.c_contiguous for a in xs) or any(
            a is not out and np.may_share_memory(a, out) for a in xs):
        return NotImplemented  # another layout, or a partial overlap (call copies)
    chain = _selection.plan(f._spec, entry[1], x.size, 0)
    if not chain or not x.size:
        return NotImplemented  # the reference's, as call makes it
    if len(chain) > 1:
        # in place with a fallback: a kernel failing part-way, or one whose FP flags are
        # derived from the input afterwards, needs the input intact (as in _compute)
        xs = tuple(a.copy() if a is out else a for a in xs)
    token = _parallel.whole.set(True)  # an interrupt leaves the caller's out= whole
    try:
        f._run(chain, xs, out)
    finally:
        _parallel.whole.reset(token)
    return out


def _lean_entry(f, xs):
    """(result dtype, loop dtype's name) when the operands are in their loop's dtypes and
    it is numeric (no cast, no reference to hand over to), else None."""
    dts = tuple(x.dtype for x in xs)
    try:
        *in_dts, out_dt = f._resolve(dts, None)
    except Exception:
        return None
    if out_dt.kind not in _NUMERIC or any(
            a != b or a.kind not in _NUMERIC for a, b in zip(dts, in_dts)):
        return None
    return out_dt, dtype_name(in_dts[0])


def call_reference(f, xs, args, kwargs):
    """The reference's own call; ``where=`` kept away from SciPy's ufuncs (see below)."""
    if kwargs.get("where", True) is not True:
        if where_warns(xs, args, kwargs):
            # said here, NumPy's warning would name this line, not the caller's: say it
            # for NumPy at the caller's, and tell NumPy the out=None it then stands for
            warn_where()
            args, kwargs = (), dict(kwargs, out=None)
        if f._spec.ref.startswith("scipy"):
            return _where_outside(f.reference, xs, args, kwargs)
    return f.reference(*xs, *args, **kwargs)


_ARRAY_UFUNC = _ndarray.__array_ufunc__


def where_warns(xs, args, kwargs) -> bool:
    """Whether NumPy's ufunc call warns that ``where=`` comes without ``out=``.

    NumPy warns once its arguments parse (known keywords, at most one positional output),
    unless ``out=`` is given by keyword (``out=None`` and ``out=(None,)`` included: the
    way to say it is meant) or positionally as an array, or an ``__array_ufunc__``
    override among the operands or the mask takes the call. ``where=True`` itself never
    warns (``np.True_`` does).
    """
    where = kwargs.get("where", True)
    if (where is True or "out" in kwargs or kwargs.keys() - _KEYWORDS or len(args) > 1
            or (args and args[0] is not None)):
        return False
    return not _overridden((*xs, where))


def _overridden(objs) -> bool:
    """Whether an ``__array_ufunc__`` override among ``objs`` takes a ufunc's call."""
    for x in objs:
        if type(x) is not _ndarray and getattr(type(x), "__array_ufunc__",
                                               _ARRAY_UFUNC) is not _ARRAY_UFUNC:
            return True
    return False


def _operand(x, weak):
    """(array, what resolve_dtypes gets for it), BAD, or _ROUTED (Dask, device arrays)."""
    tx = type(x)
    if tx is _ndarray:
        return x, x.dtype
    if tx in _PY_SCALARS and weak:
        return (x, tx) if _WEAK_TYPES else BAD
    if tx in _PY_SCALARS or tx in _CONTAINERS or isinstance(x, np.generic) or (
            tx is bool and not weak):
        try:
            a = np.asarray(x)
        except Exception:  # ragged lists and the like: NumPy's own error
            return BAD
        return a, a.dtype
    if _dask.is_dask_array(x) or _native.resident(x):
        return _ROUTED
    return BAD  # subclasses, __array_ufunc__ overrides, array-likes: NumPy dispatches


def fill_small(f, spec) -> None:
    """``f._small``: ``auto``'s smallest accelerated size for ``spec``, below which a front end
    calls the reference at once. Looked up at the first call under ``auto`` (the cost table
    is read then, not at import) and left at 0 while debug logging is on, so that every
    call takes the logged path; the front ends forget it on a reload (_config.on_reload)
    and when logging is switched on or off (_log.on_route)."""
    if not _log.state.on:
        f._small = _selection.small_size(spec)
        if hasattr(type(f), "_smalls"):  # (a ufunc's; the reductions' caches have none)
            f._smalls = _selection.small_sizes(spec)


def _route(f, xs, args, kwargs, reference):
    """Dask arrays become lazy results; arrays on a device are computed there."""
    if any(_dask.is_dask_array(x) for x in xs):
        return _dask.ufunc(f, xs, args, kwargs)
    if not args and not kwargs:
        r = _native.call(f._spec, xs)
        if r is not NotImplemented:
            return r
    return reference()


def _prepare(f, ops, o, dtype, casting):
    """(arrays, loop dtypes, result dtype, shape, size), or None for the reference."""
    try:
        *in_dts, out_dt = f._resolve(tuple(t for _, t in ops), dtype)
    except Exception:
        return None
    if out_dt.kind not in _NUMERIC:
        return None
    arrays = []
    for (a, t), dt in zip(ops, in_dts):
        if type(t) is type:  # a weak Python scalar takes the loop's dtype
            if dt.kind not in "fc":
                return None  # integer loops: NumPy checks the value's range
            if dt.itemsize < 8 or (dt.kind == "c" and dt.itemsize < 16):
                # a narrow float may overflow: NumPy reports that cast once, its own way
                box = []
                if _fpe.recorded(lambda: box.append(np.asarray(a, dtype=dt))) and _fpe.watched():
                    return None
                a = box[0]
            else:
                a = np.asarray(a, dtype=dt)
        elif a.dtype.kind not in _NUMERIC or dt.kind not in _NUMERIC or (
                a.dtype != dt and not np.can_cast(a.dtype, dt, casting)):
            return None
        arrays.append(a)
    try:
        shape = arrays[0].shape if len(arrays) == 1 else np.broadcast_shapes(
            *(a.shape for a in arrays))
    except ValueError:
        return None
    if o is BAD or (o is not None and (type(o) is not _ndarray or o.shape != shape
                                       or not o.flags.writeable or o.dtype != out_dt)):
        return None
    size = 1
    for n in shape:
        size *= n
    return arrays, in_dts, out_dt, shape, size


def _cast(arrays, in_dts, o):
    """The inputs in their loop dtypes, copied where they overlap ``out=``; None if a cast
    raised an FP error NumPy would report (it words and orders that report its own way)."""
    ins = []
    for a, dt in zip(arrays, in_dts):
        if a.dtype != dt:
            cast = np.empty_like(a, dtype=dt)
            if _fpe.recorded(np.copyto, cast, a, casting="unsafe") and _fpe.watched():
                return None
            a = cast
        elif o is not None and a is not o and np.may_share_memory(a, o):
            a = a.copy()  # a partial overlap: NumPy buffers the same way
        ins.append(a)
    return ins


def allocate(ins, shape, dtype, order):
    """A fresh result laid out as NumPy's ufuncs lay it out."""
    if _alloc._tuned is None:  # large outputs recycle freed memory (see _alloc)
        _alloc.expect(math.prod(shape) * dtype.itemsize)
    contiguous = order == "C"
    if not contiguous:
        for a in ins:  # a loop, not all(...): this runs on every call
            contiguous = a.flags.c_contiguous and a.shape == shape
            if not contiguous:
                break
    if contiguous:
        return np.empty(shape, dtype)
    if order == "F":
        return np.empty(shape, dtype, order="F")
    # NumPy's iterator decides (it ignores broadcast axes, weighs every operand)
    it = np.nditer(ins + [None], flags=["zerosize_ok", "refs_ok"],
                   op_flags=[["readonly"]] * len(ins) + [["writeonly", "allocate"]],
                   op_dtypes=[None] * len(ins) + [dtype], order=order)
    return it.operands[-1]


def _compute(f, chain, ins, res, mask):
    """Run ``chain`` into ``res``, on the elements ``mask`` selects if there is one.

    A kernel that runs the reference's own loop (the numpy backend's) gets the arrays as
    they are, mask included: NumPy chooses its SIMD or scalar loop by layout, and the two
    may differ by an ULP, so a flipped or gathered copy could change the result.
    """
    first = chain[0][1]
    if mask is None:
        if len(chain) > 1:
            # in place with a fallback: a kernel failing part-way, or one whose FP flags
            # are derived from the input afterwards, needs the input intact
            ins = [a.copy() if a is res else a for a in ins]
        if any(s < 0 for s in res.strides) and not getattr(first, "any_strides", False):
            # the same elements in the opposite order: a backend whose arrays cannot
            # walk backwards (torch) takes the call instead of failing on it
            flip = tuple(slice(None, None, -1) if s < 0 else slice(None) for s in res.strides)
            res, ins = res[flip], [a[flip] for a in ins]
        f._run(chain, tuple(ins), res)
        return
    masked = getattr(first, "masked", None)
    masked = masked(mask) if masked is not None else None
    if masked is not None:
        f._run(((chain[0][0], masked),) + tuple(chain[1:]), tuple(ins), res)
    elif mask.any():
        part = np.empty(int(np.count_nonzero(mask)), res.dtype)
        try:
            f._run(chain, tuple(a[mask] for a in ins), part)
        except FloatingPointError:
            res[mask] = part  # raised after the loop: NumPy has written out= too
            raise
        res[mask] = part


def single_out(out):
    """The one output array of ``out=`` (an array, None, or a 1-tuple), else BAD."""
    if type(out) is tuple:
        return out[0] if len(out) == 1 else BAD
    return out


def where_mask(where, shape):
    """``where=`` as a boolean mask of ``shape``, None for True, or BAD if NumPy must
    answer (a non-boolean or unbroadcastable mask)."""
    if where is True:
        return None
    mask = np.asarray(where)
    if mask.dtype != bool:
        return BAD
    try:
        return np.broadcast_to(mask, shape)
    except ValueError:
        return BAD


def _where_outside(ref, ins, args, kwargs):
    """``ref(*ins, *args, **kwargs)`` with ``where=`` applied here, not by the ufunc.

    SciPy's ufuncs corrupt the heap when ``where=`` meets a casting loop (scipy/scipy#25127;
    seen for erf with float32 input and a float64 out=), so they never see a mask.
    """
    kwargs = dict(kwargs)
    where = kwargs.pop("where")
    if len(args) > 1 or (args and type(args[0]) is tuple):
        return ref(*ins, *args, **kwargs)  # NumPy's own TypeError
    out = args[0] if args else kwargs.pop("out", None)
    o = single_out(out)
    if o is None:  # call_reference has warned, where NumPy does
        return ref(*ins, **kwargs)
    if not isinstance(o, np.ndarray):
        return ref(*ins, out=out, **kwargs)  # NumPy's own error for a bad out=
    tmp = ref(*ins, out=np.empty_like(o), **kwargs)
    np.copyto(o, tmp, where=where)
    return o


_where_warning: list = []


def warn_where():
    """NumPy's warning for a ``where=`` mask without ``out=``, if this NumPy gives one.

    It comes from NumPy's ufunc machinery before any loop runs, so it is the same for
    every ufunc; it is asked of numpy.negative, never of a SciPy ufunc, which a mask
    without ``out=`` can crash (scipy/scipy#25127).
    """
    if not _where_warning:
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            np.negative(np.zeros(1), where=np.ones(1, bool))
        _where_warning.append([(x.category, str(x.message)) for x in w])
    for category, message in _where_warning[0]:
        warnings.warn(message, category, stacklevel=_fpe.user_stacklevel())
