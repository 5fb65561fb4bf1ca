"""Where torch's CPU op is a call of its VML (exp, log, erf: aten/src/ATen/cpu/vml.h) or a loop
over one of SLEEF's vector functions (log1p, expm1), the torch-cpu backend runs that entry
point of torch's own library on fastmath's runtime: torch's very bits, split over the pool,
NumPy's flags read from each piece while it is in cache, never from a second pass over the
whole output."""
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import fastmath
from fastmath import backends
from fastmath._registry import BY_NAME

pytestmark = pytest.mark.skipif(backends.why_unavailable("torch-cpu") is not None,
                                reason="torch is not installed")
_runtime = pytest.importorskip("fastmath.dispatch._runtime")

RUNTIME_OPS = ("exp", "log", "erf", "log1p", "expm1")


def kernel(name):
    return backends.get("torch-cpu").kernel(BY_NAME[name])


def torch_op(name, x):
    import torch

    fn = torch.special.erf if name == "erf" else getattr(torch, name)
    return fn(torch.from_numpy(x)).numpy()


@pytest.mark.parametrize("name", RUNTIME_OPS)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_torchs_ops_give_torchs_bits_split_over_the_runtime(name, dtype):
    from fastmath.dispatch import _verify

    if _runtime.threads() < 2:
        pytest.skip("one thread: nothing splits")
    k = kernel(name)
    assert k.runtime_pace >= 0
    rng = np.random.default_rng(5)
    x = rng.uniform(-50, 50, 10**6).astype(dtype)
    special = _verify.special_values(dtype)
    x[rng.integers(0, x.size, special.size)] = special
    before = _runtime.set_pacing(False)  # every call split, whatever the machine's load
    try:
        joins = _runtime.stats()["joins"]
        for n in (1, 17, 10**5, 10**6 - 3):  # with a tail shorter than a register
            out = np.empty(n, dtype)
            with np.errstate(all="ignore"):
                k(x[:n], out)
                assert out.tobytes() == torch_op(name, x[:n]).tobytes(), n
        y = x[:10**5].copy()  # in place
        with np.errstate(all="ignore"):
            k(y, y)
            assert y.tobytes() == torch_op(name, x[:10**5]).tobytes()
            for _ in range(50):  # (a parked worker may wake too late for a call, loaded)
                if _runtime.stats()["joins"] > joins:
                    break
                k(x[:out.size], out)
        assert _runtime.stats()["joins"] > joins  # the pool's threads took pieces
    finally:
        _runtime.set_pacing(before)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_no_second_pass_over_the_output_for_numpys_flags(monkeypatch, dtype):
    """Forced torch-cpu: NumPy's overflow, divide and invalid warnings, at the user's line,
    with no look at the output after torch's call (backends/_flags.flags_possible)."""
    from fastmath.backends import _flags, _vml, torch as backend

    def no_pass(out):
        raise AssertionError("a second pass over the whole output")
    for module in (_flags, _vml, backend):
        monkeypatch.setattr(module, "flags_possible", no_pass)
    x = np.linspace(0.5, 2, 10**5 + 3, dtype=dtype)  # a tail shorter than a register
    with fastmath.backend("torch-cpu"):
        for name in RUNTIME_OPS:
            spec = BY_NAME[name]
            with np.errstate(all="raise"):  # nothing raised where NumPy raises nothing
                got = getattr(fastmath, name)(x)
            # within the row's stated bound (tests/frontends/test_parity.py measures it)
            np.testing.assert_array_max_ulp(got, spec.reference()(x),
                                            spec.bound(dtype, "torch-cpu"))
        for name, bad, message in (("exp", 1000.0, "overflow"), ("log", 0.0, "divide by zero"),
                                   ("log", -1.0, "invalid value"), ("expm1", 1000.0, "overflow"),
                                   ("log1p", -1.0, "divide by zero"),
                                   ("log1p", -2.0, "invalid value")):
            for at in (77_777, -1):  # in a whole register, in the tail
                y = x.copy()
                y[at] = bad
                with pytest.warns(RuntimeWarning, match=message) as caught:
                    getattr(fastmath, name)(y)
                assert caught[0].filename == __file__


