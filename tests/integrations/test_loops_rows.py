"""The loop mode's calls by rows: ufunc calls that NumPy cuts into rows (broadcast operands,
strided views) run row by row over the pool (``strided_call`` in
fastmath/integrations/_loops.c).

Oracle: the same call with the loop mode off. Results bitwise equal, of the same dtype,
shape and memory order; the output object NumPy returns (out= in every spelling, in-place
operators); NumPy's FP error reports (message, category, the line they point at); and
every call the row path must not take (overlap, casts, where=, subclasses) left to NumPy.
That a call took the row path is seen in its loop's split count: NumPy itself hands such a
call to the loop one row at a time, each far too short to split.
"""
import warnings

import numpy
import pytest
import scipy.special

import fastmath
from fastmath.integrations import _loopmode

pytestmark = pytest.mark.skipif(not _loopmode.available(),
                                reason=str(_loopmode.why_unavailable()))

RNG = numpy.random.default_rng(11)
ROWS, COLS = 20_000, 64  # 1.28 million elements: above every loop's size to split


@pytest.fixture(autouse=True)
def _no_pacing():
    """Every call long enough must split here, whatever a split costs on a loaded machine."""
    before = _loopmode.pacing(False)
    yield
    _loopmode.pacing(before)


def _splits(name, char, nin):
    out = "?" if name in ("greater", "less_equal", "isnan", "isfinite") else char
    return _loopmode.counts().get(f"{name} {char * nin}->{out}", (0, 0))[1]


def _same(plain, patched):
    plain, patched = numpy.asarray(plain), numpy.asarray(patched)
    assert patched.dtype == plain.dtype and patched.shape == plain.shape
    assert patched.strides == plain.strides
    assert patched.tobytes() == plain.tobytes()


def _with_and_without(cases):
    """cases()'s results plain and under the loop mode, FP errors ignored."""
    with numpy.errstate(all="ignore"):
        plain = cases()
        with fastmath.patch(mode="loops"):
            return plain, cases()


def _data(shape, dtype):
    x = (RNG.standard_normal(shape) * 3).astype(dtype)
    flat = x.reshape(-1)
    flat[::89] = numpy.array([numpy.nan, numpy.inf, -numpy.inf, 0.0, -0.0, 1e-40],
                             dtype)[numpy.arange(flat[::89].size) % 6]
    return x


# (name, operands' shapes or views): each a call NumPy runs row by row
BROADCASTS = {
    "bias row": lambda d: (_data((ROWS, COLS), d), _data((COLS,), d)),
    "row first": lambda d: (_data((COLS,), d), _data((ROWS, COLS), d)),
    "column": lambda d: (_data((ROWS, COLS), d), _data((ROWS, 1), d)),
    "outer": lambda d: (_data((ROWS, 1), d), _data((1, COLS), d)),
    "3-d, last two": lambda d: (_data((40, 500, COLS), d), _data((500, COLS), d)),
    "3-d, column": lambda d: (_data((40, 500, COLS), d), _data((40, 500, 1), d)),
    "strided view": lambda d: (_data((ROWS, 2 * COLS), d)[:, :COLS], _data((COLS,), d)),
    "every other row": lambda d: (_data((2 * ROWS, COLS), d)[::2], _data((ROWS, COLS), d)),
}
BINARY = ["add", "subtract", "multiply", "divide", "maximum", "power", "arctan2", "hypot",
          "greater", "less_equal", "xlogy", "logaddexp"]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shape", list(BROADCASTS))
@pytest.mark.parametrize("name", BINARY)
def test_broadcast_calls_split_by_rows_and_bitwise_numpys(name, shape, dtype):
    f = getattr(numpy, name, None) or getattr(scipy.special, name)
    a, b = BROADCASTS[shape](dtype)
    before = _splits(name, numpy.dtype(dtype).char, 2)
    with numpy.errstate(all="ignore"):
        plain = f(a, b)
        with fastmath.patch(mode="loops"):
            patched = f(a, b)
    _same(plain, patched)
    assert _splits(name, numpy.dtype(dtype).char, 2) > before, "not split by rows"


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", ["exp", "log", "sqrt", "tanh", "isnan", "expit", "ndtr", "erf"])
def test_strided_views_of_one_operand_split_by_rows(name, dtype):
    f = getattr(numpy, name, None) or getattr(scipy.special, name)
    x = _data((ROWS, 3 * COLS), dtype)
    views = [x[:, :COLS], x[:, COLS:2 * COLS], x[::3, 1:], x.reshape(40, -1, 3 * COLS)[:, :, 5:]]
    for view in views:
        before = _splits(name, numpy.dtype(dtype).char, 1)
        with numpy.errstate(all="ignore"):
            plain = f(view)
            with fastmath.patch(mode="loops"):
                patched = f(view)
        _same(plain, patched)
        assert _splits(name, numpy.dtype(dtype).char, 1) > before, "not split by rows"


