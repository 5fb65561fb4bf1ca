"""The registry of fastmath's processes on a machine (dispatch/_runtime.c): processes that
call at once share the cores instead of each splitting over all of them.

Each test runs its processes with a registry of its own (FASTMATH_REGISTRY in tmp_path), so
that nothing else on the machine takes part. Oracle: NumPy's own results, bit for bit; and
the runtime's counts (a split's workers joining it, `stats()["joins"]`), not times.
"""
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

pytest.importorskip("fastmath.dispatch._runtime")
ROOT = Path(__file__).parents[2]
TWO_CPUS = pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs")

# calls exp on 200,000 float64 on the numpy backend (on the runtime, split while it wins)
CALLS = """
    import os, sys, time
    import numpy as np, fastmath
    from fastmath.dispatch import _runtime as R
    x = np.random.default_rng(os.getpid()).random(200_000)
    want = np.exp(x).tobytes()
    def calls(k):
        with fastmath.backend("numpy"):
            for _ in range(k):
                assert fastmath.exp(x).tobytes() == want
"""


def _env(registry, **more):
    return dict(os.environ, PYTHONPATH=str(ROOT), FASTMATH_REGISTRY=str(registry),
                FASTMATH_NUM_THREADS="2", OPENBLAS_NUM_THREADS="1", **more)


def _run(code, env, timeout=120):
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(CALLS) + textwrap.dedent(code)],
                       capture_output=True, text=True, timeout=timeout, env=env, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-3000:]
    return r


@TWO_CPUS
@pytest.mark.parametrize("its_threads", ["2", "1"])
def test_processes_calling_at_once_split_only_their_share(tmp_path, its_threads):
    """Two processes on two cores, each calling exp on 200,000 float64: each splitting over
    both cores took the other's (two processes under the loop mode, 10^5 float64: 0.71-0.88x
    the speed of NumPy in both). While another process calls (on two threads, or on one:
    whole, its core taken all the same), a process's share of its two threads is one:
    nothing splits. Alone again, its calls split."""
    registry, stop = tmp_path / "registry", tmp_path / "stop"
    busy = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(CALLS) + textwrap.dedent(f"""
            calls(5)
            print(R.registry()["slot"], flush=True)
            end = time.monotonic() + 60
            while not os.path.exists({str(stop)!r}) and time.monotonic() < end:
                calls(10)
        """)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=dict(_env(registry), FASTMATH_NUM_THREADS=its_threads), cwd=ROOT)
    try:
        assert busy.stdout.readline().strip() == "0"  # the first slot, the registry new
        beside = _run("""
            calls(5)
            seen, joins = R.registry(), R.stats()["joins"]
            calls(40)
            print(seen["slot"], seen["processes"], R.stats()["joins"] - joins)
        """, _env(registry))
    finally:
        stop.touch()
        out, err = busy.communicate(timeout=120)
    assert busy.returncode == 0, err[-3000:]
    slot, processes, joins = map(int, beside.stdout.split())
    assert slot == 1 and processes == 1
    assert joins == 0  # nothing split beside the other process
    alone = _run("""
        seen, joins = R.registry(), R.stats()["joins"]
        for _ in range(50):  # (a parked worker may wake too late for one call)
            calls(1)
            if R.stats()["joins"] > joins:
                break
        print(R.registry()["slot"], R.registry()["processes"], R.stats()["joins"] - joins)
    """, _env(registry))
    slot, processes, joins = map(int, alone.stdout.split())
    assert slot == 0  # the dead processes' slots are taken again
    assert processes == 0 and joins > 0


def test_a_forked_child_takes_a_slot_of_its_own(tmp_path):
    r = _run("""
        calls(1)
        mine = R.registry()["slot"]
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            calls(1)
            os.write(w, str(R.registry()["slot"]).encode())
            os._exit(0)
        os.waitpid(pid, 0)
        print(mine, os.read(r, 16).decode())
    """, _env(tmp_path / "registry"))
    parent, child = map(int, r.stdout.split())
    assert parent == 0 and child == 1


