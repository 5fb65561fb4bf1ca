"""fastmath: NumPy and SciPy math, faster, with the same results.

``import fastmath as np`` gives the whole NumPy namespace; the accelerated functions
(exp, log, log1p, expm1, erf, logsumexp, ...) are fastmath's, every other name is NumPy's
own object. Which backend runs a call is chosen by FASTMATH_BACKEND, :func:`set_backend`
or :class:`backend`; the default, ``auto``, picks per call.

Importing fastmath imports NumPy and nothing heavier: torch, numexpr, SciPy and Dask are
imported the first time they are needed.

``fastmath.__version__`` is NumPy's, as every other NumPy attribute is, so that code
written for NumPy (``if np.__version__ >= ...``, ``np.version.version``) keeps taking the
branch it takes under NumPy. fastmath's own version is :data:`fastmath.fastmath_version`,
and ``importlib.metadata.version("fastmath-shim")``.
"""
from __future__ import annotations

import os as _os
import sys as _sys

# OpenBLAS (NumPy's and SciPy's BLAS) keeps its threads spinning 2^28 TSC cycles, about a
# tenth of a second, after every threaded call, without yielding their cores: an
# elementwise call split right after a matrix product shares its second core with one.
# Measured on the 2-core AMD EPYC, scikit-learn's MLPClassifier.predict_proba (matrix
# products, each followed by expit of 12.8M float64) under the loop mode: expit split took
# 51-55 ms after a product against 36 ms with BLAS's threads asleep (70 ms whole), the
# whole call 1.11x plain; with 2^24 cycles (about 6 ms) 1.48x. Matrix products that follow
# each other within that time find the threads spinning as before; one after a longer gap
# pays their wake-up (100-200 us on that VM). OpenBLAS reads it once, as NumPy loads it:
# set here where NumPy is not loaded yet and the user has not set it.
_OPENBLAS_THREAD_TIMEOUT = "24"
if "numpy" not in _sys.modules and "OPENBLAS_THREAD_TIMEOUT" not in _os.environ:
    _os.environ["OPENBLAS_THREAD_TIMEOUT"] = _OPENBLAS_THREAD_TIMEOUT
    _blas_spin_source = "set by fastmath before NumPy loaded OpenBLAS"
elif "OPENBLAS_THREAD_TIMEOUT" in _os.environ:
    _blas_spin_source = "environment"
else:
    _blas_spin_source = ("NumPy was imported before fastmath: OpenBLAS's own (28); "
                         "import fastmath first, or set OPENBLAS_THREAD_TIMEOUT")

import numpy as _np  # noqa: E402

from .integrations._patch import patch
from .integrations._accelerate import accelerate, stand_ins as _stand_ins
from .dispatch._selection import (FallbackError, available_backends, backend, get_backend,
                                  set_backend)
from .frontends._functions import FUNCTIONS as _FUNCTIONS
from .frontends._linalg import einsum, vecdot
from .frontends._reductions import log_softmax, logsumexp, softmax  # (named for the API docs)
from .frontends._ufunc import Ufunc

# fastmath's own version (fastmath/_version.py); __version__ stays NumPy's
from ._version import VERSION as fastmath_version  # noqa: E402

globals().update(_FUNCTIONS)  # one name per registry row and alias (frontends/_functions.py)


def _special():
    from . import special

    return special


# accelerate swaps numpy and scipy.special in a function's globals for these
_stand_ins(lambda: _sys.modules[__name__], _special)

# fastmath's own names; everything else resolves to numpy.
_OWN = ("set_backend", "get_backend", "backend", "available_backends", "info", "explain",
        "FallbackError", "special", "foreach", "Ufunc", "accelerate", "patch",
        "fastmath_version", "warmup")
_SUBMODULES = ("special", "foreach")


