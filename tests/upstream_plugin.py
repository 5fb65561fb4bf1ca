"""pytest plugin for tests/frontends/test_upstream.py: NumPy's and SciPy's own tests, with fastmath in.

Loaded into a separate pytest process (``-p upstream_plugin``). It keeps only the tests
that concern fastmath's functions (``SELECT``), and with FASTMATH_UPSTREAM=patch it swaps
fastmath in before any test module is imported, so that ``np.exp`` and names bound at
import (``from scipy.special import erf, logsumexp``) are fastmath's. NumPy's tests also
call its internal ``numpy._core.umath`` directly; those names are swapped too. Each
test's outcome goes to the JSON file named by FASTMATH_UPSTREAM_REPORT.
"""
import importlib
import json
import os
import re

# test file -> which of its tests concern the accelerated functions (by test name)
SELECT = {
    "test_umath.py": re.compile(r"(?i)exp|log|sin|cos|tan|arc|sqrt|cbrt|square|reciprocal"
                                r"|power|hypot|atan|sinc|i0"),
    "test_umath_accuracy.py": re.compile(r""),
    "test_logsumexp.py": re.compile(r""),
    "test_basic.py": re.compile(r"(?i)(?<!ov)erf|expit|logit|ndtr|xlogy|xlog1py|entr"
                                r"|gammaln|softmax|sinc"),
    # not digamma/psi: scipy's digamma is named "psi", fastmath's "digamma", and test_data
    # names its cases after __name__, so the two runs would not line up case by case
    "test_data.py": re.compile(r"(?i)(?<!ov)erf|ndtr|expit|logit|gammaln"),
}
_results: dict = {}
_internal: list = []  # (module, attribute, original) swapped besides fastmath.patch()


def _patch_internal():
    import fastmath
    from fastmath import _registry

    umath = importlib.import_module("numpy._core.umath")
    for spec in _registry.ROWS:
        module, _, attr = spec.ref.partition(":")
        if module == "numpy" and getattr(umath, attr, None) is spec.reference():
            _internal.append((umath, attr, spec.reference()))
            setattr(umath, attr, getattr(fastmath, spec.name))


def pytest_configure(config):
    if os.environ.get("FASTMATH_UPSTREAM") == "patch":
        import fastmath

        fastmath.patch.start()
        _patch_internal()


def pytest_unconfigure(config):
    while _internal:
        module, attr, original = _internal.pop()
        setattr(module, attr, original)
    if os.environ.get("FASTMATH_UPSTREAM") == "patch":
        import fastmath

        fastmath.patch.stop()
    path = os.environ.get("FASTMATH_UPSTREAM_REPORT")
    if path:
        from fastmath.dispatch import _selection

        from fastmath.frontends import _ufunc

        # which (backend, function, dtype) plans fastmath built: proof that it ran; under
        # auto, calls below the smallest accelerated size go to the reference from the
        # front end's fast path without a plan: the size it read proves the front end ran
        plans = sorted("/".join(key) for key in _selection._plans)
        plans += sorted(f"auto/{u.__name__}/fast-path" for u in _ufunc._instances
                        if getattr(u, "_small", 0) and hasattr(u, "__name__"))
        with open(path, "w") as f:
            json.dump({"tests": _results, "plans": plans}, f, indent=1, sort_keys=True)


def pytest_collection_modifyitems(config, items):
    keep, drop = [], []
    for item in items:
        name = item.nodeid.partition("::")[2]
        pattern = SELECT.get(item.path.name)
        (keep if pattern is not None and pattern.search(name.lower()) else drop).append(item)
    items[:] = keep
    config.hook.pytest_deselected(items=drop)


def pytest_runtest_logreport(report):
    key = f"{os.path.basename(report.location[0])}::{report.nodeid.partition('::')[2]}"
    if report.when == "call" or report.outcome != "passed":
        if hasattr(report, "wasxfail"):
            outcome = "xfailed" if report.skipped else "xpassed"
        else:
            outcome = report.outcome
        message = ""
        if report.failed:
            message = str(report.longrepr).strip().splitlines()[-1][:300]
        if key not in _results or _results[key][0] == "passed":
            _results[key] = [outcome, message]
