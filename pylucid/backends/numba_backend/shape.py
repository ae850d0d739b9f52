"""Numba primitives of the ``shape`` op family (being written)."""


class NumbaShape:
    """Primitives of the ``shape`` family on the numba backend."""
