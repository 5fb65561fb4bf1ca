"""What ``auto`` learns from the program's own calls: the fastest path for each cell.

A cell is (function, dtype, size class, layout class): size classes are a factor 4 wide
(``size.bit_length() >> 1``), layouts are contiguous (0) or not (1). From LEARN_FROM
elements up, the first calls of a cell try its arms in turn, interleaved: the baseline
(the reference called into the front end's output, or for reductions the numpy backend)
and each backend whose kernel gives the row's promised result on this machine (the
chains ``_selection`` builds; this module knows no backend).

A backend's turn is a run of RUN calls in a row, and only the calls after the run's
first are counted: the first follows other arms' calls, after which a backend's pool has
parked (a settled cell runs its backend call after call, its pool awake), and an arm's
very first call in a cell imports, starts pools and makes the runtime's first split of
that size. Where the reference takes LONG seconds a pool's wake-up is small beside the
call (but not the native runtime's: parked before the reference's call, its workers
take up to a millisecond to wake on a VM), and where one arm is left its calls follow
each other: a turn is then one call, counted, after the arm's first (its warm-up).

Each arm is timed as it would run settled (:func:`_alone`): before a call off the native
runtime (the reference's, torch's) its spinning workers are parked, and a kernel on it
splits again if a lost split had paused it. A call of a kernel on the runtime begun
short of threads is not counted either (a worker that the run's first call woke has not
run yet; or another library's threads still spin after their own call, torch's,
announced to the runtime; or the pool's threads took under half their share of its
pieces), up to SPARED such calls in a row, or for SPARE_FOR seconds (SPARE_CALLS calls'
time, within those bounds), the run going on until its threads come, nor the call after
them; nor is any arm's call during which the process took FAULTS page faults or more
(from size class FAULTS_FROM): its output was memory the heap had just grown by, mapped
as the call wrote it, a cost the program pays once (fastmath's outputs are recycled,
dispatch/_alloc.py) and not the kernel's; on a VM one such call of 10^7 elements took
0.14-0.29 s against 6-20 ms.

An arm's time is its typical time, the lower quartile of its counted calls: noise on a
shared machine only adds time. An arm whose typical time after two counted calls or more
is slower than the baseline's is dropped at once, so that learning never strays far from
the reference (one slow call, a scheduler's hiccup or one of the runtime's whole runs
that time a kernel or follow a lost split, is not enough), except NumPy's own loops on
the native runtime, which cost the reference's time at worst; so is one far behind the
fastest (:meth:`Cell._behind`; those loops once timed BEHIND_AFTER times only). Once
every arm left has SAMPLES counted calls the cell settles on the fastest, and on the
baseline unless an arm beats it by MARGIN: closer than that is noise, and the reference
has no overhead. Where NumPy's own loops on the native runtime (the numpy backend) are
within TIE of the baseline, they win: they cost the reference's time at worst (the
runtime runs a call whole while splits lose), and the runtime's pacing follows a busy
core call by call, sooner than a revisit could. A comparison that is close (within
twice the margin) takes more samples first, up to MOST, as does a choice of the baseline
where an arm left beat it by the margin in a call: the arms on the native runtime can all
be 1.3-2.5x slower for a millisecond or more after the process slept (a 2-vCPU VM's
second vCPU, woken), about as long as a learning.

A new cell starts without the arms that lost by NEARBY times in the nearest class learned,
and without the baseline where it lost there by BASELINE_NEARBY times (then the fastest
arm wins: the baseline's calls can take a fifth of a second), or any arm that lost by
NEARBY_LONG where the calls will take LONG seconds; the first revisit tries
them all.

A settled cell costs a dict lookup and a decrement per call. After REVISIT calls it is
learned again (only the arms that do not lose at once cost anything, and those that lost
by NEARBY times are tried at one revisit in RETRY_FAR only, never NumPy's own loops on
the runtime), the interval
doubling while the choice holds, back to REVISIT when it changes or when the winner's
time moves by half (a busy core, a laptop on battery). A choice taken from an earlier run
(or from a calibration run) is first revisited after FIRST_REVISIT calls, every arm tried
at that revisit (their stored times may be another moment's): a choice stored
when torch's expm1 took 6 ms on 10^7 float64 elements held for 1000 calls of 20 ms each,
where NumPy's took 12 ms, with another process busy on one core. A change of the thread
budget (``fastmath.dispatch._config.reload``) starts afresh. Calls in the size classes
that the reference has won CONFIRM learnings in a row, for every dtype, skip all this
for good (:func:`_move_floor`).

A backend whose library is not imported yet (torch takes 1.5 s) joins a cell only once
the cell has done DEFER seconds of work: the import then costs the program at most a few
percent. What is learned is kept in ``learned.json`` beside the calibration file (see
:func:`path`), one table per machine (CPU model, cores, threads, library and fastmath
versions), merged across runs and processes, written atomically (a temporary file, then
a rename). A file that cannot be used (not a regular file, too large, not JSON, nested
too deeply, wrong types) is ignored with one warning and replaced at the next write.

FASTMATH_AUTO chooses the mode: ``learn`` (the default), ``fixed`` (the calibration file
or the built-in defaults only, for reproducible timings) or ``off`` (the reference
always).
"""
from __future__ import annotations

