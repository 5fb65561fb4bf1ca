"""The ``fastmath`` command (also ``python -m fastmath``)."""
from __future__ import annotations

import argparse
import json
import sys


def _info(args) -> int:
    from ._info import collect, render

    d = collect()
    print(json.dumps(d, indent=2) if args.json else render(d))
    return 0


def _bench(args) -> int:
    from . import _bench

    return _bench.main(args)


def _calibrate(args) -> int:
    from . import _calibrate

    return _calibrate.main(args)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="fastmath", description=(
        "NumPy/SciPy math, faster, with the same results."))
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

    args = parser.parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
