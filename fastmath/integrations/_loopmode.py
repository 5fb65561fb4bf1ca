"""The loop mode of ``fastmath.patch``: NumPy's own ufunc loops, run on every core.

Where ``patch()`` swaps Python objects (reaching only code that looks a name up),
``patch(mode="loops")`` replaces the float32/float64 inner loops inside NumPy's ufuncs and
the accelerated SciPy ufuncs, the comparisons and predicates of those floats (``x > 0``,
``isnan``), NumPy's int64 arithmetic and comparisons, and the logical loops of bool masks
(see fastmath/integrations/_loops.c):
operators (``a * b``, ``x ** 2``), names bound at import, copied namespaces and
``__array_ufunc__`` routes (pandas, xarray) all reach it. Each long run is split over a
native thread pool, every piece computed by the original loop, so results are NumPy's bit
for bit; short runs call the original loop directly. A call NumPy cuts into rows (broadcast
operands, strided views: each run a row long) is entered through the ufunc's own call,
replaced too, and run by rows on the same pool. So is a reduction along rows
(``np.sum(x, axis=1)``, ``x.max(axis=-1)``), over the first axis (``x.sum(axis=0)``) or
over every axis (``x.sum()``): ``ufunc.reduce`` is replaced, and NumPy's loop is called as
NumPy calls it, row by row (over every axis: once, or on the leaves of add's own pairwise
tree), split only in ways found NumPy's bit for bit as the mode starts. ``np.place`` of long
contiguous arrays (scipy.stats' distributions fill their outputs with it) runs by blocks on
the same pool: NumPy's ``place`` calls the C function its module holds, replaced while the
mode is on.

How long is long depends on the loop's cost: a memory-bound loop (add, multiply) gains
from a second core only on large runs, a special function on small ones. ``cost`` below
is time per element relative to NumPy's exp, as in the registry.
"""
from __future__ import annotations

from .. import _registry
from .._numpy import np as _np
from ._nested import Nested

# how many elements of exp-like cost a run must have before a second thread pays, and
# how many each piece holds (pieces are handed out dynamically, so a busy core takes fewer)
_SPLIT_AT = 8192
_PIECE = 16384
_MIN_SPLIT = 2048  # never below: a split costs a microsecond or two even with its threads spinning
# memory-bound loops: a few operations per element, where a piece is mostly memory traffic
_CHEAP = {"add", "subtract", "multiply", "divide", "true_divide", "negative", "positive",
          "absolute", "fabs", "maximum", "minimum", "fmax", "fmin", "square", "reciprocal",
          "copysign", "floor", "ceil", "trunc", "rint", "sign", "signbit", "nextafter",
          "spacing", "heaviside", "ldexp", "conjugate", "conj", "floor_divide",
          "remainder", "mod", "fmod", "divmod", "modf", "frexp", "deg2rad", "rad2deg",
          "degrees", "radians", "logical_not", "greater", "greater_equal", "less",
          "less_equal", "equal", "not_equal", "isnan", "isinf", "isfinite", "logical_and",
          "logical_or", "logical_xor", "bitwise_and", "bitwise_or", "bitwise_xor", "invert"}
_CHEAP_COST = 0.25
_FLOATS = set("fd")
# ufuncs whose all-bool loops are reached too: the masks that scipy.stats and other array
# code combine. NumPy's loop for a mask and a 0-d bool (``mask & (scale > 0)``) is scalar
# code, about 0.7 ns an element here, and halves on two threads.
_BOOLEAN = {"logical_and", "logical_or", "logical_xor", "logical_not", "bitwise_and",
            "bitwise_or", "bitwise_xor", "invert"}
# ufuncs whose int64 loops are reached too (NumPy's default integer): arithmetic and
# comparisons on counts and indices, and the int64 sum of a scalar and a mask in every
# scipy.stats distribution method (``(1 - cond0) + np.isnan(x)``, 17 ms of a 10^7-element
# norm.cdf). Only loops that compute in C: power's (an error for a negative exponent) and
# the rest, which need the Python API or are rare, stay NumPy's.
_INT = _np.dtype(_np.int64).char
_INTEGER = {"add", "subtract", "multiply", "maximum", "minimum", "fmax", "fmin", "absolute",
            "negative", "square", "bitwise_and", "bitwise_or", "bitwise_xor", "invert",
            "equal", "not_equal", "less", "less_equal", "greater", "greater_equal",
            "floor_divide", "remainder", "fmod"}

