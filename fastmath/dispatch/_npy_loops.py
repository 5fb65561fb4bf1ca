"""NumPy's own strided loops, run on the native runtime: which of a ufunc's loops it can
run (``native_loops``), and from what size splitting a NumPy call across threads pays.

The numpy backend and fastmath.foreach both run these loops; the knowledge lives here,
below both, so that neither reaches into the other.
"""
from __future__ import annotations

from .._numpy import np

try:
    from . import _runtime
except ImportError:  # built without a C compiler: the Python pool splits
    _runtime = None

# A thread handoff costs about 50 us on the reference machine: below about 1 MiB of
# input to numpy's exp (about 120 us of work) one thread is faster. Costlier functions
# split sooner (Spec.cost).
PARALLEL_MIN_BYTES = 1 << 20

# The dtypes whose NumPy loop the native runtime may run (each one the ufunc takes as is).
_NATIVE_TYPES = "efdgFDG"


def native_loops(ufunc):
    """``(dtype, result dtype, call info)`` for each dtype whose NumPy loop the native
    runtime (``_runtime.unary``) and, for one-argument ufuncs, fastmath.foreach
    (``_lists.foreach``) run for ``ufunc``: NumPy's own ufuncs of one or two arguments
    (both of the dtype), on dtypes the ufunc takes without a cast; () if none, or if the
    runtime was not built."""
    if _runtime is None or not isinstance(ufunc, np.ufunc) \
            or ufunc.nin not in (1, 2) or ufunc.nout != 1:
        return ()
    nin = ufunc.nin
    loops = []
    for code in _NATIVE_TYPES:
        dt = np.dtype(code)
        try:
            dts, info = ufunc._resolve_dtypes_and_context((dt,) * nin + (None,))
            if any(d is not dt for d in dts[:nin]) or dts[nin].hasobject:
                continue
            ufunc._get_strided_loop(info, fixed_strides=(dt.itemsize,) * nin
                                    + (dts[nin].itemsize,))
        except Exception:  # noqa: BLE001 - no loop for this dtype, or another NumPy's API
            continue
        loops.append((dts[0], dts[nin], info))
    loops = tuple(loops)
    try:  # one element through the compiled path: another NumPy's call info fails here
        pace = _runtime.new_pace()
        ok = True
        try:
            with np.errstate(all="ignore"):
                for dt, res, _ in loops:
                    xs, got = (np.ones(1, dt),) * nin, np.empty(1, res)
                    ok &= (_runtime.unary(loops, xs, got, pace, 0, 0, 1) is not None
                           and np.array_equal(got, ufunc(*xs), equal_nan=True))
        finally:
            _runtime.free_pace(pace)
    except Exception:  # noqa: BLE001 - then the Python path it is
        ok = False
    return loops if ok else ()
