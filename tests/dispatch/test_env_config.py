"""Configuration by environment variable, as a job script sets it, and what
``python -m fastmath info`` reports about where each setting came from."""
import ast
import importlib.util
import json
import os
import subprocess
import sys

import pytest

VARS = ("FASTMATH_BACKEND", "FASTMATH_NUM_THREADS", "FASTMATH_STRICT", "FASTMATH_CALIBRATION")


def info(*args, **env):
    clean = {k: v for k, v in os.environ.items() if not k.startswith("FASTMATH_")}
    r = subprocess.run([sys.executable, "-m", "fastmath", "info", *args], capture_output=True,
                       text=True, timeout=120, env={**clean, **env})
    assert r.returncode == 0, r.stderr
    return r


def test_defaults_say_they_are_defaults():
    s = json.loads(info("--json").stdout)["settings"]
    assert s["backend"] == {"value": "auto", "source": "default"}
    assert s["threads"]["value"] == len(os.sched_getaffinity(0))
    assert s["threads"]["source"].startswith("default")
    assert s["strict"] == {"value": False, "source": "default"}
    assert s["calibration"]["value"] is None


def test_every_variable_is_read_and_attributed(tmp_path):
    cal = tmp_path / "cal.json"
    cal.write_text("{}")
    env = {"FASTMATH_BACKEND": "numpy", "FASTMATH_NUM_THREADS": "3",
           "FASTMATH_STRICT": "1", "FASTMATH_CALIBRATION": str(cal)}
    d = json.loads(info("--json", **env).stdout)
    s = d["settings"]
    assert s["backend"] == {"value": "numpy", "source": "FASTMATH_BACKEND=numpy"}
    assert s["threads"] == {"value": 3, "source": "FASTMATH_NUM_THREADS=3"}
    assert s["strict"] == {"value": True, "source": "FASTMATH_STRICT=1"}
    # "{}" is no calibration: the defaults are in force, and info says so and why
    assert s["calibration"]["value"] is None
    assert f"FASTMATH_CALIBRATION={cal}: ignoring" in s["calibration"]["source"]
    assert d["threads"] == 3 and d["selection"]["backend"] == "numpy"
    text = info(**env).stdout
    for var in VARS:  # the table may shorten long values; --json above has them whole
        assert f"{var}=" in text, var


def test_bad_values_warn_and_say_so():
    env = {"FASTMATH_BACKEND": "fastest", "FASTMATH_NUM_THREADS": "many",
           "FASTMATH_STRICT": "perhaps", "FASTMATH_CALIBRATION": "/nonexistent/cal.json"}
    r = info("--json", **env)
    for var in ("FASTMATH_BACKEND", "FASTMATH_NUM_THREADS", "FASTMATH_STRICT"):
        assert var in r.stderr  # the ConfigWarning names the variable
    s = json.loads(r.stdout)["settings"]
    assert s["backend"]["value"] == "auto"
    assert "FASTMATH_BACKEND='fastest' ignored: is not a backend" in s["backend"]["source"]
    assert s["threads"]["value"] == len(os.sched_getaffinity(0))
    assert "FASTMATH_NUM_THREADS='many' ignored" in s["threads"]["source"]
    assert s["strict"]["value"] is False and "ignored" in s["strict"]["source"]
    assert "no such file" in s["calibration"]["source"]


def test_set_backend_is_attributed_over_the_variable():
    code = ("import fastmath; fastmath.set_backend('numpy');"
            "print(fastmath.info()['settings']['backend'])")
    clean = {k: v for k, v in os.environ.items() if not k.startswith("FASTMATH_")}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=120, env={**clean, "FASTMATH_BACKEND": "torch-cpu"})
    assert r.returncode == 0, r.stderr
    assert "'source': 'set_backend()'" in r.stdout


def _run(code, **env):
    clean = {k: v for k, v in os.environ.items() if not k.startswith("FASTMATH_")}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, env={**clean, **env})


def test_an_empty_variable_is_unset():
    env = {v: "" for v in VARS} | {"FASTMATH_LOG": " ", "FASTMATH_CUDA_MEMORY": ""}
    r = info("--json", **env)
    assert "ConfigWarning" not in r.stderr and "FASTMATH_" not in r.stderr
    s = json.loads(r.stdout)["settings"]
    assert s["backend"] == {"value": "auto", "source": "default"}
    assert s["strict"] == {"value": False, "source": "default"}
    assert s["threads"]["source"].startswith("default")


def test_case_is_ignored_in_the_variable_and_in_set_backend_alike():
    code = ("import fastmath; a = fastmath.get_backend(); fastmath.set_backend('NUMPY ');"
            "b = fastmath.get_backend()\nwith fastmath.backend('Torch-CPU'):"
            " c = fastmath.get_backend()\nprint(a, b, c)")
    r = _run(code, FASTMATH_BACKEND="TORCH-CPU", FASTMATH_STRICT="Yes", FASTMATH_LOG="WARNING")
    assert r.returncode == 0 and r.stderr == "", r.stderr
    assert r.stdout.split() == ["torch-cpu", "numpy", "torch-cpu"]


