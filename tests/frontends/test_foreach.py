"""fastmath.foreach: each array's result is fastmath.<name> of it (NumPy's bits on the numpy
backend, within the row's ULP bound on torch), with NumPy's dtypes, errors and warnings."""
import json
import warnings

import numpy as np
import pytest

import fastmath
from fastmath import backends, foreach
from fastmath._registry import ROWS

from helpers import BACKENDS, BITWISE, FakeClock, assert_same

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


# ---- the compiled path: NumPy's own loop over the list, no Python call per array --------

NUMPY_UNARY = [s for s in UNARY if s.kind == "unary" and s.ref.startswith("numpy:")]
try:
    from fastmath.dispatch import _lists
except ImportError:
    _lists = None
compiled = pytest.mark.skipif(_lists is None, reason="fastmath.dispatch._lists is not built")


def numpy_loops(spec):
    """The loops the numpy backend's list kernel runs for ``spec``."""
    return backends.get("numpy").foreach(spec).loops


def fresh_list_kernel(spec, monkeypatch):
    """A new numpy list kernel for ``spec`` (loops looked up now, pacing records of its
    own), which foreach runs from now on."""
    b = backends.get("numpy")
    monkeypatch.setattr(b, "_list_kernels", {})
    return b.foreach(spec)


def same_bits(got, want):
    """Same type, dtype, shape and bytes (NaN payloads and signs of zero included)."""
    assert type(got) is type(want), (type(got), type(want))
    assert got.dtype == want.dtype and got.shape == want.shape
    assert np.ascontiguousarray(got).tobytes() == np.ascontiguousarray(want).tobytes()


def floats(seed, count, dtypes=("float64", "float32"), lo=-3.0, hi=3.0):
    rng = np.random.default_rng(seed)
    return [rng.uniform(lo, hi, int(rng.integers(0, 3000))).astype(dtypes[k % len(dtypes)])
            for k in range(count)]


@compiled
@pytest.mark.parametrize("backend", ["numpy", "auto"])
@pytest.mark.parametrize("spec", NUMPY_UNARY, ids=lambda s: s.name)
def test_compiled_path_gives_numpys_bits(spec, backend):
    """Every NumPy unary row over float16/32/64 and complex lists, with NaN, inf and
    values outside the domain: each result is NumPy's call's, bit for bit, a fresh
    C-contiguous array of its own; the inputs are untouched."""
    complex_too = "D->D" in spec.reference().types
    kinds = ("float64", "float32", "float16") + (("complex128",) if complex_too else ())
    xs = floats(4, 300, kinds)
    xs[1][:4] = [np.nan, np.inf, -np.inf, -0.0]
    before = [x.copy() for x in xs]
    want = [reference(spec, x) for x in xs]
    with fastmath.backend(backend), np.errstate(all="ignore"):
        got = getattr(foreach, spec.name)(xs)
    for g, w, x, b in zip(got, want, xs, before):
        same_bits(g, w)
        assert g.flags.owndata and g.flags.c_contiguous and g.flags.writeable and g.base is None
        same_bits(x, b)


@compiled
@pytest.mark.parametrize("name", ["exp", "log1p", "sin"])
def test_compiled_path_in_place_and_into_outputs(name):
    ref = getattr(np, name)
    xs = floats(5, 500, lo=-0.5, hi=2.0)
    want = [ref(x) for x in xs]
    outs = [np.full_like(x, 7.0) for x in xs]
    with fastmath.backend("numpy"):
        got = getattr(foreach, name)(xs, out=outs)
        assert all(g is o for g, o in zip(got, outs))
        ys = [x.copy() for x in xs]
        got = getattr(foreach, name)(ys, out=ys)
    assert all(g is y for g, y in zip(got, ys))
    for o, y, w in zip(outs, ys, want):
        same_bits(o, w)
        same_bits(y, w)


