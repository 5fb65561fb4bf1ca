"""fastmath on Dask arrays, computed by a real LocalCluster: two worker processes on loopback.

Elementwise results must equal NumPy's bit for bit on the numpy backend (each chunk runs
NumPy's own loop); logsumexp is held to test_logsumexp's ULP bound, which covers any
summation order and so also Dask's chunked tree (see the reasoning there).
"""
import logging.handlers
import subprocess
import sys

import numpy as np
import pytest
import scipy.special

dask = pytest.importorskip("dask")
da = pytest.importorskip("dask.array")
distributed = pytest.importorskip("distributed")

import fastmath  # noqa: E402
import fastmath.frontends._dask  # noqa: E402
from fastmath._registry import ROWS  # noqa: E402

from helpers import assert_same, lse_close as close  # noqa: E402

UNARY = [row.name for row in ROWS if row.kind == "unary"]
# uneven chunks, a chunk of one element, and one chunk that is the whole axis
CHUNKS = ((5, 1, 7), (3, 9, 5), (6,))
SHAPE = tuple(sum(c) for c in CHUNKS)


@pytest.fixture(scope="module")
def client():
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  host="127.0.0.1", dashboard_address=None,
                                  silence_logs=logging.ERROR) as cluster, \
            distributed.Client(cluster) as c:
        c.wait_for_workers(2)
        yield c


def compute(client, *arrays):
    return dask.compute(*arrays, scheduler=client)


def sample(dtype, rng):
    if np.dtype(dtype).kind == "i":
        return rng.integers(-6, 7, SHAPE).astype(dtype)
    x = rng.uniform(-6, 6, SHAPE)
    x.flat[:6] = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-300]
    return x.astype(dtype)


@pytest.mark.parametrize("dtype", ["float64", "float32", "int16"])
def test_elementwise_equals_numpy(client, dtype):
    rng = np.random.default_rng(0)
    x = sample(dtype, rng)
    lazy, expected = [], []
    with fastmath.backend("numpy"), np.errstate(all="ignore"):
        for name in UNARY:
            f = getattr(fastmath, name)
            y = f(da.from_array(x, chunks=CHUNKS))
            e = f.reference(x)
            assert isinstance(y, da.Array) and y.name.startswith(f"fastmath-{name}")
            assert (y.dtype, y.shape) == (e.dtype, e.shape)
            assert type(y._meta) is np.ndarray and y._meta.dtype == e.dtype
            lazy.append(y)
            expected.append(e)
    for name, got, e in zip(UNARY, compute(client, *lazy), expected):
        assert_same(got, e), name


def test_elementwise_dtype_scalar_and_options(client):
    x = np.linspace(-3, 3, 11)
    d = da.from_array(x, chunks=4)
    with fastmath.backend("numpy"):
        y32 = fastmath.exp(d, dtype=np.float32)
        y0 = fastmath.exp(da.from_array(np.float64(1.5)))
        # where= is NumPy's to handle: Dask's own ufunc wrapper, still lazy
        yw = fastmath.exp(d, where=x > 0, out=da.zeros_like(d))
    assert y32.dtype == np.float32 and isinstance(yw, da.Array)
    got32, got0, gotw = compute(client, y32, y0, yw)
    assert_same(got32, np.exp(x, dtype=np.float32))
    assert_same(got0, np.exp(np.float64(1.5)))
    assert_same(gotw, np.where(x > 0, np.exp(x), 0.0))


AXES = [None, 0, 1, -1, 2, (0, 1), (2, 0), (0, 1, 2)]


