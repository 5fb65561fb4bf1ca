"""The first torch-backed call says what it cost, and fastmath.warmup() pays it ahead of time."""
import subprocess
import sys

import numpy as np
import pytest
import scipy.special

import fastmath


def _run(code, **env):
    import os

    clean = {k: v for k, v in os.environ.items() if not k.startswith("FASTMATH_")}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=180, env={**clean, **env})
    assert r.returncode == 0, r.stderr
    return r


def test_first_torch_use_logs_the_import_and_its_time():
    if "torch-cpu" not in fastmath.available_backends():
        pytest.skip("torch is not installed")
    r = _run("import sys, numpy, fastmath\nassert 'torch' not in sys.modules\n"
             "with fastmath.backend('torch-cpu'):\n"
             "    fastmath.exp(numpy.ones(10)); fastmath.exp(numpy.ones(10))\n",
             FASTMATH_LOG="info")
    lines = [x for x in r.stderr.splitlines() if "imported torch" in x]
    assert len(lines) == 1, r.stderr  # once, at the import, not at every call
    assert lines[0].startswith("fastmath INFO: imported torch ")
    assert " s for the first torch-backed call" in lines[0] and "fastmath.warmup()" in lines[0]


def test_no_log_line_when_the_caller_had_imported_torch():
    pytest.importorskip("torch")
    r = _run("import torch, numpy, fastmath\nwith fastmath.backend('torch-cpu'):\n"
             "    fastmath.exp(numpy.ones(10))\n", FASTMATH_LOG="info")
    assert "imported torch" not in r.stderr


def test_warmup_imports_ahead_and_results_stay_numpys():
    r = _run("import sys, numpy, scipy.special, fastmath\n"
             "taken = fastmath.warmup()\n"
             "print(list(taken), all(t >= 0 for t in taken.values()))\n"
             "print(sorted(m for m in ('torch', 'numexpr', 'scipy.special') if m in sys.modules))\n")
    names, ok = r.stdout.splitlines()[0].rsplit(" ", 1)
    avail = fastmath.available_backends()
    assert eval(names) == avail[1:] + ["auto"] and ok == "True"
    expected = ["scipy.special"] + [m for m, b in (("numexpr", "numexpr"), ("torch", "torch-cpu"))
                                    if b in avail]
    assert r.stdout.splitlines()[1] == str(sorted(expected))
    x = np.linspace(0.5, 2.0, 1 << 17)
    assert fastmath.warmup(["numpy"]).keys() == {"numpy"}
    with fastmath.backend("numpy"):
        np.testing.assert_array_equal(fastmath.erf(x), scipy.special.erf(x))


def test_warmup_names_the_valid_choices():
    with pytest.raises(ValueError, match="valid choices: auto, numpy"):
        fastmath.warmup(["fastest"])
