"""The compiled logsumexp kernel (fastmath/backends/_lse_kernel.c): bitwise SciPy's
results where it answers, the Python path's (and SciPy's warnings and errors) where it
declines, and the same results with it switched off."""
import os
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import numpy as np
import pytest
import scipy.special

import fastmath
from fastmath.backends import _lse
from fastmath.frontends import _reductions

from helpers import assert_same

ROOT = Path(__file__).resolve().parents[2]

try:
    from fastmath.backends._lse_kernel import logsumexp as kernel
except ImportError:  # built without a compiler: only the fallback is tested
    kernel = None
else:
    _lse.small_kernel()  # binds NumPy's loops

needs_kernel = pytest.mark.skipif(kernel is None, reason="fastmath.backends._lse_kernel not built")


@pytest.fixture(params=["kernel", "python"])
def path(request, monkeypatch):
    """fastmath.logsumexp with the kernel in use, and with it switched off."""
    if request.param == "kernel":
        if kernel is None:
            pytest.skip("fastmath.backends._lse_kernel not built")
        monkeypatch.setattr(_reductions, "_small", kernel)
    else:
        monkeypatch.setattr(_reductions, "_small", _reductions._no_kernel)
    return request.param


def sample(dtype, shape, seed):
    rng = np.random.default_rng(seed)
    a = rng.normal(scale=(1, 20, 300)[seed % 3], size=shape).astype(dtype)
    if seed % 4 == 3:
        a.flat[::5] = a.max()  # ties: SciPy's m > 1
    elif seed % 4 == 1:
        # one maximum per row, at 0, and a small sum s of the others' terms: the result
        # is log1p(s), close to s, which shows the last bits of s (a result far from 0
        # hides them)
        a = (-np.abs(a) - 3 - np.log(a.shape[-1])).astype(dtype)
        a[..., a.shape[-1] // 2] = 0
    return a


def same_as_scipy(a, axis=None, keepdims=False, raw=True):
    expected = scipy.special.logsumexp(a, axis=axis, keepdims=keepdims)
    before = a.copy()
    assert_same(fastmath.logsumexp(a, axis=axis, keepdims=keepdims), expected)
    if raw and kernel is not None:  # the kernel itself, not only whoever answered
        got = kernel(a, axis, keepdims)
        assert got is not None
        assert_same(got[0], expected)
    np.testing.assert_array_equal(a, before)


def outcome(f, a, axis, errstate):
    """f(a, axis)'s result (or its FloatingPointError's text) and its warnings' texts."""
    with np.errstate(**errstate), warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        try:
            result = f(a, axis)
        except FloatingPointError as e:
            return str(e), None
    return result, [str(x.message) for x in w]


def same_outcome(a, axis=None, **errstate):
    """fastmath's result, warnings and errors are SciPy's."""
    expected, expected_w = outcome(scipy.special.logsumexp, a, axis, errstate)
    got, got_w = outcome(fastmath.logsumexp, a, axis, errstate)
    assert got_w == expected_w
    if expected_w is None:
        assert got == expected
    else:
        assert_same(got, expected)


@needs_kernel
def test_the_built_kernel_is_in_use():
    # a kernel the self-check rejects would leave every other test here passing on the
    # Python path: this one says so
    assert _lse.small_kernel() is kernel
    fastmath.logsumexp(np.zeros(3))
    assert _reductions._small is kernel


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_every_size_to_5000(dtype, path):
    for n in range(1, 5001):
        same_as_scipy(sample(dtype, n, n), raw=n % 7 == 0)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_long_runs_cut_as_numpy_cuts_its_sum(dtype, path):
    rng = np.random.default_rng(5)
    sizes = [2047, 2048, 2049, 4095, 4096, 4097, 8192, 8193, 100_000, _lse.FAST_MAX]
    for n in sizes + [int(n) for n in rng.integers(5000, _lse.FAST_MAX, 12)]:
        for seed in (1, 2, 5, 7, 9):  # three with one maximum at 0 (see sample)
            same_as_scipy(sample(dtype, n, seed))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shape", [(1, 5), (300, 7), (40, 8), (20, 129), (3, 2049),
                                   (2, 5000), (4, 3, 17), (2, 1, 3000)])
@pytest.mark.parametrize("keepdims", [False, True])
def test_last_axis(dtype, shape, keepdims, path):
    for seed in range(4):
        a = sample(dtype, shape, seed)
        for axis in (-1, len(shape) - 1):
            same_as_scipy(a, axis, keepdims)
        same_as_scipy(a, None, keepdims)


class Sub(np.ndarray):
    pass


def test_what_it_does_not_take_goes_the_python_way():
    a = np.random.default_rng(2).normal(size=(30, 40))
    declined = [(a, 0), (a.T, None), (a.T, -1), (a[:, ::2], -1), (a[::2], None),
                (np.asfortranarray(a), -1), (a.astype(">f8"), None), (a.astype(np.int64), None),
                (a.astype(np.float16), None), (a.view(Sub), None), (a, (1,)),
                (a, np.int64(1)), (np.zeros(_lse.FAST_MAX + 1), None), (np.float64(1.0).reshape(()), None)]
    for x, axis in declined:
        if kernel is not None:
            assert kernel(x, axis, False) is None, (x.dtype, x.shape, axis)
        with np.errstate(all="ignore"):
            expected = scipy.special.logsumexp(x, axis=axis)
        assert_same(fastmath.logsumexp(x, axis=axis), expected)


