"""accelerate(elementwise=True / rows=True): the blocked call means what the unblocked one does.

The oracle is always the undecorated function called whole with NumPy: values bit for bit
on the numpy backend, dtypes, shapes, exceptions, warnings and error-state modes.
"""
import asyncio
import platform
import sys
import threading
import warnings

import numpy as np
import pytest
import scipy.special as sc

import fastmath
from fastmath.integrations import _blockwise
from fastmath.dispatch import _config, _parallel

from helpers import CTRL_C_RAISES, assert_same

N = 400_000  # several blocks of _blockwise.BLOCK, above MIN_SIZE
rng = np.random.default_rng(7)
X = rng.standard_normal(N)
Y = rng.standard_normal(N)


def pdf_cdf(x):
    return np.exp(-0.5 * x * x) / np.sqrt(2 * np.pi) * 0.5 * (1 + sc.erf(x / np.sqrt(2)))


def mixed(x, y, *, scale=2.0, shift=0):
    return np.hypot(x, y) * scale + np.log1p(np.abs(x)) - shift


def two(x):
    return np.exp(x), (x > 0.5)


def rows_loglik(X, means, weights):
    d = X[:, None, :] - means[None, :, :]
    lp = -0.5 * np.sum(d * d, axis=2) + np.log(weights)
    total = sc.logsumexp(lp, axis=1)
    return total, lp - total[:, None]


def blocked(fn, **kw):
    return fastmath.accelerate(elementwise=True, **kw)(fn)


def calls_counted(fn):
    count = []

    def counted(*a, **k):
        count.append(1)
        return fn(*a, **k)
    return counted, count


@pytest.mark.parametrize("args", [
    (X,),
    (X.reshape(400, 1000),),
    (np.asfortranarray(X.reshape(400, 1000)),),
    (X[::2],),
    (X.astype(np.float32),),
])
def test_elementwise_bitwise_as_numpy(args):
    before = [a.copy() for a in args]
    with fastmath.backend("numpy"):
        got = blocked(pdf_cdf)(*args)
    assert_same(got, pdf_cdf(*args))
    for a, b in zip(args, before):
        assert_same(a, b)


@pytest.mark.parametrize("x, y", [
    (X, Y),
    (X.reshape(400, 1000), Y[:1000]),          # broadcast along the first axis
    (X.reshape(400, 1000), Y[:400, None]),      # a column against rows
    (X.reshape(2, 200_000), Y.reshape(2, 200_000)),  # rows longer than a block
    (X, 0.25),                                  # a Python scalar
    (X, np.float32(0.25)),
    (list(X[:200_000]), Y[:200_000]),           # a list
    (X.reshape(4, 100, 1000), Y[:1000].reshape(1, 1, 1000)),
])
def test_broadcasting_lists_scalars_keywords(x, y):
    with fastmath.backend("numpy"):
        got = blocked(mixed)(x, y, scale=3.0, shift=np.float32(1))
    assert_same(got, mixed(x, y, scale=3.0, shift=np.float32(1)))


def test_tuple_outputs_keep_each_dtype():
    with fastmath.backend("numpy"):
        e, flag = blocked(two)(X.astype(np.float32))
    ee, ef = two(X.astype(np.float32))
    assert_same(e, ee)
    assert_same(flag, ef)


def test_blocks_really_run_and_small_inputs_do_not():
    fn, count = calls_counted(pdf_cdf)
    f = blocked(fn)
    f(X[:1000])
    assert len(count) == 1
    f(X)
    assert len(count) >= N // _blockwise.BLOCK


def test_rows_mode_with_logsumexp():
    m = rng.standard_normal((8, 2))
    w = np.full(8, 1 / 8)
    pts = rng.standard_normal((300_000, 2))
    f = fastmath.accelerate(rows=True)(rows_loglik)
    with fastmath.backend("numpy"):
        total, resp = f(pts, m, weights=w)
    et, er = rows_loglik(pts, m, w)
    assert_same(total, et)
    assert_same(resp, er)


def test_not_what_was_declared_falls_back_to_the_unblocked_call():
    def total(x):
        return np.sum(x)      # one number, not one per element

    def scaled(x):
        return x[:10] * 2     # not the block's shape
    for fn in (total, scaled):
        assert_same(blocked(fn)(X), fn(X))


def test_the_result_on_other_backends_is_within_the_function_bounds():
    got = blocked(pdf_cdf)(X)
    ref = pdf_cdf(X)
    assert got.dtype == ref.dtype and got.shape == ref.shape
    np.testing.assert_allclose(got, ref, rtol=1e-13, atol=1e-300)


def with_zeros():
    x = np.abs(X)
    x[::50_000] = 0.0  # a zero in every block: each block alone would warn
    return x


def log_and_divide(x):
    return np.log(x) + 1.0 / x


