"""fastmath in place before anything else imports: ``FASTMATH_PATCH`` and ``fastmath run``.

``fastmath-startup.pth``, installed into site-packages next to the package, runs one line
at every interpreter start: if ``FASTMATH_PATCH`` is set it calls :func:`from_environment`,
otherwise it costs a dictionary look-up and imports nothing. A patch begun here lasts for
the whole process, so every library imports with fastmath already in place: names bound at
import (``from scipy.special import logsumexp``) are fastmath's, and the loop mode covers
every ufunc call.

Values: ``loops``, ``functions``, ``both``; ``1`` means ``both`` (``functions`` where the
loop extension is not built); ``0`` or empty, nothing.
"""
from __future__ import annotations

import os
import sys

_TRUE = {"1", "true", "yes", "on"}
_OFF = {"", "0", "false", "no", "off"}


def resolve(value: str) -> str | None:
    """The patch mode a FASTMATH_PATCH value asks for; None for none; ValueError if bad."""
    from .integrations import _loopmode, _patch

    value = value.strip().lower()
    if value in _OFF:
        return None
    if value in _TRUE:
        return "both" if _loopmode.available() else "functions"
    if value not in _patch.MODES:
        raise ValueError(f"FASTMATH_PATCH={value!r}: expected 1, 0, "
                         f"{', '.join(_patch.MODES)}")
    return value


def from_environment() -> None:
    """Start the patch FASTMATH_PATCH asks for; a bad value or a missing extension warns."""
    import warnings

    try:
        mode = resolve(os.environ.get("FASTMATH_PATCH", ""))
        if mode is not None:
            from .integrations import _patch

            _patch.start(mode)
    except (ValueError, RuntimeError) as e:
        warnings.warn(f"fastmath: {e}; running without the patch", RuntimeWarning, stacklevel=2)


def run(mode: str, target: str, args: list, module: bool = False) -> int:
    """Run a script (or ``-m`` module) as ``__main__`` with the patch in place throughout.

    Child processes (multiprocessing, subprocess) inherit FASTMATH_PATCH and patch too.
    """
    import runpy

    from .integrations import _patch

    _patch.start(mode)
    os.environ["FASTMATH_PATCH"] = mode
    sys.argv = [target, *args]
    try:
        if module:
            runpy.run_module(target, run_name="__main__", alter_sys=True)
        else:
            sys.path.insert(0, os.path.dirname(os.path.abspath(target)))
            runpy.run_path(target, run_name="__main__")
    except SystemExit as e:
        code = e.code
        if code is None or isinstance(code, int):
            return code or 0
        print(code, file=sys.stderr)
        return 1
    return 0


def add_arguments(parser) -> None:
    parser.add_argument("--mode", choices=("loops", "functions", "both"), default=None,
                        help="what to replace: NumPy's ufunc loops, NumPy's and SciPy's "
                        "functions, or both (default: both; functions without the loop "
                        "extension)")
    parser.add_argument("-m", dest="module", action="store_true",
                        help="run a module by name, as python -m does")
    parser.add_argument("target", help="the script (or, with -m, the module) to run")
    parser.add_argument("args", nargs="...", help="its arguments")


def main(args) -> int:
    mode = args.mode or resolve("1")
    return run(mode, args.target, args.args, module=args.module)
