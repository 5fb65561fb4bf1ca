"""One persistent thread pool, shared by every CPU kernel that splits work into chunks.

NumPy's and SciPy's ufunc loops release the GIL, so running one loop per chunk in threads
uses every core while each chunk computes exactly what NumPy computes.

Chunks are handed out one at a time to whichever thread is free (the caller's own
thread included), and there are several per thread: when another process holds one core,
the thread that shares it simply takes fewer chunks, instead of the whole call waiting
for its fixed share. A call that is interrupted (Ctrl-C, or any exception in the
caller's thread or a chunk) starts no further chunk and returns only once the chunks
already started have finished: nothing writes into an output after the exception has
reached the caller, and the next call finds the pool free.

Fork: the pool's threads do not exist in a child process, so the child starts a new pool
on first use. torch's CPU kernels run on GNU OpenMP, whose thread team cannot be
restarted in a child: a forked child that runs a parallel torch kernel waits forever for
threads it does not have. The child therefore sets torch to one thread at once, whoever
loaded torch (see docs/reliability.md).
"""
from __future__ import annotations

import contextvars
import os
import queue
import time
import sys
import threading

from . import _config, _threads

try:
    from . import _runtime
except ImportError:  # built without a compiler: nothing is paced
    _runtime = None


def _registry_warning() -> None:
    """Warn once, at the user's ``import``, where the registry of fastmath's processes on
    this machine (dispatch/_runtime.c) was a file that is not fastmath's."""
    if _runtime is None:
        return
    said = _runtime.registry()
    if not said["warn"]:
        return
    import warnings

    from . import _fpe
    if said["path"] is not None:
        text = f"{said['path']} was not the registry of fastmath's processes; replaced"
    else:
        text = (f"{said['why']}: each fastmath process splits its calls as if alone on this "
                "machine. Remove that file, or set FASTMATH_REGISTRY to another path (off: "
                "none)")
    warnings.warn(f"fastmath: {text}", RuntimeWarning, stacklevel=_fpe.user_stacklevel())


_registry_warning()

# A chunk smaller than this costs more in handoff (a lock and a Python call, a few us)
# than it can win back in balance.
MIN_CHUNK_BYTES = 1 << 16
# Chunks per thread: with one core shared with another busy process, each chunk is
# 1/(OVERSPLIT * threads) of the call, so the slowest thread finishes at most that late.
OVERSPLIT = 4

# The clocks the back-offs below read (wall time; the process's and a thread's CPU time),
# looked up at each call: tests put made-up ones in their place (tests/helpers.FakeClock),
# so that whether a split lost is theirs to say, not the load of the machine they run on.
# The numpy backend and fastmath.foreach time their calls with ``clock`` too.
clock = time.perf_counter
process_clock = time.process_time
thread_clock = time.thread_time

_lock = threading.Lock()
_jobs: queue.SimpleQueue | None = None
_workers = 0
_PREFIX = "fastmath-pool"
_local = threading.local()


# True while a task runs that is itself one part of a split computation (a block of
# accelerate(elementwise=True)): the work inside it stays in its thread, no cores to spare.
serial: contextvars.ContextVar = contextvars.ContextVar("fastmath_serial", default=False)


# True while a call writes into the caller's own out=: NumPy's loop cannot be interrupted,
# so after Ctrl-C NumPy's out= is whole; fastmath's then is too (every chunk still runs).
# Elsewhere an interrupt starts no further chunk: the output is discarded anyway.
whole: contextvars.ContextVar = contextvars.ContextVar("fastmath_whole", default=False)


def threads() -> int:
    return 1 if serial.get() else _config.get().num_threads


_threads.install()  # the native runtime's limit follows num_threads; threadpoolctl sees it


class _Job:
    """One call's tasks, claimed one at a time by the caller and the pool's threads."""

    __slots__ = ("tasks", "results", "next", "running", "error", "lock", "done", "whole", "cpu")

    def __init__(self, tasks, timed=False):
        self.cpu = 0.0 if timed else None  # the tasks' CPU seconds, all threads together
        self.whole = whole.get()
        self.tasks = tasks
        self.results = [None] * len(tasks)
        self.next = 0
        self.running = 0
        self.error = None
        self.lock = threading.Lock()
        self.done = threading.Event()

    def claim(self):
        """The index of a task to run now, or None when none is left to start."""
        with self.lock:
            tasks = self.tasks
            if tasks is None or self.next >= len(tasks):
                return None
            i = self.next
            self.next += 1
            self.running += 1
            return i

    def finish(self, error=None):
        with self.lock:
            if error is not None:
                if self.error is None:
                    self.error = error
                if not (self.whole and isinstance(error, KeyboardInterrupt)):
                    self._cancel()
            self.running -= 1
            if self.running == 0 and (self.tasks is None or self.next >= len(self.tasks)):
                self.done.set()

    def _cancel(self):
        if self.tasks is not None:
            self.next = len(self.tasks)

    def cancel(self):
        """Start no further task; True if none is running now."""
        with self.lock:
            self._cancel()
            return self.running == 0

    def idle(self):
        with self.lock:
            return self.running == 0

    def work(self):
        timed = self.cpu is not None
        while (i := self.claim()) is not None:
            start = thread_clock() if timed else 0.0
            try:
                self.results[i] = self.tasks[i]()
            except BaseException as e:  # noqa: BLE001 - handed to the caller
                self.finish(e)
            else:
                if timed:
                    spent = thread_clock() - start
                    with self.lock:
                        self.cpu += spent
                self.finish()