def test_warnings_once_per_call_as_numpy_words_them():
    x = with_zeros()
    with warnings.catch_warnings(record=True) as plain:
        warnings.simplefilter("always")
        log_and_divide(x)
    with warnings.catch_warnings(record=True) as ours:
        warnings.simplefilter("always")
        with fastmath.backend("numpy"):
            blocked(log_and_divide)(x)
    assert [str(w.message) for w in plain] == [str(w.message) for w in ours]
    assert len(plain) == 3  # log and divide by zero, then -inf + inf
    assert [w.category for w in ours] == [RuntimeWarning] * 3


def test_errstate_raise_and_call_and_ignore():
    x = with_zeros()
    f = blocked(log_and_divide)
    with np.errstate(divide="raise"):
        with pytest.raises(FloatingPointError) as want:
            log_and_divide(x)
        with pytest.raises(FloatingPointError) as got:
            f(x)
    assert str(got.value) == str(want.value)
    # the first block errs only in sqrt, a later one in log: NumPy stops at log
    x, y = X + 10, Y.copy()
    y[5] = -1.0
    x[-5] = 0.0
    with np.errstate(all="raise"):
        with pytest.raises(FloatingPointError, match="divide by zero encountered in log"):
            blocked(lambda a, b: np.log(a) + np.sqrt(b))(x, y)
    x = with_zeros()
    seen, expected = [], []
    with np.errstate(all="call", call=lambda *a: seen.append(a)):
        f(x)
    with np.errstate(all="call", call=lambda *a: expected.append(a)):
        log_and_divide(x)
    assert seen == expected

    class Log:
        def __init__(self):
            self.lines = []

        def write(self, line):
            self.lines.append(line)
    ours, numpys = Log(), Log()
    with np.errstate(all="log", call=ours):
        f(x)
    with np.errstate(all="log", call=numpys):
        log_and_divide(x)
    assert ours.lines == numpys.lines and len(ours.lines) == 3
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with np.errstate(all="ignore"):
            f(x)


def test_exceptions_as_the_unblocked_call_raises_them():
    def late(x):
        if (x > 4.5).any():   # true only in the block that holds the big value
            raise ValueError("too big")
        return x * 2

    def bad_types(x):
        return x.astype(np.int64) << 1.5

    def reshaped(x):  # a block's error would name the block's size, not the array's
        return np.exp(x).reshape(-1, 7).ravel()

    x = X.copy()
    x[-3] = 5.0
    for fn, arg in ((late, x), (bad_types, X), (reshaped, X)):
        with pytest.raises(Exception) as want:
            fn(arg)
        with pytest.raises(type(want.value)) as got:
            blocked(fn)(arg)
        assert str(got.value) == str(want.value)
    with pytest.raises(ValueError, match="broadcast"):
        blocked(mixed)(X, Y[:1000])


def centred(x):
    return x - x.mean()


def test_verify_catches_a_function_that_is_not_elementwise():
    with pytest.raises(ValueError, match=r"centred\(\).*not elementwise"):
        blocked(centred, verify=True)(X)
    assert_same(blocked(pdf_cdf, verify=True)(X), blocked(pdf_cdf)(X))
    # without the switch, nothing checks: the blocked result is silently different
    assert not np.array_equal(blocked(centred)(X), centred(X))


def test_verify_from_the_environment(monkeypatch):
    monkeypatch.setenv("FASTMATH_VERIFY", "1")
    _config.reload()
    try:
        with pytest.raises(ValueError, match="centred"):
            blocked(centred)(X)
        with pytest.raises(ValueError, match=r"row by row"):
            fastmath.accelerate(rows=True)(centred)(X.reshape(-1, 4))
    finally:
        monkeypatch.delenv("FASTMATH_VERIFY")
        _config.reload()
    assert _config.get().verify is False


def test_scope_and_no_nested_split_in_every_block():
    seen = []

    def spy(x):
        seen.append((fastmath.get_backend(), _parallel.threads(), threading.current_thread().name))
        return np.exp(x)

    with fastmath.backend("numpy"):
        got = blocked(spy)(X)
    assert_same(got, np.exp(X))
    assert len(seen) >= N // _blockwise.BLOCK
    assert {s[:2] for s in seen} == {("numpy", 1)}
    seen.clear()
    fastmath.accelerate(elementwise=True, backend="numpy")(spy)(X)
    assert {s[:2] for s in seen} == {("numpy", 1)}
    assert fastmath.get_backend() == "auto"


def test_generators_and_coroutines_are_refused():
    def gen(x):
        yield np.exp(x)

    async def coro(x):
        return np.exp(x)
    for fn, what in ((gen, "generator"), (coro, "coroutine")):
        with pytest.raises(TypeError, match=f"{fn.__name__}.*{what}"):
            blocked(fn)
    with pytest.raises(ValueError, match="exclude"):
        fastmath.accelerate(elementwise=True, rows=True)(pdf_cdf)
    asyncio.run(asyncio.sleep(0))


def test_methods_and_nested_blockwise_calls():
    inner = blocked(pdf_cdf)

    class Model:
        @fastmath.accelerate(elementwise=True)
        def f(self, x):
            return inner(x) * 2   # a blockwise function inside a block: runs as is

    with fastmath.backend("numpy"):
        assert_same(Model().f(X), pdf_cdf(X) * 2)


# --- Dask: one blockwise layer, computed on a real (in-process) LocalCluster ---