@compiled
def test_compiled_entry_takes_only_what_numpys_loop_runs_as_it_is():
    """The C entry itself: which arrays it computes and which it leaves to Python."""
    spec = next(s for s in NUMPY_UNARY if s.name == "exp")
    loops = numpy_loops(spec)
    base = np.linspace(0, 1, 64)
    unaligned = np.frombuffer(b"\0" + base.tobytes(), np.float64, 60, offset=1)
    xs = [base[:10], base[::2], np.asfortranarray(base.reshape(8, 8)), base.astype(">f8"),
          base.astype(np.int64), np.float64(1.0), np.array(0.5), unaligned,
          base.reshape(8, 8), np.ma.masked_array(base), 1.0, np.empty(0), base[:9].copy()]
    results = [None] * len(xs)
    flags, left, allocated, n = _lists.foreach(loops, xs, None, results, 1 << 30,
                                               1 << 30, 64, 1)
    assert left == [1, 2, 3, 4, 5, 6, 7, 9, 10]
    assert flags is None and allocated == (10 + 64 + 9) * 8 and n == 10 + 64 + 9
    for i in (0, 8, 11, 12):
        same_bits(results[i], np.exp(xs[i]))
    # arrays of `limit` elements or more are left (fastmath.<name> splits them itself)
    results = [None] * 3
    _, left, _, _ = _lists.foreach(loops, [base[:9], base[:10], base], None,
                                   results, 10, 1, 64, 2)
    assert left == [1, 2] and results[1:] == [None, None]
    same_bits(results[0], np.exp(base[:9]))


def numpys_flags(ufunc, x):
    """The FP flags NumPy's own call on ``x`` raises (its UFUNC_FPE_* bits)."""
    seen = [0]
    with np.errstate(all="call", call=lambda kind, flag: seen.append(flag)):
        ufunc(x)
    return max(seen)


@compiled
@pytest.mark.parametrize("piece", [1, 700, 1 << 30])
def test_compiled_entry_on_the_pool_while_outputs_are_made(piece):
    """The C entry on two threads from the first element: the pool's thread starts on
    the first arrays while the caller still makes the outputs of the later ones. Each
    result and each array's flags are NumPy's call's; the arrays left to Python are
    left, in list order."""
    spec = next(s for s in NUMPY_UNARY if s.name == "exp")
    loops = numpy_loops(spec)
    rng = np.random.default_rng(3)
    # a third of the arrays overflow, some underflow, the others raise nothing
    xs = [rng.uniform(-800, 800, int(rng.integers(0, 300))) / rng.choice([1, 1, 1000])
          for _ in range(600)]
    xs[5], xs[77], xs[301] = xs[5][::2], xs[77].astype(np.int64), 1.0
    for _ in range(5):
        results = [None] * len(xs)
        flags, left, _, n = _lists.foreach(loops, xs, None, results, 1 << 30, 0,
                                           piece, 2)
        assert left == [5, 77, 301]
        assert n == sum(x.size for i, x in enumerate(xs) if i not in left)
        for i, (g, x) in enumerate(zip(results, xs)):
            if i not in left:
                with np.errstate(all="ignore"):
                    same_bits(g, np.exp(x))
                assert flags[i] == numpys_flags(np.exp, x), i


