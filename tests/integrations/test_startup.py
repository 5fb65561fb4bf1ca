"""fastmath in place from interpreter start: the FASTMATH_PATCH hook and ``fastmath run``.

Each case runs in its own interpreter (with a timeout), the hook read by Python's own
site module from a directory holding the very .pth file the build installs.
"""
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from fastmath.integrations import _loopmode

ROOT = Path(__file__).resolve().parents[2]
PROBE = textwrap.dedent("""
    import sys
    heavy = sorted(m for m in ("numpy", "fastmath", "scipy", "torch") if m in sys.modules)
    import fastmath, numpy, scipy.special
    from scipy.special import logsumexp   # bound at import, as libraries do
    print(heavy, fastmath.patch.active("functions"), fastmath.patch.active("loops"),
          logsumexp is fastmath.logsumexp)
""")


def _python(code, env_extra, tmp_path, *args):
    site_dir = tmp_path / "site"
    site_dir.mkdir(exist_ok=True)
    shutil.copy(ROOT / "fastmath-startup.pth", site_dir)
    env = {k: v for k, v in os.environ.items() if k != "FASTMATH_PATCH"}
    # the .pth is processed by site.addsitedir, as for site-packages at start-up
    env.update(env_extra, PYTHONPATH=os.pathsep.join([str(ROOT), str(site_dir)]))
    boot = f"import site; site.addsitedir({str(site_dir)!r})\n" + code
    return subprocess.run([sys.executable, "-c", boot, *args], env=env, capture_output=True,
                          text=True, timeout=180)


def test_unset_costs_nothing_and_patches_nothing(tmp_path):
    r = _python(PROBE, {}, tmp_path)
    assert r.stdout.split("\n")[0] == "[] False False False", r.stderr


@pytest.mark.parametrize("value,functions,loops", [
    ("functions", True, False), ("loops", False, True), ("both", True, True),
    ("1", True, True), ("0", False, False)])
def test_values(tmp_path, value, functions, loops):
    if loops and not _loopmode.available():
        pytest.skip(_loopmode.why_unavailable())
    r = _python(PROBE, {"FASTMATH_PATCH": value}, tmp_path)
    heavy, rest = r.stdout.split("]", 1)
    expected = f"{functions} {loops} {functions}"
    assert rest.split() == expected.split(), r.stderr


def test_bad_value_warns_and_runs(tmp_path):
    r = _python(PROBE, {"FASTMATH_PATCH": "fastest"}, tmp_path)
    assert r.returncode == 0
    assert "FASTMATH_PATCH='fastest'" in r.stderr and "expected 1, 0" in r.stderr
    assert r.stdout.split("]", 1)[1].split() == ["False", "False", "False"]


def test_fastmath_run_script_and_module(tmp_path):
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent("""
        import sys, fastmath
        from scipy.special import logsumexp
        print(sys.argv[1:], __name__, fastmath.patch.active("functions"),
              logsumexp is fastmath.logsumexp)
        sys.exit(int(sys.argv[1]))
    """))
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    cmd = [sys.executable, "-m", "fastmath", "run", "--mode", "functions"]
    r = subprocess.run(cmd + [str(script), "3", "-x"], env=env, capture_output=True,
                       text=True, timeout=180)
    assert r.returncode == 3, r.stderr
    assert r.stdout.split() == ["['3',", "'-x']", "__main__", "True", "True"]
    (tmp_path / "jobmod.py").write_text(script.read_text())
    r = subprocess.run(cmd + ["-m", "jobmod", "0"], env=dict(env, PYTHONPATH=os.pathsep.join(
        [str(ROOT), str(tmp_path)])), capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["['0']", "__main__", "True", "True"]
