"""Ways in without changing code, and ways out past one call.

``_patch`` (with ``_loopmode`` and the C extension ``_loops``) puts fastmath in place
process-wide, ``_accelerate`` reroutes one function (``_blockwise``, ``_blockwise_dask``
run it block by block); ``_nested`` is the start/stop counter the patches share. They find
fastmath's functions in the front ends' table (frontends/_functions.py), never by
importing ``fastmath``.
"""