def info() -> dict:
    """What fastmath sees here: versions, backends (available or why not), threads, selection.

    ``fastmath info`` on the command line prints the same as a table (``--json`` as JSON).

    Returns
    -------
    dict
        ``"fastmath"``, ``"python"``, ``"platform"``: versions and the OS;
        ``"versions"``: the numerical libraries (None when not installed);
        ``"backends"``: each backend's name -> ``"available"`` or why it is not;
        ``"compiled"``: each optional C extension -> ``"built"``, or why not and what
        runs in its place;
        ``"threads"``: the threads the numpy backend uses;
        ``"selection"``: the backend in force and where that came from;
        ``"config"``: strict mode, calibration file and the ``FASTMATH_*`` variables read;
        ``"cpu"``: model, SIMD level (NumPy's best dispatch target), cores;
        ``"gpus"``: the CUDA devices torch sees; ``"thread_pools"``: threads per library;
        ``"openblas_spin"``: how long OpenBLAS's threads spin after a call
        (``OPENBLAS_THREAD_TIMEOUT``, 2^value cycles; fastmath sets 24 where it is
        imported before NumPy and the variable is not set) and where that came from.

    Examples
    --------
    >>> import fastmath
    >>> d = fastmath.info()
    >>> d["backends"]["numpy"]
    'available'
    >>> d["selection"]["backend"]
    'auto'
    """
    from .tools._info import collect

    return collect()


def warmup(backends=None) -> dict:
    """Pay now the one-off costs a first call would pay: importing torch, numexpr and
    SciPy, starting thread pools, building the call plans.

    The first call that needs torch imports it, which takes about 1.7 s on a 2-core machine
    (``FASTMATH_LOG=info`` logs it with the time taken). A server or a notebook can call
    ``warmup()`` at start-up instead, so that no user-facing call pays it.

    Parameters
    ----------
    backends : list of str, optional
        The backends to warm (default: every available one, ``auto`` included).

    Returns
    -------
    dict
        Backend name -> seconds its warm-up took.

    Raises
    ------
    ValueError
        For an unknown or unavailable backend, as :func:`set_backend` does.

    Examples
    --------
    >>> import fastmath
    >>> sorted(fastmath.warmup(["numpy"]))
    ['numpy']
    """
    import time

    from . import backends as _backends

    # auto last, so that each library's import is timed under the backend that needs it
    names = [*_backends.NAMES, "auto"] if backends is None else list(backends)
    x = _np.linspace(0.5, 2.0, 1 << 17)  # large enough for the threaded paths
    taken = {}
    for name in names:
        t = time.perf_counter()
        if backends is None and name != "auto" and _backends.why_unavailable(name):
            continue
        with backend(name):
            exp(x)  # noqa: F821 - an accelerated function, defined above from the registry
            erf(x)  # noqa: F821 - and one from scipy.special
        taken[name] = time.perf_counter() - t
    return taken


def explain(func, /, *args, **kwargs):
    """Which backend ``auto`` runs for ``func(*args, **kwargs)``, and the cost-table row
    that says so.

    ``func`` is an accelerated function (fastmath's, NumPy's/SciPy's, or its name); the
    arguments are the call's, keywords included (``axis=1``, ``dtype=numpy.float32``,
    ``b=weights``); arguments the function would refuse raise its TypeError. A binary
    function given one operand takes it as both. The answer names
    the row (from how many elements, backends by preference), where the table came from
    (the built-in defaults or this machine's calibration file) and the times measured
    nearest this size; ``print`` it, or read its attributes.

    Examples
    --------
    >>> import fastmath, numpy
    >>> fastmath.explain(fastmath.exp, numpy.ones(10)).backend
    'reference'
    """
    from .tools._explain import explain as _explain

    return _explain(func, *args, **kwargs)


def __getattr__(name):
    if name in _SUBMODULES:
        import importlib

        return importlib.import_module(f"{__name__}.{name}")
    try:
        return getattr(_np, name)
    except AttributeError:
        raise AttributeError(f"module 'fastmath' has no attribute {name!r} "
                             "(nor has numpy)") from None


def __dir__():
    return sorted(set(globals()) | set(dir(_np)) | set(_SUBMODULES))
