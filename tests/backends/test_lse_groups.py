"""logsumexp of large C-contiguous arrays through the compiled group kernel
(backends/_lse_kernel.c ``partial``/``merge``, driven by backends/numpy.py ``_lse_groups``).

Tolerance: as tests/frontends/test_logsumexp.py, 8 ULPs of max(|result|, 1) against SciPy:
both sum the same terms in another order (the kernel by cache-sized sub-blocks whose
partials are rescaled to the running maximum, SciPy in one pass), each term accurate to
about 1 ULP. Where SciPy sums many rows one after another (axis 0 of a tall array), its own
error grows with the row count; those cases are held against an extended-precision sum.
"""
import numpy as np
import pytest
import scipy.special

import fastmath
from fastmath.backends import numpy as numpy_backend
from fastmath.backends._lse import block_kernel, lse_block
from fastmath.dispatch import _parallel

pytestmark = pytest.mark.skipif(block_kernel() is None,
                                reason="fastmath.backends._lse_kernel not built")

ULPS = 8
BIG = 2 * numpy_backend.BLOCK  # the numpy backend's partials from here on


def close(got, want, dtype):
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape and got.dtype == want.dtype
    tol = ULPS * np.finfo(dtype).eps * np.maximum(np.abs(want), 1.0)
    assert (np.abs(got - want) <= tol).all(), np.max(np.abs(got - want) / tol)


CASES = [((BIG + 7,), None), ((1500, 700), None), ((1500, 700), 0), ((1500, 700), 1),
         ((3, 400_000), 1), ((3, 400_000), None), ((40, 50, 300), (0, 1)),
         ((40, 50, 300), (1, 2)), ((2, 3, 70_000), (1, 2)), ((600, 5, 90), 0)]


def _axes(a, axis):
    return tuple(range(a.ndim)) if axis is None else tuple(sorted(np.atleast_1d(axis) % a.ndim))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shape,axis", CASES, ids=str)
