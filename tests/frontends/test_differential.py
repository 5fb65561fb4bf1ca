"""Property-based differential tests: every registry function on every backend against
NumPy/SciPy, on inputs hypothesis draws from every dtype, layout and special value.

For each drawn call the reference and fastmath run on identical fresh inputs under the
same drawn ``np.errstate``; they must agree on the outcome: the same exception class and
message, the same warnings and error callbacks, the same result type, dtype and shape,
values equal (numpy backend: bitwise; others: within the row's ULP bound, see
tests/frontends/test_parity.py), the same ``out=`` identity and contents, and input bytes untouched.
New registry rows are covered without editing this file.

Run longer with HYPOTHESIS_PROFILE=dev (profiles are in conftest.py).
"""
import warnings

import numpy as np
import pytest
from hypothesis import example, given, note
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import fastmath
from fastmath._registry import ROWS

from helpers import BACKENDS, BITWISE, DRAWN, assert_same

# hypothesis draws a hundred cases per function and backend: minutes in all
pytestmark = pytest.mark.slow

UNARY = [s for s in ROWS if s.kind == "unary"]
BINARY = [s for s in ROWS if s.kind == "binary"]
ELEMENTWISE = [s for s in ROWS if s.kind == "elementwise"]
SOFTMAX = [s for s in ROWS if s.kind == "softmax"]
LSE = [s for s in ROWS if s.kind == "logsumexp"]
DTYPES = [np.dtype(t) for t in (
    "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float16", "float32", "float64", "longdouble", "complex64", "complex128", "object")]
MODES = ("ignore", "warn", "raise", "call")
# Past the numpy backend's threading threshold for every function (1 MiB of float64)
# and past auto's switch to torch for erf.
LARGE = 140_000


def specials(dt):
    """Values where implementations part ways: zeros, infinities, NaN, subnormals, the
    overflow and underflow edges of exp, the poles of log and log1p, the format limits."""
    f = np.finfo(dt)
    with np.errstate(all="ignore"):
        edges = [np.log(f.max), np.log(f.tiny), np.log(f.smallest_subnormal)]
        values = [0.0, -0.0, np.nan, np.inf, -np.inf, 1.0, -1.0, 0.5, f.eps, -f.eps,
                  f.tiny, -f.tiny, f.smallest_subnormal, -f.smallest_subnormal, f.max, -f.max]
        values = [dt.type(v) for v in values]
        for e in edges:
            e = dt.type(e)
            values += [e, np.nextafter(e, dt.type(np.inf)), np.nextafter(e, dt.type(-np.inf))]
        values += [np.nextafter(dt.type(-1), dt.type(0)), np.nextafter(dt.type(-1), dt.type(-2))]
    return values


def elements(dt):
    if dt.kind == "f" and dt.itemsize <= 8:
        return st.one_of(hnp.from_dtype(dt), st.sampled_from(specials(dt)))
    if dt.kind == "f":  # longdouble: hypothesis draws float64 values
        return st.one_of(st.floats(), st.sampled_from(specials(np.dtype(np.float64))))
    if dt.kind == "O":
        return st.one_of(st.floats(), st.integers(-50, 50))
    return hnp.from_dtype(dt)


