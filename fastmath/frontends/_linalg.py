"""vecdot, and einsum's batched-dot and batched-matmul patterns, on the fastest formulation.

A batched inner product can be written many ways (NumPy's vecdot, einsum, ``(a*b).sum``,
matmul on ``a[..., None, :] @ b[..., :, None]``, torch's bmm), and which is fastest depends
on the shape by several times. The front ends here recognise the calls whose meaning they
can match exactly and hand everything else, unchanged, to NumPy: the user gets NumPy's
result (within the summation-order bound below) or NumPy's own error.

Summation order differs between formulations, so results may differ from NumPy's in the
last bits: like any two dot products of length n, each within the probabilistic bound
``lambda * sqrt(n) * eps * sum|x1 * x2|`` of the exact value (Higham and Mary, SIAM J. Sci.
Comput. 41(5), 2019). Integer, bool, object and mixed-dtype calls are always NumPy's own.

Which formulation wins (bench/vecdot.py, 2-core AMD EPYC, numpy 2.4 with OpenBLAS 0.3.31,
torch 2.13; medians of interleaved runs, noisy shared machine, so provisional):

- Many short rows: matmul on ``[..., None, :] @ [..., :, None]`` over row chunks in the
  thread pool. NumPy runs that as one plain dot per row without BLAS threads, so the
  chunks scale: (100000, 64) 1.3-1.8x and (32, 512, 512) 1.1-2.1x faster than
  ``numpy.vecdot`` in float32 and float64.
- Few long rows, or small inputs: ``numpy.vecdot`` itself. On (64, 100000) and (500, 500)
  no formulation beat it reliably (within the noise, or slower).
- einsum of a matmul pattern: ``numpy.matmul`` on transposed views (BLAS), 4.5-9.5x faster
  than ``numpy.einsum`` on all four shapes; ``einsum(optimize=True)`` was as fast or slower.
- torch (matmul, bmm, ``(a*b).sum``, ``linalg.vecdot``) was slower than the best NumPy
  formulation on every shape and dtype measured (0.1-0.9x), so no torch formulation is
  used and the backend selection has nothing to choose: every call runs NumPy formulations.
"""
from __future__ import annotations

import math

from .._numpy import FLOATS, np

from ..dispatch import _parallel
from . import _frames

_ndarray = np.ndarray
_REAL = FLOATS
_FLOATS = _REAL + (np.dtype(np.complex64), np.dtype(np.complex128))

# The shape rule (see the module docstring): matmul over row chunks for at least this many
# rows, of at most this length, and this many elements in all (below it a thread handoff
# costs more than it saves); otherwise the reference.
CHUNK_MIN_ROWS = 4096
CHUNK_MAX_LENGTH = 512
CHUNK_MIN_SIZE = 1 << 18
# einsum of a batched dot with rows of this length: numpy.vecdot (BLAS dot) measured
# 1.3-1.9x faster than numpy.einsum's own loop; above the upper end OpenBLAS threads each
# dot, which on a busy machine measured up to 2.6x slower, so einsum keeps those.
VECDOT_LENGTHS = (256, 10000)
# Below this many input elements an einsum is NumPy's at once: parsing would cost more.
EINSUM_MIN_SIZE = 1024


def _vecdot_numpy1(x1, x2, /, out=None, *, axis=-1):
    """numpy.vecdot for NumPy 1.x: ``sum(conj(x1) * x2)`` over ``axis``, broadcast."""
    a = np.moveaxis(np.asarray(x1), axis, -1)
    b = np.moveaxis(np.asarray(x2), axis, -1)
    if a.shape[-1] != b.shape[-1]:
        raise ValueError(f"vecdot: Input operand 1 has a mismatch in its core dimension 0, "
                         f"with gufunc signature (n),(n)->() (size {b.shape[-1]} is "
                         f"different from {a.shape[-1]})")
    if a.dtype.kind == "c":
        a = np.conj(a)
    dtype = np.result_type(a, b)
    return np.einsum("...i,...i->...", a, b, out=out, dtype=dtype)


