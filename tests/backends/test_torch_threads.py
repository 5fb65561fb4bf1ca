"""When fastmath loads torch, torch's OpenMP workers stay awake from one call to the next
(a worker that sleeps is woken on every call: erf of 10^5 float32 took twice as long) and
go to sleep soon after the last one (a spinning worker holds a core the next call of
fastmath's own pool needs); a user's own OpenMP settings are left as they are."""
import subprocess
import sys

import pytest

import fastmath

from helpers import thread_free_environ

pytestmark = pytest.mark.skipif("torch-cpu" not in fastmath.available_backends(),
                                reason="torch is not installed")

# The threads torch's first call started are its OpenMP workers; "R" in /proc: running or
# waiting for a core (spinning), "S": asleep.
CODE = """
import os, time
import numpy as np
import fastmath


def tids():
    return set(os.listdir("/proc/self/task"))


def state(t):
    try:
        with open(f"/proc/self/task/{t}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "S"


x = np.linspace(-3, 3, 10**5)
before = tids()
with fastmath.backend("torch-cpu"):
    fastmath.erf(x)
    workers = sorted(tids() - before)
    awake = 0
    for _ in range(50):
        fastmath.erf(x)
        awake += any(state(t) == "R" for t in workers)
waited = time.perf_counter()
while any(state(t) == "R" for t in workers) and time.perf_counter() - waited < 1:
    time.sleep(0.01)
import torch
print(torch.get_num_threads(), awake, time.perf_counter() - waited,
      os.environ.get("GOMP_SPINCOUNT"), os.environ.get("OMP_WAIT_POLICY"))
"""

def run(**env):
    base = thread_free_environ()
    r = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True,
                       timeout=300, env={**base, **env})
    assert r.returncode == 0, r.stderr
    threads, awake, asleep_after, spin, policy = r.stdout.split()
    return int(threads), int(awake), float(asleep_after), spin, policy


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_workers_wait_awake_between_calls_and_sleep_after():
    from fastmath.backends import torch as backend

    threads, awake, asleep_after, spin, policy = run()
    if threads > 1:
        assert awake >= 25  # sleeping workers (OMP_WAIT_POLICY=PASSIVE alone): 0 of 50
        assert asleep_after < 1
    assert (spin, policy) == (backend.SPINCOUNT, "PASSIVE")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize("env, expected", [
    ({"OMP_WAIT_POLICY": "ACTIVE"}, ("None", "ACTIVE")),
    ({"GOMP_SPINCOUNT": "123"}, ("123", "PASSIVE")),
])
def test_the_users_own_openmp_settings_are_kept(env, expected):
    assert run(**env)[3:] == expected
