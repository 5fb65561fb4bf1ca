"""fastmath.patch(mode="loops"): NumPy's own ufunc loops split over threads, process-wide.

Oracle: the same call with the loop mode off. Every result must be bitwise equal, every
route (operators, bound names, pandas, xarray) must reach the installed loops (their call
counters say so), np.errstate must see the flags raised in worker threads, and removal
must give back the very same loop pointers NumPy had.
"""
import os
import re
import subprocess
import sys
import textwrap
import threading
import warnings
import numpy

import pytest
import scipy.special
import scipy.stats

import fastmath
from fastmath.integrations import _loopmode

from helpers import FakeClock

pytestmark = pytest.mark.skipif(not _loopmode.available(),
                                reason=str(_loopmode.why_unavailable()))

N = 300_000  # above every split threshold but the memory-bound loops' for float32
RNG = numpy.random.default_rng(7)


@pytest.fixture(autouse=True)
def _no_pacing():
    """These tests must see long runs split whatever a split costs on this machine (a
    loaded one makes splits lose, and the back-off then runs them in one piece)."""
    before = _loopmode.pacing(False)
    yield
    _loopmode.pacing(before)


def _split_calls(key):
    return _loopmode.counts().get(key, (0, 0))[1]


def _both(fn):
    plain = fn()
    with fastmath.patch(mode="loops"):
        patched = fn()
    return plain, patched


def _bitwise(a, b):
    a, b = numpy.asarray(a), numpy.asarray(b)
    assert a.dtype == b.dtype and a.shape == b.shape
    assert a.tobytes() == b.tobytes()


UNARY = ["exp", "log", "log1p", "expm1", "exp2", "log2", "log10", "sin", "cos", "tan",
         "arcsin", "arccos", "arctan", "sinh", "cosh", "tanh", "arcsinh", "arccosh", "arctanh",
         "sqrt", "cbrt", "square", "negative", "absolute", "reciprocal", "rint", "floor"]
BINARY = ["add", "subtract", "multiply", "divide", "power", "maximum", "minimum", "fmax",
          "arctan2", "hypot", "logaddexp", "logaddexp2", "copysign", "fmod"]
SPECIAL = ["erf", "erfc", "expit", "logit", "ndtr", "log_ndtr", "ndtri", "gammaln", "erfcx"]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", UNARY + BINARY + SPECIAL)
def test_bitwise_numpys_and_split(name, dtype):
    f = getattr(numpy, name, None) or getattr(scipy.special, name)
    n = 2_000_000 if name in _loopmode._CHEAP else N
    # a spread with specials, so the domain edges and NaN/inf paths are exercised too
    x = (RNG.standard_normal(n) * 3).astype(dtype)
    x[::97] = numpy.array([numpy.nan, numpy.inf, -numpy.inf, 0.0, -0.0, 1e-40, 700.0])[
        numpy.arange(x[::97].size) % 7]
    y = (RNG.random(n) * 4 - 1).astype(dtype)
    args = (x,) if f.nin == 1 else (x, y)
    c = numpy.dtype(dtype).char
    key = f"{f.__name__} {c * f.nin}->{c}"
    before = _split_calls(key)
    with numpy.errstate(all="ignore"):
        plain, patched = _both(lambda: f(*args))
    _bitwise(plain, patched)
    assert _split_calls(key) > before, f"{key} was not split"


def test_every_route_reaches_the_loops():
    pd = pytest.importorskip("pandas")
    xr = pytest.importorskip("xarray")
    from numpy import exp as bound_exp

    x = RNG.standard_normal(N)
    routes = {
        "exp d->d": [lambda: numpy.exp(x), lambda: bound_exp(x),
                     lambda: numpy.exp(pd.Series(x)).to_numpy(),
                     lambda: numpy.exp(xr.DataArray(x)).values],
        "multiply dd->d": [lambda: x * x * 1.5],
        "power dd->d": [lambda: x ** 3.5],
        "subtract dd->d": [lambda: scipy.stats.norm.logpdf(x)],
    }
    for key, fns in routes.items():
        for fn in fns:
            before = _split_calls(key)
            with numpy.errstate(invalid="ignore"):
                plain, patched = _both(fn)
            _bitwise(plain, patched)
            assert _split_calls(key) > before, key


def test_removal_restores_numpys_loops_exactly():
    slots_seen = []
    with fastmath.patch(mode="loops"):
        assert fastmath.patch.active("loops") and not fastmath.patch.active("functions")
        for _, _, slot in _loopmode._slots:
            assert fastmath.integrations._loops.installed(slot)
            slots_seen.append(slot)
        assert len(slots_seen) > 100
    assert not fastmath.patch.active("loops")
    assert not any(fastmath.integrations._loops.installed(s) for s in slots_seen)
    # installing again reuses the same slots: each loop's original was saved once
    with fastmath.patch(mode="loops"):
        assert sorted(s for _, _, s in _loopmode._slots) == sorted(slots_seen)


def test_nesting_and_modes():
    with fastmath.patch(mode="both"):
        assert fastmath.patch.active("both")
        with fastmath.patch(mode="loops"):
            assert fastmath.patch.active("loops")
        assert fastmath.patch.active("loops") and numpy.exp is fastmath.exp
    assert not fastmath.patch.active("loops") and not fastmath.patch.active()
    assert numpy.exp is not fastmath.exp
    with pytest.raises(ValueError, match="'functions', 'loops', 'both'"):
        fastmath.patch(mode="fast")
    with pytest.raises(RuntimeError, match="no active patch"):
        fastmath.patch.stop("loops")


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_errstate_sees_flags_raised_in_worker_threads(dtype):
    # the overflow sits at the end, in a piece the pool's threads run, not the caller
    x = numpy.zeros(4 * N, dtype)
    x[-3:] = 1e5
    for state, expect in (("raise", FloatingPointError), ("warn", RuntimeWarning)):
        with fastmath.patch(mode="loops"):
            before = _split_calls(f"exp {x.dtype.char}->{x.dtype.char}")
            if expect is FloatingPointError:
                with numpy.errstate(over=state), pytest.raises(expect, match="overflow"):
                    numpy.exp(x)
            else:
                with numpy.errstate(over=state), pytest.warns(expect, match="overflow"):
                    numpy.exp(x)
            assert _split_calls(f"exp {x.dtype.char}->{x.dtype.char}") > before
    with fastmath.patch(mode="loops"), numpy.errstate(all="raise"):
        numpy.exp(x[:-3])  # nothing raised: no flag from anywhere
    with fastmath.patch(mode="loops"), numpy.errstate(divide="raise"):
        with pytest.raises(FloatingPointError, match="divide by zero"):
            numpy.log(x)