@pytest.mark.parametrize("dtype", ["float64", "float32", "int64"])
def test_logsumexp_every_axis_form(client, dtype):
    rng = np.random.default_rng(1)
    x = (rng.standard_normal(SHAPE) * 30).astype(dtype)
    d = da.from_array(x, chunks=CHUNKS)
    cases = [(axis, keepdims) for axis in AXES for keepdims in (False, True)]
    lazy = []
    for axis, keepdims in cases:
        y = fastmath.logsumexp(d, axis=axis, keepdims=keepdims)
        e = scipy.special.logsumexp(x, axis=axis, keepdims=keepdims)
        assert (y.dtype, y.shape) == (e.dtype, np.shape(e))
        assert type(y._meta) is np.ndarray
        lazy.append(y)
    for (axis, keepdims), got in zip(cases, compute(client, *lazy)):
        e = scipy.special.logsumexp(x, axis=axis, keepdims=keepdims)
        assert type(got) is type(e), (axis, keepdims)
        close(got, e, e.dtype)


def test_logsumexp_weights_and_sign(client):
    rng = np.random.default_rng(2)
    x = rng.standard_normal(SHAPE[:2])
    d = da.from_array(x, chunks=CHUNKS[:2])
    weights = [rng.uniform(0.1, 2.0, SHAPE[:2]), np.abs(rng.standard_normal(SHAPE[1])), 2.0,
               np.where(rng.random(SHAPE[:2]) < 0.5, 0.0, 1.0), -np.ones((SHAPE[0], 1)),
               rng.uniform(0.1, 2.0, (2,) + SHAPE[:2]),  # broadcasts x to 3-d
               da.from_array(rng.uniform(-1.0, 2.0, SHAPE[:2]), chunks=(7, 10))]
    cases, lazy = [], []
    for b in weights:
        for axis in (None, 0, 1):
            lazy.extend(fastmath.logsumexp(d, axis=axis, b=b, return_sign=True))
            cases.append((np.asarray(b), axis))
    got = compute(client, *lazy)
    for i, (b, axis) in enumerate(cases):
        e, sign = scipy.special.logsumexp(x, axis=axis, b=b, return_sign=True)
        close(got[2 * i], e, e.dtype)
        assert_same(got[2 * i + 1], sign)


def test_logsumexp_infinities_and_nans_across_chunks(client):
    inf, nan = np.inf, np.nan
    rows = np.array([[-inf, -inf, -inf, 0.0], [inf, 1.0, 2.0, 0.0], [inf, -inf, 0.0, 1.0],
                     [nan, 1.0, 2.0, 3.0], [inf, inf, 1.0, 0.0], [0.0, -inf, -inf, 1.0],
                     [-inf, 5.0, 5.0, -inf], [1e308, 1e308, 0.0, 0.0], [0.0, -40.0, -80.0, 0.0],
                     [1.0, 1.0, 2.0, 2.0]])
    d = da.from_array(rows, chunks=((3, 1, 6), (1, 2, 1)))
    cases = [dict(axis=axis, return_sign=sign) for axis in (None, 0, 1) for sign in (False, True)]
    cases += [dict(axis=1, b=np.array([1.0, 0.0, -1.0, 1.0]), return_sign=True),
              dict(axis=1, b=np.array([inf, 0.0, 1.0, 1.0])),
              dict(axis=1, b=np.array([1.0, -1.0, 1.0, -1.0]), return_sign=True)]
    lazy = [fastmath.logsumexp(d, **kw) for kw in cases]
    with np.errstate(all="ignore"):
        for kw, got in zip(cases, compute(client, *lazy)):
            e = scipy.special.logsumexp(rows, **kw)
            if kw.get("return_sign"):
                close(got[0], e[0], np.float64)
                np.testing.assert_array_equal(got[1], e[1])
            else:
                close(got, e, np.float64)


def _plans():
    import fastmath.dispatch._selection

    return sorted(fastmath.dispatch._selection._plans)


def test_backend_travels_to_the_workers(client):
    x = da.from_array(np.linspace(0.5, 4, 5000), chunks=1000)
    for name in [b for b in fastmath.available_backends() if b != "auto"]:
        client.run(lambda: __import__("fastmath.dispatch._selection").dispatch._selection._plans.clear())
        with fastmath.backend(name):
            y = fastmath.log(x)
            z = fastmath.logsumexp(x.reshape(50, 100), axis=1)
        assert fastmath.get_backend() == "auto"  # the caller's scope has ended...
        got_y, got_z = compute(client, y, z)  # ...but its choice went with the tasks
        used = set().union(*({k for k in keys} for keys in client.run(_plans).values()))
        assert (name, "log", "float64") in used and (name, "logsumexp", "float64") in used
        assert not {k for k in used if k[0] != name}, used
        np.testing.assert_allclose(got_y, np.log(x.compute()), rtol=1e-15)


