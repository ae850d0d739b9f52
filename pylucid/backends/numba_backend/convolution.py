"""Numba primitives of the ``convolution`` op family: 2-d convolution and its gradients.

Each is :func:`~pylucid.kernels.convolution.im2col` (or its adjoint ``col2im``) around one
batched matrix product per group, which NumPy hands to its BLAS (as ``matmul``): the
columns are ``(N, C KH KW, OH OW)``, so the product ``weight (O, C KH KW) @ columns`` is
already in the output's ``(N, O, OH, OW)`` layout and needs no transpose. The columns are
built again for the weight gradient rather than kept from the forward: they are ``KH KW``
times the input's size.

Where an operand has no elements (a batch of 0, or 0 input channels) every sum of the
result is empty: the primitives give zeros of its shape without reaching the kernels.
"""

from __future__ import annotations

import numpy as np

from pylucid.backends.base import ConvGeometry, Shape
from pylucid.backends.windows import Windows, convolution_windows, window_readers, window_sources
from pylucid.dtypes import DType
from pylucid.kernels import convolution


def _windows(size: Shape, kernel: Shape, geometry: ConvGeometry, output: Shape) -> Windows:
    stride, padding, dilation, _ = geometry
    before = (padding[0][0], padding[1][0])
    return convolution_windows(size, kernel, stride, before, dilation, output)


def _columns(x: np.ndarray, kernel: Shape, geometry: ConvGeometry, output: Shape) -> np.ndarray:
    return convolution.im2col(x, window_sources(_windows(x.shape[2:], kernel, geometry, output)))


class NumbaConvolution:
    """Primitives of the ``convolution`` family on the numba backend."""

    def conv2d(
        self, x: np.ndarray, w: np.ndarray, geometry: ConvGeometry, shape: Shape, dtype: DType
    ) -> np.ndarray:
        """The convolution of ``(N, C, H, W)`` ``x`` with ``(O, C / groups, KH, KW)`` ``w``
        into ``shape`` ``(N, O, OH, OW)``."""
        if x.size == 0 or w.size == 0:
            return np.zeros(shape, dtype.numpy)
        x = np.ascontiguousarray(x, dtype.numpy)
        w = np.ascontiguousarray(w, dtype.numpy)
        n, o, oh, ow = shape
        groups = geometry[3]
        cols = _columns(x, w.shape[2:], geometry, (oh, ow))
        taps = cols.shape[1] // groups
        with np.errstate(all="ignore"):  # (inf * 0 in BLAS: the result says it)
            out = np.matmul(
                w.reshape(1, groups, o // groups, taps),
                cols.reshape(n, groups, taps, oh * ow),
            )
        return out.reshape(shape)

    def conv2d_input_grad(
        self, g: np.ndarray, w: np.ndarray, geometry: ConvGeometry, shape: Shape, dtype: DType
    ) -> np.ndarray:
        """The gradient of :meth:`conv2d` for its input of ``shape``: ``col2im(w^T g)``."""
        if g.size == 0 or w.size == 0:
            return np.zeros(shape, dtype.numpy)
        g = np.ascontiguousarray(g, dtype.numpy)
        w = np.ascontiguousarray(w, dtype.numpy)
        n, o, oh, ow = g.shape
        groups = geometry[3]
        taps = w[0].size
        weights = w.reshape(1, groups, o // groups, taps).transpose(0, 1, 3, 2)
        with np.errstate(all="ignore"):
            cols = np.matmul(weights, g.reshape(n, groups, o // groups, oh * ow))
        readers = window_readers(_windows(shape[2:], w.shape[2:], geometry, (oh, ow)))
        return convolution.col2im(cols, readers, shape)

    def conv2d_weight_grad(
        self, x: np.ndarray, g: np.ndarray, geometry: ConvGeometry, shape: Shape, dtype: DType
    ) -> np.ndarray:
        """The gradient of :meth:`conv2d` for its weight of ``shape``: ``sum_n g_n cols_n^T``."""
        if x.size == 0 or g.size == 0:
            return np.zeros(shape, dtype.numpy)
        x = np.ascontiguousarray(x, dtype.numpy)
        g = np.ascontiguousarray(g, dtype.numpy)
        n, o, oh, ow = g.shape
        groups = geometry[3]
        cols = _columns(x, shape[2:], geometry, (oh, ow))
        taps = cols.shape[1] // groups
        with np.errstate(all="ignore"):
            per_example = np.matmul(
                g.reshape(n, groups, o // groups, oh * ow),
                cols.reshape(n, groups, taps, oh * ow).transpose(0, 1, 3, 2),
            )
            return np.add.reduce(per_example, axis=0).reshape(shape)
