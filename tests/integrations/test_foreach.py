"""fastmath.foreach: each array's result is fastmath.<name> of it (NumPy's bits on the numpy
backend, within the row's ULP bound on torch), with NumPy's dtypes, errors and warnings."""
import warnings

import numpy as np
import pytest

import fastmath
from fastmath import foreach
from fastmath._registry import ROWS

from helpers import BACKENDS, BITWISE, assert_same

UNARY = [s for s in ROWS if s.kind in ("unary", "elementwise")]


def mixed(seed=0):
    """Arrays of several dtypes and shapes, in every function's domain somewhere, plus
    items that are not arrays."""
    rng = np.random.default_rng(seed)
    xs = [rng.uniform(0.05, 0.95, n).astype(dt) for n, dt in
          [(7, "float64"), (300, "float32"), ((20, 30), "float64"), (5000, "float32"),
           (0, "float64"), (40, "float16")]]
    xs += [rng.uniform(1.1, 3, (3, 4)), rng.integers(1, 5, 9).astype(np.int8),
           np.arange(1, 6), np.float32(0.5), 0.25, [0.5, 2.0], np.asfortranarray(np.ones((4, 3)) / 3)]
    return xs


def reference(spec, x):
    with np.errstate(all="ignore"):
        return spec.reference()(x)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("spec", UNARY, ids=lambda s: s.name)
def test_parity_with_numpy(spec, backend):
    xs = mixed()
    before = [np.copy(x) for x in xs]
    with fastmath.backend(backend), np.errstate(all="ignore"):
        got = getattr(foreach, spec.name)(xs)
    assert len(got) == len(xs)
    for g, x in zip(got, xs):
        e = reference(spec, x)
        dt = np.asarray(e).dtype
        exact = backend in BITWISE or dt not in (np.float32, np.float64)
        assert_same(g, e, ulps=0 if exact else spec.ulp[dt == np.float64])
    for x, b in zip(xs, before):
        assert_same(np.asarray(x), b)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", ["exp", "log1p", "sqrt", "sinc", "erf", "expit", "cbrt"])
def test_out_in_place_and_other_lists(name, backend):
    spec = next(s for s in UNARY if s.name == name)
    rng = np.random.default_rng(1)
    xs = [rng.uniform(0.05, 0.95, n).astype(dt) for n, dt in [(10, "f8"), (3000, "f4"), (70000, "f8")]]
    want = [reference(spec, x) for x in xs]
    bound = 0 if backend in BITWISE else max(spec.ulp)
    outs = [np.empty_like(x) for x in xs]
    with fastmath.backend(backend):
        got = getattr(foreach, name)(xs, out=outs)
        assert all(g is o for g, o in zip(got, outs))
        for o, w in zip(outs, want):
            assert_same(o, w, ulps=bound)
        ys = [x.copy() for x in xs]
        got = getattr(foreach, name)(ys, out=ys)
    assert all(g is y for g, y in zip(got, ys))
    for y, w in zip(ys, want):
        assert_same(y, w, ulps=bound)


def test_many_arrays_across_threads_are_bitwise_numpys():
    rng = np.random.default_rng(2)
    xs = [rng.standard_normal(int(n)) for n in rng.integers(1 << 14, 40_000, 50)]  # ~11 MB
    with fastmath.backend("numpy"):
        got = foreach.exp(xs)
        outs = [np.empty_like(x) for x in xs]
        foreach.sin(xs, out=outs)
    for g, o, x in zip(got, outs, xs):
        assert_same(g, np.exp(x))
        assert_same(o, np.sin(x))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("n", [3, 100000])  # one thread, and across the pool
def test_warnings_per_array_as_numpy_gives_them(backend, n):
    xs = [np.ones(n), np.zeros(n), -np.ones(n), np.ones(n)] * 3
    with warnings.catch_warnings(record=True) as want:
        warnings.simplefilter("always")
        for x in xs:
            np.log(x)
    with fastmath.backend(backend), warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        foreach.log(xs)
    assert [(w.category, str(w.message)) for w in got] == [(w.category, str(w.message)) for w in want]
    with fastmath.backend(backend), np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("error")
        foreach.log(xs)