@pytest.mark.parametrize("bits", [512, 256])
def test_each_register_width_gives_torchs_bits_and_sees_an_inf_anywhere(bits):
    """The runtime's vector loop at either width (AVX-512 or AVX2 builds of SLEEF's
    functions, as torch's loops call them on CPUs with or without AVX-512): whole
    registers, the tail, and an inf in the first or the last element, seen."""
    import torch

    from fastmath.backends import torch as backend

    lib = backend._torch_cpu_library()
    _, lanes, isa = next(v for v in backend._VECTOR_NAMES if v[0] == bits)
    pace = _runtime.new_pace()
    try:
        for dt, width in lanes.items():
            fn = backend.address(getattr(lib, f"Sleef_log1p{width}_u10{isa}"))
            for n in (1, 7, 17, 1000, 4099):
                x = np.linspace(-0.5, 3, n, dtype=dt)
                out = np.empty_like(x)
                seen = _runtime.vector(fn, bits, x, out, pace, 0, 2, True)
                if seen is None:
                    pytest.skip("this CPU lacks the instructions")
                assert seen is False
                assert out.tobytes() == torch.log1p(torch.from_numpy(x)).numpy().tobytes()
                for at in (0, -1):
                    y = x.copy()
                    y[at] = -1.0  # log1p(-1) = -inf
                    with np.errstate(all="ignore"):
                        assert _runtime.vector(fn, bits, y, out, pace, 0, 2, True) is True
                        assert _runtime.vector(fn, bits, y, out, pace, 0, 2, False) is False
    finally:
        _runtime.free_pace(pace)


@pytest.mark.parametrize("name", ["exp", "log1p"])  # a VML route, a SLEEF route
def test_an_output_overlapping_the_input_other_than_exactly_is_declined(name):
    # pieces run in any order would read what others wrote: the runtime's call declines,
    # nothing written, and the caller's other path (which copies) takes it
    k = kernel(name)
    spec = k.vml_entry(np.dtype(np.float64)) if hasattr(k, "vml_entry") else None
    if spec is None:
        pytest.skip(f"torch's {name} does not run on the runtime here")
    x = np.linspace(0.1, 1, 1 << 18)
    before = x.copy()
    assert _runtime.vml_entry(spec, x[:-8], x[8:], True) is None
    assert _runtime.vml_entry(spec, x[8:], x[:-8], True) is None
    assert x.tobytes() == before.tobytes()
    y = x.copy()
    assert _runtime.vml_entry(spec, y, y, True) is False  # exactly in place: taken
    assert y.tobytes() == torch_op(name, x).tobytes()


@pytest.mark.skipif(backends.why_unavailable("mkl") is not None, reason="MKL is not installed")
def test_torch_after_oneMKL_in_one_process_gives_torchs_bits():
    # oneMKL's library loaded before torch makes its services global, and the dynamic linker
    # binds torch's copy of MKL to them: torch's VML entry points called directly then
    # crashed (a segfault on an Intel Xeon). The mkl backend first, torch-cpu after, in a
    # process of its own; and the other order, where torch's entry points stay usable.
    code = textwrap.dedent("""
        import sys, numpy as np, fastmath
        from fastmath import backends
        from fastmath._registry import BY_NAME
        import fastmath.dispatch._runtime as rt
        rt.set_pacing(False)  # every call split over the pool
        if sys.argv[1] == "torch":
            import torch
        with fastmath.backend("mkl"):
            fastmath.exp(np.ones(10**5, np.float32)), fastmath.exp(np.ones(10**5))
        import torch
        on_runtime = []
        for name in ("exp", "log", "erf"):
            k = backends.get("torch-cpu").kernel(BY_NAME[name])
            on_runtime.append(hasattr(k, "vml_entry"))
            fn = torch.special.erf if name == "erf" else getattr(torch, name)
            for dt in (np.float32, np.float64):
                x = np.linspace(0.01, 4, 10**5 + 3, dtype=dt)
                with fastmath.backend("torch-cpu"):
                    got = getattr(fastmath, name)(x)
                assert got.tobytes() == fn(torch.from_numpy(x)).numpy().tobytes(), name
        print(on_runtime)
    """)
    for first, routed in (("mkl", "[False, False, False]"), ("torch", "[True, True, True]")):
        r = subprocess.run([sys.executable, "-c", code, first], capture_output=True,
                           text=True, timeout=120)
        assert r.returncode == 0, r.stderr[-2000:]
        assert r.stdout.split() == routed.split(), first
