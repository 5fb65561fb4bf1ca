"""``fastmath bench --peers``: fastmath beside the other ways of computing the same thing.

For each cell (function, dtype, size) every installed peer computes the same input:
NumPy/SciPy (the reference), fastmath's ``auto``, numexpr, torch allocating its own result
and torch writing into a NumPy-allocated one, mkl_umath, numba's
``@vectorize(target="parallel")``, and ``jax.jit`` with the copies to and from JAX counted.
Each peer's time is the median of interleaved rounds (a noisy neighbour slows every peer
alike), each with its largest distance in ULPs from the reference; a peer beyond the
registry row's ULP bound (the one fastmath's kernels keep) is shown but not counted as
the fastest. Every column's batch starts once the process has gone quiet
(:func:`quiesce`): the peers' thread pools live in this one process, and a pool that
keeps spinning after its call (Intel OpenMP, under mkl_umath, spins 200 ms by default)
would otherwise hold a core through the next columns' batches. A peer that is not
installed, or has no such function, is left out of the cell. logsumexp has its own peers:
SciPy, the plain NumPy expression ``m + log(sum(exp(a - m)))``, torch, numexpr, numba and
jax.
"""
from __future__ import annotations

import math
import os
import time

from .._numpy import np

from . import _args

FUNCTIONS = ("exp", "log", "log1p", "expm1", "erf")
DTYPES = ("float32", "float64")
SIZES = (10**5, 10**7)
LSE_CASES = ((1000,), None), ((10**5,), None), ((10**7,), None), ((3000, 3000), None), \
    ((3000, 3000), 0)
TARGET = 0.02  # seconds per timed sample
# quiesce(): the process counts as quiet when its threads together use less than this
# share of one core (the waiting thread's own polling is well below it)...
QUIET = 0.05
# ... over one interval of this many seconds, waiting at most LIMIT in all.
INTERVAL, LIMIT = 0.01, 1.0
# quiesce()'s clocks and sleep, looked up at each call: tests put made-up ones in their
# place, so that what counts as quiet is theirs to say and not the machine's load.
clock, cpu_clock, sleep = time.perf_counter, time.process_time, time.sleep


def _input(name, shape, dtype, rng):
    """Inputs from the registry row's sample domain (where the reference is finite)."""
    from .._registry import BY_NAME

    return BY_NAME[name].sample(math.prod(shape), dtype, rng)[0].reshape(shape)


# --- the peers: name -> callable(x) -> result, or None where the peer cannot -----------------

def _numexpr(name):
    if name == "erf":
        return None
    import numexpr

    return lambda x: numexpr.evaluate(f"{name}(x)", local_dict={"x": x})


def _torch_fn(name):
    import torch

    return torch.special.erf if name == "erf" else getattr(torch, name)


def _torch_own(name):
    import torch

    fn = _torch_fn(name)

    def run(x):
        with torch.inference_mode():
            return fn(torch.from_numpy(x)).numpy()
    return run


def _torch_into_numpy(name):
    import torch

    fn = _torch_fn(name)

    def run(x):
        out = np.empty_like(x)
        with torch.inference_mode():
            fn(torch.from_numpy(x), out=torch.from_numpy(out))
        return out
    return run


def _mkl_umath(name):
    import mkl_umath

    fn = getattr(mkl_umath, name, None)
    return None if fn is None else (lambda x: fn(x))


def _numba(name):
    import numba

    scalar = getattr(math, name)
    return numba.vectorize(["float32(float32)", "float64(float64)"], target="parallel")(
        lambda v: scalar(v))


def _jax_setup():
    import jax

    jax.config.update("jax_enable_x64", True)  # float64 in float64, as NumPy computes it
    return jax


def _jax(name):
    jax = _jax_setup()
    import jax.numpy as jnp
    import jax.scipy.special as jsp

    fn = jax.jit(jsp.erf if name == "erf" else getattr(jnp, name))
    return lambda x: np.asarray(fn(jax.device_put(x)))  # both copies counted