_slots: list = []  # (ufunc, types, slot) installed
_calls: list = []  # entries of the ufuncs whose calls run by rows (_loops.replace_call)
# NumPy's place C function, kept from the first start for good: a call that found ours just
# before a stop in another thread still reaches it; and whether ours stands in for it now
_numpys_place = None
_place_installed = False
_reduce_installed: list = []  # whether ufunc.reduce runs _loops.c's reduction along rows
# reorderable ufuncs whose reductions along rows run row by row, NumPy's loop on each row
_REDUCING = ("add", "multiply", "maximum", "minimum", "fmax", "fmin")
_found: dict = {}  # (ufunc, its slots) -> the ways _take_reductions found
_known: dict = {}  # slot -> "name types", every slot ever installed (slots are kept)
_why_not: str | None = None
try:
    from ..dispatch import _runtime
    from . import _loops
except ImportError as e:  # built without a C compiler, or for another NumPy
    _loops = None
    _why_not = (f"the fastmath.integrations._loops extension is not built ({e}); reinstall fastmath "
                "with a C compiler (gcc) and NumPy present: pip install -e .")


def why_unavailable() -> str | None:
    """Why the loop mode cannot run here, or None when it can."""
    return _why_not


def available() -> bool:
    """Whether the loop mode can run here (the C extension is built)."""
    return _why_not is None


def _ufuncs():
    """(ufunc, cost, is it NumPy's) for NumPy's ufuncs and the registry's SciPy ufuncs."""
    import numpy

    from .._numpy import np as _np  # NumPy's own namespace, never fastmath's objects

    seen = {}
    for obj in list(vars(_np).values()):
        if isinstance(obj, numpy.ufunc):
            seen[id(obj)] = (obj, _CHEAP_COST if obj.__name__ in _CHEAP else 1.0, True)
    for spec in _registry.ROWS:
        obj = spec.reference()
        if isinstance(obj, numpy.ufunc):
            seen[id(obj)] = (obj, spec.cost, id(obj) in seen)
    return list(seen.values())


def _reached(ufunc, types) -> bool:
    """Whether the loop mode splits this loop: inputs all float32 or all float64, outputs of
    that type or bool (comparisons, isnan, ...); the int64 loops of the ufuncs in _INTEGER,
    writing int64 or bool; or a logical ufunc's all-bool loop."""
    ins, outs = types.split("->")
    if len(set(ins)) != 1:
        return False
    if ins[0] in _FLOATS:
        return set(outs) in ({ins[0]}, {"?"})
    if ins[0] == _INT:
        return ufunc.__name__ in _INTEGER and set(outs) in ({_INT}, {"?"})
    return ins[0] == "?" and set(outs) == {"?"} and ufunc.__name__ in _BOOLEAN


def _targets():
    """(ufunc, loop index, types, cost, is it NumPy's): every loop :func:`_reached` names."""
    out = []
    for ufunc, cost, numpys in _ufuncs():
        if ufunc.signature is not None or ufunc.nargs > 4:
            continue
        for index, types in enumerate(ufunc.types):
            if _reached(ufunc, types):
                out.append((ufunc, index, types, cost, numpys))
    return out


def _scipy_quiet() -> bool:
    # SciPy's loops report special-function errors themselves, through Python, from the
    # thread that runs them: only while every category is ignored (SciPy's default) may
    # SciPy's pieces run outside the caller's thread. "memory" (raise by default) is for
    # allocation failures inside a few Fortran routines, none of them the registry's.
    import scipy.special

    return all(v == "ignore" for k, v in scipy.special.geterr().items() if k != "memory")


def _sizes(cost, may_split):
    """(elements from which a run is split, elements per piece) for a loop of this cost."""
    if not may_split:
        return 1 << 62, _PIECE
    scale = max(cost, 1 / 16)
    return max(_MIN_SPLIT, int(_SPLIT_AT / scale)), max(64, int(_PIECE / scale))


_threads_before: list = []  # the runtime's limit before a start(threads=...) set its own