@pytest.mark.skipif(sys.platform != "linux" or os.uname().machine != "x86_64",
                    reason="the rounding mode's constants here are x86-64 glibc's")
def test_the_callers_rounding_mode_reaches_the_pools_threads():
    # a worker takes the caller's FP controls (MXCSR and the x87 control word), setting
    # them only where they differ from its own: a sum rounded upward in every piece
    import ctypes
    import ctypes.util

    libm = ctypes.CDLL(ctypes.util.find_library("m"))
    fe_upward, fe_tonearest = 0x800, 0
    a, b = RNG.standard_normal(4 * N), RNG.standard_normal(4 * N) * 1e-9
    nearest = numpy.add(a, b)
    from fastmath.dispatch import _runtime

    assert libm.fegetround() == fe_tonearest
    try:
        assert libm.fesetround(fe_upward) == 0
        upward = numpy.add(a, b)
        patched = []
        with fastmath.patch(mode="loops"):
            joins = _runtime.stats()["joins"]
            for _ in range(50):  # until a worker has run pieces (a parked one is slow to come)
                patched.append(numpy.add(a, b))
                if _runtime.stats()["joins"] > joins + 2:
                    break
            joined = _runtime.stats()["joins"] - joins
    finally:
        libm.fesetround(fe_tonearest)
    assert (upward >= nearest).all() and (upward != nearest).sum() > len(a) // 4
    for p in patched:
        _bitwise(p, upward)
    if _runtime.threads() > 1:
        assert joined > 2  # the pool's threads ran pieces of them
    with fastmath.patch(mode="loops"):
        _bitwise(numpy.add(a, b), nearest)  # and gives it back


def test_reductions_accumulations_and_overlap_stay_numpys():
    x = RNG.standard_normal(4 * N)
    cases = [lambda: numpy.add.reduce(x), lambda: numpy.add.accumulate(x),
             lambda: numpy.multiply.accumulate(x[:1000]), lambda: x.sum(), lambda: x.max(),
             lambda: numpy.cumsum(x), lambda: numpy.exp(x[::-1]), lambda: numpy.exp(x[::3])]

    def overlapping():
        y = x.copy()
        numpy.add(y[:-1], y[1:], out=y[1:])  # NumPy copies the input first: same here
        return y

    def in_place():
        y = x.copy()
        numpy.exp(y, out=y)
        return y

    for fn in cases + [overlapping, in_place]:
        plain, patched = _both(fn)
        _bitwise(plain, patched)


@pytest.fixture
def counting():
    before = _loopmode.count_calls(True)
    yield
    _loopmode.count_calls(before)


def test_small_arrays_and_scalars_take_the_original_loop(counting):
    x = RNG.standard_normal(100)
    key = "exp d->d"
    calls, split = _loopmode.counts().get(key, (0, 0))
    plain, patched = _both(lambda: [numpy.exp(x), numpy.exp(0.5), scipy.stats.norm.cdf(0.3)])
    for a, b in zip(plain, patched):
        _bitwise(a, b)
    after = _loopmode.counts()[key]
    assert after[0] > calls and after[1] == split


def test_calls_are_counted_only_while_asked_and_splitting_is_unchanged():
    # Counting sends every run through the long path, which must still split exactly the
    # runs it split before and count nothing once counting stops.
    small, big = RNG.standard_normal(100), RNG.standard_normal(N)
    key = "exp d->d"
    with fastmath.patch(mode="loops"):
        for on in (False, True, False):
            _loopmode.count_calls(on)
            calls, split = _loopmode.counts()[key]
            _bitwise(numpy.exp(small), numpy.exp(small.copy()))  # two short runs
            assert _loopmode.counts()[key] == (calls + 2 * on, split)
            fastmath.patch.stop("loops")
            plain = numpy.exp(big)
            fastmath.patch.start("loops")
            _bitwise(plain, numpy.exp(big))
            assert _loopmode.counts()[key] == (calls + 3 * on, split + 1)
    # installing while counting is on counts too
    _loopmode.count_calls(True)
    try:
        calls = _loopmode.counts()[key][0]
        with fastmath.patch(mode="loops"):
            numpy.exp(small)
        assert _loopmode.counts()[key][0] == calls + 1
    finally:
        _loopmode.count_calls(False)


def test_runs_left_whole_are_timed_only_while_asked():
    # The ceiling of bench/library_workloads.py: with splitting off every run is NumPy's,
    # whole, and (while timing is on) its time is added up; off again, nothing is added and
    # long runs split as before. Also installed while timing is on: the long path.
    small, big = RNG.standard_normal(100), RNG.standard_normal(N)
    key = "exp d->d"
    with fastmath.patch(mode="loops"):
        assert _loopmode.splitting(False) is True
        assert _loopmode.time_whole(True) is False
        try:
            _loopmode.whole_time()
            split = _loopmode.counts()[key][1]
            _bitwise(numpy.exp(big), numpy.exp(big.copy()))
            assert _loopmode.counts()[key][1] == split  # splitting off: nothing split
            spent = _loopmode.whole_time()
            assert spent > 0
            assert _loopmode.whole_time() == 0  # read and reset
            numpy.exp(small)  # a short run, timed too (the long path while timing)
            assert _loopmode.whole_time() > 0
            assert numpy.add.reduce(big) == numpy.add.reduce(big.copy())
            assert _loopmode.whole_time() == 0  # a reduction's runs cannot split: not timed
        finally:
            assert _loopmode.time_whole(False) is True
            assert _loopmode.splitting(True) is False
        numpy.exp(small)
        plain = numpy.exp(big)
        assert _loopmode.whole_time() == 0
        assert _loopmode.counts()[key][1] == split + 1  # the long run splits again
    _bitwise(plain, numpy.exp(big))
    _loopmode.time_whole(True)
    try:
        with fastmath.patch(mode="loops"):
            numpy.exp(small)
        assert _loopmode.whole_time() > 0
    finally:
        _loopmode.time_whole(False)


