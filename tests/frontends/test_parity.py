"""Every unary function x backend x dtype x layout against NumPy/SciPy.

The numpy backend runs the reference's own loops, so its results must be bitwise equal;
other backends are held to the ULP bound in the registry row (float32, float64), which is
the sum of the two implementations' measured errors. Inputs are checked byte for byte
after every call.
"""
import numpy as np
import pytest
import scipy.special

import fastmath
from fastmath._registry import ROWS

from helpers import BACKENDS, BITWISE, assert_same

# plain elementwise functions (sinc, i0) take one argument too and face the same checks
UNARY = [s for s in ROWS if s.kind in ("unary", "elementwise")]
DTYPES = ["bool", "int8", "uint8", "int16", "int32", "int64", "uint64", "float16",
          "float32", "float64", "complex64", "complex128", "longdouble", "object"]
SPECIALS = [0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 2.0, 10.0, -10.0, 100.0, -100.0, 700.0, -700.0,
            750.0, -750.0, 1e-310, -1e-310, 1e-30, 1e300, -1e300, np.inf, -np.inf, np.nan]


def big_size(spec, dtype):
    """Elements past the numpy backend's threading threshold and every auto row, rounded
    up to whole rows of 1000 (the costlier the function, the fewer it takes)."""
    from fastmath.dispatch._calibration import rows
    from fastmath.dispatch._npy_loops import PARALLEL_MIN_BYTES

    n = PARALLEL_MIN_BYTES / spec.cost / np.dtype(dtype).itemsize
    n = max([n] + [min_size for min_size, _ in rows(spec.name, dtype)])
    return -(-int(n * 1.2) // 1000) * 1000


def reference(spec):
    return spec.reference()


def bound(spec, backend, dtype):
    if backend in BITWISE or np.dtype(dtype) not in (np.float32, np.float64):
        return 0
    return spec.bound(dtype, backend)


def values(dtype, n, seed=0):
    """Special values first, then a spread over the whole useful domain."""
    rng = np.random.default_rng(seed)
    dt = np.dtype(dtype)
    if dt.kind == "b":
        return rng.integers(0, 2, n).astype(bool)
    if dt.kind in "iu":
        info = np.iinfo(dt)
        return rng.integers(max(info.min, -1000), min(info.max, 1000), n, endpoint=True).astype(dt)
    with np.errstate(all="ignore"):
        base = np.concatenate([np.array(SPECIALS),
                               rng.uniform(-1, 1, n) * 10.0 ** rng.uniform(-8, 3, n)])[:n]
        if dt.kind == "c":
            return (base + 1j * base[::-1]).astype(dt)
        if dt.kind == "O":
            return base.astype(object)
        return base.astype(dt)


def layouts(a2d):
    """(name, array) views of one 2-D array in the layouts NumPy users hand over."""
    ro = a2d.copy()
    ro.flags.writeable = False
    yield "C", a2d
    yield "F", np.asfortranarray(a2d)
    yield "strided", a2d[::2, ::3]
    yield "transposed", a2d.T
    yield "negative-strides", a2d[::-1, ::-2]
    yield "broadcast", np.broadcast_to(a2d[0], a2d.shape)
    yield "read-only", ro
    if a2d.dtype.kind not in "bO" and a2d.dtype.itemsize > 1:
        yield "byte-swapped", a2d.astype(a2d.dtype.newbyteorder())
    yield "0-d", a2d[0, 0:1].reshape(())
    yield "empty", a2d[:0]


def check(spec, backend, x, *args, **kwargs):
    ref = reference(spec)
    before = np.array(x, copy=True) if isinstance(x, np.ndarray) else None
    with np.errstate(all="ignore"):
        expected = ref(x, *args, **kwargs)
        with fastmath.backend(backend):
            got = getattr(fastmath, spec.name)(x, *args, **kwargs)
    if before is not None:
        assert before.tobytes() == x.tobytes(), "the input was modified"
    dtype = np.asarray(expected).dtype
    assert_same(got, expected, bound(spec, backend, dtype))
    return got


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("spec", UNARY, ids=lambda s: s.name)
def test_dtypes_and_layouts(spec, backend, dtype):
    a = values(dtype, 240).reshape(12, 20)
    for name, x in layouts(a):
        try:
            check(spec, backend, x)
        except Exception as e:
            # the reference's own exception class must be what fastmath raises
            if isinstance(e, AssertionError):
                raise AssertionError(f"layout {name}: {e}") from e
            with pytest.raises(type(e)):
                with fastmath.backend(backend):
                    getattr(fastmath, spec.name)(x)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("spec", UNARY, ids=lambda s: s.name)
def test_scalars_and_lists(spec, backend):
    for x in (0.5, 2, True, -3.0, np.float32(1.5), np.float16(0.25), np.int8(3), np.float64(-0.0),
              [0.5, 1.5], (1, 2, 3), [[1.0], [2.0]], 1 + 2j):
        with np.errstate(all="ignore"):
            try:
                expected = reference(spec)(x)
            except TypeError:
                with pytest.raises(TypeError), fastmath.backend(backend):
                    getattr(fastmath, spec.name)(x)
                continue
            with fastmath.backend(backend):
                got = getattr(fastmath, spec.name)(x)
        assert_same(got, expected, bound(spec, backend, np.asarray(expected).dtype))


@pytest.mark.slow  # 8M-element arrays for every function, dtype and backend
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("spec", UNARY, ids=lambda s: s.name)
def test_large_arrays_across_threads(spec, backend, dtype):
    """Arrays past every threading and backend threshold, in several layouts."""
    a = values(dtype, big_size(spec, dtype), seed=1).reshape(-1, 1000)
    for x in (a, a.T, a[:, ::2], np.asfortranarray(a)[::-1]):
        check(spec, backend, x)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("spec", UNARY, ids=lambda s: s.name)
def test_special_values(spec, backend):
    for dtype in ("float32", "float64"):
        with np.errstate(over="ignore"):
            x = np.array(SPECIALS, dtype=dtype)
        check(spec, backend, x)


def test_nan_sign_and_inf_results_match_on_numpy_backend():
    x = np.array([np.nan, -np.nan, np.inf, -np.inf, -0.0])
    for spec in UNARY:
        with np.errstate(all="ignore"), fastmath.backend("numpy"):
            got = getattr(fastmath, spec.name)(x)
            expected = reference(spec)(x)
        assert got.tobytes() == expected.tobytes()


def test_erf_is_scipy_special_erf_semantics():
    x = np.array([-np.inf, -6.0, -1.0, 0.0, -0.0, 1e-300, 1.0, 6.0, np.inf, np.nan])
    for backend in BACKENDS:
        with fastmath.backend(backend):
            assert_same(fastmath.erf(x), scipy.special.erf(x), 4)
            assert_same(fastmath.special.erf(x), scipy.special.erf(x), 4)
