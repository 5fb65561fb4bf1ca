"""Every kernel of every backend on the special values (infinities, NaN, signed zeros,
subnormals, the overflow and underflow thresholds, huge arguments), float32 and float64,
laid out short, long and unaligned, through the public functions with the backend forced;
MKL's rows also under each code path MKL can be made to take here; and the guard that
keeps a kernel that gets them wrong away from every call."""
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import fastmath
from fastmath import backends
from fastmath._registry import ROWS, BY_NAME
from fastmath.dispatch import _selection, _verify

from helpers import BACKENDS

ELEMENTWISE = [s for s in ROWS if s.kind in ("unary", "binary", "elementwise")]
OTHERS = [b for b in BACKENDS if b not in ("numpy", "auto", "torch-cuda")]
CASES = [(s, b) for b in OTHERS for s in ELEMENTWISE if backends.get(b).kernel(s) is not None]


def _ids(case):
    return f"{case[0].name}-{case[1]}"


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("layout", _verify.LAYOUTS)
@pytest.mark.parametrize("case", CASES, ids=_ids)
def test_special_values_are_the_references(case, layout, dtype):
    spec, backend = case
    ins = _verify.operands(spec, np.dtype(dtype), layout)
    saved = [x.copy() for x in ins]
    with np.errstate(all="ignore"):
        expected = spec.reference()(*ins)
        with fastmath.backend(backend):
            got = getattr(fastmath, spec.name)(*ins)
    assert got.dtype == expected.dtype
    far, where = _verify.worst(got, expected, ins)
    assert far <= spec.bound(dtype, backend), where
    assert all(x.tobytes() == s.tobytes() for x, s in zip(ins, saved))


def test_the_kernel_itself_passes_the_probe():
    """The guard below would hide a broken kernel from the test above (NumPy's result is
    used instead): the kernels themselves must pass, or the row loses its kernel."""
    bad = [(s.name, b, dt, why) for s, b in CASES for dt in ("float32", "float64")
           if (why := _verify.probe(s, backends.get(b).kernel(s), dt, b)) is not None]
    assert not bad


def _nan_at_infinities(x, out):
    """exp as MKL's float32 kernel computed it on an Intel Xeon in VML_ERRMODE_NOERR."""
    np.exp(x, out=out)
    out[np.isinf(x)] = np.nan
    return 0


def test_probe_names_the_broken_special_value():
    why = _verify.probe(BY_NAME["exp"], _nan_at_infinities, "float32")
    assert why == "nan where NumPy/SciPy gives inf (at x=inf), short layout"
    assert _verify.probe(BY_NAME["exp"], lambda x, out: np.exp(x, out=out), "float32") is None


def test_probe_catches_a_bug_on_the_vector_path_only():
    def wrong_past_64(x, out):
        np.exp(x, out=out)
        if x.size > 64:
            out[64:] = np.where(x[64:] == 0, 2.0, out[64:])
        return 0

    why = _verify.probe(BY_NAME["exp"], wrong_past_64, "float64")
    assert why is not None and why.startswith("2.0 where NumPy/SciPy gives 1.0")
    assert why.endswith("long layout")


def test_probe_allows_the_rows_bound():
    spec = BY_NAME["exp"]  # float64 bound: 2 ULP

    def off_by(ulps):
        def kernel(x, out):
            np.exp(x, out=out)
            finite = np.isfinite(out) & (out > 1)
            for _ in range(ulps):
                out[finite] = np.nextafter(out[finite], np.inf)
            return 0
        return kernel

    assert _verify.probe(spec, off_by(2), "float64") is None
    assert "(3 ULP, at x=" in _verify.probe(spec, off_by(3), "float64")


def _canonical_nans(name):
    """``name``'s NumPy loop with every NaN written as 0x7fffffff, as CUDA writes them
    (an NVIDIA H200 under torch 2.11: x86 gives 0x7fc00000, and 0xffc00000 for -nan)."""
    def kernel(*args):
        *ins, out = args
        getattr(np, name)(*ins, out=out)
        out[np.isnan(out)] = np.array(0x7FFFFFFF, np.uint32).view(np.float32)
        return 0
    return kernel


