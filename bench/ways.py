"""The ways to use fastmath, on one unchanged script: examples/probit.py.

Each way runs the script's work in a fresh process, in interleaved rounds (each round runs
every way once, in a rotated order), and the median of the seconds the script reports for
its own work (imports and data excluded) is printed, the speedup after the first of its
40 steps (the first pays what runs once: torch's import, the first time a function runs on
it), the whole process's wall time
and the checksum (which must agree with plain NumPy's to 1e-9 relative: other backends than
numpy are within a few ULP per element, and the sums add those up):

- ``plain``: ``python examples/probit.py``;
- ``import fastmath as np``: the script's ``np``, ``erf`` and ``log_ndtr`` are fastmath's
  (what that import line, and ``from fastmath.special import ...``, give);
- ``@fastmath.accelerate``: the script's function decorated, its NumPy/SciPy calls through
  fastmath;
- ``fastmath run``: ``fastmath run examples/probit.py``, no change to the file (NumPy and
  SciPy patched at start-up, as ``FASTMATH_PATCH=1`` does).

python bench/ways.py [--rounds 7] [--n 1000000] [--json FILE]
"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SCRIPT = HERE.parent / "examples" / "probit.py"

IMPORT = f"""
import runpy, sys
sys.argv = ["probit.py"] + sys.argv[1:]
sys.path.insert(0, {str(SCRIPT.parent)!r})
import probit, fastmath, fastmath.special
{{swap}}
probit.main(*(int(a) for a in sys.argv[1:]))
"""
WAYS = {
    "plain": [sys.executable, str(SCRIPT)],
    "import fastmath as np": [sys.executable, "-c", IMPORT.format(
        swap="probit.np, probit.erf, probit.log_ndtr = fastmath, fastmath.erf, "
             "fastmath.special.log_ndtr")],
    "@fastmath.accelerate": [sys.executable, "-c", IMPORT.format(
        swap="probit.loglik_and_grad = fastmath.accelerate(probit.loglik_and_grad)")],
    "fastmath run": [sys.executable, "-m", "fastmath", "run", str(SCRIPT)],
}


def machine() -> str:
    from fastmath.dispatch._calibration import cpu_model

    return f"{cpu_model()}, {os.cpu_count()} cores, {platform.system()}"


def run(cmd, n):
    t = time.perf_counter()
    r = subprocess.run(cmd + [str(n)], capture_output=True, text=True, timeout=600,
                       env={k: v for k, v in os.environ.items() if k != "FASTMATH_PATCH"})
    wall = time.perf_counter() - t
    if r.returncode != 0:
        sys.exit(f"{cmd[:3]} failed:\n{r.stderr}")
    out = dict(line.split(" ", 1) for line in r.stdout.splitlines() if " " in line)
    return float(out["seconds"]), float(out["first"]), wall, float(out["checksum"])


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=7, help="interleaved rounds (at least 1)")
    p.add_argument("--n", type=int, default=1_000_000, help="rows of the probit data")
    p.add_argument("--json", help="also write the figures to this file (docs/make_pictures.py)")
    args = p.parse_args()
    if args.rounds < 1 or args.n < 1:
        p.error("--rounds and --n must be at least 1")
    load_before = os.getloadavg()
    print(f"machine: {machine()}; load average {' '.join(f'{v:.2f}' for v in load_before)}")
    names = list(WAYS)
    work = {w: [] for w in names}
    rest = {w: [] for w in names}
    wall = {w: [] for w in names}
    sums = {w: [] for w in names}
    for r in range(args.rounds):
        for w in names[r % len(names):] + names[:r % len(names)]:
            s, first, t, c = run(WAYS[w], args.n)
            work[w].append(s)
            rest[w].append(s - first)
            wall[w].append(t)
            sums[w].append(c)
    base = statistics.median(work["plain"])
    base_rest = statistics.median(rest["plain"])
    ref = sums["plain"][0]
    print(f"{'way':<24}{'work s':>10}{'speedup':>9}{'after step 1':>14}{'process s':>11}  "
          "checksum agrees")
    rows = []
    for w in names:
        m, r = statistics.median(work[w]), statistics.median(rest[w])
        agree = all(abs(c - ref) <= 1e-9 * abs(ref) for c in sums[w])
        rows.append({"way": w, "work_s": m, "speedup": base / m, "rest_s": r,
                     "rest_speedup": base_rest / r,
                     "process_s": statistics.median(wall[w]), "agrees": agree})
        print(f"{w:<24}{m:>10.3f}{base / m:>8.2f}x{base_rest / r:>13.2f}x"
              f"{statistics.median(wall[w]):>11.2f}  {'yes' if agree else 'NO'}")
    load_after = os.getloadavg()
    print(f"load average after: {' '.join(f'{v:.2f}' for v in load_after)}; "
          f"{args.rounds} rounds, medians")
    if args.json:
        Path(args.json).write_text(json.dumps(
            {"machine": machine(), "n": args.n, "rounds": args.rounds, "rows": rows,
             "load_average": {"start": load_before[0], "end": load_after[0]}}, indent=1))


if __name__ == "__main__":
    main()
