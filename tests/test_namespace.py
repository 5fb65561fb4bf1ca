"""``import fastmath as np`` and ``fastmath.special``: the namespaces, and what importing costs."""
import subprocess
import sys

import numpy
import pytest
import scipy.special

import fastmath
import fastmath.special


def test_import_leaves_heavy_libraries_out():
    code = ("import sys, fastmath, fastmath.special, numpy;"
            "fastmath.exp(numpy.ones(10)); fastmath.array([1]); fastmath.random.default_rng(0);"
            "print(sorted(m for m in ('torch', 'numexpr', 'scipy', 'dask') if m in sys.modules))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"


@pytest.mark.parametrize("name", ["array", "random", "testing", "float32", "linalg", "ndarray",
                                  "pi", "newaxis", "sum", "floor", "errstate", "asarray",
                                  "__version__", "version", "lib"])
def test_unaccelerated_names_are_numpys_own_objects(name):
    assert getattr(fastmath, name) is getattr(numpy, name)


def test_version_gated_code_takes_numpys_branch():
    import importlib.metadata

    # code written for NumPy compares np.__version__; it must see NumPy's under fastmath
    assert fastmath.__version__ == numpy.__version__
    assert fastmath.version.version == numpy.version.version
    assert fastmath.lib.NumpyVersion(fastmath.__version__) == numpy.__version__
    try:
        installed = importlib.metadata.version("fastmath-shim")
    except importlib.metadata.PackageNotFoundError:
        installed = None  # run from a checkout that was never installed
    assert installed in (None, fastmath.fastmath_version)
    assert fastmath.info()["fastmath"] == fastmath.fastmath_version != numpy.__version__


def test_accelerated_names_are_fastmaths():
    for name in ("exp", "log", "log1p", "expm1"):
        assert getattr(fastmath, name) is not getattr(numpy, name)
        assert callable(getattr(fastmath, name))
    assert callable(fastmath.erf) and callable(fastmath.logsumexp)


def test_dir_and_missing_names():
    names = dir(fastmath)
    for name in ("exp", "array", "set_backend", "special", "logsumexp", "float64"):
        assert name in names
    with pytest.raises(AttributeError, match="no attribute 'not_a_numpy_name'"):
        fastmath.not_a_numpy_name


def test_special_mirrors_scipy_special():
    assert fastmath.special.gamma is scipy.special.gamma
    assert fastmath.special.betainc is scipy.special.betainc
    assert fastmath.special.ndtr is fastmath.ndtr
    assert fastmath.special.psi is fastmath.digamma
    assert fastmath.special.erf is fastmath.erf
    assert fastmath.special.logsumexp is fastmath.logsumexp
    assert "gammaln" in dir(fastmath.special)
    with pytest.raises(AttributeError):
        fastmath.special.nope


def test_drop_in_script():
    import fastmath as np

    x = np.linspace(0, 1, 11)
    y = np.exp(x) + np.sin(x) - np.log1p(x)
    ref = numpy.exp(x) + numpy.sin(x) - numpy.log1p(x)
    numpy.testing.assert_array_equal(y, ref)
    assert isinstance(y, numpy.ndarray)
