"""The ``fastmath`` command (also ``python -m fastmath``)."""
from __future__ import annotations

import argparse
import json
import sys

from . import _args


def _info(args) -> int:
    from ._info import collect

    d = collect()
    if args.json:
        print(json.dumps(d, indent=2))
    else:
        from ._table import show_info

        show_info(d)
    return 0


def _bench(args) -> int:
    from . import _bench

    return _bench.main(args)


def _calibrate(args) -> int:
    from . import _calibrate

    return _calibrate.main(args)


def _check(args) -> int:
    from . import _check

    return _check.main(args)


def _checks() -> dict:
    """subcommand -> {option dest: the type its value must have}. Applied to the values
    after parsing (they stay the strings each subcommand's main expects), so a bad value
    is a usage error naming the valid choices before anything is measured."""
    from . import _bench, _calibrate

    bench_dtypes = _args.names(lambda: ("float16", "float32", "float64"), "dtype")
    return {
        "bench": {"functions": _args.functions(_bench.FUNCTIONS), "dtypes": bench_dtypes,
                  "sizes": _args.sizes, "backends": _args.backends(include_auto=False),
                  "lse_shape": _args.shape, "json": _args.output_file,
                  "plot": _args.output_file},
        "calibrate": {"functions": _args.functions(_bench.FUNCTIONS),
                      "dtypes": _args.names(lambda: _calibrate.DTYPES, "dtype"),
                      "sizes": _args.sizes},
        "check": {"functions": _args.functions(), "backends": _args.backends()},
    }


def _version() -> str:
    import importlib.metadata
    import platform

    import numpy

    try:
        own = importlib.metadata.version("fastmath-shim")
    except importlib.metadata.PackageNotFoundError:
        from .. import __version__ as own
    return (f"fastmath {own} (numpy {numpy.__version__}, python {platform.python_version()})")


def _run(args) -> int:
    from .. import _startup

    return _startup.main(args)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="fastmath", description=(
        "NumPy/SciPy math, faster, with the same results."))
    parser.add_argument("--version", action="version", version=_version())
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("info", help="versions, backends (available or why not), threads, selection")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(run=_info)

    p = sub.add_parser("bench", help="time fastmath against numpy/scipy on this machine")
    from ._bench import add_arguments

    add_arguments(p)
    p.set_defaults(run=_bench)

    p = sub.add_parser("calibrate", help="measure this machine's cost table for auto and save it")
    from ._calibrate import add_arguments as calibrate_arguments

    calibrate_arguments(p)
    p.set_defaults(run=_calibrate)

    p = sub.add_parser("check", help="check every backend here against numpy/scipy",
                       description="Run each accelerated function on each available backend "
                       "over special values and a spread of inputs, compare with NumPy/SciPy "
                       "(bitwise on numpy, within the documented ULP bounds elsewhere), and say "
                       "whether they match. Exit status 1 if any does not.")
    from ._check import add_arguments as check_arguments

    check_arguments(p)
    p.set_defaults(run=_check)

    p = sub.add_parser("run", help="run a script or module with fastmath in place from the start",
                       description="Run a Python script (or -m module, or -c code) with "
                       "fastmath.patch active before anything is imported, as FASTMATH_PATCH "
                       "does. The script sees the sys.argv python would give it; a script or "
                       "module that is not there gets python's message and exit status.")
    from .._startup import add_arguments as run_arguments

    run_arguments(p)
    p.set_defaults(run=_run)

    args = parser.parse_args(argv)
    for dest, check in _checks().get(args.command, {}).items():
        value = getattr(args, dest, None)
        if isinstance(value, str):
            try:
                check(value)
            except argparse.ArgumentTypeError as e:
                sub.choices[args.command].error(
                    f"argument --{dest.replace('_', '-')}: {e}")
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