@pytest.mark.parametrize("backend", BACKENDS)
def test_raise_stops_where_a_loop_would(backend):
    xs = [np.full(50000, 2.0), np.zeros(50000), np.full(50000, 3.0)]
    with fastmath.backend(backend), np.errstate(divide="raise"):
        with pytest.raises(FloatingPointError, match="divide by zero encountered in log"):
            foreach.log(xs, out=xs)
    assert_same(xs[0], np.log(np.full(50000, 2.0)), ulps=0 if backend in BITWISE else 4)
    assert np.all(xs[1] == -np.inf)
    assert_same(xs[2], np.full(50000, 3.0))  # never reached


def test_bad_inputs_get_numpys_errors():
    with pytest.raises(ValueError, match="out= has 1 arrays for 2 inputs"):
        foreach.exp([np.ones(2), np.ones(2)], out=[np.ones(2)])
    with pytest.raises(TypeError):
        foreach.exp(3.0)  # not a list
    with pytest.raises(Exception) as want:
        np.exp(np.ones(3), out=np.empty(3, np.int32))
    with pytest.raises(want.type):
        foreach.exp([np.ones(3)], out=[np.empty(3, np.int32)])
    with pytest.raises(Exception) as want:
        np.exp(np.array(["a"]))
    with pytest.raises(want.type):
        foreach.exp([np.ones(3), np.array(["a"])])


def test_names_cover_the_unary_rows_and_import_stays_cheap():
    assert {s.name for s in UNARY} <= set(foreach.__all__)
    assert foreach.psi is foreach.digamma
    assert fastmath.foreach is foreach
    assert "foreach" in dir(fastmath)


def test_torch_foreach_kernels_where_torch_has_them():
    torch = pytest.importorskip("torch")
    from fastmath import backends

    b = backends.get("torch-cpu")
    have = {s.name for s in UNARY if b.foreach(s) is not None}
    # every row with a torch kernel whose torch function has a _foreach form
    for s in UNARY:
        name = s.kernels.get("torch", "").rpartition(".")[2]
        name = {"expit": "sigmoid"}.get(name, name)
        assert (s.name in have) == (s.kind == "unary" and bool(name)
                                    and hasattr(torch, f"_foreach_{name}_")), s.name
    assert {"exp", "log", "log1p", "expm1", "erf", "sqrt", "sin", "tanh", "expit"} <= have


@pytest.mark.parametrize("backend", ["numpy", "auto"])
@pytest.mark.parametrize("name", ["exp", "log1p", "erf", "sqrt"])
def test_many_small_arrays_of_every_kind_are_numpys(name, backend):
    """A long list of small arrays of several dtypes and layouts: every result has NumPy's
    bits, dtype and shape, and is an array of its own."""
    spec = next(s for s in UNARY if s.name == name)
    rng = np.random.default_rng(3)
    kinds = ["float64", "float32", "int8", "int64", "float16"]
    xs = []
    for k in range(1200):
        dt = kinds[k % len(kinds)]
        shape = (int(rng.integers(0, 3000)),) if k % 7 else (3, int(rng.integers(1, 40)))
        xs.append(rng.uniform(0.05, 4, shape).astype(dt))
    xs[5] = np.asfortranarray(rng.uniform(0.1, 1, (30, 20)))
    before = [x.copy() for x in xs]
    with fastmath.backend(backend), np.errstate(all="ignore"):
        got = getattr(foreach, name)(xs)
    for g, x, b in zip(got, xs, before):
        assert_same(g, reference(spec, x))
        assert_same(x, b)
    got[0][...] = -1.0  # results share no memory with one another
    assert_same(got[1], reference(spec, xs[1]))
