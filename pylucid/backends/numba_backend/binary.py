"""Numba primitives of the ``binary`` op family (being written)."""


class NumbaBinary:
    """Primitives of the ``binary`` family on the numba backend."""