@pytest.fixture(scope="module")
def client():
    import logging

    distributed = pytest.importorskip("dask.distributed")
    with distributed.LocalCluster(n_workers=1, threads_per_worker=2, processes=False,
                                  dashboard_address=None,
                                  silence_logs=logging.ERROR) as cluster, \
            distributed.Client(cluster) as c:
        yield c


def where_am_i(x):
    """1.0 where the block ran on the numpy backend: the scope must reach the workers."""
    return x * 0 + (1.0 if fastmath.get_backend() == "numpy" else 0.0)


def test_dask_elementwise_is_one_layer_and_numpy_bits(client):
    import dask.array as da

    x = rng.standard_normal((1000, 400))
    dx = da.from_array(x, chunks=(250, 150))
    with fastmath.backend("numpy"):
        r = blocked(mixed)(dx, x[0], scale=3.0)
        flags = blocked(where_am_i)(dx)
        e, big = blocked(two)(dx)
    assert isinstance(r, da.Array) and len(r.dask.layers) == len(dx.dask.layers) + 2
    assert r.chunks == dx.chunks
    got = client.compute([r, flags, e, big], sync=True)
    assert_same(got[0], mixed(x, x[0], scale=3.0))
    assert_same(got[1], np.ones_like(x))
    ee, eb = two(x)
    assert_same(got[2], ee)
    assert_same(got[3], eb)


def test_dask_rows_cut_along_the_first_axis_only(client):
    import dask.array as da

    m = rng.standard_normal((8, 2))
    w = np.full(8, 1 / 8)
    pts = rng.standard_normal((100_000, 2))
    dp = da.from_array(pts, chunks=(30_000, 1))
    with fastmath.backend("numpy"):
        total, resp = fastmath.accelerate(rows=True)(rows_loglik)(dp, m, weights=w)
    et, er = rows_loglik(pts, m, w)
    with fastmath.backend("numpy"):
        t2, _ = fastmath.accelerate(rows=True)(rows_loglik)(pts, m, weights=da.from_array(w))
    assert_same(t2, et)  # no Dask array among the rows: a plain (blocked) call
    assert total.chunks == (dp.chunks[0],) and resp.chunks == (dp.chunks[0], (8,))
    got = client.compute([total, resp], sync=True)
    assert_same(got[0], et)
    assert_same(got[1], er)
    with fastmath.backend("numpy"):
        t3 = fastmath.accelerate(rows=True)(lambda x, y: x[:, 0] * y)(dp, pts[:, 1])
    assert_same(client.compute(t3, sync=True), pts[:, 0] * pts[:, 1])  # numpy rows, cut alike


def test_ctrl_c_during_a_blocked_call_stops_it(tmp_path):
    """SIGINT while blocks run: KeyboardInterrupt reaches the caller, nothing hangs."""
    import signal
    import subprocess
    import time

    script = tmp_path / "interrupted.py"
    script.write_text(
        CTRL_C_RAISES +
        "import numpy as np, fastmath, sys\n"
        "f = fastmath.accelerate(elementwise=True)(lambda x: np.sin(np.exp(-x * x)) + 1)\n"
        "x = np.linspace(-3, 3, 4_000_000)\n"
        "print('ready', flush=True)\n"
        "while True:\n"
        "    f(x)\n")
    p = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "ready"
        time.sleep(1.0)
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=60)
    finally:
        p.kill()
    assert p.returncode != 0 and "KeyboardInterrupt" in err


RECYCLED = """
import resource, numpy as np, fastmath
f = fastmath.backend("numpy")(fastmath.accelerate(elementwise=True)(lambda x: np.exp(-x) + 1))
x = np.ones(10**7)  # an 80 MB output, past glibc's own recycling
f(x)  # the first output maps its pages
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(3):
    f(x)
print((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) // 3)
"""


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's malloc only")
def test_large_outputs_recycle_memory_even_when_no_fastmath_kernel_ran():
    """Blocks on the numpy backend call NumPy directly, so the blocked call's own output is
    the only large allocation fastmath sees: it must not be a fresh, faulting mmap each call."""
    import subprocess

    r = subprocess.run([sys.executable, "-c", RECYCLED], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    # 80 MB freshly mapped: 19532 faults in 4 KiB pages, 600 or so in huge pages; the
    # pool thread's own heap may still fault a few of its blocks' pages
    assert int(r.stdout) < 100


@pytest.mark.parametrize("mode, arg", [("elementwise", X[:150_000]),
                                       ("rows", X[:140_000].reshape(70_000, 2))])
def test_a_call_of_few_blocks_is_cut_for_every_thread(mode, arg):
    """Just above the unblocked size, blocks of the usual size would be two or three, the
    first of which runs alone: the call is cut finer so that every thread has blocks."""
    fn, count = calls_counted(np.exp)
    f = fastmath.backend("numpy")(fastmath.accelerate(fn, **{mode: True}))
    assert_same(f(arg), np.exp(arg))
    assert len(count) >= min(1 + 2 * _parallel.threads(), arg.size // _blockwise.SMALLEST)
