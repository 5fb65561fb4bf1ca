"""Calibration (and ``fastmath bench``, which times the same way) starts each column only
once the threads torch's column left behind have stopped computing, so a column is never
timed with one core held by another library's waiting threads.

What is checked is the order of events: after each batch of torch's column the process
waits to be quiet (``_peers.quiesce``) before the next batch starts; each backend's timed
batch follows an untimed one of its own (its threads woken and placed, as in a program's
calls one after another). Whether quiesce tells a
computing thread from a quiet one is tests/tools/test_peers.py's business, on made-up
clocks: measured here, on the real ones, the answer would follow the load of the machine."""
import numpy as np
import pytest

import fastmath
from fastmath.tools import _bench, _calibrate, _peers

pytestmark = pytest.mark.skipif("torch-cpu" not in fastmath.available_backends(),
                                reason="torch is not installed")


def test_column_after_torch_starts_when_its_threads_are_quiet(monkeypatch):
    events = []
    timer = _bench._timer

    def watched(fn, arg, kwargs, target):
        once = timer(fn, arg, kwargs, target)

        def batch():
            events.append(fastmath.get_backend())  # the column's scope ("auto": reference)
            return once()
        return batch

    def quiesce(limit=_peers.LIMIT):
        events.append("quiet")
        return 0.0
    monkeypatch.setattr(_bench, "_timer", watched)
    monkeypatch.setattr(_peers, "quiesce", quiesce)
    _calibrate.measure(["erf"], ["float32"], [10**5], ["torch-cpu", "numpy"], rounds=3)
    rounds = len(events) // 6
    assert rounds >= 3 and events == ["auto", "torch-cpu", "torch-cpu", "quiet", "numpy",
                                      "numpy"] * rounds, events


def test_a_backends_batch_is_timed_after_an_untimed_one(monkeypatch):
    """The batch of a backend that follows others' batches (its threads parked, waking
    now and then on the caller's CPU) is not the one timed: torch's erf of 16384 float64
    elements took 300 us a call in such batches on a 2-vCPU VM, 28 us one batch later."""
    batches = {}
    timer = _bench._timer

    def first_slow(fn, arg, kwargs, target):
        once = timer(fn, arg, kwargs, target)

        def batch():
            scope = fastmath.get_backend()
            batches[scope] = batches.get(scope, 0) + 1
            t = once()
            return 1.0 if scope != "auto" and batches[scope] % 2 else t
        return batch
    monkeypatch.setattr(_bench, "_timer", first_slow)
    monkeypatch.setattr(_peers, "quiesce", lambda limit=_peers.LIMIT: 0.0)
    samples = _bench.timed_rounds("erf", _bench._input("erf", 10**4, "float32", np.random.default_rng(0)),
                                  {}, ["reference", "torch-cpu", "numpy"], 3)
    assert all(len(v) == 3 for v in samples.values())
    assert max(samples["torch-cpu"] + samples["numpy"]) < 0.5, samples


def test_confidence_is_the_share_of_rounds_the_choice_won():
    cell = {"sizes": [1000, 100000],
            "times": {"reference": [1.0, 10.0], "mkl": [2.0, 4.0], "torch-cpu": [3.0, 5.0]}}
    rounds = [{"reference": [1.0, 1.1, 0.9], "mkl": [2.0, 2.1, 1.9], "torch-cpu": [3] * 3},
              {"reference": [10.0] * 3, "mkl": [4.0, 6.0, 4.0], "torch-cpu": [5.0] * 3}]
    conf = _calibrate.confidence(cell, rounds)
    assert conf[0] == ["reference", "mkl", 2.0, 1.0]
    assert conf[1][:3] == ["mkl", "torch-cpu", 1.25] and conf[1][3] == pytest.approx(2 / 3)
    cell["confidence"] = conf
    assert _calibrate._confidence_line(cell) == "confidence 0.67 (n=100000)"
