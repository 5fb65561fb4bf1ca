"""The package layout docs/how-it-works.md describes: every module in its sub-package, layers
whose imports point one way (function-level imports included), no import cycle, and no
backend importing another."""
import ast
import re
from pathlib import Path

import pytest

from fastmath.backends import NAMES

PACKAGE = Path(__import__("fastmath").__file__).parent
SUBPACKAGES = {"frontends", "dispatch", "backends", "integrations", "tools"}
# the public surface and what must load before everything else
TOP_LEVEL = {"__init__", "__main__", "_startup", "_numpy", "_registry", "_version", "special",
             "foreach"}
BACKEND_MODULES = {f"fastmath.backends.{n.split('-')[0]}" for n in NAMES}


def _module(path):
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {_module(p): p for p in PACKAGE.rglob("*.py")}
# the C extensions (setup.py): imported like modules, so they sit in layers too
EXTENSIONS = set(re.findall(r'Extension\("(fastmath\.[\w.]+)"',
                            (PACKAGE.parent / "setup.py").read_text()))


def _imports(path, module_level_only):
    """fastmath modules a file imports (at import time only, or anywhere in it)."""
    tree = ast.parse(path.read_text())
    name = _module(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    nodes = ast.walk(tree) if not module_level_only else _module_level(tree.body)
    found = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([node.module] if node.module else []))
            for a in node.names:
                full = f"{base}.{a.name}"
                found.add(full if full in MODULES or full in EXTENSIONS else base)
    return {m for m in found if (m in MODULES or m in EXTENSIONS) and m != name}


def _module_level(body):
    # statements that run when the module is imported: not function or class bodies
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        yield node
        for field in ("body", "orelse", "finalbody", "handlers"):
            yield from _module_level(getattr(node, field, []) or [])


def test_every_module_sits_in_its_subpackage():
    stray = [m for m in MODULES if m.count(".") == 1 and m.split(".")[1] not in TOP_LEVEL | SUBPACKAGES]
    assert not stray, f"modules outside the sub-packages: {stray}"
    for sub in SUBPACKAGES:
        assert f"fastmath.{sub}" in MODULES and MODULES[f"fastmath.{sub}"].name == "__init__.py"


@pytest.mark.parametrize("backend", sorted(BACKEND_MODULES & set(MODULES)))
def test_no_backend_imports_another(backend):
    # lazy imports count too: a backend may use only neutral modules
    others = _imports(MODULES[backend], module_level_only=False) & (BACKEND_MODULES - {backend})
    assert not others, f"{backend} imports {sorted(others)}"


# Lowest first. A module may import its own layer and those below, never one above, not even
# inside a function: a lower layer learns about a higher one through hooks it is handed.
# The backend list and protocol (``fastmath.backends`` itself) sit with the registry: they
# import nothing of fastmath, selection reads them, and the backends are loaded by name.
LAYERS = ("registry", "dispatch", "backends", "frontends", "integrations", "face")
_BASE = {"fastmath._numpy", "fastmath._version", "fastmath._registry", "fastmath.backends",
         "fastmath.backends._protocol"}


def _layer(module):
    if module in _BASE:
        return 0
    parts = module.split(".")
    if len(parts) > 1 and parts[1] in LAYERS[1:-1]:
        return LAYERS.index(parts[1])
    return len(LAYERS) - 1  # fastmath itself, special, foreach, _startup, __main__, tools


def _extension_sources():
    """{extension: its C sources} as setup.py builds them."""
    found = {}
    for node in ast.walk(ast.parse((PACKAGE.parent / "setup.py").read_text())):
        if (isinstance(node, ast.Call) and getattr(node.func, "id", "").endswith("Extension")
                and node.args and isinstance(node.args[0], ast.Constant)):
            found[node.args[0].value] = [e.value for e in node.args[1].elts]
    return found


def test_each_extension_is_built_in_the_layer_it_serves():
    # an extension's C code sits in its own module's folder (so its layer is the one its
    # name says), and the headers it includes come from its layer or one below
    sources = _extension_sources()
    assert set(sources) == EXTENSIONS
    wrong = []
    for ext, files in sources.items():
        folder = ext.rpartition(".")[0].replace(".", "/")
        for f in files:
            if Path(f).parent.as_posix() != folder:
                wrong.append(f"{ext} is built from {f}")
            for header in re.findall(r'#include "([^"]+)"', (PACKAGE.parent / f).read_text()):
                where = (PACKAGE.parent / f).parent.joinpath(header).resolve().parent
                layer = _module(where / "__init__.py")
                if _layer(layer + "._") > _layer(ext):
                    wrong.append(f"{f} includes {header} ({LAYERS[_layer(layer + '._')]})")
    assert not wrong, "\n".join(wrong)