def _vml_direct(name):
    """VML's entry point called directly into a NumPy output, on MKL's own threads (its
    default): the fastest way a user could run VML, what the mkl backend is held to."""
    from .._registry import BY_NAME
    from ..backends import mkl

    vml = BY_NAME[name].kernels.get("mkl")  # the registry row's VML name ("Ln" for log)
    if vml is None or mkl.load() is None:
        return None
    fns = {np.dtype(dt): mkl._function(vml, np.dtype(dt), 1) for dt in ("float32", "float64")}

    def run(x):
        out = np.empty_like(x)
        before = mkl._set_local_threads(0)  # MKL's own setting: all its threads
        try:
            fns[x.dtype](x.size, x.ctypes.data, out.ctypes.data, mkl.MODE)
        finally:
            mkl._set_local_threads(before)
        return out
    return run


def _forced(backend):
    """fastmath's function with ``backend`` chosen (a column of ``--forced``), each call in
    its own ``with fastmath.backend(...)``, as a user forces one (about 1.7 us of it)."""
    def make(name):
        import fastmath

        fn = getattr(fastmath, name)

        def run(x):
            with fastmath.backend(backend):
                return fn(x)
        return run

    def make_if_available(name):
        from .. import backends

        return make(name) if backends.why_unavailable(backend) is None else None
    return make_if_available


# --forced: each backend forced, and VML called directly
FORCED = {"fastmath numpy": _forced("numpy"), "fastmath torch-cpu": _forced("torch-cpu"),
          "fastmath mkl": _forced("mkl"), "VML direct": _vml_direct}


ELEMENTWISE_PEERS = {"numexpr": _numexpr, "torch (own output)": _torch_own,
                     "torch (out=numpy)": _torch_into_numpy, "mkl_umath": _mkl_umath,
                     "numba parallel": _numba, "jax.jit": _jax}


def _lse_numpy(a, axis):
    m = np.max(a, axis=axis, keepdims=True)
    r = m + np.log(np.sum(np.exp(a - m), axis=axis, keepdims=True))
    return np.squeeze(r, axis=axis) if axis is not None else r.reshape(())[()]


def _lse_torch(axis):
    import torch

    def run(a):
        with torch.inference_mode():
            t = torch.from_numpy(a)
            dims = tuple(range(a.ndim)) if axis is None else axis
            return torch.logsumexp(t, dim=dims).numpy()
    return run


def _lse_numexpr(axis):
    import numexpr

    def run(a):
        m = np.max(a, axis=axis, keepdims=True)
        e = numexpr.evaluate("exp(a - m)", local_dict={"a": a, "m": m})
        r = m + np.log(np.sum(e, axis=axis, keepdims=True))
        return np.squeeze(r, axis=axis) if axis is not None else r.reshape(())[()]
    return run


def _lse_numba(axis):
    import numba

    @numba.njit(parallel=True, fastmath=False, cache=False)
    def flat(a):
        m = -np.inf
        for i in range(a.size):
            m = max(m, a[i])
        s = 0.0
        for i in numba.prange(a.size):
            s += math.exp(a[i] - m)
        return m + math.log(s)

    @numba.njit(parallel=True, cache=False)
    def columns(a):
        out = np.empty(a.shape[1], a.dtype)
        for j in numba.prange(a.shape[1]):
            m = -np.inf
            for i in range(a.shape[0]):
                m = max(m, a[i, j])
            s = 0.0
            for i in range(a.shape[0]):
                s += math.exp(a[i, j] - m)
            out[j] = m + math.log(s)
        return out
    if axis is None:
        return lambda a: a.dtype.type(flat(a.reshape(-1)))
    return columns if axis == 0 else None


def _lse_jax(axis):
    jax = _jax_setup()
    import jax.scipy.special as jsp

    fn = jax.jit(lambda a: jsp.logsumexp(a, axis=axis))
    return lambda a: np.asarray(fn(jax.device_put(a)))


LSE_PEERS = {"numpy expression": lambda axis: (lambda a: _lse_numpy(a, axis)),
             "torch": _lse_torch, "numexpr": _lse_numexpr, "numba parallel": _lse_numba,
             "jax.jit": _lse_jax}


def installed(module) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


