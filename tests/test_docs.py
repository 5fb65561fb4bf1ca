"""The documentation: docstring examples run, the function table covers the registry, and
the site builds with no warning (mkdocs --strict)."""
import doctest
import os
import importlib
import pkgutil
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import fastmath
from fastmath import _docs, _registry

ROOT = Path(__file__).resolve().parents[1]
# __main__ runs the command on import; it has no docstrings of its own
MODULES = sorted(m.name for m in pkgutil.walk_packages(fastmath.__path__, "fastmath.")
                 if m.name != "fastmath.__main__")


@pytest.mark.parametrize("name", ["fastmath"] + MODULES)
def test_docstring_examples(name):
    try:
        module = importlib.import_module(name)
    except ImportError as e:  # a module for an optional library that is not installed
        pytest.skip(f"{name} needs {e.name}, which is not installed")
    finder = doctest.DocTestFinder(exclude_empty=True)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    for test in finder.find(module, name):
        fastmath.set_backend("auto")
        runner.run(test)
    assert runner.failures == 0, f"{runner.failures} docstring example(s) failed in {name}"


def test_public_functions_have_examples():
    for name in ("set_backend", "get_backend", "backend", "available_backends", "info",
                 "logsumexp", "FallbackError", "Ufunc"):
        doc = getattr(fastmath, name).__doc__
        assert doc and "Examples\n    --------" in doc, name


def test_function_table_has_every_registry_row():
    table = _docs.function_table()
    for spec in _registry.ROWS:
        row = next(line for line in table.splitlines() if line.startswith(f"| `{spec.name}` |"))
        assert spec.ref.replace(":", ".") in row
        assert f"{spec.ulp[0]} / {spec.ulp[1]}" in row


def test_site_builds_with_no_warning(tmp_path):
    if shutil.which("mkdocs") is None and importlib.util.find_spec("mkdocs") is None:
        pytest.skip("the docs extra is not installed (pip install -e '.[docs]')")
    for module in ("material", "mkdocstrings_handlers.python"):
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"the docs extra is not installed ({module} missing)")
    r = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-q",
                        "-f", str(ROOT / "mkdocs.yml"), "-d", str(tmp_path / "site")],
                       capture_output=True, text=True, timeout=300, cwd=ROOT,
                       env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert r.returncode == 0, r.stdout + r.stderr
    functions = (tmp_path / "site" / "functions" / "index.html").read_text()
    for spec in _registry.ROWS:
        assert f"<code>{spec.name}</code>" in functions
    api = (tmp_path / "site" / "api" / "index.html").read_text()
    assert "fastmath.set_backend" in api and "Examples" in api
