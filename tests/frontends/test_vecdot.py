"""fastmath.vecdot and fastmath.einsum against numpy.vecdot and numpy.einsum."""
import numpy as np
import pytest

import fastmath
from fastmath.frontends import _linalg

from helpers import BACKENDS, assert_same

pytestmark = pytest.mark.skipif(not hasattr(np, "vecdot"), reason="numpy.vecdot is numpy>=2")
SHAPES = [(500, 500), (100000, 64), (64, 100000), (32, 512, 512)]  # bench/vecdot.py's


def close(result, expected, x1, x2, n):
    """Within 16 sqrt(n) ULPs of sum|x1 * x2|: two summation orders each within
    8 sqrt(n) eps sum|x1 x2| of the exact dot product, the probabilistic bound of Higham and
    Mary (2019) with lambda = 8, which fails with probability below 1e-13 per result. A
    wrong result is off by about sqrt(n) of the terms, far outside it."""
    assert type(result) is type(expected)
    r, e = np.asarray(result), np.asarray(expected)
    assert r.dtype == e.dtype and r.shape == e.shape
    scale = np.abs(x1 * x2).sum(axis=-1) if x1 is not None else n
    tol = 16 * np.sqrt(max(n, 1)) * np.finfo(e.dtype).eps * scale
    assert np.all(np.abs(r - e) <= tol), np.max(np.abs(r - e) / tol)


def data(shape, dtype, seed=0):
    rng = np.random.default_rng(seed)
    dt = np.dtype(dtype)
    if dt.kind == "b":
        return rng.random(shape) < 0.5
    if dt.kind in "iu":
        return rng.integers(-50 if dt.kind == "i" else 0, 50, shape).astype(dt)
    x = rng.standard_normal(shape)
    if dt.kind == "c":
        x = x + 1j * rng.standard_normal(shape)
    return x.astype(dt)


def snapshot(*xs):
    return [x.copy() for x in xs]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", ["float32", "float64", "int64", "int8", "bool", "complex128",
                                   "complex64"])
@pytest.mark.parametrize("s1,s2,axis", [((5000, 64), (5000, 64), -1), ((64, 5000), (64, 5000), 0),
                                        ((8000, 40), (40,), -1), ((1, 6000, 30), (7, 1, 30), -1),
                                        ((30,), (30,), 0), ((0, 4), (0, 4), -1)])
def test_vecdot_parity(backend, dtype, s1, s2, axis):
    x1, x2 = data(s1, dtype), data(s2, dtype, seed=1)
    before = snapshot(x1, x2)
    with fastmath.backend(backend):
        r = fastmath.vecdot(x1, x2, axis=axis)
    e = np.vecdot(x1, x2, axis=axis)
    if np.dtype(dtype).kind == "f":
        a, b = np.broadcast_arrays(np.moveaxis(x1, axis, -1), np.moveaxis(x2, axis, -1))
        close(r, e, a.astype(np.float64), b.astype(np.float64), a.shape[-1])
    else:  # integer sums wrap the same in any order; these run NumPy's own loop
        assert_same(r, e)
    for x, y in zip((x1, x2), before):
        assert_same(x, y)


def test_vecdot_mixed_dtypes_and_lists_are_numpys():
    x1, x2 = data((6000, 8), "float32"), data((6000, 8), "float64")
    assert_same(fastmath.vecdot(x1, x2), np.vecdot(x1, x2))
    assert_same(fastmath.vecdot([1, 2], [3.0, 4.0]), np.vecdot([1, 2], [3.0, 4.0]))
    out = np.empty(6000)
    assert fastmath.vecdot(x1, x2, out=out) is out
    assert_same(out, np.vecdot(x1, x2))


@pytest.mark.parametrize("args,kwargs", [((np.ones((5, 3)), np.ones((5, 4))), {}),
                                         ((np.ones(3), np.float64(2.0)), {}),
                                         ((np.ones((5, 3)), np.ones((5, 3))), {"axis": 2}),
                                         ((np.ones((5, 3)), np.ones((4, 3))), {}),
                                         ((np.ones((5, 3)), np.ones((5, 3))), {"bogus": 1})])