@compiled
def test_compiled_entry_on_the_pool_with_outputs_it_cannot_all_take():
    """out= on two threads: the pool is woken before the outputs are checked; where the
    second output is one NumPy's loop would not run into as it is, everything from it
    on is left to Python and the first array alone is computed (in this thread)."""
    spec = next(s for s in NUMPY_UNARY if s.name == "exp")
    loops = numpy_loops(spec)
    xs = [np.linspace(0, 1, 1000) + k for k in range(50)]
    for bad in (np.empty(1000, np.float32), np.empty(999), np.empty(2000)[::2]):
        outs = [np.full(1000, 7.0) for _ in xs]
        outs[1] = bad
        results = [None] * len(xs)
        flags, left, allocated, n = _lists.foreach(loops, xs, outs, results,
                                                   1 << 30, 0, 64, 2)
        assert left == list(range(1, 50)) and (flags, allocated, n) == (None, 0, 1000)
        assert results[0] is outs[0] and results[1:] == [None] * 49
        same_bits(outs[0], np.exp(xs[0]))
        assert all((o == 7.0).all() for o in outs[2:])
    # the second output is the first input: all taken, and run in list order
    want = [x.copy() for x in xs]
    outs = [np.empty(1000) for _ in xs]
    outs[1] = want[0]
    for x, o in zip(want, outs):
        np.exp(x, out=o)
    want_outs = [o.copy() for o in outs]
    outs = [np.empty(1000) for _ in xs]
    outs[1] = xs[0]
    flags, left, _, n = _lists.foreach(loops, xs, outs, [None] * 50, 1 << 30, 0, 64, 2)
    assert (flags, left, n) == (None, [], 50_000)
    for o, w in zip(outs, want_outs):
        same_bits(o, w)


@compiled
def test_outputs_that_overlap_other_arrays_run_as_a_loop_would(monkeypatch):
    """out= views into inputs further down the list, over the pool's threads: each array
    reads what the earlier calls of a loop wrote; a partial overlap within one array is
    buffered as NumPy does."""
    monkeypatch.setattr(fastmath.dispatch._parallel, "threads", lambda: 2)

    def lists():
        buf = np.linspace(-1, 1, 300_000)
        xs = [buf[k * 1000:k * 1000 + 1500] for k in range(290)]
        outs = [buf[k * 1000 + 1000:k * 1000 + 2500] for k in range(290)]
        outs[7] = buf[7100:8600]  # partly over its own input
        rot = [np.linspace(0, 1, 3000) + k for k in range(100)]
        return buf, xs, outs, rot

    buf, xs, outs, rot = lists()
    for x, o in zip(xs, outs):
        np.sin(x, out=o)
    rot_want = [r.copy() for r in rot]
    for x, o in zip(rot_want, rot_want[1:] + rot_want[:1]):
        np.sin(x, out=o)
    for _ in range(3):
        got_buf, gx, go, grot = lists()
        with fastmath.backend("numpy"):
            foreach.sin(gx, out=go)
            foreach.sin(grot, out=grot[1:] + grot[:1])
        same_bits(got_buf, buf)
        for g, w in zip(grot, rot_want):
            same_bits(g, w)
    # an array left to Python (strided) writes what a later one, the compiled path's, reads
    buf = np.linspace(0, 1, 2000)
    later = np.empty(100)
    with fastmath.backend("numpy"):
        foreach.sin([buf[:200:2], buf[1000:1100]], out=[buf[1000:1100], later])
    want = np.linspace(0, 1, 2000)
    np.sin(want[:200:2], out=want[1000:1100])
    same_bits(buf, want)
    same_bits(later, np.sin(want[1000:1100]))
    twice = np.linspace(0, 1, 5000)  # one array twice in the list: two calls' worth
    with fastmath.backend("numpy"):
        foreach.sin([twice, twice] * 20, out=[twice, twice] * 20)
    want = np.linspace(0, 1, 5000)
    for _ in range(40):
        np.sin(want, out=want)
    same_bits(twice, want)


@compiled
@pytest.mark.parametrize("threads", [1, 2])
def test_flags_per_array_in_list_order_with_arrays_left_to_python(threads, monkeypatch):
    """A list where the compiled path takes some arrays and Python the others (casts,
    strides, scalars): the warnings are a loop's, in the loop's order."""
    monkeypatch.setattr(fastmath.dispatch._parallel, "threads", lambda: threads)
    big = np.ones(40000)
    xs = [np.zeros(3), np.zeros(5, np.int64), -np.ones(4), np.ones(7), -np.ones(8)[::2],
          0.0, np.ones(5), big, np.zeros((2, 3)), np.array(-1.0), np.zeros(3, np.float32)]
    xs = xs * 5

    def run(f):
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            out = f()
        return out, [(x.category, str(x.message)) for x in w]

    want, want_w = run(lambda: [np.log(x) for x in xs])
    for backend in ("numpy", "auto"):
        with fastmath.backend(backend):
            got, got_w = run(lambda: foreach.log(xs))
        assert got_w == want_w
        for g, w in zip(got, want):
            assert_same(g, w)


