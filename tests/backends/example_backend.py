"""A small backend that keeps the protocol (fastmath/backends/_protocol.py), for the tests
and the docs (docs/backends.md#adding-a-backend): float64 unary ufuncs, computed by the
reference ufunc itself; everything else declined, so the next backend in line takes it.
Its list kernel (for fastmath.foreach) computes the float64 arrays of a list the same way
and leaves the others to the front end."""
import numpy as np

from fastmath.backends import HANDLED


class ExampleBackend:
    name = "example"
    calls = 0  # how many calls its kernels computed (the tests read it)
    listed = 0  # how many arrays its list kernels computed

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

    def foreach(self, spec):
        if spec.kind != "unary" or not spec.ref.startswith("numpy:"):
            return None
        ufunc = spec.reference()

        def k(xs, outs, results, limit=None, stop=0):
            flags, left = [0] * len(xs), []
            for i, x in enumerate(xs):
                if type(x) is not np.ndarray or x.dtype != np.float64:
                    left.append(i)  # the front end computes it as fastmath.<name> does
                    continue
                seen = []  # NumPy's flags for this array, for the front end to report
                with np.errstate(all="call", call=lambda _, bits: seen.append(bits)):
                    results[i] = ufunc(x, out=None if outs is None else outs[i])
                flags[i] = max(seen, default=0)
                ExampleBackend.listed += 1
            return (flags if any(flags) else None), left
        return k