def _place(arr, mask, vals):
    """NumPy's ``place`` C function, by blocks on the pool where ``_loops.place`` takes
    the call (a Python float ``vals`` for a float array is that array's one value, as
    NumPy converts it), else NumPy's own."""
    if type(vals) is float and type(arr) is _np.ndarray and arr.dtype.kind == "f":
        one = _np.array(vals, arr.dtype)
        if _loops.place(arr, mask, one.reshape(1)):
            return None
    elif _loops.place(arr, mask, vals):
        return None
    return _numpys_place(arr, mask, vals)


def _place_module():
    """The module whose ``place`` calls its global ``_place`` (NumPy 2; NumPy 1's is
    numpy.lib.function_base), or None."""
    import importlib

    for name in ("numpy.lib._function_base_impl", "numpy.lib.function_base"):
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        if callable(getattr(module, "_place", None)):
            return module
    return None


def _install(threads) -> None:
    from ..dispatch import _alloc

    global _numpys_place, _place_installed

    if threads:  # else the runtime's own limit (the configuration's, or threadpoolctl's)
        _threads_before.append(_runtime.threads())
        _runtime.set_threads(threads)
    # NumPy allocates the outputs the loops fill: without this, every large output is a fresh
    # mmap whose page faults cost more than the split saves (np.exp of 10^7 float64 here:
    # 17 ms plain, 16 ms split into fresh pages, 5 ms split into recycled ones)
    _alloc.tune()
    quiet = _scipy_quiet()
    rows: dict = {}  # ufunc -> [float32, float64, int64 slots] (SciPy's: only where quiet)
    for ufunc, index, types, cost, numpys in _targets():
        split_at, piece = _sizes(cost, quiet or numpys)
        slot = _loops.replace(ufunc, index, split_at, piece)
        _slots.append((ufunc, types, slot))
        _known[slot] = f"{ufunc.__name__} {types}"
        if (quiet or numpys) and ufunc.nout == 1 and types[0] in _FLOATS | {_INT}:
            # NumPy runs the first loop of a ufunc's list that fits the operands exactly
            three = rows.setdefault(ufunc, [-1, -1, -1])
            at = ("f", "d", _INT).index(types[0])
            three[at] = slot if three[at] < 0 else three[at]
    # calls NumPy would cut into rows (broadcast, strided views): run by rows (_loops.c)
    from ..dispatch._fpe import report
    probes = {}  # dtype (, its maker) -> the arrays _take_reductions compares on, made once
    for ufunc, (single, double, int64) in rows.items():
        _calls.append(_loops.replace_call(ufunc, single, double, int64, report))
        if ufunc.__name__ in _REDUCING and ufunc.nin == 2:
            _take_reductions(ufunc, _calls[-1], probes, (single, double))
    # ufunc.reduce over rows (np.sum(x, axis=1), x.max(axis=-1)): row by row (_loops.c)
    _reduce_installed.append(_loops.replace_reduce(type(_np.add).__dict__["reduce"],
                                                   _np._NoValue))
    module = _place_module()
    if module is not None and not _place_installed:
        if _numpys_place is None:
            _numpys_place = module._place
        module._place, _place_installed = _place, True


def _reduce_probes(dtype) -> list:
    """Rows a reduction's start shows on: random rows of many lengths (an accumulator
    begun at the identity or at the first element rounds differently), and every pair and
    triple of special values (signed zeros, infinities, NaNs of both signs, the extremes),
    where the order and the start decide which zero or which NaN comes out."""
    rng = _np.random.default_rng(12345)
    probes = [rng.standard_normal((33, n)).astype(dtype)
              for n in (2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 64, 100, 129)]
    info = _np.finfo(dtype)
    special = _np.array([0.0, -0.0, 1.0, -1.0, _np.inf, -_np.inf, _np.nan, -_np.nan,
                         info.tiny, info.max, -info.max, info.smallest_subnormal], dtype)
    k = len(special)
    probes.append(_np.ascontiguousarray(special[_np.indices((k, k)).reshape(2, -1).T]))
    probes.append(_np.ascontiguousarray(special[_np.indices((k, k, k)).reshape(3, -1).T]))
    return probes


