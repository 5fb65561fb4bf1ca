"""What the tests share: the backends to test on, ULP distances and comparisons against the
reference, the front ends a piece of code entered, and the hypothesis cases drawn."""
import os
import sys

import numpy as np

import fastmath
from fastmath.frontends import _reductions
from fastmath.frontends._binary import BinaryUfunc
from fastmath.frontends._elementwise import Function
from fastmath.frontends._ufunc import Ufunc
from fastmath.tools import _check

BACKENDS = [b for b in ("numpy", "torch-cpu", "numexpr", "torch-cuda", "mkl")
            if b in fastmath.available_backends()] + ["auto"]
# backends whose elementwise kernels are the reference's own, so results are bitwise equal
BITWISE = ("numpy",)


def ulp_distance(a, b):
    """Elementwise distance in ULPs between two float arrays of one dtype (fastmath check's)."""
    a, b = np.asarray(a), np.asarray(b)
    assert a.dtype == b.dtype and a.dtype.kind == "f", (a.dtype, b.dtype)
    if a.dtype.itemsize not in (2, 4, 8):  # long double: no integer view of its bits
        with np.errstate(all="ignore"):
            d = np.abs(a - b) / np.spacing(np.maximum(np.abs(a), np.abs(b)))
        d = np.where((a == b) | (np.isnan(a) & np.isnan(b)), 0, d)
        return np.where(np.isnan(d), np.inf, d)
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


# Hypothesis cases run per function, filled by the property-based tests and shown at the end.
DRAWN: dict = {}

# Observe which fastmath front ends a piece of code entered (a profiler, no stand-ins).
_ENTRIES = {cls.entry_code(): lambda f: f.f_locals["self"].__name__
            for cls in (Ufunc, BinaryUfunc, Function)}
_ENTRIES[_reductions.logsumexp.__code__] = lambda f: "logsumexp"


def fastmath_calls(fn, *args, **kwargs):
    """(fn's result, names of the fastmath functions called in this thread while it ran)."""
    seen = []

    def profile(frame, event, arg):
        if event == "call" and frame.f_code in _ENTRIES:
            seen.append(_ENTRIES[frame.f_code](frame))

    previous = sys.getprofile()
    sys.setprofile(profile)
    try:
        result = fn(*args, **kwargs)
    finally:
        sys.setprofile(previous)
    return result, seen




def thread_free_environ(*also):
    """``os.environ`` without thread counts and OpenMP wait settings (nor ``also``), for a
    subprocess that must see the machine's own defaults: an earlier test's dask Nanny leaves
    OMP_NUM_THREADS=1 and MKL_NUM_THREADS=1 in this process's environment (its
    pre-spawn-environ), and torch takes MKL's count as its own."""
    drop = {"OMP_WAIT_POLICY", "GOMP_SPINCOUNT", *also}
    return {k: v for k, v in os.environ.items()
            if k not in drop and not k.endswith("_NUM_THREADS")}


class FakeClock:
    """A clock that moves only when told: each reading returns the time and then moves it
    on by ``tick`` seconds; ``advance`` moves it too. The back-off policies (``_parallel``'s,
    the loop mode's, foreach's) read their clocks through hooks a test can point at one, so
    that what a split or a call "took" is the test's choice and not the machine's load."""

    def __init__(self, tick=0.0):
        self.now, self.tick, self.reads = 0.0, tick, 0

    def __call__(self):
        self.reads += 1
        now = self.now
        self.now += self.tick
        return now

    def advance(self, seconds):
        self.now += seconds


# The first line of a child script that tests Ctrl-C: SIGINT raises KeyboardInterrupt there,
# as in a program started from a terminal, even where this test run itself was started with
# SIGINT ignored (a background job of a non-interactive shell is): the child inherits
# SIG_IGN, Python then installs no handler of its own, and the interrupt never arrives.
CTRL_C_RAISES = "import signal; signal.signal(signal.SIGINT, signal.default_int_handler)\n"


# logsumexp's tolerance, justified in tests/frontends/test_logsumexp.py's docstring
LSE_ULPS = 8


def lse_close(got, expected, dtype, condition=1.0):
    """``got`` is SciPy's logsumexp result ``expected`` within LSE_ULPS of the largest
    term (times the condition number of a sum with weights of both signs)."""
    got, expected = np.asarray(got), np.asarray(expected)
    assert got.shape == expected.shape and got.dtype == expected.dtype
    scale = np.maximum(np.abs(np.nan_to_num(expected, posinf=0, neginf=0)), 1.0)
    tol = LSE_ULPS * np.finfo(dtype).eps * (scale + condition)
    same_special = (np.isnan(got) & np.isnan(expected)) | (got == expected)
    with np.errstate(invalid="ignore"):
        assert (same_special | (np.abs(got - expected) <= tol)).all(), (got, expected)
