"""The torch-cuda pipeline, run on the CPU: the same code with device "cpu", where streams
and events are no-ops and "pinned" buffers are ordinary memory.

Elementwise results are compared bitwise with torch's own kernel on the whole array (the
pipeline must not change a value by cutting the array up) and within the registry's ULP
bound with NumPy/SciPy. Out-of-memory is produced by the device's allocator limit, the
code path CUDA's allocator takes; faults by a kernel that really raises mid-stream.
"""
import warnings

import numpy as np
import pytest
import scipy.special

torch = pytest.importorskip("torch")

import fastmath  # noqa: E402
from fastmath.dispatch import _config, _selection
from fastmath.frontends import _native
from fastmath import backends  # noqa: E402
from fastmath._registry import BY_NAME, ROWS  # noqa: E402
from fastmath.backends import _stream  # noqa: E402
from fastmath.backends import torch as tb  # noqa: E402
from fastmath.backends._lse import lse_block, lse_merge  # noqa: E402

from helpers import assert_same  # noqa: E402

tb._import_torch()
UNARY = [s for s in ROWS if s.kind == "unary" and "torch" in s.kernels]  # streamed ones


def device(**kw):
    return _stream.Device(torch, "cpu", **kw)


def whole(fn, x):
    """torch's kernel on the whole array at once: what every chunk must reproduce."""
    out = np.empty_like(x)
    fn(torch.from_numpy(np.ascontiguousarray(x)), out=torch.from_numpy(out))
    return out


def pooled_bytes(pool, kind):
    return sum(size * len(v) for (k, size), v in pool.free.items() if k == kind)


@pytest.fixture
def streamed_cuda():
    """The torch-cuda backend, streaming through a "cpu" device, behind the front end."""
    saved = backends._instances.get("torch-cuda")
    backend = tb.TorchBackend("cpu", streamed=True)
    backend._dev = device(memory=1 << 20)
    backends._instances["torch-cuda"] = backend
    _selection._plans.clear()
    yield backend
    if saved is None:
        backends._instances.pop("torch-cuda", None)
    else:
        backends._instances["torch-cuda"] = saved
    _selection._plans.clear()


@pytest.mark.parametrize("shape,chunk", [((0,), 8), ((7,), 8), ((8,), 8), ((9,), 8),
                                         ((1003,), 100), ((5, 7, 3), 4), ((5, 7, 3), 20),
                                         ((4, 1, 6), 1), ((2, 3), 1000)])
def test_blocks_cover_each_element_once_in_order(shape, chunk):
    ids = np.arange(int(np.prod(shape))).reshape(shape)
    seen = np.concatenate([ids[idx].ravel() for idx in _stream.blocks(shape, chunk)])
    np.testing.assert_array_equal(seen, np.arange(ids.size))
    assert all(ids[idx].size <= chunk for idx in _stream.blocks(shape, chunk))


