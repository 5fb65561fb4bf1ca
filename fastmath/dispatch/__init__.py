"""Dispatch: which backend runs a call, and what every backend shares.

``_selection`` builds the plan (the backends to try, in order) from the scope in force and
the calibration table (``_calibration``, ``calibration-defaults.json``); ``_chain`` runs a
plan with one fault policy; ``_config`` reads the FASTMATH_ variables; ``_fpe`` reports
floating-point errors as NumPy does; ``_parallel`` is the thread pool; ``_alloc`` tunes
output allocation; ``_log`` the "ran on" logging; ``_hardware`` what the machine has.
"""
