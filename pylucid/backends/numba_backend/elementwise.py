"""Numba primitives of the ``elementwise`` op family (being written)."""


class NumbaElementwise:
    """Primitives of the ``elementwise`` family on the numba backend."""
