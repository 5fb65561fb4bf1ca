"""Gaussian-mixture log-likelihood over N points on a Dask cluster: fastmath against plain Dask.

One E-step of EM for a K-component diagonal Gaussian mixture in D dimensions: for every
point x the log-density of each component, log w_k + log N(x | mu_k, var_k); the point's
log-likelihood logsumexp over the component axis; its responsibilities exp(. - that).
The same graph is built twice on the same LocalCluster, once with fastmath's exp/log/
logsumexp and once with NumPy's exp and scipy.special.logsumexp per chunk, and both are
timed and compared.

    python examples/dask_gmm.py                       # N = 5e6, 2 workers: under a minute
    python examples/dask_gmm.py --n 10**8             # the larger run, a few minutes

Each step prints as it goes (cluster started, points drawn, each timed run), so a long
run shows where it is.

Each worker process runs one Dask thread; fastmath's numpy backend splits each chunk over
the cores left to that worker (FASTMATH_NUM_THREADS = cores // workers), so the workers
together never ask for more threads than there are cores.
"""
from __future__ import annotations

import argparse
import logging
import os
import time

import numpy as np
import scipy.special

import fastmath


def component_logpdf(x, means, variances, weights, log):
    """(n, K) array of log(w_k) + log N(x | mu_k, diag(var_k)) for (n, D) points x."""
    log_norm = log(weights) - 0.5 * log(2 * np.pi * variances).sum(axis=1)
    q = (((x[:, None, :] - means) ** 2) / variances).sum(axis=2)
    return log_norm - 0.5 * q


def e_step(x, params, exp, log, logsumexp):
    """Total log-likelihood and the soft counts N_k = sum over points of p(k | x)."""
    comp = component_logpdf(x, *params, log=log)
    ll = logsumexp(comp, axis=1)
    return ll.sum(), exp(comp - ll[:, None]).sum(axis=0)


def plain_logsumexp(comp, axis):
    # the component axis is one chunk: SciPy's logsumexp runs on each block of rows
    return comp.map_blocks(scipy.special.logsumexp, axis=axis, drop_axis=axis,
                           dtype=comp.dtype)


VARIANTS = {
    "fastmath": dict(exp=fastmath.exp, log=fastmath.log, logsumexp=fastmath.logsumexp),
    "dask+numpy": dict(exp=np.exp, log=np.log, logsumexp=plain_logsumexp),
}


def mixture(k, d, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.uniform(-5, 5, (k, d)), rng.uniform(0.5, 2.0, (k, d)),
            rng.dirichlet(np.ones(k)))


def _say(*args):
    print(*args, flush=True)


def run(client, n, k=8, d=2, chunk=250_000, repeat=2, say=_say):
    """{variant: (best seconds, log-likelihood, soft counts)} for n points."""
    import dask
    import dask.array as da
    from distributed import wait

    params = mixture(k, d)
    x = da.random.default_rng(1).standard_normal((n, d), chunks=(chunk, d)) * 3
    t0 = time.perf_counter()
    x = x.persist()
    wait(x)
    say(f"drew {n:.3g} points into the workers in {time.perf_counter() - t0:.1f} s")
    results = {}
    for name, funcs in VARIANTS.items():
        dask.compute(*e_step(x[:chunk], params, **funcs))  # warm the workers up
        best = np.inf
        for i in range(repeat):
            t0 = time.perf_counter()
            ll, counts = dask.compute(*e_step(x, params, **funcs))
            best = min(best, time.perf_counter() - t0)
            say(f"  {name:<12} run {i + 1}/{repeat}: {time.perf_counter() - t0:.2f} s")
        results[name] = (best, float(ll), counts)
    return results


def cluster(workers, threads_per_worker=1):
    from distributed import LocalCluster

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    per_worker = max(1, cores // (workers * threads_per_worker))
    return LocalCluster(n_workers=workers, threads_per_worker=threads_per_worker,
                        processes=True, host="127.0.0.1", dashboard_address=None,
                        silence_logs=logging.ERROR,
                        env={"FASTMATH_NUM_THREADS": str(per_worker)})


def _count(text):
    """'10**8', '1e8' or '100_000_000'."""
    base, _, power = text.partition("**")
    return int(base) ** int(power) if power else int(float(text))


def main(argv=None):
    from distributed import Client

    p = argparse.ArgumentParser(description=__doc__.partition("\n")[0])
    p.add_argument("--n", type=_count, default=5 * 10**6,
                   help="points (default 5e6, under a minute on 2 cores)")
    p.add_argument("--workers", type=int, default=2, help="worker processes (default 2)")
    p.add_argument("--components", type=int, default=8)
    p.add_argument("--dims", type=int, default=2)
    p.add_argument("--chunk", type=int, default=250_000, help="points per chunk")
    p.add_argument("--repeat", type=int, default=2, help="timed runs each; the best counts")
    args = p.parse_args(argv)

    t0 = time.perf_counter()
    with cluster(args.workers) as c, Client(c) as client:
        _say(f"started {args.workers} Dask workers in {time.perf_counter() - t0:.1f} s")
        res = run(client, args.n, args.components, args.dims, args.chunk, args.repeat)
    (t_fm, ll_fm, n_fm), (t_np, ll_np, n_np) = res["fastmath"], res["dask+numpy"]
    print(f"N={args.n:.3g} K={args.components} D={args.dims} workers={args.workers} "
          f"chunk={args.chunk}")
    print(f"  fastmath     {t_fm:8.3f} s   log-likelihood {ll_fm:.17g}")
    print(f"  dask+numpy   {t_np:8.3f} s   log-likelihood {ll_np:.17g}")
    print(f"  speedup {t_np / t_fm:.2f}x; relative difference: log-likelihood "
          f"{abs(ll_fm - ll_np) / abs(ll_np):.1e}, soft counts "
          f"{np.max(np.abs(n_fm - n_np) / n_np):.1e}")
    return res


if __name__ == "__main__":
    main()