@pytest.mark.parametrize("name", ["square", "reciprocal"])
def test_probe_takes_any_nan_for_nan(name):
    """A NaN's payload and sign are not values (NumPy keeps neither, and assert_same's
    NaN is any NaN): rows held bitwise still take CUDA's NaN. Before, the probe refused
    the kernel, naming an element where both agreed: "0.0 where NumPy/SciPy gives 0.0
    (1 ULP, at x=0.0)"."""
    with np.errstate(all="ignore"):
        assert _verify.probe(BY_NAME[name], _canonical_nans(name), "float32") is None


def test_probe_names_the_zero_whose_sign_differs():
    def positive_zeros(x, out):
        np.square(x, out=out)
        out[np.isnan(out)] = np.array(0x7FFFFFFF, np.uint32).view(np.float32)
        np.copysign(out, np.where(x == 0, -1.0, 1.0).astype(x.dtype), out=out)
        return 0

    with np.errstate(all="ignore"):
        why = _verify.probe(BY_NAME["square"], positive_zeros, "float32")
    assert why == "-0.0 where NumPy/SciPy gives 0.0 (1 ULP, at x=0.0), short layout"


def test_torch_cuda_is_held_to_the_rows_gpu_bound():
    """CUDA's double tanh is 2 ULP from NumPy's (an H200; CUDA documents its own 1-2), the
    CPU kernels 1: the probe holds torch-cuda to ``gpu_ulp``, every other backend to
    ``ulp``."""
    spec = BY_NAME["tanh"]

    def two_ulp_up(x, out):
        np.tanh(x, out=out)
        finite = np.isfinite(out) & (out > 0.1)
        out[finite] = np.nextafter(np.nextafter(out[finite], np.inf), np.inf)
        return 0

    with np.errstate(all="ignore"):
        assert "(2 ULP, at x=" in _verify.probe(spec, two_ulp_up, "float64", "torch-cpu")
        assert _verify.probe(spec, two_ulp_up, "float64", "torch-cuda") is None
        assert _verify.probe(spec, two_ulp_up, "float64") is not None


def _break_exp(monkeypatch, backend_name, spoil):
    """``backend_name``'s exp kernel, its output then passed through ``spoil(x, out)``;
    the plans rebuilt."""
    backend = backends.get(backend_name)
    real = backend.kernel

    def kernel(spec):
        k = real(spec)
        if spec.name != "exp":
            return k

        def broken(x, out):
            r = k(x, out)
            spoil(x, out)
            return r
        return broken

    monkeypatch.setattr(backend, "kernel", kernel)
    fastmath.dispatch._config.reload()


@pytest.fixture
def broken_torch_exp(monkeypatch):
    """torch-cpu's exp kernel, broken the way MKL's was."""
    if "torch-cpu" not in fastmath.available_backends():
        pytest.skip("torch is not installed")

    def nan_at_infinities(x, out):
        out[np.isinf(x)] = np.nan

    _break_exp(monkeypatch, "torch-cpu", nan_at_infinities)
    yield
    monkeypatch.undo()
    fastmath.dispatch._config.reload()


def test_a_chosen_backend_whose_kernel_is_broken_is_not_used_and_says_so(broken_torch_exp):
    x = np.array([np.inf, -np.inf, 1.0], np.float32)
    with fastmath.backend("torch-cpu"):
        with pytest.warns(RuntimeWarning, match=r"gives nan where NumPy/SciPy gives inf") as w:
            got = fastmath.exp(x)
        assert w[0].filename == __file__  # the user's line
        np.testing.assert_array_equal(got, np.exp(x))
        fastmath.exp(x)  # once only (filterwarnings=error would raise here)