_vecdot_ref = getattr(np, "vecdot", _vecdot_numpy1)


def _matmul_rows(a, b, out):
    """out[...] = a[..., :] . b[..., :], as matmul on 1 x n by n x 1 matrices."""
    np.matmul(a[..., None, :], b[..., :, None], out=out[..., None, None])


def _matmul_rows_chunked(a, b, /, out):
    """_matmul_rows over chunks of rows, one per thread. ``a``, ``b`` broadcast to ``out``."""
    shape = out.shape + a.shape[-1:]
    a, b = np.broadcast_to(a, shape), np.broadcast_to(b, shape)
    axis = _parallel.split_axis(out.shape, out.strides)
    n = out.shape[axis]
    tasks = []
    for i, j in _parallel.bounds(n, min(_parallel.threads(), n)):
        index = (slice(None),) * axis + (slice(i, j),)
        tasks.append(lambda index=index: _matmul_rows(a[index], b[index], out[index]))
    _parallel.run(tasks)


def _chunked(rows: int, length: int, dtype) -> bool:
    return (dtype in _REAL and rows >= CHUNK_MIN_ROWS and length <= CHUNK_MAX_LENGTH
            and rows * length >= CHUNK_MIN_SIZE and _parallel.threads() > 1)


def vecdot(x1, x2, /, out=None, *, axis=-1, **kwargs):
    """Vector dot product of two arrays along ``axis``: ``sum(conj(x1) * x2, axis)``.

    Same signature, dtypes, broadcasting and errors as ``numpy.vecdot`` (on NumPy 1.x, an
    equivalent through ``numpy.einsum``); ``out=`` and the other ufunc keywords are passed
    to NumPy. Real float32/float64 inputs of one dtype run on the fastest formulation
    measured for their shape (see docs/linalg.md); the result may then
    differ from NumPy's in the last bits, as any other summation order would.

    Parameters
    ----------
    x1, x2 : array_like
        Input arrays; the vector axis must have the same length, the others broadcast.
    axis : int, optional
        The axis of the vectors in each input (default the last).

    Returns
    -------
    ndarray or numpy scalar
        The dot products, with the broadcast shape of the other axes.

    Examples
    --------
    >>> import numpy as np, fastmath
    >>> fastmath.vecdot(np.array([[1.0, 2.0], [3.0, 4.0]]), np.array([1.0, 1.0]))
    array([3., 7.])
    >>> fastmath.vecdot(np.array([1j, 1.0]), np.array([1j, 1.0]))  # x1 is conjugated
    np.complex128(2+0j)
    """
    try:
        if (out is None and not kwargs and type(x1) is _ndarray and type(x2) is _ndarray
                and (x1.size >= CHUNK_MIN_SIZE or x2.size >= CHUNK_MIN_SIZE)
                and x1.dtype == x2.dtype and x1.dtype in _REAL and x1.ndim and x2.ndim
                and type(axis) is int and -x1.ndim <= axis < x1.ndim
                and -x2.ndim <= axis < x2.ndim):
            a, b = np.moveaxis(x1, axis, -1), np.moveaxis(x2, axis, -1)
            n = a.shape[-1]
            if b.shape[-1] == n:
                try:
                    loop = np.broadcast_shapes(a.shape[:-1], b.shape[:-1])
                except ValueError:
                    loop = None
                if loop is not None and _chunked(math.prod(loop), n, a.dtype):
                    res = np.empty(loop, a.dtype)
                    _matmul_rows_chunked(a, b, res)
                    return res
        if out is not None:
            kwargs["out"] = out
        return _vecdot_ref(x1, x2, axis=axis, **kwargs)
    except Exception as e:  # NumPy's error, without fastmath's frames
        _frames.trim(e)
        raise


# --- einsum ----------------------------------------------------------------------------

_einsum_ref = np.einsum
_OPTIMIZE = (False, True, "greedy", "optimal")  # a path given as a list is NumPy's
_plans: dict = {}


