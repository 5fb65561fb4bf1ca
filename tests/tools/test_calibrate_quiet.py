"""Calibration (and ``fastmath bench``, which times the same way) starts each column only
once the threads torch's column left behind have stopped computing, so a column is never
timed with one core held by another library's waiting threads.

What is checked is the order of events: after each batch of torch's column the process
waits to be quiet (``_peers.quiesce``) before the next batch starts. Whether quiesce tells a
computing thread from a quiet one is tests/tools/test_peers.py's business, on made-up
clocks: measured here, on the real ones, the answer would follow the load of the machine."""
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
    rounds = len(events) // 4
    assert rounds >= 3 and events == ["auto", "torch-cpu", "quiet", "numpy"] * rounds, events


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
