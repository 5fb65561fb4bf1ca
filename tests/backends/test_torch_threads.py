"""When fastmath loads torch, it sets GNU OpenMP's wait to a short spin (GOMP_SPINCOUNT) and
then sleep (OMP_WAIT_POLICY=PASSIVE): torch's workers stay awake from one call to the next
(a worker that sleeps is woken on every call: erf of 10^5 float32 took twice as long) and
go to sleep soon after the last one (a spinning worker holds a core the next call of
fastmath's own pool needs); a user's own OpenMP settings are left as they are.

How often the workers are seen awake between calls depends on how soon the next call
comes, that is, on the load of the machine: that figure is bench/torch_threads.py's. The
tests check the settings, and that the workers do go to sleep after the last call (under
OMP_WAIT_POLICY=ACTIVE they spin for 30 billion turns, far longer than WAIT below)."""
import subprocess
import sys

import numpy as np
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


x = np.linspace(0, 3, 10**5)
before = tids()
with fastmath.backend("torch-cpu"):
    fastmath.exp2(x)  # torch's own loop, on its OpenMP threads
    workers = sorted(tids() - before)
    for _ in range(50):
        fastmath.exp2(x)
deadline = time.monotonic() + float(os.environ["WAIT"])
while any(state(t) == "R" for t in workers) and time.monotonic() < deadline:
    time.sleep(0.01)
import torch
print(torch.get_num_threads(), all(state(t) != "R" for t in workers),
      os.environ.get("GOMP_SPINCOUNT"), os.environ.get("OMP_WAIT_POLICY"))
"""
# Seconds the workers may take to go to sleep after the last call: a spin of fastmath's
# takes a fraction of a millisecond of a core, which a loaded machine grants within this.
WAIT = 10


def run(wait=0, **env):
    base = thread_free_environ()
    r = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True,
                       timeout=300, env={**base, **env, "WAIT": str(wait)})
    assert r.returncode == 0, r.stderr
    threads, asleep, spin, policy = r.stdout.split()
    return int(threads), asleep == "True", spin, policy


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_workers_spin_briefly_between_calls_and_sleep_after():
    from fastmath.backends import torch as backend

    threads, asleep, spin, policy = run(wait=WAIT)
    assert (spin, policy) == (backend.SPINCOUNT, "PASSIVE")
    if threads > 1:
        assert asleep


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize("env, expected", [
    ({"OMP_WAIT_POLICY": "ACTIVE"}, ("None", "ACTIVE")),
    ({"GOMP_SPINCOUNT": "123"}, ("123", "PASSIVE")),
])
def test_the_users_own_openmp_settings_are_kept(env, expected):
    assert run(**env)[2:] == expected


@pytest.mark.parametrize("count, policy, spins", [
    (None, None, 300_000),        # libgomp's default where neither is set
    (None, "PASSIVE", 0),
    (None, "active", None),       # 3e10 spins: for good, not a brief spin
    ("5000", "PASSIVE", 5000),    # GOMP_SPINCOUNT wins over the policy
    ("5000", "ACTIVE", 5000),
    (" 10k ", None, 10_000),      # libgomp's suffixes: k, M, G, T
    ("2M", None, None),           # 2e6 spins: past 10 ms
    ("infinite", None, None),
    ("12x", None, None),          # malformed
])
def test_the_spin_is_read_from_the_settings_as_gnu_openmp_reads_them(count, policy, spins):
    from fastmath.backends import torch as backend

    pause = 1e-8
    got = backend.spin_seconds(count, policy, pause)
    assert got == (0.0 if spins is None else pytest.approx(spins * pause))


def test_a_call_torchs_threads_shared_announces_their_spin_to_the_runtime(monkeypatch):
    """After a call torch's threads took part in, they spin a while: the native runtime is
    told (foreign()), and does not judge a split begun meanwhile (its loss says nothing of
    its kernel: dispatch/_runtime.c); auto's learning does not count such a call. exp2:
    torch's own loop on its threads (exp's is its VML's, log1p's SLEEF's, both run on
    fastmath's runtime)."""
    import time

    from fastmath.backends import torch as backend
    from fastmath.dispatch import _runtime
    from helpers import FakeClock

    with fastmath.backend("torch-cpu"):
        fastmath.exp2(np.ones(10**5))  # torch loaded, its spin set from its settings
    monkeypatch.setattr(backend, "_spin", 0.5)
    wall = FakeClock()  # the runtime's clocks, moved by the test alone
    _runtime._set_clock(wall, FakeClock())
    try:
        # past any spin announced on the real clock (CLOCK_MONOTONIC, as the runtime's)
        wall.advance(time.monotonic() + 10.0)
        with fastmath.backend("torch-cpu"):
            fastmath.exp2(np.ones(backend.GRAIN))  # too small for its threads: nothing said
            assert _runtime.foreign_left() == 0.0
            fastmath.exp2(np.ones(10**5))
            assert _runtime.foreign_left() == pytest.approx(0.5)
    finally:
        _runtime._set_clock(None, None)


def test_the_spin_announced_is_the_one_gnu_openmp_took():
    from fastmath.backends import torch as backend

    code = ("import numpy as np, fastmath\n"
            "from fastmath.backends import torch as t\n"
            "from fastmath.dispatch import _runtime as r\n"
            "with fastmath.backend('torch-cpu'): fastmath.exp(np.ones(10))\n"
            "print(t._spin / r.pause_seconds())")
    for env, spins in (({}, int(backend.SPINCOUNT)), ({"OMP_WAIT_POLICY": "ACTIVE"}, 0)):
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           timeout=300, env={**thread_free_environ(), **env})
        assert r.returncode == 0, r.stderr
        assert float(r.stdout) == pytest.approx(spins)