def test_auto_never_runs_a_broken_kernel(broken_torch_exp, monkeypatch):
    from fastmath.dispatch import _calibration

    monkeypatch.setattr(_calibration, "rows", lambda name, dtype: ((1, ("torch-cpu",)),))
    _selection._plans.clear()
    x = np.full(4096, np.inf, np.float32)
    assert all(n != "torch-cpu" for n, _ in _selection.plan(BY_NAME["exp"], "float32", x.size))
    np.testing.assert_array_equal(fastmath.exp(x), np.exp(x))


needs_mkl = pytest.mark.skipif(backends.why_unavailable("mkl") is not None,
                               reason="MKL is not installed")


@needs_mkl
def test_vml_mode_gives_numpys_infinities():
    """VML called directly, as the backend calls it: the error mode decides what VML gives
    for infinite input on some CPUs (VML_ERRMODE_NOERR gave NaN for float32 exp(+-inf) on
    an Intel Xeon; this AMD-built CI machine takes another path and cannot show it)."""
    from fastmath.backends import mkl

    lib = mkl.load()
    for dt, fn in ((np.float32, lib.vmsExp_64), (np.float64, lib.vmdExp_64)):
        x = np.tile(np.array([np.inf, -np.inf, 0.0, np.nan], dt), 300)[1:]
        out = np.empty_like(x)
        fn.restype = None
        fn(mkl.ctypes.c_int64(x.size), mkl.ctypes.c_void_p(x.ctypes.data),
           mkl.ctypes.c_void_p(out.ctypes.data), mkl.ctypes.c_int64(mkl.MODE))
        np.testing.assert_array_equal(out, np.exp(x))


# One special value at a time among ordinary ones, through the public function with the
# backend forced: the warnings must be NumPy's. VML's own status stands in for a look at the
# output where it is sound (backends/_vml.py): this holds it to NumPy per value and per
# code path (run here and in a fresh process under each of MKL's paths below).
WARNINGS_SWEEP = """
import warnings

import numpy as np

import fastmath
from fastmath import backends
from fastmath._registry import ROWS
from fastmath.dispatch import _verify


def _warned(f, x):
    with warnings.catch_warnings(record=True) as w, np.errstate(all="warn", under="ignore"):
        warnings.simplefilter("always")
        f(x)
    return sorted({str(m.message) for m in w})


def warnings_sweep(backend):
    b, ran, bad = backends.get(backend), 0, []
    for spec in ROWS:
        if spec.kind != "unary" or b.kernel(spec) is None:
            continue
        ref, mine = spec.reference(), getattr(fastmath, spec.name)
        for dt in (np.float32, np.float64):
            base = spec.sample(4096, dt, np.random.default_rng(0))[0]
            for v in _verify.special_values(dt):
                x = base.copy()
                x[1001] = v
                want = _warned(ref, x)
                with fastmath.backend(backend):
                    got = _warned(mine, x)
                ran += 1
                if got != want:
                    bad.append(f"{spec.name} {np.dtype(dt)} {v!r}: {got} where NumPy {want}")
    return ran, bad
"""


@pytest.mark.parametrize("backend", [b for b in ("mkl", "torch-cpu") if b in OTHERS])
def test_each_special_value_warns_as_numpy_does(backend):
    ns = {}
    exec(WARNINGS_SWEEP, ns)
    ran, bad = ns["warnings_sweep"](backend)
    assert ran > 0 and not bad, bad


# MKL's code paths that can be chosen from outside: the instruction set it dispatches on and
# its conditional numerical reproducibility branches. On an AMD CPU MKL may ignore them
# (its Intel paths are not taken there); each still runs the whole sweep in a fresh process.
MKL_PATHS = [{}, {"MKL_ENABLE_INSTRUCTIONS": "SSE4_2"}, {"MKL_ENABLE_INSTRUCTIONS": "AVX2"},
             {"MKL_ENABLE_INSTRUCTIONS": "AVX512"}, {"MKL_CBWR": "COMPATIBLE"},
             {"MKL_CBWR": "AVX2"}, {"MKL_CBWR": "AVX512"}]


