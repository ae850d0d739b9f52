"""The ``mlx`` backend: ``mlx.core.array`` storage, MLX's GPU where it has one.

The backend class is composed of one mixin per op family, each in its own module.
"""

from pylucid.backends.mlx_backend.core import MLXCore


class MLXBackend(MLXCore):
    """GPU backend built on ``mlx.core`` (its CPU stream where there is no GPU)."""

    name = "mlx"
    device = "gpu"


__all__ = ["MLXBackend"]
