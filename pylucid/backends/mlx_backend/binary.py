"""MLX primitives of the ``binary`` op family (being written)."""


class MLXBinary:
    """Primitives of the ``binary`` family on the mlx backend."""
