"""``logging.getLogger("fastmath")``: plans, declines and each call's backend at DEBUG."""
import logging
import os
import subprocess
import sys

import numpy as np
import pytest

import fastmath
from fastmath.dispatch import _config, _log

HAS_TORCH = "torch-cpu" in fastmath.available_backends()


def run_python(code, **env):
    environ = {k: v for k, v in os.environ.items() if not k.startswith("FASTMATH_")}
    environ.update(env)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=environ, timeout=120)


def test_fastmath_log_debug_says_where_each_call_went():
    code = ("import numpy, fastmath\n"
            "a = fastmath.exp(numpy.ones(10)); b = fastmath.exp(numpy.ones(1 << 20))\n"
            "with fastmath.backend('numpy'): fastmath.log1p(numpy.ones(5, 'float32'))\n"
            "assert (a == numpy.exp(numpy.ones(10))).all()\n")
    r = run_python(code, FASTMATH_LOG="debug")
    assert r.returncode == 0, r.stderr
    lines = r.stderr.splitlines()
    assert any("plan exp(float64) under auto" in s for s in lines), r.stderr
    assert any("exp(float64[10]): numpy.exp runs it" in s for s in lines), r.stderr
    assert any("exp(float64[1048576]): ran on numpy (selection auto)" in s for s in lines), r.stderr
    assert any("log1p(float32[5]): ran on numpy (selection numpy)" in s for s in lines), r.stderr


def test_silent_without_configuration():
    r = run_python("import numpy, fastmath; fastmath.exp(numpy.ones(1 << 20))")
    assert r.returncode == 0 and r.stderr == ""


def test_bad_level_warns_and_names_the_choices():
    with pytest.warns(_config.ConfigWarning, match="FASTMATH_LOG='loud'.*debug, info"):
        cfg = _config.read({"FASTMATH_LOG": "loud"})
    assert cfg.log is None


def test_standard_logging_config_routes_calls_off_the_fast_path(caplog):
    x = np.linspace(-1, 1, 10)
    fastmath.exp(x)  # the threshold is read from the cost table at the first auto call
    small = fastmath.exp._small
    assert small > 0
    try:
        caplog.set_level(logging.DEBUG, logger="fastmath")
        assert _log.refresh()
        assert fastmath.exp._small == 0
        got = fastmath.exp(x)
        assert got.tobytes() == np.exp(x).tobytes()
        assert any("exp(float64[10]): numpy.exp runs it" in r.getMessage()
                   for r in caplog.records)
    finally:
        caplog.set_level(logging.WARNING, logger="fastmath")
        _log.refresh()
    fastmath.exp(x)
    assert fastmath.exp._small == small


@pytest.mark.skipif(not HAS_TORCH, reason="torch is not installed")
def test_declines_are_logged(caplog):
    caplog.set_level(logging.DEBUG, logger="fastmath")
    _log.refresh()
    try:
        x = np.ones(4, complex)
        with fastmath.backend("torch-cpu"):
            np.testing.assert_array_equal(fastmath.exp(x), np.exp(x))
        msgs = [r.getMessage() for r in caplog.records]
        assert "exp(complex128[4]): torch-cpu declined it (chain: torch-cpu -> numpy)" in msgs
        assert "exp(complex128[4]): ran on numpy (selection torch-cpu)" in msgs
    finally:
        caplog.set_level(logging.WARNING, logger="fastmath")
        _log.refresh()
