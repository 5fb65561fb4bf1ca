"""A small backend that keeps the protocol (fastmath/backends/_protocol.py), for the tests
and the docs (docs/backends.md#adding-a-backend): float64 unary ufuncs, computed by the
reference ufunc itself; everything else declined, so the next backend in line takes it."""
import numpy as np

from fastmath.backends import HANDLED


class ExampleBackend:
    name = "example"
    calls = 0  # how many calls its kernels computed (the tests read it)

    def why_unavailable(self):
        return None  # nothing to import: it can always run

    def kernel(self, spec):
        if spec.kind != "unary" or not spec.ref.startswith("numpy:"):
            return None  # no kernel for this row
        ufunc = spec.reference()

        def k(x, out):
            if x.dtype != np.float64:
                return NotImplemented  # declined, before writing anything
            ufunc(x, out=out)  # NumPy acts on its own FP errors in this thread
            ExampleBackend.calls += 1
            return HANDLED
        return k
