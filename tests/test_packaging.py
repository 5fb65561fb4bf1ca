"""The source distribution carries what its own tests need, and the license is declared
the way packaging tools read it (an SPDX expression and the LICENSE file)."""
import shutil
import subprocess
import sys
import tarfile
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_sdist_has_the_tests_helpers_and_license(tmp_path):
    # from a clean copy: an egg-info left by an earlier build would list files by itself
    src = tmp_path / "src"
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(
        ".git", "*.egg-info", "__pycache__", ".venv", "build", "dist", "site"))
    code = ("import sys; from setuptools import build_meta;"
            "print(build_meta.build_sdist(sys.argv[1]))")
    r = subprocess.run([sys.executable, "-W", "error::DeprecationWarning", "-c", code,
                        str(tmp_path)], capture_output=True, text=True, timeout=300, cwd=src)
    assert r.returncode == 0, r.stderr
    assert "license" not in r.stderr.lower().replace("adding license file", "")
    with tarfile.open(tmp_path / r.stdout.strip().splitlines()[-1]) as tar:
        names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
        pkg_info = tar.extractfile(next(m for m in tar.getmembers()
                                        if m.name.endswith("/PKG-INFO"))).read().decode()
    tests = {p.relative_to(ROOT).as_posix() for p in (ROOT / "tests").rglob("*.py")}
    assert tests <= names, sorted(tests - names)  # conftest, helpers, plugins, every folder
    assert {"LICENSE", "mkdocs.yml", "fastmath/dispatch/calibration-defaults.json"} <= names
    # the optional extensions' sources, so that an install from the sdist can build them
    assert {"fastmath/dispatch/_runtime.c", "fastmath/dispatch/_runtime.h",
            "fastmath/dispatch/_npy_loop.h", "fastmath/dispatch/_lists.c",
            "fastmath/integrations/_loops.c", "fastmath/frontends/_hot.c",
            "fastmath/backends/_lse_kernel.c"} <= names
    assert {p.relative_to(ROOT).as_posix() for p in (ROOT / "docs").glob("*.md")} <= names
    assert "License-Expression: BSD-3-Clause" in pkg_info
    assert "License-File: LICENSE" in pkg_info


def test_license_file_is_the_declared_one():
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert meta["license"] == "BSD-3-Clause" and meta["license-files"] == ["LICENSE"]
    assert (ROOT / "LICENSE").read_text().startswith("BSD 3-Clause License")
