"""fastmath.logsumexp against scipy.special.logsumexp on every backend.

Tolerance: the result is M + log(m) + log1p(s/m) with M the maximum, computed by both
implementations from the same terms but summed in a different order (fastmath sums in
cache-sized blocks). Each term is accurate to about 1 ULP of its own magnitude, and a
sum of n terms in another order differs by at most about log2(n) ULPs relative to the
sum, so the two results agree within ``helpers.LSE_ULPS`` (8) units in the last place of
the largest term, max(|M|, |result|, 1) -- measured maxima on these tests are 2-4. With
weights of both signs the sum can cancel, which multiplies any implementation's rounding
error by the condition number sum|b e^a| / |sum b e^a|; the bound scales with it.
"""
import warnings

import numpy as np
import pytest
import scipy.special

import fastmath

from helpers import BACKENDS, lse_close as close


def check(backend, a, **kwargs):
    before = np.array(a, copy=True)
    b = kwargs.get("b")
    b_before = None if b is None else np.array(b, copy=True)
    with warnings.catch_warnings(record=True) as w_expected:
        warnings.simplefilter("always")
        expected = scipy.special.logsumexp(a, **kwargs)
    condition = 1.0
    if b is not None:
        # with weights of both signs the sum cancels: any evaluation order loses
        # sum|b e^a| / |sum b e^a| times more, for scipy and fastmath alike
        absolute = dict(kwargs, b=np.abs(b), return_sign=False)
        with np.errstate(all="ignore"):
            res = expected[0] if kwargs.get("return_sign") else expected
            condition = np.nan_to_num(np.exp(scipy.special.logsumexp(a, **absolute) - res),
                                      nan=1.0, posinf=1.0)
    with fastmath.backend(backend), warnings.catch_warnings(record=True) as w_got:
        warnings.simplefilter("always")
        got = fastmath.logsumexp(a, **kwargs)
    assert [str(w.message) for w in w_got] == [str(w.message) for w in w_expected]
    assert np.array_equal(before, a, equal_nan=True), "input modified"
    if b is not None:
        assert np.array_equal(b_before, b, equal_nan=True), "weights modified"
    if kwargs.get("return_sign"):
        assert type(got) is tuple and len(got) == 2
        assert type(got[0]) is type(expected[0]) and type(got[1]) is type(expected[1])
        dt = np.asarray(expected[0]).dtype
        close(got[0], expected[0], dt, condition)
        np.testing.assert_array_equal(got[1], expected[1])
    else:
        assert type(got) is type(expected), (type(got), type(expected))
        close(got, expected, np.asarray(expected).dtype, condition)


AXES = [None, 0, 1, -1, (0, 1), (1, 0), 2, (0, 2), -3]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", ["float32", "float64", "int64"])
@pytest.mark.parametrize("axis", AXES, ids=str)
@pytest.mark.parametrize("shape", [(4, 5, 6), (60, 70, 80)], ids=str)
def test_axes_and_keepdims(backend, dtype, axis, shape):
    rng = np.random.default_rng(3)
    a = (rng.standard_normal(shape) * 10).astype(dtype)
    for keepdims in (False, True):
        check(backend, a, axis=axis, keepdims=keepdims)
    check(backend, np.asfortranarray(a), axis=axis)
    check(backend, a[::-1, ::2], axis=axis)


@pytest.mark.parametrize("backend", BACKENDS)
def test_weights_and_sign(backend):
    rng = np.random.default_rng(4)
    a = rng.standard_normal((30, 40))
    for b in (rng.standard_normal((30, 40)), np.abs(rng.standard_normal(40)),
              np.zeros((30, 40)), np.where(rng.random((30, 40)) < 0.5, 0.0, 1.0),
              np.ones((30, 1)) * -1, 2.0):
        for axis in (None, 0, 1):
            for return_sign in (False, True):
                with np.errstate(invalid="ignore"):
                    check(backend, a, axis=axis, b=b, return_sign=return_sign)
    check(backend, np.array([1.0, 2.0]), b=np.array([1.0, -1.0]), return_sign=True)
    check(backend, np.array([1.0, 1.0]), b=np.array([1.0, -1.0]), return_sign=True)


@pytest.mark.parametrize("backend", BACKENDS)
def test_infinities_and_nans(backend):
    inf, nan = np.inf, np.nan
    rows = np.array([[-inf, -inf, -inf], [inf, 1.0, 2.0], [inf, -inf, 0.0], [nan, 1.0, 2.0],
                     [inf, inf, 1.0], [0.0, -inf, -inf], [-inf, 5.0, 5.0], [1e308, 1e308, 0.0],
                     [-1e308, -1e308, 0.0], [0.0, -40.0, -80.0]])
    for axis in (None, 0, 1):
        for return_sign in (False, True):
            check(backend, rows, axis=axis, return_sign=return_sign)
    check(backend, rows, axis=1, b=np.array([1.0, 0.0, -1.0]), return_sign=True)
    check(backend, rows, axis=1, b=np.array([inf, 0.0, 1.0]))


