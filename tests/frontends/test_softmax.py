"""softmax and log_softmax against scipy.special on every backend: axes, dtypes,
layouts, special values, scalars and errors, and input immutability.

Every backend runs SciPy's own formula (on blocks of the kept axes), so results must be
bitwise equal.
"""
import numpy as np
import pytest
import scipy.special

import fastmath

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