_MODULES = {"fastmath numpy": "numpy", "fastmath torch-cpu": "torch", "fastmath mkl": "numpy",
            "VML direct": "numpy",  # (MKL is a library, not a module: its makers look for it)
            "numexpr": "numexpr", "torch (own output)": "torch", "torch (out=numpy)": "torch",
            "mkl_umath": "mkl_umath", "numba parallel": "numba", "jax.jit": "jax",
            "torch": "torch", "numpy expression": "numpy"}


def columns(name, axis=None, forced=False):
    """(label, callable) for every peer of ``name`` installed here, reference first; with
    ``forced``, also fastmath with each backend chosen and VML called directly."""
    import scipy.special

    import fastmath

    if name == "logsumexp":
        cols = [("numpy/scipy", lambda a: scipy.special.logsumexp(a, axis=axis)),
                ("fastmath auto", lambda a: fastmath.logsumexp(a, axis=axis))]
        makers = {k: (lambda f=f: f(axis)) for k, f in LSE_PEERS.items()}
    else:
        ref = getattr(scipy.special, name) if name == "erf" else getattr(np, name)
        cols = [("numpy/scipy", ref), ("fastmath auto", getattr(fastmath, name))]
        makers = {k: (lambda f=f: f(name)) for k, f in
                  ({**FORCED, **ELEMENTWISE_PEERS} if forced else ELEMENTWISE_PEERS).items()}
    for label, make in makers.items():
        if not installed(_MODULES[label]):
            continue
        try:
            fn = make()
        except Exception:  # noqa: BLE001 - a peer that cannot be set up is left out
            fn = None
        if fn is not None:
            cols.append((label, fn))
    return cols


def max_ulps(result, expected) -> float:
    """Largest distance in ULPs of ``result`` from ``expected`` (in ``expected``'s dtype)."""
    from ._check import ulp_distance

    e = np.asarray(expected)
    r = np.asarray(result).astype(e.dtype, copy=False).reshape(e.shape)
    d = ulp_distance(r, e)
    return float(d.max()) if d.size else 0.0


def quiesce(limit=LIMIT) -> float:
    """Wait until no thread of this process computes; return the seconds waited.

    Each peer is timed as its users would run it, its own pool's settings untouched, but
    not on cores that another peer's idle pool still spins on: after its call, an OpenMP
    pool waits actively for the next one (GNU OpenMP briefly, Intel's 200 ms), and
    fastmath's pool would read a spinning neighbour as a busy core and run on one thread.
    """
    start = clock()
    while True:
        cpu, wall = cpu_clock(), clock()
        sleep(INTERVAL)
        now = clock()
        if cpu_clock() - cpu < QUIET * (now - wall) or now - start >= limit:
            return now - start


def measure(cols, x, rounds, target=TARGET, quiet=True, totals=None):
    """Median seconds per call of each column (rounds interleaved) and its max ULP error;
    ``quiet``: each batch starts once the process is quiet (:func:`quiesce`); ``totals``:
    a dict that gets each column's (seconds, calls) over every call made here, the first
    ones included (timed around each batch: nothing is wrapped around the calls)."""
    expected, errors = None, {}
    reps = {}
    spent = {label: [0.0, 0] for label, _ in cols}
    for label, fn in cols:  # warm up (compiles, lazy imports, pools) and size the repeats
        t = time.perf_counter()
        result = fn(x)
        spent[label][0] += time.perf_counter() - t
        # each column's result checked against the first's at once, not kept: a program
        # holds one output at a time (six results of 10^7 float64 elements held here had
        # the heap grow by 0.5 GB a cell, each column's next output mapped afresh, a page
        # fault every 128 KiB: 120-190 ms a call on a VM)
        if expected is None:
            expected = result
        errors[label] = max_ulps(result, expected)
        del result
        if quiet:
            quiesce()
        took = []
        for _ in range(SIZING):
            t = time.perf_counter()
            fn(x)
            took.append(time.perf_counter() - t)
        spent[label][0] += sum(took)
        spent[label][1] += 1 + SIZING
        reps[label] = _reps(target, min(took))
    del expected
    samples = {label: [] for label, _ in cols}
    for _ in range(rounds):
        for label, fn in cols:
            if quiet:
                quiesce()
            # WARM seconds of calls first, untimed (counted in ``totals``): after the quiet
            # wait a pool's threads have gone to sleep, and waking they now and then land
            # on the caller's CPU for a few milliseconds (torch's erf of 16384 float64
            # elements took 300 us a call so on a 2-vCPU VM, against 28 us)
            per = float(np.median(samples[label])) if samples[label] else target / reps[label]
            warm = int(WARM / max(per, 1e-7))
            if warm:
                t = time.perf_counter()
                for _ in range(warm):
                    fn(x)
                spent[label][0] += time.perf_counter() - t
                spent[label][1] += warm
            n = reps[label]
            t = time.perf_counter()
            for _ in range(n):
                fn(x)
            took = time.perf_counter() - t
            samples[label].append(took / n)
            spent[label][0] += took
            spent[label][1] += n
            # the next batch lasts about `target` too (one slow sizing call, a column that
            # was learning then, once made batches so short that their cold start counted)
            reps[label] = _reps(target, float(np.median(samples[label])))
    if totals is not None:
        totals.update((label, tuple(v)) for label, v in spent.items())
    return {label: float(np.median(v)) for label, v in samples.items()}, errors