def test_vecdot_errors_are_numpys(args, kwargs):
    with pytest.raises(Exception) as want:
        np.vecdot(*args, **kwargs)
    with pytest.raises(want.type) as got:
        fastmath.vecdot(*args, **kwargs)
    assert str(got.value) == str(want.value)


@pytest.mark.parametrize("dtype", ["float64", "complex128", "int32", "bool"])
def test_numpy1_fallback_matches_vecdot(dtype):
    x1, x2 = data((40, 7, 3), dtype), data((7, 3), dtype, seed=2)
    for axis in (-1, 1):
        r = _linalg._vecdot_numpy1(x1, x2 if axis == -1 else data((40, 7, 3), dtype), axis=axis)
        e = np.vecdot(x1, x2 if axis == -1 else data((40, 7, 3), dtype), axis=axis)
        if np.dtype(dtype).kind in "fc":
            np.testing.assert_allclose(r, e, rtol=1e-12)
            assert r.dtype == e.dtype and r.shape == e.shape
        else:
            assert_same(r, e)
    with pytest.raises(ValueError, match="core dimension"):
        _linalg._vecdot_numpy1(np.ones((2, 3)), np.ones((2, 4)))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_benchmark_shapes_vecdot(shape, dtype):
    x1, x2 = data(shape, dtype), data(shape, dtype, seed=1)
    r = fastmath.vecdot(x1, x2)
    close(r, np.vecdot(x1, x2), x1.astype(np.float64), x2.astype(np.float64), shape[-1])
    close(fastmath.einsum("...i,...i->...", x1, x2), np.einsum("...i,...i->...", x1, x2),
          x1.astype(np.float64), x2.astype(np.float64), shape[-1])


EINSUM = [("ij,ij->i", (3000, 64), (3000, 64)), ("...i,...i->...", (4, 900, 30), (900, 30)),
          ("ij,ij", (60, 40), (60, 40)), ("i,i->", (5000,), (5000,)),
          ("ij,jk->ik", (50, 40), (40, 30)), ("ij,jk", (50, 40), (40, 30)),
          ("bij,bjk->bik", (6, 20, 30), (6, 30, 10)), ("ij,ik->jk", (300, 6), (300, 7)),
          ("ij,kj->ik", (6, 300), (7, 300)), ("ik,kj->ji", (50, 40), (40, 30)),
          ("...ij,...jk->...ik", (3, 1, 20, 16), (4, 16, 30)), ("bij, bkj -> bki", (5, 20, 30), (5, 10, 30)),
          ("ij,ij->i", (300, 400), (300, 400)),
          # not a product pattern: numpy.einsum's own
          ("ij,jk->ijk", (20, 30), (30, 10)), ("ii,ij->j", (30, 30), (30, 40)),
          ("ij,kl->ijkl", (6, 7), (8, 9)), ("ij,j->", (60, 40), (40,)),
          ("ij,jk->k", (40, 30), (30, 50)), ("ij,jk->...ik", (40, 30), (30, 50)),
          # implicit output with '...', trailing '...', capitals, a dot too long for vecdot
          ("...ij,...jk", (3, 1, 20, 16), (4, 16, 30)), ("ij...,jk...->ik...", (40, 30, 3), (30, 50, 3)),
          ("Ij,jK->IK", (40, 30), (30, 50)), ("i,i->", (20000,), (20000,))]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", ["float32", "float64", "complex128", "int64"])
@pytest.mark.parametrize("sub,sa,sb", EINSUM, ids=[e[0] for e in EINSUM])
def test_einsum_parity(backend, dtype, sub, sa, sb):
    a, b = data(sa, dtype), data(sb, dtype, seed=1)
    before = snapshot(a, b)
    e = np.einsum(sub, a, b)
    out, want = np.empty(np.shape(e), e.dtype), np.empty(np.shape(e), e.dtype)
    np.einsum(sub, a, b, out=want)
    with fastmath.backend(backend):
        r = fastmath.einsum(sub, a, b)
        assert fastmath.einsum(sub, a, b, out=out) is out
    if np.dtype(dtype).kind in "fc":
        # the bound of close(), with n the longest axis (at least the summed length) and
        # the sums of |a| |b| as the scale
        scale = np.einsum(sub, np.abs(a).astype(np.float64), np.abs(b).astype(np.float64))
        tol = 16 * np.sqrt(max(a.shape + b.shape)) * np.finfo(e.dtype).eps * scale
        for got, expected in ((r, e), (out, want)):
            assert type(got) is type(expected)
            assert got.dtype == expected.dtype and got.shape == expected.shape
            assert np.all(np.abs(got - expected) <= tol)
    else:
        assert_same(r, e)
        assert_same(out, want)
    for x, y in zip((a, b), before):
        assert_same(x, y)


