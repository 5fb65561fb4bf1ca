"""softmax and log_softmax against scipy.special on every backend: axes, dtypes,
layouts, special values, scalars and errors, and input immutability.

Every backend runs SciPy's own formula (on blocks of the kept axes), so results must be
bitwise equal.
"""
import warnings

import numpy as np
import pytest
import scipy.special

import fastmath
from fastmath.backends.numpy import LEAF, _fold, _leaves, _pairwise

from helpers import BACKENDS, assert_same

NAMES = ["softmax", "log_softmax"]


def check(name, backend, x, **kwargs):
    ref = getattr(scipy.special, name)
    before = np.array(x, copy=True) if isinstance(x, np.ndarray) else None
    with np.errstate(all="ignore"):
        try:
            expected = ref(x, **kwargs)
        except Exception as e:
            with pytest.raises(type(e)), fastmath.backend(backend):
                getattr(fastmath, name)(x, **kwargs)
            return
        with fastmath.backend(backend):
            got = getattr(fastmath, name)(x, **kwargs)
    if before is not None:
        assert before.tobytes() == x.tobytes(), "the input was modified"
    assert_same(got, expected)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", ["float32", "float64", "int64", "float16", "complex128"])
@pytest.mark.parametrize("name", NAMES)
def test_axes_dtypes_layouts(name, backend, dtype):
    rng = np.random.default_rng(0)
    a = (rng.standard_normal((300, 400)) * 5).astype(dtype)
    for x in (a, a.T, a[::2, ::-3], np.asfortranarray(a), a[:0], a[0]):
        for axis in (None, 0, 1, -1, (0, 1), (1, 0), 2, (0, 0)):
            check(name, backend, x, axis=axis)
    check(name, backend, a.reshape(30, 40, 100), axis=(0, 2))
    check(name, backend, 1.5)
    check(name, backend, [1.0, 2.0, 3.0])


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", NAMES)
def test_special_values(name, backend):
    for row in ([np.inf, 1.0], [-np.inf, -np.inf], [np.nan, 0.0], [1000.0, 1.0], [-1e300, 0.0]):
        x = np.tile(np.array(row), (100000, 1))
        for axis in (None, 1):
            check(name, backend, x, axis=axis)
            with np.errstate(over="ignore"):
                x32 = x.astype(np.float32)
            check(name, backend, x32, axis=axis)


@pytest.mark.parametrize("backend", BACKENDS)
def test_warnings_are_scipys(backend):
    x = np.tile(np.array([np.inf, 1.0]), (100000, 1))
    with pytest.warns(RuntimeWarning, match="invalid value"), fastmath.backend(backend):
        fastmath.softmax(x, axis=1)
    assert fastmath.special.softmax is fastmath.softmax


# --- the paths for float arrays: SciPy's formula replayed, and the whole-array leaves ----

def outcome(fn, x, **kwargs):
    """(result or exception type, warning messages) of one call."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            result = fn(x, **kwargs)
        except Exception as e:
            result = type(e)
    return result, [str(w.message) for w in caught]


def assert_scipys(name, x, **kwargs):
    expected, expected_warnings = outcome(getattr(scipy.special, name), x, **kwargs)
    got, got_warnings = outcome(getattr(fastmath, name), x, **kwargs)
    assert got_warnings == expected_warnings
    if isinstance(expected, type):
        assert got is expected
    else:
        assert_same(got, expected)


def rows(dtype, shape, seed=0):
    """Finite inputs (ties, -inf entries, a wide range) and the edge rows SciPy handles."""
    rng = np.random.default_rng(seed)
    a = (rng.standard_normal(shape) * 30).astype(dtype)
    yield a
    ties = a.copy()
    ties.flat[::5] = a.max()
    yield ties
    low = a.copy()
    low.flat[::3] = -np.inf
    yield low
    for special in (np.inf, -np.inf, np.nan):
        edge = a.copy()
        edge.reshape(-1, shape[-1])[0] = special  # one whole row of it
        edge.flat[-1] = special
        yield edge


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", NAMES)
def test_small_arrays_replay_scipy(name, dtype):
    for shape in [(1,), (10,), (7, 30), (4, 5, 6)]:
        for x in rows(dtype, shape):
            for axis in (None, 0, -1, 1, 3, (0, -1), (0, 0), [0], True, np.int64(0)):
                assert_scipys(name, x, axis=axis)
            assert_scipys(name, x.T)
            assert_scipys(name, x[::-1])
    for other in (np.arange(10), np.ones(10, np.float16), np.float64(2.0), [1.0, 2.0],
                  np.zeros((0, 3)), np.ones((3, 3)).view(np.matrix)):
        assert_scipys(name, other)
        assert_scipys(name, other, axis=0)


def test_replayed_formula_keeps_scipys_warnings_and_error_state():
    x = np.array([-1e308, 1e308, 0.0])
    for name in NAMES:
        assert_scipys(name, x)  # the subtraction overflows: SciPy warns
        with np.errstate(under="warn"):
            assert_scipys(name, np.array([-800.0, 0.0]))
        with np.errstate(over="raise"), pytest.raises(FloatingPointError):
            getattr(fastmath, name)(x)
    x = np.array([[-np.inf, -np.inf], [0.0, 1.0]])
    assert_scipys("log_softmax", x, axis=1)  # an all -inf row: log(0), silenced by SciPy


@pytest.mark.parametrize("n", [LEAF, 2 * LEAF + 1, 3 * LEAF + 13, 10**6 + 7])
def test_pairwise_leaves_sum_as_numpy(n):
    x = np.random.default_rng(n).random(n, dtype=np.float32)
    tree = _pairwise(0, n)
    sums = [np.sum(x[i:j]) for i, j in _leaves(tree)]
    assert _fold(tree, iter(sums)) == np.sum(x)


@pytest.mark.parametrize("backend", ["auto", "numpy"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", NAMES)
def test_whole_array_in_leaves(name, dtype, backend):
    with fastmath.backend(backend):
        for n in (2 * LEAF + 1, 5 * LEAF + 3, 10**6 + 7):
            for x in rows(dtype, (n,)):
                assert_scipys(name, x)
        for x in rows(dtype, (500, 301)):
            for view in (x, np.asfortranarray(x), x[::2]):
                assert_scipys(name, view)
                assert_scipys(name, view, axis=(0, 1))
        wide = np.array([-1e308, 1e308] * LEAF)
        assert_scipys(name, wide.astype(dtype) if dtype == "float64" else wide.clip(-3e38, 3e38)
                      .astype(dtype))
        with np.errstate(under="warn"):
            assert_scipys(name, np.linspace(-800, 0, 3 * LEAF).astype(dtype))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", NAMES)
def test_an_overflow_next_to_a_nan_is_reported(name, backend):
    # SciPy's x - max(x) overflows in the first row: a NaN or an infinity in the other row
    # (whose maximum it is) must not hide that from the error state
    from test_logsumexp import fp_outcome
    for v in (np.nan, np.inf, -np.inf):
        x = np.zeros((2, 100000))
        x[0, 3], x[0, 7], x[1, 2] = 1e308, -1e308, v
        for axis in (None, 1):
            for mode in ("warn", "raise", "call"):
                expected = fp_outcome(getattr(scipy.special, name), mode, x, axis=axis)
                with fastmath.backend(backend):
                    got = fp_outcome(getattr(fastmath, name), mode, x, axis=axis)
                assert got == expected, (v, axis, mode)