def _take_reductions(ufunc, entry, probes, slots) -> None:
    """Tell _loops.c how NumPy starts a row's reduction by ``ufunc`` for float32 and
    float64: the way (0: its identity, then the whole row; 1: the row's first element,
    then the rest) whose results are NumPy's bit for bit on every probe, or none (NumPy
    keeps that reduction); and how its reductions over the first axis may be split
    (_way_to_split). ``probes``: dtype -> its probe rows, filled on first use; ``slots``:
    its float32 and float64 loop slots, whose loops never change (what was found for them
    is kept for the next start: 12 ms)."""
    ident = ufunc.identity
    start = float(ident) if isinstance(ident, (int, float)) and not isinstance(
        ident, bool) else None
    identity = 0.0 if start is None else start  # (what _loops.c keeps where there is none)
    known = _found.get((ufunc, slots))
    if known is not None:
        _loops.set_reduce(entry, known[0][0], known[0][1], identity)
        _loops.set_reduce_cols(entry, *known[1])
        _loops.set_reduce_full(entry, *known[2])
        return
    _loops.set_reduce(entry, -1, -1, identity)  # (the identity)
    ways = []
    for which, dtype in enumerate((_np.float32, _np.float64)):
        found = -1
        if dtype not in probes:
            probes[dtype] = _reduce_probes(dtype)
        for way in ((0, 1) if start is not None else (1,)):
            try:
                with _np.errstate(all="ignore"):
                    same = all(
                        _loops.reduce_rows(entry, which, way, p, False).tobytes()
                        == ufunc.reduce(p, axis=-1).tobytes() for p in probes[dtype])
            except (TypeError, ValueError):
                same = False
            if same:
                found = way
                break
        ways.append(found)
    _loops.set_reduce(entry, ways[0], ways[1], identity)

    def each_dtype(probed, find):
        """For float32 and float64: -1 where no start of a row was found, else
        find(ufunc, entry, which, way, probes), its probes made once by ``probed``."""
        found = []
        for which, dtype in enumerate((_np.float32, _np.float64)):
            if ways[which] < 0:
                found.append(-1)
                continue
            if (dtype, probed) not in probes:
                probes[dtype, probed] = probed(dtype, probes[dtype])
            found.append(find(ufunc, entry, which, ways[which], probes[dtype, probed]))
        return found

    hows = each_dtype(_reduce_probes_first, _way_to_split)
    _loops.set_reduce_cols(entry, hows[0], hows[1])
    fulls = each_dtype(_reduce_probes_full, _full_way)
    _loops.set_reduce_full(entry, fulls[0], fulls[1])
    _found[ufunc, slots] = (tuple(ways), tuple(hows), tuple(fulls))


# how a reduction over the first axis is split (fastmath/integrations/_loops.c, cols_call)
_COLS_BLOCKS, _COLS_PARTS = 0, 1


def _way_to_split(ufunc, entry, which, way, probes) -> int:
    """How a reduction over the first axis by ``ufunc``'s loop ``which`` may be split with
    NumPy's results bit for bit on every probe, each way cut into 1, 2, 3 and 7 pieces:
    bit 1 << _COLS_BLOCKS, the columns in blocks; bit 1 << _COLS_PARTS, the rows in parts
    folded in order after; 0, neither (run whole); -1, not even the whole run is NumPy's
    (NumPy keeps that reduction)."""
    def same(how, units, p):
        return (_loops.reduce_cols(entry, which, how, p, False, units).tobytes()
                == ufunc.reduce(p, axis=0).tobytes())

    ways = 0
    try:
        with _np.errstate(all="ignore"):
            if not all(same(-1, 1, p) for p in probes):
                return -1
            for how in (_COLS_BLOCKS, _COLS_PARTS) if way == 1 else (_COLS_BLOCKS,):
                if all(same(how, units, p) for p in probes for units in (1, 2, 3, 7)
                       if how == _COLS_BLOCKS or len(p) >= units):  # (a part a row at least)
                    ways |= 1 << how
    except (TypeError, ValueError):
        return -1
    return ways


