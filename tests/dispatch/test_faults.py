"""Clean failure: bad arguments get NumPy's/SciPy's error or one naming the argument and the
valid choices; a result that cannot be allocated raises MemoryError with the inputs intact;
a kernel that fails part-way leaves out= untouched and the process usable."""
import numpy as np
import pytest
import scipy.special

import fastmath
from fastmath.dispatch import _selection
from fastmath import backends
from fastmath._registry import BY_NAME, ROWS

from helpers import BACKENDS, assert_same

UNARY = [s for s in ROWS if s.kind == "unary"]
BIG = 300_000  # past the numpy backend's threading threshold


# names are case-insensitive (test_env_config.py), so "NUMPY" is a valid one
@pytest.mark.parametrize("name", ["nope", "num py", "", 3, None])
def test_unknown_backend_names_the_choices(name):
    for entry in (fastmath.set_backend, fastmath.backend):
        with pytest.raises(ValueError, match="valid choices: auto, numpy") as e:
            entry(name)
        assert repr(name) in str(e.value)
    assert fastmath.get_backend() == "auto"


def _same_error(call_ref, call_fm):
    with pytest.raises(Exception) as expected:
        call_ref()
    with pytest.raises(type(expected.value)) as got:
        call_fm()
    assert str(got.value) == str(expected.value)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("spec", UNARY, ids=lambda s: s.name)
@pytest.mark.parametrize("n", [4, BIG])
def test_bad_out_gets_numpys_error(spec, backend, n):
    x = np.linspace(0.1, 1, n)
    fn, ref = getattr(fastmath, spec.name), spec.reference()
    for out in (np.zeros(n + 1), np.zeros((2, n + 1)), np.zeros(n, np.int64), np.zeros(n, bool),
                [0.0] * n, (np.zeros(n), np.zeros(n))):
        with fastmath.backend(backend):
            _same_error(lambda: ref(x, out=out), lambda: fn(x, out=out))


@pytest.mark.parametrize("backend", BACKENDS)
def test_logsumexp_bad_axis_and_weights_get_scipys_error(backend):
    a = np.ones((3, 4))
    cases = [{"axis": 2}, {"axis": -3}, {"axis": (0, 0)}, {"axis": 1.5},
             {"b": np.ones(5)}, {"b": np.ones((2, 4))}]
    for kw in cases:
        with fastmath.backend(backend):
            _same_error(lambda: scipy.special.logsumexp(a, **kw),
                        lambda: fastmath.logsumexp(a, **kw))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("spec", UNARY, ids=lambda s: s.name)
def test_unallocatable_result_raises_memory_error(spec, backend):
    # a broadcast view: 256 TiB of float64 result, no memory behind the input
    one = np.full(1, 0.5)
    huge = np.broadcast_to(one, (1 << 45,))
    with fastmath.backend(backend), pytest.raises(MemoryError):
        getattr(fastmath, spec.name)(huge)
    assert one[0] == 0.5
    with fastmath.backend(backend), np.errstate(all="ignore"):  # still usable
        assert_same(getattr(fastmath, spec.name)(one), spec.reference()(one),
                    0 if backend == "numpy" else spec.ulp[1])


class Broken(Exception):
    pass


SENTINEL = 12345.0


class Failing:
    """The numpy backend's real kernel, except that it writes garbage into every chunk
    and then fails on the chunk holding SENTINEL: a backend failing part-way."""

    def __init__(self, kernel):
        self.kernel = kernel

    def __call__(self, x, out):
        out[...] = -99.0  # what a half-finished device copy would leave behind
        if (x == SENTINEL).any():
            raise Broken("simulated kernel failure")
        return self.kernel(x, out)


@pytest.fixture
def python_path():
    """Every fastmath call takes the Python path, which plans a chain (_selection.plan):
    the ufuncs' fast path in C hands every call to it while a profiler watches the thread
    (it makes NumPy's loop's calls itself, with no chain to fail)."""
    import sys

    before = sys.getprofile()
    sys.setprofile(lambda *args: None)
    yield
    sys.setprofile(before)


@pytest.fixture
def failing_first(monkeypatch, python_path):
    """A real chain whose first kernel fails part-way, with NumPy's loop after it."""
    numpy_backend = backends.get("numpy")
    real = _selection.plan

    def plan(spec, dtype, size, layout=0):
        kernel = numpy_backend.kernel(spec)
        return (("failing", Failing(kernel)), ("numpy", kernel))

    monkeypatch.setattr(_selection, "plan", plan)
    _selection._warned.clear()
    yield
    monkeypatch.setattr(_selection, "plan", real)


@pytest.mark.parametrize("spec", UNARY, ids=lambda s: s.name)
@pytest.mark.parametrize("inplace", [False, True])
def test_kernel_failing_mid_call_leaves_out_fully_written(spec, inplace, failing_first):
    fn = getattr(fastmath, spec.name)
    x = np.linspace(0.1, 1, BIG)
    x[-1] = SENTINEL
    with np.errstate(all="ignore"):
        expected = spec.reference()(x)
    out = x if inplace else np.full(BIG, -7.0)
    with np.errstate(all="ignore"), pytest.warns(RuntimeWarning, match="'failing' failed"):
        r = fn(x, out=out)
    assert r is out
    assert out.tobytes() == expected.tobytes(), "out= was left half-written"
    # the process is usable: the same call without the failing element works
    y = np.linspace(0.1, 1, BIG)
    with np.errstate(all="ignore"):  # arccosh(0.1), arctanh(1): NumPy's nan, inf
        r = fn(y, out=np.empty(BIG))
        assert r.tobytes() == spec.reference()(y).tobytes()


def test_numpys_own_loop_failing_is_numpys_error(monkeypatch, python_path):
    """The last kernel is NumPy's loop: its exception reaches the caller unchanged."""
    numpy_backend = backends.get("numpy")
    spec = BY_NAME["exp"]
    kernel = Failing(numpy_backend.kernel(spec))
    monkeypatch.setattr(_selection, "plan", lambda *a: (("numpy", kernel),))
    x = np.full(10, SENTINEL)
    with pytest.raises(Broken):
        fastmath.exp(x, out=np.empty(10))
