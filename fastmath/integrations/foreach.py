"""One function over a list of arrays: ``foreach.exp(arrays)``, ``foreach.exp(arrays, out=arrays)``.

Every unary function of the registry has a foreach form here, made from its row. Each
array's result is what ``fastmath.<name>`` gives for it alone (under the numpy backend,
NumPy's own bits), with NumPy's result dtype and shape; items that are not arrays are
converted as ``fastmath.<name>`` converts them. ``out=`` is a list of outputs, one per
input, and may be the input list itself (in place). What changes is how the list runs:

- where ``fastmath.<name>`` would run NumPy's own ufunc loop over an array as it is (the
  numpy backend, or ``auto`` below its smallest crossover; a C-contiguous, aligned array
  of a dtype the ufunc takes without a cast), the compiled ``fastmath.dispatch._lists`` runs that
  very loop (``ufunc._get_strided_loop``) over every such array, with no Python call per
  array, the list shared among the threads of its pool;
- on a torch backend chosen with ``fastmath.backend``/``set_backend``, float32/float64
  arrays go through torch's ``_foreach_<op>_`` in one call, where torch has one, through
  the chain runner (a list kernel that fails hands the list to NumPy);
- everything else runs as ``fastmath.<name>`` of each array: many small arrays (of at
  least 16K elements each) spread over the thread pool, arrays big enough to be split on
  their own one after another, each across every thread.

Floating-point errors are reported per array, in list order, as NumPy would report them
for one call per array. Under ``np.errstate`` modes that act at once (``raise``,
``call``) a list with ``out=`` runs one array after another in this thread, so the
arrays after the one that raises are left untouched, as they would be by a loop; with
new outputs the compiled path still runs, and the flags are acted on in list order.
With ``out=``, arrays whose memory overlaps another's run one after another in list
order, as in a loop.
"""
from __future__ import annotations

import itertools

from .._numpy import np

from .. import _registry, backends
from ..dispatch import _alloc, _chain, _config, _fpe, _parallel, _selection
from ..dispatch._npy_loops import PARALLEL_MIN_BYTES, native_loops
from ..frontends._functions import FUNCTIONS
from ..backends import HANDLED

try:
    from ..dispatch import _lists
except ImportError:  # built without a C compiler: every array takes the Python path
    _lists = None

_ndarray = np.ndarray
# Elements per run of small arrays handed to a thread at a time, and the smallest array
# worth handing to another thread at all.
SPREAD_RUN = 1 << 15
SPREAD_MIN = 1 << 14
# Elements per piece of the list the compiled loop hands to a thread at a time (a list
# short of a piece per thread is shared out equally): small enough that a thread
# whose core is busy elsewhere holds back little of the call, large enough that taking
# a piece (a cache line passed between cores) costs little. 1000 x 1000 float64 exp on
# two threads: 2^13 0.76 ms (0.59 in place), 2^15 0.69 (0.54), 2^16 0.67 (0.54).
NATIVE_PIECE = 1 << 15
# Outputs allocated by one call from which glibc is asked to keep freed memory for reuse.
RECYCLE = 1 << 20


