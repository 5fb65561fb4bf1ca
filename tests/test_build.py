"""Installing without a C compiler: the package installs, the loop mode says why it cannot run,
logsumexp and foreach take their Python paths, ``fastmath info`` says what is not built; with
one, the wheel ships every extension."""
import os
import shutil
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def run_without(module, body):
    """stdout of ``body`` run in a fresh interpreter where ``module`` cannot be imported, as
    in an installation built without a compiler."""
    code = textwrap.dedent(f"""
        import sys
        class Block:
            def find_spec(self, name, path=None, target=None):
                if name == {module!r}:
                    raise ImportError("no module named " + name)
        sys.meta_path.insert(0, Block())
    """) + textwrap.dedent(body)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_without_the_extension_the_loop_mode_says_why():
    out = run_without("fastmath.integrations._loops", """
        import numpy, fastmath
        print(fastmath.patch.why_unavailable())
        try:
            fastmath.patch(mode="loops").__enter__()
        except RuntimeError as e:
            print("RAISED", e)
        with fastmath.patch():
            print("FUNCTIONS", numpy.exp is fastmath.exp)
    """)
    lines = out.splitlines()
    assert "fastmath.integrations._loops extension is not built" in lines[0]
    assert lines[1].startswith("RAISED fastmath.patch(mode='loops') is unavailable: ")
    assert "pip install" in lines[1] and lines[2] == "FUNCTIONS True"


def test_without_the_lse_kernel_logsumexp_is_scipys_all_the_same():
    out = run_without("fastmath.backends._lse_kernel", """
        import numpy as np, scipy.special, fastmath
        from fastmath.backends import _lse
        rng = np.random.default_rng(0)
        same = []
        for a, axis in [(rng.normal(size=1000), None), (rng.normal(size=(50, 70)), -1),
                        (rng.normal(size=3000).astype(np.float32), None)]:
            got, want = fastmath.logsumexp(a, axis), scipy.special.logsumexp(a, axis)
            same.append(type(got) is type(want) and got.tobytes() == want.tobytes())
        print(_lse.small_kernel(), all(same))
    """)
    assert out.split() == ["None", "True"]


def test_without_the_list_runner_foreach_is_numpys_all_the_same():
    out = run_without("fastmath.dispatch._lists", """
        import numpy as np, fastmath
        xs = [np.linspace(-1, 1, n) for n in (0, 5, 3000)] + [np.arange(3), 2.0]
        same = []
        for backend in ("auto", "numpy"):
            with fastmath.backend(backend):
                for g, x in zip(fastmath.foreach.exp(xs), xs):
                    want = np.exp(x)
                    same.append(type(g) is type(want) and g.tobytes() == want.tobytes())
        print(all(same))
        print(fastmath.info()["compiled"]["fastmath.dispatch._lists"])
    """)
    lines = out.splitlines()
    assert lines[0] == "True"
    assert lines[1].startswith("not built (") and "foreach computes array by array" in lines[1]


def test_info_names_every_extension_setup_builds():
    import re

    from fastmath.tools._info import EXTENSIONS

    built = re.findall(r'Extension\("(fastmath\.[\w.]+)"', (ROOT / "setup.py").read_text())
    assert sorted(EXTENSIONS) == sorted(built)


def _wheel(tmp_path, env):
    """The names in a wheel built from this checkout's HEAD with ``env``."""
    src = tmp_path / "src"
    src.mkdir()
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", "HEAD"], capture_output=True,
                             check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(src)], input=archive, check=True)
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-build-isolation",
                        "--no-deps", "-w", str(tmp_path / "wheel"), str(src)], env=env,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    (wheel,) = (tmp_path / "wheel").glob("*.whl")
    return zipfile.ZipFile(wheel).namelist()


@pytest.mark.slow
def test_wheel_ships_every_extension_setup_names(tmp_path):
    if not (ROOT / ".git").exists() and not shutil.which("git"):
        pytest.skip("needs the git checkout")
    from fastmath.tools._info import EXTENSIONS

    names = _wheel(tmp_path, dict(os.environ))
    shipped = {n.split(".")[0].replace("/", ".") for n in names if n.endswith(".so")}
    assert shipped == set(EXTENSIONS)


@pytest.mark.slow
def test_wheel_builds_without_a_compiler_and_ships_the_startup_hook(tmp_path):
    if not (ROOT / ".git").exists() and not shutil.which("git"):
        pytest.skip("needs the git checkout")
    names = _wheel(tmp_path, dict(os.environ, CC="false"))  # every compiler call fails
    assert "fastmath-startup.pth" in names and "fastmath/_startup.py" in names
    assert not any(n.endswith(".so") for n in names)
