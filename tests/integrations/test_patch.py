"""fastmath.patch(): fastmath's functions swapped into numpy and scipy.special, process-wide,
and the very same original objects back afterwards."""
import importlib
import subprocess
import sys
import textwrap
import threading

import numpy
import pytest
import scipy.special

import fastmath
from fastmath import _registry
from fastmath.frontends._ufunc import Ufunc

from helpers import BACKENDS, assert_same


def _swapped():
    """(module, attribute, original object, fastmath's object) for every registry row."""
    rows = []
    for spec in _registry.ROWS:
        module_name, _, attr = spec.ref.partition(":")
        rows.append((importlib.import_module(module_name), attr, spec.reference(),
                     getattr(fastmath, spec.name)))
    return rows


ROWS = _swapped()


def assert_original():
    assert not fastmath.patch.active()
    for module, attr, original, _ in ROWS:
        assert getattr(module, attr) is original, (module.__name__, attr)


def assert_patched():
    assert fastmath.patch.active()
    for module, attr, _, ours in ROWS:
        assert getattr(module, attr) is ours, (module.__name__, attr)


def test_swaps_every_accelerated_function_and_restores_the_same_objects():
    assert {(m.__name__, a) for m, a, _, _ in ROWS} >= {
        ("numpy", "exp"), ("numpy", "log"), ("numpy", "log1p"), ("numpy", "expm1"),
        ("scipy.special", "erf"), ("scipy.special", "logsumexp")}
    assert_original()
    with fastmath.patch() as p:
        assert isinstance(p, fastmath.patch)
        assert_patched()
        assert numpy.exp is fastmath.exp and scipy.special.erf is fastmath.erf
    assert_original()


def test_restores_after_an_exception():
    with pytest.raises(ZeroDivisionError):
        with fastmath.patch():
            assert_patched()
            1 / 0
    assert_original()


def test_nested_and_repeated_use():
    with fastmath.patch():
        with fastmath.patch():
            assert_patched()
        assert_patched()  # the outer block is still active
        p = fastmath.patch()
        with p:
            with p:  # the same object, entered twice
                assert_patched()
        assert_patched()
    assert_original()
    for _ in range(3):
        with fastmath.patch():
            assert_patched()
        assert_original()


def test_start_stop_and_decorator():
    fastmath.patch.start()
    try:
        assert_patched()
        fastmath.patch.start()
        fastmath.patch.stop()
        assert_patched()
    finally:
        fastmath.patch.stop()
    assert_original()
    with pytest.raises(RuntimeError, match="no active patch"):
        fastmath.patch.stop()

    @fastmath.patch()
    def inside():
        return numpy.exp is fastmath.exp

    assert inside() is True
    assert_original()


def test_other_threads_see_the_patch():
    seen = []
    with fastmath.patch():
        t = threading.Thread(target=lambda: seen.append(numpy.log1p is fastmath.log1p))
        t.start()
        t.join()
    assert seen == [True]


@pytest.mark.parametrize("backend", BACKENDS)
def test_fastmath_still_computes_with_the_originals_while_patched(backend):
    # fastmath's own kernels call NumPy (logsumexp's finishing step, the numpy backend's
    # loops): while patched they must reach NumPy's functions, not fastmath's again, so
    # the results are the very same as outside the patch.
    rng = numpy.random.default_rng(0)
    x = rng.normal(size=300_000) * 20
    cases = [(fastmath.exp, (x,)), (fastmath.log1p, (numpy.abs(x),)), (fastmath.erf, (x / 20,)),
             (fastmath.logsumexp, (x,)), (fastmath.logsumexp, (x.reshape(600, 500),)),
             (fastmath.logsumexp, (x[:7],))]
    with fastmath.backend(backend):
        outside = [f(*args) for f, args in cases]
        with fastmath.patch():
            for spec in _registry.ROWS:
                assert not isinstance(spec.reference(), Ufunc)
            inside = [f(*args) for f, args in cases]
            via_scipy = scipy.special.logsumexp(x)
    for got, expected in zip(inside, outside):
        assert_same(got, expected)
    assert_same(via_scipy, outside[3])


def _kernel_calls(fn):
    """The names of the fastmath functions whose kernels ran while ``fn()`` ran."""
    seen = []

    def profile(frame, event, arg):
        if event == "call" and frame.f_code is Ufunc._run.__code__:
            seen.append(frame.f_locals["self"].__name__)

    sys.setprofile(profile)
    try:
        result = fn()
    finally:
        sys.setprofile(None)
    return result, seen


