"""Documentation pages made from the code, so they cannot drift from it.

``python -m fastmath.tools._docs functions`` prints the function table; the docs build
(docs/hooks.py) calls :func:`function_table` when docs/functions.md is not in the tree.
"""
from __future__ import annotations

import sys

from .. import _registry, backends

_LOOPS = {"numpy": "every numeric dtype (NumPy's own loops, over threads)",
          "torch": "float32, float64", "numexpr": "float32, float64"}
_LIBRARY = {"torch": "torch."}  # the module a family's kernel names are in


def family(backend: str) -> str:
    """The registry's ``kernels`` key for a backend name: torch-cpu and torch-cuda are torch."""
    return backend.partition("-")[0]


def _cell(spec, backend) -> str:
    fam = family(backend)
    if fam == "numpy":
        return "reference"
    name = spec.kernels.get(fam)
    return f"`{_LIBRARY.get(fam, '')}{name}`" if name else "-"


def function_table() -> str:
    """The registry as Markdown: which backends accelerate which function and dtype."""
    names = backends.NAMES
    lines = [
        "# Functions",
        "",
        "Every function fastmath accelerates, from its registry (`fastmath/_registry.py`). "
        "Signatures, dtypes and errors are the reference's. A backend column names the "
        "kernel that backend runs; `-` means it has none, so calls forced onto it run "
        "NumPy's/SciPy's. The numpy backend runs the reference's own loops, so its results "
        "are bitwise equal; the ULP bound is what other backends are held to (float32 / "
        "float64). Inputs of other dtypes (integers, float16) are cast exactly as the "
        "reference casts them, then run in the loop dtype shown. Everything else in "
        "`fastmath` is NumPy's own object.",
        "",
        "| function | reference | kind | " + " | ".join(names)
        + " | loop dtypes off numpy | ULP bound f32 / f64 |",
        "|---" * (len(names) + 5) + "|",
    ]
    for spec in _registry.ROWS:
        ref = f"`{spec.ref.replace(':', '.')}`" + "".join(f" (also `{a}`)" for a in spec.aliases)
        loops = "; ".join(sorted({_LOOPS.get(fam, "float32, float64") for fam in spec.kernels}))
        gpu = f" (torch-cuda {spec.gpu_ulp[0]} / {spec.gpu_ulp[1]})" if spec.gpu_ulp else ""
        lines.append(f"| `{spec.name}` | {ref} | {spec.kind} | "
                     + " | ".join(_cell(spec, b) for b in names)
                     + f" | {loops or '-'} | {spec.ulp[0]} / {spec.ulp[1]}{gpu} |")
    lines += ["", "The numpy backend takes every function: it is the last in every chain, so "
              "a call any other backend declines still runs, with NumPy's result."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    if sys.argv[1:] != ["functions"]:
        raise SystemExit("usage: python -m fastmath.tools._docs functions")
    sys.stdout.write(function_table())