import atexit
import json
import math
import os
import stat
import threading
import time
import warnings

from . import _calibration, _config, _fpe, _log

MODES = ("learn", "fixed", "off")
DTYPES = ("float32", "float64")  # what auto learns for: the ULP bounds are for these
FORMAT = 1
LEARN_FROM = 4096  # elements: below, a call is too short for any backend to win it
RUN = 2  # a backend's calls in a row, its turn; the first of them is not counted
STRIKES = 2  # counted calls after which an arm slower than the baseline is dropped
BEHIND, FAR = 1.5, 3.0  # an arm (the baseline too) this far behind the fastest: dropped
BEHIND_AFTER = 3  # ... BEHIND once timed this many times, FAR before...
# ... and ONCE_FAR on its one counted call: a kernel's first calls warm up (forced
# torch-cpu's exp of 10^5 float64 took 174 and 81 us in its second and third calls, 25
# after; mkl's 107, 168, then 25): dropped at FAR on one call of 311 us, torch-cpu sat
# out a learning that kept the numpy backend's 42 us against its 27 (Intel Xeon)
ONCE_FAR = 8.0
NEARBY = 2.0  # an arm this far behind in the nearest class learned is not tried at first
RETRY_FAR = 4  # ... and one this far behind the choice, at one revisit in this many only
BASELINE_NEARBY = 3.0  # the baseline this far behind in the nearest class: not tried at first
NEARBY_LONG = 1.25  # ... any arm this far behind, where the calls will take LONG seconds
SPARED = 2  # a kernel's calls short of threads or memory left uncounted in a row, at most...
SPARE_FOR = 2e-3, 20e-3  # ... or, short of threads, for this many seconds from the first,
# the run going on meanwhile (a parked worker takes up to a millisecond to wake on a VM,
# and on a 2-vCPU VM after the process slept, a worker woken on the other vCPU waited
# runnable 8-20 ms while nothing else ran there: the host had not run that vCPU yet)...
SPARE_CALLS = 200  # ... the longer for calls this long, but for so many at most (a short
# call costs more than the reference's where the call is short: with a core busy for good,
# 20 ms of them at 10^4 elements made auto 0.5x NumPy in bench/busy.py)
FAULTS = 2  # page faults during a timed call from which it is not counted (fresh memory)...
FAULTS_FROM = 8  # ... in size classes from this one (32768 elements; two reads of the count
# cost 1.6 us, and below it an output comes from memory the heap already has)
SAMPLES = 5  # per arm before settling...
LONG, LONG_SAMPLES = 1e-3, 3  # ... or this many where the reference takes LONG seconds
# (a scheduler's hiccup is small beside such a call, and each extra call of a slower
# arm costs milliseconds)
MOST = 15  # a close comparison settles after this many per arm
MARGIN = 0.05  # an arm must beat the baseline's typical time by this much to replace it
TIE = 0.05  # ... but NumPy's own loops on the runtime win when this close behind it
# (as close as noise can fake: within it, they cost the reference's time while a second
# core is taken and half of it once it is free, where the reference keeps its time until
# a revisit; traced, a core taken during the learning had the numpy backend 4% behind
# the reference at log float64 10^5 elements, and 1.8x faster in the calls after)
REVISIT, REVISIT_MOST = 1000, 64000  # calls between revisits of a settled cell
# calls before the first revisit of a choice taken from an earlier run or a calibration
# run: the machine may have changed since (another process busy, another library build)
FIRST_REVISIT = 16
CONFIRM = 2  # learnings in a row the reference must win a class before calls there skip
# the learning for good (the fast path below the floor, never revisited): one learning
# can meet a passing disturbance (on a 2-vCPU VM, the second vCPU slow for milliseconds
# after the process slept: every arm on the runtime 1.3-2x its time, and log float32 at
# 10^5 elements, 2.2-2.5x faster on torch's kernel, ran NumPy's call for the whole run)
MOVED = 0.5  # a winner whose typical time moved by this much since it settled: learn afresh
DEFER = 50.0  # seconds of a cell's work before an unimported backend may join (3% of 1.5 s)
SAVE_EVERY = 60.0  # seconds between writes of the store while the program runs

THREADS, MEMORY = "threads", "memory"  # what a call the cell does not count was short of

clock = time.perf_counter  # tests put a fake one in its place
try:  # the native runtime's pool: its spinning workers park before a call off it, a
    # kernel's pause ends as it is timed, another library's spin is seen
    from ._runtime import (foreign_left as _foreign_left, rest as _rest,
                           late as _late, resume as _resume)
except ImportError:  # built without a C compiler
    _rest = _resume = _foreign_left = _late = None
wall = time.time
try:
    import resource as _resource

    def faults() -> int:
        """The page faults this process has taken that needed no I/O (tests put a fake one
        in its place)."""
        return _resource.getrusage(_resource.RUSAGE_SELF).ru_minflt
except ImportError:  # not on Windows
    faults = None


class _State:
    mode = "learn"
    on = True  # mode == "learn", read on every call under auto


