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


# the name python's own messages carry in front, for a script or module that cannot run
PROG = "fastmath run"


def run(mode: str, target: str, args: list, module: bool = False, code: bool = False) -> int:
    """Run a script (or ``-m`` module, or ``-c`` program text) as ``__main__`` with the
    patch in place throughout, as python runs it: the same ``sys.argv`` and ``sys.path[0]``,
    and for a script or module that cannot run, python's message and exit status.

    Child processes (multiprocessing, subprocess) inherit FASTMATH_PATCH and patch too.
    """
    import runpy

    from .integrations import _patch

    if not (module or code) and not os.path.isdir(target):
        try:
            open(target, "rb").close()
        except OSError as e:
            print(f"{PROG}: can't open file {os.path.abspath(target)!r}: "
                  f"[Errno {e.errno}] {e.strerror}", file=sys.stderr)
            return 2
    _patch.start(mode)
    os.environ["FASTMATH_PATCH"] = mode
    sys.argv = ["-c" if code else target, *args]
    try:
        if module:
            sys.path.insert(0, os.getcwd())
            runpy.run_module(target, run_name="__main__", alter_sys=True)
        elif code:
            sys.path.insert(0, "")
            _run_code(target)
        else:
            sys.path.insert(0, os.path.dirname(os.path.abspath(target)))
            runpy.run_path(target, run_name="__main__")
    except SystemExit as e:
        status = e.code
        if status is None or isinstance(status, int):
            return status or 0
        print(status, file=sys.stderr)
        return 1
    except Exception as e:  # noqa: BLE001 - what python does with what the script lets out
        return _report(e)
    return 0


def _run_code(source: str) -> None:
    """``python -c``: the code runs in a fresh ``__main__`` module, as runpy runs a script."""
    import types

    main, saved = types.ModuleType("__main__"), sys.modules.get("__main__")
    sys.modules["__main__"] = main
    try:
        exec(compile(source, "<string>", "exec"), main.__dict__)
    finally:
        sys.modules["__main__"] = saved


def _report(error: BaseException) -> int:
    """Print an exception as python prints one its script let out, and return python's
    status: the traceback starts at the user's code, without this module's or runpy's
    frames; where the user's code never ran, a module that is not there gets python's one
    line ("No module named x") and a syntax error its usual caret."""
    import runpy

    ours = {__file__, runpy.__file__, "<frozen runpy>"}
    tb = error.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename in ours:
        tb = tb.tb_next
    if tb is None and isinstance(error, ImportError):
        print(f"{PROG}: {error}", file=sys.stderr)
    else:
        sys.excepthook(type(error), error.with_traceback(tb), tb)
    return 1


USAGE = "%(prog)s [-h] [--mode {loops,functions,both}] (script | -m module | -c code) [arg ...]"


def add_arguments(parser) -> None:
    import argparse

    parser.usage = USAGE
    parser.add_argument("--mode", choices=("loops", "functions", "both"), default=None,
                        help="what to replace: NumPy's ufunc loops, NumPy's and SciPy's "
                        "functions, or both (default: both; functions without the loop "
                        "extension)")
    # as python's own options, -m and -c end fastmath's: the rest is the module's or code's
    parser.add_argument("-m", dest="module", nargs=argparse.REMAINDER,
                        help="module [arg ...]: run a module by name, as python -m does")
    parser.add_argument("-c", dest="code", nargs=argparse.REMAINDER,
                        help="code [arg ...]: run program text, as python -c does "
                        "(sys.argv is ['-c', arg, ...])")
    parser.add_argument("script", nargs="?", help="the script to run (unless -m or -c)")
    parser.add_argument("args", nargs=argparse.REMAINDER, metavar="arg",
                        help="its arguments (optional)")
    parser.set_defaults(usage_error=parser.error)


def main(args) -> int:
    for option, given, what in (("-m", args.module, "a module name, as python -m"),
                                ("-c", args.code, "the code to run, as python -c")):
        if given == []:
            args.usage_error(f"argument {option}: expected {what} does")
    mode = args.mode or resolve("1")
    if args.module:
        return run(mode, args.module[0], args.module[1:], module=True)
    if args.code:
        return run(mode, args.code[0], args.code[1:], code=True)
    if args.script is None:
        args.usage_error("nothing to run: give a script, -m module or -c code")
    return run(mode, args.script, args.args)