SIZING = 3  # calls timed one by one to size a column's batches: the fastest counts
WARM = 0.003  # seconds of a column's calls before each timed batch (none past this a call)


def _reps(target, per_call):
    return max(1, min(10_000, int(target / max(per_call, 1e-7))))


def cells(functions=FUNCTIONS, dtypes=DTYPES, sizes=SIZES, lse_cases=LSE_CASES):
    """(name, dtype, shape, axis) of every cell of the grid."""
    for name in functions:
        for dtype in dtypes:
            for n in sizes:
                yield name, dtype, (n,), None
    for shape, axis in lse_cases:
        for dtype in ("float64",):
            yield "logsumexp", dtype, shape, axis


def run(grid, rounds=5, out=print, target=TARGET, forced=False):
    rng = np.random.default_rng(0)
    rows = []
    for name, dtype, shape, axis in grid:
        x = _input(name, shape, dtype, rng)
        cols = columns(name, axis, forced)
        times, errors = measure(cols, x, rounds, target)
        bound = ulp_bound(name, dtype)
        best, fastest_other = fastest(times, errors, bound)
        row = {"function": name, "dtype": dtype, "shape": list(shape), "axis": axis,
               "times": times, "max_ulps": errors, "ulp_bound": bound, "fastest_peer": best,
               "auto_over_fastest_peer": times["fastmath auto"] / fastest_other,
               "speedup_vs_reference": times["numpy/scipy"] / times["fastmath auto"],
               "beyond_bound": sorted(k for k in times if errors[k] > bound)}
        rows.append(row)
        out(_format(row))
        del x
    return {"load_average": os.getloadavg(), "rounds": rounds, "rows": rows}


def fastest(times, errors, bound):
    """The fastest peer within ``bound`` ULPs of NumPy/SciPy (else "numpy/scipy"), and
    the time to beat: the fastest of those peers and of NumPy/SciPy itself.

    A peer further from NumPy/SciPy than the row's bound (which fastmath's own kernels
    must keep) computes another function: it is shown, but not the one to beat.
    """
    fair = {k: v for k, v in times.items()
            if not k.startswith("fastmath") and k != "numpy/scipy" and errors[k] <= bound}
    best = min(fair, key=fair.get) if fair else "numpy/scipy"
    return best, min(list(fair.values()) + [times["numpy/scipy"]])


def ulp_bound(name, dtype) -> float:
    """The registry row's ULP bound for ``dtype``: what fastmath's kernels are held to."""
    from .._registry import BY_NAME

    return BY_NAME[name].ulp[0 if np.dtype(dtype) == np.float32 else 1]


def _label(row):
    shape = "x".join(map(str, row["shape"]))
    axis = "" if row["axis"] is None else f" axis={row['axis']}"
    return f"{row['function']} {row['dtype']} {shape}{axis}"


