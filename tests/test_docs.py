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
from fastmath.tools import _docs
from fastmath import _registry

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
    # numpydoc's Sphinx roles are rendered as code, not shown raw
    import re

    assert not re.search(r":(?:func|class|meth|attr|data|mod|exc):", api)
    # accelerate is documented as the public function, not as the module that holds it
    assert 'id="fastmath.accelerate"' in api and 'id="fastmath.integrations' not in api
    assert 'id="fastmath.warmup"' in api
    # the pictures are on the pages people look at, and shipped with the site
    site = tmp_path / "site"
    for html, img in ((site / "index.html", 'src="img/architecture.png"'),
                      (site / "how-it-works" / "index.html", 'src="../img/architecture.png"'),
                      (site / "backends" / "index.html", 'src="../img/bench.png"'),
                      (site / "command" / "index.html", 'src="../img/bench.png"')):
        assert img in html.read_text(), (html, img)
    for img in ("architecture.png", "bench.png"):
        assert (site / "img" / img).stat().st_size > 10_000


# ---- the pages name only commands, options and variables that exist, and miss none ----

import argparse
import re

from fastmath.dispatch import _config
from fastmath.tools import cli

PAGES = sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md", ROOT / "bench" / "README.md"]
_CODE = re.compile(r"```.*?```|`[^`\n]+`", re.S)
# a command line: at a line's start or after && ; or a prompt, maybe with variables set and
# through python -m
_COMMAND = re.compile(r"(?:^|&& |; |\$ )(?:[A-Z_]+=\S* )*(?:python3? -m )?"
                      r"fastmath ([a-z][a-z-]*)\b(.*)")


def _parser():
    """The real ``fastmath`` parser, as cli.main builds it."""
    class Built(Exception):
        pass

    def stop(self, *args, **kwargs):
        raise Built(self)
    real = argparse.ArgumentParser.parse_args
    argparse.ArgumentParser.parse_args = stop
    try:
        cli.main([])
    except Built as built:
        return built.args[0]
    finally:
        argparse.ArgumentParser.parse_args = real
    raise AssertionError("cli.main never parsed its arguments")


def _options(parser):
    return {o for o in parser._option_string_actions if o.startswith("--") and o != "--help"}


def _commands():
    top = _parser()
    sub = next(a for a in top._actions if isinstance(a, argparse._SubParsersAction))
    return _options(top), {name: _options(p) for name, p in sub.choices.items()}


def _code(page):
    return [m.group(0).strip("`") for m in _CODE.finditer(page.read_text())]


def test_pages_name_only_real_commands_options_and_variables():
    top, commands = _commands()
    wrong = []
    for page in PAGES:
        for code in _code(page):
            for line in code.splitlines():
                for m in _COMMAND.finditer(line.strip()):
                    name, rest = m.group(1), m.group(2).split("#")[0].split("|")[0]
                    if name not in commands:
                        wrong.append(f"{page.name}: command `fastmath {name}`")
                        continue
                    for opt in re.findall(r"(?<![\w-])--[a-z][a-z-]*", rest):
                        if opt not in commands[name] | top | {"--help"}:
                            wrong.append(f"{page.name}: `fastmath {name} {opt}`")
            for var in re.findall(r"FASTMATH_[A-Z_]*[A-Z]", code):
                if var not in _config.VARIABLES:
                    wrong.append(f"{page.name}: variable {var}")
    assert not wrong, wrong


def test_command_page_documents_every_command_and_option():
    top, commands = _commands()
    page = (ROOT / "docs" / "command.md").read_text()
    sections = dict(re.findall(r"^## `fastmath (\S+)`\n(.*?)(?=^## |\Z)", page, re.S | re.M))
    assert set(sections) == set(commands), "command.md sections differ from the commands"
    missing = [f"fastmath {name} {opt}" for name, opts in commands.items() for opt in opts
               if f"`{opt}" not in sections[name]]
    missing += [f"fastmath {opt}" for opt in top if f"`{opt}" not in page]
    assert not missing, f"command.md does not document {missing}"
    for name, opts in commands.items():  # and documents no option the command lacks
        named = set(re.findall(r"`(--[a-z][a-z-]*)", sections[name]))
        assert named <= opts | top, (name, named - opts - top)


@pytest.mark.parametrize("page", ["docs/configuration.md", "README.md"])
def test_variable_tables_list_every_variable(page):
    text = (ROOT / page).read_text()
    rows = set(re.findall(r"^\| `(FASTMATH_[A-Z_]+)` \|", text, re.M))
    assert rows == set(_config.VARIABLES), page


def test_config_reads_exactly_its_listed_variables():
    import inspect

    from fastmath import _startup  # FASTMATH_PATCH is read at interpreter start, there

    source = inspect.getsource(_config.read) + inspect.getsource(_startup)
    # FASTMATH_REGISTRY is read by the native runtime as it loads
    source += (ROOT / "fastmath/dispatch/_runtime.c").read_text()
    read = set(re.findall(r'"(FASTMATH_[A-Z_]+)"', source))
    assert read == set(_config.VARIABLES)


def test_the_calibration_default_is_stated_alike():
    # configuration.md and the README once disagreed on FASTMATH_CALIBRATION's default
    defaults = []
    for page in ("docs/configuration.md", "README.md"):
        row = next(line for line in (ROOT / page).read_text().splitlines()
                   if line.startswith("| `FASTMATH_CALIBRATION` |"))
        defaults.append("~/.cache/fastmath/calibration.json" in row)
    assert defaults == [True, True]
