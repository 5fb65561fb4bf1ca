"""The thread budget of fastmath's native runtime, as the ecosystem's tools see it.

How many threads a call may use: ``FASTMATH_NUM_THREADS``, else ``OMP_NUM_THREADS`` (the
variable OpenMP runtimes, BLAS libraries and Dask's workers agree on: a Dask nanny sets it
to 1 for its worker processes unless told otherwise), else the cores this process may run
on (``_config``). The runtime's limit follows the configuration when fastmath reads it (and
rereads it), and threadpoolctl sees the runtime as a library of its own
(``user_api="fastmath"``), so that ``threadpool_limits(1)`` keeps fastmath's calls in
the calling thread for its duration, as it does BLAS's and OpenMP's. threadpoolctl is not
imported for this: its controller is registered when the program imports it (or at once,
if it already has).
"""
from __future__ import annotations

import importlib.abc
import sys

from . import _config

try:
    from . import _runtime
except ImportError:  # built without a C compiler: nothing to limit
    _runtime = None


def follow_config() -> None:
    """The runtime's limit from the configuration (FASTMATH_NUM_THREADS, OMP_NUM_THREADS)."""
    if _runtime is not None:
        _runtime.set_threads(_config.get().num_threads)


def _controller(threadpoolctl):
    class FastmathController(threadpoolctl.LibController):
        """fastmath's native runtime (fastmath/dispatch/_runtime.c)."""

        user_api = "fastmath"
        internal_api = "fastmath"
        filename_prefixes = ("_runtime",)
        check_symbols = ("fastmath_runtime_get_num_threads",)

        def get_num_threads(self):
            return self.dynlib.fastmath_runtime_get_num_threads()

        def set_num_threads(self, num_threads):
            self.dynlib.fastmath_runtime_set_num_threads(num_threads)

        def get_version(self):
            from .._version import VERSION

            return VERSION

    return FastmathController


def _register(threadpoolctl) -> None:
    if _runtime is None or not hasattr(threadpoolctl, "register"):  # threadpoolctl < 3.5
        return
    threadpoolctl.register(_controller(threadpoolctl))


class _WhenImported(importlib.abc.MetaPathFinder):
    """Registers the controller right after the program imports threadpoolctl."""

    def find_spec(self, name, path=None, target=None):
        if name != "threadpoolctl":
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None and spec.loader is not None \
                    and hasattr(spec.loader, "exec_module"):
                run = spec.loader.exec_module

                def exec_module(module, run=run):
                    run(module)
                    _forget_hook()
                    _register(module)
                spec.loader.exec_module = exec_module
                return spec
        return None


_hook = None


def _forget_hook() -> None:
    global _hook
    if _hook is not None and _hook in sys.meta_path:
        sys.meta_path.remove(_hook)
    _hook = None


def install() -> None:
    """Follow the configuration now and on every reload; register with threadpoolctl."""
    global _hook
    follow_config()
    _config.on_reload(follow_config)
    if _runtime is None:
        return
    if "threadpoolctl" in sys.modules:
        _register(sys.modules["threadpoolctl"])
    elif _hook is None:
        _hook = _WhenImported()
        sys.meta_path.insert(0, _hook)
