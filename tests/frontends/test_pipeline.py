"""The one pipeline: every kind of function keeps NumPy's/SciPy's behaviour on every backend.

Each test runs a registry row's fastmath function and its reference side by side, under
each backend available here, and compares results, warnings and exceptions.
"""
import os
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest

import fastmath
from fastmath._registry import ROWS
from fastmath.frontends import _ufunc

from helpers import assert_same

BACKENDS = fastmath.available_backends()
UFUNCS = [r for r in ROWS if r.kind in ("unary", "binary")]
BINARY = [r for r in ROWS if r.kind == "binary"]
SCIPY_UFUNCS = [r for r in UFUNCS if r.ref.startswith("scipy")]
ELEMENTWISE = [r for r in ROWS if r.kind == "elementwise"]
SOFTMAX = [r for r in ROWS if r.kind == "softmax"]
REDUCTIONS = [r for r in ROWS if r.kind in ("logsumexp", "softmax")]


def ids(rows):
    return [r.name for r in rows]


def operands(spec, n=64, dtype=np.float64):
    """Inputs inside every row's domain, so that warnings come only from what is tested."""
    x = np.linspace(0.05, 0.95, n).astype(dtype)
    return (x,) if spec.kind != "binary" else (x, x[::-1].copy())


def outcome(fn, *args, **kwargs):
    """(result or exception type, [(category, message)]) of ``fn(*args, **kwargs)``."""
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        try:
            r = fn(*args, **kwargs)
        except Exception as e:  # noqa: BLE001 - the exception is what is compared
            r = type(e)
    return r, [(x.category, str(x.message)) for x in w]


def same(got, want, spec):
    if isinstance(want, type):
        assert got is want, (got, want)
        return
    assert type(got) is type(want), (type(got), type(want))
    if want is None:
        return
    assert np.shape(got) == np.shape(want) and got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=1e-6, equal_nan=True)


def call_reference(spec, *xs, where=True, **kwargs):
    """The reference's call. SciPy's ufuncs never see a ``where=`` mask here: they can
    corrupt the heap with one (scipy/scipy#25127), so NumPy's documented meaning of
    ``where=`` with ``out=`` is applied to their result instead."""
    ref = spec.reference()
    if where is True or not spec.ref.startswith("scipy"):
        return ref(*xs, where=where, **kwargs)
    if len(xs) > ref.nin and type(xs[ref.nin]) is tuple:
        return ref(*xs, **kwargs)  # a positional tuple: the ufunc's TypeError, mask or not
    out = xs[ref.nin] if len(xs) > ref.nin else kwargs.pop("out")
    out = out[0] if type(out) is tuple else out
    np.copyto(out, ref(*xs[:ref.nin], **kwargs), where=where)
    return out


def numpy_mask_warnings():
    """NumPy's ufunc machinery's warnings for a ``where=`` mask without ``out=``: the
    oracle for SciPy's ufuncs, which such a call can crash (scipy/scipy#25127: erf and
    xlogy segfault on 64 elements here)."""
    return outcome(np.negative, np.zeros(3), where=np.ones(3, bool))[1]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("spec", UFUNCS, ids=ids(UFUNCS))
@pytest.mark.parametrize("where", [True, np.True_, "mask"])
def test_where_without_out_warns_as_the_reference_does(spec, backend, where):
    xs = operands(spec)
    if isinstance(where, str):
        where = np.arange(xs[0].size) % 3 == 0
    with fastmath.backend(backend):
        _, got = outcome(getattr(fastmath, spec.name), *xs, where=where)
    if spec.ref.startswith("scipy") and where is not True:
        want = numpy_mask_warnings()
    else:
        _, want = outcome(spec.reference(), *xs, where=where)
    assert got == want


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("spec", UFUNCS, ids=ids(UFUNCS))
def test_errstate_raise_with_where_and_out_writes_out_first(spec, backend):
    x = np.array([1e308, -1e308, 0.0, 1.0, 2.5, -3.0, 1e-300, 710.0, -0.5, 4.0] * 8)
    xs = (x,) if spec.kind == "unary" else (x, x[::-1].copy())
    mask = np.arange(x.size) % 2 == 0
    outs = []
    for fn, scope in ((getattr(fastmath, spec.name), backend),
                      (lambda *a, **k: call_reference(spec, *a, **k), "numpy")):
        out = np.full(x.shape, 7.0)
        with fastmath.backend(scope), np.errstate(all="raise"):
            r, _ = outcome(fn, *xs, where=mask, out=out)
        outs.append((r if isinstance(r, type) else None, out))
    (got_exc, got), (want_exc, want) = outs
    assert got_exc is want_exc
    np.testing.assert_allclose(got, want, rtol=1e-6, equal_nan=True)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("spec", UFUNCS, ids=ids(UFUNCS))
def test_bad_casting_is_the_references_error(spec, backend):
    xs = operands(spec)
    with fastmath.backend(backend):
        got = outcome(getattr(fastmath, spec.name), *xs, casting="bogus")[0]
    assert got is outcome(spec.reference(), *xs, casting="bogus")[0]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("spec", UFUNCS + ELEMENTWISE, ids=ids(UFUNCS + ELEMENTWISE))
def test_broadcast_input_gives_the_references_layout(spec, backend):
    row = np.linspace(0.05, 0.95, 300)
    xs = [np.broadcast_to(row, (400, 300))]
    if spec.kind == "binary":
        xs.append(np.broadcast_to(row[:, None][:1], (400, 300)))
    with fastmath.backend(backend), np.errstate(all="ignore"):  # arccosh: NaNs, as NumPy's
        got = getattr(fastmath, spec.name)(*xs)
        want = spec.reference()(*xs)
    assert got.strides == want.strides and got.flags.owndata
    np.testing.assert_allclose(got, want, rtol=1e-6)


@pytest.mark.parametrize("spec", ELEMENTWISE, ids=ids(ELEMENTWISE))
def test_plain_functions_are_not_ufuncs(spec):
    ours, ref = getattr(fastmath, spec.name), spec.reference()
    assert isinstance(ours, np.ufunc) == isinstance(ref, np.ufunc)
    assert hasattr(ours, "nin") == hasattr(ref, "nin")


OUT_FORMS = ["kw-None", "kw-(None,)", "kw-array", "kw-(array,)", "pos-None", "pos-array",
             "pos-(array,)", "pos-(None,)"]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("spec", UFUNCS, ids=ids(UFUNCS))