def test_every_spelling_of_out_and_the_in_place_operators():
    a, bias = _data((ROWS, COLS), "float64"), _data((COLS,), "float64")

    def spellings():
        results = []
        y = a.copy()
        results.append(numpy.add(y, bias, y) is y)
        results.append(y)
        y = a.copy()
        results.append(numpy.add(y, bias, out=y) is y)
        results.append(y)
        y = a.copy()
        results.append(numpy.add(y, bias, out=(y,)) is y)
        results.append(y)
        z = numpy.empty_like(a)
        results.append(numpy.multiply(a, bias, out=z) is z)
        results.append(z)
        y = a.copy()
        same = y
        y -= bias
        y *= bias[None, :]
        y /= a[:, :1] + 1
        results.append(y is same)
        results.append(y)
        results.append(numpy.add(a, bias, out=None))
        return results

    with numpy.errstate(all="ignore"):
        plain = spellings()
        before = _splits("add", "d", 2)
        with fastmath.patch(mode="loops"):
            patched = spellings()
        assert _splits("add", "d", 2) >= before + 4
    for p, q in zip(plain, patched):
        if isinstance(p, bool):
            assert p and q
        else:
            _same(p, q)


def test_overlapping_operands_are_numpys_copies_first():
    x = _data((ROWS, COLS), "float64")

    def cases():
        out = []
        y = x.copy()
        numpy.add(y, y[0], out=y)  # the row is written during the call: NumPy copies it
        out.append(y)
        y = x.copy()
        numpy.subtract(y, y[:, :1], out=y)  # so is the column
        out.append(y)
        y = x.copy()
        numpy.multiply(y[1:], y[0], out=y[:-1])  # shifted by a row
        out.append(y)
        y = x.copy()
        numpy.add(y[:, 1:], y[:, :-1], out=y[:, 1:])  # shifted by a column, out strided
        out.append(y)
        y = x[:ROWS // 2].copy().reshape(-1, COLS)
        numpy.add(y, y[::-1], out=y)  # reversed rows of itself
        out.append(y)
        return out

    plain, patched = _with_and_without(cases)
    for p, q in zip(plain, patched):
        _same(p, q)


def test_calls_the_row_path_leaves_to_numpy_stay_numpys():
    a = _data((ROWS, COLS), "float64")
    b32 = _data((COLS,), "float32")

    class Sub(numpy.ndarray):
        pass

    def cases():
        return [
            numpy.add(a, b32),  # promotion
            numpy.add(a.astype("float32"), a[0]),  # the other way
            numpy.add(a, a[0], where=a > 0, out=numpy.zeros_like(a)),
            numpy.add(a, a[0], dtype="float32"),
            numpy.add(a, 2.5),  # a scalar: NumPy's one run
            numpy.add(a.view(Sub), a[0]),  # a subclass
            numpy.add(a[::-1], a[0]),  # a reversed input, no out: NumPy's memory order
            numpy.exp(a.T),  # Fortran order
            numpy.add(a, a[0], casting="same_kind"),
        ]

    plain, patched = _with_and_without(cases)
    for p, q in zip(plain, patched):
        assert type(p) is type(q)
        _same(p, q)
    with pytest.raises(ValueError) as plain_error:
        numpy.add(a, _data((COLS + 1,), "float64"))
    with fastmath.patch(mode="loops"), pytest.raises(ValueError) as patched_error:
        numpy.add(a, _data((COLS + 1,), "float64"))
    assert str(patched_error.value) == str(plain_error.value)


def _reports(fn):
    """What NumPy's error state makes of fn's FP flags: its warnings (message, category,
    file, line) under 'warn', and the error under 'raise'."""
    with warnings.catch_warnings(record=True) as seen, numpy.errstate(all="warn"):
        warnings.simplefilter("always")
        fn()
    raised = None
    with numpy.errstate(all="raise"):
        try:
            fn()
        except FloatingPointError as e:
            raised = str(e)
    return [(str(w.message), w.category, w.filename, w.lineno) for w in seen], raised


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_fp_errors_are_numpys_reports_at_the_users_line(dtype):
    a = numpy.ones((ROWS, COLS), dtype)
    a[-1, -1] = 0.0  # in the last row: a piece a pool thread runs
    inf = numpy.full(COLS, numpy.inf, dtype)
    calls = [lambda: numpy.divide(inf[:32], a[:, :32] * 0),  # nothing wrong: inf / 0
             lambda: numpy.divide(a[0], a),  # divide by zero
             lambda: numpy.subtract(a * numpy.inf, inf),  # inf - inf: invalid
             lambda: numpy.multiply(a + 1, numpy.full(COLS, numpy.finfo(dtype).max, dtype)),
             lambda: numpy.exp(numpy.full((ROWS, 2 * COLS), 1e4, dtype)[:, ::2])]  # overflow
    for call in calls:
        plain = _reports(call)
        before = _loopmode.counts()
        with fastmath.patch(mode="loops"):
            patched = _reports(call)
        assert patched == plain
        assert _loopmode.counts() != before  # the row path ran
    assert any(plain[0] for plain in map(_reports, calls[1:]))


def test_the_row_path_goes_when_the_mode_stops():
    a, bias = _data((ROWS, COLS), "float64"), _data((COLS,), "float64")
    with fastmath.patch(mode="loops"):
        a + bias
    before = _splits("add", "d", 2)
    _same(a + bias, a + bias)
    assert _splits("add", "d", 2) == before


def test_threads_calling_by_rows_at_once_get_numpys_results():
    # one call at a time has the pool: the others run their rows whole in their own thread
    import threading

    a, bias = _data((ROWS, COLS), "float64"), _data((COLS,), "float64")
    expected = [numpy.subtract(a, bias * k) for k in range(6)]
    results = [None] * 6
    failed = []

    def work(k):
        try:
            for _ in range(5):
                results[k] = numpy.subtract(a, bias * k)
        except BaseException as e:  # noqa: BLE001 - reported below
            failed.append(e)

    with fastmath.patch(mode="loops"):
        threads = [threading.Thread(target=work, args=(k,)) for k in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
    assert not failed and not any(t.is_alive() for t in threads)
    for got, want in zip(results, expected):
        _same(want, got)


def test_scipys_ufuncs_run_by_rows_only_where_its_errors_are_quiet():
    # SciPy's loops report special-function errors themselves, from the thread running
    # them: with a category not "ignore" when the mode starts, its calls stay NumPy's
    x = _data((ROWS, 2 * COLS), "float64")[:, :COLS]
    before = _splits("ndtri", "d", 1)
    with scipy.special.errstate(domain="warn"), numpy.errstate(all="ignore"):
        with fastmath.patch(mode="loops"):
            with pytest.warns(scipy.special.SpecialFunctionWarning):
                scipy.special.ndtri(x)
    assert _splits("ndtri", "d", 1) == before


# integer and bool inputs NumPy casts to a float loop, in its buffers of 8192 elements:
# (the ufunc, its operands)
N = ROWS * COLS
CASTS = {
    "log int64": lambda: (numpy.log, RNG.integers(-5, 10**6, N)),
    "sqrt int32": lambda: (numpy.sqrt, RNG.integers(0, 2**31 - 1, N, dtype="int32")),
    "exp int16 -> float32": lambda: (numpy.exp, RNG.integers(-90, 90, N, dtype="int16")),
    "float64 * uint64, large": lambda: (
        numpy.multiply, RNG.standard_normal(N), RNG.integers(2**53, 2**64 - 1, N, "uint64")),
    "int64 / int32": lambda: (numpy.divide, RNG.integers(-9, 9, N),
                              RNG.integers(-3, 3, N, dtype="int32")),
    "bool + float64": lambda: (numpy.add, RNG.random(N) > 0.5, RNG.standard_normal(N)),
    "2-d float32 - int16 row": lambda: (
        numpy.subtract, _data((ROWS, COLS), "float32"),
        RNG.integers(-300, 300, COLS, dtype="int16")),
    "2-d uint8 column / float64": lambda: (
        numpy.divide, RNG.integers(0, 255, (ROWS, 1), dtype="uint8"),
        _data((ROWS, COLS), "float64")),
    "power of int64 and a float64 view": lambda: (
        numpy.power, RNG.integers(0, 9, (ROWS, COLS)),
        _data((ROWS, 2 * COLS), "float64")[:, 3:3 + COLS]),
    # to NumPy's int64 loops: a NumPy scalar and a mask, as every scipy.stats method sums
    # them (``(1 - cond0) + np.isnan(x)``), and narrower integers
    "int64 scalar + bool mask": lambda: (numpy.add, numpy.int64(1), RNG.random(N) > 0.5),
    "bool mask * int64 scalar": lambda: (numpy.multiply, RNG.random(N) > 0.5,
                                         numpy.int64(-7)),
    "2-d int64 - int32 row": lambda: (
        numpy.subtract, RNG.integers(-2**62, 2**62, (ROWS, COLS)),
        RNG.integers(-2**31, 2**31 - 1, COLS, dtype="int32")),
    "uint8 >= int64": lambda: (numpy.greater_equal, RNG.integers(0, 255, N, dtype="uint8"),
                               RNG.integers(-5, 300, N)),
    "int16 // int64 with zeros": lambda: (numpy.floor_divide,
                                          RNG.integers(-300, 300, N, dtype="int16"),
                                          RNG.integers(-3, 3, N)),
}


@pytest.mark.parametrize("case", list(CASTS))
def test_integer_and_bool_inputs_are_cast_by_blocks_and_bitwise_numpys(case):
    f, *operands = CASTS[case]()
    with numpy.errstate(all="ignore"):
        plain = f(*operands)
        before = sum(v[1] for v in _loopmode.counts().values())
        with fastmath.patch(mode="loops"):
            patched = f(*operands)
        splits = sum(v[1] for v in _loopmode.counts().values()) - before
    _same(plain, patched)
    # one split of the whole call (NumPy's buffers would each be a run of their own: none
    # long enough to split where the loop is cheap, 157 splits where it is not)
    assert splits == 1


def test_casts_the_row_path_leaves_to_numpy_stay_numpys():
    f32, f64 = _data((N,), "float32"), _data((N,), "float64")
    i8 = RNG.integers(-100, 100, N, dtype="int8")
    ints = RNG.integers(0, 100, N)

    def cases():
        return [numpy.add(f32, f64),  # a float cast (a signalling NaN's is the cast's)
                numpy.exp(i8),  # NumPy's float16 loop
                numpy.add(i8, i8),  # an int8 loop
                numpy.add(5, i8 > 0),  # a Python int (weakly typed: NumPy's int64 loop)
                numpy.power(ints, numpy.int64(2)),  # int64 power: an error is possible
                numpy.add(numpy.float64(0.5), f32.reshape(-1, 64)),  # a float cast
                numpy.add(numpy.float32(0.5), ints),  # NumPy's float64 loop of a cast
                numpy.sqrt(f32.astype(">f4")),  # byte-swapped
                numpy.log(ints, dtype="float32"),  # a loop chosen by dtype=
                numpy.logical_and(ints, i8)]

    plain, patched = _with_and_without(cases)
    for p, q in zip(plain, patched):
        _same(p, q)


def test_a_numpy_scalars_subclass_keeps_its_own_ufunc_override():
    class Mine(numpy.int64):
        def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
            return "its own"

    mask = RNG.random(N) > 0.5
    with fastmath.patch(mode="loops"):
        assert numpy.add(Mine(1), mask) == "its own"
        assert Mine(1) - mask == "its own"
        assert numpy.array_equal(numpy.int64(1) - mask, 1 - mask.astype("int64"))


def test_fp_errors_of_a_cast_call_are_numpys_reports():
    ints = numpy.ones(N, "int64")
    ints[-5] = 0  # log(0): divide by zero, in a piece a pool thread runs
    call = lambda: numpy.log(ints)  # noqa: E731 - one line for both reports to name
    plain = _reports(call)
    with fastmath.patch(mode="loops"):
        patched = _reports(call)
    assert patched == plain and plain[1] == "divide by zero encountered in log"


def test_a_fork_child_runs_calls_by_rows_and_stop_restores_numpys_call():
    import os
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent("""
        import os, numpy, fastmath
        from fastmath.integrations import _loopmode
        a = numpy.random.default_rng(0).standard_normal((20_000, 64))
        bias, counts = a[0].copy(), numpy.arange(a.size) % 7 + 1
        expected = [(a + bias).tobytes(), numpy.log(counts).tobytes()]
        fastmath.patch.start("loops")
        _loopmode.pacing(False)
        a + bias  # the pool is up in the parent
        pid = os.fork()
        if pid == 0:
            # the parent's call counts it among the processes calling for 10 ms more (the
            # runtime's registry of fastmath's processes): past them, the child is alone
            import time; time.sleep(0.03)
            before = _loopmode.counts()["add dd->d"][1]
            ok = [(a + bias).tobytes(), numpy.log(counts).tobytes()] == expected
            ok = ok and _loopmode.counts()["add dd->d"][1] > before
            os._exit(0 if ok else 3)
        _, status = os.waitpid(pid, 0)
        print("CHILD", os.waitstatus_to_exitcode(status))
        fastmath.patch.stop("loops")
        before = _loopmode.counts()["add dd->d"][1]
        print("AFTER", (a + bias).tobytes() == expected[0],
              _loopmode.counts()["add dd->d"][1] == before)
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=120, env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
    assert "CHILD 0" in r.stdout and "AFTER True True" in r.stdout, r.stdout + r.stderr[-2000:]


def test_narrow_rows_are_left_to_numpys_buffers():
    # under 16 columns NumPy's buffered runs are kept: splits of such calls lost with one
    # core busy (see MIN_COLS in fastmath/integrations/_loops.c)
    x, mu = _data((ROWS * 4, 4), "float64"), _data((4,), "float64")
    wide, row = _data((ROWS, 16), "float64"), _data((16,), "float64")
    before = _splits("subtract", "d", 2)
    plain = [x - mu, wide - row]
    with fastmath.patch(mode="loops"):
        patched = [x - mu]
        assert _splits("subtract", "d", 2) == before
        patched.append(wide - row)
        assert _splits("subtract", "d", 2) == before + 1
    for p, q in zip(plain, patched):
        _same(p, q)


FUZZ_UFUNCS = ["add", "subtract", "multiply", "divide", "power", "maximum", "arctan2",
               "hypot", "greater", "less_equal", "logaddexp", "floor_divide", "fmod",
               "copysign", "exp", "log", "sqrt", "isnan", "tanh", "negative"]
FUZZ_DTYPES = ["float32", "float64", "int64", "int32", "int16", "uint8", "uint64", "bool",
               "float16"]


def _fuzz_operand(rng, shape, dtype):
    if dtype == "bool":
        return rng.random(shape) > 0.5
    if dtype[0] in "iu":
        info = numpy.iinfo(dtype)
        return rng.integers(max(info.min, -1000), min(info.max, 1000), shape, dtype=dtype)
    x = (rng.standard_normal(shape) * 3).astype(dtype)
    x.reshape(-1)[::37] = numpy.nan
    return x


def _fuzz_outcome(f, args, into_first):
    """What the call gives: its result's dtype, shape, strides and bytes and the FP warnings
    it raised, or its error."""
    if into_first:
        args = [a.copy() for a in args]
    try:
        with warnings.catch_warnings(record=True) as seen, numpy.errstate(all="warn"):
            warnings.simplefilter("always")
            r = numpy.asarray(f(*args, out=args[0]) if into_first else f(*args))
        return (r.dtype, r.shape, r.strides, r.tobytes(), sorted(str(w.message) for w in seen))
    except Exception as e:  # noqa: BLE001 - the error is the outcome compared
        return (type(e).__name__, str(e))


@pytest.mark.parametrize("seed", range(3))
def test_random_calls_with_every_run_split_are_numpys(seed, monkeypatch):
    # random ufuncs, shapes, broadcasts, views and dtypes, out= the first operand or none,
    # with every run of two elements or more split (rows and casts included)
    import random

    rng, pick = numpy.random.default_rng(seed), random.Random(seed)
    monkeypatch.setattr(_loopmode, "_SPLIT_AT", 2)
    monkeypatch.setattr(_loopmode, "_MIN_SPLIT", 2)
    monkeypatch.setattr(_loopmode, "_PIECE", 64)
    before = sum(v[1] for v in _loopmode.counts().values())
    for _ in range(500):
        f = getattr(numpy, pick.choice(FUZZ_UFUNCS))
        nd = pick.choice([1, 2, 2, 3])
        shape = [pick.choice([1, 2, 3, 5, 16, 17, 33, 64]) for _ in range(nd)]
        args = []
        for _ in range(f.nin):
            s = [1 if pick.random() < 0.3 else n for n in shape][pick.randrange(nd)
                                                                  if pick.random() < 0.3 else 0:]
            a = _fuzz_operand(rng, tuple(s), pick.choice(FUZZ_DTYPES))
            view = pick.randrange(6)
            if view == 0 and a.ndim >= 2:
                a = a[:, ::-1]
            elif view == 1 and a.ndim >= 2 and a.shape[1] > 2:
                a = a[:, 1:]
            elif view == 2 and a.shape and a.shape[0] > 2:
                a = a[::2]
            elif view == 3 and a.ndim == 2:
                a = a.T
            args.append(a)
        into_first = pick.random() < 0.3
        plain = _fuzz_outcome(f, args, into_first)
        with fastmath.patch(mode="loops"):
            patched = _fuzz_outcome(f, args, into_first)
        assert patched == plain, (f.__name__, [(a.dtype, a.shape, a.strides) for a in args])
    assert sum(v[1] for v in _loopmode.counts().values()) > before + 100
