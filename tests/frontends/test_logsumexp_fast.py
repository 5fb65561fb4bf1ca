"""logsumexp's path for finite input without weights: bitwise SciPy's results, and SciPy's
own answer wherever an infinity, a NaN or a watched underflow could make a difference."""
import warnings

import numpy as np
import pytest
import scipy.special

import fastmath
from fastmath.backends._lse import FAST_MAX, lse_finite

from helpers import assert_same


def samples(dtype, shape, seed=0):
    rng = np.random.default_rng(seed)
    a = rng.normal(scale=20, size=shape).astype(dtype)
    yield "normal", a
    ties = a.copy()
    ties.flat[::7] = a.max()  # the maximum several times over (m > 1 in SciPy's formula)
    yield "ties", ties
    low = a.copy()
    low.flat[::5] = -np.inf
    yield "-inf entries", low
    yield "one dominant", np.where(a == a.max(), a + 60, a).astype(dtype)
    # the result is the tiny log1p(s) itself: log(1 + s) would round it away
    yield "dominant at zero", np.where(a == a.max(), 0, -abs(a) - 30).astype(dtype)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shape", [(1,), (1000,), (7, 300), (40, 30, 5)])
@pytest.mark.parametrize("axis", [None, 0, -1, 1])
@pytest.mark.parametrize("keepdims", [False, True])
def test_bitwise_scipy(dtype, shape, axis, keepdims):
    for label, a in samples(dtype, shape):
        try:
            expected = scipy.special.logsumexp(a, axis=axis, keepdims=keepdims)
        except Exception as e:  # an axis the array does not have
            with pytest.raises(type(e)):
                fastmath.logsumexp(a, axis=axis, keepdims=keepdims)
            assert lse_finite(a, axis, keepdims) is None
            continue
        fast = lse_finite(a, axis, keepdims)
        if np.isfinite(np.max(a, axis=axis)).all():
            assert fast is not None, label
            assert_same(fast, expected)
        else:
            assert fast is None, label
        assert_same(fastmath.logsumexp(a, axis=axis, keepdims=keepdims), expected)


def test_non_contiguous_and_fortran_inputs():
    a = np.random.default_rng(1).normal(size=(60, 50))
    for view in (a[::2, ::3], np.asfortranarray(a), a.T):
        for axis in (None, 0, 1):
            assert_same(lse_finite(view, axis, False),
                        scipy.special.logsumexp(view, axis=axis))


@pytest.mark.parametrize("special", [np.inf, -np.inf, np.nan])
def test_non_finite_maxima_take_the_general_path(special):
    a = np.array([[1.0, 2.0, special], [3.0, 4.0, 5.0]])
    for axis in (None, 0, 1):
        with np.errstate(all="ignore"):
            expected = scipy.special.logsumexp(a, axis=axis)
            assert_same(fastmath.logsumexp(a, axis=axis), expected)
    everything_low = np.full(4, -np.inf)
    assert lse_finite(everything_low, None, False) is None
    assert_same(fastmath.logsumexp(everything_low), scipy.special.logsumexp(everything_low))
    assert lse_finite(np.array([1.0, np.nan]), None, False) is None


def test_large_arrays_and_other_options_are_not_taken():
    big = np.zeros(FAST_MAX + 1)
    assert lse_finite(big, None, False) is None
    a = np.arange(6.0).reshape(2, 3)
    assert lse_finite(a, (0, 1), False) is None  # tuples go the general way
    assert lse_finite(np.float64(1.0).reshape(()), None, False) is None


def test_warnings_and_underflow_state_are_scipys():
    a = np.array([-1e308, 1e308, 0.0])
    with warnings.catch_warnings(record=True) as ref_w:
        warnings.simplefilter("always")
        expected = scipy.special.logsumexp(a)
    with warnings.catch_warnings(record=True) as got_w:
        warnings.simplefilter("always")
        got = fastmath.logsumexp(a)
    assert_same(got, expected)
    assert [str(w.message) for w in got_w] == [str(w.message) for w in ref_w]
    # underflow watched: SciPy's exp(a) underflows and raises; so must fastmath
    tiny = np.array([-1000.0, 0.0])
    with np.errstate(under="raise"):
        with pytest.raises(FloatingPointError):
            scipy.special.logsumexp(tiny)
        with pytest.raises(FloatingPointError):
            fastmath.logsumexp(tiny)


def test_forced_backends_other_than_numpy_skip_it():
    a = np.linspace(-3, 3, 1000)
    name = next((b for b in fastmath.available_backends() if b.startswith("torch")), None)
    if name is None:
        pytest.skip("no torch backend here")
    with fastmath.backend(name):
        got = fastmath.logsumexp(a)
    assert abs(got - scipy.special.logsumexp(a)) <= 8 * np.spacing(got)
