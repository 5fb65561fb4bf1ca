"""Other projects' own test suites, run with fastmath in place in each patch mode.

Each suite runs in its own pytest process (tests/loops_plugin.py starts the patch before
any test module is imported), once plain and once per mode; every test must end as it did
in the plain run. NumPy's test_umath.py and test_ufunc.py run whole, with the loop mode
installed and also with it splitting every run of two or more elements, so NumPy's small
test arrays take the threaded path too.

The ``upstream`` marker selects these tests (deselect with ``-m 'not upstream'``). The
quick subsets (the loop mode against plain; the files where code looks functions up by
identity, every mode) run with the test suite; the full suites, every mode, take hours on
two cores and run only with FASTMATH_FULL_SUITES=1.
"""
import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy
import pytest

from fastmath.integrations import _loopmode

SITE = Path(numpy.__file__).parent.parent
TESTS = Path(__file__).parents[1]

# name -> pytest arguments (paths relative to site-packages, or --pyargs modules)
FULL = {
    "numpy-ufuncs": ["--pyargs", "numpy._core.tests.test_umath", "numpy._core.tests.test_ufunc"],
    "sklearn": ["sklearn/mixture/tests", "sklearn/utils/tests/test_extmath.py",
                "sklearn/neural_network/tests"],
    "sklearn-logistic": ["sklearn/linear_model/tests/test_logistic.py"],
    "scipy-stats": ["scipy/stats/tests/test_continuous_basic.py", "-k", "norm or logistic"],
    "pandas": ["pandas/tests/series/test_ufunc.py"],
    "statsmodels": ["statsmodels/discrete/tests"],
    # where code looks NumPy's and SciPy's functions up by identity: C code registering
    # loops on the ufunc it finds by name, SciPy's tables keyed by function, pickles by
    # reference, docstrings read back
    "numpy-core": ["numpy/_core/tests", "numpy/lib/tests", "numpy/linalg/tests"],
    "scipy-special-stats": ["scipy/special/tests", "scipy/stats/tests"],
}
# the files of those suites that failed under the function patch, for the ordinary run
IDENTITY = ["numpy/_core/tests/test_custom_dtypes.py", "scipy/special/tests/test_logsumexp.py",
            "scipy/special/tests/test_support_alternative_backends.py",
            "scipy/special/tests/test_data.py",
            "-k", "test_custom_dtypes or test_logsumexp or (test_support_alternative_backends "
                  "and (test_pickle or test_doc)) or (test_data and (psi or digamma))"]
QUICK = {
    "numpy-ufuncs": ["--pyargs", "numpy._core.tests.test_umath", "-k",
                     "TestExp or TestLog or TestPower or TestDivision or TestHypot"],
    "sklearn": ["sklearn/mixture/tests/test_gaussian_mixture.py", "-k",
                "score or predict or fit_predict", "sklearn/neural_network/tests/test_base.py"],
    "scipy-stats": ["scipy/stats/tests/test_continuous_basic.py", "-k",
                    "norm and (moments or entropy or ppf)"],
    "pandas": ["pandas/tests/series/test_ufunc.py", "-k", "unary or binary"],
    "statsmodels": ["statsmodels/discrete/tests/test_discrete.py", "-k",
                    "TestLogitNewton or TestProbitNewton"],
}
MODES = ["functions", "loops", "both"]
CASES = [(s, m) for s in FULL for m in MODES]
# and the loop mode splitting every run of 2 or more elements, so that the suites' small
# arrays take the threaded path too (not the largest suites: hours more)
FULL_CASES = CASES + [(s, "loops-split") for s in FULL
                      if s not in ("numpy-core", "scipy-special-stats")]


def _memory() -> str:
    """The free memory NumPy's tests are told of (NPY_AVAILABLE_MEM), the same in every run.

    Tests that need much of it skip by what is free as each one starts, which other
    processes move: ``test_huge_vectordot`` ran in one run and skipped in the next.
    Measured once here (NumPy's own measure), unless set already.
    """
    given = os.environ.get("NPY_AVAILABLE_MEM")
    if given:
        return given
    try:
        from numpy.testing._private.utils import _get_mem_available
        free = _get_mem_available()
    except ImportError:
        free = None
    return f"{free or 0} B"


_MEMORY = _memory()