def _layout(a, name):
    """``a`` (or values from it) handed over in layout ``name``."""
    if name == "F":
        return np.asfortranarray(a)
    if name == "strided" and a.ndim:
        return np.repeat(a, 2, axis=0)[::2]
    if name == "negative-strides" and a.ndim:
        return a[::-1][(slice(None, None, -1),) * a.ndim][::-1]
    if name == "transposed":
        return a.T
    if name == "broadcast":
        return np.broadcast_to(a, (3,) + a.shape)
    if name == "read-only":
        a = a.copy()
        a.flags.writeable = False
        return a
    if name == "byte-swapped" and a.dtype.kind not in "bO" and a.dtype.itemsize > 1:
        return a.astype(a.dtype.newbyteorder())
    if name == "high-dimensional":
        return a.reshape((1,) * 28 + a.shape[-4:] if a.ndim <= 4 else a.shape)
    if name == "large" and a.size:
        return np.resize(a, LARGE)
    if name == "large-strided" and a.size:
        return np.resize(a, (LARGE // 50, 100))[:, ::2]
    return a


LAYOUTS = ("C", "F", "strided", "negative-strides", "transposed", "broadcast", "read-only",
           "byte-swapped", "high-dimensional", "large", "large-strided")


@st.composite
def arrays(draw, dtypes=DTYPES, max_dims=4):
    dt = draw(st.sampled_from(dtypes))
    shape = draw(hnp.array_shapes(min_dims=0, max_dims=max_dims, min_side=0, max_side=5))
    with np.errstate(all="ignore"):
        a = draw(hnp.arrays(dt if dt.kind != "f" or dt.itemsize <= 8 else np.float64,
                            shape, elements=elements(dt))).astype(dt)
    name = draw(st.sampled_from(LAYOUTS))
    note(f"layout {name}, dtype {dt}, shape {shape}")
    return lambda: _layout(a.copy(), name)  # a fresh input for every call


@st.composite
def inputs(draw):
    """A builder of fresh, identical inputs: arrays, NumPy and Python scalars, lists."""
    build = draw(arrays())
    a = build()
    kind = draw(st.sampled_from(["array"] * 6 + ["numpy scalar", "python scalar", "list"]))
    if kind == "numpy scalar" and a.size:
        v = a.reshape(-1)[0]
        return lambda: v
    if kind == "python scalar" and a.size and a.dtype.kind != "O":
        v = a.reshape(-1)[0].item()
        return lambda: v
    if kind == "list" and a.size < 1000:
        v = a.tolist()
        return lambda: v
    return build


@st.composite
def unary_options(draw):
    """ufunc keywords: out= in every form, where=, dtype=, and an errstate per category."""
    return {
        "out": draw(st.sampled_from([None, None, "out", "tuple", "alias", "wrong-dtype",
                                     "wrong-shape"])),
        "where": draw(st.sampled_from([True, True, True, "mask"])),
        "dtype": draw(st.sampled_from([None, None, None, "float32", "float64", "float16"])),
        "errstate": {c: draw(st.sampled_from(MODES))
                     for c in ("divide", "over", "under", "invalid")},
        "seed": draw(st.integers(0, 2**32 - 1)),
    }


class Outcome:
    """Everything a call left behind that a user could observe."""

    def __init__(self, fn, make_args):
        args, kwargs, self.watched = make_args()
        self.before = [w.tobytes() if isinstance(w, np.ndarray) else None for w in self.watched]
        self.calls = []
        self.value = self.error = None
        with warnings.catch_warnings(record=True) as w, \
                np.errstate(call=lambda kind, flags: self.calls.append((kind, flags))):
            warnings.simplefilter("always")
            try:
                self.value = fn(*args, **kwargs)
            except Exception as e:  # noqa: BLE001 - compared below
                self.error = e
        self.warnings = [(x.category, str(x.message)) for x in w]
        self.kwargs = kwargs
        self.args = args


def compare(got, exp, ulps):
    if exp.error is not None:
        assert type(got.error) is type(exp.error), (got.error, exp.error)
        assert str(got.error) == str(exp.error)
    else:
        assert got.error is None, got.error
    assert got.warnings == exp.warnings
    assert got.calls == exp.calls


def _unary_case(spec, backend, make_x, opts):
    _ufunc_case(spec, backend, (make_x,), opts)


def _ufunc_case(spec, backend, makes, opts):
    """One drawn call of a ufunc row with operands built by ``makes``, both sides."""
    fn = getattr(fastmath, spec.name)
    ref = spec.reference()
    rng = np.random.default_rng(opts["seed"])
    try:
        with np.errstate(all="ignore"):
            xs = [m() for m in makes]
            probe = ref(*xs, dtype=opts["dtype"]) if opts["dtype"] else ref(*xs)
        pshape, pdtype = np.shape(probe), np.asarray(probe).dtype
    except Exception:  # noqa: BLE001 - the call itself is invalid; both must say so
        pshape, pdtype = None, None
    mask = None
    if opts["where"] == "mask" and pshape is not None:
        mask = rng.random(pshape) < 0.5

    def make():
        xs = [m() for m in makes]
        x = xs[0]
        kwargs = {}
        if opts["dtype"]:
            kwargs["dtype"] = opts["dtype"]
        if mask is not None:
            kwargs["where"] = mask
        watched = list(xs)
        kind = opts["out"]
        if kind and pshape is not None:
            if kind == "alias" and isinstance(x, np.ndarray) and x.flags.writeable:
                out = x
            else:
                dt = np.int64 if kind == "wrong-dtype" else pdtype
                shape = pshape + (2,) if kind == "wrong-shape" else pshape
                out = np.full(shape, 7, dtype=dt) if dt != object else np.full(shape, 7.0)
                watched.append(out)
            kwargs["out"] = (out,) if kind == "tuple" else out
        return tuple(xs), kwargs, watched

    if mask is not None and spec.ref.startswith("scipy"):
        ref = _where_by_copyto(ref)
    with np.errstate(**opts["errstate"]):
        exp = Outcome(ref, make)
        with fastmath.backend(backend):
            got = Outcome(fn, make)
    compare(got, exp, 0)
    ulps = 0
    # after an error the values compared are those written into out= (NumPy writes before
    # raising), so the bound is that of out='s dtype
    written = exp.value if exp.error is None else exp.kwargs.get("out")
    written = written[0] if isinstance(written, tuple) else written
    rdt = np.asarray(written).dtype if written is not None else None
    if backend not in BITWISE and rdt in (np.float32, np.float64):
        ulps = spec.bound(rdt, backend)
    if exp.error is None:
        if mask is not None and "out" not in exp.kwargs:
            # where= without out=: unselected elements are uninitialised in NumPy too
            assert type(got.value) is type(exp.value)
            g, e = np.asarray(got.value), np.asarray(exp.value)
            assert g.shape == e.shape and g.dtype == e.dtype
            assert_same(g[mask], e[mask], ulps)
        else:
            assert_same(got.value, exp.value, ulps)
        out_given = "out" in exp.kwargs
        if out_given:
            o = exp.kwargs["out"]
            o = o[0] if isinstance(o, tuple) else o
            go = got.kwargs["out"]
            go = go[0] if isinstance(go, tuple) else go
            assert (got.value is go) == (exp.value is o)
    # inputs and any out= array, byte for byte (out= after an error too: NumPy's writes)
    nin = len(makes)
    for i, (g, e) in enumerate(zip(got.watched, exp.watched)):
        if not isinstance(e, np.ndarray):
            continue
        if i < nin and (i > 0 or opts["out"] != "alias"):
            assert g.tobytes() == got.before[i], "an input was modified"
        elif exp.error is None or i >= nin:
            assert_same(g, e, ulps)


def _where_by_copyto(ref):
    """NumPy's where= semantics without handing where= to a SciPy ufunc, which corrupts
    the heap when where= meets a casting loop (scipy/scipy#25127): compute everything,
    then copy the selected elements."""
    def call(*xs, out=None, where=True, **kwargs):
        o = out[0] if isinstance(out, tuple) else out
        if o is None:
            warnings.warn("'where' used without 'out', expect unitialized memory in output. "
                          "If this is intentional, use out=None.", UserWarning)
            return ref(*xs, **kwargs)
        r = ref(*xs, out=np.empty_like(o), **kwargs)
        np.copyto(o, r, where=where)
        return o
    return call


def _bound(spec, backend, value):
    """The row's ULP bound for a result like ``value`` on ``backend``."""
    rdt = np.asarray(value).dtype
    if backend in BITWISE or rdt not in (np.float32, np.float64):
        return 0
    return spec.bound(rdt, backend)


def _count(name):
    DRAWN[name] = DRAWN.get(name, 0) + 1


def _fixed(values, dtype, name="C"):
    a = np.array(values, dtype=dtype)
    return lambda: _layout(a.copy(), name)


def _opts(out=None, where=True, dtype=None, seed=0, **errstate):
    modes = {c: errstate.get(c, "ignore") for c in ("divide", "over", "under", "invalid")}
    return {"out": out, "where": where, "dtype": dtype, "errstate": modes, "seed": seed}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("spec", UNARY, ids=lambda s: s.name)
@given(make_x=inputs(), opts=unary_options())
# Regressions found by this test. where= without out= must give NumPy's UserWarning:
@example(make_x=_fixed(True, bool), opts=_opts(where="mask"))
# FloatingPointError is raised after NumPy has written out=, with where= too:
@example(make_x=_fixed(100.0, np.float16), opts=_opts(out="out", where="mask", seed=29,
                                                          over="raise"))
# where= with a casting loop corrupted the heap inside scipy.special.erf (scipy#25127):
@example(make_x=_fixed(np.ones(140_000), bool), opts=_opts(out="out", where="mask"))
@example(make_x=_fixed(np.ones(1000), np.float32),
         opts=_opts(out="out", where="mask", dtype="float64"))
# in place on a backend without FPU flags: the flags come from the input, kept aside:
@example(make_x=_fixed(1000.0, np.float32), opts=_opts(out="alias", over="raise"))
@example(make_x=_fixed([1000.0, 0.0, -1.0, -2.0] * 40_000, np.float64),
         opts=_opts(out="alias", over="warn", divide="warn", invalid="warn"))
# a cast of the input that overflows is reported as NumPy reports it (once, its wording):
@example(make_x=_fixed([[70000, 1]], np.int32), opts=_opts(dtype="float16", over="warn"))
@example(make_x=_fixed(70000, np.int32), opts=_opts(dtype="float16", over="raise"))
# a long double out= array, compared within a bound (its bits have no integer view):
@example(make_x=_fixed(0.0, np.longdouble, "broadcast"), opts=_opts(out="alias", dtype="float32"))
def test_unary_matches_reference(spec, backend, make_x, opts):
    _count(spec.name)
    _unary_case(spec, backend, make_x, opts)


@st.composite
def operand_pairs(draw):
    """Two operands: independent shapes (often not broadcastable: both sides must refuse
    alike), or the second a row or a scalar of the first's, which broadcasts."""
    first = draw(inputs())
    how = draw(st.sampled_from(["independent", "row", "scalar"]))
    if how == "independent":
        return first, draw(inputs())
    a = np.asarray(first())
    if how == "row" and a.ndim and a.dtype != object:
        row = a.reshape(-1, *a.shape[1:])[-1:].copy() if a.size else a[:0]
        return first, lambda: row.copy()
    value = draw(st.sampled_from([2.0, -1.5, 3, 0.0, np.float32(0.5), np.inf]))
    return first, lambda: value


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("spec", BINARY, ids=lambda s: s.name)
@given(pair=operand_pairs(), opts=unary_options())
def test_binary_matches_reference(spec, backend, pair, opts):
    _count(spec.name)
    _ufunc_case(spec, backend, pair, opts)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("spec", ELEMENTWISE, ids=lambda s: s.name)
@given(make_x=inputs(), errstate=st.fixed_dictionaries(
    {c: st.sampled_from(MODES) for c in ("divide", "over", "under", "invalid")}))
def test_elementwise_matches_reference(spec, backend, make_x, errstate):
    _count(spec.name)

    def make():
        x = make_x()
        return (x,), {}, [x]

    with np.errstate(**errstate):
        exp = Outcome(spec.reference(), make)
        with fastmath.backend(backend):
            got = Outcome(getattr(fastmath, spec.name), make)
    compare(got, exp, 0)
    if isinstance(got.watched[0], np.ndarray):
        assert got.watched[0].tobytes() == got.before[0], "the input was modified"
    if exp.error is None:
        assert_same(got.value, exp.value, _bound(spec, backend, exp.value))


# --- logsumexp kind -----------------------------------------------------------------------
LSE_DTYPES = [np.dtype(t) for t in ("float32", "float64", "float16", "int32", "bool",
                                    "longdouble", "complex128")]


@st.composite
def lse_calls(draw):
    build = draw(arrays(dtypes=LSE_DTYPES, max_dims=3))
    a = build()
    nd = max(a.ndim, 1)
    axis = draw(st.one_of(st.none(), st.integers(-nd - 1, nd),
                          st.lists(st.integers(-nd, nd - 1), min_size=1, max_size=3)
                          .map(tuple)))
    b_kind = draw(st.sampled_from([None, None, "same", "signed", "zeros", "scalar", "row",
                                   "mismatched"]))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    shape = a.shape
    b = {None: None, "scalar": 2.5,
         "same": rng.uniform(0, 3, shape), "signed": rng.uniform(-1, 1, shape),
         "zeros": np.where(rng.random(shape) < 0.5, 0.0, 1.0),
         "row": rng.uniform(0, 2, shape[-1:]), "mismatched": rng.uniform(0, 1, shape + (2,))
         }[b_kind]
    kwargs = {"axis": axis, "keepdims": draw(st.booleans()),
              "return_sign": draw(st.booleans())}
    errstate = {c: draw(st.sampled_from(MODES)) for c in ("divide", "over", "invalid")}
    return build, b, kwargs, errstate


def _lse_close(got, exp, condition, spec, dtype):
    """Within the row's bound in ULPs of max(|result|, 1), scaled by the condition number
    of a sum with weights of both signs (see tests/frontends/test_logsumexp.py for why)."""
    g, e = np.asarray(got), np.asarray(exp)
    assert type(got) is type(exp) and g.dtype == e.dtype and g.shape == e.shape
    if e.dtype.kind != "f":
        np.testing.assert_array_equal(g, e)
        return
    ulps = spec.ulp[0] if e.dtype == np.float32 else spec.ulp[1]
    scale = np.maximum(np.abs(np.nan_to_num(e, posinf=0, neginf=0)), 1.0)
    tol = ulps * np.finfo(e.dtype).eps * (scale + condition)
    with np.errstate(invalid="ignore"):
        ok = (np.isnan(g) & np.isnan(e)) | (g == e) | (np.abs(g - e) <= tol)
    assert ok.all(), (g, e)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("spec", LSE, ids=lambda s: s.name)
@given(call=lse_calls())
# Regression: a Python float weight is weak in promotion; float32 input stays float32.
@example(call=(_fixed(0.5, np.float32), 2.5,
               {"axis": None, "keepdims": False, "return_sign": False},
               {"divide": "ignore", "over": "ignore", "invalid": "ignore"}))
def test_logsumexp_matches_reference(spec, backend, call):
    _count(spec.name)
    build, b, kwargs, errstate = call
    fn, ref = getattr(fastmath, spec.name), spec.reference()

    def make():
        a = build()
        bb = b.copy() if isinstance(b, np.ndarray) else b
        return (a,), dict(kwargs, b=bb), [a, bb]

    with np.errstate(**errstate, under="ignore"):
        exp = Outcome(ref, make)
        with fastmath.backend(backend):
            got = Outcome(fn, make)
    compare(got, exp, 0)
    for w, before in zip(got.watched, got.before):
        if isinstance(w, np.ndarray):
            assert w.tobytes() == before, "an input was modified"
    if exp.error is not None:
        return
    condition = 1.0
    bb = exp.kwargs["b"]
    if isinstance(bb, np.ndarray) and (bb < 0).any():
        with np.errstate(all="ignore"):
            absolute = dict(exp.kwargs, b=np.abs(bb), return_sign=False)
            res = exp.value[0] if kwargs["return_sign"] else exp.value
            condition = np.nan_to_num(np.exp(ref(*exp.args, **absolute) - res),
                                      nan=1.0, posinf=1.0)
    if kwargs["return_sign"]:
        assert type(got.value) is tuple and len(got.value) == 2
        _lse_close(got.value[0], exp.value[0], condition, spec, None)
        finite = np.isfinite(np.asarray(exp.value[0])) & (np.asarray(condition) < 1e6)
        # the sign of a sum that cancels to nothing is noise in either implementation
        np.testing.assert_array_equal(np.asarray(got.value[1])[finite],
                                      np.asarray(exp.value[1])[finite])
    else:
        _lse_close(got.value, exp.value, condition, spec, None)


# --- softmax kind -------------------------------------------------------------------------
@st.composite
def softmax_calls(draw):
    build = draw(arrays(dtypes=LSE_DTYPES, max_dims=3))
    nd = max(build().ndim, 1)
    axis = draw(st.one_of(st.none(), st.integers(-nd - 1, nd),
                          st.lists(st.integers(-nd, nd - 1), min_size=1, max_size=3)
                          .map(tuple), st.just([0])))
    errstate = {c: draw(st.sampled_from(MODES)) for c in ("divide", "over", "invalid")}
    return build, axis, errstate


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("spec", SOFTMAX, ids=lambda s: s.name)
@given(call=softmax_calls())
def test_softmax_matches_reference(spec, backend, call):
    _count(spec.name)
    build, axis, errstate = call

    def make():
        x = build()
        return (x,), {"axis": axis}, [x]

    with np.errstate(**errstate, under="ignore"):
        exp = Outcome(spec.reference(), make)
        with fastmath.backend(backend):
            got = Outcome(getattr(fastmath, spec.name), make)
    compare(got, exp, 0)
    assert got.watched[0].tobytes() == got.before[0], "the input was modified"
    if exp.error is None:
        assert_same(got.value, exp.value, _bound(spec, backend, exp.value))
