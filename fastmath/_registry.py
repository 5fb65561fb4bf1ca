"""One table: every accelerated function, its NumPy/SciPy reference, its kind.

A row is all there is to declaring a function. The front end takes the signature and the
docstring from the reference, so they cannot drift; each backend looks up its kernel by
the name given for its family in ``kernels`` (the numpy backend always runs the reference
itself). ``cost`` (time per input byte relative to NumPy's exp) tells the numpy backend
when splitting work across threads pays. ``fpe`` says whether the reference can raise NumPy floating-point errors (so a
backend that cannot observe the FPU flags must have them derived). ``ulp`` is the
documented bound, in units in the last place against the reference, for backends whose
kernels are not the reference's own (float32, float64).
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass, field


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
    cost: float = 1.0  # time per byte of input relative to numpy's exp, for chunking

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


# Bounds are measured (tests/test_parity.py holds them to it) over wide samples of each
# domain; they are the sum of the two implementations' own errors against the true value,
# each about 1-2 ULP, so never less than 1 unless both are correctly rounded (square,
# reciprocal).
ROWS = (
    Spec("exp", "numpy:exp", "unary", {"torch": "exp", "mkl": "Exp"}, fpe=True, ulp=(3, 2)),
    Spec("log", "numpy:log", "unary", {"torch": "log", "mkl": "Ln"}, fpe=True, ulp=(4, 2)),
    Spec("log1p", "numpy:log1p", "unary", {"torch": "log1p", "mkl": "Log1p"}, fpe=True, ulp=(3, 2)),
    Spec("expm1", "numpy:expm1", "unary", {"torch": "expm1", "mkl": "Expm1"}, fpe=True, ulp=(3, 2)),
    Spec("erf", "scipy.special:erf", "unary", {"torch": "special.erf", "mkl": "Erf"}, fpe=False, ulp=(2, 4),
         cost=8.0),
    # Rows without a torch kernel: torch's differs from the reference beyond a few ULP
    # somewhere in the domain (sinh/cosh overflow early; logaddexp/logaddexp2 lose
    # thousands of ULP near a zero result; erfc, ndtr, log_ndtr keep
    # subnormals SciPy flushes; logit, digamma lose accuracy near their zeros; gammaln
    # differs at -inf and subnormals; erfcx is 63 ULP off in float32), or has no kernel.
    Spec("exp2", "numpy:exp2", "unary", {"torch": "exp2", "mkl": "Exp2"}, fpe=True, ulp=(3, 1)),
    Spec("log2", "numpy:log2", "unary", {"torch": "log2", "mkl": "Log2"}, fpe=True, ulp=(2, 1)),
    Spec("log10", "numpy:log10", "unary", {"torch": "log10", "mkl": "Log10"}, fpe=True, ulp=(3, 2)),
    Spec("sqrt", "numpy:sqrt", "unary", {"torch": "sqrt", "mkl": "Sqrt"}, fpe=True, ulp=(1, 1), cost=0.5),
    Spec("cbrt", "numpy:cbrt", "unary", {"mkl": "Cbrt"}, fpe=True, cost=2.0),
    Spec("square", "numpy:square", "unary", {"torch": "square"}, fpe=True, ulp=(0, 0), cost=0.3),
    Spec("reciprocal", "numpy:reciprocal", "unary", {"torch": "reciprocal"}, fpe=True,
         ulp=(0, 0), cost=0.3),
    Spec("sin", "numpy:sin", "unary", {"torch": "sin", "mkl": "Sin"}, fpe=True, ulp=(1, 1)),
    Spec("cos", "numpy:cos", "unary", {"torch": "cos", "mkl": "Cos"}, fpe=True, ulp=(1, 1)),
    Spec("tan", "numpy:tan", "unary", {"torch": "tan", "mkl": "Tan"}, fpe=True, ulp=(3, 1), cost=2.0),
    Spec("arcsin", "numpy:arcsin", "unary", {"torch": "asin", "mkl": "Asin"}, fpe=True, ulp=(3, 1)),
    Spec("arccos", "numpy:arccos", "unary", {"torch": "acos", "mkl": "Acos"}, fpe=True, ulp=(2, 1)),
    Spec("arctan", "numpy:arctan", "unary", {"torch": "atan", "mkl": "Atan"}, fpe=True, ulp=(2, 1)),
    Spec("sinh", "numpy:sinh", "unary", {"mkl": "Sinh"}, fpe=True, cost=2.0),
    Spec("cosh", "numpy:cosh", "unary", {"mkl": "Cosh"}, fpe=True, cost=2.0),
    Spec("tanh", "numpy:tanh", "unary", {"torch": "tanh", "mkl": "Tanh"}, fpe=True, ulp=(1, 1)),
    Spec("arcsinh", "numpy:arcsinh", "unary", {"torch": "asinh", "mkl": "Asinh"}, fpe=True, ulp=(2, 2),
         cost=2.0),
    Spec("arccosh", "numpy:arccosh", "unary", {"torch": "acosh", "mkl": "Acosh"}, fpe=True, ulp=(2, 2),
         cost=2.0),
    Spec("arctanh", "numpy:arctanh", "unary", {"torch": "atanh", "mkl": "Atanh"}, fpe=True, ulp=(2, 2),
         cost=2.0),
    Spec("sinc", "numpy:sinc", "elementwise", {"torch": "sinc"}, fpe=True, ulp=(2, 1),
         cost=4.0),
    Spec("i0", "numpy:i0", "elementwise", {"torch": "special.i0"}, fpe=True, ulp=(8, 8),
         cost=8.0),
    Spec("power", "numpy:power", "binary", {"torch": "pow", "mkl": "Pow"}, fpe=True, ulp=(1, 1), cost=2.0),
    Spec("float_power", "numpy:float_power", "binary", {"torch": "pow"}, fpe=True, ulp=(1, 1),
         cost=2.0),
    Spec("arctan2", "numpy:arctan2", "binary", {"torch": "atan2", "mkl": "Atan2"}, fpe=True, ulp=(3, 1)),
    Spec("hypot", "numpy:hypot", "binary", {"torch": "hypot"}, fpe=True, ulp=(1, 1)),
    Spec("logaddexp", "numpy:logaddexp", "binary", fpe=True, cost=2.0),
    Spec("logaddexp2", "numpy:logaddexp2", "binary", fpe=True, cost=2.0),
    # scipy.special's loops clear the FPU flags they raise, so these never report any.
    Spec("erfc", "scipy.special:erfc", "unary", {"mkl": "Erfc"}, cost=8.0),
    Spec("erfinv", "scipy.special:erfinv", "unary", {"torch": "special.erfinv", "mkl": "ErfInv"}, ulp=(3, 3),
         cost=8.0),
    Spec("erfcinv", "scipy.special:erfcinv", "unary", {"mkl": "ErfcInv"}, cost=8.0),
    Spec("erfcx", "scipy.special:erfcx", "unary", cost=8.0),
    Spec("expit", "scipy.special:expit", "unary", {"torch": "special.expit"}, ulp=(4, 4),
         cost=2.0),
    Spec("logit", "scipy.special:logit", "unary", cost=2.0),
    Spec("log_expit", "scipy.special:log_expit", "unary", cost=4.0),
    Spec("ndtr", "scipy.special:ndtr", "unary", {"mkl": "CdfNorm"}, cost=8.0),
    # torch's float32 ndtri is up to 3.1 ULP from the true value where SciPy's is 0.5
    # (bench/accuracy.py, 20000 points on [0, 1] and log-spread toward 0): NumPy's only.
    Spec("ndtri", "scipy.special:ndtri", "unary", {"mkl": "CdfNormInv"}, cost=8.0),
    Spec("log_ndtr", "scipy.special:log_ndtr", "unary", cost=8.0),
    Spec("gammaln", "scipy.special:gammaln", "unary", cost=8.0),
    Spec("digamma", "scipy.special:digamma", "unary", cost=8.0),
    Spec("entr", "scipy.special:entr", "unary", {"torch": "special.entr"}, ulp=(2, 2),
         cost=2.0),
    Spec("xlogy", "scipy.special:xlogy", "binary", {"torch": "special.xlogy"}, ulp=(1, 1),
         cost=2.0),
    Spec("xlog1py", "scipy.special:xlog1py", "binary", {"torch": "special.xlog1py"},
         ulp=(2, 3), cost=2.0),
    Spec("logsumexp", "scipy.special:logsumexp", "logsumexp", {"torch": "logsumexp"}, ulp=(8, 8)),
    # torch's softmax sums in another order (up to 131 ULP in float32 over 10^5
    # elements) and gives NaN where log_softmax gives -inf: NumPy's passes only.
    Spec("softmax", "scipy.special:softmax", "softmax", ulp=(0, 0)),
    Spec("log_softmax", "scipy.special:log_softmax", "softmax", ulp=(0, 0)),
)

BY_NAME = {row.name: row for row in ROWS}