def test_group_kernel_against_scipy(dtype, shape, axis):
    rng = np.random.default_rng(7)
    a = (rng.standard_normal(shape) * 10).astype(dtype)
    a.flat[a.size // 3] = 60  # one dominant element somewhere
    assert numpy_backend._lse_groups(a, _axes(a, axis)) is not None  # the kernel's path
    for keepdims in (False, True):
        with fastmath.backend("numpy"):
            got = fastmath.logsumexp(a, axis=axis, keepdims=keepdims)
        want = scipy.special.logsumexp(a, axis=axis, keepdims=keepdims)
        assert type(got) is type(want)
        close(got, want, dtype)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_tall_columns_more_accurate_than_a_row_by_row_sum(dtype):
    a = (np.random.default_rng(8).standard_normal((400_000, 2)) * 10).astype(dtype)
    with fastmath.backend("numpy"):
        got = fastmath.logsumexp(a, axis=0)
    wide = a.astype(np.longdouble)
    m = wide.max(axis=0)
    exact = m + np.log(np.sum(np.exp(wide - m), axis=0))
    assert (np.abs(got - exact) <= 2 * np.spacing(np.abs(got))).all()


@pytest.mark.parametrize("shape,axis", CASES, ids=str)
def test_same_bits_on_one_thread_and_many(shape, axis):
    """Groups have a fixed size and merge in order: the thread count changes nothing."""
    a = np.random.default_rng(9).standard_normal(shape) * 5
    axes = _axes(a, axis)
    many = numpy_backend._lse_groups(a, axes)
    token = _parallel.serial.set(True)
    try:
        one = numpy_backend._lse_groups(a, axes)
    finally:
        _parallel.serial.reset(token)
    for x, y in zip(many, one):
        assert x.tobytes() == y.tobytes()


def test_partials_equal_the_python_blocks_own():
    """(M, m, s) as lse_block defines them, ties counted in m (within the sum's bound)."""
    a = np.round(np.random.default_rng(10).standard_normal((700, 600)) * 3)  # many ties
    for axes in ((0, 1), (1,), (0,)):
        got = numpy_backend._lse_groups(a, axes)
        want = lse_block(a, axes)
        assert got[0].tobytes() == want[0].tobytes()
        np.testing.assert_array_equal(got[1], want[1])
        np.testing.assert_allclose(got[2], want[2], rtol=1e-13)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("axis", [None, 0, 1])
def test_non_finite_maxima_take_the_python_blocks(bad, axis):
    """A maximum that is not finite is the Python blocks' (SciPy's rules); -inf elements
    under a finite maximum are the kernel's (their terms are 0)."""
    a = np.random.default_rng(11).standard_normal((800, 500))
    if bad == -np.inf:
        a[:, 7] = bad  # a whole column: its maximum is -inf
        a[3, :] = bad  # and a whole row
    else:
        a[123, 45] = bad
    if not np.isfinite(np.max(a, axis=axis)).all():
        assert numpy_backend._lse_groups(a, _axes(a, axis)) is None
    with fastmath.backend("numpy"), np.errstate(all="ignore"):
        got = fastmath.logsumexp(a, axis=axis)
        want = scipy.special.logsumexp(a, axis=axis)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(np.isinf(got), np.isinf(want))
    fin = np.isfinite(want)
    close(np.asarray(got)[fin], np.asarray(want)[fin], a.dtype)


def test_other_layouts_and_axes_are_declined():
    a = np.random.default_rng(12).standard_normal((60, 70, 80))
    assert numpy_backend._lse_groups(a, (1,)) is None  # a middle axis
    assert numpy_backend._lse_groups(a, (0, 2)) is None
    assert numpy_backend._lse_groups(a.astype(np.float16), (0, 1, 2)) is None
    # F-order and strided input reach lse_partial's Python blocks (the caller checks
    # contiguity); their results are SciPy's within the bound all the same
    for x in (np.asfortranarray(a), a[:, ::2]):
        with fastmath.backend("numpy"):
            close(fastmath.logsumexp(x, axis=0), scipy.special.logsumexp(x, axis=0), x.dtype)


def test_the_input_is_left_as_it_was():
    a = np.random.default_rng(13).standard_normal((900, 700)).astype(np.float32)
    before = a.copy()
    for axis in (None, 0, 1):
        with fastmath.backend("numpy"):
            fastmath.logsumexp(a, axis=axis)
    assert a.tobytes() == before.tobytes()


def test_bad_operands_are_refused_clearly():
    k = block_kernel()
    a = np.ones((4, 5))
    with pytest.raises(ValueError, match="partial"):
        k.partial(a, 0, np.empty(2), np.empty(1), np.empty(1))  # wrong size
    with pytest.raises(ValueError, match="partial"):
        k.partial(a, 3, np.empty(1), np.empty(1), np.empty(1))  # no such mode
    with pytest.raises(ValueError, match="merge"):
        k.merge(*[np.empty(3)] * 5, np.empty(3, np.float32))


def test_a_table_piece_outside_its_arrays_is_refused():
    """groups() reads and writes where its table says, without the GIL: a piece past the
    input's end or the outputs' is refused before anything runs."""
    k = block_kernel()
    a = np.ones((4, 5))
    outs = [np.empty(4) for _ in range(3)]
    for piece in ([16, 1, 5, 0], [0, 5, 5, 0], [0, 4, 5, 1], [-1, 1, 5, 0], [0, 0, 5, 0]):
        with pytest.raises(ValueError, match="groups"):
            k.groups(a, 1, np.array([piece], np.int64), *outs, 2)
    assert k.groups(a, 1, np.array([[0, 2, 5, 0], [10, 2, 5, 2]], np.int64), *outs, 2)
    np.testing.assert_allclose(outs[0], 1.0)  # each row's maximum


def test_groups_run_on_the_native_runtime_not_the_python_pool(monkeypatch):
    """The groups are pieces of one call of the native runtime (no Python per piece),
    paced by its policy; the Python pool is not asked."""
    def refuse(*args, **kwargs):
        raise AssertionError("the Python pool was asked")
    monkeypatch.setattr(_parallel, "run", refuse)
    a = np.random.default_rng(4).standard_normal((8, numpy_backend.GROUP)) * 5
    for axis in (None, 1, 0):
        with fastmath.backend("numpy"):
            got = fastmath.logsumexp(a, axis=axis)
        close(got, scipy.special.logsumexp(a, axis=axis), a.dtype)
