"""Ways in without changing code, and ways out past one call.

``_patch`` (with ``_loopmode`` and the C extension ``_loops``) puts fastmath in place
process-wide, ``_accelerate`` reroutes one function (``_blockwise``, ``_blockwise_dask``
run it block by block), ``_dask`` is the Dask route of every front end, ``foreach`` the
list functions; ``_nested`` is the start/stop counter the patches share.
"""