def _labels(term, ndim, width):
    """The labels of one operand's axes: letters, and ints 0..width-1 for '...' axes
    (right-aligned, as NumPy broadcasts them). None when the term is not simple."""
    head, dots, tail = term.partition("...")
    if not (head + tail).isalpha() and (head + tail):
        return None
    if not dots:
        return list(term) if len(term) == ndim else None
    e = ndim - len(head) - len(tail)
    if e < 0:
        return None
    return list(head) + list(range(width - e, width)) + list(tail)


def _parse(subscripts, nda, ndb):
    """The plan of a two-operand einsum of a product pattern: (a labels, b labels, output
    labels, batch, rows, cols, inner), see :func:`_roles`; None for anything else."""
    ins, arrow, outs = subscripts.replace(" ", "").partition("->")
    terms = ins.split(",")
    if len(terms) != 2 or "->" in outs or ("." in outs and "..." not in outs):
        return None
    # the number of axes '...' stands for: the most of either operand
    width = max([0] + [nd - len(t) + 3 for t, nd in zip(terms, (nda, ndb)) if "..." in t])
    la, lb = _labels(terms[0], nda, width), _labels(terms[1], ndb, width)
    if la is None or lb is None:
        return None
    lo = _explicit_output(ins, outs, width) if arrow else _implicit_output(la, lb, width)
    if lo is None or not _is_product(la, lb, lo):
        return None
    return (la, lb, lo) + _roles(la, lb, lo)


def _explicit_output(ins, outs, width):
    """The labels written after '->', or None."""
    if ("..." in outs) != ("..." in ins):
        return None
    return _labels(outs, width + len(outs.replace("...", "")), width)


def _implicit_output(la, lb, width):
    """NumPy's output when none is written: the broadcast axes, then letters seen once, sorted."""
    letters = [x for x in la + lb if isinstance(x, str)]
    return list(range(width)) + sorted(x for x in set(letters) if letters.count(x) == 1)


def _is_product(la, lb, lo):
    """Whether the labels make a batched dot or matrix product, the patterns _product runs."""
    if any(len(set(labels)) != len(labels) for labels in (la, lb, lo)):
        return False  # diagonals and repeated outputs are NumPy's
    a, b, o = set(la), set(lb), set(lo)
    if not o <= a | b or (a ^ b) - o:
        return False  # an axis summed in one operand only: not a product pattern
    return bool((a & b) - o)  # if nothing is contracted, an outer product


def _roles(la, lb, lo):
    """Output axes in both operands (batch), in a only (rows), in b only (cols), in output
    order; the axes summed over (inner), in a's order."""
    batch = [x for x in lo if x in la and x in lb]
    rows = [x for x in lo if x in la and x not in lb]
    cols = [x for x in lo if x in lb and x not in la]
    inner = [x for x in la if x in lb and x not in lo]
    return batch, rows, cols, inner


def _group(x, labels, order):
    return x.transpose([labels.index(l) for l in order])


