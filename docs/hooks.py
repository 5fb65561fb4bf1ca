"""mkdocs hooks: pages made from the code at build time.

docs/functions.md is the registry's table, made by ``fastmath.tools._docs``; docs/accuracy.md and
docs/dask.md are pages of their own once written (bench/accuracy.py makes the first), and
until then a page here says so. A page present in docs/ always wins.

The docstrings are numpydoc, whose cross-references are Sphinx roles (``:func:`name```);
mkdocstrings' numpy parser leaves those as text, so the rendered pages show them as code.
"""
import re

from mkdocs.structure.files import File

# ":func:<code>~fastmath.backend</code>" as rendered -> "<code>backend</code>"
_ROLE = re.compile(r":(?:py:)?(?:func|class|meth|attr|data|mod|exc|obj|const):"
                   r"<code>(~?)([\w.]+)(\(\))?</code>")

_PENDING = {
    "accuracy.md": (
        "# Accuracy\n\n"
        "!!! note \"Generated page\"\n"
        "    This page is the accuracy table made by `bench/accuracy.py`: the worst error "
        "of each function on each backend and dtype, in ULPs against a high-precision "
        "reference. It is not in this tree yet.\n\n"
        "Until then: the bound each backend is held to is in the [function table](functions.md), "
        "and `fastmath check` measures the worst error on this machine against NumPy/SciPy.\n"),
    "dask.md": (
        "# Dask guide\n\n"
        "!!! note \"Coming\"\n"
        "    Running fastmath inside Dask workers (backend selection per task, threads per "
        "worker) is not documented yet; this page will say how.\n\n"
        "What holds already: the backend choice lives in a context variable, so each thread "
        "and each task sees its own `fastmath.backend(...)` scope, and `FASTMATH_*` "
        "variables set in a worker's environment apply to that worker.\n"),
}


def on_files(files, config):
    present = {f.src_uri for f in files}
    if "functions.md" not in present:
        from fastmath.tools._docs import function_table

        files.append(File.generated(config, "functions.md", content=function_table()))
    for name, text in _PENDING.items():
        if name not in present:
            files.append(File.generated(config, name, content=text))
    return files


def _code(m):
    name = m.group(2).rsplit(".", 1)[-1] if m.group(1) else m.group(2)
    return f"<code>{name}{m.group(3) or ''}</code>"


def on_page_content(html, page, config, files):
    return _ROLE.sub(_code, html)
