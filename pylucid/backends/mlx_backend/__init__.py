"""The ``mlx`` backend: ``mlx.core.array`` storage, MLX's GPU where it has one.

The backend class is composed of one mixin per op family, each in its own module.
"""

from pylucid.backends.mlx_backend.binary import MLXBinary
from pylucid.backends.mlx_backend.convolution import MLXConvolution
from pylucid.backends.mlx_backend.core import MLXCore
from pylucid.backends.mlx_backend.elementwise import MLXElementwise
from pylucid.backends.mlx_backend.linalg import MLXLinalg
from pylucid.backends.mlx_backend.normalization import MLXNormalization
from pylucid.backends.mlx_backend.optimizers import MLXOptimizers
from pylucid.backends.mlx_backend.pooling import MLXPooling
from pylucid.backends.mlx_backend.recurrent import MLXRecurrent
from pylucid.backends.mlx_backend.reduction import MLXReduction
from pylucid.backends.mlx_backend.shape import MLXShape


class MLXBackend(
    MLXCore,
    MLXConvolution,
    MLXElementwise,
    MLXBinary,
    MLXReduction,
    MLXLinalg,
    MLXNormalization,
    MLXOptimizers,
    MLXPooling,
    MLXRecurrent,
    MLXShape,
):
    """GPU backend built on ``mlx.core`` (its CPU stream where there is no GPU)."""

    name = "mlx"
    device = "gpu"
    allocates_lazily = True


__all__ = ["MLXBackend"]