def einsum(*operands, **kwargs):
    """Evaluate the Einstein summation convention on the operands.

    ``einsum(subscripts, *operands, out=None, dtype=None, order='K', casting='safe',
    optimize=False)``, as ``numpy.einsum``. Two-operand batched dot products
    (``'ij,ij->i'``, ``'...i,...i->...'``) and batched matrix products (``'ij,jk->ik'``,
    ``'bij,bjk->bik'``, and their transposed variants such as ``'ij,ik->jk'``) of one
    float or complex dtype run on the fastest formulation measured for their shape
    (``numpy.matmul`` on transposed views, or the vecdot formulations); ``out=`` is
    honoured. Every other call is ``numpy.einsum``'s own, and so are its errors.

    Examples
    --------
    >>> import numpy as np, fastmath
    >>> a = np.arange(6.0).reshape(2, 3)
    >>> fastmath.einsum("ij,ij->i", a, a)
    array([ 5., 50.])
    >>> fastmath.einsum("ij,kj->ik", a, a)
    array([[ 5., 14.],
           [14., 50.]])
    """
    try:
        if (len(operands) == 3 and type(operands[0]) is str and type(operands[1]) is _ndarray
                and type(operands[2]) is _ndarray and kwargs.keys() <= {"out", "optimize"}
                and type(kwargs.get("optimize", False)) in (bool, str)
                and kwargs.get("optimize", False) in _OPTIMIZE):
            subscripts, a, b = operands
            out = kwargs.get("out")
            if (a.dtype == b.dtype and a.dtype in _FLOATS and a.size + b.size >= EINSUM_MIN_SIZE
                    and (out is None or type(out) is _ndarray)):
                key = (subscripts, a.ndim, b.ndim)
                try:
                    plan = _plans[key]
                except KeyError:
                    plan = _plans[key] = _parse(subscripts, a.ndim, b.ndim)
                res = None if plan is None else _product(a, b, *plan)
                if res is not None:
                    res = _returned(res, out)
                    if res is not None:
                        return res
        return _einsum_ref(*operands, **kwargs)
    except Exception as e:  # NumPy's error, without fastmath's frames
        _frames.trim(e)
        raise


def _returned(res, out):
    """``res`` as einsum returns it: a scalar for 0-d, or written to ``out``; None when
    ``out`` has another shape or dtype, which NumPy answers (casting into it, or its error)."""
    if out is None:
        return res[()] if res.ndim == 0 else res
    if out.shape == res.shape and out.dtype == res.dtype:
        np.copyto(out, res)
        return out
    return None


def _product(a, b, la, lb, lo, batch, rows, cols, inner):
    """``einsum`` of one matched pattern, or None for what NumPy must answer."""
    dot = not rows and not cols
    if dot and (a.dtype not in _REAL or max(a.size, b.size) < CHUNK_MIN_SIZE
                and a.shape[la.index(inner[-1])] < VECDOT_LENGTHS[0]):
        return None  # a dot product numpy.einsum does as fast (or, complex, conjugates not)
    size = _sizes(a, la, b, lb)
    if size is None:
        return None
    k = math.prod(size[x] for x in inner)
    sa = tuple(a.shape[la.index(x)] for x in batch)
    sb = tuple(b.shape[lb.index(x)] for x in batch)
    shape = np.broadcast_shapes(sa, sb)
    if dot:
        kernel = _dot_kernel(math.prod(shape), k, a.dtype)
        if kernel is None:
            return None
        A = _group(a, la, batch + inner).reshape(sa + (k,))
        B = _group(b, lb, batch + inner).reshape(sb + (k,))
        res = np.empty(shape, a.dtype)
        kernel(A, B, out=res)
    else:
        m = math.prod(size[x] for x in rows)
        n = math.prod(size[x] for x in cols)
        A = _group(a, la, batch + rows + inner).reshape(sa + (m, k))
        B = _group(b, lb, batch + inner + cols).reshape(sb + (k, n))
        res = np.matmul(A, B).reshape(shape + tuple(size[x] for x in rows + cols))
    order = batch + rows + cols
    if order != lo:
        res = np.ascontiguousarray(res.transpose([order.index(x) for x in lo]))
    return res


def _sizes(a, la, b, lb):
    """The length of each label's axis, or None where the operands disagree: NumPy's error,
    or a broadcast NumPy does only on '...' axes, of a length 1 against another."""
    size = {}
    for x, labels in ((a, la), (b, lb)):
        for label, n in zip(labels, x.shape):
            m = size.get(label, n)
            if m != n and not (isinstance(label, int) and 1 in (m, n)):
                return None
            size[label] = max(m, n)
    return size


def _dot_kernel(rows, length, dtype):
    """The formulation for ``rows`` dot products of ``length``, as ``kernel(A, B, out=)``;
    None where numpy.einsum's own loop is as fast."""
    if _chunked(rows, length, dtype):
        return _matmul_rows_chunked
    if VECDOT_LENGTHS[0] <= length <= VECDOT_LENGTHS[1]:
        return _vecdot_ref
    return None
