"""A process-wide change that nests: made by the first ``start()``, undone by the last
``stop()``. Both kinds of ``fastmath.patch`` (functions and loops) are one of these."""
from __future__ import annotations

import threading


class Nested:
    """``apply(*args)`` at the first :meth:`start`, ``undo()`` at the matching last
    :meth:`stop`; a failing ``apply`` is undone at once and counts as no start.
    ``stop_error`` words the error of a ``stop()`` with nothing started."""

    def __init__(self, apply, undo, stop_error):
        self._apply, self._undo, self._stop_error = apply, undo, stop_error
        self.lock = threading.Lock()
        self.depth = 0

    def start(self, *args) -> None:
        with self.lock:
            if self.depth == 0:
                try:
                    self._apply(*args)
                except BaseException:
                    self._undo()
                    raise
            self.depth += 1

    def stop(self) -> None:
        with self.lock:
            if self.depth == 0:
                raise RuntimeError(self._stop_error)
            self.depth -= 1
            if self.depth == 0:
                self._undo()

    def active(self) -> bool:
        return self.depth > 0