def _all_imports():
    found = {m: _imports(p, module_level_only=False) for m, p in MODULES.items()}
    return {**found, **{e: set() for e in EXTENSIONS}}  # (what C code imports is not read)


# Known upward imports, each waiting for the change that removes it (none now).
PENDING = set()


def test_imports_point_down():
    up = {(m, n) for m, found in _all_imports().items() for n in found
          if _layer(n) > _layer(m)}
    assert PENDING <= up, f"no longer there: take {sorted(PENDING - up)} out of PENDING"
    assert up <= PENDING, "imports that run back up a layer:\n" + "\n".join(
        f"{m} ({LAYERS[_layer(m)]}) imports {n} ({LAYERS[_layer(n)]})"
        for m, n in sorted(up - PENDING))


def test_no_import_cycle_anywhere():
    # function-level imports too: a cycle hidden in a function still ties the modules together
    graph = _all_imports()
    cycles = []
    state = {}

    def visit(m, trail):
        if state.get(m) == "done":
            return
        if state.get(m) == "open":
            cycles.append(" -> ".join(trail[trail.index(m):] + [m]))
            return
        state[m] = "open"
        for n in sorted(graph[m]):
            if not m.startswith(n + "."):  # a package's __init__ runs before its modules
                visit(n, trail + [m])
        state[m] = "done"

    for m in sorted(graph):
        visit(m, [])
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


# shared math in backends/ that holds no backend: logsumexp's (M, m, s) partials, their
# merge and SciPy's finite-input formula, which backends and front ends both compute with
# (and its compiled kernel)
NEUTRAL = {"fastmath.backends._lse", "fastmath.backends._lse_kernel"}


def test_only_the_backend_list_reaches_a_backend():
    # below the public face, a call reaches a backend through selection and the chain
    # runner: dispatch, the front ends and the integrations import the backend list and
    # protocol (fastmath.backends), never a module inside backends/
    inside = {m for m in set(MODULES) | EXTENSIONS
              if m.startswith("fastmath.backends.")} - _BASE - NEUTRAL
    reach = sorted(f"{m} imports {n}" for m, found in _all_imports().items()
                   if 0 < _layer(m) < len(LAYERS) - 1 and not m.startswith("fastmath.backends")
                   for n in sorted(found & inside))
    assert not reach, "past selection, straight to a backend:\n" + "\n".join(reach)


@pytest.mark.parametrize("module", sorted(NEUTRAL & set(MODULES)))
def test_neutral_math_holds_no_backend(module):
    assert _imports(MODULES[module], module_level_only=False) <= _BASE | NEUTRAL


def test_the_checks_see_imports():
    # the parser must find what is there, or every check above passes vacuously
    torch = _imports(MODULES["fastmath.backends.torch"], module_level_only=False)
    assert "fastmath.dispatch._parallel" in torch and "fastmath._numpy" in torch
    assert "fastmath.frontends._pipeline" in _imports(MODULES["fastmath.frontends._ufunc"], True)
    assert {"fastmath.dispatch._runtime", "fastmath.integrations._loops",
            "fastmath.frontends._hot", "fastmath.backends._lse_kernel"} <= EXTENSIONS
    # a function-level import, and the layers it joins
    cli = _imports(MODULES["fastmath.tools.cli"], module_level_only=False)
    assert "fastmath._startup" in cli and "fastmath._startup" not in _imports(
        MODULES["fastmath.tools.cli"], True)
    assert [_layer(m) for m in ("fastmath._registry", "fastmath.dispatch._chain",
                                "fastmath.backends.numpy", "fastmath.frontends._ufunc",
                                "fastmath.integrations._patch", "fastmath.special",
                                "fastmath.tools.cli", "fastmath")] == [0, 1, 2, 3, 4, 5, 5, 5]


# the modules that need the numpy module itself: the public namespace copies it, the patch
# and accelerate swap its attributes, the loop mode registers loops on its ufuncs
REAL_NUMPY = {"fastmath", "fastmath._numpy", "fastmath.integrations._patch",
              "fastmath.integrations._accelerate", "fastmath.integrations._loopmode",
              "fastmath.tools.cli"}


def _numpy_imports(path):
    tree = ast.parse(path.read_text())
    return [node.lineno for node in ast.walk(tree)
            if (isinstance(node, ast.Import) and any(a.name == "numpy" for a in node.names))
            or (isinstance(node, ast.ImportFrom) and node.module == "numpy")]


def test_fastmath_computes_with_numpys_originals():
    """Everything else imports ``np`` from fastmath._numpy, so that while the patch has
    numpy.log pointing at fastmath's, fastmath's own code still runs NumPy's (a
    special-values check calling the function it is checking recursed without end)."""
    wrong = {m: lines for m, p in MODULES.items() if m not in REAL_NUMPY
             for lines in [_numpy_imports(p)] if lines}
    assert not wrong, f"modules importing numpy itself (lines): {wrong}"
