"""fastmath beside its peers: python bench/peers.py [--json FILE] [--plot FILE.png] (see --help).

The same as ``fastmath bench --peers``; the logic is fastmath/tools/_peers.py. With
``--learn``: what auto learns with no calibration file, a warm-up pass then a timed pass
(fastmath/tools/_warm.py), as ``fastmath bench --peers --learn``.
"""
import argparse

from fastmath.tools import _peers, _warm

p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
_peers.add_arguments(p)
args = p.parse_args()
raise SystemExit((_warm.main if args.learn else _peers.main)(args))
