"""MLX primitives of the ``convolution`` op family: 2-d convolution and its gradients.

MLX convolves channels-last arrays (``(N, H, W, C)`` inputs, ``(O, KH, KW, C / groups)``
weights), so each primitive transposes pylucid's channels-first layout around
``mlx.core.conv_general``, which takes the stride, the padding before and after each axis,
the dilation and the groups as PyTorch does. The gradients are MLX's own vector-Jacobian
products of that call (``mlx.core.vjp``), the transposed convolutions MLX derives for it.

MLX 0.32 convolves float64 (on its CPU stream) without dilation and groups only
("unsupported data type" otherwise), and where it does, only to float32's precision
(relative errors of 1e-5 against NumPy in float64, for a (3, 1, 9, 9) input and a 3 x 3
kernel). So a float64 convolution is computed tap by tap instead: one strided slice of the
padded input per kernel tap, stacked as the columns of ``im2col``, and one matrix product
per group (its gradient again by ``mlx.core.vjp``).

Where an operand has no elements (a batch of 0, or 0 input channels) every sum of the
result is empty: the primitives give zeros of its shape without calling MLX, whose
``conv_general`` dies of a division by zero on an empty batch.
"""

from __future__ import annotations

from typing import Any

from pylucid.backends.base import ConvGeometry, Shape
from pylucid.dtypes import DType, float64

_TO_CHANNELS_LAST = (0, 2, 3, 1)
_TO_CHANNELS_FIRST = (0, 3, 1, 2)


class MLXConvolution:
    """Primitives of the ``convolution`` family on the mlx backend."""

    def _convolve(self, geometry: ConvGeometry, dtype: DType) -> Any:
        """The convolution of channels-first ``x`` and ``w`` as a function of MLX arrays."""
        mx, s = self.mx, self._stream(dtype)
        stride, ((top, bottom), (left, right)), dilation, groups = geometry
        if dtype is float64:
            return self._convolve_by_taps(geometry, dtype)

        def convolve(x: Any, w: Any) -> Any:
            y = mx.conv_general(
                mx.transpose(x, _TO_CHANNELS_LAST, stream=s),
                mx.transpose(w, _TO_CHANNELS_LAST, stream=s),
                stride=list(stride),
                padding=([top, left], [bottom, right]),
                kernel_dilation=list(dilation),
                groups=groups,
                stream=s,
            )
            return mx.transpose(y, _TO_CHANNELS_FIRST, stream=s)

        return convolve

    def _convolve_by_taps(self, geometry: ConvGeometry, dtype: DType) -> Any:
        mx, s = self.mx, self._stream(dtype)
        stride, padding, dilation, groups = geometry

        def convolve(x: Any, w: Any) -> Any:
            n, c = x.shape[:2]
            o, cg, kh, kw = w.shape
            padded = mx.pad(x, [(0, 0), (0, 0), *padding], stream=s)
            out_h = (padded.shape[2] - dilation[0] * (kh - 1) - 1) // stride[0] + 1
            out_w = (padded.shape[3] - dilation[1] * (kw - 1) - 1) // stride[1] + 1
            taps = []
            for i in range(kh):
                top = i * dilation[0]
                for j in range(kw):
                    left = j * dilation[1]
                    taps.append(
                        padded[
                            :,
                            :,
                            top : top + (out_h - 1) * stride[0] + 1 : stride[0],
                            left : left + (out_w - 1) * stride[1] + 1 : stride[1],
                        ]
                    )
            cols = mx.reshape(
                mx.stack(taps, axis=2, stream=s), (n, groups, cg * kh * kw, out_h * out_w), stream=s
            )
            weights = mx.reshape(w, (1, groups, o // groups, cg * kh * kw), stream=s)
            return mx.reshape(mx.matmul(weights, cols, stream=s), (n, o, out_h, out_w), stream=s)

        return convolve

    def _zeros(self, shape: Shape, dtype: DType) -> Any:
        """The result of a convolution with an empty operand: zeros of ``shape``."""
        return self.mx.zeros(shape, dtype=self._mx_dtype(dtype), stream=self._stream(dtype))

    def conv2d(self, x: Any, w: Any, geometry: ConvGeometry, shape: Shape, dtype: DType) -> Any:
        if x.size == 0 or w.size == 0:
            return self._zeros(shape, dtype)
        x, w = self._operands(dtype, x, w)
        return self._convolve(geometry, dtype)(x, w)

    def _gradient(
        self, geometry: ConvGeometry, dtype: DType, x: Any, w: Any, g: Any, of: int
    ) -> Any:
        """MLX's vector-Jacobian product of the convolution for ``x`` (``of=0``) or ``w``
        (``of=1``) against ``g``; the other argument is held fixed."""
        convolve = self._convolve(geometry, dtype)
        primals = [x, w]
        _, (grad,) = self.mx.vjp(
            lambda p: convolve(*primals[:of], p, *primals[of + 1 :]), [primals[of]], [g]
        )
        return grad

    def conv2d_input_grad(
        self, g: Any, w: Any, geometry: ConvGeometry, shape: Shape, dtype: DType
    ) -> Any:
        if g.size == 0 or w.size == 0:
            return self._zeros(shape, dtype)
        g, w = self._operands(dtype, g, w)
        x = self.mx.zeros(shape, dtype=w.dtype)  # (the product is linear: any x will do)
        return self._gradient(geometry, dtype, x, w, g, 0)

    def conv2d_weight_grad(
        self, x: Any, g: Any, geometry: ConvGeometry, shape: Shape, dtype: DType
    ) -> Any:
        if x.size == 0 or g.size == 0:
            return self._zeros(shape, dtype)
        x, g = self._operands(dtype, x, g)
        w = self.mx.zeros(shape, dtype=x.dtype)
        return self._gradient(geometry, dtype, x, w, g, 1)