def test_unavailable_backend_on_a_worker_falls_back_and_logs_once(client):
    if "torch-cuda" in fastmath.available_backends():
        pytest.skip("the workers have a GPU: torch-cuda is available to them")
    worker = sorted(client.scheduler_info()["workers"])[0]

    def listen():
        handler = logging.handlers.BufferingHandler(1000)
        handler.set_name("fastmath-test")
        logging.getLogger("fastmath").addHandler(handler)

    def heard():
        log = logging.getLogger("fastmath")
        handler = next(h for h in log.handlers if h.get_name() == "fastmath-test")
        log.removeHandler(handler)
        return [r.getMessage() for r in handler.buffer if r.levelno == logging.WARNING]

    client.run(listen, workers=[worker])
    x = np.linspace(-2, 2, 1001)
    futures = [client.submit(fastmath.frontends._dask._ufunc_chunk, x, fastmath.exp, "torch-cuda", {},
                             workers=[worker], pure=False) for _ in range(3)]
    for got in client.gather(futures):
        assert_same(got, np.exp(x))
    messages = client.run(heard, workers=[worker])[worker]
    assert len(messages) == 1 and "'torch-cuda'" in messages[0], messages


def test_dask_stays_out_until_a_dask_array_arrives():
    code = ("import sys, numpy, fastmath;"
            "fastmath.exp(numpy.ones(10)); fastmath.exp(numpy.ones(10**6)); fastmath.exp([1.0]);"
            "fastmath.logsumexp(numpy.ones(10)); fastmath.exp(numpy.ma.ones(3));"
            "print(sorted(m for m in sys.modules if m == 'dask' or m.startswith('dask.')))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"


def test_gmm_example_agrees_with_plain_dask(client):
    import importlib.util
    import pathlib

    path = pathlib.Path(__file__).parents[2] / "examples" / "dask_gmm.py"
    spec = importlib.util.spec_from_file_location("dask_gmm", path)
    gmm = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gmm)
    x = da.from_array(np.random.default_rng(3).standard_normal((3000, 2)) * 3,
                      chunks=((1000, 1500, 500), 2))
    params = gmm.mixture(5, 2)
    (ll, counts), (ll_ref, counts_ref) = compute(
        client, gmm.e_step(x, params, **gmm.VARIANTS["fastmath"]),
        gmm.e_step(x, params, **gmm.VARIANTS["dask+numpy"]))
    # each point's logsumexp is within test_logsumexp's bound of SciPy's; the sums over
    # points add relative rounding of about n * eps on top
    np.testing.assert_allclose(ll, ll_ref, rtol=3000 * np.finfo(float).eps)
    np.testing.assert_allclose(counts, counts_ref, rtol=3000 * np.finfo(float).eps)
    assert np.isclose(counts.sum(), 3000)


def _worker_budget():
    import os

    from fastmath.dispatch import _runtime

    return _runtime.threads(), os.environ.get("OMP_NUM_THREADS")


def test_a_worker_process_follows_its_thread_budget(client):
    """A Dask nanny starts its worker processes with OMP_NUM_THREADS=1 (its pre-spawn
    environment, so that a worker's threads are Dask's): fastmath's runtime follows it
    there, as OpenMP and BLAS do, and a worker's calls stay in its own thread."""
    pytest.importorskip("fastmath.dispatch._runtime")
    omp = dask.config.get("distributed.nanny.pre-spawn-environ", {}).get("OMP_NUM_THREADS")
    if omp is None:
        pytest.skip("this Dask's nanny leaves OMP_NUM_THREADS alone")
    budgets = list(client.run(_worker_budget).values())
    assert budgets == [(int(omp), str(omp))] * len(budgets) and budgets