def _reduce_probes_first(dtype, along_rows) -> list:
    """Arrays a reduction over the first axis shows its order on: random ones of many
    shapes (a sum in another order rounds differently), every pair and triple of special
    values down a column (2 and 3 rows, their columns cut at several widths: where the
    loop's vector part ends), and columns of 40 and 300 special values drawn at random,
    where the grouping decides which zero or which NaN comes out. ``along_rows``:
    _reduce_probes(dtype)."""
    rng = _np.random.default_rng(54321)
    probes = [rng.standard_normal(shape).astype(dtype)
              for shape in ((2, 3), (3, 5), (17, 2), (40, 7), (33, 8), (20, 9), (64, 16),
                            (50, 17), (30, 33), (20, 64), (24, 100), (9, 129), (5, 300),
                            (3, 1000), (4, 5, 6))]
    for rows in along_rows[-2:]:  # (k*k, 2) and (k**3, 3): down the columns
        first = _np.ascontiguousarray(rows.T)
        probes.append(first)
        probes.extend(_np.ascontiguousarray(first[:, :m]) for m in (5, 12, 37, 130))
    pairs = along_rows[-2]
    special = pairs[:, 0][::int(round(len(pairs) ** 0.5))]  # the special values
    for shape in ((40, 24), (300, 10), (64, 129), (20, 200), (9, 300)):
        probes.append(rng.choice(special, shape))
    return probes


# how a reduction over every axis is split (fastmath/integrations/_loops.c, full_call)
_FULL_TREE, _FULL_PARTS = 0, 1


def _full_way(ufunc, entry, which, way, probes) -> int:
    """How a reduction over every axis by ``ufunc``'s loop ``which`` may be split with
    NumPy's results bit for bit on every probe: _FULL_TREE (pairwise_sum's tree, cut into
    2, 4, 8 and 64 leaves), else _FULL_PARTS (parts folded in order after, 2, 3, 7 and 64
    of them), else -1 (NumPy keeps that reduction: the whole run, NumPy's one call, gains
    nothing)."""
    def same(how, units, p):
        return (_np.asarray(_loops.reduce_full(entry, which, how, p, False, units)).tobytes()
                == _np.asarray(ufunc.reduce(p, axis=None)).tobytes())

    try:
        with _np.errstate(all="ignore"):
            if not all(same(-1, 1, p) for p in probes):
                return -1
            for how, cuts in ((_FULL_TREE, (2, 4, 8, 64)), (_FULL_PARTS, (2, 3, 7, 64))):
                if how == _FULL_PARTS and way != 1:
                    continue
                if all(same(how, units, p) for p in probes for units in cuts
                       if p.size >= 2 * units * (128 if how == _FULL_TREE else 1)):
                    return how
    except (TypeError, ValueError):
        return -1
    return -1


def _reduce_probes_full(dtype, along_rows) -> list:
    """Arrays a reduction over every axis shows its order on: random ones of many sizes
    and shapes (a sum grouped otherwise rounds differently; values of many magnitudes),
    and runs of special values drawn at random, where the grouping decides which zero or
    which NaN comes out. ``along_rows``: _reduce_probes(dtype)."""
    rng = _np.random.default_rng(9876)
    probes = []
    for n in (300, 1001, 1029, 4097, 10007, 65543):
        probes.append((rng.standard_normal(n) * 10.0 ** rng.uniform(-4, 4, n)).astype(dtype))
    probes += [rng.standard_normal(shape).astype(dtype)
               for shape in ((1000, 7), (129, 33), (40, 5, 17))]
    pairs = along_rows[-2]
    special = pairs[:, 0][::int(round(len(pairs) ** 0.5))]  # the special values
    for n in (260, 2000, 5000):
        probes.append(rng.choice(special, n))
        mixed = rng.standard_normal(n).astype(dtype)
        mixed[rng.random(n) < 0.02] = rng.choice(special, 1)[0]
        probes.append(mixed)
    for v in (0.0, -0.0):
        probes.append(_np.full(3000, v, dtype))
    return probes


def full_reductions() -> int:
    """How many reductions over every axis (``x.sum()``, ``np.max(x)``, a 1-d array's
    ``np.add.reduce(x)``) the loop mode has taken since the process started (see
    ``_full_way``)."""
    if _loops is None:
        raise RuntimeError(f"fastmath's loop mode is unavailable: {_why_not}")
    return _loops.reduced_full()


def reductions() -> int:
    """How many reductions along rows the loop mode has run row by row since the process
    started (NumPy's loop on each row; see ``_take_reductions``)."""
    if _loops is None:
        raise RuntimeError(f"fastmath's loop mode is unavailable: {_why_not}")
    return _loops.reduced()