@pytest.mark.parametrize("form", OUT_FORMS)
@pytest.mark.parametrize("masked", [False, True])
def test_every_out_form_returns_the_references_result(spec, backend, form, masked):
    xs = operands(spec)
    results = []
    for fn, scope in ((getattr(fastmath, spec.name), backend),
                      (lambda *a, **k: call_reference(spec, *a, **k), "numpy")):
        arr = np.zeros(xs[0].shape)
        where, what = form.split("-")
        value = {"None": None, "(None,)": (None,), "array": arr, "(array,)": (arr,)}[what]
        args, kwargs = ((value,), {}) if where == "pos" else ((), {"out": value})
        if masked:
            kwargs["where"] = np.arange(arr.size) % 2 == 0
            if "None" in what:
                continue  # uninitialised elements: nothing to compare
        with fastmath.backend(scope):
            r, _ = outcome(fn, *xs, *args, **kwargs)
        results.append((r, arr))
    if len(results) < 2:
        return
    (got, got_arr), (want, want_arr) = results
    same(got, want, spec)
    if want is want_arr:
        assert got is got_arr
    np.testing.assert_allclose(got_arr, want_arr, rtol=1e-6)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("spec", UFUNCS, ids=ids(UFUNCS))
def test_backwards_out_is_taken_quietly(spec, backend):
    xs = operands(spec, 4000)
    buf = np.zeros(2 * xs[0].size)
    with fastmath.backend(backend), warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("error")  # a backend's failure would warn
        got = getattr(fastmath, spec.name)(*xs, out=buf[::-2])
        want = spec.reference()(*xs)
    assert got.base is buf
    np.testing.assert_allclose(got, want, rtol=1e-6, equal_nan=True)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("spec", REDUCTIONS, ids=ids(REDUCTIONS))
def test_huge_rows_report_the_subtract_overflow(spec, backend):
    x = np.array([[1e308, -1e308, 0.0], [0.0, 1.0, 2.0]] * 40)
    with fastmath.backend(backend):
        got, got_w = outcome(getattr(fastmath, spec.name), x, axis=1)
    want, want_w = outcome(spec.reference(), x, axis=1)
    assert got_w == want_w
    np.testing.assert_allclose(got, want, rtol=1e-12)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("spec", REDUCTIONS, ids=ids(REDUCTIONS))
@pytest.mark.parametrize("axis", [[0], [0, 1], 0.0, True, np.int64(1), np.array(0), (0,)])
def test_axis_forms_are_taken_or_refused_as_scipy_does(spec, backend, axis):
    x = np.linspace(-2.0, 2.0, 600).reshape(20, 30)
    with fastmath.backend(backend):
        got = outcome(getattr(fastmath, spec.name), x, axis=axis)[0]
    want = outcome(spec.reference(), x, axis=axis)[0]
    if isinstance(want, type):
        assert got is want
    else:
        np.testing.assert_allclose(got, want, rtol=1e-12)