@pytest.mark.parametrize("backend", BACKENDS)
def test_one_dominant_element_keeps_log1p_accuracy(backend):
    a = np.array([0.0, -40.0])  # log(1 + e^-40): 4.2e-18, lost by log(sum(exp))
    with fastmath.backend(backend):
        assert fastmath.logsumexp(a) == scipy.special.logsumexp(a) != 0.0


@pytest.mark.parametrize("backend", BACKENDS)
def test_large_arrays(backend):
    rng = np.random.default_rng(5)
    for dtype in ("float32", "float64"):
        a = rng.standard_normal((700, 900)).astype(dtype) * 30
        for axis in (None, 0, 1):
            check(backend, a, axis=axis)
            check(backend, a.T, axis=axis)


@pytest.mark.parametrize("backend", BACKENDS)
def test_scalars_lists_and_what_scipy_handles(backend):
    for a, kw in ((3.0, {}), ([1.0, 2.0, 3.0], {}), ([[1, 2], [3, 4]], {"axis": 0}),
                  (np.float32(2.0), {}), (np.array(5.0), {"keepdims": True}),
                  (np.array([1 + 1j, 2.0]), {}), (np.array([1.0, 2.0], np.float16), {})):
        check(backend, a, **kw)
    for a, kw in ((np.ones((2, 3)), {"axis": 2}), (np.ones((2, 3)), {"axis": (0, 0)}),
                  (np.ones((2, 3)), {"b": np.ones(4)}), (np.ones((0, 3)), {})):
        with pytest.raises(Exception) as expected:
            scipy.special.logsumexp(a, **kw)
        with pytest.raises(type(expected.value)), fastmath.backend(backend):
            fastmath.logsumexp(a, **kw)
    assert fastmath.special.logsumexp is fastmath.logsumexp


def fp_outcome(f, mode, *args, **kwargs):
    """What ``f`` reports of an overflow under ``np.errstate(over=mode)``: its exception's
    text, its warnings' texts and what the error callback was handed (for "call" and "log");
    the other FP errors are silenced, as SciPy silences divide and invalid itself."""
    calls = []

    class Log:
        def write(self, message):
            calls.append(message)

    old = np.seterrcall(Log() if mode == "log" else (lambda err, flag: calls.append(err)))
    try:
        with np.errstate(all="ignore", over=mode), \
                warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            try:
                f(*args, **kwargs)
                raised = None
            except FloatingPointError as e:
                raised = str(e)
    finally:
        np.seterrcall(old)
    return raised, [(x.category, str(x.message)) for x in w], calls


def overflow_cases():
    big = 1e308
    for v in (np.nan, np.inf, -np.inf):
        # a - max(a) overflows in one row; a NaN or infinity in another must not hide it
        yield np.array([[big, -big], [v, 0.0]]), {}
        yield np.array([[big, -big, 1.0], [v, 0.0, 2.0]]), {}
    # weights: their sum at the maxima (m), the weighted sum (s), or s / m overflows
    yield np.array([1.0, 0.9, 0.9]), dict(b=np.array([1.0, big, big]))
    yield np.array([1.0, 1.0, 0.0]), dict(b=np.array([big, big, 1.0]))
    yield np.array([1.0, 0.0]), dict(b=np.array([1e-300, 1e300]))
    yield np.array([1.0, 0.0]), dict(b=np.array([-1e-300, 1e300]))
    yield np.array([1.0, 0.0], np.float32), dict(b=np.array([1e-30, 1e30], np.float32))
    yield np.array([[big, -big], [1.0, 0.0]]), dict(b=np.array([1.0, 0.0]))  # masked: silent


def variants(a):
    for axis in (None, 0, -1):
        for keepdims in (False, True):
            for return_sign in (False, True):
                if a.size < 1000 or not (keepdims or return_sign):  # keep large ones few
                    yield dict(axis=axis, keepdims=keepdims, return_sign=return_sign)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("mode", ["warn", "raise", "call", "log"])
def test_overflows_are_reported_as_scipy_reports_them(backend, mode):
    g = np.zeros((2, 1 << 18))  # the large-array paths (blocks, groups of rows or columns)
    g[0, 3], g[0, 7], g[1, 2] = 1e308, -1e308, np.nan
    for a, kwargs in [*overflow_cases(), (g, {}), (np.ascontiguousarray(g.T), {})]:
        for kw in variants(a):
            kw.update(kwargs)
            expected = fp_outcome(scipy.special.logsumexp, mode, a, **kw)
            with fastmath.backend(backend):
                got = fp_outcome(fastmath.logsumexp, mode, a, **kw)
            assert got == expected, (a, kw)


@pytest.mark.parametrize("backend", BACKENDS)
def test_empty_weights(backend):
    # b broadcasts a to nothing: SciPy's empty sum, -inf
    for a, b, axis in ((np.array([1.0]), np.array([]), None),
                       (np.ones((3, 1)), np.ones((3, 0)), -1)):
        with fastmath.backend(backend):
            check(backend, a, b=b, axis=axis)
