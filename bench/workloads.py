"""Whole NumPy functions: plain NumPy, fastmath per call, fastmath blockwise, numexpr.

Each workload is one unchanged NumPy/SciPy function, timed as:

- ``numpy``: the function itself, in this process, where fastmath's first large output
  has made glibc recycle large blocks (fastmath/dispatch/_alloc.py): faster than in a program
  that never imports fastmath, where each 80 MB temporary is a fresh mmap;
- ``accelerate``: ``@fastmath.accelerate`` (each call inside through fastmath, auto backend);
- ``blockwise``: ``@fastmath.accelerate(elementwise=True)`` (or ``rows=True``) on the numpy
  backend, whose result must be NumPy's, bit for bit;
- ``blockwise-auto``: the same on the auto backend (other kernels may run inside blocks);
- ``numexpr``: the same formula as a numexpr string, where numexpr can express it (it has no
  erf and no reduction along an axis).

Rounds are interleaved (each round times every variant once) and the median is reported,
with the load average, since other processes share the machine. Every result is compared
with the plain call: bit for bit where NumPy's kernels ran, else as the largest difference
relative to the largest magnitude of the result.

``--ceiling`` times, on one thread and on every thread, the function by hand over slices of
``BLOCK`` elements with no fastmath at all (the most blockwise can do with NumPy's own
loops) beside the blocked call: their gap is fastmath's own cost per block.

python bench/workloads.py [--quick] [--rounds 7] [--plot docs/img/blockwise.png]
                          [--block-sweep] [--ceiling] [--foreach] [--only softplus,"gmm e-step"]
python bench/workloads.py --foreach-only [--rounds 5]
"""
import argparse
import itertools
import os
import platform
import threading
import time

import numpy as np
import scipy.special as sc

import fastmath
from fastmath.integrations import _blockwise

SQRT2 = np.sqrt(2.0)


def pdf_cdf(x):
    return np.exp(-0.5 * x * x) / np.sqrt(2 * np.pi) * 0.5 * (1 + sc.erf(x / np.sqrt(2)))


def softplus_ll(x):
    return np.log1p(np.exp(-np.abs(x))) + np.maximum(x, 0) - 0.5 * x * x


def black_scholes(s, k, t, r, v):
    """European call price, the normal CDF written with erf."""
    sqrt_t = np.sqrt(t)
    d1 = (np.log(s / k) + (r + 0.5 * v * v) * t) / (v * sqrt_t)
    d2 = d1 - v * sqrt_t
    cdf1 = 0.5 * (1 + sc.erf(d1 / np.sqrt(2)))
    cdf2 = 0.5 * (1 + sc.erf(d2 / np.sqrt(2)))
    return s * cdf1 - k * np.exp(-r * t) * cdf2


def log_loss(z, y):
    """Per-sample logistic-regression loss of the scores ``z`` against 0/1 labels ``y``."""
    p = sc.expit(z)
    return -(sc.xlogy(y, p) + sc.xlogy(1 - y, 1 - p))


def gmm_estep(x, means, prec_chol, log_weights):
    """Per-sample log-likelihood and log-responsibilities of a Gaussian mixture with full
    covariances given by their precision Cholesky factors (scikit-learn's E-step), one
    component at a time over long vectors, as fast NumPy code is written."""
    n, d = x.shape
    log_det = np.sum(np.log(np.diagonal(prec_chol, axis1=1, axis2=2)), axis=1)
    xt = np.ascontiguousarray(x.T)  # (d, n): every operation below runs along n
    lp = np.empty((n, means.shape[0]))
    for c in range(means.shape[0]):
        diff = xt - means[c][:, None]
        sq = 0.0
        for e in range(d):
            y = np.sum(diff * prec_chol[c, :, e, None], axis=0)
            sq = sq + y * y
        lp[:, c] = -0.5 * (d * np.log(2 * np.pi) + sq) + log_det[c] + log_weights[c]
    total = sc.logsumexp(lp, axis=1)
    return total, lp - total[:, None]


NUMEXPR = {
    "softplus": "log1p(exp(-abs(x))) + where(x > 0, x, 0) - 0.5 * x * x",
    "log-loss": "-(where(y == 0, 0, y * log(1 / (1 + exp(-z))))"
                " + where(y == 1, 0, (1 - y) * log(1 - 1 / (1 + exp(-z)))))",
}


