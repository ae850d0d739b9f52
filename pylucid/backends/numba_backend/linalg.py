"""Numba primitives of the ``linalg`` op family (being written)."""


class NumbaLinalg:
    """Primitives of the ``linalg`` family on the numba backend."""
