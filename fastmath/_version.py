"""fastmath's own version (pyproject.toml reads it from here; ``fastmath.fastmath_version``)."""
VERSION = "0.1.0"
