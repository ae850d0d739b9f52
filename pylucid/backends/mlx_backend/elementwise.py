"""MLX primitives of the ``elementwise`` op family (being written)."""


class MLXElementwise:
    """Primitives of the ``elementwise`` family on the mlx backend."""
