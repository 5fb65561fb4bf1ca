"""auto's learning (dispatch/_learn.py): its decisions on a fake clock, its store, its modes."""
import json
import os
import sys
import threading
import time
import warnings

import numpy as np
import pytest

import fastmath
from fastmath._registry import BY_NAME
from fastmath.dispatch import _calibration, _config, _learn, _selection
from helpers import FakeClock, assert_same

N = 1 << 16  # a size auto learns at (class 8: 32768-131071 elements)
RUN = _learn.RUN  # a backend's turn: calls in a row, the first not counted


def cycles(k, backends):
    """Calls for ``k`` turns of every arm: the reference's one call, each backend's run."""
    return k * (1 + RUN * backends)


@pytest.fixture
def learn(tmp_path, monkeypatch):
    """Learning on, its store in a fresh folder, a fake clock; back to fixed after."""
    monkeypatch.setenv("FASTMATH_AUTO", "learn")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv("FASTMATH_CALIBRATION", raising=False)
    (tmp_path / "fastmath").mkdir()
    clock = FakeClock()
    monkeypatch.setattr(_learn, "clock", clock)
    _config.reload()
    yield clock
    monkeypatch.delenv("FASTMATH_AUTO")
    monkeypatch.undo()
    _config.reload()


class Arms:
    """Stand-in for _selection.arms: each arm's kernel computes the reference's result
    and moves the fake clock on by the arm's cost."""

    def __init__(self, clock, costs, baseline="reference", deferred=(), guess="reference",
                 source="defaults"):
        self.clock, self.costs, self.baseline = clock, dict(costs), baseline
        self.deferred, self.ran = list(deferred), []
        self.guess = lambda spec, dtype, size: (guess, source)

    def kernel(self, arm, spec):
        ref = spec.reference()

        def k(x, out):
            self.ran.append(arm)
            self.clock.advance(self.costs[arm])
            ref(x, out=out)
        return k

    def __call__(self, spec, dtype):
        return self.baseline, {a: ((a, self.kernel(a, spec)),) for a in self.costs
                               if a not in self.deferred}, self.deferred

    def build(self, spec, dtype, arm):
        return ((arm, self.kernel(arm, spec)),)

    def script(self, arm, costs):
        """``arm``'s calls take ``costs`` (seconds) in turn, then the last of them."""
        costs, real = iter(costs), self.kernel

        def kernel(name, spec):
            k = real(name, spec)
            if name != arm:
                return k

            def scripted(x, out):
                self.costs[arm] = next(costs, self.costs[arm])
                return k(x, out)
            return scripted
        self.kernel = kernel


    def following(self, arm, cost):
        """``arm``'s calls take ``cost(previous)`` seconds, ``previous`` the arm whose call
        ran just before (None: none yet)."""
        real = self.kernel

        def kernel(name, spec):
            k = real(name, spec)
            if name != arm:
                return k

            def timed(x, out):
                self.costs[arm] = cost(self.ran[-1] if self.ran else None)
                return k(x, out)
            return timed
        self.kernel = kernel

    def mark(self, arm, **attributes):
        """``arm``'s kernel has these attributes (``runtime_pace``: it splits on the native
        runtime under that pacing record; ``runtime_entry``: it runs NumPy's own loops
        there, as the numpy backend's kernels do)."""
        real = self.kernel

        def kernel(name, spec):
            k = real(name, spec)
            if name == arm:
                for key, value in attributes.items():
                    setattr(k, key, value)
            return k
        self.kernel = kernel


def run(arms, calls, name="exp", n=N, dtype="float64"):
    """``calls`` calls of fastmath.<name> through auto's plan with ``arms``; the last chain."""
    spec = BY_NAME[name]
    x = np.linspace(0.1, 1, n).astype(dtype)
    out = np.empty_like(x)
    key = (name, dtype, _learn.size_class(n), 0)
    chain = None
    for _ in range(calls):
        s = _learn.settled.get(key)
        if s is not None:
            s.left -= 1
        chain = s.chain if s is not None and s.left > 0 else _learn.choose(key, spec, dtype,
                                                                           n, arms)
        if chain:
            chain[0][1](x, out)
    return chain


def settled_on(name="exp", n=N, dtype="float64"):
    s = _learn.settled.get((name, dtype, _learn.size_class(n), 0))
    return None if s is None else (s.chain[0][0] if s.chain else "reference")


def test_arms_are_tried_in_turn_and_the_fastest_settles(learn):
    arms = Arms(learn, {"reference": 10e-6, "numpy": 9e-6, "fast": 7e-6})
    run(arms, cycles(1, 2))
    # interleaved: the reference's call, then each backend's run of calls in a row
    assert arms.ran == ["reference"] + ["numpy"] * RUN + ["fast"] * RUN
    run(arms, cycles(_learn.SAMPLES, 2) - cycles(1, 2) - 1)
    assert settled_on() is None  # each backend counted one call a turn (not the first)
    run(arms, 1)
    assert settled_on() == "fast"
    cell = _learn.cells["exp", "float64", _learn.size_class(N), 0]
    assert cell.medians == pytest.approx({"reference": 10e-6, "numpy": 9e-6, "fast": 7e-6})
    before = len(arms.ran)
    run(arms, 100)
    assert set(arms.ran[before:]) == {"fast"}  # settled: no arm is timed any more


def test_an_arm_slower_than_the_reference_is_dropped_at_once(learn):
    arms = Arms(learn, {"reference": 10e-6, "slow": 11e-6, "fast": 5e-6})
    run(arms, 60)
    # two turns: two counted calls in a row slower than the reference, never again
    assert arms.ran.count("slow") == _learn.STRIKES * RUN
    assert settled_on() == "fast"


def test_one_slow_call_does_not_drop_an_arm(learn):
    """A scheduler's hiccup, or the runtime's timed whole run, makes one call slow: the
    arm stays, and its median decides."""
    arms = Arms(learn, {"reference": 10e-6, "fast": 5e-6})
    arms.script("fast", [5e-6, 25e-6] + [5e-6] * 100)  # its warm-up, then one slow counted call
    run(arms, 60)
    assert settled_on() == "fast"


def test_a_backend_with_some_whole_runs_is_judged_by_its_typical_time(learn):
    """The numpy backend runs some calls whole (to time the kernel, or for a while after
    a split that lost): two of them in a row do not drop it while its typical time is
    the reference's better."""
    arms = Arms(learn, {"reference": 10e-6, "paced": 5e-6})
    # each turn's first call (30 us) is not counted; the counted ones: 5, 12, 12, 5, 5 us
    arms.script("paced", [30e-6, 5e-6, 30e-6, 12e-6, 30e-6, 12e-6] + [30e-6, 5e-6] * 50)
    run(arms, 60)
    assert settled_on() == "paced"


def test_a_runs_first_call_is_not_counted(learn):
    """A backend's pool parks while other arms run: the first call of each of its turns
    pays the wake-up and is not counted, the next ones (as a settled cell runs) are."""
    arms = Arms(learn, {"reference": 10e-6, "pooled": 6e-6})

    arms.following("pooled", lambda previous: 6e-6 if previous == "pooled" else 30e-6)
    run(arms, 60)
    assert settled_on() == "pooled"
    cell = _learn.cells["exp", "float64", _learn.size_class(N), 0]
    assert cell.medians["pooled"] == pytest.approx(6e-6)


def test_an_arm_far_behind_the_leader_is_dropped_the_reference_too(learn):
    arms = Arms(learn, {"reference": 100e-6, "numpy": 50e-6, "fast": 10e-6})
    run(arms, 40)
    assert settled_on() == "fast"
    # the leader's warm-up and two calls; each other arm runs until then
    assert arms.ran.count("reference") <= 4 and arms.ran.count("numpy") <= 4


