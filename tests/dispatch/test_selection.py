"""Choosing a backend: set_backend, backend() scopes across threads and asyncio tasks,
FASTMATH_* variables, strict mode, and what is reported about them."""
import asyncio
import json
import os
import subprocess
import sys
import threading

import numpy as np
import pytest

import fastmath
from fastmath.dispatch import _config, _selection

HAS_TORCH = "torch-cpu" in fastmath.available_backends()
HAS_GPU = "torch-cuda" in fastmath.available_backends()
needs_no_gpu = pytest.mark.skipif(HAS_GPU, reason="checks what happens without a GPU")


def run_python(code, **env):
    """Run code in a fresh interpreter with FASTMATH_* taken from ``env`` only."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("FASTMATH_")}
    environ.update(env)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=environ, timeout=120)


def test_set_and_get():
    assert fastmath.get_backend() == "auto"
    fastmath.set_backend("numpy")
    assert fastmath.get_backend() == "numpy"


@pytest.mark.parametrize("bad", ["nump", "", None, 3, "torch"])
def test_unknown_backend_names_the_valid_ones(bad):
    for use in (fastmath.set_backend, fastmath.backend):
        with pytest.raises(ValueError) as e:
            use(bad)
        for name in ("auto", "numpy", "numexpr", "torch-cpu", "torch-cuda"):
            assert name in str(e.value)
    assert fastmath.get_backend() == "auto"


@needs_no_gpu
def test_unavailable_backend_says_why():
    with pytest.raises(ValueError, match="torch-cuda.*unavailable.*CUDA"):
        fastmath.set_backend("torch-cuda")
    assert fastmath.get_backend() == "auto"


def test_available_backends():
    names = fastmath.available_backends()
    assert names[0] == "auto" and "numpy" in names
    assert ("torch-cuda" in names) == HAS_GPU
    assert ("torch-cpu" in names) == HAS_TORCH


def test_scope_nests_and_restores_even_on_error():
    with fastmath.backend("numpy") as scope:
        assert fastmath.get_backend() == "numpy"
        if HAS_TORCH:
            with fastmath.backend("torch-cpu"):
                assert fastmath.get_backend() == "torch-cpu"
            assert fastmath.get_backend() == "numpy"
        with scope:  # the same object entered again
            assert fastmath.get_backend() == "numpy"
    assert fastmath.get_backend() == "auto"
    with pytest.raises(KeyError):
        with fastmath.backend("numpy"):
            raise KeyError
    assert fastmath.get_backend() == "auto"


def test_decorator_form():
    @fastmath.backend("numpy")
    def inner(x):
        return fastmath.get_backend(), fastmath.exp(x)

    @fastmath.backend("numpy")
    def gen():
        yield fastmath.get_backend()

    assert inner(np.ones(3))[0] == "numpy"
    assert inner.__name__ == "inner"
    assert fastmath.get_backend() == "auto"
    assert list(gen()) == ["numpy"]


def test_threads_do_not_see_each_others_scope():
    barrier = threading.Barrier(4)
    seen = {}

    def work(i, name):
        with fastmath.backend(name):
            barrier.wait()
            seen[i] = fastmath.get_backend()
            x = np.linspace(0, 1, 200_000)
            np.testing.assert_array_equal(fastmath.exp(x), np.exp(x)) if name == "numpy" \
                else np.testing.assert_allclose(fastmath.exp(x), np.exp(x), rtol=5e-16)
            barrier.wait()

    names = ["numpy", "auto", "numpy", "torch-cpu" if HAS_TORCH else "auto"]
    threads = [threading.Thread(target=work, args=(i, n)) for i, n in enumerate(names)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [seen[i] for i in range(4)] == names


def test_one_scope_object_shared_by_threads():
    scope = fastmath.backend("numpy")
    barrier = threading.Barrier(3)
    seen = []

    def work():
        with scope:
            barrier.wait()
            with scope:
                seen.append(fastmath.get_backend())
            barrier.wait()
        seen.append(fastmath.get_backend())

    threads = [threading.Thread(target=work) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(seen) == ["auto"] * 3 + ["numpy"] * 3


def test_asyncio_tasks_do_not_see_each_others_scope():
    async def task(name):
        with fastmath.backend(name):
            await asyncio.sleep(0.01)
            return fastmath.get_backend()

    async def main():
        return await asyncio.gather(task("numpy"), task("auto"), task("numpy"))

    assert asyncio.run(main()) == ["numpy", "auto", "numpy"]


def test_process_default_is_seen_by_other_threads():
    fastmath.set_backend("numpy")
    out = []
    t = threading.Thread(target=lambda: out.append(fastmath.get_backend()))
    t.start()
    t.join()
    assert out == ["numpy"]


def test_env_backend_is_read():
    r = run_python("import fastmath; print(fastmath.get_backend())", FASTMATH_BACKEND="numpy")
    assert r.stdout.strip() == "numpy" and r.returncode == 0


def test_bad_env_value_warns_once_and_uses_auto():
    r = run_python("import warnings; warnings.simplefilter('always');"
                   "import fastmath, numpy; fastmath.exp(numpy.ones(3));"
                   "print(fastmath.get_backend())", FASTMATH_BACKEND="gpu-please")
    assert r.stdout.strip() == "auto"
    assert r.stderr.count("FASTMATH_BACKEND='gpu-please'") == 1
    assert "torch-cpu" in r.stderr and "auto" in r.stderr


@pytest.mark.parametrize("var,value,words", [
    ("FASTMATH_NUM_THREADS", "many", "positive integer"),
    ("FASTMATH_NUM_THREADS", "0", "positive integer"),
    ("FASTMATH_STRICT", "maybe", "boolean"),
])
def test_other_bad_env_values_warn(var, value, words):
    r = run_python("import fastmath", **{var: value})
    assert r.returncode == 0 and words in r.stderr and var in r.stderr


def test_config_reading():
    cfg = _config.read({"FASTMATH_BACKEND": " NumPy ", "FASTMATH_NUM_THREADS": "3",
                        "FASTMATH_STRICT": "yes", "FASTMATH_CALIBRATION": "~/c.json"})
    assert cfg.backend == "numpy" and cfg.num_threads == 3 and cfg.strict
    assert cfg.calibration.endswith("/c.json") and "~" not in cfg.calibration
    assert _config.read({}).num_threads == _config.default_threads()


def test_num_threads_changes_the_pool():
    x = np.linspace(-1, 1, 2_000_000)
    try:
        for n in ("1", "3"):
            _config.reload({"FASTMATH_NUM_THREADS": n})
            with fastmath.backend("numpy"):
                np.testing.assert_array_equal(fastmath.exp(x), np.exp(x))
            assert fastmath.info()["threads"] == int(n)
    finally:
        _config.reload()


def test_strict_mode_refuses_to_fall_back():
    if not HAS_TORCH:
        pytest.skip("needs a second backend that declines float16")
    x = np.ones(10, dtype=np.float16)
    try:
        _config.reload({"FASTMATH_STRICT": "1"})
        with fastmath.backend("torch-cpu"):
            with pytest.raises(fastmath.FallbackError, match="torch-cpu.*FASTMATH_STRICT"):
                fastmath.exp(x)
            fastmath.exp(x.astype(np.float32))  # what it can run, it runs
        with fastmath.backend("numpy"):
            fastmath.exp(x)  # numpy takes everything
    finally:
        _config.reload()
    with fastmath.backend("torch-cpu"):
        np.testing.assert_array_equal(fastmath.exp(x), np.exp(x))  # falls back silently


@needs_no_gpu
def test_env_unavailable_backend_warns_once():
    r = run_python("import warnings; warnings.simplefilter('always');"
                   "import fastmath, numpy; fastmath.exp(numpy.ones(3)); fastmath.exp(numpy.ones(3));"
                   "print(fastmath.get_backend())", FASTMATH_BACKEND="torch-cuda")
    assert r.returncode == 0, r.stderr
    assert r.stderr.count("'torch-cuda' is unavailable") == 1
    r = run_python("import fastmath, numpy; fastmath.exp(numpy.ones(3))",
                   FASTMATH_BACKEND="torch-cuda", FASTMATH_STRICT="1")
    assert r.returncode != 0 and "FallbackError" in r.stderr


def test_info():
    d = fastmath.info()
    assert d["backends"]["numpy"] == "available"
    assert (d["backends"]["torch-cuda"] == "available") == HAS_GPU
    assert d["selection"] == {"backend": "auto", "source": "default"}
    with fastmath.backend("numpy"):
        assert fastmath.info()["selection"]["backend"] == "numpy"
    json.dumps(d)


def test_info_command():
    r = subprocess.run([sys.executable, "-m", "fastmath", "info"], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    for word in ("numpy", "torch-cpu", "threads", "selection"):
        assert word in r.stdout
    r = subprocess.run([sys.executable, "-m", "fastmath", "info", "--json"],
                       capture_output=True, text=True, timeout=120)
    assert json.loads(r.stdout)["backends"]["numpy"] == "available"


def test_plan_is_cached():
    spec = fastmath.exp._spec
    with fastmath.backend("numpy"):
        assert _selection.plan(spec, "float64", 10) is _selection.plan(spec, "float64", 10)
