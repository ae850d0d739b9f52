"""MLX primitives of the ``shape`` op family (being written)."""


class MLXShape:
    """Primitives of the ``shape`` family on the mlx backend."""