def run_suite(args, mode, tmp, split_all=False):
    """{test id: outcome} of one pytest run, and the loop mode's call counts there."""
    report = tmp / f"{mode or 'plain'}-{split_all}.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("FASTMATH_")}
    env["NPY_AVAILABLE_MEM"] = _MEMORY
    env.update(PYTHONPATH=os.pathsep.join([str(TESTS), str(TESTS.parent)] + sys.path),
               FASTMATH_LOOPS_REPORT=str(report), FASTMATH_LOOPS_MODE=mode or "")
    if split_all:
        env["FASTMATH_LOOPS_SPLIT_ALL"] = "1"
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "loops_plugin",
           f"--confcutdir={SITE}", f"--rootdir={tmp}", "-W", "ignore", "-o", "addopts=",
           *args]
    r = subprocess.run(cmd, cwd=SITE, env=env, capture_output=True, text=True, timeout=7200)
    assert report.exists(), r.stdout[-3000:] + r.stderr[-3000:]
    return json.loads(report.read_text())


_plain_runs: dict = {}  # the plain run of each suite, shared by its modes


def _compare(suite, args, mode, tmp_path, split_all=False):
    if mode == "loops-split":
        mode, split_all = "loops", True
    pytest.importorskip(suite.split("-")[0])
    if mode != "functions" and not _loopmode.available():
        pytest.skip(_loopmode.why_unavailable())
    if tuple(args) not in _plain_runs:
        _plain_runs[tuple(args)] = run_suite(args, None, tmp_path)
    plain = _plain_runs[tuple(args)]
    patched = run_suite(args, mode, tmp_path, split_all)
    counts = Counter(plain["tests"].values())
    assert counts["passed"] > 0, plain
    differ = {k: (v, patched["tests"].get(k)) for k, v in plain["tests"].items()
              if patched["tests"].get(k) != v}
    differ.update({k: (None, v) for k, v in patched["tests"].items() if k not in plain["tests"]})
    print(f"\n{suite} [{mode}{', split all' if split_all else ''}]: {dict(counts)}; "
          f"loop calls {patched['calls']}, split {patched['split_calls']}")
    assert not differ, dict(list(differ.items())[:20])
    if mode != "functions":
        assert patched["calls"] > 0  # the suite ran through the installed loops
    return patched


@pytest.mark.upstream
@pytest.mark.slow  # other projects' suites in subprocesses: the full run only
@pytest.mark.parametrize("suite", list(QUICK))
def test_quick(suite, tmp_path):
    _compare(suite, QUICK[suite], "loops", tmp_path)


@pytest.mark.upstream
@pytest.mark.parametrize("mode", MODES)
def test_identity_lookups_quick(mode, tmp_path):
    # NumPy's test DType registers its loops on the ufunc that C code finds as numpy.hypot;
    # SciPy's tests key their capabilities table by function, pickle the numpy.sinc they
    # hold, read the note SciPy puts in xlogy's docstring and name test_data.py's cases
    # after scipy.special.psi.__name__
    pytest.importorskip("scipy")
    patched = _compare("numpy-core", IDENTITY, mode, tmp_path)
    assert any("test_custom_dtypes.py" in k for k in patched["tests"])
    assert any("test_logsumexp.py" in k for k in patched["tests"])
    assert any("Data for psi" in k for k in patched["tests"])


@pytest.mark.upstream
@pytest.mark.slow
def test_numpy_ufunc_tests_see_their_ufuncs_under_the_function_patch(tmp_path):
    # NumPy's test collects its ufuncs from numpy._core.umath (not patched) and picks the
    # cases that must warn by `ufunc in [np.log, ...]`, where np.log is fastmath's object
    _compare("numpy-ufuncs", ["--pyargs", "numpy._core.tests.test_umath", "-k",
                              "test_unary_spurious_fpexception"], "functions", tmp_path)


@pytest.mark.upstream
@pytest.mark.slow  # other projects' suites in subprocesses: the full run only
def test_numpy_ufunc_tests_split_everything_quick(tmp_path):
    patched = _compare("numpy-ufuncs", QUICK["numpy-ufuncs"], "loops", tmp_path, split_all=True)
    assert patched["split_calls"] > 100


@pytest.mark.upstream
@pytest.mark.slow
@pytest.mark.skipif(not os.environ.get("FASTMATH_FULL_SUITES"),
                    reason="the full suites take an hour: set FASTMATH_FULL_SUITES=1")
@pytest.mark.parametrize("suite,mode", FULL_CASES)
def test_full(suite, mode, tmp_path):
    patched = _compare(suite, FULL[suite], mode, tmp_path)
    if mode == "loops-split":
        assert patched["split_calls"] > 0
