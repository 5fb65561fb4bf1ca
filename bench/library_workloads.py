"""Library workloads, plain vs fastmath.patch() vs the loop mode.

    python bench/library_workloads.py [--quick] [--rounds N] [--only NAME ...] [--ceiling]

Each workload is code fastmath does not own (pandas, xarray, scipy.stats, scikit-learn,
statsmodels) run three ways in the same process, in interleaved rounds: plain NumPy/SciPy,
under ``fastmath.patch()`` (fastmath's functions swapped in) and under
``fastmath.patch(mode="loops")`` (NumPy's own loops split over threads). For each it prints
the median times (the modes take turns to run first in a round), the median of the
rounds' speed-ups against plain, whether the results are bitwise equal to plain (or
their largest relative difference), and what fastmath ran: the fastmath functions called
(functions mode) and the loops split (loop mode), counted on one extra untimed run.
Report ``uptime``'s load average with any figure. fastmath is imported before NumPy, as
``fastmath run`` and FASTMATH_PATCH load it, so OpenBLAS's threads spin 2^24 cycles after a
call (docs/backends.md), in every column alike.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import warnings
from collections import Counter

# fastmath first, as `fastmath run` and FASTMATH_PATCH load it: before NumPy loads OpenBLAS
# (OPENBLAS_THREAD_TIMEOUT, docs/backends.md)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import fastmath  # noqa: E402
from fastmath.dispatch import _parallel  # noqa: E402
from fastmath.integrations import _loopmode  # noqa: E402
from fastmath.frontends._ufunc import Ufunc  # noqa: E402

import numpy as np  # noqa: E402

warnings.filterwarnings("ignore")  # convergence chatter from the fits: the same in every mode


def workloads(quick: bool):
    """name -> (setup() -> state, run(state) -> result array or tuple of arrays)."""
    n = 10**6 if quick else 10**7
    rows = 20_000 if quick else 200_000
    glm_rows = 50_000 if quick else 500_000
    rng = np.random.default_rng(0)
    out = {}

    def series():
        import pandas as pd
        return pd.Series(rng.standard_normal(n))
    out["np.exp(series)"] = (series, lambda s: np.exp(s).to_numpy())

    def dataarray():
        import xarray as xr
        return xr.DataArray(rng.standard_normal(n), dims="x")
    out["np.exp(dataarray)"] = (dataarray, lambda d: np.exp(d).values)

    def stats_input():
        import scipy.stats
        return scipy.stats, rng.standard_normal(n) * 2
    for method in ("cdf", "logcdf", "logpdf"):
        out[f"norm.{method}"] = (stats_input,
                                 lambda s, m=method: getattr(s[0].norm, m)(s[1]))

    def poisson_input():
        import scipy.stats
        return scipy.stats, rng.poisson(5.0, n).astype(np.float64)
    out["poisson.logpmf"] = (poisson_input, lambda s: s[0].poisson.logpmf(s[1], 5.0))

    def gmm_input():
        from sklearn.mixture import GaussianMixture
        centers = rng.standard_normal((8, 4)) * 4
        x = centers[rng.integers(0, 8, rows)] + rng.standard_normal((rows, 4))
        return GaussianMixture, x

    def gmm_fit(s):
        model = s[0](n_components=8, max_iter=20, tol=0, random_state=0).fit(s[1])
        return model.means_, model.covariances_, model.weights_
    out["GaussianMixture.fit"] = (gmm_input, gmm_fit)

    def logistic_input():
        from sklearn.linear_model import LogisticRegression
        from sklearn.metrics import log_loss
        x = rng.standard_normal((rows, 20))
        y = (x[:, :3] @ rng.standard_normal((3, 5))).argmax(axis=1)
        model = LogisticRegression(max_iter=200).fit(x[:5000], y[:5000])
        return model, log_loss, x, y

    def logistic_run(s):
        p = s[0].predict_proba(s[2])
        return p, np.array(s[1](s[3], p))
    out["LogisticRegression predict_proba+log_loss"] = (logistic_input, logistic_run)

    def mlp_input():
        from sklearn.neural_network import MLPClassifier
        x = rng.standard_normal((rows, 20))
        y = (x[:, 0] + x[:, 1] ** 2 > 1).astype(int)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model = MLPClassifier((64, 64), activation="logistic", max_iter=20,
                                  random_state=0).fit(x[:5000], y[:5000])
        return model, x
    out["MLPClassifier(logistic).predict_proba"] = (mlp_input,
                                                    lambda s: s[0].predict_proba(s[1]))

    def glm_input():
        import statsmodels.api as sm
        x = sm.add_constant(rng.standard_normal((glm_rows, 5)))
        y = (rng.random(glm_rows) < 1 / (1 + np.exp(-x @ np.linspace(-1, 1, 6)))).astype(float)
        return sm, x, y
    out["statsmodels Logit.fit"] = (
        glm_input, lambda s: s[0].Logit(s[2], s[1]).fit(disp=0).params)
    out["statsmodels GLM(Binomial).fit"] = (
        glm_input, lambda s: s[0].GLM(s[2], s[1], family=s[0].families.Binomial()).fit().params)
    return out


MODES = {"plain": None, "patch()": "functions", "loops": "loops"}


def _timed(fn, state, mode):
    if mode is None:
        t = time.perf_counter()
        result = fn(state)
        return time.perf_counter() - t, result
    with fastmath.patch(mode=mode):
        t = time.perf_counter()
        result = fn(state)
        return time.perf_counter() - t, result


def _arrays(result):
    return [np.asarray(r) for r in (result if isinstance(result, tuple) else (result,))]


def _compare(a, b) -> str:
    a, b = _arrays(a), _arrays(b)
    if all(x.tobytes() == y.tobytes() for x, y in zip(a, b)):
        return "bitwise"
    rel = max(float(np.nanmax(np.abs(x - y) / np.maximum(np.abs(x), 1e-300)))
              for x, y in zip(a, b))
    return f"max rel {rel:.1e}"


def _what_ran(fn, state, mode) -> str:
    """One untimed run, counting what fastmath ran."""
    if mode == "loops":
        before, paced_before = _loopmode.counts(), _loopmode.paced()
        with fastmath.patch(mode="loops"):
            fn(state)
        after, paced = _loopmode.counts(), _loopmode.paced()
        split = Counter()
        whole = Counter()
        for k, v in after.items():
            split[k.split()[0]] += v[1] - before.get(k, (0, 0))[1]
        for k, v in paced.items():  # long enough to split, kept whole by the back-off
            whole[k.split()[0]] += v - paced_before.get(k, 0)
        reached = split + whole
        most = sorted(reached.items(), key=lambda kv: -kv[1])[:10]
        return ", ".join(f"{k} x{v}" + (f" ({whole[k]} whole)" if whole[k] else "")
                         for k, v in most) or "no loop long enough to split"
    seen = Counter()

    def profile(frame, event, arg):
        if event == "call" and frame.f_code is Ufunc._run.__code__:
            seen[frame.f_locals["self"].__name__] += 1

    with fastmath.patch():
        sys.setprofile(profile)
        try:
            fn(state)
        finally:
            sys.setprofile(None)
    return ", ".join(f"{k} x{v}" for k, v in seen.most_common(6)) or "no fastmath function"


def _loop_share(fn, state) -> float:
    """The share of a run of ``fn`` spent in the loops the loop mode installs, every run
    left whole (median of 3): the part of the workload it can speed up at all."""
    shares = []
    with fastmath.patch(mode="loops"):
        splitting, timing = _loopmode.splitting(False), _loopmode.time_whole(True)
        try:
            for _ in range(3):
                _loopmode.whole_time()
                t = time.perf_counter()
                fn(state)
                wall = time.perf_counter() - t
                shares.append(min(1.0, _loopmode.whole_time() / wall))
        finally:
            _loopmode.time_whole(timing)
            _loopmode.splitting(splitting)
    return statistics.median(shares)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="smaller sizes (a minute or so)")
    p.add_argument("--rounds", type=int, default=5, help="interleaved rounds (default 5)")
    p.add_argument("--only", nargs="*", help="run only workloads whose name contains these")
    p.add_argument("--ceiling", action="store_true",
                   help="also the loop mode's ceiling: the share of each workload's time "
                        "spent in the ufunc loops it can split, run whole (3 runs, median), "
                        "and the speed-up if that share ran on every thread with no "
                        "overhead (its reductions along rows and np.place are outside it)")
    args = p.parse_args(argv)
    if not _loopmode.available():
        print(f"loop mode unavailable: {_loopmode.why_unavailable()}")
        MODES.pop("loops")
    print(f"load average {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f}, "
          f"{len(os.sched_getaffinity(0))} cores, numpy {np.__version__}")
    for name, (setup, fn) in workloads(args.quick).items():
        if args.only and not any(o in name for o in args.only):
            continue
        try:
            state = setup()
        except ImportError as e:
            print(f"{name}: skipped ({e})")
            continue
        times = {m: [] for m in MODES}
        results = {}
        for mode in MODES.values():  # warm-up: imports, first-touch, thread start
            _timed(fn, state, mode)
        order = list(MODES.items())
        for r in range(args.rounds):  # each mode takes each place in the round in turn
            for label, mode in order[r % len(order):] + order[:r % len(order)]:
                t, results[label] = _timed(fn, state, mode)
                times[label].append(t)
        base = statistics.median(times["plain"])
        print(f"\n{name}: plain {base * 1e3:.1f} ms")
        for label, mode in list(MODES.items())[1:]:
            med = statistics.median(times[label])
            # the speed-up of each round (plain's time over this mode's, run side by side),
            # median of them: steadier than a ratio of medians when the machine's speed
            # drifts over the run (a whole statsmodels fit moved by 10-30% here)
            ratio = statistics.median(p / t for p, t in zip(times["plain"], times[label]))
            print(f"  {label:8s} {med * 1e3:8.1f} ms  {ratio:5.2f}x  "
                  f"{_compare(results['plain'], results[label]):16s} "
                  f"ran: {_what_ran(fn, state, mode)}")
        if args.ceiling and "loops" in MODES:
            share = _loop_share(fn, state)
            n = _parallel.threads()
            print(f"  ceiling           {1 / (1 - share + share / n):5.2f}x  "
                  f"(NumPy's loops the loop mode takes: {share:.0%} of the run, "
                  f"{n} threads)")
    print(f"\nload average {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