def test_pandas_code_runs_through_fastmath():
    pd = pytest.importorskip("pandas")
    x = numpy.linspace(0.0, 3.0, 11)

    def pandas_code():  # pandas' python engine looks up numpy.exp/log1p at call time
        return pd.eval("exp(x) + log1p(x)", engine="python", local_dict={"x": x})

    expected = numpy.exp(x) + numpy.log1p(x)
    with fastmath.patch(), fastmath.backend("numpy"):
        got, calls = _kernel_calls(pandas_code)
    assert sorted(calls) == ["exp", "log1p"]
    assert_same(got, expected)
    got, calls = _kernel_calls(pandas_code)
    assert calls == []
    assert_same(got, expected)


def test_a_third_party_module(tmp_path, monkeypatch):
    # What patch() can and cannot reach: a look-up at call time is rerouted, a name bound
    # at import time is not.
    (tmp_path / "thirdparty_mod.py").write_text(textwrap.dedent("""
        import numpy as np
        from numpy import exp as bound_exp

        def softplus(x):
            return np.log1p(np.exp(x))

        def early(x):
            return bound_exp(x)
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    import thirdparty_mod

    x = numpy.linspace(-5, 5, 9)
    with fastmath.patch(), fastmath.backend("numpy"):
        got, calls = _kernel_calls(lambda: thirdparty_mod.softplus(x))
        _, early_calls = _kernel_calls(lambda: thirdparty_mod.early(x))
    assert calls == ["exp", "log1p"]
    assert early_calls == []
    assert_same(got, numpy.log1p(numpy.exp(x)))


def test_numpy_and_scipy_ufuncs_stay_picklable_inside_and_after():
    import pickle

    ufuncs = [getattr(numpy, n) for n in dir(numpy) if isinstance(getattr(numpy, n), numpy.ufunc)]
    ufuncs += [getattr(scipy.special, n) for n in ("erf", "erfc", "expit", "gammaln", "ndtr",
                                                   "xlogy", "log_ndtr", "psi")]
    assert len(ufuncs) > 80

    def roundtrip_all():
        for f in ufuncs:
            for protocol in (2, pickle.HIGHEST_PROTOCOL):
                assert pickle.loads(pickle.dumps(f, protocol)) is f, f.__name__

    roundtrip_all()
    with fastmath.patch():
        roundtrip_all()
        # what numpy.exp names now is fastmath's, and pickles too
        assert pickle.loads(pickle.dumps(numpy.exp)) is fastmath.exp
    roundtrip_all()
    # a pickle made inside loads in a plain process without fastmath
    with fastmath.patch():
        data = pickle.dumps(ufuncs[:5])
    code = ("import pickle, sys, numpy; fs = pickle.loads(sys.stdin.buffer.read()); "
            "print(all(isinstance(f, numpy.ufunc) for f in fs), 'fastmath' in sys.modules)")
    r = subprocess.run([sys.executable, "-c", code], input=data, capture_output=True,
                       timeout=120)
    assert r.stdout.split() == [b"True", b"False"], r.stderr


def test_modules_first_imported_inside_get_the_originals_back(tmp_path, monkeypatch):
    (tmp_path / "late_mod.py").write_text(textwrap.dedent("""
        import numpy
        from numpy import exp, log1p
        from scipy.special import erf, logsumexp
        namespace = {"exp": numpy.exp}
        copied = type(numpy)("copied")
        copied.__dict__.update(vars(numpy))
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("late_mod", None)
    with fastmath.patch():
        import late_mod

        assert late_mod.exp is fastmath.exp and late_mod.erf is fastmath.erf
    assert late_mod.exp is numpy.exp and late_mod.log1p is numpy.log1p
    assert late_mod.erf is scipy.special.erf
    assert late_mod.logsumexp is scipy.special.logsumexp
    assert late_mod.copied.exp is numpy.exp
    assert late_mod.namespace["exp"] is fastmath.exp  # a dict inside a module is not reached


def test_extension_modules_imported_inside_see_numpys_ufuncs():
    """A compiled extension that looks NumPy's ufuncs up by name as it initialises, and
    registers loops on them at C level (NumPy's own _rational_tests here; ml_dtypes, which
    JAX imports, does the same), finds NumPy's objects even while the patch is active;
    fastmath's are back in place once it has loaded. Fails without the import window:
    "AssertionError: ufunc square takes <garbage> arguments"."""
    code = textwrap.dedent("""
        import numpy, fastmath
        from importlib.machinery import ExtensionFileLoader as L
        before = (L.create_module, L.exec_module)
        with fastmath.patch():
            import numpy._core._rational_tests as r
            assert numpy.square is fastmath.square and numpy.add is fastmath.add
            x = numpy.array([r.rational(1, 2), r.rational(-3, 4)])
            got = numpy.square(x)
        assert (L.create_module, L.exec_module) == before
        want = numpy.square(x)
        assert got.dtype == want.dtype and list(got) == list(want), (got, want)
        print("ok")
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=180)
    assert r.stdout.strip() == "ok", r.stderr[-2000:]


def test_ml_dtypes_imports_inside_the_patch():
    pytest.importorskip("ml_dtypes")  # not imported here: the child imports it first
    code = textwrap.dedent("""
        import numpy, fastmath
        with fastmath.patch():
            import ml_dtypes
            x = numpy.array([0.5, 2.0], ml_dtypes.bfloat16)
            got = numpy.logaddexp(x, x)
        want = numpy.logaddexp(x, x)
        assert got.dtype == want.dtype and got.tobytes() == want.tobytes()
        print("ok")
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=180)
    assert r.stdout.strip() == "ok", r.stderr[-2000:]


def test_c_code_that_registers_loops_when_called_sees_numpys_ufuncs():
    """NumPy's test DType registers its loops the first time it is asked for, at C level,
    on the ufunc it finds as ``numpy.hypot`` (NumPy's test_custom_dtypes.py does so at
    import). Under the patch it gets NumPy's ufunc, and the loop it adds serves
    ``numpy.hypot`` (fastmath's, which hands the new dtype to NumPy) inside and after.
    Fails without the fix: "TypeError: numpy.hypot was not a ufunc!"."""
    code = textwrap.dedent("""
        import numpy, fastmath
        import numpy._core._multiarray_umath as m
        plain = m._get_sfloat_dtype
        with fastmath.patch():
            from numpy._core._multiarray_umath import _get_sfloat_dtype
            SF = _get_sfloat_dtype()
            assert numpy.hypot is fastmath.hypot
            a = numpy.array([3.0, 5.0]).view(SF(2.0))
            b = numpy.array([4.0, 12.0]).view(SF(2.0))
            got = numpy.hypot(a, b)
        assert m._get_sfloat_dtype is plain
        want = numpy.hypot(a, b)
        assert got.dtype == want.dtype == SF(2.0), (got.dtype, want.dtype)
        assert got.view(numpy.float64).tolist() == want.view(numpy.float64).tolist() \\
            == [5.0, 13.0]
        print("ok")
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=180)
    assert r.stdout.strip() == "ok", r.stderr[-2000:]


def test_originals_that_are_not_ufuncs_pickle_as_themselves():
    # SciPy holds NumPy's own sinc (scipy.special.sinc), and pickles it by reference: the
    # name pickle finds it by, numpy.sinc, is fastmath's while patched. Fails without the
    # fix: "it's not the same object as numpy.sinc".
    import pickle

    originals = [(module, attr, original) for module, attr, original, _ in ROWS
                 if not isinstance(original, numpy.ufunc)]
    assert {attr for _, attr, _ in originals} >= {"sinc", "i0", "logsumexp", "softmax"}
    names = [(f.__module__, f.__qualname__) for _, _, f in originals]
    with fastmath.patch():
        assert scipy.special.sinc is not numpy.sinc
        for _, attr, original in originals:
            for protocol in (2, pickle.HIGHEST_PROTOCOL):
                assert pickle.loads(pickle.dumps(original, protocol)) is original, attr
        data = pickle.dumps([f for _, _, f in originals])
    assert [(f.__module__, f.__qualname__) for _, _, f in originals] == names
    assert pickle.loads(data) == [f for _, _, f in originals]
    # and the pickle made inside loads as the originals in a process without fastmath
    code = ("import pickle, sys, numpy, scipy.special as s; fs = pickle.loads("
            "sys.stdin.buffer.read()); print(fs[:2] == [numpy.sinc, numpy.i0], "
            "s.logsumexp in fs, 'fastmath' in sys.modules)")
    order = [attr for _, attr, _ in originals]
    assert order[:2] == ["sinc", "i0"], order
    r = subprocess.run([sys.executable, "-c", code], input=data, capture_output=True,
                       timeout=120)
    assert r.stdout.split() == [b"True", b"True", b"False"], r.stderr


def test_scipy_tables_keyed_by_function_know_fastmaths_functions():
    # SciPy's tests look a function's array-API capabilities up by the function object
    # they imported (make_xp_test_case(logsumexp)); under the patch that is fastmath's.
    # Fails without the fix: KeyError at collection of SciPy's test_logsumexp.py.
    from scipy._lib._array_api import make_xp_test_case, xp_capabilities_table as table

    rows = [(original, ours) for _, _, original, ours in ROWS if original in table]
    assert {o.__name__ for o, _ in rows} >= {"logsumexp", "softmax", "log_softmax", "erf"}
    before = dict(table)
    with fastmath.patch():
        from scipy.special import logsumexp

        assert logsumexp is fastmath.logsumexp
        make_xp_test_case(logsumexp)
        for original, ours in rows:
            assert table[ours] == table[original], original.__name__
    assert table == before and fastmath.logsumexp not in table


def test_the_import_window_nests_and_outlives_no_patch():
    from fastmath.integrations import _patch

    with fastmath.patch():
        with _patch._window.originals():
            assert numpy.exp is not fastmath.exp and isinstance(numpy.exp, numpy.ufunc)
            assert isinstance(numpy.square, numpy.ufunc)
            with _patch._window.originals():
                assert isinstance(numpy.exp, numpy.ufunc)
            assert isinstance(numpy.exp, numpy.ufunc)  # the outer import still under way
        assert numpy.exp is fastmath.exp
        window = _patch._window.originals()
        window.__enter__()
    # the patch ended while an import was under way: the import's end puts nothing back
    window.__exit__(None, None, None)
    assert isinstance(numpy.exp, numpy.ufunc)
    window = _patch._window.originals()
    window.__enter__()
    with fastmath.patch():  # begun while an import is under way: in place once it ends
        assert isinstance(numpy.exp, numpy.ufunc)
        window.__exit__(None, None, None)
        assert numpy.exp is fastmath.exp
    assert isinstance(numpy.exp, numpy.ufunc)


def test_old_ufunc_pickles_load_as_what_the_name_is_now():
    """A pre-1.20 pickle of numpy.cos (through numpy.core._ufunc_reconstruct; NumPy's
    test_ufunc.py::test_pickle_withstring) loads as numpy.cos in and out of the patch, as a
    pickle by name does."""
    import pickle

    old = (b"cnumpy.core\n_ufunc_reconstruct\np0\n"
           b"(S'numpy._core.umath'\np1\nS'cos'\np2\ntp3\nRp4\n.")
    assert pickle.loads(old) is numpy.cos
    with fastmath.patch():
        assert pickle.loads(old) is numpy.cos is fastmath.cos
        assert pickle.loads(pickle.dumps(numpy.cos)) is fastmath.cos
    assert pickle.loads(old) is numpy.cos and isinstance(numpy.cos, numpy.ufunc)
    from numpy.core import _ufunc_reconstruct
    assert _ufunc_reconstruct.__module__ == "numpy.core"  # NumPy's own again


@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="no fork here")
def test_a_child_forked_during_an_extension_import_does_not_hang():
    """A child forked while another thread was inside an extension import (the window's
    lock held, the originals in place) has no such thread: its imports under the patch
    must not wait for it, and fastmath's objects are back in place in it. A child forked
    by the importing thread itself keeps the originals until that import ends."""
    code = textwrap.dedent("""
        import os, threading, numpy, fastmath
        from fastmath.integrations import _patch
        fastmath.patch.start()
        inside, leave = threading.Event(), threading.Event()

        def importing():
            with _patch._window.originals():
                with _patch._window.lock:
                    inside.set()
                    leave.wait()

        t = threading.Thread(target=importing)
        t.start()
        inside.wait()
        pid = os.fork()
        if pid == 0:
            ok = numpy.exp is fastmath.exp
            with _patch._window.originals():
                ok = ok and isinstance(numpy.exp, numpy.ufunc)
            import numpy._core._rational_tests
            ok = ok and numpy.exp is fastmath.exp
            fastmath.patch.stop()
            os._exit(0 if ok and isinstance(numpy.exp, numpy.ufunc) else 3)
        leave.set()
        t.join()
        _, status = os.waitpid(pid, 0)
        print("child", os.waitstatus_to_exitcode(status))
        with _patch._window.originals():  # the forking thread's own import goes on
            pid = os.fork()
            if pid == 0:
                ok = isinstance(numpy.exp, numpy.ufunc)
        if pid == 0:
            os._exit(0 if ok and numpy.exp is fastmath.exp else 3)
        _, status = os.waitpid(pid, 0)
        print("child", os.waitstatus_to_exitcode(status))
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=120)
    assert r.stdout.split("\n") == ["child 0", "child 0", ""], r.stdout + r.stderr[-2000:]
