"""The ``fastmath`` command and what it runs: ``cli`` (entry point), ``_args`` (shared
argument parsing), ``_bench``, ``_peers``, ``_calibrate``, ``_check``, ``_explain``,
``_info`` and ``_table`` (the info report), ``_docs`` (the function table of the docs).
"""
