"""Fixtures and hooks for every test; the helpers tests import are in helpers.py."""
import pytest

import fastmath
from helpers import DRAWN


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


def pytest_terminal_summary(terminalreporter):
    if DRAWN:
        terminalreporter.write_sep("-", "hypothesis cases run per function (all backends)")
        for name, n in sorted(DRAWN.items()):
            terminalreporter.write_line(f"{name}: {n}")