HUGE = {
    "unary": "f(np.broadcast_to(np.ones(1), (10**7, 10**7)))",
    "binary": "f(np.broadcast_to(np.ones(1), (10**7, 10**7)), 2.0)",
    "elementwise": "f(np.broadcast_to(np.ones(1), (10**7, 10**7)))",
    "logsumexp": "f(np.ones((10**7, 1)), b=np.ones((1, 10**6)))",
    "softmax": "f(np.broadcast_to(np.ones(1), (10**7, 10**7)), axis=1)",
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("kind", sorted(HUGE))
def test_impossible_sizes_are_refused_at_once(kind, backend):
    spec = next(r for r in ROWS if r.kind == kind)
    code = (f"import numpy as np, fastmath\nf = fastmath.{spec.name}\n"
            f"with fastmath.backend({backend!r}):\n"
            f"    try:\n        {HUGE[kind]}\n"
            f"    except MemoryError:\n        print('MemoryError')\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=60)
    assert r.stdout.strip() == "MemoryError", r.stderr[-2000:]


def test_a_broadcast_beyond_memory_and_swap_is_refused_where_the_system_overcommits(
        monkeypatch):
    # Where vm.overcommit_memory=1, NumPy's allocation of SciPy's temporaries succeeds for
    # any size (SciPy is then killed writing into it) and the kernels, which never hold
    # them, would run for hours. Here the allocation succeeds (128 MiB) and the machine is
    # made smaller than it: the answer must be NumPy's MemoryError, with its words.
    from fastmath.frontends import _reductions
    assert _reductions._memory_ceiling() >= os.sysconf("SC_PHYS_PAGES") * os.sysconf(
        "SC_PAGE_SIZE")
    monkeypatch.setattr(_reductions, "_ceiling", float(1 << 26))
    a, b = np.ones((1 << 12, 1)), np.ones((1, 1 << 12))
    with pytest.raises(MemoryError, match=r"Unable to allocate 128\. MiB for an array "
                                          r"with shape \(4096, 4096\) and data type "
                                          r"float64"):
        fastmath.logsumexp(a, b=b)
    assert (a == 1).all() and (b == 1).all()


@pytest.mark.parametrize("spec", SOFTMAX, ids=ids(SOFTMAX))
def test_softmax_of_a_dask_array(spec):
    da = pytest.importorskip("dask.array")
    x = np.linspace(-3, 3, 600).reshape(20, 30)
    d = da.from_array(x, chunks=(7, 11))
    got = getattr(fastmath, spec.name)(d, axis=1)
    assert isinstance(got, da.Array)
    np.testing.assert_allclose(got.compute(scheduler="sync"), spec.reference()(x, axis=1),
                               rtol=1e-12)


class Broken(RuntimeError):
    pass


def failing(kernel):
    """A real kernel behind one that writes garbage into its output and then raises: a
    backend failing part-way."""
    def call(*args):
        if isinstance(args[-1], np.ndarray):
            args[-1][...] = -99.0
        raise Broken("simulated kernel failure")
    return call


def call_args(spec, n=3000):
    x = np.linspace(0.1, 0.9, n) + (spec.name == "arccosh")  # inside every domain
    if spec.kind == "binary":
        return (x, x[::-1].copy()), {}
    if spec.kind in ("softmax", "logsumexp"):
        return (x.reshape(60, -1),), {"axis": 1}
    return (x,), {}


@pytest.mark.parametrize("spec", ROWS, ids=ids(ROWS))
def test_a_failing_kernel_is_followed_by_the_next_with_one_warning(spec, monkeypatch):
    from fastmath.dispatch import _selection
    from fastmath import backends

    numpy_kernel = backends.get("numpy").kernel(spec)
    monkeypatch.setattr(_selection, "plan", lambda *a: (("failing", failing(numpy_kernel)),
                                                         ("numpy", numpy_kernel)))
    monkeypatch.setattr(_selection, "_warned", set())
    # the calls the fast path in C makes itself were learned from the real plans
    _ufunc._forget_small()
    monkeypatch.undo = _then(monkeypatch.undo, _ufunc._forget_small)
    args, kwargs = call_args(spec)
    with warnings.catch_warnings(record=True) as w, fastmath.backend("numpy"):
        warnings.simplefilter("always")
        got = getattr(fastmath, spec.name)(*args, **kwargs)
    assert [str(x.message) for x in w if "'failing' failed" in str(x.message)] != []
    assert len(w) == 1, [str(x.message) for x in w]
    np.testing.assert_array_equal(got, spec.reference()(*args, **kwargs))


@pytest.mark.parametrize("spec", ROWS, ids=ids(ROWS))
def test_every_kind_logs_where_it_ran(spec, caplog):
    import logging

    from fastmath.dispatch import _log

    caplog.set_level(logging.DEBUG, logger="fastmath")
    _log.refresh()
    try:
        args, kwargs = call_args(spec)
        with fastmath.backend("numpy"):
            getattr(fastmath, spec.name)(*args, **kwargs)
        ran = [r for r in caplog.records if getattr(r, "ran_on", None) == "numpy"]
        # the function's own name, as the reference has it (SciPy's digamma is "psi")
        name = getattr(fastmath, spec.name).__name__
        assert ran and ran[0].getMessage().startswith(f"{name}(float64[")
    finally:
        caplog.set_level(logging.WARNING, logger="fastmath")
        _log.refresh()


def _common_operands(spec, layout):
    """Operands of the common call (ndarrays, no options) in various layouts and dtypes."""
    x = np.linspace(0.05, 0.95, 24) + (spec.name == "arccosh")
    if layout == "float32":
        x = x.astype(np.float32)
    elif layout == "int8":  # a cast to the loop's dtype (float16 for numpy's own rows)
        x = (x * 3).astype(np.int8) + 1
    elif layout == "F":
        x = np.asfortranarray(x.reshape(4, 6))
    elif layout == "strided":
        x = np.repeat(x, 2)[::2]
    elif layout == "backwards":
        x = x[::-1]
    elif layout == "swapped":
        x = x.astype(x.dtype.newbyteorder())
    elif layout == "0-d":
        x = np.array(x[3])
    if spec.kind != "binary":
        return (x,)
    if layout == "broadcast":
        return x.reshape(4, 6), x[:6]
    if layout == "mixed":
        return x, x[::-1].astype(np.float32)
    if x.ndim == 0:
        return x, x * 0.5
    return x, x[::-1].copy(order="K") if layout != "F" else np.asfortranarray(x[::-1])


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("spec", UFUNCS, ids=ids(UFUNCS))
def test_the_common_call_is_the_references_in_every_layout(spec, backend):
    # one process-long ufunc object meets each layout and dtype in turn: what the front
    # end caches for one must not answer for another
    ours, ref = getattr(fastmath, spec.name), spec.reference()
    layouts = ["C", "float32", "int8", "F", "strided", "backwards", "swapped", "0-d",
               "broadcast", "mixed", "C", "int8", "mixed"]
    with fastmath.backend(backend), np.errstate(all="ignore"):
        for layout in layouts:
            xs = _common_operands(spec, layout)
            copies = [x.copy() for x in xs]
            got, want = outcome(ours, *xs), outcome(ref, *xs)
            same(got[0], want[0], spec)
            if isinstance(want[0], np.ndarray) and want[0].ndim > 1:
                assert got[0].flags.f_contiguous == want[0].flags.f_contiguous, layout
            for x, c in zip(xs, copies):
                np.testing.assert_array_equal(x, c)


@pytest.mark.parametrize("backend", BACKENDS)
def test_each_call_sees_the_error_state_of_its_moment(backend):
    # the front end reads NumPy's error state through a cache: a change of state, nested
    # or in another thread, must be seen by the very next call
    import threading

    x = np.array([0.0, 1.0, 2.0] * 400)

    def run():
        results = []
        for mode in ("ignore", "raise", "warn", "ignore", "raise"):
            with np.errstate(divide=mode):
                for f in (fastmath.log, np.log):
                    results.append(outcome(f, x)[1:] + (outcome(f, x)[0] is FloatingPointError,))
        np.seterr(divide="raise")
        try:
            results.append(outcome(fastmath.log, x)[0] is FloatingPointError)
        finally:
            np.seterr(divide="warn")
        results.append(outcome(fastmath.log, x)[0] is FloatingPointError)
        return results

    with fastmath.backend(backend):
        got = run()
        pairs = list(zip(got[0:10:2], got[1:10:2]))
        assert all(a == b for a, b in pairs), pairs
        assert got[10:] == [True, False]
        seen = []
        with np.errstate(divide="raise"):
            t = threading.Thread(target=lambda: seen.append(outcome(fastmath.log, x)[0]))
            t.start()
            t.join(60)
            assert outcome(fastmath.log, x)[0] is FloatingPointError
        assert seen and seen[0] is not FloatingPointError  # threads start with NumPy's default


@pytest.mark.parametrize("spec", UFUNCS + ELEMENTWISE, ids=ids(UFUNCS + ELEMENTWISE))
def test_equal_to_its_reference(spec):
    ours, ref = getattr(fastmath, spec.name), spec.reference()
    assert ours == ref and ref == ours and not ours != ref
    assert hash(ours) == hash(ref)
    assert ref in [ours] and ours in [ref] and {ref: 1}[ours] == 1
    other = fastmath.exp if spec.name != "exp" else fastmath.log
    assert ours != other and ours != other.reference and ours != spec.name


def test_numpys_own_ufuncs_are_found_among_the_patched_names():
    # NumPy's test_umath (TestSpecialFloats::test_unary_spurious_fpexception) skips the
    # cases where an error is expected with ``ufunc in [np.log, np.log2, ...]``, for the
    # ufuncs of numpy._core.umath: under the patch the list holds fastmath's objects
    from numpy._core import umath

    with fastmath.patch():
        expected = [np.log, np.log2, np.log10, np.log1p, np.sqrt, np.arccosh, np.arctanh]
        for uf in (umath.log, umath.log2, umath.sqrt):
            assert uf in expected
        assert umath.exp not in expected
        assert np.log is not umath.log


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("spec", [r for r in BINARY if r.ref.startswith("numpy:")],
                         ids=lambda s: s.name)
@pytest.mark.parametrize("bad_out", [False, True])
def test_a_python_scalar_that_overflows_its_loop_dtype_is_reported_once(spec, backend, bad_out):
    # 70000 does not fit float16: NumPy reports that cast once, also when it then raises for
    # an out= it cannot cast to; fastmath used to cast it too, and report it twice
    def run(fn):
        calls = []
        kw = {"dtype": np.float16}
        if bad_out:
            kw["out"] = np.full((), 7, dtype=np.int64)
        with np.errstate(all="call", call=lambda kind, flags: calls.append((kind, flags))):
            try:
                result = fn(np.int32(3), 70000, **kw)
            except Exception as e:  # noqa: BLE001 - compared below
                result = type(e)
        return result, calls

    with fastmath.backend(backend):
        got = run(getattr(fastmath, spec.name))
    expected = run(spec.reference())
    assert got[1] == expected[1]
    if isinstance(expected[0], type):
        assert got[0] is expected[0]
    else:
        np.testing.assert_array_equal(got[0], expected[0])


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_call_callback_gets_every_flag_raised_even_ignored_ones(backend):
    # NumPy hands an errstate(call=...) callback the whole flag set: exp(-100) in float32
    # underflows beside exp(100)'s overflow, and the callback sees both (6), though only
    # overflow is set to call; backends that keep no flags must find the underflow too
    x = np.tile(np.array([-100.0, 100.0], dtype=np.float32), 200_000)

    def calls(fn):
        seen = []
        with np.errstate(over="call", under="ignore", call=lambda k, f: seen.append((k, f))):
            fn(x)
        return seen

    with fastmath.backend(backend):
        got = calls(fastmath.exp)
    assert got == calls(np.exp) == [("overflow", 6)]


NUMPY_UFUNCS = [r for r in UFUNCS if r.ref.startswith("numpy:")]


def _bit_patterns(rng, dtype, n):
    """``n`` values of ``dtype`` from random bit patterns: every exponent, sign, NaN, inf."""
    dt = np.dtype(dtype)
    if dt.kind == "c":
        return _bit_patterns(rng, dt.char.lower(), 2 * n).view(dt)
    bits = rng.integers(0, 1 << (8 * dt.itemsize), n, dtype=np.uint64, endpoint=False)
    return bits.astype(f"u{dt.itemsize}").view(dt)


def _has_loop(ref, dtype):
    char = np.dtype(dtype).char
    return f"{char * ref.nin}->{char}" in ref.types


@pytest.mark.parametrize("spec", NUMPY_UFUNCS, ids=ids(NUMPY_UFUNCS))
@pytest.mark.parametrize("dtype", ["float16", "float32", "float64", "complex64", "complex128"])
@pytest.mark.parametrize("layout", ["backwards", "strided", "contiguous"])
def test_a_masked_call_is_numpys_own_masked_loop(spec, dtype, layout):
    # NumPy picks a SIMD or a scalar loop by layout, and they can differ by an ULP: the
    # selected elements are computed in the caller's layout, as NumPy's masked loop does
    ref = spec.reference()
    if not _has_loop(ref, dtype):
        pytest.skip(f"NumPy's {spec.name} has no {dtype} loop")
    rng = np.random.default_rng(sum(map(ord, spec.name + dtype + layout)))
    for n in (3001, 300_001):  # one thread, and split over the pool
        pick = {"backwards": slice(None, None, -1), "strided": slice(None, None, 2),
                "contiguous": slice(None)}[layout]
        xs = [_bit_patterns(rng, dtype, 2 * n)[pick][:n] for _ in range(ref.nin)]
        mask = rng.random(n) < 0.5
        got, want = np.zeros(n, dtype), np.zeros(n, dtype)
        with fastmath.backend("numpy"), np.errstate(all="ignore"):
            getattr(fastmath, spec.name)(*xs, out=got, where=mask)
            ref(*xs, out=want, where=mask)
        assert_same(got, want)


@pytest.mark.parametrize("spec", NUMPY_UFUNCS, ids=ids(NUMPY_UFUNCS))
@pytest.mark.parametrize("dtype", ["float32", "float64", "complex64", "complex128"])
def test_a_backwards_out_is_filled_by_numpys_loop_in_that_layout(spec, dtype):
    ref = spec.reference()
    if not _has_loop(ref, dtype):
        pytest.skip(f"NumPy's {spec.name} has no {dtype} loop")
    rng = np.random.default_rng(sum(map(ord, spec.name + dtype)))
    xs = [_bit_patterns(rng, dtype, 3001) for _ in range(ref.nin)]
    got, want = np.zeros(2 * 3001, dtype)[::-2], np.zeros(2 * 3001, dtype)[::-2]
    with fastmath.backend("numpy"), np.errstate(all="ignore"):
        getattr(fastmath, spec.name)(*xs, out=got)
        ref(*xs, out=want)
    assert_same(got.copy(), want.copy())


def _warning_sites(fn, *args):
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        with np.errstate(all="warn"):
            fn(*args)
    return [(x.category, str(x.message), x.filename) for x in w]


@pytest.mark.skipif(_ufunc._native_hot is None, reason="the extension is not built")
@pytest.mark.parametrize("args", [(0.0,), (np.zeros(3),), (np.float32(0),)], ids=repr)
def test_a_small_calls_warning_names_the_callers_file_as_numpys_does(args):
    # NumPy attributes its FP warnings to the innermost Python frame: the fast path in C
    # adds none, so a patched library's np.log(0) is reported at the library's line (from
    # a function's second call: the first reads the cost table, in Python)
    fastmath.log(1.0), fastmath.arctan2(1.0, 1.0)
    got = _warning_sites(fastmath.log, *args)
    want = _warning_sites(np.log, *args)
    assert got == want and want[0][2] == __file__
    got = _warning_sites(fastmath.arctan2, *args, *args)
    assert got == _warning_sites(np.arctan2, *args, *args)


def _python(code):
    """``code`` run by a fresh interpreter on this checkout (a hang fails, after 300 s)."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=300, env=dict(os.environ, PYTHONPATH=root))


def test_without_the_extension_the_python_fast_path_serves():
    code = """
        import sys
        sys.modules["fastmath.frontends._hot"] = None  # as if built without a compiler
        import numpy as np, scipy.special, fastmath
        assert type(fastmath.exp.func).__name__ == "function", fastmath.exp.func
        x = np.linspace(0.1, 0.9, 10)
        for ours, ref, args in ((fastmath.exp, np.exp, (0.5,)), (fastmath.exp, np.exp, (x,)),
                                (fastmath.arctan2, np.arctan2, (x, 0.5)),
                                (fastmath.erf, scipy.special.erf, (x,))):
            for _ in range(2):  # the first call reads the cost table
                got, want = ours(*args), ref(*args)
                assert type(got) is type(want) and np.array_equal(got, want), (ours, args)
        print("OK")
    """
    r = _python(code)
    assert r.stdout.strip() == "OK", r.stderr


def test_small_calls_stay_the_references_while_other_threads_change_the_selection():
    # the fast path reads the selection and its thresholds on every call, while other
    # threads set the default, open scopes and make the thresholds be read again
    code = """
        import threading
        import numpy as np, scipy.special, fastmath
        from fastmath.frontends import _ufunc
        x = np.linspace(0.1, 0.9, 10)
        calls = [(fastmath.exp, np.exp, (0.5,)), (fastmath.exp, np.exp, (x,)),
                 (fastmath.arctan2, np.arctan2, (x, 0.5)), (fastmath.erf, scipy.special.erf, (x,)),
                 (fastmath.log1p, np.log1p, (np.float32(0.5),))]
        wants = [ref(*args) for _, ref, args in calls]
        bad, stop = [], threading.Event()

        def work():
            while not stop.is_set():
                for (ours, _, args), want in zip(calls, wants):
                    got = ours(*args)
                    if type(got) is not type(want) or not np.array_equal(got, want):
                        bad.append((ours, args, got))

        def scoped():
            while not stop.is_set():
                with fastmath.backend("numpy"):
                    for ours, _, args in calls:
                        ours(*args)

        threads = [threading.Thread(target=work) for _ in range(3)] + [threading.Thread(target=scoped)]
        for t in threads:
            t.start()
        for i in range(300):
            fastmath.set_backend("numpy" if i % 2 else "auto")
            _ufunc._forget_small()
        fastmath.set_backend("auto")
        stop.set()
        for t in threads:
            t.join(60)
        print("BAD", bad[:3]) if bad else print("OK")
    """
    r = _python(code)
    assert r.stdout.strip() == "OK", (r.stdout, r.stderr)


# --- the numpy backend's calls made by the fast path in C (_hot.c, _remember_lean) -----

lean_native = pytest.mark.skipif(_ufunc._native_hot is None or _ufunc._runtime_unary is None,
                                 reason="the extensions are not built")


class _Counted:
    """Counts the calls that reach the Python side of a fastmath ufunc (what the fast path
    in C hands over), passing them on."""

    def __init__(self, f, monkeypatch):
        self.real, self.calls = f._native[3], 0
        f._native[3] = self
        # put back before what was patched earlier is undone (the last patch first)
        monkeypatch.undo = _then(lambda: f._native.__setitem__(3, self.real), monkeypatch.undo)

    def __call__(self, *args, **kwargs):
        self.calls += 1
        return self.real(*args, **kwargs)


def _then(first, after):
    def both():
        first()
        after()
    return both


def _in_c(f, monkeypatch, *calls):
    """How many of ``calls`` (zero-argument callables) the fast path in C answered alone."""
    counted = _Counted(f, monkeypatch)
    answered = 0
    for call in calls:
        before = counted.calls
        call()
        answered += counted.calls == before
    return answered


@lean_native
@pytest.mark.parametrize("dtype", ["float32", "float64", "complex128"])
@pytest.mark.parametrize("n", [100, 5000, 10**5])
def test_the_numpy_backends_contiguous_calls_are_made_in_c_bitwise(n, dtype, monkeypatch):
    rng = np.random.default_rng(n)
    x = (rng.standard_normal(n) * 3).astype(dtype)
    fx = np.asfortranarray(x.reshape(n // 50, 50) if n % 50 == 0 else x)
    with fastmath.backend("numpy"):
        fastmath.exp(x)  # the first call, in Python, looks up what C may do
        got = []
        assert _in_c(fastmath.exp, monkeypatch, lambda: got.append(fastmath.exp(x))) == 1
        # (an F-ordered array in C too, while it is NumPy's call: the runtime's is C order)
        answered = _in_c(fastmath.exp, monkeypatch, lambda: got.append(fastmath.exp(fx)))
        assert answered == (fx.flags.c_contiguous or n * x.itemsize < 1 << 15)
    for g, a in zip(got, (x, fx)):
        want = np.exp(a)
        assert g.dtype == want.dtype and g.shape == want.shape
        assert g.flags.c_contiguous == want.flags.c_contiguous
        assert g.flags.f_contiguous == want.flags.f_contiguous
        assert g.tobytes(order="A") == want.tobytes(order="A")


@lean_native
def test_what_c_does_not_make_goes_to_python(monkeypatch):
    x = np.linspace(-3, 3, 10**5)
    with fastmath.backend("numpy"):
        fastmath.exp(x)
        calls = [lambda: fastmath.exp(x[::2]),  # strided
                 lambda: fastmath.exp(x, out=np.empty(x.shape, np.float32)),  # out= cast
                 lambda: fastmath.exp(x, out=np.empty(2 * x.size)[::2]),  # out= strided
                 lambda: fastmath.exp(x, out=np.empty_like(x), where=x > 0),  # an option more
                 lambda: fastmath.exp(x[:-1], out=x[1:]),  # out= overlapping x
                 lambda: fastmath.exp(x.astype(">f8")),  # not native byte order
                 lambda: fastmath.exp(np.arange(10**5) % 7),  # a cast (int64 -> float64)
                 lambda: fastmath.exp(x.view(np.matrix))]  # a subclass
        assert _in_c(fastmath.exp, monkeypatch, *calls) == 0
    with fastmath.backend("auto"):
        fastmath.exp(x)
        big = np.linspace(-3, 3, 2 * fastmath.exp._small)  # above auto's smallest crossover
        assert _in_c(fastmath.exp, monkeypatch, lambda: fastmath.exp(big)) == 0
    with fastmath.backend("numpy"), _serial():  # a block of accelerate(elementwise=True)
        assert _in_c(fastmath.exp, monkeypatch, lambda: fastmath.exp(x)) == 0


@lean_native
def test_the_c_fast_path_follows_set_backend_at_once(monkeypatch):
    # (it reads the selection's default where its slot lies, not by name: _hot.c)
    fastmath.exp(np.ones(3))  # (the cost table read)
    x = np.linspace(-3, 3, max(2 * fastmath.exp._small, 10**5))
    try:
        fastmath.set_backend("numpy")
        fastmath.exp(x)  # (the first call, in Python, looks up what C may do)
        assert _in_c(fastmath.exp, monkeypatch, lambda: fastmath.exp(x)) == 1
        fastmath.set_backend("auto")  # a size auto has not learned: Python's
        assert _in_c(fastmath.exp, monkeypatch, lambda: fastmath.exp(x)) == 0
        fastmath.set_backend("numpy")
        assert _in_c(fastmath.exp, monkeypatch, lambda: fastmath.exp(x)) == 1
    finally:
        fastmath.set_backend("auto")
    assert fastmath.exp(x).tobytes() == np.exp(x).tobytes()


def _serial():
    """The scope of a block of ``accelerate(elementwise=True)``: one thread, no split."""
    import contextlib

    from fastmath.dispatch import _parallel

    @contextlib.contextmanager
    def scope():
        token = _parallel.serial.set(True)
        try:
            yield
        finally:
            _parallel.serial.reset(token)
    return scope()


@lean_native
@pytest.mark.parametrize("mode", ["warn", "raise", "ignore"])
def test_fp_errors_of_calls_made_in_c_are_numpys(mode, monkeypatch):
    """A call whose loop raised FP flags reports them as NumPy does (warning at the
    caller's line, errstate raise)."""
    x = np.zeros(10**5)
    x[::3] = -1.0
    with fastmath.backend("numpy"):
        fastmath.log(np.ones(10**5))
        with np.errstate(all=mode), warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            if mode == "raise":
                with pytest.raises(FloatingPointError, match="divide by zero encountered in log"):
                    fastmath.log(x)
            else:
                got = fastmath.log(x)
                with np.errstate(all="ignore"):
                    assert got.tobytes() == np.log(x).tobytes()
    if mode == "warn":
        assert sorted(str(m.message) for m in w) == ["divide by zero encountered in log",
                                                     "invalid value encountered in log"]
        assert {m.filename for m in w} == {__file__}
    else:
        assert not w


def _outs(x, o):
    """The ways NumPy takes one output array: (name, call of a one-argument ufunc f)."""
    return [("out=o", lambda f: f(x, out=o)), ("out=(o,)", lambda f: f(x, out=(o,))),
            ("positional", lambda f: f(x, o))]


@lean_native
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_calls_into_an_out_array_are_made_in_c_bitwise(dtype, monkeypatch):
    # np.exp(x, out=o): the Python path's parse of out= cost 5 us a call (more than
    # NumPy's whole call on 10^3 elements); C makes it as it makes a call without one
    # (under auto: tests/dispatch/test_learn.py)
    n = 10**5
    x = np.random.default_rng(1).standard_normal(n).astype(dtype) * 3
    want = np.exp(x)
    with fastmath.backend("numpy"):
        fastmath.exp(x, out=np.empty_like(x))  # (the first call, in Python, looks up)
        for how, _ in _outs(x, x):
            o = np.full_like(x, np.nan)
            got = []
            call = dict(_outs(x, o))[how]
            assert _in_c(fastmath.exp, monkeypatch, lambda: got.append(call(fastmath.exp))) == 1
            assert got[0] is o and o.tobytes() == want.tobytes(), how
        y = x.copy()  # in place
        assert _in_c(fastmath.exp, monkeypatch, lambda: fastmath.exp(y, out=y)) == 1
        assert y.tobytes() == want.tobytes()


def _special(dtype, n):
    """n elements cycling through +-inf, nan, +-0, the smallest subnormals, the smallest and
    largest normals and +-1."""
    info = np.finfo(dtype)
    special = np.array([np.inf, -np.inf, np.nan, 0.0, -0.0, info.smallest_subnormal,
                        -info.smallest_subnormal, info.tiny, info.max, -info.max, 1.0, -1.0],
                       dtype)
    return np.resize(special, n)


@lean_native
@pytest.mark.parametrize("name", ["exp", "log", "expm1", "sqrt"])
@pytest.mark.parametrize("n", [10, 10**5])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_special_values_into_an_out_array_are_numpys(name, n, dtype, monkeypatch):
    # +-inf, nan, +-0, subnormals, the largest and smallest normals: bitwise NumPy's
    # into out= and in place, small (NumPy's call) and large (the runtime's), from C
    x = _special(dtype, n)
    f, ref = getattr(fastmath, name), getattr(np, name)
    with fastmath.backend("numpy"), np.errstate(all="ignore"):
        f(x, out=np.empty_like(x))  # (the first call, in Python, looks up what C may do)
        o = np.empty_like(x)
        assert _in_c(f, monkeypatch, lambda: f(x, out=o)) == 1
        y = x.copy()
        assert _in_c(f, monkeypatch, lambda: f(y, out=y)) == 1
        want = ref(x)
    assert o.tobytes() == want.tobytes() and y.tobytes() == want.tobytes()


@lean_native
@pytest.mark.parametrize("mode", ["warn", "raise", "ignore"])
def test_fp_errors_of_calls_in_place_made_in_c_are_numpys(mode, monkeypatch):
    # In place, the input is gone once the loop has run: the flags it raised are acted on
    # as they are (computing it again would take the log of the logs)
    x = np.zeros(10**5)
    x[::3] = -1.0
    x[1::3] = 2.0
    with fastmath.backend("numpy"):
        fastmath.log(np.ones(10**5))
        got, want = x.copy(), x.copy()
        with np.errstate(all=mode):
            with warnings.catch_warnings(record=True) as w:
                warnings.simplefilter("always")
                if mode == "raise":
                    with pytest.raises(FloatingPointError,
                                       match="divide by zero encountered in log"):
                        assert _in_c(fastmath.log, monkeypatch,
                                     lambda: fastmath.log(got, out=got)) == 1
                else:
                    assert _in_c(fastmath.log, monkeypatch,
                                 lambda: fastmath.log(got, out=got)) == 1
            with warnings.catch_warnings(record=True) as w_ref:
                warnings.simplefilter("always")
                try:
                    np.log(want, out=want)
                except FloatingPointError:
                    pass
    assert got.tobytes() == want.tobytes()
    assert [str(m.message) for m in w] == [str(m.message) for m in w_ref]
    assert {m.filename for m in w} <= {__file__}
    assert bool(w) == (mode == "warn")


@lean_native
@pytest.mark.parametrize("args", ["out=o", "out=(o,)", "positional"])
def test_small_calls_into_an_out_array_are_the_references_in_c(args, monkeypatch):
    x = np.linspace(0.1, 2.0, 10)
    fastmath.log(x)  # (the first call reads the cost table)
    o, want = np.empty_like(x), np.log(x)
    got = []
    call = dict(_outs(x, o))[args]
    assert _in_c(fastmath.log, monkeypatch, lambda: got.append(call(fastmath.log))) == 1
    assert got[0] is o and o.tobytes() == want.tobytes()
    # the call's size is its output's: x broadcast into a large out= is not small
    big = np.empty((-(-2 * fastmath.log._small // 10), 10))
    assert _in_c(fastmath.log, monkeypatch, lambda: fastmath.log(x, out=big)) == 0
    assert big.tobytes() == np.log(np.broadcast_to(x, big.shape)).tobytes()
    # NumPy's own errors for a bad out=
    for bad in (np.empty(3), [0.0] * 10, (np.empty(10), np.empty(10))):
        with pytest.raises(Exception) as theirs:
            np.log(x, out=bad)
        with pytest.raises(type(theirs.value)):
            fastmath.log(x, out=bad)


@lean_native
def test_debug_logging_sees_every_call(monkeypatch, caplog):
    import logging

    from fastmath.dispatch import _log

    x = np.linspace(0, 1, 10**5)
    with fastmath.backend("numpy"):
        fastmath.exp(x)  # (its calls made in C from now on)
        caplog.set_level(logging.DEBUG, logger="fastmath")
        _log.refresh()
        try:
            fastmath.exp(x)
        finally:
            caplog.set_level(logging.WARNING, logger="fastmath")
            _log.refresh()
    assert any("exp(float64[100000]): ran on numpy" in r.getMessage() for r in caplog.records)


OTHER = [b for b in ("mkl", "torch-cpu", "numexpr") if b in BACKENDS]


@pytest.mark.skipif(not OTHER, reason="no backend but numpy")
@pytest.mark.parametrize("backend", OTHER)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_calls_into_an_out_array_skip_the_general_parse(backend, dtype, monkeypatch):
    """A call whose one option is an output array of the result's dtype and the operand's
    shape, both contiguous, goes straight to the backend (_pipeline.lean_out), as a call
    without one does: the general parse (keywords, casting, broadcasting, where=) cost
    5-7 us more, where the mkl backend's erf on 10^3 float32 elements takes 2 us. Results
    within the row's bound, in place too (the input kept for the FP flags' derivation),
    NumPy's overflow warning, and the cases that need the general path still take it."""
    from fastmath.frontends import _pipeline

    spec = next(r for r in ROWS if r.name == "exp")
    x = np.linspace(-20, 20, 10**5).astype(dtype)
    want = np.exp(x)
    general = []
    real = _pipeline.call
    monkeypatch.setattr(_pipeline, "call", lambda *a: general.append(a) or real(*a))
    with fastmath.backend(backend):
        for how, call in _outs(x, o := np.full_like(x, np.nan)):
            o[...] = np.nan
            assert call(fastmath.exp) is o, how
            assert_same(o, want, ulps=spec.ulp[x.dtype == np.float64])
        y = x.copy()
        assert fastmath.exp(y, out=y) is y  # in place
        assert_same(y, want, ulps=spec.ulp[x.dtype == np.float64])
        assert not general
        big = np.full(10**5, 1000.0, dtype)  # overflows: NumPy's warning, at this line
        with pytest.warns(RuntimeWarning, match="overflow encountered in exp") as w:
            fastmath.exp(big, out=big)
        assert w[0].filename == __file__ and np.isinf(big).all()
        assert not general
        # a cast, a broadcast output, an overlap that is not exact: the general path
        fastmath.exp(x, out=np.empty(x.shape, "float64" if dtype == "float32" else "float32"))
        z = np.concatenate([x, x])
        wide = np.empty((2, x.size), dtype)  # x broadcast to the output's shape
        fastmath.exp(x, out=wide)
        assert_same(wide, np.exp(x, out=np.empty_like(wide)),
                    ulps=spec.ulp[x.dtype == np.float64])
        fastmath.exp(z[1:], out=z[:-1])
        assert_same(z[:-1], np.exp(np.concatenate([x, x])[1:]),
                    ulps=spec.ulp[x.dtype == np.float64])
        assert len(general) == 3


@pytest.mark.skipif(not OTHER, reason="no backend but numpy")
@pytest.mark.parametrize("backend", OTHER)
@pytest.mark.parametrize("name", ["exp", "log", "expm1", "sqrt"])
@pytest.mark.parametrize("n", [10, 10**5])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_special_values_into_an_out_array_skip_the_general_parse(backend, name, n, dtype,
                                                                 monkeypatch):
    """+-inf, nan, +-0, subnormals, the extreme normals into out= and in place under the
    mkl, torch and numexpr backends (_pipeline.lean_out): NumPy's values within the
    row's bound, and NumPy's FP warnings, small and large."""
    from fastmath.frontends import _pipeline

    x = _special(dtype, n)
    f, ref = getattr(fastmath, name), getattr(np, name)
    ulps = next(r for r in ROWS if r.name == name).ulp[x.dtype == np.float64]

    def said(call):
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            call()
        return sorted(str(m.message) for m in w)

    want = np.empty_like(x)
    want_said = said(lambda: ref(x, out=want))
    general = []
    real = _pipeline.call
    monkeypatch.setattr(_pipeline, "call", lambda *a: general.append(a) or real(*a))
    with fastmath.backend(backend):
        o = np.empty_like(x)
        assert said(lambda: f(x, out=o)) == want_said
        y = x.copy()
        assert said(lambda: f(y, out=y)) == want_said
    assert not general
    assert_same(o, want, ulps=ulps)
    assert_same(y, want, ulps=ulps)


# --- a backend chosen by name: its runtime VML calls made by the fast path in C ----------

VML_BACKENDS = [b for b in ("mkl", "torch-cpu") if b in BACKENDS]
vml_native = pytest.mark.skipif(_ufunc._native_hot is None or _ufunc._runtime_vml is None
                                or not VML_BACKENDS, reason="no extension, or no VML backend")


def _kernel(backend, name):
    from fastmath import backends
    from fastmath._registry import BY_NAME

    return backends.get(backend).kernel(BY_NAME[name])


@vml_native
@pytest.mark.parametrize("backend", VML_BACKENDS)
@pytest.mark.parametrize("name", ["exp", "log", "log1p", "expm1", "erf"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_a_chosen_backends_vml_calls_are_made_in_c_as_its_kernel_makes_them(
        backend, name, dtype, monkeypatch):
    """Under mkl or torch-cpu chosen by name, a call on one contiguous array whose kernel
    runs a VML (or SLEEF) entry point on the runtime is made by the fast path in C
    (_hot.c's lean_forced: the Python path's layers cost 4-5 us, a tenth of a call of exp
    on 10^5 float32 elements), with the bits of the kernel's own call, with and without
    out=, in place too; NumPy's warnings at the caller's line."""
    f = getattr(fastmath, name)
    k = _kernel(backend, name)
    if getattr(k, "vml_entry", None) is None or k.vml_entry(np.dtype(dtype)) is None:
        pytest.skip(f"{backend}'s {name} does not run on the runtime's VML call here")
    x = np.random.default_rng(3).uniform(0.01, 5, 10**5).astype(dtype)
    want = np.empty_like(x)
    assert k(x, want) == 0  # the kernel's own call (nothing to report: all finite)
    with fastmath.backend(backend):
        f(x)  # the first call, in Python, looks up what C may do
        got, o, y = [], np.empty_like(x), x.copy()
        assert _in_c(f, monkeypatch, lambda: got.append(f(x)), lambda: f(x, out=o),
                     lambda: f(x, o)) == 3
        with np.errstate(all="ignore"):  # (in place with flags watched: Python's, below)
            assert _in_c(f, monkeypatch, lambda: f(y, out=y)) == 1
    for g in (got[0], o, y):
        assert g.dtype == x.dtype and g.tobytes() == want.tobytes()
    if name != "exp":
        return
    big = np.full(10**5, 1000.0, dtype)  # overflows: NumPy's warning, at this line
    with fastmath.backend(backend):
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            assert _in_c(f, monkeypatch, lambda: f(big, out=o)) == 1
        assert [str(m.message) for m in w] == ["overflow encountered in exp"]
        assert w[0].filename == __file__ and np.isinf(o).all()
        with np.errstate(over="raise"), pytest.raises(FloatingPointError, match="overflow"):
            f(big)
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("error")
            assert _in_c(f, monkeypatch, lambda: f(big, out=o)) == 1  # the state of its moment
        with pytest.warns(RuntimeWarning, match="overflow encountered in exp"):
            f(big)


@vml_native
@pytest.mark.parametrize("backend", VML_BACKENDS)
def test_what_c_does_not_make_under_a_chosen_backend_goes_to_python(backend, monkeypatch):
    f = fastmath.exp
    x = np.linspace(-3, 3, 10**5)
    tiny = np.full(10**5, -1000.0)  # underflows
    with fastmath.backend(backend):
        f(x)
        calls = [lambda: f(x[::2]),  # strided
                 lambda: f(x[:-1], out=x[1:].copy()),  # (no overlap: made in C)
                 lambda: f(x, out=np.empty(x.shape, np.float32)),  # out= cast
                 lambda: f(x[:-1], out=x[1:]),  # out= overlapping x
                 lambda: f(x.astype(">f8")),  # not native byte order
                 lambda: f(x, out=np.empty_like(x), where=x > 0)]  # an option more
        assert _in_c(f, monkeypatch, *calls) == 1
        y = tiny.copy()
        with np.errstate(under="warn"), warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            # underflow watched: the Python path's full check, NumPy's warning
            assert _in_c(f, monkeypatch, lambda: f(tiny), lambda: f(y, out=y)) == 0
        with np.errstate(under="warn"), warnings.catch_warnings(record=True) as want:
            warnings.simplefilter("always")
            np.exp(tiny)
        assert [str(m.message) for m in w] == [str(m.message) for m in want] * 2
        big = np.full(10**5, 1000.0)
        with pytest.warns(RuntimeWarning, match="overflow"):
            # in place with the flags watched: the Python path keeps the input to derive them
            assert _in_c(f, monkeypatch, lambda: f(big, out=big)) == 0
        with _serial():  # a block of accelerate(elementwise=True)
            assert _in_c(f, monkeypatch, lambda: f(x)) == 0
    with fastmath.backend("numpy"):
        f(x)
        assert _in_c(f, monkeypatch, lambda: f(x)) == 1  # the numpy backend's, not VML's
        assert f(x).tobytes() == np.exp(x).tobytes()


@vml_native
@pytest.mark.parametrize("backend", VML_BACKENDS)
def test_a_function_that_raises_no_flags_leaves_the_others_watched(backend, monkeypatch):
    # erf raises none of NumPy's flags (SciPy's erf), exp does: what the error state asks
    # is kept by the state's identity, but not across that difference
    k = _kernel(backend, "erf")
    if getattr(k, "vml_entry", None) is None or k.vml_entry(np.dtype(np.float64)) is None:
        pytest.skip(f"{backend}'s erf does not run on the runtime's VML call here")
    x = np.linspace(-3, 3, 10**5)
    big = np.full(10**5, 1000.0)
    with fastmath.backend(backend):
        fastmath.erf(x)
        fastmath.exp(x)
        assert _in_c(fastmath.erf, monkeypatch, lambda: fastmath.erf(x)) == 1
        with pytest.warns(RuntimeWarning, match="overflow encountered in exp"):
            assert _in_c(fastmath.exp, monkeypatch, lambda: fastmath.exp(big)) == 1