def _serve(jobs):
    _local.worker = True
    while (job := jobs.get()) is not None:
        job.work()
        del job  # hold no call's arrays while idle


def _get_queue(workers: int) -> queue.SimpleQueue:
    """The queue of a pool with at least ``workers`` threads (it only grows)."""
    global _jobs, _workers
    with _lock:
        if _jobs is None:
            _jobs, _workers = queue.SimpleQueue(), 0
        while _workers < workers:
            threading.Thread(target=_serve, args=(_jobs,), daemon=True,
                             name=f"{_PREFIX}-{_workers}").start()
            _workers += 1
        return _jobs


class Pace:
    """One Python splitter's record in the runtime's pacing policy (dispatch/_runtime.c:
    the same records and rules as every native splitter's), per kernel and power of two
    of the length.

    A split is worth it only when it finishes sooner than the call run whole would, on
    this machine now (a busy core, another library's threads spinning after their own
    call, or a call too short for the handoff make it lose): each split is timed against
    the kernel's recent whole runs at that length and against its tasks' CPU time, and one
    that lost sends the next calls of that kernel and length whole, for a pause that
    doubles while splits keep losing and halves when one wins. Without the compiled
    runtime nothing is paced: calls split over ``threads()``.
    """

    __slots__ = ("_id",)

    def __init__(self):
        self._id = -1

    def id(self) -> int:
        if self._id < 0:  # taken on first use (two threads racing waste one record)
            self._id = _runtime.new_pace()
        return self._id

    def __del__(self):
        # the record goes back to the runtime, which hands it out again, cleared: kernels
        # made again and again (a configuration reload rebuilds them) never run it out
        if self._id >= 0 and _runtime is not None:
            try:
                _runtime.free_pace(self._id)
            except Exception:  # noqa: BLE001 - interpreter shutdown
                pass
            self._id = -1

    def stats(self, n: int) -> dict:
        """The record for calls of about ``n`` elements (see ``_runtime.pace``)."""
        return _runtime.pace(self.id(), n)


class Plan:
    """One call's way, from :func:`plan`: ``parts`` threads (1: whole). ``done()`` hands
    its time to the pace."""

    __slots__ = ("pace", "n", "parts", "start", "cpu")

    def __init__(self, pace, n, parts, start=0.0):
        self.pace, self.n, self.parts, self.start = pace, n, parts, start
        self.cpu = 0.0  # the split tasks' CPU seconds (None: some ran inline, not judged)

    def done(self) -> None:
        if self.pace is None:
            return
        wall = clock() - self.start
        if self.parts < 2:
            _runtime.kept(self.pace.id(), self.n, wall)
        elif self.cpu is not None:
            _runtime.judge(self.pace.id(), self.n, wall, self.cpu)


def plan(pace: Pace, n: int) -> Plan:
    """How a compute-only call of ``n`` elements runs now: split over ``threads()`` or
    whole, as ``pace``'s record says (see :class:`Pace`). Pass the plan to :func:`run`
    and call its ``done()`` when the call has finished."""
    t = threads()
    if t < 2 or _runtime is None or n < 1:
        return Plan(None, n, t)
    if _runtime.decide(pace.id(), n) != _runtime.SPLIT:
        return Plan(pace, n, 1, clock())
    return Plan(pace, n, t, clock())


class OwnThreads:
    """Under ``auto``, a kernel that runs on its library's own threads (torch's OpenMP)
    kept to the runtime's pacing policy like every split.

    Such a library splits every call in equal parts and waits for the slowest: when the
    cores are taken by other processes, a part whose thread was preempted holds the call
    for a scheduler slice (torch's erf of 10^5 float64 took 16 ms, SciPy's 1.9 ms, on the
    2-core AMD EPYC with other jobs running). Its calls are this kernel's splits and
    ``then``'s calls its whole runs: ``then``, a kernel that computes the very same bits
    (torch's erf and mkl's are both VML's), on one thread. A call of this kernel slower
    than ``then``'s recent ones, or than its process's CPU time, lost, and the next calls
    of that size run on ``then`` (this one only where ``then`` declines a call): ``auto``'s
    results never depend on the load. ``splits(size)``: whether the library's own threads
    take part in a call of that size.
    """

    __slots__ = ("kernel", "splits", "then", "pace")

    def __init__(self, kernel, splits, then):
        self.kernel, self.splits, self.then = kernel, splits, then
        self.pace = Pace()

    def __call__(self, *args):
        n = args[-1].size
        if not self.splits(n):
            return self.kernel(*args)
        way = plan(self.pace, n)
        if way.pace is None:  # one thread, or no runtime: nothing is paced
            return self.kernel(*args)
        if way.parts < 2:
            result = self.then(*args)
            if result is NotImplemented:
                return self.kernel(*args)
            way.done()
            return result
        # a thread of the library's waiting at its barrier for a preempted part spins,
        # which counts as CPU time: the comparison with ``then`` is what catches that
        cpu = process_clock()
        result = self.kernel(*args)
        if result is not NotImplemented:
            way.cpu = process_clock() - cpu
            way.done()
        return result


