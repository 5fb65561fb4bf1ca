"""pytest plugin: a library's own tests with fastmath's loop mode installed throughout.

Loaded into a separate pytest process (``-p loops_plugin``) by
tests/integrations/test_library_suites.py. FASTMATH_LOOPS_MODE names the patch mode to hold from
before any test module is imported (none: the plain reference run); every test's outcome
goes to the JSON file named by FASTMATH_LOOPS_REPORT, so the two runs can be compared test
by test.
"""
import json
import os

_results: dict = {}


def pytest_configure(config):
    mode = os.environ.get("FASTMATH_LOOPS_MODE")
    if mode:
        import fastmath
        from fastmath.integrations import _loopmode

        if os.environ.get("FASTMATH_LOOPS_SPLIT_ALL"):
            # split every run of 2 or more elements: the tests' small arrays then take the
            # splitting path too, with pieces of 64
            _loopmode._SPLIT_AT = _loopmode._MIN_SPLIT = 2
            _loopmode._PIECE = 64
            _loopmode.pacing(False)  # every such run split, whatever it costs

        fastmath.patch.start(mode)
        if _loopmode.available():
            _loopmode.count_calls(True)  # the report says how often the loops ran


def pytest_runtest_logreport(report):
    if report.when == "call" or report.outcome != "passed":
        outcome = "xfailed" if hasattr(report, "wasxfail") and report.skipped else report.outcome
        # a file outside the root directory has no path in its node id: name it, or
        # tests of the same name in two files would be one
        path, _, name = report.nodeid.partition("::")
        _results.setdefault(f"{path or report.location[0]}::{name}",
                            outcome if report.when == "call" else f"{report.when}-{outcome}")


def pytest_sessionfinish(session, exitstatus):
    path = os.environ.get("FASTMATH_LOOPS_REPORT")
    if path:
        from fastmath.integrations import _loopmode

        counts = _loopmode.counts() if _loopmode.available() else {}
        with open(path, "w") as f:
            json.dump({"tests": _results,
                       "split_calls": sum(s for _, s in counts.values()),
                       "calls": sum(c for c, _ in counts.values())}, f)