def test_the_nearest_class_learned_prunes(learn):
    arms = Arms(learn, {"reference": 10e-6, "numpy": 4e-6, "loser": 9e-6})
    run(arms, 40)
    assert settled_on() == "numpy" and arms.ran.count("loser") > 1
    arms.ran.clear()
    big = 1 << 18  # two classes up
    run(arms, cycles(_learn.SAMPLES, 1), n=big)
    assert "loser" not in arms.ran  # 2.25x behind in the nearest class learned
    assert settled_on(n=big) == "numpy"


def test_an_arm_that_sat_out_in_the_nearest_class_sits_out_further_up(learn):
    """mkl's and numexpr's log1p and expm1 lost at 10^5 elements, sat out at 10^6 (so
    had no time there) and, tried at 10^7, were 6-8x slower than the numpy backend: 0.24 s
    of a warm-up. An arm that sat out in the nearest class learned sits out too, until
    the first revisit."""
    arms = Arms(learn, {"reference": 10e-6, "numpy": 4e-6, "loser": 9e-6})
    run(arms, 40)
    assert settled_on() == "numpy"
    middle, big = 1 << 18, 1 << 22  # two classes up, and two more
    run(arms, 40, n=middle)
    arms.ran.clear()
    run(arms, 40, n=big)
    assert "loser" not in arms.ran and settled_on(n=big) == "numpy"
    cell = _learn.cells["exp", "float64", _learn.size_class(big), 0]
    run(arms, cell.interval + 20, n=big)
    assert "loser" in arms.ran and settled_on(n=big) == "numpy"  # its revisit


def test_a_reference_far_behind_in_the_nearest_class_sits_out(learn):
    """SciPy's erf at 10^7 elements takes 0.2 s, ten times VML's: where the reference lost
    by BASELINE_NEARBY times in the nearest class learned, a new class starts without it
    (the fastest arm wins) and tries it again at its first revisit."""
    arms = Arms(learn, {"reference": 100e-6, "fast": 10e-6, "close": 12e-6})
    run(arms, 60)
    assert settled_on() == "fast" and "reference" in arms.ran
    arms.ran.clear()
    big = 1 << 18  # two classes up
    run(arms, 60, n=big)
    assert "reference" not in arms.ran and settled_on(n=big) == "fast"
    cell = _learn.cells["exp", "float64", _learn.size_class(big), 0]
    run(arms, cell.interval + 10, n=big)
    assert "reference" in arms.ran and settled_on(n=big) == "fast"  # its revisit


def test_where_calls_will_be_long_the_nearest_ranking_is_trusted_further(learn):
    """Where the calls of a new class will take LONG seconds (the winner's time in the
    nearest class, scaled to the sizes), every arm that lost there by NEARBY_LONG sits out
    (at 10^7 elements the reference's calls and torch's, ranked 1.5x and 2x behind at
    10^6, were most of a warm-up's excess); where they will be short, it takes NEARBY."""
    small = 1 << 16
    arms = Arms(learn, {"reference": 1.5e-4, "numpy": 1e-4, "torch": 1.4e-4})
    run(arms, 60, n=small)
    assert settled_on(n=small) == "numpy"
    arms.ran.clear()
    for a in arms.costs:
        arms.costs[a] *= 16  # two classes up: 1.6 ms for the winner
    run(arms, 30, n=small << 4)
    assert set(arms.ran) == {"numpy"} and settled_on(n=small << 4) == "numpy"
    _learn._reset()
    arms = Arms(learn, {"reference": 1.5e-6, "numpy": 1e-6, "torch": 1.4e-6})
    run(arms, 60, n=small)
    arms.ran.clear()
    run(arms, 60, n=small << 4)  # 16 us: all are tried
    assert set(arms.ran) == {"reference", "numpy", "torch"}


def test_numpys_own_loops_on_the_runtime_never_sit_out(learn, monkeypatch):
    """The numpy backend's calls cost the reference's time at worst (its runtime runs a
    call whole while splits lose): nothing is saved by leaving it out of a new class, and
    one class's noise (it lost by 2x where a second core was taken) kept it out of the
    classes above, where it was 1.5-1.9x faster."""
    monkeypatch.setattr(_learn, "_resume", lambda pace, n: None)
    arms = Arms(learn, {"reference": 10e-6, "numpy": 25e-6})
    arms.mark("numpy", runtime_pace=7, runtime_entry=lambda: ((), 7, 0))
    run(arms, 60)
    assert settled_on() == "reference"
    arms.ran.clear()
    arms.costs["numpy"] = 5e-6
    run(arms, 60, n=1 << 18)
    assert "numpy" in arms.ran and settled_on(n=1 << 18) == "numpy"


def test_numpys_own_loops_are_not_dropped_on_one_slow_call(learn, monkeypatch):
    """Their first counted call of a learning met a worker that took a millisecond to
    wake (expm1 of 10^5 float32 elements: 169 us once, 22 us after; the reference 38
    us): FAR behind on one call dropped them, and they sat out the revisits as far
    behind. They are dropped only once timed BEHIND_AFTER times, and never sit out."""
    monkeypatch.setattr(_learn, "_resume", lambda pace, n: None)
    arms = Arms(learn, {"reference": 38e-6, "numpy": 22e-6, "mkl": 30e-6})
    arms.script("numpy", [22e-6, 169e-6, 22e-6])  # warm-up, a slow first counted call
    arms.mark("numpy", runtime_pace=7, runtime_entry=lambda: ((), 7, 0))
    run(arms, 80)
    assert settled_on() == "numpy"
    # slow for a whole learning, far behind: tried again at the next revisit all the same
    n = 1 << 18
    arms.costs.update(numpy=169e-6, reference=100e-6, mkl=80e-6)
    run(arms, 80, n=n)
    assert settled_on(n=n) == "mkl"
    arms.costs["numpy"] = 40e-6
    _revisit(n=n)
    arms.ran.clear()
    run(arms, 80, n=n)
    assert "numpy" in arms.ran and settled_on(n=n) == "numpy"


def test_an_arm_is_not_dropped_on_one_slow_call_while_it_warms_up(learn, monkeypatch):
    """A kernel's first calls warm up (torch-cpu's exp of 10^5 float64: 174 and 81 us in
    its second and third calls, 25 after): one counted call of 311 us against the numpy
    backend's 42 dropped torch-cpu from a learning, which then kept the numpy backend."""
    monkeypatch.setattr(_learn, "_resume", lambda pace, n: None)
    arms = Arms(learn, {"reference": 75e-6, "numpy": 42e-6, "torch-cpu": 27e-6})
    arms.script("torch-cpu", [1300e-6, 311e-6, 27e-6])  # its first call, its first counted
    arms.mark("numpy", runtime_pace=7, runtime_entry=lambda: ((), 7, 0))
    run(arms, 80)
    assert settled_on() == "torch-cpu"


def test_an_arm_that_beat_the_reference_once_is_sampled_further(learn, monkeypatch):
    """Its other calls of the learning slow (the second vCPU of a VM slow for a
    millisecond after the process slept): before the reference wins, the arm left that
    beat it by the margin in a call is timed up to MOST times."""
    monkeypatch.setattr(_learn, "_resume", lambda pace, n: None)
    arms = Arms(learn, {"reference": 10e-6, "numpy": 5e-6})
    # its runs' first calls (not counted) and its counted calls: 20, 9, 20, 20, 20 us
    arms.script("numpy", [20e-6] * 3 + [9e-6] + [20e-6] * 6 + [5e-6])
    arms.mark("numpy", runtime_pace=7, runtime_entry=lambda: ((), 7, 0))
    run(arms, 60)
    assert settled_on() == "numpy"


