"""The benchmark runner works end to end on a tiny grid (its figures are bench/'s business),
judges a cell only on clear evidence, and refuses a plot it cannot draw before timing."""
import json
import subprocess
import sys

import numpy as np
import pytest

import fastmath
from fastmath.tools import _bench


@pytest.mark.slow
def test_bench_table_json_plot_and_summary(tmp_path):
    pytest.importorskip("matplotlib")
    out, png = tmp_path / "b.json", tmp_path / "b.png"
    r = subprocess.run([sys.executable, "-m", "fastmath", "bench", "--quick", "--functions",
                        "exp,logsumexp", "--dtypes", "float32", "--sizes", "10,20000",
                        "--lse-shape", "20x30", "--json", str(out), "--plot", str(png)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    data = json.loads(out.read_text())
    backends = [b for b in fastmath.available_backends() if b != "auto"]
    # 2 sizes of each function, and the 2-D logsumexp over each of its axes
    assert data["backends"] == backends and len(data["rows"]) == 2 + 2 + 3
    for row in data["rows"]:
        own = {b for b in backends if _bench.runs(row["function"], b)}
        assert set(row["times"]) == {"reference", "auto", "copy", *own}
        assert all(len(v) == 5 for v in row["samples"].values())  # --quick: 5 rounds
        assert "numexpr" not in own or row["function"] != "logsumexp"  # it has no kernel
        # the fastest is named among every column that computes, the reference included
        assert row["fastest"] == min(["reference", *own], key=row["times"].__getitem__)
        x = np.ones(row["shape"], "float32")  # explain looks at dtype and size only
        assert row["auto_chose"] == fastmath.explain(row["function"], x).backend
        size = int(np.prod(row["shape"]))
        assert (row["verdict"], row["figure"], row["spread"]) == _bench.judge(
            row["samples"], size, row["fastest"])
        assert f"{row['auto_chose']:>10}" in r.stdout
    assert "load average" in r.stdout.splitlines()[0]
    tail = r.stdout[r.stdout.index("Summary ("):]
    assert "at the start" in tail and f"of {len(data['rows'])} cells" in tail
    assert f"Plot: {png}" in tail
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_without_matplotlib_fails_before_timing(tmp_path):
    code = ("import sys; sys.modules['matplotlib'] = None\n"  # as if it were not installed
            "from fastmath.tools.cli import main\n"
            "main(['bench', '--quick', '--plot', sys.argv[1]])")
    r = subprocess.run([sys.executable, "-c", code, str(tmp_path / "p.png")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode != 0
    assert "--plot needs matplotlib" in r.stderr and "pip install matplotlib" in r.stderr
    assert "function" not in r.stdout  # no table row was timed
    assert not (tmp_path / "p.png").exists()


def test_no_plot_and_no_matplotlib_say_where_the_plot_went(tmp_path):
    code = ("import sys; sys.modules['matplotlib'] = None\n"
            "from fastmath.tools.cli import main\n"
            "main(['bench', '--quick', '--functions', 'exp', '--dtypes', 'float64',"
            " '--sizes', '10', '--rounds', '1'])")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=120, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "No plot drawn: for one, install matplotlib" in r.stdout
    assert list(tmp_path.iterdir()) == []


def _samples(auto, best, ref=None):
    return {"auto": auto, "numpy": best, "reference": ref if ref is not None else best}


@pytest.mark.parametrize("auto, verdict", [
    ([1.0, 1.1, 1.0, 1.05, 1.0], "yes"),    # median within 1.15x
    ([1.0, 1.3, 1.4, 1.5, 1.2], "noisy"),   # median beyond, one round within: not evidence
    ([1.2, 1.3, 1.4, 1.5, 1.2], "NO"),      # every round beyond the bound
])
def test_judge_large_cells_by_round(auto, verdict):
    best = [1.0] * 5
    v, figure, spread = _bench.judge(_samples(auto, best), 10**5, "numpy")
    assert v == verdict
    assert figure == np.median(np.divide(auto, best))
    assert spread == (max(auto) - min(auto)) / 2


def test_judge_pairs_rounds_so_a_slow_round_is_not_a_miss():
    # a neighbour slowed round 3 for every column alike: per round auto is at the best's time
    best = [1.0, 1.0, 3.0, 1.0, 1.0]
    auto = [1.0, 1.05, 3.1, 1.0, 1.02]
    assert _bench.judge(_samples(auto, best), 10**6, "numpy")[0] == "yes"


@pytest.mark.parametrize("extra, verdict", [
    ([0.2e-6] * 5, "yes"), ([0.9e-6, 0.1e-6, 0.8e-6, 0.7e-6, 0.9e-6], "noisy"),
    ([0.9e-6, 0.6e-6, 0.8e-6, 0.7e-6, 0.9e-6], "NO")])
def test_judge_small_cells_by_added_time(extra, verdict):
    ref = [1e-6, 2e-6, 1e-6, 1e-6, 1.5e-6]
    auto = list(np.add(ref, extra))
    assert _bench.judge(_samples(auto, ref, ref), 10, "reference")[0] == verdict


def test_speedup_words_need_every_round():
    assert _bench.speedup({"reference": [2.0] * 3, "auto": [1.0] * 3})[3] == "faster"
    assert _bench.speedup({"reference": [2.0, 1.0, 2.0], "auto": [1.0] * 3})[3] == "noisy"
    assert _bench.speedup({"reference": [1.0] * 3, "auto": [1.05] * 3})[3] == "same"
    assert _bench.speedup({"reference": [1.0] * 3, "auto": [2.0] * 3})[3] == "slower"


def test_all_extra_installs_what_the_main_command_draws_with():
    import tomllib
    from pathlib import Path

    meta = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    extras = meta["project"]["optional-dependencies"]
    assert "bench" in extras["all"][0] and extras["bench"] == ["matplotlib>=3.5"]


def test_auto_learns_a_cell_before_it_is_timed(tmp_path, monkeypatch):
    # the bench times auto where it has learned its choice: its first calls of a cell try
    # each backend, and at 10^7 elements a backend 6-10x slower filled the timed rounds
    from fastmath.dispatch import _config, _learn

    monkeypatch.setenv("FASTMATH_AUTO", "learn")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv("FASTMATH_CALIBRATION", raising=False)
    _config.reload()
    try:
        x = np.random.default_rng(0).uniform(1, 2, 1 << 16)
        assert _learn.describe("exp", "float64", x.size) is None  # nothing learned yet
        calls, seconds = _bench.settle("exp", x, {})
        assert _learn.describe("exp", "float64", x.size)["state"] == "settled"
        assert 2 <= calls <= _bench.SETTLE_CALLS and seconds > 0
        assert _bench.settle("exp", x, {})[0] == 0  # learned: no more calls
        assert _bench.settle("exp", x[:100], {}) == (0, 0.0)  # below what auto learns
        rows = [{"function": "exp", "dtype": "float64", "shape": [x.size], "label": "65536",
                 "verdict": "yes", "figure": 1.0, "speedup_word": "same", "speedup": 1.0,
                 "auto_chose": "numpy", "auto_learning": {"calls": calls, "seconds": seconds}}]
        text = _bench.summary({"rows": rows}, "No plot drawn.", 0.1, 0.1)
        assert f"learned its choice in 1 cell on its first calls there: {calls} calls" in text
    finally:
        monkeypatch.undo()
        _config.reload()
