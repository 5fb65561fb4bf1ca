"""Every two-argument ufunc x backend against NumPy/SciPy: dtype pairs, Python scalars,
broadcasting, layouts, special values, out=/where=, and input immutability.

Bounds are the registry's (float32, float64) ULPs for backends that are not the
reference's own loops; the numpy backend must be bitwise equal.
"""
import numpy as np
import pytest

import fastmath
from fastmath.dispatch._fpe import recorded, suspects
from fastmath._registry import ROWS

from helpers import BACKENDS, assert_same
from test_parity import SPECIALS, bound, values

BINARY = [s for s in ROWS if s.kind == "binary"]
PAIRS = [("float64", "float64"), ("float32", "float32"), ("float32", "float64"),
         ("int64", "float32"), ("int32", "int32"), ("int8", "uint8"), ("bool", "float16"),
         ("complex128", "float64"), ("float64", "object")]


def check(spec, backend, *args, **kwargs):
    ref = spec.reference()
    before = [np.array(a, copy=True) for a in args if isinstance(a, np.ndarray)]
    with np.errstate(all="ignore"):
        try:
            expected = ref(*args, **kwargs)
        except Exception as e:
            with pytest.raises(type(e)), fastmath.backend(backend):
                getattr(fastmath, spec.name)(*args, **kwargs)
            return
        with fastmath.backend(backend):
            got = getattr(fastmath, spec.name)(*args, **kwargs)
    after = [a for a in args if isinstance(a, np.ndarray)]
    for b, a in zip(before, after):
        assert b.tobytes() == a.tobytes(), "an input was modified"
    assert_same(got, expected, bound(spec, backend, np.asarray(expected).dtype))
    return got


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("pair", PAIRS, ids="-".join)
@pytest.mark.parametrize("spec", BINARY, ids=lambda s: s.name)
def test_dtype_pairs_and_broadcasting(spec, backend, pair):
    a = values(pair[0], 240).reshape(12, 20)
    b = values(pair[1], 240, seed=1).reshape(12, 20)
    check(spec, backend, a, b)
    check(spec, backend, a, b[0])           # (12, 20) with (20,)
    check(spec, backend, a[:, :1], b[0])    # (12, 1) with (20,): both broadcast
    check(spec, backend, a.T, b.T[::-1])    # transposed, negative strides
    check(spec, backend, a[0, 0], b)        # a NumPy scalar with an array
    check(spec, backend, a[:0], b[:0])      # empty
    check(spec, backend, a, b[:3])          # shapes that do not broadcast: NumPy's error


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("spec", BINARY, ids=lambda s: s.name)
def test_python_scalars(spec, backend):
    """NumPy 2's weak scalars: a Python float keeps a float32 array float32, and so on."""
    for dtype in ("float32", "float64", "int64", "int16", "float16"):
        a = values(dtype, 60)
        for s in (2.0, 3, -0.5, True, 1e300, 2 + 1j):
            check(spec, backend, a, s)
            check(spec, backend, s, a)
    check(spec, backend, 2.0, 3.0)
    check(spec, backend, [1.0, 2.0], (0.5, 3.0))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("spec", BINARY, ids=lambda s: s.name)
def test_special_value_grid_and_large_arrays(spec, backend, dtype):
    with np.errstate(over="ignore"):
        s = np.array(SPECIALS, dtype=dtype)
    check(spec, backend, s[:, None], s[None, :])  # every pair of special values
    n = 300_000
    a = values(dtype, n, seed=2).reshape(300, 1000)
    b = values(dtype, n, seed=3).reshape(300, 1000)
    check(spec, backend, a, b)
    check(spec, backend, a[:, ::2], b[0, ::2])
    check(spec, backend, np.asfortranarray(a), b)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("spec", BINARY, ids=lambda s: s.name)
def test_out_where_dtype(spec, backend):
    for n in (7, 300_000):
        a = np.linspace(0.1, 3, n)
        b = np.linspace(-2, 2, n)
        out = np.full(n, 7.0)
        with np.errstate(all="ignore"):
            expected = spec.reference()(a, b)
            with fastmath.backend(backend):
                assert getattr(fastmath, spec.name)(a, b, out=out) is out
        assert_same(out, expected, bound(spec, backend, np.float64))
        mask = b > 0
        for args, kwargs in (((a, b), {"where": mask, "out": np.zeros(n)}),
                             ((a, b), {"dtype": np.float32}),
                             ((a, b), {"out": np.zeros(n, np.float32)}),
                             ((a, b), {"casting": "no", "dtype": np.float32}),
                             ((a, b[:1]), {"out": (np.zeros(n),)})):
            check(spec, backend, *args, **kwargs)
    # out= aliasing an input
    x = np.linspace(0.1, 3, 300_000)
    y = np.linspace(-2, 2, 300_000)
    with np.errstate(all="ignore"):
        expected = spec.reference()(x, y)
        with fastmath.backend(backend):
            getattr(fastmath, spec.name)(x, y, out=x)
    assert_same(x, expected, bound(spec, backend, np.float64))


@pytest.mark.parametrize("spec", [s for s in ROWS if s.kind in ("unary", "binary")],
                         ids=lambda s: s.name)
def test_fpe_flags_are_derivable(spec):
    """What _fpe.derive assumes of every row: flags come only from the elements whose
    output is inf/nan, tiny, or whose input is subnormal; rows with fpe=False raise none."""
    ref = spec.reference()
    for dtype in ("float32", "float64"):
        ins = [values(dtype, 4000, seed=s) for s in range(ref.nin)]
        if ref.nin == 2:
            ins = [np.repeat(ins[0][:60], 60), np.tile(ins[1][:60], 60)]
        with np.errstate(all="ignore"):
            out = ref(*ins)
        flags = recorded(ref, *ins)
        if not spec.fpe:
            assert flags == 0
            continue
        with np.errstate(all="warn"):
            mask = suspects(ins, out)
        derived = 0 if mask is None else recorded(ref, *(x[mask] for x in ins))
        assert derived == flags, (dtype, derived, flags)
