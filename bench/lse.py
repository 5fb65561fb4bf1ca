"""logsumexp of one array against its peers, one process, interleaved rounds.

For float64 and float32 at 10^3, 10^4 and 10^5 elements (axis None) and rows of 1000 and
of 10 (axis -1), prints the median time per call (us) of:

- ``fastmath``: ``fastmath.logsumexp`` under ``auto`` (the compiled kernel where built);
- ``fm-python``: the same with the kernel switched off (the Python path it replaced);
- ``numpy``: the plain expression ``m + log(sum(exp(a - m)))`` with ``m = a.max()``;
- ``numba``: an ``@njit`` loop (max, then the sum of exp), where numba is installed;
- ``scipy``: ``scipy.special.logsumexp``;

then fastmath's time over the fastest peer's (fm-python not counted as a peer) and over
fm-python's, each the median of the per-round ratios, so that a neighbour slowing one
round slows both sides. The load average comes with the figures.

    python bench/lse.py [--rounds 15] [--sizes 1000,10000,100000]
"""
import argparse
import math
import os
import statistics

import numpy as np
import scipy.special

import fastmath
from fastmath.frontends import _reductions
from fastmath.tools._bench import _timer

BATCH = 0.002  # seconds per timed batch


def numba_peer():
    try:
        from numba import njit
    except ImportError:
        return None

    @njit(cache=False)
    def flat(a):
        m = a[0]
        for x in a:
            m = max(m, x)
        s = 0.0
        for x in a:
            s += math.exp(x - m)
        return m + math.log(s)

    @njit(cache=False)
    def rows(a):
        out = np.empty(a.shape[0], a.dtype)
        for i in range(a.shape[0]):
            out[i] = flat(a[i])
        return out

    return lambda a, axis=None: flat(a) if axis is None else rows(a)


def numpy_peer(a, axis=None):
    if axis is None:
        m = a.max()
        return m + np.log(np.sum(np.exp(a - m)))
    m = a.max(axis=axis, keepdims=True)
    return (m + np.log(np.sum(np.exp(a - m), axis=axis, keepdims=True))).squeeze(axis)


class _PythonPath:
    """fastmath with its compiled kernel switched off, for the duration of a batch."""

    def __enter__(self):
        fastmath.logsumexp(np.zeros(2))  # the kernel looked for and checked
        self.saved, _reductions._small = _reductions._small, _reductions._no_kernel

    def __exit__(self, *exc):
        _reductions._small = self.saved


def cells(sizes):
    rng = np.random.default_rng(0)
    for dtype in ("float64", "float32"):
        for n in sizes:
            yield f"{dtype} {n}", rng.normal(scale=10, size=n).astype(dtype), None
        for shape in ((100, 1000), (1000, 10)):
            yield (f"{dtype} {shape[0]}x{shape[1]} ax-1",
                   rng.normal(scale=10, size=shape).astype(dtype), -1)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--sizes", default="1000,10000,100000")
    args = p.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    nb = numba_peer()
    peers = {"numpy": numpy_peer, "scipy": scipy.special.logsumexp}
    if nb is not None:
        peers["numba"] = nb
    print(f"load average {os.getloadavg()}; numpy {np.__version__}, scipy {scipy.__version__}")
    names = ["fastmath", "fm-python", *peers]
    print(f"{'cell':24}" + "".join(f"{n:>11}" for n in names)
          + "   fastmath/best peer  fastmath/fm-python")
    python_path = _PythonPath()
    for label, a, axis in cells(sizes):
        calls = {"fastmath": fastmath.logsumexp, "fm-python": fastmath.logsumexp, **peers}
        calls = {name: _timer(f, a, {"axis": axis}, BATCH) for name, f in calls.items()}
        for name, once in calls.items():  # compile, warm caches, size the batches
            if name == "fm-python":
                with python_path:
                    once()
            else:
                once()
        times = {n: [] for n in names}
        for r in range(args.rounds):
            order = names[r % len(names):] + names[:r % len(names)]
            for name in order:
                if name == "fm-python":
                    with python_path:
                        times[name].append(calls[name]())
                else:
                    times[name].append(calls[name]())
        best = [min(times[n][r] for n in peers) for r in range(args.rounds)]
        vs_peer = statistics.median(f / b for f, b in zip(times["fastmath"], best))
        vs_py = statistics.median(f / b for f, b in zip(times["fastmath"], times["fm-python"]))
        print(f"{label:24}" + "".join(f"{statistics.median(times[n]) * 1e6:11.2f}" for n in names)
              + f"   {vs_peer:18.2f}  {vs_py:18.2f}")
    print(f"load average {os.getloadavg()}")


if __name__ == "__main__":
    main()
