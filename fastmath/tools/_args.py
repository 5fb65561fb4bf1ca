"""Option types for the ``fastmath`` command.

A bad value is a usage error (argparse prints the usage and the problem, exit status 2)
that names the valid choices, raised while the command line is parsed, so nothing is
measured before it is found and no traceback is shown.
"""
from __future__ import annotations

import argparse
import os
from pathlib import Path


def _split(text: str, what: str) -> list:
    items = [t.strip() for t in text.split(",") if t.strip()]
    if not items:
        raise argparse.ArgumentTypeError(f"no {what} given in {text!r}")
    return items


def names(valid, what: str, aliases=None):
    """A comma-separated list of names from ``valid`` (a callable giving them: the list is
    only built when the option is given); ``aliases`` maps other spellings onto them."""
    def parse(text):
        choices = list(valid())
        extra = aliases() if aliases else {}
        items = _split(text, what)
        bad = [t for t in items if t not in choices and t not in extra]
        if bad:
            raise argparse.ArgumentTypeError(
                f"unknown {what} {', '.join(map(repr, bad))}; valid choices: "
                f"{', '.join(choices)}")
        return [extra.get(t, t) for t in items]
    return parse


def backends(include_auto: bool = True):
    """A comma-separated list of backends that can run here (and ``auto``)."""
    def valid():
        from .. import backends as b

        return (("auto",) if include_auto else ()) + b.NAMES

    pick = names(valid, "backend")

    def parse(text):
        from .. import backends as b

        chosen = pick(text)
        here = [n for n in valid() if n == "auto" or b.why_unavailable(n) is None]
        for name in chosen:
            if name not in here:
                raise argparse.ArgumentTypeError(
                    f"backend {name!r} is unavailable here ({b.why_unavailable(name)}); "
                    f"available: {', '.join(here)}")
        return chosen
    return parse


def functions(valid=None):
    """A comma-separated list of accelerated functions (aliases such as psi allowed),
    from ``valid`` if given, else every registry row."""
    def rows():
        from .._registry import BY_NAME

        return valid if valid is not None else tuple(BY_NAME)

    def aliases():
        from .._registry import ALIASES

        return {a: row.name for a, row in ALIASES.items() if row.name in rows()}
    return names(rows, "function", aliases)


def positive_int(text: str) -> int:
    """A count such as ``--rounds``: a whole number from 1."""
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a whole number of at least 1 (valid: 1, 2, 3, ...)")
    return n


def sizes(text: str) -> tuple:
    """Comma-separated element counts ("1000,1e6"), sorted."""
    out = []
    for item in _split(text, "size"):
        try:
            n = float(item)
        except ValueError:
            n = 0.0
        if not (1 <= n < 2 ** 62) or n != int(n):
            raise argparse.ArgumentTypeError(
                f"{item!r} is not an element count (a whole number from 1, such as 1000 or 1e6)")
        out.append(int(n))
    return tuple(sorted(set(out)))


def shape(text: str) -> tuple:
    """A shape such as ``3000x3000``."""
    try:
        dims = tuple(int(d) for d in text.lower().split("x"))
    except ValueError:
        dims = ()
    if not dims or any(d < 1 for d in dims):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a shape such as 3000x3000 (whole numbers from 1, joined by x)")
    return dims


def output_file(text: str) -> str:
    """A file to write at the end of a run: its folder must exist and take new files, so
    a typo is found before the run rather than after it."""
    path = Path(text)
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r} is a directory, not a file")
    folder = path.parent
    if not folder.is_dir():
        raise argparse.ArgumentTypeError(f"{str(folder)!r} is not an existing folder")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise argparse.ArgumentTypeError(f"cannot write in {str(folder)!r}")
    return text