def test_a_reference_close_in_the_nearest_class_is_tried(learn):
    arms = Arms(learn, {"reference": 15e-6, "fast": 10e-6})
    run(arms, 60)
    assert settled_on() == "fast"
    arms.ran.clear()
    run(arms, 3, n=1 << 18)
    assert arms.ran[0] == "reference"


def test_long_calls_settle_on_fewer_samples_a_call_a_turn(learn):
    """Where the reference takes LONG seconds a pool's wake-up is small beside a call:
    after its warm-up a backend's every call counts."""
    arms = Arms(learn, {"reference": 2e-3, "fast": 1.6e-3})
    run(arms, 2 * _learn.LONG_SAMPLES + 1)
    assert settled_on() == "fast"
    assert arms.ran.count("fast") == _learn.LONG_SAMPLES + 1


def test_long_calls_of_a_runtime_kernel_still_open_each_turn(learn, monkeypatch):
    """The native runtime's workers are parked before each of the reference's calls, and
    waking them takes up to a millisecond on a VM: even where calls are long, a runtime
    kernel's turn is RUN calls and its first is not counted (the numpy backend's one
    counted call a turn, each after a wake-up, ran at the reference's speed at 10^6)."""
    monkeypatch.setattr(_learn, "_resume", lambda pace, n: None)
    arms = Arms(learn, {"reference": 2e-3, "numpy": 1e-3})
    arms.script("numpy", [2.2e-3, 1e-3] * 100)  # each turn's first call wakes its workers
    arms.mark("numpy", runtime_pace=7)
    run(arms, 3 * (1 + RUN))
    assert arms.ran == (["reference"] + ["numpy"] * RUN) * 3
    run(arms, 30)
    assert settled_on() == "numpy"
    cell = _learn.cells["exp", "float64", _learn.size_class(N), 0]
    assert cell.medians["numpy"] == pytest.approx(1e-3)


def test_a_hopeless_arm_costs_two_calls(learn):
    arms = Arms(learn, {"reference": 10e-6, "awful": 1e-3})
    run(arms, 30)
    assert arms.ran.count("awful") == RUN  # its warm-up, and one call far behind
    assert settled_on() == "reference"


def test_an_arm_that_declines_or_fails_is_dropped(learn):
    arms = Arms(learn, {"reference": 10e-6, "declines": 1e-6, "fails": 1e-6, "fast": 4e-6})
    real = arms.kernel

    def kernel(arm, spec):
        k = real(arm, spec)
        if arm == "declines":
            return lambda x, out: (k(x, out), NotImplemented)[1]
        if arm == "fails":
            return lambda x, out: (k(x, out), 1 / 0)
        return k
    arms.kernel = kernel
    for _ in range(40):
        try:
            run(arms, 1)
        except ZeroDivisionError:
            pass  # the chain's next kernel would take the call
    assert arms.ran.count("declines") == arms.ran.count("fails") == 1
    assert settled_on() == "fast"


def test_within_the_margin_the_reference_stays(learn):
    arms = Arms(learn, {"reference": 10e-6, "close": 10e-6 / (1 + _learn.MARGIN / 2)})
    run(arms, 2 * (_learn.MOST + 1))
    assert settled_on() == "reference"


@pytest.mark.parametrize("behind, wins", [(1 + _learn.TIE / 2, True),
                                          (1 + 2 * _learn.TIE, False)])
def test_a_tie_goes_to_numpys_own_loops_on_the_runtime(learn, monkeypatch, behind, wins):
    """The numpy backend costs the reference's time at worst (its runtime runs a call whole
    while splits lose) and its pacing follows a busy core call by call: within TIE of the
    reference it wins (cells learned while a second core was taken for milliseconds had
    settled on the reference at half the numpy backend's speed); further behind, not."""
    monkeypatch.setattr(_learn, "_resume", lambda pace, n: None)
    arms = Arms(learn, {"reference": 10e-6, "numpy": 10e-6 * behind, "other": 10e-6})
    arms.mark("numpy", runtime_pace=7, runtime_entry=lambda: ((), 7, 0))
    run(arms, 4 * (_learn.MOST + 1))
    assert settled_on() == ("numpy" if wins else "reference")


def test_numpys_own_loops_are_not_dropped_on_the_references_first_call(learn, monkeypatch):
    """An arm slower than the reference after two counted calls is dropped at once, but
    not NumPy's own loops on the runtime (their worst is the reference's time): the
    reference's first call, a lucky 49 us against its later 61-83 us, beat the numpy
    backend's two (51, 54 us), and log1p float32 at 10^5 elements settled on the
    reference, 1.2x slower. Another arm is still dropped so."""
    monkeypatch.setattr(_learn, "_resume", lambda pace, n: None)
    arms = Arms(learn, {"reference": 62e-6, "numpy": 52e-6, "other": 52e-6})
    arms.mark("numpy", runtime_pace=7, runtime_entry=lambda: ((), 7, 0))
    arms.script("reference", [49e-6, 62e-6])
    run(arms, 60)
    assert settled_on() == "numpy"
    assert arms.ran.count("other") == _learn.STRIKES * RUN  # its turns' first not counted


def test_a_close_win_takes_more_samples_before_it_counts(learn):
    ratio = 1 + 1.5 * _learn.MARGIN  # beyond the margin, within twice it
    arms = Arms(learn, {"reference": 10e-6, "better": 10e-6 / ratio})
    run(arms, cycles(_learn.SAMPLES, 1))
    assert settled_on() is None  # not yet: noise could have made it
    run(arms, cycles(_learn.MOST, 1))
    assert settled_on() == "better"


def test_noise_cannot_fake_a_winner(learn):
    """One lucky call of an arm that is really slower does not make it the choice."""
    arms = Arms(learn, {"reference": 10e-6, "other": 10e-6})
    # its turn's first call is not counted; the first counted one is lucky
    arms.script("other", [12e-6, 1e-6] + [12e-6] * 100)
    run(arms, 40)
    assert settled_on() == "reference"


def test_the_pool_rests_before_each_call_off_the_runtime(learn, monkeypatch):
    """Each arm is timed as it runs settled: the runtime's spinning workers are parked
    before each call of the reference and of a backend off the runtime (on a machine with
    a core taken, one spinning made the reference's calls up to 3x slower, and a backend
    won), not before a call of a kernel on it."""
    arms = Arms(learn, {"reference": 10e-6, "numpy": 8e-6, "other": 9e-6})
    arms.mark("numpy", runtime_pace=7)
    rests = []
    monkeypatch.setattr(_learn, "_rest", lambda: rests.append(arms.ran[-1:]))
    monkeypatch.setattr(_learn, "_resume", lambda pace, n: None)
    run(arms, cycles(3, 2))
    assert arms.ran == (["reference"] + ["numpy"] * RUN + ["other"] * RUN) * 3
    # before each call of the reference (after other's) and of other (after numpy's, other's)
    assert rests == ([[]] + [["numpy"]] + [["other"]] * (RUN - 1) + (
        [["other"]] + [["numpy"]] + [["other"]] * (RUN - 1)) * 2)


def test_a_runtime_kernels_pause_ends_before_each_of_its_timed_calls(learn, monkeypatch):
    """A backend on the native runtime is timed as it runs when its splits pay: a pause
    after a lost split (one lost beside another arm's spinning threads kept every later
    call of the learning whole) ends before each of its calls."""
    arms = Arms(learn, {"reference": 10e-6, "numpy": 8e-6})
    arms.mark("numpy", runtime_pace=7)
    resumed, rests = [], []
    monkeypatch.setattr(_learn, "_resume", lambda pace, n: resumed.append((pace, n)))
    monkeypatch.setattr(_learn, "_rest", lambda: rests.append(len(arms.ran)))
    run(arms, cycles(3, 1) + 2 * (RUN - 1))
    assert arms.ran == ["reference"] + ["numpy"] * RUN + (
        ["reference"] * RUN + ["numpy"] * RUN) * 2  # (see the next test)
    assert resumed == [(7, N)] * (3 * RUN)
    # before the reference's calls only
    assert rests == [0] + [k for k in range(1 + RUN, len(arms.ran))
                           if arms.ran[k] == "reference"]


