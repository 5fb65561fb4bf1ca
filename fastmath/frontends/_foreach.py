"""One function over a list of arrays: ``foreach.exp(arrays)``, ``foreach.exp(arrays, out=arrays)``.

The front end of ``fastmath.foreach``. Every unary function of the registry has a foreach
form here, made from its row. Each array's result is what ``fastmath.<name>`` gives for it
alone (under the numpy backend, NumPy's own bits), with NumPy's result dtype and shape;
items that are not arrays are converted as ``fastmath.<name>`` converts them. ``out=`` is
a list of outputs, one per input, and may be the input list itself (in place).

How the list runs: selection gives a chain of list kernels (a backend's optional
``foreach(spec)``, backends/_protocol.py's ``LIST_KERNEL``: the selected backend's, with
NumPy's call per array behind it; under ``auto`` the numpy backend's, for the arrays
below the function's smallest crossover, which ``auto`` leaves to the reference), run by
the chain runner. A list kernel computes the arrays it takes as they are, all at once
(the numpy backend's: NumPy's own loop over each, on the native runtime's pool; torch's:
``_foreach_<op>_`` in one call) and leaves the others to this front end, which computes
each as ``fastmath.<name>`` of it: many small arrays (of at least 16K elements each)
spread over the thread pool, arrays big enough to be split on their own one after
another, each across every thread.

Floating-point errors are reported per array, in list order, as NumPy would report them
for one call per array. Under ``np.errstate`` modes that act at once (``raise``,
``call``) a list with ``out=`` runs one array after another in this thread, so the
arrays after the one that raises are left untouched, as they would be by a loop (a list
kernel that reports each array's own flags stops after the array that acts; otherwise
each array is computed as ``fastmath.<name>`` of it); with new outputs the list kernel
still runs, and the flags are acted on in list order. With ``out=``, arrays whose
memory overlaps another's run one after another in list order, as in a loop.
"""
from __future__ import annotations

import itertools

from .._numpy import np

from .. import _registry
from ..dispatch import _chain, _config, _fpe, _parallel, _selection
from ..dispatch._npy_loops import PARALLEL_MIN_BYTES
from ._functions import FUNCTIONS

_ndarray = np.ndarray
# Elements per run of small arrays handed to a thread at a time, and the smallest array
# worth handing to another thread at all.
SPREAD_RUN = 1 << 15
SPREAD_MIN = 1 << 14


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
        self._small = 0  # _selection.small_size, looked up once (forgotten on a reload)

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
        chain = _selection.list_chain(sel, self._spec, self._per_array)
        stops = bool(chain) and getattr(chain[0][1], "stops", False)
        limit = self._limit(sel, chain)
        if acting and (out is not None or not stops):
            # an array after the one that raises must not be written
            if stops:
                return self._in_turn(xs, outs, chain, limit)
            return [self._one(x, o) for x, o in zip(xs, outs)]
        results = [None] * len(xs)
        flags = None
        if chain:
            flags, todo = _chain.first(chain, (xs, None if out is None else outs, results,
                                               limit, 0), self.__name__)
        else:
            todo = range(len(xs))
        if flags is not None:
            self._reported(todo, xs, outs, results, flags, limit)
        elif acting:  # new outputs, and none of the list kernel's arrays raised anything
            for i in todo:
                results[i] = self._one(xs[i], outs[i])
        elif todo:  # (the look-ups of an empty rest cost a list of small arrays 1-2%)
            self._rest(todo, xs, outs, results, limit)
        return results

    def _rest(self, todo, xs, outs, results, limit):
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
            self._spread(small, xs, outs, results, threads, limit)
        self._some(big, xs, outs, results, limit)

    def _reported(self, todo, xs, outs, results, flags, limit):
        """Each array's flags reported in list order, as a loop of calls raises them; the
        arrays the list kernel left are computed in their turn, their flags recorded.
        (Under ``raise`` the arrays after the one that raises were computed into new
        outputs, which are dropped.)"""
        left = set(todo)
        name = self.__name__
        for i, f in enumerate(flags):
            if i in left:
                rec = _fpe.Recorder()
                with np.errstate(all="call", call=rec):
                    self._some((i,), xs, outs, results, limit)
                f = rec.flags
            _fpe.report(name, f)

    def _in_turn(self, xs, outs, chain, limit):
        """out= under errstate raise/call: the list kernel in this thread, stopping after
        each array whose flags act, which are acted on before the next array is written."""
        modes = np.geterr()
        acts = sum(bit for key, bit, _ in _fpe.CATEGORIES if modes[key] in ("raise", "call"))
        name = self.__name__
        results = [None] * len(xs)
        start = 0
        while start < len(xs):
            part = [None] * (len(xs) - start)
            flags, left = _chain.first(chain, (xs[start:], outs[start:], part, limit, acts),
                                       name)
            done = left[0] if left else len(part)
            results[start:start + done] = part[:done]
            for f in flags or ():
                _fpe.report(name, f)
            if done and flags and flags[done - 1] & acts:
                start += done  # stopped after an array that acted: go on from the next
            elif done < len(part):  # one the list kernel left
                i = start + done
                results[i] = self._one(xs[i], outs[i])
                start = i + 1
            else:
                break
        return results

    def _limit(self, sel, chain=None):
        """The size from which the list kernel leaves arrays to fastmath.<name>: under
        ``auto``, the function's smallest crossover (below it ``auto`` calls the
        reference); else the kernel's own (``LIST_KERNEL``'s ``limit``), or None."""
        if sel == "auto":
            if not self._small:
                self._small = _selection.small_size(self._spec)
            return self._small
        return getattr(chain[0][1], "limit", None) if chain else None

    def _spread(self, index, xs, outs, results, threads, limit):
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
                        self._some(runs[r], xs, outs, results, limit)
            finally:
                _selection._scoped.reset(token)

        try:
            _parallel.run([task] * min(threads, len(runs)))
        finally:
            for log in logs:  # runs are in list order, and so is each log
                _fpe.replay(log.lines)

    def _some(self, index, xs, outs, results, limit):
        """``results[i]`` for each ``i`` of ``index``. Where fastmath.<name> would call the
        reference as it is (an array below ``limit``, the size from which the list kernel
        leaves arrays), the reference is called here, without the front end."""
        limit = (limit or 0) if self._spec.kind == "unary" else 0
        ref = self._spec.reference()
        for i in index:
            x = xs[i]
            if type(x) is _ndarray and x.size < limit and outs[i] is None:
                results[i] = ref(x)
            else:
                results[i] = self._one(x, outs[i])

    def _per_array(self, xs, outs, results, limit=None, stop=0):
        """The chain's last list kernel: NumPy's own call per array (its own warnings)."""
        ref = self._spec.reference()
        for i, x in enumerate(xs):
            results[i] = ref(x) if outs is None else ref(x, out=outs[i])
        return None, ()


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