def _format(row):
    beyond = set(row.get("beyond_bound", ()))
    parts = [f"{k} {v * 1e6:.0f}us ({row['max_ulps'][k]:g} ulp"
             f"{', beyond the bound' if k in beyond else ''})" for k, v in row["times"].items()]
    return (f"{_label(row)}: auto/fastest-other {row['auto_over_fastest_peer']:.2f}x, "
            f"vs reference {row['speedup_vs_reference']:.2f}x faster | " + "; ".join(parts))


def plot(result, path) -> None:
    """Speed of every peer relative to NumPy/SciPy, one group of bars per cell."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = result["rows"]
    labels = sorted({k for r in rows for k in r["times"]}, key=lambda k: (k != "fastmath auto", k))
    fig, ax = plt.subplots(figsize=(max(8, len(rows) * 0.9), 5))
    width = 0.8 / len(labels)
    for i, label in enumerate(labels):
        xs = [j + i * width for j, r in enumerate(rows) if label in r["times"]]
        ys = [r["times"]["numpy/scipy"] / r["times"][label] for r in rows if label in r["times"]]
        ax.bar(xs, ys, width, label=label)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_yscale("log")
    ax.set_ylabel("speed relative to NumPy/SciPy (higher is faster)")
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(rows))])
    ax.set_xticklabels([_label(r) for r in rows], rotation=60, ha="right", fontsize=7)
    load = ", ".join(f"{v:.2f}" for v in result["load_average"])
    ax.set_title(f"fastmath and its peers on this machine (load average {load})")
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def add_arguments(p) -> None:
    p.add_argument("--functions", default=",".join(FUNCTIONS + ("logsumexp",)),
                   help="comma-separated functions (default: the whole grid)")
    p.add_argument("--dtypes", default=",".join(DTYPES), help="comma-separated dtypes")
    p.add_argument("--sizes", default=None, help="comma-separated element counts")
    p.add_argument("--rounds", type=_args.positive_int, default=5, help="interleaved rounds per cell")
    p.add_argument("--quick", action="store_true", help="3 rounds")
    p.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    p.add_argument("--plot", metavar="FILE.png", help="also draw the speeds (needs matplotlib)")
    p.add_argument("--forced", action="store_true",
                   help="also fastmath with each backend chosen, and VML called directly")
    p.add_argument("--learn", action="store_true",
                   help="the grid auto learns (10^4..10^7, logsumexp from 10^3), run twice in "
                        "one process with no calibration file: a warm-up pass, then a timed "
                        "pass, auto against the fastest forced backend and NumPy/SciPy")


def options(args):
    """(rounds, functions, seconds per timed sample) from the command line's ``args``;
    SystemExit naming the valid functions for an unknown one."""
    rounds = getattr(args, "rounds", None) or (3 if getattr(args, "quick", False) else 5)
    functions = [f for f in args.functions.split(",") if f]
    unknown = set(functions) - set(FUNCTIONS) - {"logsumexp"}
    if unknown:
        raise SystemExit(f"unknown function(s) {sorted(unknown)}; choose from "
                         f"{', '.join(FUNCTIONS + ('logsumexp',))}")
    return rounds, functions, 0.005 if getattr(args, "quick", False) else TARGET


def main(args) -> int:
    """Run the grid ``args`` asks for (``fastmath bench --peers`` or bench/peers.py;
    with ``--learn``, see _warm.py)."""
    rounds, functions, target = options(args)
    sizes = tuple(int(float(s)) for s in args.sizes.split(",")) if args.sizes else SIZES
    lse = LSE_CASES if "logsumexp" in functions else ()
    if args.sizes and lse:
        lse = tuple(((n,), None) for n in sizes)
    grid = list(cells([f for f in functions if f != "logsumexp"], args.dtypes.split(","),
                      sizes, lse))
    print(f"fastmath bench --peers: median time per call of {rounds} interleaved rounds; "
          f"load average {', '.join(f'{v:.2f}' for v in os.getloadavg())}")
    result = run(grid, rounds=rounds, target=target, forced=getattr(args, "forced", False))
    for path, write in ((args.json, _write_json), (args.plot, plot)):
        if path:
            write(result, path)
            print(f"wrote {path}")
    return 0


def _write_json(result, path):
    import json

    with open(path, "w") as f:
        json.dump(result, f, indent=1)