def workloads(n, rng):
    x = rng.standard_normal(n)
    s = rng.uniform(5, 30, n)
    bs = (s, rng.uniform(1, 100, n), rng.uniform(0.25, 10, n), 0.05, rng.uniform(0.1, 0.9, n))
    z = 3 * rng.standard_normal(n)
    y = (rng.uniform(size=n) < sc.expit(z)).astype(np.float64)
    k, dim = 8, 2
    a = rng.standard_normal((k, dim, dim)) * 0.3 + 2 * np.eye(dim)
    prec_chol = np.triu(a)
    gmm = (rng.standard_normal((n // 10, dim)) * 2, rng.standard_normal((k, dim)) * 2,
           prec_chol, np.log(np.full(k, 1 / k)))
    return [("PDF x CDF", pdf_cdf, (x,), "elementwise", None, {}),
            ("softplus", softplus_ll, (x,), "elementwise", NUMEXPR["softplus"], {"x": x}),
            ("Black-Scholes", black_scholes, bs, "elementwise", None, {}),
            ("GMM E-step", gmm_estep, gmm, "rows", None, {}),
            ("log-loss", log_loss, (z, y), "elementwise", NUMEXPR["log-loss"], {"z": z, "y": y})]


def as_tuple(r):
    return r if isinstance(r, tuple) else (r,)


def compare(got, want):
    """'bitwise', or the largest difference relative to the result's largest magnitude."""
    worst = 0.0
    for g, w in zip(as_tuple(got), as_tuple(want)):
        if g.dtype != w.dtype or g.shape != w.shape:
            return "dtype/shape differ"
        if not _blockwise.differ(g, w).any():
            continue
        fin = np.isfinite(w)
        if not np.array_equal(fin, np.isfinite(g)):
            return "inf/nan differ"
        scale = np.max(np.abs(w[fin])) if fin.any() else 1.0
        worst = max(worst, float(np.max(np.abs(g[fin] - w[fin]))) / scale)
    return "bitwise" if worst == 0 else f"{worst:.1e}"


def variants(fn, mode, expr, env):
    out = {"numpy": fn, "accelerate": fastmath.accelerate(fn)}
    declared = fastmath.accelerate(fn, **{mode: True})
    out["blockwise"] = fastmath.backend("numpy")(declared)
    out["blockwise-auto"] = declared
    if expr is not None:
        import numexpr

        numexpr.set_num_threads(fastmath.dispatch._parallel.threads())
        out["numexpr"] = lambda *_: numexpr.evaluate(expr, local_dict=env)
    return out


def measure(fn, args, mode, expr, env, rounds):
    vs = variants(fn, mode, expr, env)
    with np.errstate(all="ignore"):
        want = fn(*args)
        checks = {name: compare(v(*args), want) for name, v in vs.items()}
        times = {name: [] for name in vs}
        for _ in range(rounds):
            for name, v in vs.items():
                t = time.perf_counter()
                v(*args)
                times[name].append(time.perf_counter() - t)
    return {name: (float(np.median(ts)), checks[name]) for name, ts in times.items()}


def interleaved(cases, xs, ys, rounds):
    """Median ms of each case, timed in interleaved rounds, with ``ys`` reset to ``xs``
    before each call (the in-place cases work on ``ys``)."""
    ts = {key: [] for key in cases}
    for _ in range(rounds):
        for key, f in cases.items():
            for y, x in zip(ys, xs):
                y[...] = x
            t = time.perf_counter()
            f()
            ts[key].append(time.perf_counter() - t)
    return {k: 1e3 * float(np.median(v)) for k, v in ts.items()}


def foreach_bench(rounds):
    """fastmath.foreach over 1000 arrays of 1000 float64 against a loop of NumPy calls:
    new results, and in place (``out=`` the inputs, against ``ufunc(x, out=x)``); where
    torch is installed, ``torch._foreach_<name>`` (and ``_``) over ``torch.as_tensor``
    views of the same arrays, for reference, timed after all of fastmath's (torch's
    threads spin for a while after a call, and would hold the core fastmath's pool
    thread needs)."""
    from fastmath import foreach

    rng = np.random.default_rng(0)
    xs = [rng.uniform(0.1, 1, 1000) for _ in range(1000)]
    ys = [x.copy() for x in xs]  # in place over and over: values stay finite below
    print(f"\nforeach: 1000 arrays of 1000 float64, median ms (wall) of {rounds * 5} "
          f"interleaved rounds; {cpu()}, {fastmath.dispatch._parallel.threads()} threads; "
          f"load average before: {load()}")
    names = ("exp", "log1p", "sin")
    loops = {}
    for name in names:
        ufunc, each = getattr(np, name), getattr(foreach, name)
        cases = {
            "loop": lambda: [ufunc(x) for x in xs],  # noqa: E731
            "foreach": lambda: each(xs),  # noqa: E731
            "loop in place": lambda: [ufunc(y, out=y) for y in ys],  # noqa: E731
            "foreach in place": lambda: each(ys, out=ys),  # noqa: E731
        }
        same = all(not _blockwise.differ(a, ufunc(x)).any() for a, x in zip(each(xs), xs))
        ms = loops[name] = interleaved(cases, xs, ys, rounds * 5)
        print(f"  {name:6s} loop {ms['loop']:6.2f}  foreach {ms['foreach']:6.2f}  "
              f"{ms['loop'] / ms['foreach']:4.2f}x  {'bitwise' if same else 'DIFFERENT'};  in "
              f"place: loop {ms['loop in place']:6.2f}  foreach {ms['foreach in place']:6.2f}  "
              f"{ms['loop in place'] / ms['foreach in place']:4.2f}x")
    print(f"load average after: {load()}")
    try:
        import torch
    except ImportError:
        return
    tx, ty = [torch.as_tensor(x) for x in xs], [torch.as_tensor(y) for y in ys]
    print(f"torch {torch.__version__} ({torch.get_num_threads()} threads), against the loops "
          f"above; load average before: {load()}")
    for name in names:
        ufunc, ms = getattr(np, name), loops[name]
        op, op_ = getattr(torch, f"_foreach_{name}"), getattr(torch, f"_foreach_{name}_")
        with torch.inference_mode():
            same = all(not _blockwise.differ(t.numpy(), ufunc(x)).any()
                       for t, x in zip(op(tx), xs))
            ms.update(interleaved({"torch": lambda: op(tx),  # noqa: E731
                                   "torch in place": lambda: op_(ty)},  # noqa: E731
                                  xs, ys, rounds * 5))
        print(f"  {name:6s} torch._foreach_{name} {ms['torch']:6.2f}  "
              f"{ms['loop'] / ms['torch']:4.2f}x  {'bitwise' if same else 'not bitwise'};  "
              f"in place {ms['torch in place']:6.2f}  "
              f"{ms['loop in place'] / ms['torch in place']:4.2f}x")


def cpu():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def load():
    return " ".join(f"{v:.2f}" for v in os.getloadavg())


def block_sweep(items, rounds):
    print("\nblock size sweep (blockwise, numpy backend), median ms")
    saved = _blockwise.BLOCK
    try:
        for name, fn, args, mode, _, _ in items:
            row = []
            for exp in range(12, 19):
                _blockwise.BLOCK = 1 << exp
                f = fastmath.backend("numpy")(fastmath.accelerate(fn, **{mode: True}))
                with np.errstate(all="ignore"):
                    f(*args)
                    ts = []
                    for _ in range(rounds):
                        t = time.perf_counter()
                        f(*args)
                        ts.append(time.perf_counter() - t)
                row.append(f"2^{exp}: {1e3 * np.median(ts):.0f}")
            print(f"  {name:14s} " + "  ".join(row))
    finally:
        _blockwise.BLOCK = saved


def by_hand(fn, args, mode, threads):
    """``fn`` over slices of about ``BLOCK`` elements of its arrays, in ``threads`` plain
    threads sharing a counter, into preallocated outputs: blockwise with nothing of
    fastmath's (only what this bench's workloads need: arrays cut along their first axis)."""
    n = next(a.shape[0] for a in args if isinstance(a, np.ndarray))
    width = max(int(np.prod(a.shape[1:])) for a in args
                if isinstance(a, np.ndarray) and a.shape[0] == n)
    rows = max(1, _blockwise.BLOCK // width if mode == "rows" else _blockwise.BLOCK)

    def call(i):
        part = slice(i * rows, (i + 1) * rows)
        return as_tuple(fn(*(a[part] if isinstance(a, np.ndarray) and a.shape[0] == n
                             else a for a in args)))

    first = call(0)
    outs = [np.empty((n,) + r.shape[1:], r.dtype) for r in first]
    counter, blocks = itertools.count(), -(-n // rows)

    def loop():
        while (i := next(counter)) < blocks:
            for o, r in zip(outs, first if i == 0 else call(i)):
                o[i * rows:(i + 1) * rows] = r

    helpers = [threading.Thread(target=loop) for _ in range(threads - 1)]
    for t in helpers:
        t.start()
    loop()
    for t in helpers:
        t.join()
    return outs[0] if len(outs) == 1 else tuple(outs)


def ceiling(items, rounds):
    """Blockwise against the same blocks by hand, on one thread and on all of them."""
    everyone = fastmath.dispatch._parallel.threads()
    print(f"\nceiling: by hand (NumPy over slices of {_blockwise.BLOCK}, no fastmath) and "
          f"blockwise (numpy backend), 1 and {everyone} threads; median ms wall (CPU time "
          f"of all threads, which a busy machine inflates less), speedup over numpy")
    for name, fn, args, mode, _, _ in items:
        declared = fastmath.backend("numpy")(fastmath.accelerate(fn, **{mode: True}))

        def blockwise(t):
            fastmath.dispatch._config.reload(dict(os.environ, FASTMATH_NUM_THREADS=str(t)))
            try:
                return declared(*args)
            finally:
                fastmath.dispatch._config.reload()

        vs = {"numpy": lambda: fn(*args)}
        for t in sorted({1, everyone}):
            vs[f"hand x{t}"] = lambda t=t: by_hand(fn, args, mode, t)
            vs[f"blockwise x{t}"] = lambda t=t: blockwise(t)
        with np.errstate(all="ignore"):
            want = fn(*args)
            same = all(compare(v(), want) == "bitwise" for v in vs.values())
            times = {k: [] for k in vs}
            cpu = {k: [] for k in vs}
            for _ in range(rounds):
                for k, v in vs.items():
                    t0, c0 = time.perf_counter(), time.process_time()
                    v()
                    times[k].append(time.perf_counter() - t0)
                    cpu[k].append(time.process_time() - c0)
        med = {k: 1e3 * float(np.median(ts)) for k, ts in times.items()}
        used = {k: 1e3 * float(np.median(ts)) for k, ts in cpu.items()}
        print(f"  {name:14s} " + "  ".join(f"{k} {m:.0f} ({used[k]:.0f}) {med['numpy'] / m:.2f}x"
                                          for k, m in med.items())
              + ("" if same else "  NOT BITWISE"))


def plot(results, path, title):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = ["accelerate", "blockwise", "blockwise-auto", "numexpr"]
    fig, ax = plt.subplots(figsize=(9, 4.2))
    width = 0.2
    for i, v in enumerate(names):
        xs, ys = [], []
        for j, (wl, res) in enumerate(results.items()):
            if v in res:
                xs.append(j + (i - 1.5) * width)
                ys.append(res["numpy"][0] / res[v][0])
        bars = ax.bar(xs, ys, width, label=v)
        ax.bar_label(bars, fmt="%.1f", fontsize=7)
    ax.axhline(1, color="black", linewidth=0.8)
    ax.set_xticks(range(len(results)), list(results))
    ax.set_ylabel("speedup over plain NumPy")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    fig.savefig(path, dpi=110)
    print(f"plot written to {path}")


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="10^6 elements, 3 rounds")
    p.add_argument("--size", type=float, default=1e7, help="elements (GMM: a tenth, x 2)")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--only", default=None, help="comma-separated workload names")
    p.add_argument("--plot", default=None, help="write a PNG of the speedups here")
    p.add_argument("--block-sweep", action="store_true", help="time block sizes 2^12..2^18")
    p.add_argument("--ceiling", action="store_true",
                   help="also time the blocks by hand, without fastmath, on 1 and all threads")
    p.add_argument("--foreach", action="store_true", help="also time fastmath.foreach")
    p.add_argument("--foreach-only", action="store_true", help="time fastmath.foreach alone")
    a = p.parse_args()
    if a.foreach_only:
        foreach_bench(a.rounds)
        return
    n, rounds = (10**6, 3) if a.quick else (int(a.size), a.rounds)
    items = workloads(n, np.random.default_rng(0))
    if a.only:
        keep = [s.strip().lower() for s in a.only.split(",")]
        items = [it for it in items if it[0].lower() in keep]
    print(f"{cpu()}, {fastmath.dispatch._parallel.threads()} "
          f"threads, numpy {np.__version__}; n = {n:.0e}, median of {rounds} interleaved "
          f"rounds; load average before: {load()}")
    results = {}
    for name, fn, args, mode, expr, env in items:
        res = measure(fn, args, mode, expr, env, rounds)
        results[name] = res
        base = res["numpy"][0]
        print(f"\n{name} ({mode})")
        for v, (t, check) in res.items():
            print(f"  {v:15s} {1e3 * t:8.1f} ms  {base / t:5.2f}x  {check}")
    print(f"\nload average after: {load()}")
    if a.foreach:
        foreach_bench(rounds)
    if a.block_sweep:
        block_sweep(items, max(3, rounds // 2))
    if a.ceiling:
        ceiling(items, rounds)
    if a.plot:
        plot(results, a.plot, f"{cpu()}, {fastmath.dispatch._parallel.threads()} threads; n = {n:.0e} "
                              f"float64 (GMM: n/10 x 2); load average {load()}")


if __name__ == "__main__":
    main()
