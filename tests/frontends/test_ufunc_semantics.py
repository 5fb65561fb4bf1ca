"""NumPy's calling conventions on every backend: out=, where=, dtype=, casting, order,
errors, and the floating-point error state (np.errstate) with NumPy's exact messages."""
import os
import warnings

import numpy as np
import pytest

import fastmath
from fastmath.dispatch import _parallel

from helpers import BACKENDS, assert_same

BIG = 300_000  # past every threading threshold


def both(name, backend, *args, **kwargs):
    """(fastmath's result, NumPy's) for the same call."""
    with fastmath.backend(backend):
        got = getattr(fastmath, name)(*args, **kwargs)
    return got, getattr(np, name)(*args, **kwargs)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("n", [7, BIG])
def test_out_is_written_and_returned(backend, n):
    x = np.linspace(-3, 3, n)
    out = np.full(n, 7.0)
    with fastmath.backend(backend):
        r = fastmath.exp(x, out=out)
        assert r is out
        r = fastmath.exp(x, out=(out,))
        assert r is out
    np.testing.assert_allclose(out, np.exp(x), rtol=4e-16)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("n", [7, BIG])
def test_out_aliasing_the_input(backend, n):
    x = np.linspace(0.1, 3, n)
    expected = np.log(x)
    with fastmath.backend(backend):
        assert fastmath.log(x, out=x) is x
    assert_same(x, expected, 2)
    # partial overlap: out is the input shifted by one element
    y = np.linspace(0.1, 3, n + 1)
    expected = np.log(y[1:])
    with fastmath.backend(backend):
        fastmath.log(y[1:], out=y[:-1])
    assert_same(y[:-1], expected, 2)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("n", [7, BIG])
