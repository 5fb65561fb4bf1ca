"""Shared helpers: the backends to test on, ULP distances, input snapshots."""
import numpy as np
import pytest

import fastmath
from fastmath.tools import _check

BACKENDS = [b for b in ("numpy", "torch-cpu", "numexpr", "torch-cuda", "mkl")
            if b in fastmath.available_backends()] + ["auto"]
# backends whose elementwise kernels are the reference's own, so results are bitwise equal
BITWISE = ("numpy",)


def ulp_distance(a, b):
    """Elementwise distance in ULPs between two float arrays of one dtype (fastmath check's)."""
    a, b = np.asarray(a), np.asarray(b)
    assert a.dtype == b.dtype and a.dtype.kind == "f", (a.dtype, b.dtype)
    return _check.ulp_distance(a, b)


def assert_same(result, expected, ulps=0):
    """Same type, dtype and shape; values equal (NaN == NaN) or within ``ulps``."""
    assert type(result) is type(expected), (type(result), type(expected))
    r, e = np.asarray(result), np.asarray(expected)
    assert r.dtype == e.dtype, (r.dtype, e.dtype)
    assert r.shape == e.shape, (r.shape, e.shape)
    if r.dtype.kind == "f" and ulps:
        d = ulp_distance(r, e)
        assert d.size == 0 or d.max() <= ulps, f"max ULP distance {d.max()} > {ulps}"
    elif r.dtype.kind == "f":
        np.testing.assert_array_equal(r, e)
        # assert_array_equal treats 0.0 == -0.0; the sign of zero must match too
        numbers = ~np.isnan(e)
        np.testing.assert_array_equal(np.signbit(r[numbers]), np.signbit(e[numbers]))
    elif r.dtype.kind == "O":  # NaN objects compare unequal to themselves
        same = [a == b or (a != a and b != b) for a, b in zip(r.ravel(), e.ravel())]
        assert all(same), f"{same.count(False)} objects differ"
    else:
        np.testing.assert_array_equal(r, e)


@pytest.fixture(autouse=True)
def _clean_selection():
    """Every test starts from the process default 'auto' and leaves it so."""
    fastmath.set_backend("auto")
    yield
    fastmath.set_backend("auto")


# Hypothesis profiles: "ci" (the default) is bounded and derandomized so CI is quick and
# repeatable; HYPOTHESIS_PROFILE=dev explores far more examples locally.
from hypothesis import HealthCheck, settings  # noqa: E402

_SLOW_OK = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much]
settings.register_profile("ci", max_examples=60, deadline=None, derandomize=True,
                          suppress_health_check=_SLOW_OK, print_blob=True)
settings.register_profile("dev", max_examples=3000, deadline=None,
                          suppress_health_check=_SLOW_OK, print_blob=True)
settings.load_profile(__import__("os").environ.get("HYPOTHESIS_PROFILE", "ci"))

# Hypothesis cases run per function, filled by the property-based tests and shown at the end.
DRAWN: dict = {}


def pytest_terminal_summary(terminalreporter):
    if DRAWN:
        terminalreporter.write_sep("-", "hypothesis cases run per function (all backends)")
        for name, n in sorted(DRAWN.items()):
            terminalreporter.write_line(f"{name}: {n}")