@pytest.mark.slow  # products on the benchmark shapes, against numpy.einsum
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("sub,shape,prep", [("ij,jk->ik", (500, 500), None),
                                            ("bij,bjk->bik", (32, 512, 512), None),
                                            ("ij,ik->jk", (100000, 64), None),
                                            ("ij,kj->ik", (64, 100000), None)], ids=str)
def test_benchmark_shapes_einsum(sub, shape, prep, dtype):
    a, b = data(shape, dtype), data(shape, dtype, seed=1)
    r = fastmath.einsum(sub, a, b)
    e = np.einsum(sub, a, b, optimize=True)  # the same sums, through BLAS: quick to check
    scale = np.einsum(sub, np.abs(a), np.abs(b), optimize=True).astype(np.float64)
    n = shape[0] if sub == "ij,ik->jk" else shape[-1]
    assert r.dtype == e.dtype and r.shape == e.shape
    assert np.all(np.abs(r - e) <= 16 * np.sqrt(n) * np.finfo(e.dtype).eps * scale)


# big enough for fastmath to parse them before NumPy answers: each step that declines
EINSUM_ERRORS = [("ij,jk,kl->il", (40, 30), (30, 50)), ("ij,jk->i.k", (40, 30), (30, 50)),
                 ("ij,jk->ik->ik", (40, 30), (30, 50)), ("i1,1k->ik", (40, 30), (30, 50)),
                 ("ij,jk->ii", (40, 30), (30, 40)), ("...ijk,...k->...i", (40, 30), (30,)),
                 ("...ij,...jk->ik", (3, 40, 30), (30, 50)), ("ij,jk->ik", (40, 30), (31, 50)),
                 ("...ij,...jk->...ik", (2, 40, 30), (3, 30, 50))]


@pytest.mark.parametrize("args,kwargs", [(("ij,jk->ik", np.ones((5, 3)), np.ones((4, 6))), {}),
                                         (("ij,jk->iq", np.ones((40, 30)), np.ones((30, 60))), {}),
                                         (("ij,jk->ik", np.ones((40, 30)), np.ones((30, 60))),
                                          {"out": np.empty((40, 61))}),
                                         (("ij,jk->ik", np.ones((40, 30)), np.ones((30, 60))),
                                          {"bogus": 1}),
                                         (("ij,jk->ik", np.ones((40, 30))), {})]
                         + [((sub, np.ones(sa), np.ones(sb)), {}) for sub, sa, sb in EINSUM_ERRORS])
def test_einsum_errors_are_numpys(args, kwargs):
    with pytest.raises(Exception) as want:
        np.einsum(*args, **kwargs)
    with pytest.raises(want.type) as got:
        fastmath.einsum(*args, **kwargs)
    assert str(got.value) == str(want.value)


def test_einsum_keywords_and_interleaved_form_are_numpys():
    a, b = data((40, 30), "float64"), data((30, 20), "float64", seed=1)
    assert_same(fastmath.einsum("ij,jk->ik", a, b, dtype=np.float32, casting="same_kind"),
                np.einsum("ij,jk->ik", a, b, dtype=np.float32, casting="same_kind"))
    assert_same(fastmath.einsum(a, [0, 1], b, [1, 2], [0, 2]), np.einsum(a, [0, 1], b, [1, 2], [0, 2]))
    out = np.empty((40, 20), np.float32)  # an out= of another dtype: numpy casts into it
    assert fastmath.einsum("ij,jk->ik", a, b, out=out, casting="same_kind") is out
