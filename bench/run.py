"""Benchmark grid: python bench/run.py [--quick] [--json FILE] (see --help)."""
import argparse

from fastmath.tools import _bench

p = argparse.ArgumentParser(description=__doc__)
_bench.add_arguments(p)
raise SystemExit(_bench.main(p.parse_args()))
