"""Documentation pages made from the code, so they cannot drift from it.

``python -m fastmath._docs functions`` prints the function table; the docs build
(docs/hooks.py) calls :func:`function_table` when docs/functions.md is not in the tree.
"""
from __future__ import annotations

import sys

from . import _registry, backends

_LOOPS = {"numpy": "every numeric dtype (NumPy's own loops, over threads)",
          "torch": "float32, float64", "numexpr": "float32, float64"}


def _family_backends(family: str):
    return [n for n in backends.NAMES if n == family or n.startswith(family + "-")]


def function_table() -> str:
    """The registry as Markdown: which backends accelerate which function and dtype."""
    lines = [
        "# Functions",
        "",
        "Every function fastmath accelerates, from its registry (`fastmath/_registry.py`). "
        "Signatures, dtypes and errors are the reference's. The numpy backend runs the "
        "reference's own loops, so its results are bitwise equal; the ULP bound is what "
        "other backends are held to (float32 / float64). Inputs of other dtypes (integers, "
        "float16) are cast exactly as the reference casts them, then run in the loop dtype "
        "shown. Everything else in `fastmath` is NumPy's own object.",
        "",
        "| function | reference | kind | backends | loop dtypes off numpy | ULP bound f32 / f64 |",
        "|---|---|---|---|---|---|",
    ]
    for spec in _registry.ROWS:
        names = ["numpy"] + [b for fam in spec.kernels for b in _family_backends(fam)]
        loops = "; ".join(sorted({_LOOPS.get(fam, "float32, float64") for fam in spec.kernels}))
        lines.append(f"| `{spec.name}` | `{spec.ref.replace(':', '.')}` | {spec.kind} | "
                     f"{', '.join(names)} | {loops or '-'} | {spec.ulp[0]} / {spec.ulp[1]} |")
    lines += ["", "The numpy backend takes every function: it is the last in every chain, so "
              "a call any other backend declines still runs, with NumPy's result."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    if sys.argv[1:] != ["functions"]:
        raise SystemExit("usage: python -m fastmath._docs functions")
    sys.stdout.write(function_table())