def test_empty_lists():
    assert foreach.exp([]) == []
    assert foreach.log1p([], out=[]) == []
    assert foreach.sin(iter([])) == []


@compiled
def test_without_the_extension_results_are_the_same(monkeypatch):
    xs = floats(6, 200)
    want = foreach.exp(xs)
    monkeypatch.setattr(fastmath.backends.numpy, "_lists", None)
    assert fresh_list_kernel(foreach.exp._spec, monkeypatch).loops == ()
    for g, w in zip(foreach.exp(xs), want):
        same_bits(g, w)


@compiled
def test_under_the_loop_patch_results_are_numpys(monkeypatch):
    xs = floats(7, 200)
    want = [np.exp(x) for x in xs]
    with fastmath.patch(mode="loops"):
        fresh_list_kernel(foreach.exp._spec, monkeypatch)  # its loops looked up while patched
        for g, w in zip(foreach.exp(xs), want):
            same_bits(g, w)
    for g, w in zip(foreach.exp(xs), want):
        same_bits(g, w)


# ---- the torch list kernel runs through the chain runner: its failure is NumPy's work ----

@pytest.mark.parametrize("in_place", [False, True])
def test_list_kernel_that_raises_hands_the_list_to_numpy(in_place, monkeypatch):
    pytest.importorskip("torch")
    from fastmath import backends
    from fastmath.dispatch._selection import _warned

    b = backends.get("torch-cpu")
    if b.why_unavailable() is not None:
        pytest.skip(b.why_unavailable())
    real = b.foreach

    def failing(spec):
        kernel = real(spec)

        def fn(tensors):
            tensors[0].fill_(-5.0)  # part written, then a failure
            raise RuntimeError("device lost")

        kernel.fn = fn
        return kernel

    monkeypatch.setattr(b, "foreach", failing)
    _warned.clear()
    xs = [np.linspace(-1, 1, 100) * k for k in range(1, 6)] + [np.zeros(3)]
    before = [x.copy() for x in xs]
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        want = [np.log1p(x) for x in before]
    loop_warnings = [str(x.message) for x in w]
    with fastmath.backend("torch-cpu"), warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        got = foreach.log1p(xs, out=xs if in_place else None)
    text = [str(x.message) for x in w]
    assert any("backend 'torch-cpu' failed on log1p" in t and "device lost" in t
               and "numpy computed it instead" in t for t in text), text
    # NumPy's own warnings for the arrays that raise flags, as a loop gives them
    assert [t for t in text if "encountered" in t] == loop_warnings
    assert len(loop_warnings) >= 5
    for g, e in zip(got, want):
        same_bits(g, e)
    if not in_place:
        for x, bfr in zip(xs, before):
            same_bits(x, bfr)


# ---- things that could hang, each in a child process with a time limit ----------------

def _child(code):
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout


@compiled
def test_threads_calling_at_once_and_a_forked_child():
    out = _child("""
import os, threading, numpy as np, fastmath
from fastmath import foreach
rng = np.random.default_rng(0)
xs = [rng.uniform(0, 1, 1000) for _ in range(2000)]
want = [np.exp(x).tobytes() for x in xs]
def check():
    for _ in range(20):
        assert [g.tobytes() for g in foreach.exp(xs)] == want
ts = [threading.Thread(target=check) for _ in range(4)]
for t in ts: t.start()
for t in ts: t.join()
pid = os.fork()
if pid == 0:
    check()
    os._exit(0)
_, status = os.waitpid(pid, 0)
assert status == 0, status
check()
print("ok")
""")
    assert out.strip() == "ok"