def test_the_references_first_call_after_split_calls_is_not_counted(learn, monkeypatch):
    """A short call of the reference right after calls split over the cores (a runtime
    kernel's run, or at a revisit the settled numpy backend's) reads half of its input
    from the other core's cache: NumPy's log on 10^4 float32 elements took 17-28 us so at
    every revisit against 5 us, and with one core busy the reference lost every revisit.
    That call opens its run and is not counted."""
    arms = Arms(learn, {"reference": 10e-6, "numpy": 12e-6})
    arms.mark("numpy", runtime_pace=7, runtime_entry=lambda: ((), 7, 0))
    monkeypatch.setattr(_learn, "_resume", lambda pace, n: None)
    arms.following("reference", lambda previous: 30e-6 if previous == "numpy" else 10e-6)
    run(arms, 80)
    assert settled_on() == "reference"
    cell = _learn.cells["exp", "float64", _learn.size_class(N), 0]
    assert cell.medians["reference"] == pytest.approx(10e-6)


@pytest.mark.parametrize("cause", ["foreign", "late"])
def test_calls_short_of_threads_are_not_counted(learn, monkeypatch, cause):
    """A runtime kernel's call begun short of threads is slow for want of cores, not of its
    own: not counted. ``foreign``: another library's threads still spin after their own
    call (torch's OpenMP workers, announced by the runtime's foreign(); the numpy
    backend's splits right after torch's calls took 1.5x their time and the reference
    won). ``late``: a worker woken by the run's first call had not run yet (the runtime's
    late() counts such splits). SPARED such calls in a row and SPARE_FOR seconds at
    most: threads that spin for good, or a core that is taken, are the machine's state."""
    arms = Arms(learn, {"reference": 10e-6, "numpy": 5e-6})
    monkeypatch.setattr(_learn, "_resume", lambda pace, n: None)
    short, late = [], [0]
    monkeypatch.setattr(_learn, "_foreign_left",
                        lambda: 1e-4 if short and cause == "foreign" else 0.0)
    monkeypatch.setattr(_learn, "_late", lambda: late[0])
    real = arms.kernel

    def kernel(name, spec):  # while short of threads, the runtime kernel takes 4x its time
        k = real(name, spec)
        if name != "numpy":
            return k

        def slowed(x, out):
            arms.costs["numpy"] = 20e-6 if short else 5e-6
            if short and cause == "late":
                late[0] += 1
            return k(x, out)
        return slowed
    arms.kernel = kernel
    arms.mark("numpy", runtime_pace=7)
    short.append(True)
    run(arms, cycles(2, 1))
    short.clear()
    run(arms, 100)
    assert settled_on() == "numpy"
    cell = _learn.cells["exp", "float64", _learn.size_class(N), 0]
    assert cell.medians["numpy"] == pytest.approx(5e-6)
    # short for good: SPARED calls in a row, for SPARE_FOR seconds, are left, then
    # one counts
    _learn._reset()
    arms.costs["numpy"] = 20e-6
    short.append(True)
    run(arms, 60 + 6 * int(_learn.SPARE_FOR[1] / 20e-6))
    assert settled_on() == "reference"


def _on_runtime(arms, monkeypatch, numpy_call, reference_call=None):
    """The numpy arm on the native runtime, with a fake late() (the runtime's count of
    splits short of threads): ``numpy_call(late)`` runs before each of its calls (it may
    add to ``late[0]`` and set its cost), ``reference_call()`` before the reference's."""
    monkeypatch.setattr(_learn, "_resume", lambda pace, n: None)
    monkeypatch.setattr(_learn, "_foreign_left", lambda: 0.0)
    late = [0]
    monkeypatch.setattr(_learn, "_late", lambda: late[0])
    real = arms.kernel

    def kernel(name, spec):
        k = real(name, spec)
        before = {"numpy": lambda: numpy_call(late), "reference": reference_call}.get(name)
        if before is None:
            return k

        def call(x, out):
            before()
            return k(x, out)
        return call
    arms.kernel = kernel
    arms.mark("numpy", runtime_pace=7)


def test_short_calls_wait_for_their_threads_for_fewer_calls(learn, monkeypatch):
    """A turn short of threads goes on for SPARE_CALLS calls' time, within SPARE_FOR: with
    a core busy for good, 20 ms of calls short of threads at 10^4 elements each turn made
    auto 0.93-0.96x NumPy in bench/busy.py."""
    arms = Arms(learn, {"reference": 5e-6, "numpy": 6e-6})

    def short(late):  # every split short of threads (a core taken for good)
        late[0] += 1
    _on_runtime(arms, monkeypatch, short)
    run(arms, 20000)
    assert settled_on() == "reference"
    # a turn's calls: SPARE_FOR[0] of them (the clock reads add a little), not SPARE_FOR[1]
    assert arms.ran.count("numpy") < 12 * _learn.SPARE_FOR[0] / 6e-6


def test_the_call_after_calls_short_of_threads_is_not_counted(learn, monkeypatch):
    """After a stall of a VM's other vCPU (its worker waited runnable 8-20 ms), the first
    split with the worker back took 2-2.5x its time, not short of threads by the
    runtime's measure (a worker preempted holding a piece holds the call up): it is not
    counted either, and the run goes on."""
    arms = Arms(learn, {"reference": 10e-6, "numpy": 5e-6})
    since = [0]  # the numpy backend's calls since the reference's

    def split(late):  # two calls short of threads, one slow, then 5 us
        since[0] += 1
        late[0] += since[0] <= 2
        arms.costs["numpy"] = 20e-6 if since[0] <= 3 else 5e-6
    _on_runtime(arms, monkeypatch, split, lambda: since.__setitem__(0, 0))
    run(arms, 200)
    assert settled_on() == "numpy"
    cell = _learn.cells["exp", "float64", _learn.size_class(N), 0]
    assert cell.medians["numpy"] == pytest.approx(5e-6)


def test_a_runtime_kernels_run_goes_on_until_its_threads_come(learn, monkeypatch):
    """Before each of the reference's calls the runtime's workers park; the numpy backend's
    next run wakes them, and on a VM a parked worker takes up to a millisecond to run. At
    10^4 elements (calls of 5-10 us) a run of RUN calls ended before it came: every call
    of the numpy backend began short of threads, its third in a row ran whole and was
    counted, and cells where it was 1.2x faster settled on the reference (log float64
    10^4, bench/peers.py --learn). The run goes on, its calls not counted, until the
    worker has come."""
    arms = Arms(learn, {"reference": 9e-6, "numpy": 5e-6})
    woken = [None]  # when a call woke the worker (the reference's parks it)

    def split(late):  # the worker comes 500 us after a call woke it
        if woken[0] is None:
            woken[0] = learn()
        waking = learn() - woken[0] < 500e-6
        late[0] += waking
        arms.costs["numpy"] = 9.5e-6 if waking else 5e-6  # whole, or split
    _on_runtime(arms, monkeypatch, split, lambda: woken.__setitem__(0, None))
    run(arms, 2000)
    assert settled_on() == "numpy"
    cell = _learn.cells["exp", "float64", _learn.size_class(N), 0]
    assert cell.medians["numpy"] == pytest.approx(5e-6)


