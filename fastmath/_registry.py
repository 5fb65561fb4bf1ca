"""One table: every accelerated function, its NumPy/SciPy reference, its kind.

A row is all there is to declaring a function. The front end takes the signature and the
docstring from the reference, so they cannot drift; each backend looks up its kernel by
the name given for its family in ``kernels`` ("torch": a torch function, "numexpr": a
numexpr function; the numpy backend always runs the reference itself). ``cost`` (time per
input byte relative to NumPy's exp) tells the numpy backend when splitting work across
threads pays. ``fpe`` says whether the reference can raise NumPy floating-point errors (so
a backend that cannot observe the FPU flags must have them derived). ``ulp`` is the
documented bound, in units in the last place against the reference, for backends whose
kernels are not the reference's own (float32, float64); ``gpu_ulp`` is torch-cuda's where
CUDA's math library is looser (:meth:`Spec.bound` picks). ``domain`` says where each operand
is sampled (the benchmarks, ``fastmath check``, the accuracy report); ``aliases`` are
other public names of the same function (SciPy's ``psi`` is ``digamma``).

Everything else keyed by function name derives from these rows; tests/test_registry.py
fails if a table anywhere misses one.
"""
from __future__ import annotations

import importlib
import math
from dataclasses import dataclass, field
from typing import NamedTuple

from ._numpy import np