def test_a_file_that_is_not_the_registry_is_replaced_with_one_warning(tmp_path):
    registry = tmp_path / "registry"
    registry.write_bytes(b"not fastmath's" * 10)
    code = """
        calls(2)
        print(R.registry()["path"], R.registry()["slot"])
    """
    env = _env(registry, PYTHONWARNINGS="default")
    r = _run(code, env)
    warned = [line for line in r.stderr.splitlines() if "RuntimeWarning" in line]
    assert len(warned) == 1, r.stderr
    assert "was not the registry of fastmath's processes; replaced" in warned[0]
    assert warned[0].startswith("<string>:")  # the user's line: their import
    assert r.stdout.split() == [str(registry), "0"]
    assert registry.stat().st_size == 4096
    again = _run(code, env)
    assert "RuntimeWarning" not in again.stderr  # fastmath's registry now


def test_where_no_registry_can_be_had_calls_run_as_before_with_one_warning(tmp_path):
    unusable = tmp_path / "a directory"
    unusable.mkdir()
    r = _run("""
        calls(3)
        print(R.registry()["path"], R.registry()["processes"])
    """, _env(unusable, PYTHONWARNINGS="default"))
    warned = [line for line in r.stderr.splitlines() if "RuntimeWarning" in line]
    assert len(warned) == 1 and "FASTMATH_REGISTRY" in warned[0], r.stderr
    assert r.stdout.split() == ["None", "0"]
    off = _run("""
        calls(1)
        print(R.registry()["path"], R.registry()["why"])
    """, _env("off", PYTHONWARNINGS="default"))
    assert "Warning" not in off.stderr
    assert off.stdout.split() == ["None", "off", "(FASTMATH_REGISTRY=off)"]


def test_a_process_counts_the_calling_processes_that_share_its_cpus_only(tmp_path):
    """Processes pinned to CPUs of their own do not take each other's cores."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        pytest.skip("needs two CPUs")
    registry, stop = tmp_path / "registry", tmp_path / "stop"
    busy = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(f"""
            import os
            os.sched_setaffinity(0, {{{cpus[0]}}})
        """) + textwrap.dedent(CALLS) + textwrap.dedent(f"""
            calls(5)
            print("ready", flush=True)
            end = time.monotonic() + 60
            while not os.path.exists({str(stop)!r}) and time.monotonic() < end:
                calls(10)
        """)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=_env(registry), cwd=ROOT)
    try:
        assert busy.stdout.readline().strip() == "ready"
        elsewhere = _run(f"""
            os.sched_setaffinity(0, {{{cpus[1]}}})
            calls(3)
            a = R.registry()["processes"]
            os.sched_setaffinity(0, {{{cpus[0]}, {cpus[1]}}})
            print(a)
        """, _env(registry))
    finally:
        stop.touch()
        busy.communicate(timeout=120)
    assert elsewhere.stdout.split() == ["0"]


def test_a_process_that_found_every_slot_taken_takes_one_freed_later(tmp_path):
    """Every slot a live process's (pid 1's, written into the file here): a process calling
    finds none, and runs as before; when one is freed, it takes that one while it calls
    (it looks again each second), so the others see it again."""
    registry = tmp_path / "registry"
    page = bytearray(4096)  # the layout of dispatch/_runtime.c's Registry, REG_VERSION 1
    page[0:8] = (0x31306D7274736166).to_bytes(8, "little")  # REG_MAGIC
    for i in range(63):
        page[64 + 64 * i:68 + 64 * i] = (1).to_bytes(4, "little")
    fd = os.open(registry, os.O_CREAT | os.O_WRONLY, 0o600)
    os.write(fd, bytes(page))
    os.close(fd)
    r = _run(f"""
        import mmap
        calls(3)
        full = R.registry()["slot"]
        with open({str(registry)!r}, "r+b") as f:
            m = mmap.mmap(f.fileno(), 4096)
            m[64 + 64 * 7:68 + 64 * 7] = bytes(4)  # slot 7's process ended
            end = time.monotonic() + 10
            while R.registry()["slot"] is None and time.monotonic() < end:
                calls(1)
                time.sleep(0.05)
        print(full, R.registry()["slot"])
    """, _env(registry))
    assert r.stdout.split() == ["None", "7"]
