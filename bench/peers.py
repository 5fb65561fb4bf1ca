"""fastmath beside its peers: python bench/peers.py [--json FILE] [--plot FILE.png] (see --help).

The same as ``fastmath bench --peers``; the logic is fastmath/tools/_peers.py.
"""
import argparse

from fastmath.tools import _peers

p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
_peers.add_arguments(p)
raise SystemExit(_peers.main(p.parse_args()))