class Domain(NamedTuple):
    """Where one operand is sampled: half uniform in ``dense``, half with magnitudes
    log-uniform in ``spread`` (clipped to [tiny, max] of the dtype), of either sign if
    ``signed``; with ``ints`` half the dense draws are whole numbers."""
    dense: tuple = (-10, 10)
    spread: tuple = (0, math.inf)
    signed: bool = True
    ints: bool = False

    def __str__(self):
        def end(v, name):
            return name if v in (0, math.inf) else f"{v:g}"
        lo, hi = end(self.spread[0], "tiny"), end(self.spread[1], "max")
        dense = f"[{self.dense[0]:g}, {self.dense[1]:g}]" + (" (half whole)" if self.ints else "")
        return f"{dense} ∪ {'±' if self.signed else ''}[{lo}, {hi}]"

    def draw(self, rng, dt, m, spread):
        """``m`` values of dtype ``dt``: from ``dense``, or from ``spread`` if ``spread``."""
        f = np.finfo(dt)
        if not spread:
            x = rng.uniform(*self.dense, m)
            if self.ints:
                x[: m // 2] = np.round(x[: m // 2])
            return x.astype(dt)
        lo, hi = max(self.spread[0], float(f.tiny)), min(self.spread[1], float(f.max))
        x = 2.0 ** rng.uniform(np.log2(lo), np.log2(hi), m)
        if self.signed:
            x *= rng.choice([-1.0, 1.0], m)
        return x.astype(dt)


WHOLE = Domain()
UNIT = Domain((-1, 1), (0, 1))
PROB = Domain((0, 1), (0, 1), signed=False)
POSITIVE = Domain((0, 10), (0, math.inf), signed=False)
ROW = Domain((-30, 30), (0, 0))  # reductions: rows of values, dense only


@dataclass(frozen=True)
class Spec:
    name: str
    ref: str  # "module:attribute"
    # "unary" or "binary" (ufuncs), "elementwise" (a plain one-argument NumPy function
    # that maps each element on its own, like sinc), or a reduction ("logsumexp", "softmax")
    kind: str
    kernels: dict = field(default_factory=dict)  # backend family -> kernel name
    fpe: bool = False
    ulp: tuple = (4, 4)
    # torch-cuda's bound (float32, float64) where CUDA's kernels are looser than the CPU
    # ones (see GPU below); empty: ``ulp``
    gpu_ulp: tuple = ()
    cost: float = 1.0  # time per byte of input relative to numpy's exp, for chunking
    domain: tuple = ()  # one Domain per operand; empty: the kind's default (see operands)
    aliases: tuple = ()  # other public names of this function
    # the reference's __name__ where it is not ``name``: fastmath's object carries it, as
    # code names things after it (SciPy's test cases for digamma, whose ufunc is "psi")
    named: str = ""

    def bound(self, dtype, backend=None) -> int:
        """The ULP bound against the reference for ``backend``'s kernel on results of
        ``dtype`` (float32 or float64): ``gpu_ulp`` on torch-cuda where the row has one,
        else ``ulp``."""
        ulp = self.gpu_ulp if self.gpu_ulp and backend == "torch-cuda" else self.ulp
        return ulp[0] if np.dtype(dtype) == np.float32 else ulp[1]

    @property
    def nin(self) -> int:
        return 2 if self.kind == "binary" else 1

    @property
    def operands(self) -> tuple:
        """One Domain per operand: the row's own, else every value (rows for reductions)."""
        if self.domain:
            return self.domain
        return (ROW,) if self.kind in ("logsumexp", "softmax") else (WHOLE,) * self.nin

    def sample(self, n, dtype, rng):
        """Operands (a tuple of ``n``-element arrays of ``dtype``) from the dense part of
        each domain where the reference's result is finite: real work, not NaN paths."""
        dt = np.dtype(dtype)
        if self.kind in ("logsumexp", "softmax"):
            return (self.operands[0].draw(rng, dt, n, False),)
        parts, got = [], 0
        with np.errstate(all="ignore"):
            for _ in range(50):
                xs = [d.draw(rng, dt, max(n, 16), False) for d in self.operands]
                keep = np.isfinite(self.reference()(*xs))
                parts.append([x[keep] for x in xs])
                got += int(keep.sum())
                if got >= n:
                    break
        return tuple(np.concatenate(c)[:n] for c in zip(*parts))

    def reference(self):
        """The NumPy/SciPy object this function mirrors (imported on first use).

        Resolved once and kept: while fastmath.patch() is active the module attribute is
        fastmath's own function, and a reference looked up then would call itself.
        """
        try:
            return _originals[self.ref]
        except KeyError:
            module, _, attr = self.ref.partition(":")
            obj = _originals[self.ref] = getattr(importlib.import_module(module), attr)
            return obj


_originals: dict = {}  # Spec.ref -> the NumPy/SciPy object, resolved before any patch


# power's exponent: half whole numbers, so negative bases meet exponents they are defined for
POWER = (WHOLE, Domain((-10, 10), (0, 64), ints=True))
# Bounds are measured (tests/frontends/test_parity.py holds them to it) over wide samples of each
# domain; they are the sum of the two implementations' own errors against the true value,
# each about 1-2 ULP, so never less than 1 unless both are correctly rounded (square,
# reciprocal).
# GPU: CUDA's math library is documented to 2 ULP for double tan, asin, acos, atan, hypot
# (1 on x86's glibc) and 5 for erfinv (CUDA C++ Programming Guide, "Mathematical
# Functions"). ``gpu_ulp`` holds what torch 2.11's CUDA kernels gave against NumPy 2.5 /
# SciPy 1.18 on an NVIDIA H200 (CUDA 13.0), where it is more than ``ulp``: the worst of
# 4M points sampled over each domain plus 5M spread over [-30, 30] (tests/backends/
# test_cuda.py holds them to it on a GPU).
ROWS = (
    Spec("exp", "numpy:exp", "unary", {"torch": "exp", "numexpr": "exp", "mkl": "Exp"}, fpe=True,
         ulp=(3, 2)),
    Spec("log", "numpy:log", "unary", {"torch": "log", "numexpr": "log", "mkl": "Ln"}, fpe=True,
         ulp=(4, 2)),
    Spec("log1p", "numpy:log1p", "unary", {"torch": "log1p", "numexpr": "log1p", "mkl": "Log1p"},
         fpe=True,
         ulp=(3, 2)),
    Spec("expm1", "numpy:expm1", "unary", {"torch": "expm1", "numexpr": "expm1", "mkl": "Expm1"},
         fpe=True,
         ulp=(3, 2)),
    Spec("erf", "scipy.special:erf", "unary", {"torch": "special.erf", "mkl": "Erf"}, fpe=False,
         ulp=(2, 4),
         cost=8.0),
    # Rows without a torch kernel: torch's differs from the reference beyond a few ULP
    # somewhere in the domain (sinh/cosh overflow early; logaddexp/logaddexp2 lose
    # thousands of ULP near a zero result; erfc, ndtr, log_ndtr keep
    # subnormals SciPy flushes; logit, digamma lose accuracy near their zeros; gammaln
    # differs at -inf and subnormals; erfcx is 63 ULP off in float32), or has no kernel.
    Spec("exp2", "numpy:exp2", "unary", {"torch": "exp2", "mkl": "Exp2"}, fpe=True, ulp=(3, 1)),
    Spec("log2", "numpy:log2", "unary", {"torch": "log2", "mkl": "Log2"}, fpe=True, ulp=(2, 1)),
    Spec("log10", "numpy:log10", "unary", {"torch": "log10", "mkl": "Log10"}, fpe=True, ulp=(3,
         2)),
    Spec("sqrt", "numpy:sqrt", "unary", {"torch": "sqrt", "mkl": "Sqrt"}, fpe=True, ulp=(1, 1),
         cost=0.5),
    Spec("cbrt", "numpy:cbrt", "unary", {"mkl": "Cbrt"}, fpe=True, cost=2.0),
    Spec("square", "numpy:square", "unary", {"torch": "square"}, fpe=True, ulp=(0, 0), cost=0.3),
    Spec("reciprocal", "numpy:reciprocal", "unary", {"torch": "reciprocal"}, fpe=True,
         ulp=(0, 0), cost=0.3),
    Spec("sin", "numpy:sin", "unary", {"torch": "sin", "mkl": "Sin"}, fpe=True, ulp=(1, 1)),
    Spec("cos", "numpy:cos", "unary", {"torch": "cos", "mkl": "Cos"}, fpe=True, ulp=(1, 1)),
    Spec("tan", "numpy:tan", "unary", {"torch": "tan", "mkl": "Tan"}, fpe=True, ulp=(3, 1),
         gpu_ulp=(3, 2),
         cost=2.0),
    Spec("arcsin", "numpy:arcsin", "unary", {"torch": "asin", "mkl": "Asin"}, fpe=True, ulp=(3, 1),
         gpu_ulp=(3, 2),
         domain=(UNIT,)),
    Spec("arccos", "numpy:arccos", "unary", {"torch": "acos", "mkl": "Acos"}, fpe=True, ulp=(2, 1),
         gpu_ulp=(3, 2),
         domain=(UNIT,)),
    Spec("arctan", "numpy:arctan", "unary", {"torch": "atan", "mkl": "Atan"}, fpe=True, ulp=(2,
         1), gpu_ulp=(2, 2)),
    Spec("sinh", "numpy:sinh", "unary", {"mkl": "Sinh"}, fpe=True, cost=2.0),
    Spec("cosh", "numpy:cosh", "unary", {"mkl": "Cosh"}, fpe=True, cost=2.0),
    Spec("tanh", "numpy:tanh", "unary", {"torch": "tanh", "mkl": "Tanh"}, fpe=True, ulp=(1, 1),
         gpu_ulp=(2, 2)),
    Spec("arcsinh", "numpy:arcsinh", "unary", {"torch": "asinh", "mkl": "Asinh"}, fpe=True,
         ulp=(2, 2),
         cost=2.0),
    Spec("arccosh", "numpy:arccosh", "unary", {"torch": "acosh", "mkl": "Acosh"}, fpe=True,
         ulp=(2, 2),
         cost=2.0, domain=(Domain((1, 10), (1, math.inf), signed=False),)),
    Spec("arctanh", "numpy:arctanh", "unary", {"torch": "atanh", "mkl": "Atanh"}, fpe=True,
         ulp=(2, 2), gpu_ulp=(3, 2),
         cost=2.0, domain=(UNIT,)),
    # beyond 2**23 every float32 is whole (sinc 0): the spread stops at 1e3
    Spec("sinc", "numpy:sinc", "elementwise", {"torch": "sinc"}, fpe=True, ulp=(2, 1),
         gpu_ulp=(2, 2),
         cost=4.0, domain=(Domain((-10, 10), (0, 1e3)),)),
    Spec("i0", "numpy:i0", "elementwise", {"torch": "special.i0"}, fpe=True, ulp=(8, 8),
         cost=8.0),
    Spec("power", "numpy:power", "binary", {"torch": "pow", "mkl": "Pow"}, fpe=True, ulp=(1, 1),
         cost=2.0,
         domain=POWER),
    Spec("float_power", "numpy:float_power", "binary", {"torch": "pow"}, fpe=True, ulp=(1, 1),
         cost=2.0, domain=POWER),
    Spec("arctan2", "numpy:arctan2", "binary", {"torch": "atan2", "mkl": "Atan2"}, fpe=True,
         ulp=(3, 1), gpu_ulp=(3, 2)),
    Spec("hypot", "numpy:hypot", "binary", {"torch": "hypot"}, fpe=True, ulp=(1, 1),
         gpu_ulp=(1, 2)),
    Spec("logaddexp", "numpy:logaddexp", "binary", fpe=True, cost=2.0),
    Spec("logaddexp2", "numpy:logaddexp2", "binary", fpe=True, cost=2.0),
    # scipy.special's loops clear the FPU flags they raise, so these never report any.
    Spec("erfc", "scipy.special:erfc", "unary", {"mkl": "Erfc"}, cost=8.0),
    Spec("erfinv", "scipy.special:erfinv", "unary", {"torch": "special.erfinv", "mkl": "ErfInv"},
         ulp=(3, 3), gpu_ulp=(4, 6),
         cost=8.0, domain=(UNIT,)),
    Spec("erfcinv", "scipy.special:erfcinv", "unary", {"mkl": "ErfcInv"}, cost=8.0,
         domain=(Domain((0, 2), (0, 2), signed=False),)),
    Spec("erfcx", "scipy.special:erfcx", "unary", cost=8.0),
    Spec("expit", "scipy.special:expit", "unary", {"torch": "special.expit"}, ulp=(4, 4),
         cost=2.0),
    Spec("logit", "scipy.special:logit", "unary", cost=2.0, domain=(PROB,)),
    Spec("log_expit", "scipy.special:log_expit", "unary", cost=4.0),
    Spec("ndtr", "scipy.special:ndtr", "unary", {"mkl": "CdfNorm"}, cost=8.0),
    # torch's float32 ndtri is up to 3.1 ULP from the true value where SciPy's is 0.5
    # (bench/accuracy.py, 20000 points on [0, 1] and log-spread toward 0): NumPy's only.
    Spec("ndtri", "scipy.special:ndtri", "unary", {"mkl": "CdfNormInv"}, cost=8.0, domain=(PROB,)),
    Spec("log_ndtr", "scipy.special:log_ndtr", "unary", cost=8.0),
    Spec("gammaln", "scipy.special:gammaln", "unary", cost=8.0),
    Spec("digamma", "scipy.special:digamma", "unary", cost=8.0, aliases=("psi",),
         named="psi"),
    Spec("entr", "scipy.special:entr", "unary", {"torch": "special.entr"}, ulp=(2, 2),
         cost=2.0, domain=(POSITIVE,)),
    Spec("xlogy", "scipy.special:xlogy", "binary", {"torch": "special.xlogy"}, ulp=(1, 1),
         gpu_ulp=(2, 2),
         cost=2.0, domain=(WHOLE, POSITIVE)),
    Spec("xlog1py", "scipy.special:xlog1py", "binary", {"torch": "special.xlog1py"},
         ulp=(2, 3), cost=2.0, domain=(WHOLE, Domain((-1, 10)))),
    Spec("logsumexp", "scipy.special:logsumexp", "logsumexp", {"torch": "logsumexp"}, ulp=(8, 8)),
    # torch's softmax sums in another order (up to 131 ULP in float32 over 10^5
    # elements) and gives NaN where log_softmax gives -inf: NumPy's passes only.
    Spec("softmax", "scipy.special:softmax", "softmax", ulp=(0, 0)),
    Spec("log_softmax", "scipy.special:log_softmax", "softmax", ulp=(0, 0)),
)

BY_NAME = {row.name: row for row in ROWS}
ALIASES = {alias: row for row in ROWS for alias in row.aliases}


def lookup(name: str):
    """The row called ``name`` (or one of its aliases); KeyError naming the valid ones."""
    row = BY_NAME.get(name) or ALIASES.get(name)
    if row is None:
        raise KeyError(f"{name!r} is not an accelerated function; valid choices: "
                       f"{', '.join(BY_NAME)}")
    return row