@pytest.mark.parametrize("n", [N, 1 << 22])
def test_calls_that_map_fresh_memory_are_not_counted(learn, monkeypatch, n):
    """A call whose output is memory the heap has just grown by maps it as it writes: a
    page fault a page, paid once in a program (outputs are recycled), not the kernel's
    cost. On a VM the numpy backend's second call at 10^7 elements took 0.14 s (623
    faults) against 6-8 ms, the arm was dropped at once as far behind, and the cell
    settled on torch at half the speed. SPARED such calls in a row at most: a kernel that
    maps memory on every call pays it on every call."""
    arms = Arms(learn, {"reference": 10e-6, "fast": 4e-6})
    mapped = [0]
    monkeypatch.setattr(_learn, "faults", lambda: mapped[0], raising=False)
    real = arms.kernel
    fresh = []  # the fast arm's calls that map fresh memory, in turn

    def kernel(name, spec):
        k = real(name, spec)
        if name != "fast":
            return k

        def mapping(x, out):
            faulting = fresh.pop(0) if fresh else False
            arms.costs["fast"] = 400e-6 if faulting else 4e-6
            mapped[0] += 600 if faulting else 1  # (a stray fault or so is no sign)
            return k(x, out)
        return mapping
    arms.kernel = kernel
    fresh.extend([False, True])  # its run's first call, then one that maps its output
    run(arms, 100, n=n)
    assert settled_on(n=n) == "fast"
    cell = _learn.cells["exp", "float64", _learn.size_class(n), 0]
    assert cell.medians["fast"] == pytest.approx(4e-6)
    # every call maps fresh memory: SPARED in a row are left, then one counts
    _learn._reset()
    fresh.extend([True] * 1000)
    run(arms, 100, n=n)
    assert settled_on(n=n) == "reference"
    # below FAULTS_FROM a call's faults are not read (two reads cost 1.6 us)
    _learn._reset()
    small = 1 << (2 * _learn.FAULTS_FROM - 2)
    fresh[:] = [False, True]
    run(arms, 100, n=small)
    assert settled_on(n=small) == "reference"


def test_slow_first_calls_of_the_reference_do_not_make_a_winner(learn):
    """Noise only adds time, often to more than one call in five (a cold cache, a CPU
    clocking up after a pause): an arm's typical time is the lower quartile of its calls,
    and a backend really slower than the reference loses even to a reference whose first
    two calls were slow."""
    arms = Arms(learn, {"reference": 10e-6, "numpy": 12e-6})
    arms.script("reference", [25e-6] * 2 + [10e-6] * 100)
    run(arms, 60)
    assert settled_on() == "reference"


def test_arms_far_behind_are_retried_at_one_revisit_in_four(learn):
    """Each arm tried at a revisit costs a few calls even when it loses at once: those
    that lost by NEARBY times sit out RETRY_FAR - 1 revisits of every RETRY_FAR."""
    arms = Arms(learn, {"reference": 10e-6, "fast": 4e-6, "far": 30e-6})
    run(arms, 60)
    assert settled_on() == "fast" and "far" in arms.ran
    cell = _learn.cells["exp", "float64", _learn.size_class(N), 0]
    tried = []
    for _ in range(2 * _learn.RETRY_FAR):
        arms.ran.clear()
        run(arms, cell.interval + 30)  # to the revisit, and settled again
        assert settled_on() == "fast"
        tried.append("far" in arms.ran)
    assert tried == ([False] * (_learn.RETRY_FAR - 1) + [True]) * 2


def test_a_settled_cell_is_revisited_and_relearns_a_change(learn):
    arms = Arms(learn, {"reference": 10e-6, "fast": 4e-6})
    run(arms, cycles(_learn.SAMPLES, 1))
    assert settled_on() == "fast"
    cell = _learn.cells["exp", "float64", _learn.size_class(N), 0]
    assert cell.interval == _learn.REVISIT
    arms.costs["fast"] = 20e-6  # the machine changed (a busy core, battery)
    run(arms, _learn.REVISIT + 2 * _learn.SAMPLES + 4)
    assert settled_on() == "reference"
    assert cell.interval == _learn.REVISIT


def test_revisits_grow_apart_while_the_choice_holds(learn):
    arms = Arms(learn, {"reference": 10e-6, "fast": 4e-6})
    run(arms, cycles(_learn.SAMPLES, 1))
    cell = _learn.cells["exp", "float64", _learn.size_class(N), 0]
    ran = len(arms.ran)
    run(arms, _learn.REVISIT + 2 * _learn.SAMPLES + 2)
    assert cell.interval == 2 * _learn.REVISIT and settled_on() == "fast"
    # the revisit cost a few calls of the reference, far behind: no relearning
    assert arms.ran[ran:].count("reference") == _learn.BEHIND_AFTER


def test_an_unimported_library_waits_until_the_work_pays_for_it(learn):
    arms = Arms(learn, {"reference": 10e-3, "costly": 1e-3}, deferred=["costly"])
    run(arms, 2 * _learn.SAMPLES)
    assert "costly" not in arms.ran and settled_on() == "reference"
    # a revisit once the cell has done DEFER seconds of work admits it
    calls = 0
    while "costly" not in arms.ran and calls < 100_000:
        run(arms, 1000)
        calls += 1000
    assert _learn.cells["exp", "float64", _learn.size_class(N), 0].work >= _learn.DEFER
    assert calls * 10e-3 < 2 * _learn.DEFER + _learn.REVISIT_MOST * 10e-3
    run(arms, 3 * _learn.SAMPLES)
    assert settled_on() == "costly"


def test_a_calibration_run_is_the_start_and_says_so(learn, caplog):
    arms = Arms(learn, {"reference": 10e-6, "fast": 4e-6}, guess="fast", source="/c.json")
    with caplog.at_level("INFO", logger="fastmath"):
        run(arms, 5)
    assert [r.getMessage() for r in caplog.records] == [
        "auto starts exp(float64) at 32768-131071 elements on fast (calibration run (/c.json))"]
    assert arms.ran == ["fast"] * 5  # no learning until its revisit
    cell = _learn.cells["exp", "float64", _learn.size_class(N), 0]
    assert cell.source == "calibration run (/c.json)"


def test_the_built_in_guess_is_learned_over(learn):
    arms = Arms(learn, {"reference": 10e-6, "fast": 4e-6}, guess="fast")
    run(arms, 2)
    assert arms.ran == ["reference", "fast"]


# --- through fastmath's own calls ---------------------------------------------------------

def test_fastmath_calls_learn_and_explain_says_so(learn, monkeypatch):
    arms = Arms(learn, {"reference": 10e-6, "numpy": 3e-6})
    monkeypatch.setattr(_selection, "arms", arms)
    x = np.linspace(0.1, 1, N)
    assert "not learned yet" in fastmath.explain(np.exp, x).how
    for _ in range(60):  # (a call that maps fresh output memory is not counted)
        assert_same(fastmath.exp(x), np.exp(x))
        if _learn.settled:
            break
    e = fastmath.explain(np.exp, x)
    assert e.backend == "numpy" and e.how == "learned here", e
    assert "measured on this machine" in str(e)
    assert fastmath.info()["settings"]["learned"]["value"] == str(_learn.path())
    # at a revisit the choice runs on once learned again: explain names it (it named
    # the table's guess, the reference, and `fastmath bench` reported that auto ran it)
    _revisit()
    fastmath.exp(x)
    e = fastmath.explain(np.exp, x)
    assert e.learned["state"] == "learning" and e.backend == "numpy", e
    assert "learning again now" in e.how and "measured on this machine" in str(e)


def test_logsumexp_learns_past_its_compiled_path_and_explain_says_so(learn, monkeypatch):
    """logsumexp's compiled path answers finite input up to FAST_MAX elements in one
    thread and learns nothing; past it the plan learns, and explain() said "guessed"
    there after the cell had settled."""
    import scipy.special

    from fastmath.backends._lse import FAST_MAX

    monkeypatch.setattr(_learn, "clock", time.perf_counter)  # the real kernels, timed
    big = np.linspace(-3, 1, 4 * FAST_MAX)
    assert "not learned yet" in fastmath.explain(scipy.special.logsumexp, big).how
    for _ in range(200):
        assert_same(fastmath.logsumexp(big), scipy.special.logsumexp(big), ulps=8)
        if _learn.settled:
            break
    e = fastmath.explain(scipy.special.logsumexp, big)
    assert e.how == "learned here", e
    small = big[:FAST_MAX]
    for _ in range(20):
        assert_same(fastmath.logsumexp(small), scipy.special.logsumexp(small), ulps=8)
    how = fastmath.explain(scipy.special.logsumexp, small).how
    assert "learn" not in how, how