@compiled
@pytest.mark.parametrize("seed", range(12))
def test_random_lists_match_a_loop_of_numpy_calls(seed, monkeypatch):
    """Lists of random dtypes, shapes, layouts and memory sharing, with new outputs, in
    place and into other arrays: results, outputs and warnings are a loop's."""
    rng = np.random.default_rng(seed)
    monkeypatch.setattr(fastmath.dispatch._parallel, "threads", lambda: int(rng.integers(1, 4)))
    name = ["exp", "log", "sqrt", "log1p", "sin", "arctanh"][seed % 6]
    ref = getattr(np, name)

    def make():
        r = np.random.default_rng(seed + 100)
        pool = r.uniform(-2, 3, 400_000)
        xs = []
        for _ in range(int(r.integers(1, 400))):
            kind = r.integers(0, 8)
            n = int(r.integers(0, 3000))
            start = int(r.integers(0, pool.size - 2 * n - 1))
            if kind == 0:
                xs.append(pool[start:start + 2 * n:2])  # strided view
            elif kind == 1:
                xs.append(pool[start:start + n].astype(np.float32))
            elif kind == 2:
                xs.append(pool[start:start + n])  # a view: may overlap others
            elif kind == 3:
                xs.append(pool[start:start + n].astype(np.int16))
            else:
                xs.append(pool[start:start + n].copy())
        return pool, xs

    def outs_for(xs, how):
        if how == "new":
            return None
        if how == "in place":
            return [x if x.dtype.kind == "f" else np.empty(x.shape) for x in xs]
        return [np.empty_like(x, dtype=np.result_type(x.dtype, np.float16))
                if x.dtype.kind == "f" else np.empty(x.shape) for x in xs]

    for how in ("new", "in place", "other"):
        pool, xs = make()
        outs = outs_for(xs, how)
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            want = [ref(x) if outs is None else ref(x, out=o) for x, o in
                    zip(xs, outs or xs)]
        want_w = [str(m.message) for m in w]
        want = [x.copy() for x in want]
        want_pool = pool.copy()
        pool, xs = make()
        outs = outs_for(xs, how)
        with fastmath.backend("numpy"), warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            got = getattr(foreach, name)(xs, out=outs)
        assert [str(m.message) for m in w] == want_w
        same_bits(pool, want_pool)
        for g, e in zip(got, want):
            same_bits(g, e)


@pytest.mark.parametrize("mode", ["raise", "call"])
def test_acting_modes_with_new_outputs_act_as_a_loop_would(mode):
    """errstate raise/call with new outputs (the compiled path runs): the same exception
    from the same array, and the callback called with the same arguments in the same
    order, as a loop of NumPy calls; a later array that would fail otherwise is never
    reached."""
    xs = [np.ones(5), np.ones(3, np.int64), np.zeros(4), -np.ones(7), np.zeros(2, np.int8),
          np.zeros(6), np.array(["a"])]
    want = acting(mode, lambda: [np.log(x) for x in xs])
    with fastmath.backend("numpy"):
        got = acting(mode, lambda: foreach.log(xs))
    assert got == want
    assert want[1] is not None  # the loop raised (FloatingPointError, or the string's)


def acting(mode, f):
    """Run ``f`` with divide and invalid set to ``mode``: the callback's calls, and the
    exception raised (type and message) or None."""
    calls = []
    kw = {"divide": mode, "invalid": mode}
    if mode == "call":
        kw["call"] = lambda kind, flags: calls.append((kind, flags))
    try:
        with np.errstate(**kw):
            f()
    except Exception as e:  # noqa: BLE001 - compared by the callers
        return calls, (type(e), str(e))
    return calls, None


