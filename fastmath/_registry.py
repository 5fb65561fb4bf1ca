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
    kind: str  # "unary" (ufunc-like) or "logsumexp" (reduction)
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
# each about 1-2 ULP, so never less than 1.
ROWS = (
    Spec("exp", "numpy:exp", "unary", {"torch": "exp"}, fpe=True, ulp=(3, 2)),
    Spec("log", "numpy:log", "unary", {"torch": "log"}, fpe=True, ulp=(4, 2)),
    Spec("log1p", "numpy:log1p", "unary", {"torch": "log1p"}, fpe=True, ulp=(3, 2)),
    Spec("expm1", "numpy:expm1", "unary", {"torch": "expm1"}, fpe=True, ulp=(3, 2)),
    Spec("erf", "scipy.special:erf", "unary", {"torch": "special.erf"}, fpe=False, ulp=(2, 4),
         cost=8.0),
    Spec("logsumexp", "scipy.special:logsumexp", "logsumexp", {"torch": "logsumexp"}, ulp=(8, 8)),
)

BY_NAME = {row.name: row for row in ROWS}