def run(tasks, timed=None):
    """Run zero-argument callables concurrently, the caller's thread among the workers.

    Returns their results in order. If a task raises, or the caller's thread is
    interrupted (KeyboardInterrupt), no task that has not started yet starts, the ones
    already running finish, and then the first exception is raised: no task is still
    writing into an output when the caller sees it. Called from a worker of the pool
    itself (a task that splits its own work, as fastmath.foreach's do), the tasks run one
    after another there. ``timed``: the :class:`Plan` of a call that only computes (no
    waiting on devices or I/O), whose tasks' CPU time joins the plan's, for its pace to
    judge whether the split paid.
    """
    tasks = list(tasks)
    if len(tasks) < 2 or threads() < 2 or getattr(_local, "worker", False):
        if timed is not None:
            timed.cpu = None  # in this thread after all: nothing to judge
        return [t() for t in tasks]
    job = _Job(tasks, timed=timed is not None)
    try:
        helpers = min(threads(), len(tasks)) - 1
        jobs = _get_queue(helpers)
        for _ in range(helpers):
            jobs.put(job)
        job.work()
        if not job.idle():  # every task is claimed: wait for the helpers' last ones
            job.done.wait()
    except BaseException as e:
        if job.whole and isinstance(e, KeyboardInterrupt):
            _complete(job)
        else:
            _drain(job)
        raise
    finally:
        job.tasks = None  # helpers that take the job late find nothing to do
    if job.error is not None:
        raise job.error
    if timed is not None and timed.cpu is not None:
        timed.cpu += job.cpu
    return job.results


def _complete(job):
    """Run the tasks left (this thread among the workers) and wait for them; a second
    interrupt stops starting new ones after all."""
    try:
        job.work()
        if not job.idle():
            job.done.wait()
    except BaseException:  # noqa: BLE001 - the first interrupt is raised by run()
        _drain(job)


def _drain(job):
    """Wait for the tasks already running; a second Ctrl-C does not cut this short
    (each task is one chunk, milliseconds of work)."""
    idle = job.cancel()
    while not idle:
        try:
            job.done.wait()
            idle = True
        except BaseException:  # noqa: BLE001 - the first interrupt is raised by run()
            idle = job.cancel()


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
    """Cut arrays of one shape into matching chunks along the same axis, for ``parts``
    threads: up to OVERSPLIT chunks per thread, none under MIN_CHUNK_BYTES (of the first
    array), at least ``parts`` where there are that many rows.

    Contiguous arrays of the same memory order are cut as flat 1-D views (no copy); any
    other layout is cut along its outermost axis, which keeps every chunk a plain view.
    """
    first = arrays[0]
    if first.ndim == 0:
        return [tuple(arrays)]
    wanted = max(parts, min(parts * OVERSPLIT, first.size * first.itemsize // MIN_CHUNK_BYTES))
    for order, flag in (("C", "C_CONTIGUOUS"), ("F", "F_CONTIGUOUS")):
        if all(a.flags[flag] for a in arrays):
            flat = [a.reshape(-1, order=order) for a in arrays]
            return [tuple(f[i:j] for f in flat)
                    for i, j in bounds(first.size, max(1, min(wanted, first.size)))]
    axis = split_axis(first.shape, first.strides)
    n = first.shape[axis]
    chunks = []
    for i, j in bounds(n, max(1, min(wanted, n))):
        index = (slice(None),) * axis + (slice(i, j),)
        chunks.append(tuple(a[index] for a in arrays))
    return chunks


def _reset() -> None:
    """Drop the pool; its threads exit once they see the end marker."""
    global _jobs, _workers
    with _lock:
        if _jobs is not None:
            for _ in range(_workers):
                _jobs.put(None)
        _jobs, _workers = None, 0


_torch_forked = False


def torch_forked() -> bool:
    """Whether torch was loaded when this process, or an ancestor, was forked: torch must
    then stay on one thread here."""
    return _torch_forked


def _after_fork_in_child() -> None:
    global _jobs, _workers, _lock, _torch_forked
    _lock = threading.Lock()  # the parent may have held it while forking
    _jobs, _workers = None, 0  # the parent's threads are not in this process
    torch = sys.modules.get("torch")
    set_threads = getattr(torch, "set_num_threads", None)
    if set_threads is not None:
        _torch_forked = True
        try:
            if torch.get_num_threads() > 1:
                set_threads(1)
        except Exception:  # noqa: BLE001 - a torch still being imported by the parent
            pass


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
_config.on_reload(_reset)