@pytest.mark.parametrize("threads", [1, 2])
def test_default_filter_shows_a_call_one_warning_per_kind(threads, monkeypatch):
    """Each array's flags are reported (as by a loop), all from the caller's line: under
    Python's default filter the user sees each message once per call, NumPy's text."""
    monkeypatch.setattr(fastmath.dispatch._parallel, "threads", lambda: threads)
    xs = [np.zeros(2000), -np.ones(3000), np.ones(1000)] * 100
    with fastmath.backend("numpy"), warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("default")
        foreach.log(xs)
    assert [(m.category, str(m.message), m.filename) for m in w] == [
        (RuntimeWarning, "divide by zero encountered in log", __file__),
        (RuntimeWarning, "invalid value encountered in log", __file__)]


@pytest.mark.parametrize("backend", ["numpy", "auto"])
@pytest.mark.parametrize("mode", ["raise", "call"])
def test_acting_modes_in_place_act_as_a_loop_would(mode, backend):
    """errstate raise/call with out= (the compiled path in this thread, stopping after
    each array whose flags act): the same exception or callback calls, in the same order,
    and every array written exactly as far as the loop wrote (none after a raise)."""
    def make():
        xs = [np.ones(5), np.zeros(4), np.full(3, 3.0), -np.ones(7), np.full(6, 2.0)[::2],
              np.zeros(2, np.float32), np.ones(5), -np.ones(2)]
        return xs * 3

    xs, ys = make(), make()
    want = acting(mode, lambda: [np.log(x, out=x) for x in xs])
    with fastmath.backend(backend):
        got = acting(mode, lambda: foreach.log(ys, out=ys))
    assert got == want
    assert (want[1] is None) == (mode == "call")
    for y, x in zip(ys, xs):
        same_bits(y, x)


def test_a_reloaded_calibration_moves_where_arrays_leave_the_compiled_path(tmp_path, monkeypatch):
    """Under ``auto`` the compiled path takes arrays below the function's smallest
    crossover, looked up once and again after a configuration reload."""
    from fastmath.dispatch import _calibration, _config

    with fastmath.backend("auto"):
        foreach.exp([np.ones(3)])
        default = foreach.exp._limit("auto")
        cal = tmp_path / "cal.json"
        cal.write_text(json.dumps({"format": 1, "machine": _calibration.machine(),
                                   "table": {"exp": {"float64": {"rows": [[4096, ["numpy"]]]}}}}))
        monkeypatch.setenv("FASTMATH_CALIBRATION", str(cal))
        _config.reload()
        try:
            assert foreach.exp._limit("auto") == 4096 != default
            xs = [np.linspace(0, 1, n) for n in (100, 5000)]
            for g, x in zip(foreach.exp(xs), xs):
                same_bits(g, np.exp(x))
        finally:
            monkeypatch.delenv("FASTMATH_CALIBRATION")
            _config.reload()
        assert foreach.exp._limit("auto") == default


@pytest.fixture
def runtime_clocks():
    """The runtime's pacing on made-up clocks: each wall-clock reading moves it on by 1 ms,
    and each reading of the caller's CPU time (which stays at 0) by 1 ms more, so a list
    run whole takes 1 ms and a split (which reads the CPU time twice) 3 ms."""
    from fastmath.dispatch import _runtime

    if fastmath.dispatch._parallel.threads() < 2:
        pytest.skip("one thread: nothing splits")
    wall, cpu = FakeClock(tick=1e-3), FakeClock()

    def cpu_reading():
        wall.advance(1e-3)
        return cpu()
    _runtime._set_clock(wall, cpu_reading)
    before = _runtime.set_pacing(True)
    every = _runtime.set_cpu_every(1)
    spin = _runtime.set_spin(0.5)  # workers that never park: every split is judged
    yield
    _runtime._set_clock(None, None)
    _runtime.set_pacing(before)
    _runtime.set_cpu_every(every)
    _runtime.set_spin(spin)


def _ways(kernel, each, xs, calls, out=None):
    """'s' for each call that split, 'w' for each that ran whole."""
    pace = kernel.paces[out is not None]
    n = sum(x.size for x in xs)
    ways = []
    for _ in range(calls):
        for g, x in zip(each(xs, out=out), xs):
            same_bits(g, np.exp(x))
        ways.append(pace.stats(n)["last"][0])
    return "".join(ways)


