"""The backend protocol, written once: what a backend has, and what its kernels take and return.

A backend is one object, made on first use by ``fastmath.backends.get`` from its entry in
the backend list. Dispatch reads only the members below: required ones directly, optional
ones with ``getattr`` (absent means "not offered"). The kernel a backend gives for a
registry row is called by the chain runner (``dispatch/_chain.py``) with arrays the front
end has already made well formed (NumPy's argument handling and type resolution done), and
writes only into the output it is given, never into its input, with which it may share
memory.

What a kernel returns, every kind alike:

- ``HANDLED`` (None): done; NumPy already acted on any floating-point errors in this thread,
  or there can be none;
- an int of FP flags (``dispatch/_fpe``'s bits) for the front end to report;
- ``UNCHECKED``: done, but the backend cannot see FPU flags; the front end derives them
  (from the input: for an in-place call with another backend behind this one, it keeps a
  copy of the input first);
- ``NotImplemented``, before writing anything: declined (a dtype or layout it cannot take);
  the next backend in the plan takes the call. numpy ends every plan.

A kernel that raises part-way may have written some of its output: the next backend in
line then runs over the whole output.
"""
from __future__ import annotations

from typing import Any, Callable, Optional, Protocol, runtime_checkable

# What a kernel returns besides NotImplemented (see the module docstring).
HANDLED = None
UNCHECKED = -1

# kind (the registry's ``Spec.kind``) -> how the chain runner calls a kernel of that kind
KERNEL_SIGNATURES = {
    "unary": "k(x, out) -> flags",
    "elementwise": "k(x, out) -> flags",
    "binary": "k(x1, x2, out) -> flags",
    "logsumexp": "k(a, axes, b) -> (M, m, s): SciPy's partials over the sorted axes "
                 "``axes``, kept as length-1 dimensions; ``b`` the weights or None",
    "softmax": "k(x, axes, out) -> flags",
}


@runtime_checkable
class Backend(Protocol):
    """The members every backend has.

    ``name`` is its entry in the backend list. ``why_unavailable()`` returns None when it
    can run here, else a sentence saying why not and how to fix it; it is the first place
    the backend may import its library (never at import of fastmath). ``kernel(spec)``
    returns a callable for a registry row (see ``KERNEL_SIGNATURES``), or None where this
    backend has none.
    """

    name: str

    def why_unavailable(self) -> Optional[str]: ...

    def kernel(self, spec) -> Optional[Callable[..., Any]]: ...


# Optional backend members: name -> what dispatch does with it where a backend has it.
OPTIONAL = {
    "why_missing": "why_missing() -> str or None: what why_unavailable() can tell without "
                   "importing the library (is the package there at all?); import fastmath "
                   "checks FASTMATH_BACKEND with it",
    "foreach": "foreach(spec) -> list kernel or None: a kernel over a list of arrays for "
               "fastmath.foreach (see ``LIST_KERNEL``)",
    "native": "native(spec, x) -> result or NotImplemented: ``spec``'s function of an array "
              "that lives on a device (a torch tensor, a DLPack producer), computed where it "
              "lives, returned as the caller's array type",
    "own_threads": "own_threads: f(size) -> bool, or None: whether the library's own "
                   "threads share a call of ``size`` elements (auto times those calls)",
    "loaded": "loaded() -> bool: whether the costly library the first kernel imports is "
              "imported already; auto tries the backend on a program's calls only then, or "
              "once they have done enough work to pay for the import (dispatch/_learn.py)",
}

# A list kernel (a backend's ``foreach(spec)``), as the foreach front end runs it through the
# chain runner, with NumPy's call per array behind it:
LIST_KERNEL = {
    "call": "k(xs, outs, results, limit=None, stop=0) -> (flags, left): computes the arrays "
            "of the list ``xs`` it takes as they are, into ``outs[i]`` (``outs`` None: new "
            "arrays of NumPy's result dtype and layout), and sets ``results[i]``; ``left``: "
            "the indices of the others, in order, which the front end computes as "
            "fastmath.<name> does; ``flags``: each array's FP flags (0 for those left), or "
            "None where none was raised. ``limit``: arrays of this many elements or more are "
            "left (None: the kernel's own ``limit``, or none). ``stop`` (with ``outs`` only, "
            "for kernels that ``stops``): stop after the first array raising any of these "
            "flags, leaving every later one. A kernel that raises leaves every input as it "
            "found it (an array computed in place too), for the next to compute the whole list",
    "stops": "True: its flags are each array's own as NumPy raises them, and it honours "
             "``stop``; the front end then runs it under errstate raise/call too (absent: "
             "the front end computes each array in turn there)",
    "limit": "the size from which it leaves arrays (absent: none); below it, an array is "
             "computed by this backend as the reference's own call",
}

# Optional kernel attributes, for kernels that run the reference's own loop: the front
# end then hands the arrays over as they are, and the result is the reference's bit for bit.
KERNEL_ATTRIBUTES = {
    "any_strides": "True: the kernel takes negative strides as they are",
    "masked": "masked(mask) -> kernel or None: a kernel for the elements a where= mask selects",
    "runtime_pace": "the native runtime's pacing record (a number from its new_pace()) "
                    "under which the kernel's calls split, -1 for none: auto's learning "
                    "lets them split while it times them (dispatch/_learn.py)",
    "runtime_entry": "runtime_entry() -> (loops, pace, smallest bytes) or None: how a front "
                     "end may make this kernel's calls of one contiguous array itself, with "
                     "no Python in between (the ufuncs' fast path in C): the native "
                     "runtime's ``unary(loops, x, out, pace, 0, 0, 0)`` from that size, "
                     "the reference's own call below it",
}


def missing(backend) -> list:
    """The required members ``backend`` lacks (empty when it keeps the protocol)."""
    return [m for m in ("name", "why_unavailable", "kernel")
            if not hasattr(backend, m) or (m != "name" and not callable(getattr(backend, m)))]
