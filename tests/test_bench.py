"""The benchmark runner works end to end on a tiny grid (its figures are bench/'s business)."""
import json
import subprocess
import sys

import numpy as np
import pytest

import fastmath
from fastmath import _bench


def test_bench_table_json_and_plot(tmp_path):
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
        assert "numexpr" not in own or row["function"] != "logsumexp"  # it has no kernel
        assert row["fastest"] in backends
        x = np.ones(row["shape"], "float32")  # explain looks at dtype and size only
        assert row["auto_chose"] == fastmath.explain(row["function"], x).backend
        assert row["auto_over_best"] == row["times"]["auto"] / row["times"][row["fastest"]]
        assert f"{row['auto_chose']:>10}" in r.stdout
    assert "cells within the bound" in r.stdout
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
