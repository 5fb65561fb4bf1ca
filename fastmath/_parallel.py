"""One persistent thread pool, shared by every CPU kernel that splits work into chunks.

NumPy's and SciPy's ufunc loops release the GIL, so running one loop per chunk in threads
uses every core while each chunk computes exactly what NumPy computes. The pool is created
on first use, sized by FASTMATH_NUM_THREADS, and recreated after fork (a child process has
no threads of its parent's pool).
"""
from __future__ import annotations

import contextvars
import os
import threading
from concurrent.futures import ThreadPoolExecutor

from . import _config

_lock = threading.Lock()
_pool: ThreadPoolExecutor | None = None
_size = 0
_PREFIX = "fastmath-pool"


# True while a task runs that is itself one part of a split computation (a block of
# accelerate(elementwise=True)): the work inside it stays in its thread, no cores to spare.
serial: contextvars.ContextVar = contextvars.ContextVar("fastmath_serial", default=False)


def threads() -> int:
    return 1 if serial.get() else _config.get().num_threads


def _reset() -> None:
    global _pool, _size
    _pool, _size = None, 0


def _get_pool(workers: int) -> ThreadPoolExecutor:
    """A pool with at least ``workers`` threads. It only grows: another caller may still
    be submitting to the one it replaces, which is dropped, not shut down (its idle
    threads exit once it is garbage collected)."""
    global _pool, _size
    with _lock:
        if _pool is None or _size < workers:
            _pool, _size = ThreadPoolExecutor(workers, thread_name_prefix=_PREFIX), workers
        return _pool


def run(tasks):
    """Run zero-argument callables concurrently, the last one in this thread.

    Returns their results in order. Every task finishes before this returns, even when
    one raises: no chunk is still writing into an output the caller may reuse. Called from
    a worker of the pool itself (a task that splits its own work, as fastmath.foreach's
    do), the tasks run one after another there: waiting on the pool from inside it could
    wait forever.
    """
    if len(tasks) == 1 or threading.current_thread().name.startswith(_PREFIX):
        return [t() for t in tasks]
    pool = _get_pool(len(tasks) - 1)
    futures = [pool.submit(t) for t in tasks[:-1]]
    error = None
    try:
        last = tasks[-1]()
    except BaseException as e:  # noqa: BLE001 - re-raised below, after the others finish
        error, last = e, None
    results = []
    for f in futures:
        try:
            results.append(f.result())
        except BaseException as e:  # noqa: BLE001
            error = error or e
            results.append(None)
    if error is not None:
        raise error
    results.append(last)
    return results


def bounds(n: int, parts: int):
    """``parts`` contiguous [start, stop) ranges covering range(n), as equal as possible."""
    return [(n * i // parts, n * (i + 1) // parts) for i in range(parts)]


def split_axis(shape, strides) -> int:
    """The axis to cut an array into chunks along: the outermost in memory with extent > 1."""
    best, best_stride = 0, -1
    for axis, (n, s) in enumerate(zip(shape, strides)):
        if n > 1 and abs(s) > best_stride:
            best, best_stride = axis, abs(s)
    return best


def chunk_views(arrays, parts: int):
    """Cut arrays of one shape into ``parts`` matching chunks along the same axis.

    Contiguous arrays of the same memory order are cut as flat 1-D views (no copy); any
    other layout is cut along its outermost axis, which keeps every chunk a plain view.
    """
    first = arrays[0]
    if first.ndim == 0:
        return [tuple(arrays)]
    for order, flag in (("C", "C_CONTIGUOUS"), ("F", "F_CONTIGUOUS")):
        if all(a.flags[flag] for a in arrays):
            flat = [a.reshape(-1, order=order) for a in arrays]
            return [tuple(f[i:j] for f in flat) for i, j in bounds(first.size, parts)]
    axis = split_axis(first.shape, first.strides)
    n = first.shape[axis]
    chunks = []
    for i, j in bounds(n, min(parts, n)):
        index = (slice(None),) * axis + (slice(i, j),)
        chunks.append(tuple(a[index] for a in arrays))
    return chunks


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset)
_config.on_reload(_reset)
