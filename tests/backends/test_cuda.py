"""torch-cuda on a real GPU. Every test carries the ``cuda`` marker and skips without one.

Run with ``python -m pytest -m cuda -q tests/backends/test_cuda.py``. Speed is measured by
bench/gpu_stream.py, whose pipeline share of the pinned copy rate shows a pipeline that
serialises its streams (the timed floor that was here failed or passed with the load).
"""
import numpy as np
import pytest
import scipy.special

torch = pytest.importorskip("torch")

import fastmath  # noqa: E402
from fastmath._registry import BY_NAME, ROWS  # noqa: E402

from helpers import assert_same  # noqa: E402

pytestmark = [pytest.mark.cuda,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")]
UNARY = [s for s in ROWS if s.kind == "unary"]


def backend():
    from fastmath import backends

    return backends.get("torch-cuda")


def test_available_and_selectable():
    assert "torch-cuda" in fastmath.available_backends()
    fastmath.set_backend("torch-cuda")
    assert fastmath.get_backend() == "torch-cuda"


@pytest.mark.parametrize("spec", UNARY, ids=lambda s: s.name)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("n", [1, 1000, 5_000_003])
def test_parity_with_numpy_on_the_gpu(spec, dtype, n):
    f, ref = getattr(fastmath, spec.name), spec.reference()
    x = np.linspace(-30, 30, n).astype(dtype)
    if spec.name.startswith("log"):
        x = np.abs(x)
    bound = spec.bound(dtype, "torch-cuda")  # the registry's bound for CUDA's kernels
    before = x.copy()
    with fastmath.backend("torch-cuda"), np.errstate(all="ignore"):
        got = f(x)
        strided = f(x[::-3])
        out = np.empty_like(x)
        same = f(x, out=out)
    with np.errstate(all="ignore"):
        assert_same(got, ref(x), ulps=bound)
        assert_same(strided, ref(x[::-3]), ulps=bound)
        assert same is out
    assert_same(x, before)


def test_logsumexp_on_the_gpu():
    a = np.random.default_rng(0).normal(size=(20_000, 64)) * 10
    with fastmath.backend("torch-cuda"):
        for axis in (None, 0, 1):
            assert_same(fastmath.logsumexp(a, axis=axis),
                        scipy.special.logsumexp(a, axis=axis),
                        ulps=BY_NAME["logsumexp"].bound("float64", "torch-cuda"))


# torch 2.11's profiler warns that it clears its events after each cycle (one cycle here)
@pytest.mark.filterwarnings("ignore:Warning. Profiler clears events:UserWarning")
def test_device_resident_round_trip_makes_no_transfer():
    t = torch.linspace(-5, 5, 1_000_000, device="cuda", dtype=torch.float32)
    pool = backend().stream_device.pool
    misses = pool.misses
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        r = fastmath.exp(t)
        torch.cuda.synchronize()
    assert type(r) is torch.Tensor and r.device == t.device and r.dtype == torch.float32
    names = [e.name for e in prof.events()]
    assert not [n for n in names if "Memcpy" in n], names
    assert pool.misses == misses
    assert_same(r.cpu().numpy(), np.exp(t.cpu().numpy()), ulps=BY_NAME["exp"].ulp[0])


def test_cupy_round_trip():
    cupy = pytest.importorskip("cupy")
    a = cupy.linspace(0.5, 5, 1000)
    r = fastmath.log(a)
    assert type(r) is type(a)
    assert_same(cupy.asnumpy(r), np.log(cupy.asnumpy(a)), ulps=BY_NAME["log"].ulp[1])


def test_twice_the_free_memory_runs():
    # Host memory bounds the array (input and output live there), so the card is first
    # filled with ballast down to 4 GiB free; the array is then twice what is left.
    free, _ = torch.cuda.mem_get_info()
    ballast = torch.empty(max(0, free - (4 << 30)), dtype=torch.uint8, device="cuda")
    free, _ = torch.cuda.mem_get_info()
    n = 2 * free // 4
    x = np.empty(n, dtype=np.float32)
    x[:] = np.float32(0.5)
    x[::1000] = np.linspace(-10, 10, x[::1000].size, dtype=np.float32)
    torch.cuda.reset_peak_memory_stats()
    with fastmath.backend("torch-cuda"):
        out = fastmath.exp(x)
    del ballast
    sample = slice(None, None, 1000)
    assert_same(out[sample], np.exp(x[sample]), ulps=BY_NAME["exp"].ulp[0])
    for part in (slice(1, 1000), slice(n // 2, n // 2 + 1000), slice(n - 1000, n)):
        assert_same(out[part], np.exp(x[part]), ulps=BY_NAME["exp"].ulp[0])
