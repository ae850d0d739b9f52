"""Numba primitives of the ``reduction`` op family (being written)."""


class NumbaReduction:
    """Primitives of the ``reduction`` family on the numba backend."""