@pytest.mark.parametrize("special", [np.nan, np.inf])
def test_nan_and_inf_anywhere_are_declined(special, path):
    for n, where in ((1, 0), (5, 4), (3000, 1234), (9000, 0)):
        a = sample("float64", n, 1)
        a[where] = special
        if kernel is not None:
            assert kernel(a, None, False) is None
            assert kernel(a.reshape(1, -1), -1, False) is None
        same_outcome(a)
        same_outcome(a.reshape(1, -1), -1)


def test_minus_inf_entries(path):
    a = sample("float64", 1000, 2)
    a[::3] = -np.inf
    same_as_scipy(a, raw=False)
    if kernel is not None:
        got, under = kernel(a, None, False)
        assert under  # SciPy's exp(-inf) is exact, but a caller watching underflow must look
        assert_same(got, scipy.special.logsumexp(a))


@pytest.mark.parametrize("dtype, low", [("float64", -750.0), ("float32", -100.0)])
def test_a_watched_underflow_is_scipys(dtype, low, path):
    # SciPy's plain exp(a) underflows although exp(a - max) does not
    a = np.array([low, low - 0.5], dtype)
    with np.errstate(under="raise"), pytest.raises(FloatingPointError):
        fastmath.logsumexp(a)
    for under in ("raise", "warn", "ignore"):
        same_outcome(a, under=under)
        # no underflow anywhere: no error either
        same_outcome(np.linspace(-3, 3, 1000).astype(dtype), under=under)
    if kernel is not None:
        assert kernel(a, None, False)[1]
        assert not kernel(a - low, None, False)[1]


@pytest.mark.parametrize("over", ["warn", "raise", "ignore"])
def test_an_overflow_is_declined_with_scipys_warning(over, path):
    # SciPy's a - max(a) overflows
    for a, axis in ((np.array([-1e308, 1e308, 0.0]), None),
                    (np.array([[1.0, 2.0], [-3e38, 3e38]], np.float32), -1)):
        if kernel is not None:
            assert kernel(a, axis, False) is None
        same_outcome(a, axis, over=over)


@needs_kernel
def test_a_kernel_that_differs_is_not_used():
    def one_ulp_off(a, axis, keepdims):
        got = kernel(a, axis, keepdims)
        return got if a.size < 1000 else (np.nextafter(got[0], np.inf), got[1])

    def sequential_sum(a, axis, keepdims):  # the right formula, the wrong order of sums
        if axis is None:
            a = a.reshape(1, -1)
        m = a.max(axis=-1, keepdims=True)
        e = np.exp(np.where(a == m, -np.inf, a - m))
        s = np.cumsum(e, axis=-1)[:, -1:]
        c = (a == m).sum(axis=-1, keepdims=True).astype(a.dtype)
        out = (np.log1p(s / c) + np.log(c) + m)[:, 0]
        return (out[0] if axis is None else out), False

    assert _lse.agrees(kernel)
    assert not _lse.agrees(one_ulp_off)
    assert not _lse.agrees(sequential_sum)


def test_threads_share_it():
    # large inputs run with the GIL released: every thread still gets SciPy's bits
    code = textwrap.dedent("""
        import concurrent.futures, numpy as np, scipy.special, fastmath
        rng = np.random.default_rng(0)
        arrays = [rng.normal(size=n) for n in (20000, 50000, 100001, 3000) * 4]
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            got = list(pool.map(fastmath.logsumexp, arrays * 5))
        want = [scipy.special.logsumexp(a) for a in arrays * 5]
        print(all(g.tobytes() == w.tobytes() for g, w in zip(got, want)))
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=120, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert r.stdout.strip() == "True", r.stderr


@needs_kernel
@pytest.mark.parametrize("mode", ["functions", "loops"])
def test_first_call_under_patch_binds_numpys_own_loops(mode):
    # numpy.exp is fastmath.exp while patched, and the loop mode puts trampolines in
    # NumPy's loop slots: the kernel must still run NumPy's loops
    if mode == "loops" and fastmath.patch.why_unavailable():
        pytest.skip(fastmath.patch.why_unavailable())
    code = textwrap.dedent(f"""
        import numpy, scipy.special, fastmath
        from fastmath.frontends import _reductions
        from fastmath.backends._lse_kernel import logsumexp as kernel
        rng = numpy.random.default_rng(0)
        arrays = [rng.normal(size=n) for n in (1000, 100_000, 262_144)]
        with fastmath.patch(mode={mode!r}):
            got = [fastmath.logsumexp(a) for a in arrays]
            print({mode!r} == "loops" or numpy.exp is fastmath.exp, _reductions._small is kernel)
        print(all(g.tobytes() == scipy.special.logsumexp(a).tobytes()
                  for g, a in zip(got, arrays)))
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=120, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert r.stdout.split() == ["True", "True", "True"], r.stderr