def column_reductions() -> int:
    """How many reductions over the first axis (``x.sum(axis=0)``) the loop mode has run
    since the process started (NumPy's loop on each row, from a plain loop; see
    ``_way_to_split``)."""
    if _loops is None:
        raise RuntimeError(f"fastmath's loop mode is unavailable: {_why_not}")
    return _loops.reduced_cols()


def _restore() -> None:
    global _place_installed
    if _reduce_installed and _reduce_installed.pop():
        _loops.restore_reduce()
    while _calls:
        _loops.restore_call(_calls.pop())
    while _slots:
        _loops.restore(_slots.pop()[2])
    if _place_installed:
        _place_module()._place, _place_installed = _numpys_place, False
    while _threads_before:
        _runtime.set_threads(_threads_before.pop())


_installed = Nested(_install, _restore,
                    "fastmath.patch.stop(mode='loops') called with no active patch")


def start(threads: int | None = None) -> None:
    """Install the splitting loops (or count one more user)."""
    if _loops is None:
        raise RuntimeError(f"fastmath's loop mode is unavailable: {_why_not}")
    _installed.start(threads)


def stop() -> None:
    """End one :func:`start`; the last one puts NumPy's and SciPy's loops back, exactly."""
    _installed.stop()


def active() -> bool:
    """Whether the splitting loops are installed now."""
    return _installed.active()


def count_calls(on: bool = True) -> bool:
    """Count every call of the installed loops from now (``on``) or stop counting; returns
    whether they were counted before. Off by default: a counted call takes the long path
    (some nanoseconds more), so only tests and reports turn it on."""
    if _loops is None:
        raise RuntimeError(f"fastmath's loop mode is unavailable: {_why_not}")
    return _loops.set_counting(on)


def counts() -> dict:
    """``{"exp d->d": (calls, split calls), ...}`` for every loop the loop mode has
    installed: the runs it split since the process started, and the calls made while
    :func:`count_calls` was on."""
    out: dict = {}
    with _installed.lock:
        for slot, key in _known.items():  # a ufunc may list one signature twice
            calls, split = _loops.counts(slot)
            before = out.get(key, (0, 0))
            out[key] = (before[0] + calls, before[1] + split)
    return out


def paced() -> dict:
    """``{"exp d->d": runs, ...}``: the runs long enough to split that the loop mode ran in
    one piece since the process started, because splits of that loop and length had been
    losing (a helper's core busy: another process, or another library's threads spinning
    on after their call; see ``split`` in fastmath/integrations/_loops.c)."""
    out: dict = {}
    with _installed.lock:
        for slot, key in _known.items():
            out[key] = out.get(key, 0) + _loops.paced(slot)
    return out


def splitting(on: bool) -> bool:
    """Let the installed loops split their runs (``on``, the default) or run every one
    whole, as NumPy would, still through the loop mode's trampolines (for
    :func:`time_whole`); returns the previous setting."""
    if _loops is None:
        raise RuntimeError(f"fastmath's loop mode is unavailable: {_why_not}")
    return _loops.set_enabled(on)


def time_whole(on: bool = True) -> bool:
    """Add up the time of every run the installed loops leave whole from now (``on``) or
    stop, except a reduction's runs (one output element: the loop mode cannot split
    them); returns the previous setting. With :func:`splitting` off that is all the time
    NumPy spends in runs the loop mode could split: the part of a program it can speed up
    at all, for a ceiling (bench/library_workloads.py ``--ceiling``). Each timed
    run takes the long path and two clock reads (some tens of nanoseconds)."""
    if _loops is None:
        raise RuntimeError(f"fastmath's loop mode is unavailable: {_why_not}")
    return _loops.set_timing(on)


def whole_time() -> float:
    """Seconds of the runs timed since :func:`time_whole` was turned on or this was last
    read (then starts again from 0)."""
    if _loops is None:
        raise RuntimeError(f"fastmath's loop mode is unavailable: {_why_not}")
    return _loops.whole_ns() * 1e-9


def pacing(on: bool) -> bool:
    """Let splits back off while they lose (``on``, the default) or split every long run
    whatever it costs (tests that must see the split path); returns the previous setting."""
    if _loops is None:
        raise RuntimeError(f"fastmath's loop mode is unavailable: {_why_not}")
    return _runtime.set_pacing(on)
