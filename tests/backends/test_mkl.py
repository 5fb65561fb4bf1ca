"""The mkl backend: loaded only when asked for, declines what VML cannot take, keeps MKL
to one thread per chunk, and says why it is unavailable. Its results against NumPy/SciPy
are held by the parity suites, which run every available backend."""
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import scipy.special

import fastmath
from fastmath import backends
from fastmath._registry import BY_NAME

from helpers import assert_same

mkl_available = backends.why_unavailable("mkl") is None
needs_mkl = pytest.mark.skipif(not mkl_available, reason="MKL is not installed")


def _python(code):
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout


@needs_mkl
def test_costlier_functions_split_sooner():
    from fastmath._registry import BY_NAME
    from fastmath.backends import mkl

    backend = mkl.MklBackend()
    erf, exp = backend.kernel(BY_NAME["erf"]), backend.kernel(BY_NAME["exp"])
    # 10^5 float32 erfs (144 us on one core of the reference machine) go to two threads;
    # as many cheap exps stay on one
    assert erf.min_bytes <= 4 * 10**5 < exp.min_bytes


@needs_mkl
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/maps")
def test_import_does_not_load_mkl_and_the_first_check_does():
    out = _python("""
        import fastmath, numpy as np
        def loaded():
            return "libmkl_rt" in open("/proc/self/maps").read()
        before = loaded()
        fastmath.exp(np.ones(10))  # small: auto calls numpy with nothing else in sight
        after_call = loaded()
        fastmath.available_backends()
        print(before, after_call, loaded())
    """)
    assert out.split() == ["False", "False", "True"]


def test_without_mkl_it_says_why_and_numpy_runs():
    out = _python("""
        import ctypes.util, importlib.metadata, sys
        # no pip record, no library in the environment, none on the system's path
        importlib.metadata.files = lambda name: None
        sys.prefix = "/nonexistent"
        ctypes.util.find_library = lambda name: None
        import numpy as np, fastmath
        from fastmath import backends
        print(backends.why_unavailable("mkl"))
        print("mkl" in fastmath.available_backends())
        try:
            fastmath.set_backend("mkl")
        except ValueError as e:
            print("refused:", e)
        x = np.linspace(0, 1, 10**6)
        print(np.array_equal(fastmath.exp(x), np.exp(x)))
    """).splitlines()
    assert out[0] == "MKL is not installed (pip install mkl)"
    assert out[1] == "False"
    assert out[2].startswith("refused:") and "MKL is not installed" in out[2]
    assert out[3] == "True"


@needs_mkl
@pytest.mark.parametrize("name", ["exp", "erf", "power"])
def test_declines_what_vml_cannot_take(name):
    spec = BY_NAME[name]
    k = backends.get("mkl").kernel(spec)
    args = 2 if spec.kind == "binary" else 1
    x = np.linspace(0.1, 2, 60).reshape(6, 10)
    cases = {
        "strided": (x[:, ::2], np.empty((6, 5))),
        "float16": (x.astype(np.float16), np.empty(x.shape, np.float16)),
        "int": (np.ones((6, 10), np.int64), np.empty((6, 10), np.int64)),
        "byte-swapped": (x.astype(">f8"), np.empty(x.shape, ">f8")),
        "mixed orders": (x, np.empty(x.shape, order="F")),
        "other output dtype": (x, np.empty(x.shape, np.float32)),
    }
    for label, (a, out) in cases.items():
        before = out.copy()
        assert k(*(a,) * args, out) is NotImplemented, label
        # nothing written before declining (NaNs compare by bytes)
        assert out.tobytes() == before.tobytes(), label


@needs_mkl
@pytest.mark.parametrize("name", ["erfc", "ndtr", "erfcinv"])
def test_rows_past_their_float64_bound_take_only_float32(name):
    k = backends.get("mkl").kernel(BY_NAME[name])
    x64 = np.linspace(0.01, 0.99, 100)
    assert k(x64, np.empty_like(x64)) is NotImplemented
    x32 = x64.astype(np.float32)
    out = np.empty_like(x32)
    k(x32, out)
    assert_same(out, getattr(scipy.special, name)(x32), BY_NAME[name].ulp[0])


@needs_mkl
def test_power_with_one_exponent_runs_vml_and_matches_numpy():
    x = np.linspace(0, 50, 300_001)
    k = backends.get("mkl").kernel(BY_NAME["power"])
    for exponent in (np.array(2.5), np.array([0.5]), np.array(-3.0)):
        out = np.empty_like(x)
        assert k(x, exponent, out) is not NotImplemented
        with np.errstate(all="ignore"):
            assert_same(out, np.power(x, exponent), BY_NAME["power"].ulp[1])


