"""The numexpr backend beyond the shared parity suite: threads, what it declines, and what
it leaves to the next backend."""
import numpy as np
import pytest
import scipy.special

import fastmath
from fastmath.dispatch import _config
from fastmath._registry import ROWS

pytestmark = pytest.mark.skipif("numexpr" not in fastmath.available_backends(),
                                reason="numexpr is not installed")


def test_threads_follow_fastmath_num_threads():
    import numexpr

    try:
        for n in (1, 2, 3):
            _config.reload({"FASTMATH_NUM_THREADS": str(n)})
            assert numexpr.get_num_threads() == n
            x = np.linspace(-5, 5, 300_000)
            with fastmath.backend("numexpr"):
                # 1 ULP: numexpr's exp is libm's, not numpy's SIMD loop (registry bound 2)
                got = fastmath.exp(x)
            assert np.max(np.abs(got - np.exp(x)) / np.spacing(np.exp(x))) <= 2
    finally:
        _config.reload()
    assert numexpr.get_num_threads() == _config.get().num_threads


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_results_keep_numpys_dtype(dtype):
    x = np.linspace(0.5, 2, 1000, dtype=dtype)
    for f in [row.name for row in ROWS if "numexpr" in row.kernels]:
        with fastmath.backend("numexpr"):
            got = getattr(fastmath, f)(x)
        assert got.dtype == getattr(np, f)(x).dtype == np.dtype(dtype)


def test_what_numexpr_lacks_goes_to_the_next_backend():
    x = np.linspace(-3, 3, 10_000)
    with fastmath.backend("numexpr"):
        # erf and logsumexp have no numexpr kernel: numpy/scipy's own loops run, bitwise
        assert fastmath.erf(x).tobytes() == scipy.special.erf(x).tobytes()
        # float16 is declined before anything is written, and numpy's float16 loop runs
        h = x.astype(np.float16)
        assert fastmath.exp(h).tobytes() == np.exp(h).tobytes()


def test_strict_mode_names_what_numexpr_cannot_run():
    try:
        _config.reload({"FASTMATH_STRICT": "1"})
        with fastmath.backend("numexpr"):
            with pytest.raises(fastmath.FallbackError, match="numexpr.*erf"):
                fastmath.erf(np.ones(10))
            fastmath.exp(np.ones(10))  # what it can run, it runs
    finally:
        _config.reload()


def test_errstate_is_derived():
    x = np.array([0.0, -1.0, 1e300, 1.0])
    with fastmath.backend("numexpr"), np.errstate(all="raise"):
        with pytest.raises(FloatingPointError, match="divide by zero encountered in log"):
            fastmath.log(x)
        with pytest.raises(FloatingPointError, match="overflow encountered in exp"):
            fastmath.exp(x)