state = _State()
_lock = threading.RLock()  # choose() reads the store under it
cells: dict = {}  # key -> Cell
settled: dict = {}  # key -> Settled: what plan() looks up on every call
_stored: dict | None = None  # key -> stored record (this machine's), read at first use
_machine = None
_dirty = False
_saved_at = 0.0
_floors: dict = {}  # function -> size below which the learner has nothing to try
_dtype_floors: dict = {}  # function -> {dtype: its own floor, where above the function's}
_watchers: list = []  # called when a floor moves (the front ends' cached sizes)


def size_class(size: int) -> int:
    return size.bit_length() >> 1


def class_bounds(c: int):
    """(first size, first size past) of size class ``c``."""
    return 1 << max(2 * c - 1, 0), 1 << (2 * c + 1)


class Settled:
    """A cell's choice as plan() reads it: the chain, and calls left before a revisit."""

    __slots__ = ("chain", "left")

    def __init__(self, chain, left):
        self.chain, self.left = chain, left


class Cell:
    """One cell while it learns, and what it learned."""

    def __init__(self, key, baseline, chains, deferred):
        self.key, self.baseline = key, baseline
        self.chains = dict(chains)  # arm -> chain, the baseline first
        self.paced = _paced(self.chains)  # arms on the native runtime
        self.own = _own_loops(self.chains)  # ... of them, those running NumPy's own loops
        self.deferred = list(deferred)  # arms whose library is not imported yet
        self.lock = threading.Lock()
        self.timed: dict = {}
        self.interval = REVISIT
        self.work = 0.0  # seconds of calls seen (estimated while settled)
        self.choice = None
        self.medians: dict = {}
        self.samples = 0
        self.revisits = 0
        self.wins = 0  # learnings in a row the choice has won (one for a stored choice)
        self.source = "learned here"
        self.when = None
        self._open()

    def _open(self, skip=()):
        self.times = {a: [] for a in self.chains}
        self.dropped: set = set(skip)
        self.turn = 0
        self.current, self.streak = None, 0  # the arm whose run goes on, its calls left
        self.opening: set = set()  # arms whose next recorded call opens a run: not counted
        self.warmed: set = set()  # arms whose first call in this cell is done
        self.spared: dict = {}  # arm -> its calls left uncounted in a row (short of threads)
        self.returning: set = set()  # arms whose threads were short in their last call
        self.waiting: dict = {}  # arm -> when the first of them, short of threads, was timed
        self.learning = True

    def live(self):
        return [a for a in self.chains if a not in self.dropped]

    def pick(self):
        """The arm the next call runs: each in turn among those not dropped, a backend for
        RUN calls in a row (the baseline, which has no pool to wake, for one, or for RUN
        where short calls follow calls split over the cores: :meth:`_migrates`)."""
        with self.lock:
            arms = self.live()
            if self.streak > 0 and self.current in arms:
                self.streak -= 1
                return self.current
            arm = arms[self.turn % len(arms)]
            self.turn += 1
            before, again, self.current = self.current, arm == self.current, arm
            if arm == self.baseline and not again and self._migrates(before):
                self.streak = RUN - 1
                self.opening.add(arm)
            # (long calls or not, a runtime kernel's first call after another arm's
            # wakes its workers, parked before the reference's call: up to 1 ms on a VM)
            if arm != self.baseline and (arm not in self.warmed or not (
                    again or (self._long() and arm not in self.paced))):
                self.streak = RUN - 1
                self.opening.add(arm)
            return arm

    def _migrates(self, before):
        """Whether the baseline's next call follows calls that split its data over the
        cores (a kernel on the native runtime's, or at a revisit the settled choice's)
        where calls are short: it then reads half of its input from another core's cache,
        and NumPy's call of log on 10^4 float32 elements, timed so at every revisit of a
        cell settled on the numpy backend, took 17-28 us against 5 us (with one core
        busy: the reference lost every revisit). Its first call there is not counted."""
        before = self.choice if before is None and self.revisits else before
        return before in self.paced and not self._long()

    def _long(self):
        """Whether the calls take LONG seconds: the baseline's, or where it sits out
        (:func:`_lost_nearby`) the first arm timed."""
        t = self.times[self.baseline] or next((v for v in self.times.values() if v), None)
        return bool(t) and _typical(t) >= LONG

    def record(self, arm, seconds, short=None):
        """One call of ``arm`` took ``seconds``; True once the cell has settled.
        ``short``: it is not what the kernel takes settled: it began short of THREADS (a
        worker of the runtime still waking, or another library's threads still spinning
        after their own call), or it mapped fresh MEMORY (FAULTS page faults); not
        counted, up to SPARED such calls in a row (a core may be taken for good, a kernel
        may map memory on every call), and short of threads for SPARE_FOR seconds from
        the first, the arm's run going on until its threads come: at 10^4 elements a
        run of two calls ended before a worker woken by its first call had run, the
        numpy backend's calls were all short of threads, at every turn (its pool parks
        before the reference's), its third ran whole and counted, and cells where it was
        1.2x faster settled on the reference. The call after calls short of threads
        spared so is not counted either: its threads have only just come back."""
        with self.lock:
            if not self.learning or arm not in self.times or arm in self.dropped:
                return False
            self.work += seconds
            spared = self.spared.get(arm, 0)
            waits = False
            if short == THREADS:
                now = clock()
                spare = min(max(SPARE_FOR[0], SPARE_CALLS * seconds), SPARE_FOR[1])
                waits = now - self.waiting.setdefault(arm, now) < spare
            if arm in self.returning and not short:
                # the first call after calls short of threads, its threads back: not
                # counted either (after a stall of the VM's other vCPU, such a call took
                # 2-2.5x its time: a worker preempted holding a piece holds the call up)
                self.returning.discard(arm)
                if arm == self.current:
                    self.streak = max(self.streak, 1)
                return False
            if arm in self.opening or (short and (spared < SPARED or waits)):
                # a run's first call (its pool woke, or it warms up), or one short of
                # threads or of mapped memory
                if arm not in self.opening:
                    self.spared[arm] = spared + 1
                    if waits and arm == self.current:
                        self.streak = max(self.streak, 1)
                        self.returning.add(arm)
                self.opening.discard(arm)
                self.warmed.add(arm)
                return False
            self.spared[arm] = 0
            self.waiting.pop(arm, None)
            mine = self.times[arm]
            mine.append(seconds)
            base = self.times[self.baseline]
            # (never NumPy's own loops on the runtime: they cost the reference's time at
            # worst, nothing to save, and two of their calls against the reference's
            # first, a lucky 49 us against its later 61-83, kept the numpy backend out of
            # log1p float32 at 10^5 elements, where it was 1.2x faster; BEHIND and FAR
            # still drop them)
            if arm != self.baseline and arm not in self.own and base and len(
                    mine) >= STRIKES and _typical(mine) > _typical(base):
                self._lose((arm,))  # slower than the reference: not worth another call
            self._behind()
            return self._decide()

    def _behind(self):
        """Drop every arm, the baseline included, whose every call so far took BEHIND times
        the typical time of the fastest other arm (FAR times, for an arm timed fewer than
        BEHIND_AFTER times, ONCE_FAR for one timed once: its first calls may have met a
        cold cache, a kernel's warm-up or a hiccup): no
        noise closes such a gap, and each further call of it would cost that much."""
        timed = {a: self.times[a] for a in self.live() if self.times[a]}
        if len(timed) < 2:
            return
        typical = {a: _typical(t) for a, t in timed.items()}
        lost = []
        for a, t in timed.items():
            if a in self.own and len(t) < BEHIND_AFTER:
                # NumPy's own loops on the runtime cost the reference's time at worst:
                # not dropped on one or two calls (their first after a pause of the
                # process can wake a worker that takes a millisecond to run: expm1 of
                # 10^5 float32 elements took 169 us once, 22 us in the calls after)
                continue
            best = min(m for b, m in typical.items() if b != a)
            far = BEHIND if len(t) >= BEHIND_AFTER else FAR if len(t) > 1 else ONCE_FAR
            if min(t) > far * best:
                lost.append(a)
        self._lose(lost)

    def _lose(self, arms):
        """Drop ``arms``; the baseline comes back rather than no arm be left."""
        self.dropped.update(arms)
        if not self.live():
            self.dropped.discard(self.baseline)

    def drop(self, arm):
        """``arm`` declined or failed a call: not tried again until the next revisit."""
        with self.lock:
            if self.learning and arm != self.baseline:
                self._lose((arm,))
                if self._decide():
                    return True
        return False

    def _decide(self):
        live = self.live()
        n = min(len(self.times[a]) for a in live)
        base_times = self.times[self.baseline]
        # the baseline sat out (it lost by far in the nearest class): the fastest arm wins
        skipped = not base_times and self.baseline in self.dropped
        if not (base_times or skipped) or n < (LONG_SAMPLES if self._long() else SAMPLES):
            return False
        med = {a: _typical(self.times[a]) for a in live}
        best = min(live, key=med.get)
        if skipped:
            choice = best
        else:
            base = _typical(base_times)  # timed once at least, even if dropped
            ratio = base / med[best] if med[best] > 0 else 1.0  # a coarse clock: a tie
            if 1 + MARGIN < ratio < 1 + 2 * MARGIN and n < MOST:
                return False  # close: more samples before noise decides it
            # a tie goes to NumPy's own loops on the runtime (the numpy backend): at
            # worst they cost the reference's time and the runtime's bookkeeping, as its
            # pacing runs a call whole while splits lose, and it follows the machine
            # call by call, faster than a revisit (the learning's calls met a second core
            # taken for milliseconds, and cells settled on the reference at half speed)
            tied = [a for a in live if a in self.own and med[a] <= base * (1 + TIE)]
            choice = best if ratio > 1 + MARGIN else min(tied, key=med.get) if tied else (
                self.baseline)
            if choice == self.baseline and n < MOST and any(
                    a != choice and min(self.times[a]) * (1 + MARGIN) < base for a in live):
                # an arm left has beaten the reference by the margin, in one call at
                # least: more samples first (where a disturbance slowed its others)
                return False
        old, before = self.choice, self.medians.get(self.choice)
        self.choice, self.learning = choice, False
        # (an arm that sat this learning out keeps its time from the last one)
        self.medians = {**self.medians, **{a: _typical(t) for a, t in self.times.items() if t}}
        self.samples = n
        self.source = "learned here"
        self.when = wall()
        held = choice == old and before is not None and abs(
            med[choice] / before - 1) < MOVED
        self.wins = self.wins + 1 if choice == old else 1
        self.interval = min(2 * self.interval, REVISIT_MOST) if held else REVISIT
        return True

    def reopen(self, calls, fresh=False):
        """Learn again after ``calls`` calls on the choice; ``fresh``: forget the interval."""
        with self.lock:
            if self.learning:
                return
            best = self.medians.get(self.choice, 0.0)
            self.work += calls * best
            if fresh:
                self.interval = REVISIT
            self.revisits += 1
            # arms that lost by NEARBY times are tried at one revisit in RETRY_FAR: each
            # costs a few calls even when it loses at once, a lot beside a short call; but
            # every arm at the first revisit of a choice from an earlier run or a calibration
            # run, whose times may be another moment's (mkl's expm1 on 10^5 float64, stored
            # at 910 us, sat out every run's revisits while it took 47 us, 1.5x faster)
            far = [a for a, t in self.medians.items() if a not in (self.baseline, self.choice)
                   and a not in self.own and best and t > NEARBY * best
                   ] if self.revisits % RETRY_FAR and not self.carried else []
            self._open(far)

    @property
    def carried(self) -> bool:
        """Whether the choice is an earlier run's or a calibration run's, not learned here
        yet (its source says so until a learning here settles)."""
        return self.source != "learned here"

    def describe(self) -> dict:
        return {"state": "learning" if self.learning else "settled", "choice": self.choice,
                "baseline": self.baseline, "medians": dict(self.medians),
                "samples": self.samples, "source": self.source, "when": self.when,
                "arms": list(self.chains), "deferred": list(self.deferred)}