@needs_mkl
@pytest.mark.parametrize("env", MKL_PATHS, ids=lambda e: ",".join(f"{k}={v}" for k, v in e.items()) or "default")
def test_every_mkl_row_under_each_code_path(env):
    code = textwrap.dedent("""
        from fastmath import backends
        from fastmath._registry import ROWS
        from fastmath.dispatch import _verify
        b = backends.get("mkl")
        bad, ran = [], 0
        for spec in ROWS:
            k = b.kernel(spec)
            if k is None:
                continue
            for dt in ("float32", "float64"):
                ran += 1
                why = _verify.probe(spec, k, dt)
                if why:
                    bad.append(f"{spec.name} {dt}: {why}")
        swept, wrong = warnings_sweep("mkl")
        print(ran)
        print(swept)
        print("\\n".join(bad + wrong))
    """)
    r = subprocess.run([sys.executable, "-c", WARNINGS_SWEEP + code], capture_output=True,
                       text=True, timeout=300, env={**os.environ, **env})
    assert r.returncode == 0, r.stderr
    ran, swept, *bad = r.stdout.strip().split("\n")
    assert int(ran) >= 50 and int(swept) >= 1000 and not [b for b in bad if b], bad


def test_check_fails_on_a_broken_kernel_with_a_readable_line(broken_torch_exp, capsys):
    from fastmath.tools import cli

    assert cli.main(["check", "--backends", "torch-cpu,auto", "--functions", "exp"]) == 1
    out = capsys.readouterr().out
    line = next(ln for ln in out.splitlines() if ln.startswith("MISMATCH exp on torch-cpu (float32)"))
    assert line == ("MISMATCH exp on torch-cpu (float32): its kernel gives nan where NumPy/SciPy "
                    "gives inf (at x=inf), short layout; NumPy/SciPy's result is used instead")
    assert str(np.iinfo(np.int64).max) not in out
    assert "MISMATCH exp on auto" not in out  # what auto runs is still right


def test_check_sees_what_auto_runs_at_large_sizes(monkeypatch):
    """A kernel that is wrong only on long arrays, which auto sends to it only from 10^6
    elements: checking small arrays alone said all matched."""
    from fastmath.dispatch import _calibration
    from fastmath.tools import _check

    wrong = []

    def big_only(x, out):
        if x.size >= 10**6:
            out[np.isinf(x) & (x > 0)] = np.nan
            wrong.append(x.size)

    monkeypatch.setattr(_calibration, "rows", lambda name, dtype: ((10**6, ("numpy",)),))
    _break_exp(monkeypatch, "numpy", big_only)
    try:
        (r,) = _check.run(["auto"], ["exp"], dtypes=("float64",))
    finally:
        monkeypatch.undo()
        fastmath.dispatch._config.reload()
    assert wrong and not r["ok"]
    assert r["detail"].startswith("nan where NumPy/SciPy gives inf (at x=inf), 1000001 elements")


@pytest.mark.parametrize("backend", [b for b in ("torch-cpu", "numexpr", "mkl")
                                     if backends.get(b).why_unavailable() is None])
def test_the_first_check_runs_under_the_patch(backend):
    """The special values a kernel is checked on are computed with NumPy's log, log2,
    arcsinh and sqrt; while the patch has numpy.log pointing at fastmath's, the check of
    log's kernel once called fastmath.log, which checked its kernel again: RecursionError
    (seen as threads of a storm test dying under load). A fresh process, so nothing is
    checked yet."""
    code = textwrap.dedent(f"""
        import numpy as np, fastmath
        x = np.linspace(0.5, 3, 5000)
        with fastmath.patch(), fastmath.backend({backend!r}):
            got = [np.log(x), np.exp(x), np.sqrt(x)]
        print(max(float(abs(g / w - 1).max()) for g, w in
                  zip(got, [np.log(x), np.exp(x), np.sqrt(x)])))
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert float(r.stdout) < 1e-14  # a few ULP at most: the rows' bounds