@pytest.mark.parametrize("n", [0, 1, 999, 1000, 1001, 10_007])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_chunking_reproduces_the_whole_array_kernel(n, dtype):
    dev = device(memory=1 << 20)
    dev.trace = []
    x = np.linspace(-20, 20, n, dtype=dtype)
    before = x.copy()
    out = np.full_like(x, np.nan)
    _stream.unary(dev, torch.exp, x, out, chunk=1000)
    assert_same(out, whole(torch.exp, x))
    assert_same(x, before)
    assert sum(step == "drain" for step, _ in dev.trace) == max(1, -(-n // 1000))


def test_order_of_steps_overlaps_chunks():
    dev = device(memory=1 << 20)
    dev.trace = []
    x = np.linspace(-1, 1, 10_000)
    _stream.unary(dev, torch.exp, x, np.empty_like(x), chunk=1000)
    at = {entry: i for i, entry in enumerate(dev.trace)}
    assert len(at) == len(dev.trace) == 50
    for k in range(10):
        steps = [at[(s, k)] for s in ("stage", "h2d", "compute", "d2h", "drain")]
        assert steps == sorted(steps)
        if k + 1 < 10:  # the next chunk is on its way before this one is drained
            assert at[("stage", k + 1)] < at[("drain", k)] < at[("drain", k + 1)]


def test_buffers_are_reused_across_calls():
    dev = device(memory=1 << 20)
    x = np.linspace(-1, 1, 50_000, dtype=np.float32)
    out = np.empty_like(x)
    _stream.unary(dev, torch.exp, x, out, chunk=4096)
    misses, hits = dev.pool.misses, dev.pool.hits
    assert misses == _stream.SLOTS * 4  # pinned in, device in, device out, pinned out
    for _ in range(3):
        _stream.unary(dev, torch.exp, x[:30_000], out[:30_000], chunk=4096)
    assert dev.pool.misses == misses
    assert dev.pool.hits == hits + 3 * misses
    assert_same(out, whole(torch.exp, x))


@pytest.mark.parametrize("layout", ["strided", "transposed", "reversed", "broadcast", "fortran"])
def test_non_contiguous_inputs_and_outputs(layout):
    dev = device(memory=1 << 20)
    base = np.linspace(-3, 3, 120 * 50).reshape(120, 50)
    x = {"strided": base[::3, 1::2], "transposed": base.T, "reversed": base[::-1, ::-2],
         "broadcast": np.broadcast_to(base[0], (40, 50)),
         "fortran": np.asfortranarray(base)}[layout]
    out = np.empty(x.shape[::-1]).T  # an F-ordered output as well
    _stream.unary(dev, torch.special.erf, x, out, chunk=333)
    assert_same(out, whole(torch.special.erf, x))
    # staging went block by block (333 elements, rounded up to 4 KiB): no buffer ever
    # held the whole array, so no contiguous copy of it was made
    assert max(size for _, size in dev.pool.free) == 4096 < x.nbytes


def test_memory_bound_is_respected():
    budget = 1 << 20
    dev = device(memory=budget)
    x = np.linspace(-5, 5, 2_000_000)  # 16 MB, 16x the budget
    out = np.empty_like(x)
    _stream.unary(dev, torch.exp, x, out)
    assert dev.pool.peak["pinned"] <= budget and dev.pool.peak["device"] <= budget
    assert_same(out, whole(torch.exp, x))
    part = _stream.lse(dev, tb._lse, lse_merge, x.reshape(1000, 2000), (0, 1))
    assert dev.pool.peak["pinned"] <= budget and dev.pool.peak["device"] <= budget
    np.testing.assert_array_equal(part[0], lse_block(x.reshape(1000, 2000), (0, 1))[0])


@pytest.mark.parametrize("axes", [(0,), (1,), (0, 1), (0, 2), (2,)])
@pytest.mark.parametrize("weighted", [False, True])
def test_reduction_partials_equal_the_numpy_backends(axes, weighted):
    dev = device(memory=1 << 20)
    rng = np.random.default_rng(1)
    a = rng.normal(size=(60, 7, 11)) * 30
    a[3, 2, :] = a[3, 2, 0]  # ties at the maximum, counted in m
    b = rng.uniform(-1, 2, size=a.shape) if weighted else None
    if weighted:
        b[::5] = 0
    ours = _stream.lse(dev, tb._lse, lse_merge, a, axes, b, chunk=150)
    ref = lse_block(a, axes, b)
    for got, want in zip(ours, ref):
        assert got.shape == want.shape
    np.testing.assert_array_equal(ours[0], ref[0])  # maxima are exact
    # m and s are sums in another order: a few rounding errors of the largest term
    for got, want in zip(ours[1:], ref[1:]):
        np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-13)


def test_reduction_with_rows_larger_than_a_chunk_declines():
    dev = device(memory=1 << 20)
    a = np.zeros((2, (_stream.MAX_CHUNK_BYTES // 8) + 1))
    assert _stream.lse(dev, tb._lse, lse_merge, a, (0,)) is None


def test_out_of_memory_shrinks_the_chunk_and_retries():
    dev = device(memory=64 << 20, limit=1 << 20)  # a "card" with 1 MiB
    x = np.linspace(-5, 5, 1_000_000)
    out = np.empty_like(x)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _stream.unary(dev, torch.exp, x, out)
    assert dev.pool.peak["device"] <= 1 << 20
    assert_same(out, whole(torch.exp, x))
    for kind in ("pinned", "device"):  # the failed attempts' buffers all came back
        assert pooled_bytes(dev.pool, kind) == dev.pool.held[kind]


def test_out_of_memory_does_not_eat_the_budget():
    # each failure happens with some of a slot's buffers already taken; were they not
    # given back, the pool would count them as held and soon refuse every call
    dev = device(memory=1 << 20, limit=40_000)  # a "card" too small for any chunk
    x = np.linspace(-5, 5, 1_000_000)
    out = np.empty_like(x)
    for _ in range(4):
        with pytest.raises(torch.OutOfMemoryError, match="would pass its 40000"):
            _stream.unary(dev, torch.exp, x, out)
        for kind in ("pinned", "device"):
            assert pooled_bytes(dev.pool, kind) == dev.pool.held[kind]
    dev.limit = None  # the card has room again
    _stream.unary(dev, torch.exp, x, out)
    assert_same(out, whole(torch.exp, x))


def test_results_buffers_come_back_when_one_cannot_be_had():
    # one block, buffers of 4 KiB: the slot's two pinned ones and one result's fit the
    # budget, the second result's does not
    dev = device(memory=3 * _stream.MIN_BUFFER)
    x = np.linspace(-5, 5, 100)

    def kernel(views, o):
        torch.exp(views[0], out=o)
        return [o, o.sum().reshape(1), o.max().reshape(1)]

    with pytest.raises(torch.OutOfMemoryError, match="FASTMATH_CUDA_MEMORY"):
        _stream.run(dev, [x], _stream.blocks(x.shape, 100), kernel, lambda *a: None, x.dtype)
    for kind in ("pinned", "device"):
        assert pooled_bytes(dev.pool, kind) == dev.pool.held[kind]


def test_out_of_memory_at_the_smallest_chunk_falls_back_once(streamed_cuda):
    streamed_cuda._dev.limit = 8192  # less than the smallest chunk's buffers
    tb._warned.clear()
    x = np.linspace(-5, 5, 100_000)
    with fastmath.backend("torch-cuda"):
        with pytest.warns(RuntimeWarning, match="OutOfMemoryError.*CPU computes it") as rec:
            r1 = fastmath.exp(x)
            r2 = fastmath.exp(x)
    assert len([w for w in rec if "torch-cuda could not" in str(w.message)]) == 1
    assert_same(r1, np.exp(x))  # the CPU wrote it all
    assert_same(r2, np.exp(x))


class Faulty:
    """A kernel that fails on its k-th chunk, as a device error would."""

    def __init__(self, k):
        self.k, self.calls = k, 0

    def __call__(self, t, out):
        self.calls += 1
        if self.calls == self.k + 1:
            raise RuntimeError("CUDA error: an illegal memory access was encountered")
        torch.exp(t, out=out)


def test_fault_mid_stream_leaves_output_whole_and_pool_usable():
    dev = device(memory=1 << 20)
    spec = BY_NAME["exp"]
    x = np.linspace(-5, 5, 200_000)  # 13 chunks of 2**14 under a 1 MiB budget
    out = np.full_like(x, np.nan)
    tb._warned.clear()
    kernel = tb._Streamed(dev, Faulty(5), spec)
    chain = (("torch-cuda", kernel), ("numpy", backends.get("numpy").kernel(spec)))
    with pytest.warns(RuntimeWarning, match="illegal memory access"):
        fastmath.exp._run(chain, (x,), out)
    assert_same(out, np.exp(x))  # numpy rewrote every element after the decline
    assert kernel.fn.calls == 6
    # every buffer came back, and the next call runs on them
    for kind in ("pinned", "device"):
        assert pooled_bytes(dev.pool, kind) == dev.pool.held[kind]
    misses = dev.pool.misses
    again = np.empty_like(x)
    _stream.unary(dev, torch.exp, x, again)
    assert dev.pool.misses == misses
    assert_same(again, whole(torch.exp, x))


@pytest.mark.parametrize("spec", UNARY, ids=lambda s: s.name)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_front_end_parity_through_the_pipeline(streamed_cuda, spec, dtype):
    f = getattr(fastmath, spec.name)
    ref = spec.reference()
    x = np.linspace(-30, 30, 300_001).astype(dtype)
    if spec.name.startswith("log"):
        x = np.abs(x)
    bound = spec.ulp[0] if dtype == "float32" else spec.ulp[1]  # the registry's documented bound
    before = x.copy()
    with fastmath.backend("torch-cuda"), np.errstate(all="ignore"):
        got = f(x)
        out = np.empty((2,) + x.shape, dtype)[1]
        same = f(x[::-1], out=out)
        where = f(x, where=x > 0, out=np.zeros_like(x))
    with np.errstate(all="ignore"):
        assert_same(got, ref(x), ulps=bound)
        assert same is out
        assert_same(out, ref(x[::-1]), ulps=bound)
        assert_same(where, ref(x, where=x > 0, out=np.zeros_like(x)), ulps=bound)
    assert_same(x, before)
    assert streamed_cuda._dev.pool.misses > 0  # it did run through the pipeline


def test_floating_point_errors_as_numpy_reports_them(streamed_cuda):
    x = np.array([0.0, 1000.0] + [1.0] * 5000)
    with fastmath.backend("torch-cuda"):
        with np.errstate(over="raise"):
            with pytest.raises(FloatingPointError, match="overflow encountered in exp"):
                fastmath.exp(x)
        with pytest.warns(RuntimeWarning, match="divide by zero encountered in log"):
            fastmath.log(x)
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("error")
            fastmath.exp(x)
        tiny = np.array([-800.0] + [1.0] * 5000)
        with np.errstate(under="raise"):
            with pytest.raises(FloatingPointError, match="underflow encountered in exp"):
                fastmath.exp(tiny)
        fastmath.exp(tiny)  # underflow is ignored by default


def test_logsumexp_through_the_pipeline(streamed_cuda):
    rng = np.random.default_rng(2)
    a = rng.normal(size=(3000, 40)) * 10
    # positive weights: with signed ones the sum cancels and any other summation order
    # differs by far more than rounding, for SciPy against itself as well
    b = rng.uniform(0, 1, size=a.shape)
    with fastmath.backend("torch-cuda"):
        got = [fastmath.logsumexp(a), fastmath.logsumexp(a, axis=0),
               fastmath.logsumexp(a, axis=1, b=b, return_sign=True)[0]]
    want = [scipy.special.logsumexp(a), scipy.special.logsumexp(a, axis=0),
            scipy.special.logsumexp(a, axis=1, b=b, return_sign=True)[0]]
    for g, w in zip(got, want):
        assert_same(g, w, ulps=BY_NAME["logsumexp"].ulp[1])


@pytest.mark.parametrize("name", ["torch-cpu", "torch-cuda"])
def test_logsumexp_over_no_axes_reduces_nothing(streamed_cuda, name):
    a = np.arange(6.0).reshape(2, 3)  # torch would read dim=() as every axis
    with fastmath.backend(name):
        assert_same(fastmath.logsumexp(a, axis=()), scipy.special.logsumexp(a, axis=()))


def test_auto_never_streams_host_data_without_a_measured_row(streamed_cuda):
    spec = BY_NAME["exp"]
    for size in (10, 10**6, 10**9):
        assert "torch-cuda" not in [n for n, _ in _selection.plan(spec, "float64", size)]


def test_cuda_memory_setting():
    assert _config.read({"FASTMATH_CUDA_MEMORY": "2GiB"}).cuda_memory == 2 << 30
    assert _config.read({"FASTMATH_CUDA_MEMORY": "1.5g"}).cuda_memory == 3 << 29
    assert _config.read({}).cuda_memory is None
    for bad in ("lots", "-1G", "10k"):
        with pytest.warns(_config.ConfigWarning, match="FASTMATH_CUDA_MEMORY.*1 MiB"):
            assert _config.read({"FASTMATH_CUDA_MEMORY": bad}).cuda_memory is None
    try:
        _config.reload({"FASTMATH_CUDA_MEMORY": "3M"})
        assert device().budget() == 3 << 20
    finally:
        _config.reload()


# --- arrays that live on a device -----------------------------------------------------

# an int64 tensor that NumPy computes (square, reciprocal) is wrapped back by torch's own
# __array_wrap__, which NumPy 2 warns about; np.square(tensor) warns alike
@pytest.mark.filterwarnings("ignore:__array_wrap__:DeprecationWarning")
@pytest.mark.parametrize("spec", UNARY, ids=lambda s: s.name)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64])
def test_torch_tensors_are_computed_by_torch_where_they_live(spec, dtype):
    """A tensor (on the CPU here; on a GPU the same code) comes back as a tensor on its
    device with NumPy's result dtype, as NumPy itself returns for CPU tensors."""
    t = torch.linspace(0.5, 20, 1001).to(dtype)
    before = t.clone()
    with np.errstate(all="ignore"):
        want = spec.reference()(t.numpy())
    for selected in ("numpy", "auto"):  # the data decides, whatever backend is selected
        with fastmath.backend(selected), np.errstate(all="ignore"):  # as for want
            got = getattr(fastmath, spec.name)(t)
        assert type(got) is torch.Tensor and got.device == t.device
        bound = spec.ulp[0] if want.dtype == np.float32 else spec.ulp[1]
        assert_same(got.numpy(), want, ulps=bound)
    assert torch.equal(t, before)


@pytest.mark.filterwarnings("ignore:__array_wrap__:DeprecationWarning")  # torch's, via numpy
def test_what_is_left_to_numpy():
    t = torch.ones(3, requires_grad=True)
    with pytest.raises(RuntimeError, match="requires grad"):  # numpy's (torch's) own error
        fastmath.exp(t)
    half = torch.ones(3, dtype=torch.int8)  # numpy computes exp(int8) in float16
    assert fastmath.exp(half).dtype == torch.float16
    assert not _native.resident(np.ones(3))  # DLPack on the CPU: NumPy reads it itself
    assert not _native.resident([1.0])
    assert _native.resident(torch.ones(1))
