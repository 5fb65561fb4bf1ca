"""The front ends: NumPy's and SciPy's call semantics, written once.

``_pipeline`` parses arguments, classifies operands, resolves dtypes with the reference,
allocates outputs, applies ``where=`` and unwraps; ``_ufunc``, ``_binary`` and
``_elementwise`` are the callable objects built on it, ``_reductions`` holds logsumexp,
softmax and log_softmax, ``_linalg`` vecdot and einsum, ``_native`` the device-array route,
``_frames`` takes fastmath's frames out of the tracebacks of NumPy's errors.
"""
