"""torch's kernels report NumPy's floating-point errors without a second NumPy pass when
the output shows none could have occurred, and leave the front end to derive them when it
could (or when underflow, which leaves no trace in the output, is watched)."""
import numpy as np
import pytest

import fastmath
from fastmath import backends
from fastmath._registry import BY_NAME

pytestmark = pytest.mark.skipif(backends.why_unavailable("torch-cpu") is not None,
                                reason="torch is not installed")


def kernel(name):
    return backends.get("torch-cpu").kernel(BY_NAME[name])


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_finite_output_needs_no_check_and_non_finite_does(dtype):
    k = kernel("exp")
    x = np.linspace(-5, 5, 1000, dtype=dtype)
    out = np.empty_like(x)
    assert k(x, out) == 0
    # VML's own status, where the kernel reads it (backends/_vml.py), tells an overflow
    # from an inf or a NaN that came in: NumPy raises nothing for those, and neither it
    status = getattr(k, "status", None)
    reads_status = status is not None and status(np.dtype(dtype)) != 0
    for bad in (1000.0, np.nan, np.inf):
        y = x.copy()
        y[500] = bad
        with np.errstate(all="raise"):
            try:
                np.exp(y)
                flagged = False
            except FloatingPointError:
                flagged = True
        expected = backends.UNCHECKED if flagged or not reads_status else 0
        assert k(y, out) == expected, bad
    with np.errstate(under="warn"):
        assert k(x, out) == backends.UNCHECKED
    with np.errstate(all="ignore"):  # nothing watched: nothing to derive
        y[500] = 1000.0
        assert k(y, out) == 0


def test_binary_kernel_and_flagless_rows():
    x = np.linspace(0.5, 2, 100)
    out = np.empty_like(x)
    assert kernel("hypot")(x, x, out) == 0
    big = np.full_like(x, 1.7e308)  # hypot(big, big) overflows
    assert kernel("hypot")(big, big, out) == backends.UNCHECKED
    # scipy's erf raises no flags at all, so even a NaN output asks for nothing
    assert kernel("erf")(np.array([np.nan, 1.0]), np.empty(2)) == 0


@pytest.mark.parametrize("name, x, message", [
    ("exp", [1000.0, 1.0], "overflow"), ("log", [0.0, 1.0], "divide by zero"),
    ("log", [-1.0, 1.0], "invalid value")])
def test_numpy_errors_still_reported(name, x, message):
    x = np.array(x * 50_000)
    with fastmath.backend("torch-cpu"):
        with pytest.warns(RuntimeWarning, match=message):
            got = getattr(fastmath, name)(x)
        with np.errstate(all="raise"), pytest.raises(FloatingPointError, match=message):
            getattr(fastmath, name)(x)
    with np.errstate(all="ignore"):
        np.testing.assert_allclose(got, getattr(np, name)(x), rtol=1e-15)