def test_learning_is_logged_at_info(learn, monkeypatch, caplog):
    arms = Arms(learn, {"reference": 10e-6, "numpy": 3e-6})
    monkeypatch.setattr(_selection, "arms", arms)
    x = np.linspace(0.1, 1, N)
    with caplog.at_level("INFO", logger="fastmath"):
        for _ in range(20):
            fastmath.exp(x)
    said = [r.getMessage() for r in caplog.records if "auto learned" in r.getMessage()]
    assert len(said) == 1 and "exp(float64)" in said[0] and ": numpy (" in said[0]
    table = [r.getMessage() for r in caplog.records if "auto's table" in r.getMessage()]
    assert table == ["auto's table for exp(float64): guessed (the built-in defaults, measured "
                     "on another machine); learned on this program's calls from 4096 elements"]


def _revisit(name="exp", n=N, dtype="float64"):
    """The next call of this cell learns again (its settled calls are used up)."""
    _learn.settled[name, dtype, _learn.size_class(n), 0].left = 0


def test_a_size_class_learned_as_the_reference_takes_the_fast_path(learn, monkeypatch):
    """Once the reference has won a class at two learnings in a row, for every dtype:
    one learning may meet a passing disturbance, and calls below the floor are never
    revisited."""
    arms = Arms(learn, {"reference": 1e-6, "numpy": 3e-6})
    monkeypatch.setattr(_selection, "arms", arms)
    spec, n = BY_NAME["exp"], _learn.LEARN_FROM
    x64 = np.linspace(0.1, 1, n)
    assert _selection.small_size(spec) <= n
    for _ in range(20):
        fastmath.exp(x64)
    assert settled_on(n=n) == "reference"
    assert _selection.small_size(spec) <= n and _selection.small_sizes(spec) == {}
    _revisit(n=n)
    for _ in range(20):
        fastmath.exp(x64)
    assert settled_on(n=n) == "reference"
    # float64's calls take the fast path from now on; float32, not met yet, learns its
    # own from LEARN_FROM up (not the table's first backend row for it, measured on
    # another machine, nor float64's choice)
    assert _selection.small_size(spec) <= n
    assert _selection.small_sizes(spec) == {np.dtype(np.float64): 1 << 13}
    x32 = x64.astype(np.float32)
    for revisit in (False, True):
        if revisit:
            _revisit(n=n, dtype="float32")
        for _ in range(20):
            fastmath.exp(x32)
        assert settled_on(n=n, dtype="float32") == "reference"
    assert _selection.small_size(spec) == 1 << 13 and _selection.small_sizes(spec) == {}


def test_a_class_the_reference_won_once_is_revisited(learn, monkeypatch):
    """Every arm on the runtime slow at the first learning (the second vCPU of a VM slow
    for milliseconds after the process slept): the class settles on the reference, is
    revisited as any settled class is, and then runs the backend. Before, the floor
    passed it at once and its calls took the fast path to the reference for good."""
    arms = Arms(learn, {"reference": 10e-6, "numpy": 20e-6})
    monkeypatch.setattr(_selection, "arms", arms)
    x = np.linspace(0.1, 1, N)
    for _ in range(30):
        fastmath.exp(x)
    assert settled_on() == "reference"
    assert _selection.small_size(BY_NAME["exp"]) <= N
    arms.costs["numpy"] = 5e-6  # the disturbance has passed
    for _ in range(_learn.REVISIT + 30):
        fastmath.exp(x)
    assert settled_on() == "numpy"


def test_a_dtype_learned_as_the_reference_takes_the_fast_path_alone(learn, monkeypatch):
    """float32 may learn the reference where float64 gains from a backend: float32's
    calls of that size class then take the front end's fast path (the C one too), which
    costs a tenth of the way through the learned table, while float64's keep its choice."""
    by_dtype = {"float64": Arms(learn, {"reference": 10e-6, "numpy": 3e-6}),
                "float32": Arms(learn, {"reference": 3e-6, "numpy": 10e-6})}

    class Both:
        def __call__(self, spec, dtype):
            return by_dtype[dtype](spec, dtype)

        def build(self, spec, dtype, arm):
            return by_dtype[dtype].build(spec, dtype, arm)

        def guess(self, spec, dtype, size):
            return by_dtype[dtype].guess(spec, dtype, size)
    monkeypatch.setattr(_selection, "arms", Both())
    x64 = np.linspace(0.1, 1, N)
    x32 = x64.astype(np.float32)
    for _ in range(60):
        fastmath.exp(x64)
        fastmath.exp(x32)
    assert settled_on() == "numpy" and settled_on(dtype="float32") == "reference"
    assert _selection.small_sizes(BY_NAME["exp"]) == {}  # won once: revisited as learned
    _revisit(dtype="float32")
    for _ in range(20):
        fastmath.exp(x32)
    assert settled_on(dtype="float32") == "reference"
    spec = BY_NAME["exp"]
    assert _selection.small_size(spec) <= N  # float64 runs numpy there
    assert _selection.small_sizes(spec) == {
        np.dtype(np.float32): _learn.class_bounds(_learn.size_class(N))[1]}
    planned = []
    real = _selection.plan
    monkeypatch.setattr(_selection, "plan", lambda *a: planned.append(a[1]) or real(*a))
    for _ in range(5):
        assert_same(fastmath.exp(x32), np.exp(x32))
        assert_same(fastmath.exp(x64), np.exp(x64))
    assert planned == ["float64"] * 5