# --- reductions along rows ---------------------------------------------------------------

REDUCING = ["add", "multiply", "maximum", "minimum", "fmax", "fmin"]


def _rows(dtype, shape, special):
    """Random rows, or rows drawn from special values (signed zeros, infinities, NaNs of
    both signs and payloads, the extremes, subnormals) among ordinary ones."""
    x = RNG.standard_normal(shape)
    if special:
        info = numpy.finfo(dtype)
        values = numpy.array([0.0, -0.0, numpy.inf, -numpy.inf, numpy.nan, -numpy.nan,
                              info.max, -info.max, info.tiny, info.smallest_subnormal, 1.0])
        pick = RNG.random(shape) < 0.3
        x[pick] = RNG.choice(values, pick.sum())
    x = x.astype(dtype)
    if special:  # a NaN with its own payload
        x.reshape(-1).view(f"u{x.itemsize}")[7] |= 0x5 if dtype == "float64" else 0x3
        x.reshape(-1)[7] = numpy.copysign(x.reshape(-1)[7], -1.0)
    return x


@pytest.mark.parametrize("special", [False, True], ids=["plain", "special"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", REDUCING)
def test_reductions_along_rows_are_numpys_bit_for_bit(name, dtype, special):
    # NumPy's own loop on each row, called as NumPy calls it, the rows over the pool
    ufunc = getattr(numpy, name)
    for shape in [(20000, 8), (5000, 4), (3000, 3), (2500, 2), (700, 33), (40, 1000),
                  (50, 40, 7), (16, 300), (17, 8193)]:
        x = _rows(dtype, shape, special)
        before = x.copy()
        forms = [lambda: ufunc.reduce(x, axis=-1), lambda: ufunc.reduce(x, x.ndim - 1),
                 lambda: ufunc.reduce(x, axis=-1, keepdims=True),
                 lambda: ufunc.reduce(x, -1, None, None, False)]
        for form in forms:
            taken = _loopmode.reductions()
            with numpy.errstate(all="ignore"):
                plain, patched = _both(form)
            _bitwise(plain, patched)
            assert _loopmode.reductions() == taken + 1, shape
        _bitwise(x, before)


def test_numpys_reducing_functions_and_methods_take_the_rows():
    x = _rows("float64", (30000, 6), False)
    calls = [lambda: numpy.sum(x, axis=1), lambda: x.sum(axis=-1), lambda: x.max(axis=1),
             lambda: numpy.max(x, axis=1, keepdims=True), lambda: numpy.amin(x, axis=-1),
             lambda: x.prod(axis=1), lambda: numpy.prod(x, -1), lambda: x.min(1)]
    for call in calls:
        taken = _loopmode.reductions()
        plain, patched = _both(call)
        _bitwise(plain, patched)
        assert _loopmode.reductions() == taken + 1


def test_other_reductions_are_left_to_numpy():
    x = _rows("float64", (30000, 6), False)
    out = numpy.empty(30000)
    cases = [lambda: numpy.add.reduce(x, axis=0), lambda: numpy.add.reduce(x, axis=(1,)),
             lambda: numpy.add.reduce(x, axis=1, dtype=numpy.float32),
             lambda: numpy.add.reduce(x, axis=1, out=out).copy(),
             lambda: numpy.add.reduce(x, axis=1, initial=1.0),
             lambda: numpy.add.reduce(x, axis=1, where=x > 0),
             lambda: numpy.add.reduce(x[:, ::2], axis=1),
             lambda: numpy.add.reduce(numpy.asfortranarray(x), axis=1),
             lambda: numpy.add.reduce(x[:10], axis=1),  # too small
             lambda: numpy.add.reduce(x.astype(numpy.int64), axis=1),
             lambda: numpy.add.reduce(x.view(numpy.matrix), axis=1),
             lambda: numpy.subtract.reduce(x, axis=1),
             lambda: numpy.logaddexp.reduce(x, axis=1)]
    _left_to_numpy(cases, _loopmode.reductions)
    _numpys_errors([lambda: numpy.add.reduce(x, axis=2), lambda: numpy.add.reduce(x, bogus=1),
                    lambda: numpy.add.reduce(x, 1, axis=1), lambda: numpy.add.reduce(x, True),
                    lambda: numpy.add.reduce(x, 1, None, None, False, 0.0, True, 1)])


def _left_to_numpy(cases, taken):
    """Each of ``cases`` gives NumPy's result, of NumPy's type, under the loop mode, which
    takes none of them (``taken()``, its count of such calls, does not move)."""
    for case in cases:
        before = taken()
        plain, patched = _both(case)
        _bitwise(plain, patched)
        assert type(plain) is type(patched)
        assert taken() == before


def _numpys_errors(calls):
    """Each of ``calls`` raises under the loop mode what it raises without it."""
    with fastmath.patch(mode="loops"):
        for bad in calls:
            with pytest.raises(Exception) as got:
                bad()
            with pytest.raises(type(got.value), match=re.escape(str(got.value))):
                fastmath.patch.stop("loops")
                try:
                    bad()
                finally:
                    fastmath.patch.start("loops")


# --- reductions over the first axis -------------------------------------------------------

def _taken():
    return _loopmode.reductions(), _loopmode.column_reductions()


def _found(ufunc, dtype, at):
    """What the loop mode found, as it started, for ufunc's reductions of ``dtype``: ``at``
    1, the ways over the first axis; 2, the way over every axis."""
    with fastmath.patch(mode="loops"):
        return [found[at][dtype == "float64"] for (f, _), found in _loopmode._found.items()
                if f is ufunc][0]


def _key(name, dtype):
    """The loop's name in _loopmode.counts()."""
    return f"{name} {numpy.dtype(dtype).char * 2}->{numpy.dtype(dtype).char}"


@pytest.mark.parametrize("special", [False, True], ids=["plain", "special"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", REDUCING)
def test_reductions_over_the_first_axis_are_numpys_bit_for_bit(name, dtype, special):
    # NumPy's own loop on each row with NumPy's arguments; split into parts of rows (the
    # selecting ufuncs), into blocks of columns (4096 columns or more), or run whole
    ufunc, key = getattr(numpy, name), _key(name, dtype)
    found = _found(ufunc, dtype, 1)  # the ways the loop mode found for this loop
    assert found >= 0  # the whole run, NumPy's calls in NumPy's order, is always taken
    # splits where a way to split was found bitwise here (parts: the selecting ufuncs;
    # blocks of 2048+ columns: add and multiply, the others too where rows are few)
    parts, blocks = (found >> _loopmode._COLS_PARTS) & 1, found & 1
    for shape in [(20000, 8), (5000, 4), (3000, 3), (2500, 2), (700, 33), (40, 1000),
                  (50, 40, 7), (16, 300), (17, 8193), (300, 129), (40, 9000)]:
        x = _rows(dtype, shape, special)
        before = x.copy()
        forms = [lambda: ufunc.reduce(x), lambda: ufunc.reduce(x, axis=0),
                 lambda: ufunc.reduce(x, -x.ndim), lambda: ufunc.reduce(x, 0, keepdims=True),
                 lambda: ufunc.reduce(x, 0, None, None, False)]
        for form in forms:
            rows, cols = _taken()
            split = _split_calls(key)
            with numpy.errstate(all="ignore"):
                plain, patched = _both(form)
            _bitwise(plain, patched)
            assert _taken() == (rows, cols + 1), shape
            if parts or (blocks and shape[-1] >= 4096):
                assert _split_calls(key) > split, shape
        _bitwise(x, before)


def test_numpys_reducing_functions_and_methods_take_the_first_axis():
    x = _rows("float64", (30000, 6), False)
    calls = [lambda: numpy.sum(x, axis=0), lambda: x.sum(axis=0), lambda: x.max(axis=0),
             lambda: numpy.max(x, axis=0, keepdims=True), lambda: numpy.amin(x, axis=-2),
             lambda: x.prod(axis=0), lambda: numpy.prod(x, 0), lambda: x.min(0),
             lambda: x.mean(axis=0), lambda: numpy.nanmax(x, axis=0)]
    for call in calls:
        rows, cols = _taken()
        plain, patched = _both(call)
        _bitwise(plain, patched)
        assert _taken() == (rows, cols + 1)


def test_reductions_over_the_first_axis_left_to_numpy():
    x = _rows("float64", (30000, 6), False)
    one = x[:, :1].copy()  # one column: NumPy's iterator sums it in pairs, as a 1-d array
    cases = [lambda: numpy.add.reduce(one, axis=0), lambda: numpy.add.reduce(one[:, :, None]),
             lambda: numpy.add.reduce(x, axis=(0,)),
             lambda: numpy.add.reduce(x, axis=0, dtype=numpy.float32),
             lambda: numpy.add.reduce(x, axis=0, out=numpy.empty(6)).copy(),
             lambda: numpy.add.reduce(x, axis=0, initial=1.0),
             lambda: numpy.add.reduce(x, axis=0, where=x > 0),
             lambda: numpy.add.reduce(x[::2], axis=0),
             lambda: numpy.add.reduce(numpy.asfortranarray(x), axis=0),
             lambda: numpy.add.reduce(x[:15].copy(), axis=0),  # too few rows
             lambda: numpy.add.reduce(x.astype(numpy.int64), axis=0),
             lambda: numpy.add.reduce(x.view(numpy.matrix), axis=0),
             lambda: numpy.maximum.reduce(x.reshape(3, -1), axis=1 - 2)]
    _left_to_numpy(cases, _taken)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("axis,shape", [(1, (20000, 4)), (0, (20000, 4)), (0, (20, 8192)),
                                        (None, (20000, 10))],
                         ids=["rows", "first-whole", "first-blocks", "every-axis"])
def test_a_reduction_reports_fp_errors_as_numpy_does(dtype, axis, shape):
    x = numpy.full(shape, numpy.finfo(dtype).max, dtype)
    x[5, :4] = [numpy.inf, -numpy.inf, 1, 2]
    for mode in ("warn", "raise"):
        seen = []
        for patched in (False, True):
            if patched:
                fastmath.patch.start("loops")
            try:
                rows, cols, full = *_taken(), _loopmode.full_reductions()
                with numpy.errstate(all=mode), warnings.catch_warnings(record=True) as w:
                    warnings.simplefilter("always")
                    try:
                        r = numpy.asarray(numpy.add.reduce(x, axis=axis)).tobytes()
                    except FloatingPointError as e:
                        r = str(e)
                seen.append((r, [str(m.message) for m in w]))
                assert (*_taken(), _loopmode.full_reductions()) == (
                    rows + patched * (axis == 1), cols + patched * (axis == 0),
                    full + patched * (axis is None))
            finally:
                if patched:
                    fastmath.patch.stop("loops")
        assert seen[0] == seen[1]
        assert "overflow encountered in reduce" in str(seen[0])


# --- reductions over every axis -------------------------------------------------------------

@pytest.mark.parametrize("special", [False, True], ids=["plain", "special"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", REDUCING)
def test_reductions_over_every_axis_are_numpys_bit_for_bit(name, dtype, special):
    # one call of NumPy's loop over the whole array, cut along pairwise_sum's tree (add) or
    # into parts (the selecting ufuncs); multiply's product runs in order: NumPy's
    ufunc, key = getattr(numpy, name), _key(name, dtype)
    how = _found(ufunc, dtype, 2)
    assert how == {"add": _loopmode._FULL_TREE, "multiply": -1}.get(name, _loopmode._FULL_PARTS)
    for shape in [(8192,), (10001,), (40001,), (100003,), (262147,), (3000, 17), (20, 30, 70)]:
        x = _rows(dtype, shape, special)
        before = x.copy()
        forms = [lambda: ufunc.reduce(x, axis=None), lambda: ufunc.reduce(x.reshape(-1)),
                 lambda: ufunc.reduce(x.reshape(-1), -1), lambda: ufunc.reduce(x, None, None),
                 lambda: ufunc.reduce(x, axis=None, keepdims=True)]
        for form in forms:
            full, split = _loopmode.full_reductions(), _split_calls(key)
            with numpy.errstate(all="ignore"):
                plain, patched = _both(form)
            _bitwise(plain, patched)
            assert type(plain) is type(patched)
            assert _loopmode.full_reductions() == full + (how >= 0), shape
            assert (_split_calls(key) > split) == (how >= 0), shape
        _bitwise(x, before)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_a_sum_with_nans_of_two_kinds_is_numpys(dtype):
    # two NaNs of other signs and payloads in two leaves: which comes out of their sum is
    # the first operand's, an order NumPy's compiler chose; such a sum is NumPy's one call
    bits = f"u{numpy.dtype(dtype).itemsize}"
    for at in [(5, 200_000), (150_000, 9), (1, 299_990)]:
        x = RNG.standard_normal(300_000).astype(dtype)
        x[at[0]], x[at[1]] = numpy.nan, -numpy.nan
        x.view(bits)[at[1]] |= 0x15
        split = _split_calls(_key("add", dtype))
        plain, patched = _both(lambda: x.sum())
        _bitwise(plain, patched)
        assert _split_calls(_key("add", dtype)) > split


def test_numpys_functions_and_methods_take_every_axis():
    x = _rows("float64", (300_000,), False)
    y = _rows("float32", (600, 700), False)
    calls = [lambda: numpy.sum(x), lambda: x.sum(), lambda: x.mean(), lambda: numpy.mean(y),
             lambda: x.std(), lambda: numpy.var(y), lambda: x.max(), lambda: numpy.min(y),
             lambda: numpy.amax(x, keepdims=True), lambda: numpy.nanmax(x),
             lambda: numpy.ptp(y), lambda: y.sum(axis=None)]
    for call in calls:
        full = _loopmode.full_reductions()
        plain, patched = _both(call)
        _bitwise(plain, patched)
        assert type(plain) is type(patched)
        assert _loopmode.full_reductions() > full


def test_reductions_over_every_axis_left_to_numpy():
    x = _rows("float64", (300_000,), False)
    cases = [lambda: numpy.add.reduce(x[:8191]),  # too small
             lambda: numpy.multiply.reduce(x),  # a product in order: no split is NumPy's
             lambda: numpy.add.reduce(x, dtype=numpy.float32),
             lambda: numpy.add.reduce(x, out=numpy.empty(())).copy(),
             lambda: numpy.add.reduce(x, initial=1.0),
             lambda: numpy.add.reduce(x, where=x > 0),
             lambda: numpy.add.reduce(x[::2]),
             lambda: numpy.add.reduce(x.reshape(600, 500).T, axis=None),
             lambda: numpy.add.reduce(x.astype(numpy.int64)),
             lambda: numpy.add.reduce(x.reshape(600, 500).view(numpy.matrix), axis=None),
             lambda: numpy.add.reduce(x, axis=(0,)),
             lambda: numpy.subtract.reduce(x),
             lambda: numpy.logaddexp.reduce(x)]
    _left_to_numpy(cases, _loopmode.full_reductions)
    _numpys_errors([lambda: numpy.add.reduce(x, axis=1), lambda: numpy.add.reduce(x, -2),
                    lambda: numpy.add.reduce(x, None, bogus=1)])


def test_reductions_go_back_to_numpy_when_the_loop_mode_stops():
    x = _rows("float64", (30000, 6), False)
    with fastmath.patch(mode="loops"):
        taken = _loopmode.reductions()
        x.sum(axis=1)
        assert _loopmode.reductions() == taken + 1
        with fastmath.patch(mode="loops"):  # nested: still installed after the inner exit
            pass
        x.sum(axis=1)
        assert _loopmode.reductions() == taken + 2
    x.sum(axis=1)
    numpy.add.reduce(x, axis=1)
    assert _loopmode.reductions() == taken + 2


@pytest.mark.slow
def test_install_and_remove_while_eight_threads_compute():
    # Installing and removing are atomic pointer stores and a loop's original is never
    # freed: threads computing throughout must never crash or see a wrong bit.
    code = textwrap.dedent("""
        import threading, numpy, fastmath
        rng = numpy.random.default_rng(0)
        xs = [rng.standard_normal(n) for n in (10, 5000, 200_000, 700_000)]
        def compute(x):  # float loops, a comparison and a mask loop (bool outputs)
            return numpy.exp(x), x * x + 1.0, numpy.log1p(numpy.abs(x)), (x > 0.5) & (x < 2)
        expected = [compute(x) for x in xs]
        stop = threading.Event()
        bad = []
        def work(k):
            i = 0
            while not stop.is_set():
                j = (i + k) % len(xs)
                x = xs[j]
                got = compute(x)
                for g, e in zip(got, expected[j]):
                    if g.tobytes() != e.tobytes():
                        bad.append(j)
                i += 1
        threads = [threading.Thread(target=work, args=(k,)) for k in range(8)]
        for t in threads:
            t.start()
        for _ in range(60):
            with fastmath.patch(mode="loops"):
                pass
        stop.set()
        for t in threads:
            t.join()
        print("BAD", len(bad))
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=300, env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
    assert r.returncode == 0, r.stderr[-3000:]
    assert "BAD 0" in r.stdout


def test_fork_child_computes_with_the_loops():
    code = textwrap.dedent("""
        import os, numpy, fastmath
        x = numpy.random.default_rng(0).standard_normal(1_000_000)
        expected = numpy.exp(x)
        fastmath.patch.start("loops")
        numpy.exp(x)  # the pool is up in the parent
        pid = os.fork()
        if pid == 0:
            ok = numpy.exp(x).tobytes() == expected.tobytes()
            os._exit(0 if ok else 3)
        _, status = os.waitpid(pid, 0)
        print("CHILD", os.waitstatus_to_exitcode(status))
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=120, env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
    assert "CHILD 0" in r.stdout, r.stdout + r.stderr[-2000:]


def test_another_thread_sees_the_loops_and_pool_contention_is_safe():
    x = RNG.standard_normal(2 * N)
    expected = numpy.exp(x)
    results = []
    with fastmath.patch(mode="loops"):
        threads = [threading.Thread(target=lambda: results.append(numpy.exp(x)))
                   for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert len(results) == 4
    for r in results:
        _bitwise(r, expected)


def test_scipy_errors_reported_from_the_callers_thread():
    # SciPy reports special-function errors through Python from the thread computing; with
    # a category not ignored when the mode starts, SciPy's loops are not split, so
    # scipy.special.errstate raises exactly as without the mode.
    x = numpy.zeros(4 * N)
    x[-1] = -1.0  # gammaln's pole: "singular"
    before = _split_calls("gammaln d->d")
    with scipy.special.errstate(singular="raise"):
        with fastmath.patch(mode="loops"):
            with pytest.raises(scipy.special.SpecialFunctionError, match="singular"):
                scipy.special.gammaln(x)
            numpy.exp(x)
    assert _split_calls("gammaln d->d") == before
    with fastmath.patch(mode="loops"):
        plain = scipy.special.gammaln(x[:-1])
        assert _split_calls("gammaln d->d") > before
    _bitwise(plain, scipy.special.gammaln(x[:-1]))


def test_numpy_runs_every_installed_loop(counting):
    # NumPy 2 dispatches through ArrayMethods; for these legacy float loops it still looks
    # the pointer up on each call. A loop it cached elsewhere would show no calls here.
    with fastmath.patch(mode="loops"):
        keys = {f"{u.__name__} {t}": u for u, t, _ in _loopmode._slots}
        assert {"exp d->d", "multiply dd->d", "erf f->f", "expit d->d", "sqrt f->f"} <= set(keys)
        for key, ufunc in keys.items():
            dtype = numpy.dtype(key.split()[1][0])
            before = _loopmode.counts()[key][0]
            with numpy.errstate(all="ignore"):
                ufunc(*[numpy.full(10, 0.5, dtype)] * ufunc.nin)
            assert _loopmode.counts()[key][0] > before, key


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc only")
def test_large_outputs_numpy_allocates_under_the_loops_reuse_mapped_memory():
    code = textwrap.dedent("""
        import resource, numpy, fastmath
        x = numpy.ones(10**7)  # 80 MB, past glibc's own recycling
        def faults():
            return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        fastmath.patch.start("loops")
        numpy.log(x)  # the first output maps its pages
        before = faults()
        for _ in range(3):
            numpy.log(x)
        from fastmath.dispatch import _alloc
        print(_alloc._tuned, (faults() - before) // 3)
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=120, env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
    assert r.returncode == 0, r.stderr[-2000:]
    tuned, faults = r.stdout.split()
    if tuned == "False":  # None would mean the loop mode never asked
        pytest.skip("this C library has no mallopt")
    # 80 MB freshly mapped by NumPy is 19532 faults in 4 KiB pages, 40 or more in huge pages
    assert int(faults) < 20


# Loops with a bool output (comparisons, isnan, ...) or all-bool loops (mask & mask): their
# operands have different item sizes, so each piece's pointers must step by each operand's
# own stride.
MASK_LOOPS = sorted(f"{u.__name__} {t}" for u, _, t, _, _ in _loopmode._targets() if "?" in t)


def _ints(n):
    """int64s: small ones (ties, zeros, -1) with the extremes every 89th."""
    x = RNG.integers(-6, 7, n)
    info = numpy.iinfo(numpy.int64)
    x[::89] = numpy.array([info.min, info.max, -1, 0, info.min + 1])[
        numpy.arange(x[::89].size) % 5]
    return x


def _mask_operands(types, n, shift):
    """Inputs for the loop ``types``: floats with NaN, infinities, signed zeros and ties, or
    random bools; ``shift`` makes the second input a copy of the first shifted (ties)."""
    out = []
    for c in types.split("->")[0]:
        if c == "?":
            out.append(RNG.random(n) < 0.5)
            continue
        if c == _loopmode._INT:  # small integers (ties) and the extremes
            x = _ints(n)
        else:
            x = (RNG.standard_normal(n) * 3).astype(c)
            x[::89] = numpy.array([numpy.nan, numpy.inf, -numpy.inf, 0.0, -0.0, 1e-40, 1.5])[
                numpy.arange(x[::89].size) % 7]
        if out and shift:
            x[::3] = numpy.roll(out[0], shift)[::3]  # equal pairs, NaN against NaN included
        out.append(x)
    return out


@pytest.mark.parametrize("key", MASK_LOOPS)
def test_bool_output_and_mask_loops_bitwise_numpys(key):
    name, types = key.split()
    ufunc = getattr(numpy, name)
    n = 1_000_003  # several pieces, the last one short, none on an 8-byte boundary
    assert n > _loopmode._sizes(_loopmode._CHEAP_COST, True)[0]
    full = _mask_operands(types, 2 * n + 1, shift=0)
    cases = {
        "contiguous": [a[:n] for a in full],
        "strided": [a[::2] for a in full],
        "reversed": [a[n - 1::-1] for a in full],
        "offset by one": [a[1:n + 1] for a in full],
        "0-d second": [full[0][:n]] + [numpy.asarray(a[5]) for a in full[1:]],
        "small": [a[:1000] for a in full],
    }
    out_buf = numpy.zeros(n + 3, bool)
    for case, args in cases.items():
        before = _split_calls(key)
        with numpy.errstate(all="ignore"):
            plain, patched = _both(lambda: ufunc(*args))
            if case == "offset by one":  # an output not on any boundary either
                out_buf[:] = False
                ufunc(*args, out=out_buf[3:])
                plain_out = out_buf.copy()
                with fastmath.patch(mode="loops"):
                    out_buf[:] = False
                    ufunc(*args, out=out_buf[3:])
                _bitwise(plain_out, out_buf)
        assert patched.dtype == bool
        _bitwise(plain, patched)
        split = _split_calls(key) > before
        # every case but the small one is long enough to split (0-d: one operand of stride 0)
        assert split == (case != "small"), (key, case)


def test_bool_output_loops_are_restored_on_removal():
    x = RNG.standard_normal(N)
    masks = (x > 0, x < 1)
    with fastmath.patch(mode="loops"):
        keys = {f"{u.__name__} {t}" for u, t, _ in _loopmode._slots}
        assert {"greater dd->?", "isnan f->?", "bitwise_and ??->?"} <= keys
    before = [_split_calls(k) for k in ("greater dd->?", "isnan d->?", "bitwise_and ??->?")]
    _bitwise(x > 0, masks[0])
    numpy.isnan(x)
    _ = masks[0] & masks[1]
    after = [_split_calls(k) for k in ("greater dd->?", "isnan d->?", "bitwise_and ??->?")]
    assert after == before  # NumPy's own loops again: nothing reaches the pool


# NumPy's int64 loops the loop mode reaches: arithmetic and comparisons (_loopmode._INTEGER)
INT_LOOPS = sorted(f"{u.__name__} {t}" for u, _, t, _, _ in _loopmode._targets()
                   if t[0] == _loopmode._INT)


def _outcome(ufunc, args):
    """The call's result (dtype, shape, bytes) and the FP warnings it raised, every
    category set to warn (integer division by zero and the minimum over -1 raise flags)."""
    with warnings.catch_warnings(record=True) as seen, numpy.errstate(all="warn"):
        warnings.simplefilter("always")
        r = numpy.asarray(ufunc(*args))
    return r.dtype, r.shape, r.tobytes(), sorted(str(w.message) for w in seen)


@pytest.mark.parametrize("key", INT_LOOPS)
def test_int64_loops_bitwise_numpys_with_numpys_warnings(key):
    name, types = key.split()
    ufunc = getattr(numpy, name)
    n = 1_000_003  # several pieces, the last one short
    assert n > _loopmode._sizes(_loopmode._CHEAP_COST, True)[0]
    full = [_ints(2 * n + 1) for _ in range(ufunc.nin)]
    cases = {"contiguous": [a[:n] for a in full],
             "strided": [a[::2] for a in full],
             "reversed": [a[n - 1::-1] for a in full],
             "a NumPy scalar second": [full[0][:n]] + [numpy.int64(-3)] * (ufunc.nin - 1)}
    for case, args in cases.items():
        before = _split_calls(key)
        plain, patched = _both(lambda: _outcome(ufunc, args))
        assert patched == plain, case
        assert _split_calls(key) > before, case
    assert INT_LOOPS and all(k.split()[0] in _loopmode._INTEGER for k in INT_LOOPS)


def test_int64_reductions_and_loops_not_taken_stay_numpys():
    x, small = _ints(3 * N), RNG.integers(0, 5, N)
    cases = [lambda: numpy.add.reduce(x), lambda: x.sum(), lambda: numpy.cumsum(x),
             lambda: x.max(), lambda: numpy.multiply.accumulate(x[:1000]),
             lambda: numpy.power(small, 3), lambda: numpy.left_shift(small, 2),
             lambda: numpy.add(x.astype("int32"), x.astype("int32"))]
    for fn in cases:
        with numpy.errstate(all="ignore"):
            plain, patched = _both(fn)
        _bitwise(plain, patched)
    assert "power ll->l" not in _loopmode.counts()


@pytest.fixture
def clocks():
    """The loop mode's back-off on made-up clocks (wall, the caller's CPU time): the
    tests below decide whether a split lost, whatever the load on this machine."""
    # workers that never park between the runs: a split that woke a parked one is not
    # judged (its wake-up is no sign of a busy core), and these tests judge every split.
    # A worker parked before is woken here, and spins from then on: woken by the tests'
    # first runs instead, on a loaded machine it counted as parked for some runs after
    # (its wake-up took longer than they did), and those splits went unjudged.
    spin = _loopmode._runtime.set_spin(0.5)
    _loopmode._runtime.fixed_cost(3, 0)
    wall, cpu = FakeClock(), FakeClock()
    _loopmode._runtime._set_clock(wall, cpu)
    every = _loopmode._runtime.set_cpu_every(1)  # every split reads the caller's CPU time
    yield wall, cpu
    _loopmode._runtime._set_clock(None, None)
    _loopmode._runtime.set_cpu_every(every)
    _loopmode._runtime.set_spin(spin)


def _ways(key, runs):
    """Run ``runs()`` and say how the loop mode ran it: "split", "paced" (kept whole by
    the back-off) or "whole" (a timed sample)."""
    split, paced = _split_calls(key), _loopmode.paced().get(key, 0)
    runs()
    if _split_calls(key) > split:
        return "split"
    return "paced" if _loopmode.paced()[key] > paced else "whole"


def test_splits_that_lose_back_off_and_results_stay_numpys(monkeypatch, clocks):
    """A split that ran slower than one thread makes the next runs of that loop and length
    run in one piece, for a pause that doubles while splits keep losing; every result is
    NumPy's all along. Here every split loses: the caller's CPU time for its pieces reads
    nothing, and the wall clock slows down reading by reading, so that each split takes
    longer than the whole runs before it (whichever thread ran its pieces)."""
    if fastmath.dispatch._parallel.threads() < 2:
        pytest.skip("one thread: nothing splits")
    for name, value in (("_SPLIT_AT", 2), ("_MIN_SPLIT", 2), ("_PIECE", 64)):
        monkeypatch.setattr(_loopmode, name, value)
    wall, cpu = clocks
    wall.tick = 1e-3
    cpu.tick = 0.0

    def slowing():
        wall.tick += 1e-6
        return wall()
    _loopmode._runtime._set_clock(slowing, cpu)
    _loopmode.pacing(True)
    x = RNG.standard_normal(1000)
    key = "exp d->d"
    want = numpy.exp(x)
    with fastmath.patch(mode="loops"):
        ways = [_ways(key, lambda: _bitwise(numpy.exp(x), want)) for _ in range(50)]
    # The first split has no whole run to be compared with (nor, if the pool's thread took
    # every piece, a CPU time of the caller's): lost or not, the second run is whole, not
    # kept (the run right after a split is not: the output's lines come back from the
    # other cores then), and the third, timed.
    assert ways[0] == "split" and {ways[1], ways[2]} <= {"paced", "whole"}, ways
    # From then on the first split after a pause is not judged (the lines move out again),
    # the next loses, and the runs kept whole after it double.
    rest = "".join(w[0] for w in ways[3:])
    assert set(rest.split("p")) == {"ss", ""}, ways
    pauses = [len(p) for p in rest.split("ss")[1:]]
    assert len(pauses) >= 4 and all(pauses), ways
    assert all(b == 2 * a for a, b in zip(pauses, pauses[1:-1])), ways
    assert pauses[-1] <= 2 * pauses[-2], ways
    _loopmode.pacing(False)
    with fastmath.patch(mode="loops"):
        split = _split_calls(key)
        _bitwise(numpy.exp(x), want)
        assert _split_calls(key) == split + 1  # without pacing every such run splits


def test_whole_runs_are_timed_and_a_split_slower_than_them_lost(monkeypatch, clocks):
    """The second and third runs of a loop and length run whole, the third timed (the run
    right after a split is not), and so do two in 64 after: a split slower than those runs
    lost, even when the caller's own CPU time (which reads high when the two threads slow
    each other) says it won."""
    if fastmath.dispatch._parallel.threads() < 2:
        pytest.skip("one thread: nothing splits")
    for name, value in (("_SPLIT_AT", 2), ("_MIN_SPLIT", 2), ("_PIECE", 64)):
        monkeypatch.setattr(_loopmode, name, value)
    wall, cpu = clocks
    wall.tick, cpu.tick = 1e-3, 1.0  # 1 ms between readings; the caller's CPU time: won
    _loopmode.pacing(True)
    n = 3001  # a run length no other test uses: its own, fresh record
    x = RNG.standard_normal(n)
    key = "sqrt d->d"
    want = numpy.sqrt(numpy.abs(x))
    ax = numpy.abs(x)
    with fastmath.patch(mode="loops"):
        slot = next(s for s, k in _loopmode._known.items() if k == key)
        pace = _loopmode._loops.pace(slot, n)
        assert pace["kept"] == 0 and pace["one_thread"] is None
        split = _split_calls(key)
        _bitwise(numpy.sqrt(ax), want)  # the first run splits, and wins
        assert _split_calls(key) == split + 1
        _bitwise(numpy.sqrt(ax), want)  # the second runs whole, not kept
        assert _loopmode._loops.pace(slot, n)["kept"] == 0
        _bitwise(numpy.sqrt(ax), want)  # the third runs whole, timed
        assert _split_calls(key) == split + 1
        pace = _loopmode._loops.pace(slot, n)
        assert pace["kept"] == 1 and pace["since"] == 0 and pace["left"] == 0
        assert pace["one_thread"] == pytest.approx(1e-3, rel=1e-5)  # its two readings apart

        def slow_cpu():  # a split as fast as one thread by CPU time, and 2 ms long
            wall.advance(0.5e-3)
            return cpu()
        _loopmode._runtime._set_clock(wall, slow_cpu)
        assert _ways(key, lambda: _bitwise(numpy.sqrt(ax), want)) == "split"
        assert _loopmode._loops.pace(slot, n)["left"] == 0  # the change of way: not judged
        assert _ways(key, lambda: _bitwise(numpy.sqrt(ax), want)) == "split"
        pace = _loopmode._loops.pace(slot, n)
        assert pace["left"] == 1 and pace["skip"] == 2  # lost: the next run kept whole
        assert _ways(key, lambda: _bitwise(numpy.sqrt(ax), want)) == "paced"
        _loopmode._runtime._set_clock(wall, cpu)
        wall.tick = 0.5e-3  # splits in half a whole run's time: won
        assert _ways(key, lambda: _bitwise(numpy.sqrt(ax), want)) == "split"
        pace = _loopmode._loops.pace(slot, n)
        assert pace["left"] == 0 and pace["skip"] == 1 and pace["kept"] == 1
        ways = "".join(_ways(key, lambda: _bitwise(numpy.sqrt(ax), want))[0]
                       for _ in range(100))
        # 64 runs after the one kept (four of them above), two run whole (the first not
        # kept, right after a split)
        assert ways == "s" * 60 + "ww" + "s" * 38, ways
        assert _loopmode._loops.pace(slot, n)["kept"] == 2
    _loopmode.pacing(False)