class Foreach:
    """``name`` over a list of arrays; see the module docstring.

    Examples
    --------
    >>> import numpy as np, fastmath
    >>> xs = [np.zeros(2), np.ones(3, np.float32), 1.0]
    >>> fastmath.foreach.exp(xs)
    [array([1., 1.]), array([2.718282, 2.718282, 2.718282], dtype=float32), np.float64(2.718281828459045)]
    >>> ys = [np.zeros(2), np.ones(2)]
    >>> _ = fastmath.foreach.exp(ys, out=ys)  # in place
    >>> ys[1]
    array([2.71828183, 2.71828183])
    """

    def __init__(self, spec):
        self._spec = spec
        self.__name__ = self.__qualname__ = spec.name
        self.__doc__ = (f"``fastmath.{spec.name}`` of each array in a list.\n\n"
                        f"``foreach.{spec.name}(arrays, out=None)`` returns a list; with "
                        f"``out=`` (a list, or ``arrays`` itself) it writes there.")
        self._fn = FUNCTIONS[spec.name]
        self._native = None  # the compiled path's loops, built on first use
        # the runtime's pacing records of the compiled path's lists: one for new outputs,
        # one for out= (the first take about 1.3 times as long per element: the
        # allocation, and writing memory not yet in cache)
        self._paces = (_parallel.Pace(), _parallel.Pace())
        self._small = 0  # _selection.small_size, looked up once (forgotten on a reload)
        # below this size the numpy backend runs the reference in one piece, as it is
        self._split_size = int(PARALLEL_MIN_BYTES / spec.cost / 16)

    def __repr__(self):
        return f"<fastmath foreach {self.__name__!r}>"

    def _one(self, x, o):
        if o is None:
            return self._fn(x)
        if self._spec.kind == "elementwise":  # NumPy's sinc and i0 take no out=
            np.copyto(o, self._fn(x), casting="same_kind")
            return o
        return self._fn(x, out=o)

    def __call__(self, arrays, out=None):
        xs = list(arrays)
        if out is None:
            outs = [None] * len(xs)
        else:
            outs = list(out)
            if len(outs) != len(xs):
                raise ValueError(f"foreach.{self.__name__}: out= has {len(outs)} arrays "
                                 f"for {len(xs)} inputs; it must have one per input")
        modes = np.geterr().values()
        acting = "raise" in modes or "call" in modes
        sel = _selection.current()
        native = sel == "auto" or sel == "numpy"
        if acting and (out is not None or not native):
            # an array after the one that raises must not be written
            if native and self._loops():
                return self._in_turn(xs, outs, sel)
            return [self._one(x, o) for x, o in zip(xs, outs)]
        results = [None] * len(xs)
        flags = None
        if native:
            todo, flags = self._compiled(xs, None if out is None else outs, results, sel)
        else:
            todo = self._listed(xs, outs, results, sel)
        if flags is not None:
            self._reported(todo, xs, outs, results, flags)
        elif acting:  # new outputs, and none of the compiled path's raised anything
            for i in todo:
                results[i] = self._one(xs[i], outs[i])
        elif todo:  # (the look-ups of an empty rest cost a list of small arrays 1-2%)
            self._rest(todo, xs, outs, results)
        return results

    def _rest(self, todo, xs, outs, results):
        """``results[i]`` for each ``i`` of ``todo``, as fastmath.<name> of each array."""
        small, big = [], []
        for i in todo:
            x = xs[i]
            n = x.size if type(x) is _ndarray else 0
            # below SPREAD_MIN a call is mostly dispatch, which holds the GIL: threads would
            # only pass it back and forth (and wait on each other on a busy machine)
            (small if SPREAD_MIN <= n and n * 16 * self._spec.cost < PARALLEL_MIN_BYTES
             else big).append(i)
        total = sum(xs[i].size * 16 for i in small if type(xs[i]) is _ndarray)
        threads = _parallel.threads()
        if threads < 2 or len(small) < 2 or total * self._spec.cost < PARALLEL_MIN_BYTES:
            big = sorted(big + small)
            small = []
        if small:
            self._spread(small, xs, outs, results, threads)
        self._some(big, xs, outs, results)

    def _reported(self, todo, xs, outs, results, flags):
        """Each array's flags reported in list order, as a loop of calls raises them; the
        arrays the compiled path left are computed in their turn, their flags recorded.
        (Under ``raise`` the arrays after the one that raises were computed into new
        outputs, which are dropped.)"""
        left = set(todo)
        name = self.__name__
        for i, f in enumerate(flags):
            if i in left:
                rec = _fpe.Recorder()
                with np.errstate(all="call", call=rec):
                    self._some((i,), xs, outs, results)
                f = rec.flags
            _fpe.report(name, f)

    def _in_turn(self, xs, outs, sel):
        """out= under errstate raise/call: the compiled path in this thread, stopping after
        each array whose flags act, which are acted on before the next array is written."""
        modes = np.geterr()
        acts = sum(bit for key, bit, _ in _fpe.CATEGORIES if modes[key] in ("raise", "call"))
        loops, limit, name = self._loops(), self._limit(sel), self.__name__
        results = [None] * len(xs)
        start = 0
        while start < len(xs):
            part = [None] * (len(xs) - start)
            flags, left, _, _ = _lists.foreach(loops, xs[start:], outs[start:], part,
                                               limit, 0, NATIVE_PIECE, 1, -1, acts)
            done = left[0] if left else len(part)
            results[start:start + done] = part[:done]
            for f in flags or ():
                _fpe.report(name, f)
            if done and flags and flags[done - 1] & acts:
                start += done  # stopped after an array that acted: go on from the next
            elif done < len(part):  # one the compiled path left
                i = start + done
                results[i] = self._one(xs[i], outs[i])
                start = i + 1
            else:
                break
        return results

    def _loops(self):
        loops = self._native
        if loops is None:
            loops = self._native = _native_loops(self._spec)
        return loops

    def _limit(self, sel):
        """Arrays of this size or more are left to fastmath.<name>, which splits them."""
        if sel != "auto":
            return self._split_size
        if not self._small:
            self._small = _selection.small_size(self._spec)
        return self._small

    def _compiled(self, xs, outs, results, sel):
        """Run NumPy's loop over the arrays it takes as they are (see the module
        docstring); the indices left over, and each array's FP flags (None: none raised)."""
        loops = self._loops()
        if not loops:
            return range(len(xs)), None
        threads = _parallel.threads()
        pace = self._paces[outs is not None].id() if threads > 1 else -1
        flags, left, allocated, _ = _lists.foreach(loops, xs, outs, results, self._limit(sel),
                                                   self._split_size, NATIVE_PIECE, threads,
                                                   pace)
        if allocated >= RECYCLE:
            # many small outputs freed together shrink glibc's heap, and the next call's
            # outputs fault every page in again (about 1000 faults, 10 ms, for 1000 x 1000
            # float64): let freed memory be recycled, as for one large output
            _alloc.tune()
        return left, flags

    def _spread(self, index, xs, outs, results, threads):
        """Runs of ``index`` of about SPREAD_RUN elements, taken in turn by each thread as
        it comes free (a thread that gets no core leaves its runs to the others); NumPy's
        messages replayed in list order."""
        runs, run, total = [], [], 0
        for i in index:
            run.append(i)
            total += getattr(xs[i], "size", 1)
            if total >= SPREAD_RUN:
                runs.append(run)
                run, total = [], 0
        if run:
            runs.append(run)
        scope = _selection._scoped.get()
        logs = [_fpe.Log() for _ in runs]
        counter = itertools.count()

        def task():
            token = _selection._scoped.set(scope)  # the caller's backend() scope
            try:
                while (r := next(counter)) < len(runs):
                    with np.errstate(all="log", call=logs[r]):
                        self._some(runs[r], xs, outs, results)
            finally:
                _selection._scoped.reset(token)

        try:
            _parallel.run([task] * min(threads, len(runs)))
        finally:
            for log in logs:  # runs are in list order, and so is each log
                _fpe.replay(log.lines)

    def _some(self, index, xs, outs, results):
        """``results[i]`` for each ``i`` of ``index``. Where fastmath.<name> would call the
        reference as it is (``auto`` below its smallest crossover; ``numpy`` on an array
        too small to split), the reference is called here, without the front end."""
        sel = _selection.current()
        limit = 0
        if self._spec.kind == "unary" and sel in ("numpy", "auto"):
            limit = self._limit(sel)
        ref = self._spec.reference()
        for i in index:
            x = xs[i]
            if type(x) is _ndarray and x.size < limit and outs[i] is None:
                results[i] = ref(x)
            else:
                results[i] = self._one(x, outs[i])

    def _listed(self, xs, outs, results, sel):
        """The arrays the selected backend's list kernel takes, computed through the chain
        runner (NumPy behind it); the indices left over."""
        kernel = getattr(backends.get(sel), "foreach", None)
        kernel = kernel(self._spec) if kernel is not None else None
        if kernel is None:
            return range(len(xs))
        take, left, ins, dest = [], [], [], []
        for i, (x, o) in enumerate(zip(xs, outs)):
            d = o if o is not None else (np.empty_like(x) if type(x) is _ndarray else None)
            if d is None or not kernel.takes(x, d):
                left.append(i)
                continue
            take.append(i)
            # in place with NumPy behind: a kernel failing part-way, or flags derived from
            # the input afterwards, needs the input intact
            ins.append(x.copy() if d is x else x)
            dest.append(d)
        if take:
            chain = ((sel, kernel), ("numpy", self._numpy_list))
            _chain.run(chain, (ins,), dest, self.__name__, self._derive_list)
            for i, d in zip(take, dest):
                results[i] = d
        return left

    def _numpy_list(self, xs, outs):
        """The chain's last list kernel: NumPy's own call per array (its own warnings)."""
        ref = self._spec.reference()
        for x, o in zip(xs, outs):
            ref(x, out=o)
        return HANDLED

    def _derive_list(self, ins, outs):
        """Each array's flags from its result, reported in list order (see _chain.run)."""
        if self._spec.fpe:
            ref = self._spec.reference()
            for x, o in zip(ins[0], outs):
                _fpe.report(self.__name__, _fpe.derive(ref, (x,), o))
        return 0


def _native_loops(spec):
    """``(dtype, result dtype, call info)`` for each dtype whose NumPy loop the compiled
    path runs for ``spec``: NumPy's own one-argument ufuncs only (SciPy's loops may call
    back into Python to report their own errors), on dtypes the ufunc takes without a cast."""
    if _lists is None or spec.kind != "unary" or not spec.ref.startswith("numpy:"):
        return ()
    return native_loops(spec.reference())


def _forget_small():
    for f in globals().values():
        if isinstance(f, Foreach):
            f._small = 0


def _build():
    made = {}
    for spec in _registry.ROWS:
        if spec.kind in ("unary", "elementwise"):
            made[spec.name] = Foreach(spec)
            made.update(dict.fromkeys(spec.aliases, made[spec.name]))
    return made


globals().update(_build())
_config.on_reload(_forget_small)
__all__ = sorted(n for n, v in globals().items() if isinstance(v, Foreach))