@pytest.mark.parametrize("choice", ["numpy", "reference"])
def test_a_learned_class_runs_from_the_c_fast_path(learn, monkeypatch, choice):
    """A size class learned for the numpy backend, or for the reference above a class that
    runs a backend (beyond the fast path's size test), has its calls made by the ufuncs'
    C fast path: the learned table's path in Python cost 2-5 us a call, a tenth of log on
    10^5 float32 elements. Bitwise NumPy's, until the revisit, whose call takes the Python
    path and learns again; a call that raised an FP flag warns as NumPy's does, from the
    caller's line."""
    pytest.importorskip("fastmath.frontends._hot")
    if choice == "numpy" and fastmath.dispatch._parallel.threads() < 2:
        pytest.skip("one thread: the numpy backend runs NumPy's own call")
    below, x = np.linspace(0.1, 1, N // 4), np.linspace(0.1, 1, N)
    for a, learned in ((below, "numpy"), (x, choice)):  # the class below: a backend's
        fastmath.exp(a)  # the cell, learning
        key = ("exp", "float64", _learn.size_class(a.size), 0)
        cell = _learn.cells[key]
        cell.choice, cell.learning, cell.medians = learned, False, {learned: 1e-5}
        _learn._settle(cell)
    assert N >= fastmath.exp._small  # (not the fast path's small calls)
    planned = []
    real = _selection.plan
    monkeypatch.setattr(_selection, "plan", lambda *a: planned.append(a[1]) or real(*a))
    for _ in range(10):
        assert_same(fastmath.exp(x), np.exp(x))
    assert len(planned) == 1  # the first call, which hands the class to the C path
    _learn.settled[key].left = 3
    for _ in range(3):
        fastmath.exp(x)
    assert len(planned) == 2 and cell.learning  # the revisit's call: learning again
    cell.choice, cell.learning = choice, False
    _learn._settle(cell)
    fastmath.exp(x)
    big = np.full(N, 1000.0)
    with warnings.catch_warnings(record=True) as got, np.errstate(over="warn"):
        warnings.simplefilter("always")
        np.testing.assert_array_equal(fastmath.exp(big), np.exp(big))
    assert [str(w.message) for w in got] == ["overflow encountered in exp"] * 2
    assert got[0].filename == __file__


@pytest.mark.parametrize("choice", ["numpy", "reference"])
def test_a_learned_classs_calls_into_an_out_array_run_from_the_c_fast_path(learn, monkeypatch,
                                                                          choice):
    """out= (as NumPy takes it: a keyword, a tuple of one, after the operand; in place
    too) is the C fast path's as a call without it is, bitwise NumPy's, and a program
    whose calls all give one has its learned choice made there."""
    pytest.importorskip("fastmath.frontends._hot")
    if choice == "numpy" and fastmath.dispatch._parallel.threads() < 2:
        pytest.skip("one thread: the numpy backend runs NumPy's own call")
    below, x = np.linspace(0.1, 1, N // 4), np.linspace(0.1, 1, N)
    for a, learned in ((below, "numpy"), (x, choice)):
        fastmath.exp(a, out=np.empty_like(a))  # the cell, learning from out= calls alone
        key = ("exp", "float64", _learn.size_class(a.size), 0)
        cell = _learn.cells[key]
        cell.choice, cell.learning, cell.medians = learned, False, {learned: 1e-5}
        _learn._settle(cell)
    fastmath.exp(x, out=np.empty_like(x))  # (hands the class to the C path)
    planned = []
    real = _selection.plan
    monkeypatch.setattr(_selection, "plan", lambda *a: planned.append(a[1]) or real(*a))
    want = np.exp(x)
    for o in (np.empty_like(x), np.empty_like(x), np.empty_like(x), x.copy()):
        for call in (lambda: fastmath.exp(x, out=o), lambda: fastmath.exp(x, out=(o,)),
                     lambda: fastmath.exp(x, o)):
            assert call() is o
            assert_same(o, want)
    y = x.copy()
    assert fastmath.exp(y, out=y) is y
    assert_same(y, want)
    assert planned == []


@pytest.mark.parametrize("choice", ["torch-cpu", "mkl"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_a_class_learned_for_a_vml_backend_runs_from_the_c_fast_path(learn, monkeypatch,
                                                                      choice, dtype):
    """A size class learned for mkl or torch-cpu, whose kernel runs VML's (or SLEEF's)
    entry point on the runtime, has its calls made by the ufuncs' C fast path (the Python
    path around the same call cost 4-5 us: where those backends beat NumPy, 10^5 float32
    elements of exp take 20-40 us), with the kernel's own bits, into out= too, NumPy's
    warning from the caller's line, and the revisit's call in Python."""
    pytest.importorskip("fastmath.frontends._hot")
    if choice not in fastmath.available_backends():
        pytest.skip(f"{choice} is not available")
    x = np.linspace(0.1, 1, N).astype(dtype)
    fastmath.exp(x)  # the cell, learning
    key = ("exp", dtype, _learn.size_class(x.size), 0)
    cell = _learn.cells[key]
    if choice not in cell.chains:
        pytest.skip(f"auto does not try {choice} for exp({dtype}) here")
    kernel = cell.chains[choice][0][1]
    if getattr(kernel, "vml_entry", None) is None or kernel.vml_entry(x.dtype) is None:
        pytest.skip(f"{choice}'s exp does not run on the runtime's VML call here")
    cell.choice, cell.learning, cell.medians = choice, False, {choice: 1e-5}
    _learn._settle(cell)
    want = np.empty_like(x)
    assert kernel(x, want) == 0
    fastmath.exp(x)  # (hands the class to the C path)
    planned = []
    real = _selection.plan
    monkeypatch.setattr(_selection, "plan", lambda *a: planned.append(a[1]) or real(*a))
    o = np.empty_like(x)
    for _ in range(5):
        assert fastmath.exp(x).tobytes() == want.tobytes()
        assert fastmath.exp(x, out=o) is o and o.tobytes() == want.tobytes()
    assert planned == []
    big = np.full(N, 1000.0, dtype)
    with warnings.catch_warnings(record=True) as got, np.errstate(over="warn"):
        warnings.simplefilter("always")
        assert np.isinf(fastmath.exp(big)).all()
    assert [str(w.message) for w in got] == ["overflow encountered in exp"]
    assert got[0].filename == __file__ and planned == []
    _learn.settled[key].left = 2
    fastmath.exp(x)
    fastmath.exp(x)
    assert planned == [dtype]  # the revisit's call: in Python, learning again


def test_only_the_dtypes_with_ulp_bounds_are_learned(learn):
    x = np.linspace(0.1, 1, N).astype(np.float16)
    for _ in range(5):
        fastmath.exp(x)
    assert not _learn.cells


def test_modes(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv("FASTMATH_CALIBRATION", raising=False)
    spec, x = BY_NAME["erf"], np.linspace(-1, 1, N)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for mode in ("off", "fixed", "learn"):
                monkeypatch.setenv("FASTMATH_AUTO", mode)
                _config.reload()
                chain = _selection.plan(spec, "float64", N)
                assert_same(fastmath.erf(x), spec.reference()(x), ulps=spec.ulp[1])
                if mode == "off":  # the reference, at every size
                    assert chain == () and _selection.small_size(spec) > 1 << 40
                    assert "FASTMATH_AUTO=off" in fastmath.explain("erf", x).how
                elif mode == "fixed":  # the table's row, nothing learned
                    rows = _selection._build("auto", spec, "float64")
                    row = next(c for m, c in rows if N >= m)
                    assert [n for n, _ in chain] == [n for n, _ in row]
                    assert not _learn.cells
                    assert "guessed" in fastmath.explain("erf", x).how
                else:
                    assert _learn.cells
    finally:
        monkeypatch.undo()
        _config.reload()


def test_a_bad_mode_warns_once_at_the_users_line():
    with pytest.warns(_config.ConfigWarning) as caught:
        cfg = _config.reload({"FASTMATH_AUTO": "sometimes"})
    try:
        assert cfg.auto == "learn" and len(caught) == 1
        message = str(caught[0].message)
        assert "FASTMATH_AUTO='sometimes'" in message and "learn, fixed, off" in message
        assert caught[0].filename == __file__
    finally:
        _config.reload()


# --- the store ------------------------------------------------------------------------------

def test_what_is_learned_is_stored_and_used_by_the_next_run(learn):
    arms = Arms(learn, {"reference": 10e-6, "fast": 4e-6})
    run(arms, 20)
    assert _learn.save()
    data = json.loads(_learn.path().read_text())
    assert data["machines"][0]["machine"] == _learn.machine()
    assert [p.name for p in _learn.path().parent.iterdir()] == ["learned.json"]  # no temp
    _config.reload()  # a new run, as far as the learner knows
    arms.ran.clear()
    run(arms, 5)
    assert arms.ran == ["fast"] * 5
    assert _learn.cells["exp", "float64", _learn.size_class(N), 0].source == \
        "learned here in an earlier run"


def test_a_stored_choice_that_no_longer_wins_is_learned_again_soon(learn):
    # the machine changes between runs (another process busy, another library build): a
    # stored choice is revisited after a few calls, not after REVISIT
    arms = Arms(learn, {"reference": 10e-6, "fast": 4e-6})
    run(arms, 20)
    assert settled_on() == "fast"
    _learn.save()
    _config.reload()  # a new run, where "fast" now takes 5 times the reference's time
    arms.costs["fast"] = 50e-6
    arms.ran.clear()
    run(arms, _learn.FIRST_REVISIT + 2 * _learn.SAMPLES + 8)
    assert arms.ran[:_learn.FIRST_REVISIT] == ["fast"] * _learn.FIRST_REVISIT
    assert settled_on() == "reference"
    assert _learn.FIRST_REVISIT < _learn.REVISIT // 10


def test_the_first_revisit_of_a_stored_choice_tries_every_arm(learn):
    """Arms that lost by NEARBY times sit out three revisits in four, and keep their time
    meanwhile: mkl's expm1 on 10^5 float64, stored at 910 us (a disturbed learning), sat
    out every later run's revisits while it took 47 us, 1.5x faster than the choice."""
    arms = Arms(learn, {"reference": 10e-6, "numpy": 5e-6, "mkl": 30e-6})
    run(arms, 40)
    assert settled_on() == "numpy"
    _learn.save()
    _config.reload()  # a new run, where mkl takes its real time
    arms.costs["mkl"] = 3e-6
    arms.ran.clear()
    run(arms, _learn.FIRST_REVISIT + 40)
    assert "mkl" in arms.ran and settled_on() == "mkl"


def test_runs_merge_into_one_store(learn):
    run(Arms(learn, {"reference": 10e-6, "fast": 4e-6}), 20)
    _learn.save()
    _config.reload()  # another process: learns another function
    run(Arms(learn, {"reference": 10e-6, "numpy": 4e-6}), 20, name="log")
    _learn.save()
    cells = json.loads(_learn.path().read_text())["machines"][0]["cells"]
    assert {k.split("/")[0] for k in cells} == {"exp", "log"}


def test_another_machines_records_are_kept_and_not_used(learn):
    other = {"machine": {"cpu": "elsewhere"}, "cells": {
        f"exp/float64/{_learn.size_class(N)}/0": {"choice": "fast", "medians": {"fast": 1e-6},
                                                 "samples": 5, "when": 1.0}}}
    _learn.path().write_text(json.dumps({"format": 1, "machines": [other]}))
    arms = Arms(learn, {"reference": 10e-6, "numpy": 4e-6})
    run(arms, 20)
    assert arms.ran[:2] == ["reference", "numpy"]  # learned, not taken from elsewhere
    _learn.save()
    machines = json.loads(_learn.path().read_text())["machines"]
    assert other in machines and len(machines) == 2


def _nested(p):
    p.write_text("[" * 100_000 + "]" * 100_000)


def _huge(p):
    with open(p, "w") as f:
        f.write('{"format": 1, "machines": [], "pad": "')
        f.write("x" * (9 << 20))
        f.write('"}')


def _fifo(p):
    os.mkfifo(p)


def _unreadable(p):
    p.write_text('{"format": 1, "machines": []}')
    p.chmod(0)


def _wrong_types(p):
    p.write_text(json.dumps({"format": 1, "machines": [{"machine": {}, "cells": {
        "exp/float64/8/0": {"choice": 3, "medians": {}, "samples": 1, "when": 0}}}]}))


def _not_json(p):
    p.write_text('{"format": 1, "machines": [')


def _not_finite(p):
    p.write_text('{"format": 1, "machines": [{"machine": {}, "cells": {"exp/float64/8/0": '
                 '{"choice": "numpy", "medians": {"numpy": NaN}, "samples": 1, "when": 0}}}]}')


def _directory(p):
    p.mkdir()


HOSTILE = [_nested, _huge, _fifo, _unreadable, _wrong_types, _not_json, _not_finite,
           _directory]


@pytest.mark.parametrize("make", HOSTILE, ids=lambda f: f.__name__.strip("_"))
def test_a_hostile_store_is_ignored_with_one_warning(learn, make):
    if make is _unreadable and os.geteuid() == 0:
        pytest.skip("root reads any file")
    if make is _fifo and not hasattr(os, "mkfifo"):
        pytest.skip("no FIFOs here")
    learn.tick = 1e-6  # every arm alike: the reference stays
    p = _learn.path()
    make(p)
    x = np.linspace(0.1, 1, N)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3000):  # learning, settling, and a write of the store (a real
            # split short of threads goes uncounted for SPARE_FOR on the fake clock)
            assert_same(fastmath.exp(x), np.exp(x), ulps=BY_NAME["exp"].ulp[1])
            if _learn.settled:
                break
        _learn.save()
    said = [w for w in caught if "store of learned choices" in str(w.message)]
    assert len(said) == len(caught) == 1, [str(w.message) for w in caught]
    assert _learn.settled  # it learned all the same
    assert said[0].filename == __file__
    if make in (_fifo, _directory):
        assert not p.is_file()  # never replaced what is not a file of ours


# --- threads and fork ---------------------------------------------------------------------

def test_sixteen_threads_learning_at_once_get_the_references_results(tmp_path, monkeypatch):
    monkeypatch.setenv("FASTMATH_AUTO", "learn")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv("FASTMATH_CALIBRATION", raising=False)
    _config.reload()
    rng = np.random.default_rng(0)
    cases = [(name, BY_NAME[name].sample(n, dt, rng)[0])
             for name in ("exp", "log", "erf") for dt in ("float32", "float64")
             for n in (5000, 70_000)]
    failures = []

    def work(k):
        try:
            for i in range(40):
                name, x = cases[(k + i) % len(cases)]
                spec = BY_NAME[name]
                got = getattr(fastmath, name)(x)
                with np.errstate(all="ignore"):
                    assert_same(got, spec.reference()(x), ulps=spec.ulp[x.dtype == np.float64])
        except BaseException as e:  # noqa: BLE001 - reported below
            failures.append(e)
    try:
        threads = [threading.Thread(target=work, args=(k,)) for k in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert not any(t.is_alive() for t in threads)
        assert not failures, failures[0]
        assert _learn.cells
    finally:
        monkeypatch.undo()
        _config.reload()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork here")
def test_a_forked_child_computes_correctly_and_writes_whole_files(learn, monkeypatch):
    arms = Arms(learn, {"reference": 10e-6, "numpy": 4e-6})
    monkeypatch.setattr(_selection, "arms", arms)
    x = np.linspace(0.1, 1, N)
    for _ in range(20):
        fastmath.exp(x)  # settled in the parent
    fastmath.log(x)  # learning in the parent: the child starts it again
    cell = _learn.cells["log", "float64", _learn.size_class(N), 0]
    cell.lock.acquire()  # as if another thread were in it at the fork
    pid = os.fork()
    if pid:
        cell.lock.release()
    else:  # the child
        code = 1
        try:
            ok = settled_on() == "numpy"
            for _ in range(20):
                ok &= bool(np.array_equal(fastmath.exp(x), np.exp(x)))
                ok &= bool(np.array_equal(fastmath.log(x), np.log(x)))
            ok &= _learn.save()
            code = 0 if ok else 3
        finally:
            os._exit(code)
    status = _wait(pid, 60)
    assert status == 0, "the child failed" if status is not None else "the child hung"
    data = json.loads(_learn.path().read_text())  # whole, and the child's learning in it
    assert {k.split("/")[0] for k in data["machines"][0]["cells"]} == {"exp", "log"}
    assert _learn.save()  # the parent merges its own in
    assert not [p for p in _learn.path().parent.iterdir() if p.name.endswith(".tmp")]


def _wait(pid, seconds):
    """The child's exit code, or None (and the child killed) if it ran past ``seconds``."""
    import time

    end = time.monotonic() + seconds
    while time.monotonic() < end:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.05)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    return None


def test_import_fastmath_reads_no_store(tmp_path):
    import subprocess

    code = ("import sys, fastmath, fastmath.dispatch._learn as l; "
            "assert l._stored is None; print('ok')")
    env = dict(os.environ, FASTMATH_AUTO="learn", XDG_CACHE_HOME=str(tmp_path))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, timeout=120)
    assert out.stdout.strip() == "ok", out.stderr

