"""MLX primitives of the ``linalg`` op family (being written)."""


class MLXLinalg:
    """Primitives of the ``linalg`` family on the mlx backend."""
