"""The measured crossovers behind ``auto``.

For each function and dtype, rows of (minimum size in elements, backends in order of
preference): the last row whose minimum the call's size reaches decides. Below the first
row ``auto`` calls NumPy/SciPy directly, with no machinery in between: a thread handoff
costs about 50 us and a torch round trip 2-3 us, more than the whole call on small
arrays. Unavailable backends are skipped, and ``numpy`` always ends the list.

Measured on the 2-core reference machine (AMD EPYC, AVX-512, numpy 2.4, torch 2.13 CPU):
numpy's exp over two threads beats one thread from about 1 MiB of input, and beats
torch's exp at every size; torch's erf beats SciPy's from about 4000 elements, by 10x
and more from 10^5; fastmath's blocked logsumexp beats SciPy's at every size (it makes
fewer passes) and torch's full-array passes everywhere.

Rows are about host (NumPy) data. A row may name ``torch-cuda`` only where the streaming
pipeline was measured faster than the best CPU backend for that function, dtype and size
(bench/cuda.py prints such rows in this format, e.g. ``{"exp": {"float32": [[N,
["torch-cuda", "numpy"]]]}}``); no default row does, so without a measurement ``auto``
keeps host data on the CPU. Data already on a device is computed there whatever the rows
say (fastmath/_native.py).
"""
from __future__ import annotations

_NUMPY_FROM_1MIB = {"float64": ((1 << 17, ("numpy",)),),
                    "float32": ((1 << 18, ("numpy",)),)}
_NUMPY_FROM_HALF_MIB = {"float64": ((1 << 16, ("numpy",)),),
                        "float32": ((1 << 17, ("numpy",)),)}

DEFAULTS = {
    "exp": _NUMPY_FROM_1MIB,
    "log": _NUMPY_FROM_1MIB,
    "log1p": _NUMPY_FROM_1MIB,
    "expm1": _NUMPY_FROM_1MIB,
    "erf": {"*": ((1 << 12, ("torch-cpu", "numpy")),)},
    "logsumexp": {"*": ((1, ("numpy",)),)},
    # Provisional, from a busy 2-core machine: torch where it won by 1.1x or more at 10^4
    # elements and clearly beyond (sin/cos float64 and hypot 4-13x at 10^6, expit 10x,
    # erfinv 4-6x); NumPy over threads from about 1 MiB of work (Spec.cost) elsewhere.
    # square, reciprocal and sqrt are memory-bound: nothing measured beat NumPy's own
    # loop, so auto leaves them to it.
    **{name: _NUMPY_FROM_1MIB for name in (
        "exp2", "log2", "log10", "tan", "arcsin", "arccos", "arctan", "tanh", "power",
        "arctan2", "logaddexp", "logaddexp2")},
    **{name: _NUMPY_FROM_HALF_MIB for name in (
        "cbrt", "sinh", "cosh", "arcsinh", "arccosh", "arctanh", "sinc", "logit", "xlogy",
        "xlog1py", "log_expit")},
    **{name: {"*": ((1 << 14, ("numpy",)),)} for name in (
        "erfc", "erfcinv", "erfcx", "ndtr", "log_ndtr", "gammaln", "digamma")},
    "sin": {"float64": ((1 << 13, ("torch-cpu", "numpy")),), "float32": _NUMPY_FROM_1MIB["float32"]},
    "cos": {"float64": ((1 << 13, ("torch-cpu", "numpy")),), "float32": _NUMPY_FROM_1MIB["float32"]},
    "hypot": {"*": ((1 << 13, ("torch-cpu", "numpy")),)},
    "float_power": {"*": ((1 << 14, ("torch-cpu", "numpy")),)},
    "expit": {"*": ((1 << 13, ("torch-cpu", "numpy")),)},
    "erfinv": {"*": ((1 << 14, ("torch-cpu", "numpy")),)},
    "ndtri": {"*": ((1 << 14, ("torch-cpu", "numpy")),)},
    "entr": {"float64": ((1 << 16, ("numpy",)),), "float32": ((1 << 15, ("torch-cpu", "numpy")),)},
    # softmax: NumPy's passes, in place and over threads along the axes kept
    "softmax": {"*": ((1 << 16, ("numpy",)),)},
    "log_softmax": {"*": ((1 << 16, ("numpy",)),)},
    "i0": {"*": ((1 << 15, ("numpy",)), (1 << 19, ("torch-cpu", "numpy")))},
}


def rows(name: str, dtype: str):
    """The rows for ``name`` on ``dtype`` (its own, else the function's "*" rows)."""
    table = DEFAULTS.get(name, {})
    return table.get(dtype) or table.get("*", ())


def smallest(name: str) -> int:
    """The size below which ``auto`` never leaves the reference, for any dtype."""
    sizes = [r[0][0] for r in DEFAULTS.get(name, {}).values() if r]
    return min(sizes) if sizes else 1 << 62