@needs_mkl
def test_chunks_run_on_pool_threads_with_mkl_single_threaded(monkeypatch):
    import threading

    from fastmath.dispatch import _parallel
    from fastmath.backends import mkl

    # a fresh pacing record (an earlier call that lost to a busy machine may have paused
    # splitting): its first call splits
    monkeypatch.setattr(mkl, "_POOL_PACE", _parallel.Pace())

    lib = mkl.load()
    lib.MKL_Get_Max_Threads.restype = int
    mkl._set_local_threads(3)  # a caller's own setting, to be restored after the call
    try:
        seen = []

        def call(n, xp, op):
            seen.append((threading.current_thread().name, lib.MKL_Get_Max_Threads(), n))
        x = np.ones(1 << 20)
        mkl._run(call, (x, np.empty_like(x)), x.nbytes, mkl.PARALLEL_MIN_BYTES)
        assert lib.MKL_Get_Max_Threads() == 3
    finally:
        mkl._set_local_threads(0)
    assert [s[1] for s in seen] == [1] * len(seen)
    assert sum(s[2] for s in seen) == x.size
    # the pool hands out several chunks per thread (a busy core takes fewer of them)
    assert 1 < len(seen) and len({s[0] for s in seen}) <= _parallel.threads()


@needs_mkl
def test_on_the_runtime_each_piece_runs_with_mkl_single_threaded():
    """The runtime calls VML's entry point by address from the caller's thread and its own:
    here a ctypes function in VML's signature in its place, which records the thread, MKL's
    thread count there, and the piece. MKL's own threading is off in every piece, the
    caller's own setting comes back after the call, and the pieces cover the array once."""
    import ctypes
    import threading
    import time

    from fastmath.backends import mkl

    _runtime = pytest.importorskip("fastmath.dispatch._runtime")
    if _runtime.threads() < 2:
        pytest.skip("one thread: nothing splits")
    lib = mkl.load()
    lib.MKL_Get_Max_Threads.restype = int
    seen = []

    @ctypes.CFUNCTYPE(None, ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)
    def vml(n, a, r, mode):
        seen.append((threading.get_ident(), lib.MKL_Get_Max_Threads(), n, a, mode))
        time.sleep(0.002)  # a piece long enough for a parked pool thread to wake
    x = np.ones(1 << 20)
    out = np.empty_like(x)
    pace = _runtime.new_pace()
    before = _runtime.set_pacing(False)
    mkl._set_local_threads(3)  # a caller's own setting, to be restored after the call
    try:
        address = ctypes.cast(vml, ctypes.c_void_p).value
        for _ in range(20):  # until a pool thread took a piece (one that wakes late may not)
            seen.clear()
            assert _runtime.vml(address, (x,), out, mkl.MODE, pace, 0, 2, False,
                                mkl._setter) is False
            if len({s[0] for s in seen}) == 2:
                break
        assert lib.MKL_Get_Max_Threads() == 3
    finally:
        mkl._set_local_threads(0)
        _runtime.set_pacing(before)
    assert len({s[0] for s in seen}) == 2
    assert [s[1] for s in seen] == [1] * len(seen) and {s[4] for s in seen} == {mkl.MODE}
    starts = sorted((s[3] - x.ctypes.data) // 8 for s in seen)
    assert sum(s[2] for s in seen) == x.size and starts[0] == 0 and len(set(starts)) == len(seen)


@needs_mkl
def test_an_inf_in_the_last_piece_is_seen():
    """Each piece's output is looked at while in cache: an overflow anywhere, the last
    element included, reaches NumPy's error state."""
    x = np.zeros(1 << 20)
    for where in (0, x.size // 2 + 1, -1):
        y = x.copy()
        y[where] = 1000.0
        with fastmath.backend("mkl"), np.errstate(over="raise"):
            with pytest.raises(FloatingPointError, match="overflow"):
                fastmath.exp(y)
    with fastmath.backend("mkl"), np.errstate(over="raise"):
        fastmath.exp(x)  # nothing to report


@needs_mkl
def test_forced_mkl_runs_its_kernel_and_matches_the_reference():
    from fastmath.dispatch import _selection

    x = np.random.default_rng(0).uniform(-5, 5, 200_000)
    with fastmath.backend("mkl"):
        got = fastmath.exp(x)
        chain = _selection.plan(BY_NAME["exp"], "float64", x.size)
    assert [name for name, _ in chain] == ["mkl", "numpy"]
    assert_same(got, np.exp(x), BY_NAME["exp"].ulp[1])


@needs_mkl
def test_fp_errors_are_numpys():
    x = np.array([1000.0, 0.0, -1.0, 1.0] * 50_000)
    with fastmath.backend("mkl"), np.errstate(all="raise"):
        with pytest.raises(FloatingPointError, match="overflow"):
            fastmath.exp(x)
        with pytest.raises(FloatingPointError, match="divide by zero"):
            fastmath.log(x)
    with fastmath.backend("mkl"), pytest.warns(RuntimeWarning, match="invalid value"):
        fastmath.sqrt(x)


@needs_mkl
def test_vmls_status_stands_in_for_the_look_where_it_is_sound():
    """A piece's VML status, not a look at its output, says whether NumPy could have
    raised a flag: an inf or a NaN that came in raises none; an overflow hidden by a later
    underflow (VML keeps the last error only) still sends the piece to the look; the
    caller's own status is left as it was."""
    from fastmath.backends import _vml, mkl
    from fastmath.dispatch import _runtime

    k = backends.get("mkl").kernel(BY_NAME["exp"])
    status = k.status(np.dtype(np.float64))
    if not status:
        pytest.skip("this MKL's status is not sound here (backends/_vml.py)")
    fn, pace = k.addresses[np.dtype(np.float64)], _runtime.new_pace()
    set_status = _vml._SET_STATUS(status)

    def seen(x, status=status):  # in one piece (min_split past its size)
        out = np.empty_like(x)
        return _runtime.vml(fn, (x,), out, mkl.MODE, pace, x.size + 1, 0, True, mkl._setter,
                            status)
    x = np.linspace(-5, 5, 5000)
    came_in = x.copy()
    came_in[[10, 4000]] = np.inf, np.nan
    hidden = x.copy()
    hidden[[0, -1]] = 1000.0, -1000.0  # overflow, then underflow
    under = x.copy()
    under[-1] = -1000.0
    set_status(4)
    before = _runtime.set_pacing(False)
    try:
        assert seen(came_in) is False and seen(came_in, 0) is True  # (the look sees an inf)
        assert seen(hidden) is True and seen(under) is False and seen(x) is False
        assert set_status(0) == 4
        # a split that was not looked at leaves its errors in each thread's status: the
        # next split's pieces do not take them for their own
        long = np.full(1 << 20, 1000.0)
        for _ in range(5):
            _runtime.vml(fn, (long,), np.empty_like(long), mkl.MODE, pace, 0, 2, False,
                         mkl._setter, status)
            assert _runtime.vml(fn, (long * 0,), np.empty_like(long), mkl.MODE, pace, 0, 2,
                                True, mkl._setter, status) is False
    finally:
        _runtime.set_pacing(before)
        set_status(0)
        _runtime.free_pace(pace)
    # a mode in which VML keeps no status (VML_ERRMODE_NOERR) is not sound
    assert not _vml.status_sound(fn, mkl.VML_HA | 0x2000, mkl._setter, status, np.exp,
                                 np.float64)
    assert _vml.status_sound(fn, mkl.MODE, mkl._setter, status, np.exp, np.float64)


@needs_mkl
def test_fp_flags_are_left_to_the_front_end_only_where_they_can_arise():
    k = backends.get("mkl").kernel(BY_NAME["exp"])
    x = np.linspace(-5, 5, 1000)
    out = np.empty_like(x)
    assert k(x, out) == 0
    x[3] = 1000.0
    assert k(x, out) == backends.UNCHECKED
    # scipy's erf raises no flags: nothing to derive even from a NaN
    assert backends.get("mkl").kernel(BY_NAME["erf"])(np.array([np.nan]), np.empty(1)) == 0


@needs_mkl
@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="needs fork")
def test_a_forked_child_computes_with_mkl():
    out = _python("""
        import os, numpy as np, fastmath
        x = np.linspace(-3, 3, 300_000)
        with fastmath.backend("mkl"):
            fastmath.exp(x)  # MKL loaded and fastmath's pool started in the parent
            pid = os.fork()
            if pid == 0:
                ok = np.allclose(fastmath.exp(x), np.exp(x), rtol=1e-15, atol=0)
                os._exit(0 if ok else 3)
        _, status = os.waitpid(pid, 0)
        print(os.waitstatus_to_exitcode(status))
    """)
    assert out.strip() == "0"


@needs_mkl
@pytest.mark.skipif("torch-cpu" not in fastmath.available_backends(), reason="no torch")
@pytest.mark.parametrize("own", [None, "50"])
def test_intel_openmps_threads_sleep_soon_after_a_call(own):
    """Once MKL is loaded, torch's VML calls (erf) run on Intel OpenMP's threads, which spin
    200 ms after each call by default: the process burned that much of a core asleep, and
    the numpy backend's calls beside it slowed. fastmath sets KMP_BLOCKTIME to 1 ms where
    the user has not set it (a user's own setting is kept)."""
    env = "" if own is None else f"        import os; os.environ['KMP_BLOCKTIME'] = {own!r}\n"
    out = _python(env + """
        import os, time
        import numpy as np, fastmath
        fastmath.available_backends()  # loads MKL
        x = np.linspace(-3, 3, 10**6)
        with fastmath.backend("torch-cpu"):
            for _ in range(3):
                fastmath.erf(x)
        cpu = time.process_time()
        time.sleep(0.3)
        print(os.environ["KMP_BLOCKTIME"], time.process_time() - cpu)
    """)
    setting, asleep = out.split()
    assert setting == (own or "1")
    if own is None:
        assert float(asleep) < 0.1  # 0.2 s with Intel OpenMP's default
