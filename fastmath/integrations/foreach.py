"""One function over a list of arrays: ``foreach.exp(arrays)``, ``foreach.exp(arrays, out=arrays)``.

Every unary function of the registry has a foreach form here, made from its row. Each
array's result is what ``fastmath.<name>`` gives for it alone (under the numpy backend,
NumPy's own bits), with NumPy's result dtype and shape; items that are not arrays are
converted as ``fastmath.<name>`` converts them. ``out=`` is a list of outputs, one per
input, and may be the input list itself (in place). What changes is how the list runs:

- on a torch backend chosen with ``fastmath.backend``/``set_backend``, float32/float64
  arrays go through torch's ``_foreach_<op>_`` in one call, where torch has one;
- otherwise many small arrays (of at least 16K elements each) are spread over the thread
  pool (each thread takes the next run of the list as it comes free); arrays big enough to be split on their own run
  one after another, each across every thread. Where fastmath.<name> would call NumPy's
  own function as it is (small arrays), foreach calls it directly.

Floating-point errors are reported per array, in list order, as NumPy would report them
for one call per array. Under ``np.errstate`` modes that act at once (``raise``,
``call``) the list runs one array after another in this thread, so the arrays after the
one that raises are left untouched, as they would be by a loop.
"""
from __future__ import annotations

import itertools

from .._numpy import np

from ..dispatch import _fpe, _parallel, _selection
from .. import _registry, backends
from ._blockwise import _Log, replay as _replay
from ..backends.numpy import PARALLEL_MIN_BYTES

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
        self._fn = None
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
        if self._fn is None:
            import fastmath

            self._fn = getattr(fastmath, self._spec.name)
        xs = list(arrays)
        if out is None:
            outs = [None] * len(xs)
        else:
            outs = list(out)
            if len(outs) != len(xs):
                raise ValueError(f"foreach.{self.__name__}: out= has {len(outs)} arrays "
                                 f"for {len(xs)} inputs; it must have one per input")
        modes = np.geterr().values()
        if "raise" in modes or "call" in modes:
            return [self._one(x, o) for x, o in zip(xs, outs)]
        results = [None] * len(xs)
        todo = self._torch(xs, outs, results)
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
        return results

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
        logs = [_Log() for _ in runs]
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
                _replay(log.lines)

    def _some(self, index, xs, outs, results):
        """``results[i]`` for each ``i`` of ``index``. Where fastmath.<name> would call the
        reference as it is (``auto`` below its smallest crossover; ``numpy`` on an array
        too small to split), the reference is called here, without the front end."""
        sel = _selection.current()
        limit = 0
        if self._spec.kind == "unary" and sel in ("numpy", "auto"):
            limit = _selection.small_size(self._spec) if sel == "auto" else self._split_size
        ref = self._spec.reference()
        for i in index:
            x = xs[i]
            if type(x) is _ndarray and x.size < limit and outs[i] is None:
                results[i] = ref(x)
            else:
                results[i] = self._one(x, outs[i])

    def _torch(self, xs, outs, results):
        """Compute what the selected backend's list kernel takes; the indices left over."""
        todo = list(range(len(xs)))
        sel = _selection.current()
        if sel == "auto" or sel == "numpy":
            return todo
        kernel = getattr(backends.get(sel), "foreach", None)
        kernel = kernel(self._spec) if kernel is not None else None
        if kernel is None:
            return todo
        spec = self._spec
        ins = list(xs)
        dest = [o if o is not None else (np.empty_like(x) if type(x) is _ndarray else None)
                for x, o in zip(xs, outs)]
        if spec.fpe and _fpe.watched():  # flags are derived from the input afterwards
            ins = [x.copy() if o is x else x for x, o in zip(xs, dest)]
        take = [i for i in todo if dest[i] is not None]
        status = kernel([xs[i] for i in take], [dest[i] for i in take])
        left = sorted(set(todo) - set(take))
        for i, s in zip(take, status):
            if s is NotImplemented:
                left.append(i)
                continue
            results[i] = dest[i]
            if spec.fpe:
                _fpe.report(spec.name, _fpe.derive(spec.reference(), (ins[i],), dest[i]))
        return sorted(left)


def _build():
    made = {}
    for spec in _registry.ROWS:
        if spec.kind in ("unary", "elementwise"):
            made[spec.name] = Foreach(spec)
            made.update(dict.fromkeys(spec.aliases, made[spec.name]))
    return made


globals().update(_build())
__all__ = sorted(n for n, v in globals().items() if isinstance(v, Foreach))