def _typical(v):
    """An arm's typical time: the lower quartile of its calls (the fastest of up to four,
    the second fastest of five). Noise on a shared machine only adds time (a scheduler's
    hiccup, a cold cache, the CPU's clock ramping up after a pause), often to more than
    one call in five; one lucky call cannot make a winner of an arm."""
    return sorted(v)[(len(v) - 1) // 4]


class Timed:
    """A kernel whose calls the cell times (only while it learns). ``pace``: the native
    runtime's pacing record of the kernel's calls (-1: not on the runtime); ``watch``:
    whether a call's page faults are counted (size class FAULTS_FROM and up)."""

    __slots__ = ("kernel", "cell", "arm", "pace", "watch")

    def __init__(self, kernel, cell, arm):
        self.kernel, self.cell, self.arm = kernel, cell, arm
        self.pace = _pace_of(kernel)
        self.watch = faults is not None and cell.key[2] >= FAULTS_FROM

    def __call__(self, *args):
        # a split begun while a worker woken by the run's first call has not run yet (a
        # wake-up takes up to a millisecond on a VM), or while another library's threads
        # spin after their own call, is short of threads: not what the kernel takes
        if self.pace >= 0:
            late, spun = _late(), _foreign_left() > 0
        # a call whose output is memory the heap grows by maps it as it writes (a fault a
        # page, or a huge page), once in a program: not what the kernel takes
        mapped = faults() if self.watch else 0
        start = clock()
        try:
            result = self.kernel(*args)
        except BaseException:
            if self.cell.drop(self.arm):  # the chain's next kernel takes the call
                _settle(self.cell)
            raise
        seconds = clock() - start
        if result is NotImplemented:
            if self.cell.drop(self.arm):  # it cannot take this cell's calls
                _settle(self.cell)
        elif self.cell.record(self.arm, seconds, THREADS if (
                self.pace >= 0 and (spun or _late() != late)) else MEMORY if (
                self.watch and faults() - mapped >= FAULTS) else None):
            _settle(self.cell)
        return result

    @property
    def any_strides(self):
        return getattr(self.kernel, "any_strides", False)

    def masked(self, mask):
        masked = getattr(self.kernel, "masked", None)
        return None if masked is None else masked(mask)


def choose(key, spec, dtype, size, arms):
    """The chain for this call of cell ``key``, learning as it goes (plan()'s slow path).

    ``arms(spec, dtype)``: (baseline, {arm: chain}, deferred arms), from _selection;
    ``arms.build(spec, dtype, arm)``: the chain of a deferred arm, once it may join;
    ``arms.guess(spec, dtype, size)``: (the table's first choice, the table's source).
    """
    cell = cells.get(key)
    if cell is None:
        with _lock:
            cell = cells.get(key)
            if cell is None:
                baseline, chains, deferred = arms(spec, dtype)
                cell = Cell(key, baseline, chains, deferred)
                if _restore(cell) or _calibrated(cell, *arms.guess(spec, dtype, size)):
                    cells[key] = cell
                    return _chain_of(cell)
                cell._lose(_lost_nearby(key, cell))
                cells[key] = cell
    s = settled.get(key)
    if s is not None:
        if s.left > 0:  # another thread's revisit is not due yet
            return s.chain
        settled.pop(key, None)
        cell.reopen(cell.interval)
        if cell.deferred and cell.work >= DEFER:
            _admit(cell, spec, dtype, arms)
    if not cell.learning:  # settled by another thread just now
        return _chain_of(cell)
    arm = cell.pick()
    t = cell.timed.get(arm)
    if t is None:
        chain = cell.chains[arm]
        t = cell.timed[arm] = ((chain[0][0], Timed(chain[0][1], cell, arm)),) + chain[1:]
    _alone(t[0][1], size)
    return t


def _pace_of(kernel) -> int:
    """The native runtime's pacing record of ``kernel``'s calls, -1 if it is not on it."""
    pace = getattr(kernel, "runtime_pace", -1) if _resume is not None else -1
    return pace if type(pace) is int else -1


def _paced(chains) -> set:
    return {arm for arm, chain in chains.items() if chain and _pace_of(chain[0][1]) >= 0}


def _own_loops(chains) -> set:
    """The arms whose kernels run the reference's own loops on the native runtime (the
    numpy backend's: ``runtime_entry``, backends/_protocol.py)."""
    out = set()
    for arm, chain in chains.items():
        entry = getattr(chain[0][1], "runtime_entry", None) if chain else None
        if entry is not None and entry() is not None:
            out.add(arm)
    return out


def _alone(timed, size):
    """Before a timed call: each arm is timed as it runs settled, with no pool of another
    arm's taking its cores. A kernel off the native runtime (the reference, torch's,
    numexpr's) runs with the runtime's workers parked, not spinning beside it after the
    last arm's call (on a machine with a core taken, one spinning made the reference's
    calls up to 3x slower). A kernel on it (``runtime_pace``) splits again at once if a
    lost split had paused it: a split lost beside another arm's threads, still spinning
    after their own call, kept the later calls of the learning whole, and the reference
    won cells where the numpy backend was 1.5-1.9x faster. A split that loses when it is
    timed is timed as it is: the arm then loses."""
    if timed.pace >= 0:
        _resume(timed.pace, size)
    elif _rest is not None:
        _rest()


def _lost_nearby(key, cell):
    """The arms that lost by NEARBY times to the winner in the nearest settled size class
    of the same function, dtype and layout (at most two classes away), and the baseline
    if it lost there by BASELINE_NEARBY times (SciPy's erf at 10^7 elements takes 0.2 s,
    ten times VML's), any arm by NEARBY_LONG times where the calls here will take LONG
    seconds, but never NumPy's own loops on the runtime (``Cell.own``): not tried here
    until the first revisit, which tries every arm. So
    are the arms that sat out there, untimed, for the same reason one class further (or
    declined its calls): mkl's and numexpr's log1p and expm1, 6-8x slower than the numpy
    backend at 10^7 elements, lost at 10^5, sat out at 10^6, and cost 0.24 s at 10^7."""
    name, dtype, c, layout = key
    near = [k for k, other in list(cells.items()) if k[:2] == key[:2] and k[3] == layout
            and abs(k[2] - c) <= 2 and not other.learning and other.medians]
    if not near:
        return ()
    k = min(near, key=lambda k: abs(k[2] - c))
    other = cells[k]
    best = other.medians.get(other.choice)
    if not best:
        return ()
    # where the calls will take LONG seconds (the winner's time there, scaled to this
    # class's sizes), each call of a slower arm costs milliseconds: the nearest class's
    # ranking is trusted further (at 10^7 elements the reference's three calls and
    # torch's two, after 10^6 had ranked them 1.5x and 2x behind, were most of a
    # warm-up's excess over the calls after it)
    long = best * 4.0 ** (c - k[2]) >= LONG
    # (never NumPy's own loops on the runtime: a call of theirs costs the reference's
    # time at worst, nothing to save; one class's noise kept them out of the classes
    # above it, where they were 1.5-1.9x faster)
    return [a for a in cell.chains if a not in cell.own and (
        (a in other.medians and other.medians[a] > (
            NEARBY_LONG if long else BASELINE_NEARBY if a == cell.baseline else NEARBY)
         * best) or (a not in other.medians and a in other.dropped))]


def _admit(cell, spec, dtype, arms):
    """The deferred arms join the cell (their libraries are imported now)."""
    built = {arm: arms.build(spec, dtype, arm) for arm in cell.deferred}
    with cell.lock:
        cell.chains.update((arm, chain) for arm, chain in built.items() if chain)
        cell.paced, cell.own = _paced(cell.chains), _own_loops(cell.chains)
        cell.deferred = []
        cell._open()


def _chain_of(cell):
    return () if cell.choice == "reference" else cell.chains[cell.choice]


def _settle(cell):
    global _dirty
    best = cell.medians.get(cell.choice)
    settled[cell.key] = Settled(_chain_of(cell), cell.interval)
    _dirty = True
    name, dtype, c, layout = cell.key
    lo, hi = class_bounds(c)
    if _log.logger.isEnabledFor(20):
        others = ", ".join(f"{a} {_us(t)}" for a, t in sorted(cell.medians.items(),
                                                             key=lambda kv: kv[1]))
        _log.logger.info("auto learned %s(%s) at %d-%d elements%s: %s (typical times of %d "
                         "calls: %s)", name, dtype, lo, hi - 1,
                         "" if layout == 0 else ", strided", cell.choice, cell.samples,
                         others)
    _move_floor(name)
    if best is not None and cell.when and wall() - _saved_at > SAVE_EVERY:
        save()


def _us(t):
    return f"{t * 1e6:.1f} us"


def _restore(cell) -> bool:
    """Settle ``cell`` as an earlier run learned it, if its choice can run here now."""
    rec = stored().get(cell.key)
    if rec is None or not _runs(cell, rec["choice"]):
        return False
    cell.choice, cell.medians = rec["choice"], dict(rec["medians"])
    cell.samples, cell.when = rec["samples"], rec["when"]
    cell.source, cell.learning, cell.wins = "learned here in an earlier run", False, 1
    settled[cell.key] = Settled(_chain_of(cell), FIRST_REVISIT)
    _move_floor(cell.key[0])
    _say("starts", cell)
    return True


def _calibrated(cell, first, source) -> bool:
    """Settle ``cell`` on a calibration run's choice (not the built-in defaults, which
    were measured elsewhere): it is revisited like a learned one."""
    if source == "defaults" or not _runs(cell, first):
        return False
    cell.choice, cell.learning, cell.source = first, False, f"calibration run ({source})"
    cell.wins = 1
    settled[cell.key] = Settled(_chain_of(cell), FIRST_REVISIT)
    _say("starts", cell)
    return True


def _say(what, cell):
    name, dtype, c, layout = cell.key
    lo, hi = class_bounds(c)
    _log.logger.info("auto %s %s(%s) at %d-%d elements%s on %s (%s)", what, name, dtype,
                     lo, hi - 1, "" if layout == 0 else ", strided", cell.choice, cell.source)


def _runs(cell, arm) -> bool:
    return arm in cell.chains and (arm != "reference" or cell.baseline == "reference")


def floor(name: str) -> int:
    """The size below which calls of ``name`` have nothing to learn (``small_size``)."""
    return _floors.get(name, LEARN_FROM)


def dtype_floors(name: str) -> dict:
    """{dtype name: size}: for a dtype met, the size below which its calls of ``name``
    have nothing to learn, where that is above :func:`floor` (``small_sizes``)."""
    return _dtype_floors.get(name, {})


def _move_floor(name):
    """Put ``name``'s floor past the largest size class where NumPy/SciPy won CONFIRM
    learnings in a row for every dtype (contiguous), but not above the smallest where a
    backend runs or learning goes on (or may: a class the reference has won once only,
    revisited as any settled class is), nor above LEARN_FROM while a dtype has not been
    met. Calls below it take the front ends' fast path, which serves every dtype: the
    reference (size classes below the floor that no call met are not learned, and those
    settled on the reference are not revisited). A dtype whose own classes are the
    reference's further up gets a floor of its own (:func:`dtype_floors`), which the fast
    paths look up by dtype."""
    # by dtype met: the first sizes of the classes where a backend runs or learning goes
    # on, and the classes the reference won, confirmed (contiguous)
    starts, done = {}, {}
    for key, cell in list(cells.items()):
        if key[0] != name:
            continue
        mine, won = starts.setdefault(key[1], []), done.setdefault(key[1], set())
        if cell.learning or cell.choice != "reference" or cell.wins < CONFIRM:
            mine.append(class_bounds(key[2])[0])
        elif key[3] == 0:
            won.add(key[2])

    def floor_of(won, first):  # past the last class won, not above the first started
        f = max((class_bounds(c)[1] for c in won), default=LEARN_FROM)
        return max(LEARN_FROM, min(first + [f])) if first else f

    # a class is the reference's for the fast path once every dtype learned it so (a dtype
    # not met yet learns from LEARN_FROM: the other dtype's choice, or another machine's
    # table, is not this one's; those met keep floors of their own meanwhile)
    first = [n for mine in starts.values() for n in mine]
    if set(DTYPES) - set(starts):
        first.append(LEARN_FROM)
    f = floor_of(set.intersection(*done.values()) if done else (), first)
    # a dtype whose own classes are the reference's further up has a floor of its own
    # there (float32 may learn the reference where float64 gains from a backend)
    own = {}
    for dtype, won in done.items():
        g = floor_of(won, starts[dtype])
        if g > f:
            own[dtype] = g
    if f != floor(name) or own != dtype_floors(name):
        _floors[name] = f
        _dtype_floors[name] = own
        for hook in _watchers:
            hook()


def on_floor(hook) -> None:
    """Register a callable run when a function's floor moves."""
    _watchers.append(hook)


def describe(name, dtype, size, layout=0):
    """What is known of the cell of this call: a dict (see Cell.describe), or None."""
    cell = cells.get((name, dtype, size_class(size), layout))
    if cell is not None:
        return cell.describe()
    rec = stored().get((name, dtype, size_class(size), layout)) if state.on else None
    if rec is None:
        return None
    return {"state": "stored", "choice": rec["choice"], "medians": rec["medians"],
            "samples": rec["samples"], "source": "learned here in an earlier run",
            "when": rec["when"], "baseline": None, "arms": [], "deferred": []}


# --- the store --------------------------------------------------------------------------

def path():
    """``learned.json`` beside the calibration file (FASTMATH_CALIBRATION's folder, else
    ``$XDG_CACHE_HOME/fastmath``)."""
    return _calibration.user_path().with_name("learned.json")


def machine() -> dict:
    global _machine
    if _machine is None:
        _machine = _calibration.machine()
    return _machine


def _key_text(key):
    return "/".join(map(str, key))


def _key_of(text):
    name, dtype, c, layout = text.split("/")
    return name, dtype, int(c), int(layout)


def _read(p):
    """The parsed, checked store at ``p``: {"format", "machines": [...]}. Raises
    FileNotFoundError, or OSError/ValueError for anything unusable."""
    data = _calibration.load(p)  # a regular file only, capped, finite numbers only
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ValueError(f"not a format-{FORMAT} store of learned choices")
    machines = data.get("machines")
    if type(machines) is not list or not all(
            type(m) is dict and type(m.get("machine")) is dict and type(m.get("cells")) is dict
            for m in machines):
        raise ValueError("its list of machines is malformed")
    for m in machines:
        for text, rec in m["cells"].items():
            _check_record(text, rec)
    return data


def _check_record(text, rec):
    try:
        _key_of(text)
    except ValueError:
        raise ValueError(f"{text!r} is not a cell") from None
    if (type(rec) is not dict or type(rec.get("choice")) is not str
            or type(rec.get("medians")) is not dict
            or not all(type(k) is str and type(v) is float and 0 < v < math.inf
                       for k, v in rec["medians"].items())
            or type(rec.get("samples")) is not int
            or type(rec.get("when")) not in (int, float)):
        raise ValueError(f"the record of {text} is malformed")


def stored() -> dict:
    """This machine's records from the store, read once (one warning if unusable)."""
    global _stored
    if _stored is None:
        with _lock:
            if _stored is None:
                _stored = _load()
    return _stored


def _load() -> dict:
    global _saved_at
    _saved_at = wall()  # the first write at exit, or a minute from now
    p = path()
    try:
        data = _read(p)
    except FileNotFoundError:
        return {}
    except (OSError, ValueError, RecursionError) as e:
        _warn(p, e)
        return {}
    here = machine()
    for m in data["machines"]:
        if m["machine"] == here:
            return {_key_of(t): r for t, r in m["cells"].items()}
    return {}


def _warn(p, why):
    warnings.warn(f"fastmath: ignoring the store of learned choices {p}: {why}; auto "
                  "learns afresh and replaces it", _config.ConfigWarning,
                  stacklevel=_fpe.user_stacklevel())


def records() -> dict:
    """This machine's records: the store's, updated with what this process settled."""
    out = dict(stored())
    for key, cell in list(cells.items()):
        if cell.choice is not None and cell.when is not None and cell.source == "learned here":
            out[key] = {"choice": cell.choice, "medians": dict(cell.medians),
                        "samples": cell.samples, "when": cell.when}
    return out


_save_lock = threading.Lock()


def save(p=None) -> bool:
    """Merge what was learned into the store (newest record of each cell wins), written
    atomically. Never raises: a store that cannot be written is left as it is."""
    global _dirty, _saved_at
    if not _save_lock.acquire(blocking=False):
        return False  # another thread is writing it
    try:
        p = path() if p is None else p
        _saved_at = wall()
        mine = records()
        if not mine:
            return False
        try:
            st = os.stat(p)
            if not stat.S_ISREG(st.st_mode):
                return False  # never replace what is not a file of ours
            data = _read(p)
        except (OSError, ValueError, RecursionError):
            data = {"format": FORMAT, "machines": []}
        here = machine()
        entry = next((m for m in data["machines"] if m["machine"] == here), None)
        if entry is None:
            entry = {"machine": here, "cells": {}}
            data["machines"].append(entry)
        for key, rec in mine.items():
            text = _key_text(key)
            theirs = entry["cells"].get(text)
            if theirs is None or theirs["when"] <= rec["when"]:
                entry["cells"][text] = rec
        tmp = p.with_name(f"{p.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        try:
            p.parent.mkdir(parents=True, exist_ok=True)
            with open(tmp, "w") as f:
                json.dump(data, f, indent=1)
                f.write("\n")
            os.replace(tmp, p)
        except OSError as e:
            _log.logger.debug("could not write the store of learned choices %s: %s", p, e)
            try:
                os.unlink(tmp)
            except OSError:
                pass
            return False
        _dirty = False
        return True
    finally:
        _save_lock.release()


def _at_exit():
    if _dirty and state.on:
        save()


def _reset():
    """Forget everything (a reload: the thread budget may have changed, or the mode)."""
    global _stored, _machine, _dirty
    state.mode = _config.get().auto
    state.on = state.mode == "learn"
    cells.clear()
    settled.clear()
    _floors.clear()
    _dtype_floors.clear()
    _stored, _machine, _dirty = None, None, False
    for hook in _watchers:
        hook()


def _after_fork_in_child():
    """The child keeps what was settled; cells learning in another thread of the parent
    start again (their locks may be held by a thread that is not in this process)."""
    global _lock, _save_lock
    _lock, _save_lock = threading.RLock(), threading.Lock()
    for key, cell in list(cells.items()):
        cell.lock = threading.Lock()
        if cell.learning:
            del cells[key]
            settled.pop(key, None)


state.mode = _config.get().auto
state.on = state.mode == "learn"
_config.on_reload(_reset)
atexit.register(_at_exit)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
