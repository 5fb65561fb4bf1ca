"""A plain NumPy/SciPy script, as a newcomer would write it: the log-likelihood of a probit
model and its gradient, evaluated for a few candidate coefficient vectors.

Nothing here knows about fastmath. Run it as it is, or with fastmath in place without
changing a line:

    python examples/probit.py                 # NumPy and SciPy
    fastmath run examples/probit.py           # the same file, NumPy/SciPy patched at start-up
    FASTMATH_PATCH=1 python examples/probit.py

It prints the seconds its work took (not counting its own imports and data), the first
step's share of them, and a checksum, which is the same with and without fastmath. bench/ways.py times it every way.
"""
import sys
import time

import numpy as np
from scipy.special import erf, log_ndtr


def loglik_and_grad(X, y, beta):
    z = X @ beta
    s = np.where(y == 1, 1.0, -1.0)
    # Phi(s z) through erf, as many textbook probit codes write it
    p = 0.5 * (1.0 + erf(s * z / np.sqrt(2.0)))
    ll = np.sum(log_ndtr(s * z))
    pdf = np.exp(-0.5 * z * z) / np.sqrt(2.0 * np.pi)
    grad = X.T @ (s * pdf / np.maximum(p, 1e-300))
    return ll, grad


def main(n=1_000_000, d=4, steps=40):
    rng = np.random.default_rng(0)
    X = rng.standard_normal((n, d))
    y = (X @ np.linspace(0.5, -0.5, d) + rng.standard_normal(n) > 0).astype(np.int8)
    betas = [np.linspace(0.5, -0.5, d) * (1 + 0.1 * k) for k in range(steps)]
    t = time.perf_counter()
    total = 0.0
    for k, beta in enumerate(betas):
        ll, grad = loglik_and_grad(X, y, beta)
        total += ll + grad.sum()
        if k == 0:
            first = time.perf_counter() - t
    took = time.perf_counter() - t
    print(f"seconds {took:.4f}")
    print(f"first {first:.4f}")  # the first step: what runs once (imports on first use)
    print(f"checksum {float(total)!r}")


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:]))