def test_a_bad_variable_warns_at_the_callers_import_line(tmp_path):
    script = tmp_path / "job.py"
    script.write_text("import warnings\nwarnings.simplefilter('always')\n"
                      "with warnings.catch_warnings(record=True) as w:\n"
                      "    import fastmath  # line 4\n"
                      "    fastmath.dispatch._config.reload()  # line 5\n"
                      "print([(x.filename, x.lineno, x.category.__name__) for x in w])\n")
    clean = {k: v for k, v in os.environ.items() if not k.startswith("FASTMATH_")}
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                       timeout=120, env={**clean, "FASTMATH_BACKEND": "fastest"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == str([(str(script), 4, "ConfigWarning"),
                                    (str(script), 5, "ConfigWarning")])


_AT_IMPORT = """import sys
sys.modules['numexpr'] = None  # as if numexpr were not installed
import warnings
warnings.simplefilter('always')
with warnings.catch_warnings(record=True) as w:
    import fastmath, numpy  # line 6
    x = numpy.full(10**6, 0.5)
    try:
        ok = bool((fastmath.exp(x) == numpy.exp(x)).all() and fastmath.exp(0.5) == numpy.exp(0.5))  # line 9
    except fastmath.FallbackError:
        ok = 'FallbackError'
print([(x.filename, x.lineno, x.category.__name__) for x in w])
print([str(x.message) for x in w])
print([fastmath.get_backend(), fastmath.info()['selection']['source'], ok])
print(fastmath.info()['settings']['backend'])
print('torch' in sys.modules)
"""


def _at_import(tmp_path, **env):
    script = tmp_path / "job.py"
    script.write_text(_AT_IMPORT)
    clean = {k: v for k, v in os.environ.items() if not k.startswith("FASTMATH_")}
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                       timeout=120, env={**clean, **env})
    assert r.returncode == 0, r.stderr
    where, messages, state, setting, torch = map(ast.literal_eval, r.stdout.splitlines())
    return str(script), where, messages, state, setting, torch


def test_an_unavailable_backend_warns_once_at_import_and_auto_is_in_force(tmp_path):
    # as set_backend() refuses it; before, the first call warned from fastmath's own line
    # and NumPy ran every call while get_backend() still named the missing backend
    script, where, messages, state, setting, _ = _at_import(tmp_path, FASTMATH_BACKEND="numexpr")
    assert where == [(script, 6, "ConfigWarning")]
    assert messages[0].startswith("FASTMATH_BACKEND='numexpr' is unavailable here (numexpr is "
                                  "not installed")
    assert "using 'auto'. Available here: auto, numpy" in messages[0]
    assert state == ["auto", "default", True]
    assert setting["value"] == "auto"
    assert "FASTMATH_BACKEND='numexpr' ignored: unavailable here" in setting["source"]


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed")
def test_a_backend_found_unusable_at_its_first_call_warns_there_and_auto_takes_over(tmp_path):
    """torch-cuda with torch installed: whether there is a GPU takes importing torch, which
    import fastmath never does; the first call finds out, warns at its line, and auto runs."""
    from fastmath import backends

    if backends.why_unavailable("torch-cuda") is None:
        pytest.skip("a GPU is here")
    script, where, messages, state, setting, torch = _at_import(
        tmp_path, FASTMATH_BACKEND="torch-cuda")
    assert where == [(script, 9, "ConfigWarning")]
    assert messages[0].startswith("FASTMATH_BACKEND='torch-cuda' is unavailable here (torch "
                                  "sees no CUDA device); using 'auto'")
    assert state == ["auto", "default", True]
    assert setting["value"] == "auto"


def test_import_alone_never_imports_the_named_backends_library(tmp_path):
    script = tmp_path / "job.py"
    script.write_text("import sys, fastmath\nprint('torch' in sys.modules)\n")
    clean = {k: v for k, v in os.environ.items() if not k.startswith("FASTMATH_")}
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                       timeout=120, env={**clean, "FASTMATH_BACKEND": "torch-cpu"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "False"


def test_strict_keeps_an_unavailable_backend_so_its_calls_raise(tmp_path):
    name = "numexpr"
    script, where, messages, state, setting, _ = _at_import(
        tmp_path, FASTMATH_BACKEND=name, FASTMATH_STRICT="1")
    assert where == [(script, 6, "ConfigWarning")]
    assert "FASTMATH_STRICT=1 keeps it, so each call raises fastmath.FallbackError" in messages[0]
    assert state == [name, "FASTMATH_BACKEND", "FallbackError"]
    assert setting == {"value": name, "source": f"FASTMATH_BACKEND={name}"}
