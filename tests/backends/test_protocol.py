"""The backend protocol (fastmath/backends/_protocol.py): every backend keeps it, it covers
every kind of registry row, and a backend written to it alone plugs in."""
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from fastmath import backends
from fastmath._registry import ROWS
from fastmath.backends import _protocol

HERE = Path(__file__).resolve().parent


@pytest.mark.parametrize("name", backends.NAMES)
def test_every_backend_keeps_the_protocol(name):
    b = backends.get(name)
    assert isinstance(b, _protocol.Backend) and b.name == name
    assert _protocol.missing(b) == []


def test_every_kind_has_its_kernel_signature_written_down():
    assert {row.kind for row in ROWS} <= set(_protocol.KERNEL_SIGNATURES)


@pytest.mark.parametrize("name", backends.NAMES)
def test_every_list_kernel_keeps_the_list_protocol(name):
    # what fastmath.foreach's front end relies on (_protocol.LIST_KERNEL): the arrays it
    # takes computed into results, the others left by index in order, inputs untouched
    b = backends.get(name)
    make = getattr(b, "foreach", None)
    if b.why_unavailable() is not None or make is None:
        pytest.skip(f"{name} has no list kernel here")
    kernel = make(next(r for r in ROWS if r.name == "exp"))
    # the int array (a cast) and the scalar are left by every list kernel
    xs = [np.linspace(0, 1, 100), np.arange(5), np.linspace(0, 1, 7)[::2], 1.0]
    before = [np.copy(x) for x in xs]
    results = [None] * len(xs)
    flags, left = kernel(xs, None, results)
    assert flags is None and list(left) == sorted(left) and {1, 3} <= set(left)
    for i, x in enumerate(xs):
        if i in left:
            assert results[i] is None
        else:
            want = np.exp(x)
            assert results[i].dtype == want.dtype and np.allclose(results[i], want)
    assert all(np.array_equal(x, b) for x, b in zip(xs, before))
    assert set(_protocol.LIST_KERNEL) >= {"call", "stops", "limit"}


def test_a_backend_that_lacks_a_member_is_refused_by_name(monkeypatch):
    class NoKernel:
        name = "broken"

        def why_unavailable(self):
            return None

    monkeypatch.setitem(backends._FACTORIES, "broken", (__name__, "NoKernel", {}))
    monkeypatch.setitem(globals(), "NoKernel", NoKernel)
    with pytest.raises(TypeError, match="'broken'.*lacks kernel"):
        backends.get("broken")
    assert "broken" not in backends._instances


def test_register_refuses_a_name_taken():
    for name in ("numpy", "auto"):
        with pytest.raises(ValueError, match="exists already"):
            backends.register(name, "example_backend", "ExampleBackend")


# run in a fresh process: a registered backend stays for the life of the process
PLUGGED = """
import warnings
import numpy as np
import fastmath
from fastmath import backends
from example_backend import ExampleBackend

backends.register("example", "example_backend", "ExampleBackend")
assert "example" in fastmath.available_backends()
assert fastmath.info()["backends"]["example"] == "available"
x = np.linspace(0.5, 2, 1000)
with fastmath.backend("example"):
    assert fastmath.get_backend() == "example"
    assert np.array_equal(fastmath.exp(x), np.exp(x))
    calls = ExampleBackend.calls
    assert calls  # (selection also probes a kernel once, on samples, before its first use)
    assert np.array_equal(fastmath.exp(x), np.exp(x))
    assert ExampleBackend.calls == calls + 1
    # declined (float32), and no kernel (a SciPy row): numpy, behind it, takes them
    assert np.array_equal(fastmath.exp(x.astype(np.float32)), np.exp(x.astype(np.float32)))
    assert np.array_equal(fastmath.erf(x), fastmath.special.erf.reference(x))
    assert ExampleBackend.calls == calls + 1
    # its list kernel under fastmath.foreach: the float64 arrays, the float32 one left to
    # the front end; NumPy's warning for the array that divides by zero
    xs = [x, x.astype(np.float32), np.zeros(3)]
    with np.errstate(divide="warn"), warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        got = fastmath.foreach.log(xs)
    assert [str(m.message) for m in w] == ["divide by zero encountered in log"]
    assert all(g.dtype == v.dtype and np.array_equal(g, np.log(v)) for g, v in zip(got, xs))
    assert ExampleBackend.listed == 2
fastmath.set_backend("example")
assert fastmath.get_backend() == "example"
print("plugged in")
"""


def test_a_backend_written_to_the_protocol_plugs_in():
    r = subprocess.run([sys.executable, "-c", PLUGGED], capture_output=True, text=True,
                       timeout=120, env={**__import__("os").environ,
                                         "PYTHONPATH": f"{HERE}:{Path(backends.__file__).parents[2]}"})
    assert r.returncode == 0 and "plugged in" in r.stdout, r.stdout + r.stderr
