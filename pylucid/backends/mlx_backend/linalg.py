"""MLX primitives of the ``linalg`` op family.

``mx.matmul`` only multiplies floating-point arrays; integer products (which NumPy and
PyTorch allow) are computed exactly as a broadcast multiply and a sum over the inner
dimension, which takes ``batch * n * k * m`` temporary elements instead of a GEMM.
"""

from __future__ import annotations

from typing import Any

from pylucid.backends.base import Shape
from pylucid.dtypes import DType


class MLXLinalg:
    """Primitives of the ``linalg`` family on the mlx backend."""

    def matmul(self, a: Any, b: Any, shape: Shape, dtype: DType) -> Any:
        """``a @ b`` with NumPy's semantics (1-d operands promoted, batch dims broadcast)."""
        mx, s = self.mx, self._stream(dtype)
        a, b = self._operands(dtype, a, b)
        if dtype.is_floating_point:
            return mx.matmul(a, b, stream=s)
        a2 = a if a.ndim > 1 else mx.reshape(a, (1, -1), stream=s)
        b2 = b if b.ndim > 1 else mx.reshape(b, (-1, 1), stream=s)
        products = mx.multiply(
            mx.expand_dims(a2, -1, stream=s), mx.expand_dims(b2, -3, stream=s), stream=s
        )
        return mx.reshape(mx.sum(products, axis=-2, stream=s), shape, stream=s)
