"""Numba primitives of the ``convolution`` op family: 2-d convolution and its gradients.

Each is :func:`~pylucid.kernels.convolution.im2col` (or its adjoint ``col2im``) around one
matrix product per group over the whole batch: the columns are ``(C KH KW, N OH OW)``, so
``weight (O, C KH KW) @ columns`` is one product of ``N OH OW`` columns (then the
``(O, N, OH OW)`` product is transposed into the output's layout), the weight gradient
``g (O, N OH OW) @ columns^T`` one, and the input's ``weight^T @ g`` one before ``col2im`` -
not one per example, and a per-example weight gradient summed over the batch. The columns
are built again for the weight gradient rather than kept from the forward: they are
``KH KW`` times the input's size.

The products are skinny (``O`` of 16-64 rows): below the work from which OpenBLAS gets a
second thread (:data:`~pylucid.kernels.blas.PARALLEL_FLOPS`), so at 2 threads they ran on
one, 24.3 ms of the benchmark's CNN step against PyTorch's 11.6. They run in blocks on the
kernels' pool instead (:func:`~pylucid.kernels.blas.blocked_product`: the columns cut apart,
or the summed ``N OH OW`` for the weight gradient), each block one single-threaded call:
17.9 ms at 2 threads, and beside a busy process 30.2 ms as before (29.1), where splitting
them over OpenBLAS's own threads took 58.6 (AMD EPYC, float32).

Where an operand has no elements (a batch of 0, or 0 input channels) every sum of the
result is empty: the primitives give zeros of its shape without reaching the kernels.
"""

from __future__ import annotations

import numpy as np

from pylucid import memory
from pylucid.backends.base import ConvGeometry, Shape
from pylucid.backends.windows import Windows, convolution_windows, window_readers, window_sources
from pylucid.dtypes import DType
from pylucid.kernels import blas, convolution


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
        taps = cols.shape[0] // groups
        out = _product(
            w.reshape(groups, o // groups, taps), cols.reshape(groups, taps, n * oh * ow)
        )
        result = memory.empty(shape, dtype.numpy)
        result[...] = out.reshape(o, n, oh, ow).transpose(1, 0, 2, 3)
        return result

    def conv2d_input_grad(
        self, g: np.ndarray, w: np.ndarray, geometry: ConvGeometry, shape: Shape, dtype: DType
    ) -> np.ndarray:
        """The gradient of :meth:`conv2d` for its input of ``shape``: ``col2im(w^T g)``."""
        if g.size == 0 or w.size == 0:
            return np.zeros(shape, dtype.numpy)
        w = np.ascontiguousarray(w, dtype.numpy)
        n, o, oh, ow = g.shape
        groups = geometry[3]
        taps = w[0].size
        weights = w.reshape(groups, o // groups, taps).transpose(0, 2, 1)
        cols = _product(weights, _by_channel(g, dtype).reshape(groups, o // groups, -1))
        readers = window_readers(_windows(shape[2:], w.shape[2:], geometry, (oh, ow)))
        return convolution.col2im(cols.reshape(groups * taps, -1), readers, shape)

    def conv2d_weight_grad(
        self, x: np.ndarray, g: np.ndarray, geometry: ConvGeometry, shape: Shape, dtype: DType
    ) -> np.ndarray:
        """The gradient of :meth:`conv2d` for its weight of ``shape``: ``g cols^T`` over the
        whole batch."""
        if x.size == 0 or g.size == 0:
            return np.zeros(shape, dtype.numpy)
        x = np.ascontiguousarray(x, dtype.numpy)
        n, o, oh, ow = g.shape
        groups = geometry[3]
        cols = _columns(x, shape[2:], geometry, (oh, ow))
        taps = cols.shape[0] // groups
        grad = _product(
            _by_channel(g, dtype).reshape(groups, o // groups, n * oh * ow),
            cols.reshape(groups, taps, n * oh * ow).transpose(0, 2, 1),
            sum_blocks=True,
        )
        return grad.reshape(shape)


def _product(a: np.ndarray, b: np.ndarray, sum_blocks: bool = False) -> np.ndarray:
    """The stacked product ``a @ b`` (one matrix per group) into a pooled array
    (:func:`pylucid.memory.empty`: a fresh one of this size costs a page fault per 4 KiB on
    first touch), each group's in blocks on the kernels' pool (:func:`blas.blocked_product`:
    columns apart, or the summed dimension with ``sum_blocks``); by ``np.matmul`` where
    that declines."""
    out = memory.empty((a.shape[0], a.shape[1], b.shape[2]), np.result_type(a, b))
    with np.errstate(all="ignore"):  # (inf * 0 in BLAS: the result says it)
        for group in range(a.shape[0]):
            if not blas.blocked_product(a[group], b[group], out[group], sum_blocks):
                np.matmul(a[group], b[group], out=out[group])
    return out


def _by_channel(g: np.ndarray, dtype: DType) -> np.ndarray:
    """``(N, O, OH, OW)`` ``g`` as the C-contiguous ``(O, N OH OW)`` matrix the products
    take, in a pooled array."""
    n, o, oh, ow = g.shape
    out = memory.empty((o, n, oh, ow), dtype.numpy)
    out[...] = g.transpose(1, 0, 2, 3)
    return out.reshape(o, n * oh * ow)
