"""MLX primitives of the ``reduction`` op family (being written)."""


class MLXReduction:
    """Primitives of the ``reduction`` family on the mlx backend."""
