"""``fastmath.foreach``: list versions of the accelerated functions.

The public name of the front end :mod:`fastmath.frontends._foreach`; importing either
gives the same module object, so attributes set on one are seen through the other.
"""
import sys

from .frontends import _foreach as _impl

sys.modules[__name__] = _impl
