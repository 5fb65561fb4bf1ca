"""Fixtures and hooks for every test; the helpers tests import are in helpers.py."""
import os

import pytest

# auto's choices from the fixed table: what a test expects auto to run must not depend on
# the machine's timings (tests/dispatch/test_learn.py turns learning on where it tests it)
os.environ.setdefault("FASTMATH_AUTO", "fixed")
# and what a subprocess of a test learns or calibrates never lands in the user's cache
os.environ["XDG_CACHE_HOME"] = __import__("tempfile").mkdtemp(prefix="fastmath-tests-")
# the run's processes (this one, its subprocesses, Dask's workers) see each other in the
# runtime's registry of fastmath's processes, and not the machine's other fastmath jobs,
# whose calls would take this run's splits away (tests count them)
os.environ.setdefault("FASTMATH_REGISTRY",
                      os.path.join(os.environ["XDG_CACHE_HOME"], "runtime-registry"))

import fastmath  # noqa: E402
from helpers import DRAWN


@pytest.fixture(autouse=True)
def _clean_selection():
    """Every test starts from the process default 'auto' and leaves it so."""
    fastmath.set_backend("auto")
    yield
    fastmath.set_backend("auto")


try:
    from fastmath.dispatch import _runtime
except ImportError:  # built without a C compiler: no runtime, nothing paced
    _runtime = None


@pytest.fixture(autouse=True)
def _no_yield_to_the_machine():
    """The runtime's yield to other work (every call whole for 0.3 s once a split found its
    worker shut out while the machine outside the process kept a core busy) is off in this
    process: what a test expects of the pacing (a call split, a pause that doubles) must
    not turn on an earlier test's calls beside another job on the machine. The tests of
    the yield turn it on in processes of their own (tests/dispatch/test_threads.py)."""
    if _runtime is None:
        yield
        return
    before = _runtime.set_yield(0.0)
    yield
    _runtime.set_yield(before)


_THREAD_VARS = {k: os.environ.get(k) for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}


@pytest.fixture(autouse=True)
def _thread_counts_as_at_start():
    """A dask Nanny writes OMP_NUM_THREADS=1 and MKL_NUM_THREADS=1 into this process's own
    environment (its pre-spawn environ): every test starts with the values the run began
    with, so that a later reading of the configuration does not take the Nanny's 1 for
    the user's budget."""
    yield
    for k, v in _THREAD_VARS.items():
        if os.environ.get(k) != v:
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


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