def test_where_computes_only_selected_elements(backend, n):
    x = np.linspace(-2, 2, n)  # log of the negative half would warn if computed
    mask = x > 0
    out = np.full(n, -5.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with fastmath.backend(backend):
            r = fastmath.log(x, out=out, where=mask)
    assert r is out
    assert (out[~mask] == -5.0).all()
    np.testing.assert_allclose(out[mask], np.log(x[mask]), rtol=4e-16)
    got = fastmath.erf(x, out=np.zeros(n), where=mask)
    assert (got[~mask] == 0).all()


@pytest.mark.parametrize("backend", BACKENDS)
def test_dtype_and_casting(backend):
    x = np.arange(5, dtype=np.int64)
    for kw in ({"dtype": np.float32}, {"dtype": "float64"}, {"casting": "unsafe"}):
        got, exp = both("exp", backend, x, **kw)
        assert_same(got, exp, 2)
    with pytest.raises(TypeError, match="Cannot cast ufunc 'exp' input"):
        with fastmath.backend(backend):
            fastmath.exp(x, casting="no")
    with pytest.raises(TypeError):
        with fastmath.backend(backend):
            fastmath.exp(x, out=np.zeros(5, dtype=np.int64))


@pytest.mark.parametrize("backend", BACKENDS)
def test_order(backend):
    x = np.ones((30, 40))
    for order in ("C", "F", "A", "K"):
        got, exp = both("exp", backend, x.T, order=order)
        assert got.flags["C_CONTIGUOUS"] == exp.flags["C_CONTIGUOUS"]
        assert got.flags["F_CONTIGUOUS"] == exp.flags["F_CONTIGUOUS"]
    got, exp = both("exp", backend, np.ones((300, 1000))[:, ::2].T)
    assert got.strides == exp.strides


@pytest.mark.parametrize("backend", BACKENDS)
def test_bad_arguments_get_numpys_errors(backend):
    x = np.ones(4)
    cases = [
        lambda f: f(x, out=np.zeros(3)),
        lambda f: f(x, out=np.zeros(4), where=np.ones(3, bool)),
        lambda f: f(x, bogus=1),
        lambda f: f(x, order="Q"),
        lambda f: f(x, out=[1, 2, 3, 4]),
        lambda f: f(np.array(["a", "b"])),
        lambda f: f([[1, 2], [3]]),
        lambda f: f(x, np.zeros(4), np.zeros(4)),
    ]
    for case in cases:
        with pytest.raises(Exception) as expected:
            case(np.exp)
        with pytest.raises(type(expected.value)) as got:
            with fastmath.backend(backend):
                case(fastmath.exp)
        assert str(got.value) == str(expected.value)
    ro = np.zeros(4)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        fastmath.exp(x, out=ro)


def _record(fn, mode, category, capfd):
    """Run fn under np.errstate(category=mode); return what NumPy's handler produced."""
    seen = []

    class Log:
        def write(self, msg):
            seen.append(("log", msg))

    def call(kind, flags):
        seen.append(("call", kind, flags))

    errcall = Log() if mode == "log" else call
    capfd.readouterr()
    with np.errstate(**{category: mode}, call=errcall if mode in ("call", "log") else None):
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            try:
                fn()
            except FloatingPointError as e:
                seen.append(("raise", str(e)))
    seen += [("warn", w_.category, str(w_.message)) for w_ in w]
    return seen, capfd.readouterr().err


ERRCASES = [
    ("log", 0.0, "divide"), ("log", -1.0, "invalid"), ("exp", 1000.0, "over"),
    ("exp", -1000.0, "under"), ("log1p", -1.0, "divide"), ("log1p", -2.0, "invalid"),
    ("expm1", 1000.0, "over"),
]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("mode", ["ignore", "warn", "raise", "call", "print", "log"])
@pytest.mark.parametrize("name,bad,category", ERRCASES)
@pytest.mark.parametrize("n", [5, BIG])
def test_errstate_is_honoured(backend, mode, name, bad, category, n, capfd):
    x = np.ones(n)
    x[n // 2] = bad
    x[-1] = np.nan  # quiet NaNs raise nothing; they must not be blamed
    with fastmath.backend(backend):
        got = _record(lambda: getattr(fastmath, name)(x), mode, category, capfd)
    expected = _record(lambda: getattr(np, name)(x), mode, category, capfd)
    assert got == expected


@pytest.mark.parametrize("backend", BACKENDS)
def test_scalar_errstate_raise(backend):
    with fastmath.backend(backend), np.errstate(divide="raise"):
        with pytest.raises(FloatingPointError, match="divide by zero encountered in log"):
            fastmath.log(0.0)


@pytest.mark.parametrize("backend", BACKENDS)
def test_default_state_warns_once_per_category(backend):
    x = np.array([0.0, -1.0, 2.0] * 100_000)
    with fastmath.backend(backend):
        with pytest.warns(RuntimeWarning) as w:
            fastmath.log(x)
    assert [str(m.message) for m in w] == ["divide by zero encountered in log",
                                           "invalid value encountered in log"]


@pytest.mark.parametrize("threads", [1, 2])
def test_warning_points_at_the_callers_line(threads, monkeypatch):
    # one thread: a single core, or the pool backing off from a contended one
    monkeypatch.setattr(_parallel, "threads", lambda: threads)
    x = np.zeros(BIG)
    with fastmath.backend("numpy"), pytest.warns(RuntimeWarning) as w:
        fastmath.log(x)
    assert w[0].filename == __file__


def test_array_ufunc_overrides_are_honoured():
    class Wrapped:
        def __init__(self, v):
            self.v = v

        def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
            return ("override", ufunc.__name__, method)

    assert fastmath.exp(Wrapped(1)) == ("override", "exp", "__call__")
    m = np.ma.masked_array([1.0, 2.0], mask=[False, True])
    r = fastmath.exp(m)
    assert isinstance(r, np.ma.MaskedArray)
    assert r.mask.tolist() == [False, True]


def test_ufunc_attributes_are_the_references():
    assert fastmath.exp.nin == 1 and fastmath.exp.nout == 1
    assert fastmath.exp.types == np.exp.types
    assert fastmath.exp.__name__ == "exp"
    assert fastmath.exp.__doc__ == np.exp.__doc__
    assert "fastmath" in repr(fastmath.exp)
    import pickle

    assert pickle.loads(pickle.dumps(fastmath.exp)) is fastmath.exp


def _where_outcome(f, xs, out, where):
    """What ``f(*xs, [out], where=where, [out=out])`` says: its error's type, and its
    warnings with the file they name. ``out``: "absent", ("pos", value) or a keyword
    value."""
    args, kwargs = xs, {"where": where}
    if type(out) is tuple and out and isinstance(out[0], str):  # ("pos", value)
        args = xs + (out[1],)
    elif not isinstance(out, str):
        kwargs["out"] = out
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        try:
            f(*args, **kwargs)
            error = None
        except Exception as e:
            error = type(e)
    return error, [(x.category, str(x.message), x.filename) for x in w]


class _Override:
    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        return 1


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("n", [7, BIG])
def test_where_without_out_warns_as_numpy_does(backend, n):
    # NumPy warns for a mask without out= unless out= is given by keyword (out=None and
    # out=(None,) say "meant"), a positional out is an array, or an __array_ufunc__
    # override takes the call; where it warns, the warning names the caller's line
    import scipy.special

    x = np.linspace(0.1, 1.0, n)
    mask = x > 0.5
    outs = ["absent", None, (None,), [None], ("pos", None), ("pos", (None,)),
            ("pos", np.empty(n)), (np.empty(n),)]
    wheres = [mask, True, np.True_, False, mask.tolist(), _Override()]
    refs = [np.exp, np.log1p, np.arctan2, np.power, scipy.special.erf, scipy.special.xlogy]
    for ref in refs:
        f = getattr(fastmath, ref.__name__)
        for out in outs:
            for where in wheres:
                if isinstance(where, _Override) and ref.__name__ in ("erf", "xlogy"):
                    # no mask reaches SciPy's ufuncs (scipy/scipy#25127), not even through
                    # an override, which SciPy would call
                    continue
                xs = (x,) * ref.nin
                expected = _where_outcome(ref, xs, out, where)
                with fastmath.backend(backend):
                    got = _where_outcome(f, xs, out, where)
                assert got == expected, (ref.__name__, out, where)
    assert _where_outcome(np.exp, (x,), "absent", mask)[1][0][2] == __file__


def _frames_of(call):
    """(exception type, message, [(file, function)] of its traceback, its chaining) of
    ``call()``, which must raise."""
    import traceback

    with pytest.raises(Exception) as info:
        call()
    e = info.value
    frames = [(f.filename, f.name) for f in traceback.extract_tb(e.__traceback__)]
    return type(e), str(e), frames, (e.__cause__, e.__context__, e.__suppress_context__)


ERRORS = {  # NumPy's errors, each raised by a different step of the front end
    "out shape": lambda m, x: m.exp(x, out=np.zeros(3)),
    "casting": lambda m, x: m.exp(x, out=np.zeros(x.shape, np.int32)),
    "bad keyword": lambda m, x: m.exp(x, bogus=1),
    "where shape": lambda m, x: m.log(x, out=np.zeros(x.shape), where=np.ones(3, bool)),
    "broadcast": lambda m, x: m.arctan2(x, np.ones(3)),
    "strings": lambda m, x: m.exp(np.array(["a"] * x.size)),
    "errstate": lambda m, x: m.log(x * 0),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("n", [7, BIG])
@pytest.mark.parametrize("case", list(ERRORS))
def test_numpys_errors_come_without_fastmaths_frames(case, n, backend):
    # NumPy's C functions add no frame: the traceback names this file's lines only. The
    # compiled entry (_hot.c) gives the same; without it, its Python entry is one frame.
    from fastmath.frontends import _ufunc

    x = np.linspace(0.5, 1.0, n)
    with np.errstate(divide="raise"):
        want = _frames_of(lambda: ERRORS[case](np, x))
        with fastmath.backend(backend):
            got = _frames_of(lambda: ERRORS[case](fastmath, x))
    assert got[:2] == want[:2] and got[3] == want[3]
    entry = [] if _ufunc._native_hot is not None else [1]
    assert len(got[2]) == len(want[2]) + len(entry), got[2]
    assert all(f == __file__ for f, _ in got[2][:len(want[2])])


def test_calls_enter_by_vectorcall():
    # Python 3.10 and 3.11 do not pass functools.partial's vectorcall on to a subclass:
    # every call of a fastmath ufunc made an argument tuple (60 ns, a quarter of NumPy's
    # call on ten elements) until _hot.vectorcalled set it for the class
    import functools

    from fastmath.frontends import _ufunc

    if _ufunc._vectorcalled is None:
        pytest.skip("the extension fastmath.frontends._hot is not built")
    have_vectorcall = 1 << 11  # Py_TPFLAGS_HAVE_VECTORCALL
    for f in (fastmath.exp, fastmath.logaddexp, fastmath.sinc):
        assert type(f).__flags__ & have_vectorcall, type(f)
        x = np.linspace(0.5, 1.0, 7)
        assert_same(f(*[x] * f.nin) if hasattr(f, "nin") else f(x),
                    getattr(np, f.__name__)(*[x] * getattr(f, "nin", 1)))

    class Own(functools.partial):  # its own __call__: it keeps it
        def __call__(self, *args):
            return "own"

    assert not _ufunc._vectorcalled(Own)
    assert not Own.__flags__ & have_vectorcall and Own(len)([1]) == "own"
    with pytest.raises(TypeError, match="must be a class"):
        _ufunc._vectorcalled(fastmath.exp)


def test_direct_calls_keep_partials_meaning():
    # _hot.direct gives an instance a call of its own that enters the C fast path without
    # functools.partial's in between; any partial it is given (arguments or keywords
    # stored, another function) still calls as partial does
    import functools

    from fastmath.frontends import _ufunc

    if _ufunc._direct is None:
        pytest.skip("the extension fastmath.frontends._hot is not built")
    for f in (fastmath.exp, fastmath.logaddexp, fastmath.sinc):
        assert _ufunc._direct(f)  # (done as each was made: again changes nothing)
    x = np.linspace(0.5, 1.0, 7)
    assert_same(fastmath.exp(x), np.exp(x))
    assert_same(fastmath.logaddexp(x, x), np.logaddexp(x, x))

    class P(functools.partial):
        pass

    _ufunc._vectorcalled(P)
    stored, kept, plain = P(lambda a, b: max(a, b), 5), P(sorted), P(len)
    assert all(_ufunc._direct(p) for p in (stored, kept, plain))
    kept.keywords["reverse"] = True
    assert stored(3) == 5 and kept([1, 3, 2]) == [3, 2, 1] and plain([1, 2]) == 2
    with pytest.raises(TypeError):
        plain()
    assert not _ufunc._direct(1) and not _ufunc._direct(np.exp)


def test_python_entries_keep_one_frame_and_the_references_own():
    # an entry written in Python stays in the traceback (Python adds it as the error
    # leaves); below it come only NumPy's and SciPy's Python frames (which ones depends on
    # the path the call took: SciPy's own function, or its formula run by fastmath)
    import scipy.special

    home = os.path.dirname(fastmath.__file__)

    x = np.ones(5)
    for ours, ref, call in [
            (fastmath.logsumexp, scipy.special.logsumexp, lambda f: f(x, axis=3)),
            (fastmath.softmax, scipy.special.softmax, lambda f: f(x, axis=3)),
            (fastmath.vecdot, np.vecdot, lambda f: f(np.ones(3), np.ones(4))),
            (fastmath.einsum, np.einsum, lambda f: f("ij,jk", np.ones((2, 3)), np.ones(2))),
            (fastmath.sinc, np.sinc, lambda f: f(np.array(["a"])))]:
        want = _frames_of(lambda: call(ref))
        got = _frames_of(lambda: call(ours))
        assert got[:2] == want[:2] and got[3] == want[3]
        k = next((i for i, (f, _) in enumerate(want[2]) if f != __file__), len(want[2]))
        assert got[2][:k] == want[2][:k], got[2]
        assert got[2][k][0].startswith(home), got[2]
        below = got[2][k + 1:]
        assert not any(f.startswith(home) for f, _ in below), got[2]
        assert below == want[2][k:] or below == want[2][-len(below):], (got[2], want[2])


def test_a_fault_inside_fastmath_keeps_its_frames(monkeypatch):
    # what NumPy never raises for an argument is fastmath's own fault: its frames say where
    from fastmath.frontends import _pipeline

    def broken(*args):
        raise AttributeError("a fault inside fastmath")

    monkeypatch.setattr(_pipeline, "_prepare", broken)
    # (casting= as well as out=: a call of out= alone takes a shorter path, lean_out)
    _, _, frames, _ = _frames_of(lambda: fastmath.exp(np.ones(BIG), out=np.empty(BIG),
                                                      casting="same_kind"))
    assert frames[-1][1] == "broken"
    assert any(f == _pipeline.__file__ and name == "call" for f, name in frames)


def test_fastmaths_debug_log_keeps_its_frames(monkeypatch):
    # FASTMATH_LOG=debug is how to see where inside fastmath a NumPy error came from
    from fastmath.dispatch import _log
    from fastmath.frontends import _pipeline

    monkeypatch.setattr(_log.state, "on", True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # nothing here is about the log's own records
        _, _, frames, _ = _frames_of(lambda: fastmath.exp(np.ones(BIG), out=np.zeros(3)))
    assert (_pipeline.__file__, "call_reference") in frames
