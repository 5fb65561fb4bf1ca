"""The front ends: NumPy's and SciPy's call semantics, written once.

``_pipeline`` parses arguments, classifies operands, resolves dtypes with the reference,
allocates outputs, applies ``where=`` and unwraps; ``_ufunc``, ``_binary`` and
``_elementwise`` are the callable objects built on it, ``_reductions`` holds logsumexp,
softmax and log_softmax (with ``_lse_steps``, the logsumexp steps they share with the Dask
route), ``_linalg`` vecdot and einsum. ``_dask`` (Dask arrays) and ``_native`` (arrays on a
device) are the operand routes beside the pipeline's. ``_functions`` is the function table:
fastmath's callable for every registry row, which the public namespace and the integrations
read. ``_foreach`` is the front end of ``fastmath.foreach`` (one function over a list of
arrays, through the backends' list kernels). ``_frames`` takes fastmath's frames out of the
tracebacks of NumPy's errors. The C extension ``_hot`` (``_hot.c``) is the ufuncs' fast path.
"""