@compiled
def test_the_compiled_path_is_paced_by_the_runtime(runtime_clocks, monkeypatch):
    """The list runner follows the runtime's pacing, as every splitter: its first list of a
    size splits, the second and third run whole (the third timed: the run right after a
    split is not kept), and while a lost split's pause lasts
    the lists of that size run whole in this thread. (Whether a split lost is the policy's
    to say, tested on the runtime itself: tests/backends/test_numpy_compiled.py.)"""
    from fastmath.dispatch import _runtime

    spec = next(s for s in NUMPY_UNARY if s.name == "exp")
    kernel = fresh_list_kernel(spec, monkeypatch)  # (its loops checked by one compiled run)
    xs = [np.linspace(0, 1, 1000) + k for k in range(100)]  # above the size timed
    n = sum(x.size for x in xs)
    with fastmath.backend("numpy"):
        assert _ways(kernel, foreach.exp, xs, 3) == "sww"
        assert kernel.paces[0].stats(n)["kept"] == 1
        skip = max(1, kernel.paces[0].stats(n)["skip"])  # (0 before any judgement: 1)
        _runtime.judge(kernel.paces[0].id(), n, 1.0, 0.0)  # the change of way: not judged
        assert kernel.paces[0].stats(n)["left"] == 0
        _runtime.judge(kernel.paces[0].id(), n, 1.0, 0.0)  # a split that lost
        assert kernel.paces[0].stats(n)["left"] == skip
        assert _ways(kernel, foreach.exp, xs, skip + 1) == "w" * skip + "s"


@compiled
def test_new_outputs_and_out_lists_are_paced_apart(runtime_clocks, monkeypatch):
    """New outputs take longer per element than out= (allocation, memory not yet in
    cache): each kind of call keeps a record of its own."""
    spec = next(s for s in NUMPY_UNARY if s.name == "exp")
    kernel = fresh_list_kernel(spec, monkeypatch)
    xs = [np.linspace(0, 1, 1000) + k for k in range(100)]
    outs = [np.empty(1000) for _ in xs]
    n = sum(x.size for x in xs)
    with fastmath.backend("numpy"):
        assert _ways(kernel, foreach.exp, xs, 3) == "sww"
        assert kernel.paces[1].stats(n)["kept"] == 0  # out= lists: nothing recorded yet
        # their own first split and whole runs
        assert _ways(kernel, foreach.exp, xs, 3, out=outs) == "sww"
        assert kernel.paces[1].stats(n)["kept"] == 1


@compiled
def test_the_list_runner_keeps_to_the_runtimes_thread_limit(monkeypatch):
    """threadpoolctl's limit (here set directly) holds for lists too: with the runtime
    limited to one thread no worker joins a call, whatever the caller asks for."""
    from fastmath.dispatch import _runtime

    monkeypatch.setattr(fastmath.dispatch._parallel, "threads", lambda: 2)
    # long enough (some 20 ms) for a worker to join it on a busy machine too
    xs = [np.linspace(0, 1, 1000) + k % 50 for k in range(3000)]
    before_limit, pacing = _runtime.threads(), _runtime.set_pacing(False)
    try:
        with fastmath.backend("numpy"):
            joins = _runtime.stats()["joins"]
            foreach.exp(xs)  # the loops looked up, the pool started
            foreach.exp(xs)
            assert _runtime.stats()["joins"] > joins  # (a worker takes part unlimited)
            _runtime.set_threads(1)
            joins = _runtime.stats()["joins"]
            for g, x in zip(foreach.exp(xs), xs):
                same_bits(g, np.exp(x))
            assert _runtime.stats()["joins"] == joins
    finally:
        _runtime.set_threads(before_limit)
        _runtime.set_pacing(pacing)
