"""2-d pooling with PyTorch's arguments: max, average and adaptive average.

Public: max_pool2d, avg_pool2d, adaptive_avg_pool2d (in :mod:`pylucid.nn.functional`).

Each op's parameter is its :class:`~pylucid.backends.windows.Windows`, worked out here from
PyTorch's arguments (kernel, stride, padding, dilation, ``ceil_mode``; or the adaptive
output size), so that the backends only gather through them. Average pooling is linear, and
its gradient is the adjoint op (:class:`AvgPool2dGradBackward`), whose gradient is average
pooling again: gradients of any order are these two ops. Max pooling's gradient routes
``g`` to the position each window took its max from (PyTorch's choice; see
:mod:`pylucid.kernels.pooling`); with ``create_graph`` that routing is an index-add op of
those positions. AMP: KEEP_INPUT (pooling is on none of PyTorch's autocast lists).

As PyTorch's, the pools take an empty batch (and the adaptive pool empty channels): the
output and the gradient are empty. An input empty in another axis is refused.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from pylucid.backends.base import Backend, Shape
from pylucid.backends.windows import Windows, adaptive_axis, convolution_windows
from pylucid.dtypes import DType, int64
from pylucid.ops.base import Op
from pylucid.ops.convolution import as_ints, with_batch_axis
from pylucid.ops.indexing import IndexAddBackward, plan_index
from pylucid.ops.schema import AmpPolicy, OpSchema
from pylucid.ops.wrapping import require_tensor
from pylucid.tensor import Tensor

__all__ = [
    "AdaptiveAvgPool2dBackward",
    "AvgPool2dBackward",
    "AvgPool2dGradBackward",
    "MaxPool2dBackward",
    "adaptive_avg_pool2d",
    "avg_pool2d",
    "max_pool2d",
]

Divisors = tuple[tuple[int, ...], tuple[int, ...]]


class _PoolOp(Op):
    """A pooling op of one ``(N, C, H, W)`` input, over the windows of its parameter."""

    input_names = ("input",)

    @classmethod
    def output_shape(cls, shapes: Sequence[Shape], *, windows: Windows, **params: Any) -> Shape:
        (shape,) = shapes
        return (*shape[:2], *windows.output)

    @classmethod
    def compute_dtype(cls, dtypes: Sequence[DType], **params: Any) -> DType:
        (dtype,) = dtypes
        if not dtype.is_floating_point:
            raise TypeError(
                f"{cls.schema_v1.name}: expected a floating-point input, got {dtype.name}; "
                f"convert it, e.g. x.to(pylucid.float32)"
            )
        return dtype


class MaxPool2dBackward(_PoolOp):
    r"""Autograd node of 2-d max pooling; saves ``input``.

    Each output is the largest input of its window, :math:`y_{n,c,l} = x_{n,c,p(l)}` with
    :math:`p(l)` the position chosen (the first largest, as PyTorch; the last NaN), so

    .. math:: \frac{\partial L}{\partial x_{n,c,q}} = \sum_{l \,:\, p(l) = q} g_{n,c,l}

    (overlapping windows that choose one position add up). Its gradient in ``g`` is the
    gather at those positions, with :class:`~pylucid.ops.indexing.IndexAddBackward`.
    """

    schema_v1 = OpSchema(name="max_pool2d", amp_policy=AmpPolicy.KEEP_INPUT, saved=("input",))

    @staticmethod
    def dispatch(be: Backend, x: Any, shape: Shape, dtype: DType, windows: Windows) -> Any:
        return be.max_pool2d(x, windows, shape, dtype)

    def grad_formula(self, g: Any) -> tuple[Any]:
        return (self.backend.max_pool2d_backward(self.saved["input"], g, self.windows, self.dtype),)

    def grad_graph(self, g: Tensor) -> tuple[Tensor]:
        be, shape = self.backend, self.input_shapes[0]
        positions = be.to_numpy(
            be.max_pool2d_positions(self.saved["input"], self.windows, self.dtype)
        )
        n, c = shape[:2]
        width = shape[3]
        mesh = (
            np.arange(n).reshape(n, 1, 1, 1),
            np.arange(c).reshape(1, c, 1, 1),
            positions // width,
            positions % width,
        )
        return (IndexAddBackward.apply(g, plan=plan_index("max_pool2d", mesh, shape)),)


class AvgPool2dBackward(_PoolOp):
    r"""Autograd node of 2-d average pooling; saves nothing.

    Each output is the sum of its window over the window's divisor :math:`D_l` (the
    window's size, with or without the padding, or ``divisor_override``):

    .. math::
        y_{n,c,l} = \frac{1}{D_l} \sum_{q \in w(l)} x_{n,c,q}, \qquad
        \frac{\partial L}{\partial x_{n,c,q}} = \sum_{l \,:\, q \in w(l)} \frac{g_{n,c,l}}{D_l}

    the adjoint, :class:`AvgPool2dGradBackward`.
    """

    schema_v1 = OpSchema(name="avg_pool2d", amp_policy=AmpPolicy.KEEP_INPUT)

    @staticmethod
    def dispatch(
        be: Backend, x: Any, shape: Shape, dtype: DType, windows: Windows, divisors: Divisors
    ) -> Any:
        return be.avg_pool2d(x, windows, divisors, shape, dtype)

    def grad_formula(self, g: Any) -> tuple[Any]:
        shape = self.input_shapes[0]
        return (
            self.backend.avg_pool2d_backward(g, self.windows, self.divisors, shape, self.dtype),
        )

    def grad_graph(self, g: Tensor) -> tuple[Tensor]:
        return (
            AvgPool2dGradBackward.apply(
                g, windows=self.windows, divisors=self.divisors, size=self.input_shapes[0]
            ),
        )


class AdaptiveAvgPool2dBackward(AvgPool2dBackward):
    r"""Autograd node of 2-d adaptive average pooling: :class:`AvgPool2dBackward` over
    PyTorch's adaptive windows, each divided by its size. Output ``o`` of ``O`` over an axis
    of ``S`` covers :math:`w(o) = [\lfloor oS/O \rfloor, \lceil (o+1)S/O \rceil)`:

    .. math::
        y_{n,c,l} = \frac{1}{|w(l)|} \sum_{q \in w(l)} x_{n,c,q}, \qquad
        \frac{\partial L}{\partial x_{n,c,q}} = \sum_{l \,:\, q \in w(l)} \frac{g_{n,c,l}}{|w(l)|}
    """

    schema_v1 = OpSchema(name="adaptive_avg_pool2d", amp_policy=AmpPolicy.KEEP_INPUT)


class AvgPool2dGradBackward(Op):
    r"""Autograd node of the adjoint of average pooling (its input gradient, into an input
    of shape ``size``); saves nothing. It is linear and its adjoint is average pooling:

    .. math:: \frac{\partial L}{\partial g_{n,c,l}} = \frac{1}{D_l} \sum_{q \in w(l)} u_{n,c,q}
    """

    schema_v1 = OpSchema(name="avg_pool2d_backward", amp_policy=AmpPolicy.KEEP_INPUT, internal=True)
    input_names = ("grad_output",)

    @classmethod
    def output_shape(cls, shapes: Sequence[Shape], *, size: Shape, **params: Any) -> Shape:
        return size

    @staticmethod
    def dispatch(
        be: Backend,
        g: Any,
        shape: Shape,
        dtype: DType,
        windows: Windows,
        divisors: Divisors,
        size: Shape,
    ) -> Any:
        return be.avg_pool2d_backward(g, windows, divisors, shape, dtype)

    def grad_formula(self, u: Any) -> tuple[Any]:
        shape = self.input_shapes[0]
        return (self.backend.avg_pool2d(u, self.windows, self.divisors, shape, self.dtype),)

    def grad_graph(self, u: Tensor) -> tuple[Tensor]:
        return (AvgPool2dBackward.apply(u, windows=self.windows, divisors=self.divisors),)


# -- the windows of PyTorch's arguments ------------------------------------------------------
def _pair(op: str, name: str, value: Any) -> tuple[int, int]:
    """An int, or one or two ints (PyTorch's pools take ``(3,)`` for ``(3, 3)``)."""
    if not isinstance(value, int) and len(tuple(value)) == 1:
        value = tuple(value) * 2
    return as_ints(op, name, value, 2)


def _pool_output_size(
    op: str, size: int, kernel: int, stride: int, pad: int, dilation: int, ceil_mode: bool
) -> int:
    """PyTorch's ``pooling_output_shape``: with ``ceil_mode`` a last, partial window, unless
    it would start in the padding after the input."""
    span = dilation * (kernel - 1) + 1
    numerator = size + 2 * pad - span + (stride - 1 if ceil_mode else 0)
    out = numerator // stride + 1
    if ceil_mode and (out - 1) * stride >= size + pad:
        out -= 1
    return out


def _regular_windows(
    op: str,
    shape: Shape,
    kernel_size: Any,
    stride: Any,
    padding: Any,
    dilation: Any,
    ceil_mode: bool,
) -> tuple[Windows, tuple[int, int]]:
    """The windows of max or average pooling of an ``(N, C, H, W)`` input, checked; and
    the padding (for the divisors)."""
    kernel = _pair(op, "kernel_size", kernel_size)
    strides = kernel if stride is None or stride == () else _pair(op, "stride", stride)
    pads, dilations = _pair(op, "padding", padding), _pair(op, "dilation", dilation)
    if min(kernel) < 1 or min(strides) < 1 or min(dilations) < 1:
        raise ValueError(
            f"{op}: kernel_size, stride and dilation must be positive, got "
            f"kernel_size={kernel}, stride={strides}, dilation={dilations}"
        )
    output = []
    for axis in (0, 1):
        span = dilations[axis] * (kernel[axis] - 1) + 1
        if not 0 <= pads[axis] <= span // 2:
            raise ValueError(
                f"{op}: padding {pads} must be non-negative and at most half the kernel "
                f"(of {span} elements on axis {2 + axis}, dilation included)"
            )
        size = shape[2 + axis]
        out = _pool_output_size(
            op, size, kernel[axis], strides[axis], pads[axis], dilations[axis], ceil_mode
        )
        if out < 1:
            raise ValueError(
                f"{op}: input of shape {tuple(shape)} is too small for a kernel of "
                f"{kernel} (dilation {dilations}, padding {pads}): the output would have "
                f"size {out} on axis {2 + axis}"
            )
        output.append(out)
    windows = convolution_windows(shape[2:], kernel, strides, pads, dilations, tuple(output))
    return windows, pads


def _batched(op: str, input: Tensor, empty_channels: bool) -> tuple[Tensor, bool]:  # noqa: A002
    """``input`` as ``(N, C, H, W)``, and whether a batch axis was added; a ValueError where
    it is empty in an axis other than the batch (and, with ``empty_channels``, the channels),
    as PyTorch's pools refuse."""
    x, unbatched = with_batch_axis(op, require_tensor(op, "input", input), 2)
    if min(x.shape[2:]) < 1 or (x.shape[1] < 1 and not empty_channels):
        allowed = "batch and the channels" if empty_channels else "batch"
        raise ValueError(
            f"{op}: input of shape {input.shape} is empty in an axis other than the "
            f"{allowed}; only the {allowed} of (N, C, H, W) may be empty"
        )
    return x, unbatched


def _unbatched(out: Tensor, unbatched: bool) -> Tensor:
    return out.reshape(out.shape[1:]) if unbatched else out


def max_pool2d(
    input: Tensor,  # noqa: A002  (PyTorch's name)
    kernel_size: int | tuple[int, int],
    stride: int | tuple[int, int] | None = None,
    padding: int | tuple[int, int] = 0,
    dilation: int | tuple[int, int] = 1,
    ceil_mode: bool = False,
    return_indices: bool = False,
) -> Tensor | tuple[Tensor, Tensor]:
    """2-d max pooling of ``(N, C, H, W)`` (or ``(C, H, W)``) ``input``, as
    ``torch.nn.functional.max_pool2d`` (``stride`` defaults to ``kernel_size``; padding
    is ignored, never the max). With ``return_indices``, also the int64 position
    ``ih W + iw`` in its plane that each max was taken from."""
    x, unbatched = _batched("max_pool2d", input, empty_channels=False)
    windows, _ = _regular_windows(
        "max_pool2d", x.shape, kernel_size, stride, padding, dilation, ceil_mode
    )
    out = _unbatched(MaxPool2dBackward.apply(x, windows=windows), unbatched)
    if not return_indices:
        return out
    be = x._backend
    positions = be.max_pool2d_positions(x._storage, windows, x.dtype)
    return out, _unbatched(Tensor._make(positions, be, int64), unbatched)


def avg_pool2d(
    input: Tensor,  # noqa: A002  (PyTorch's name)
    kernel_size: int | tuple[int, int],
    stride: int | tuple[int, int] | None = None,
    padding: int | tuple[int, int] = 0,
    ceil_mode: bool = False,
    count_include_pad: bool = True,
    divisor_override: int | None = None,
) -> Tensor:
    """2-d average pooling of ``(N, C, H, W)`` (or ``(C, H, W)``) ``input``, as
    ``torch.nn.functional.avg_pool2d``: each window's sum over its size counting the
    padding (``count_include_pad``), over the positions inside the input, or over
    ``divisor_override``."""
    x, unbatched = _batched("avg_pool2d", input, empty_channels=False)
    windows, pads = _regular_windows(
        "avg_pool2d", x.shape, kernel_size, stride, padding, 1, ceil_mode
    )
    if divisor_override is not None:
        if type(divisor_override) is not int or divisor_override == 0:
            raise ValueError(
                f"avg_pool2d: divisor_override must be a non-zero int, got {divisor_override!r}"
            )
        divisors = ((divisor_override,) * windows.output[0], (1,) * windows.output[1])
    else:
        divisors = tuple(
            _axis_divisors(windows, axis, pads[axis], count_include_pad) for axis in (0, 1)
        )
    out = AvgPool2dBackward.apply(x, windows=windows, divisors=divisors)
    return _unbatched(out, unbatched)


def _axis_divisors(
    windows: Windows, axis: int, pad: int, count_include_pad: bool
) -> tuple[int, ...]:
    """PyTorch's divisor factor of each window on ``axis``: its length within the padded
    input, or within the input."""
    size, kernel = windows.size[axis], windows.lengths[axis][0]
    factors = []
    for start in windows.starts[axis]:
        end = min(start + kernel, size + pad)
        if not count_include_pad:
            start, end = max(start, 0), min(end, size)
        factors.append(end - start)
    return tuple(factors)


def adaptive_avg_pool2d(
    input: Tensor,  # noqa: A002  (PyTorch's name)
    output_size: int | tuple[int | None, int | None],
) -> Tensor:
    """2-d adaptive average pooling of ``(N, C, H, W)`` (or ``(C, H, W)``) ``input`` to
    ``output_size`` (an int, or a pair whose None keeps that axis' size), as
    ``torch.nn.functional.adaptive_avg_pool2d``."""
    x, unbatched = _batched("adaptive_avg_pool2d", input, empty_channels=True)
    sizes = (output_size, output_size) if isinstance(output_size, int) else tuple(output_size)
    if len(sizes) != 2:
        raise TypeError(
            f"adaptive_avg_pool2d: output_size must be an int or 2, got {output_size!r}"
        )
    sizes = tuple(x.shape[2 + a] if s is None else s for a, s in enumerate(sizes))
    if not all(type(s) is int and s >= 1 for s in sizes):
        raise ValueError(
            f"adaptive_avg_pool2d: output_size must be positive ints (or None), got {output_size!r}"
        )
    h = adaptive_axis(x.shape[2], sizes[0])
    w = adaptive_axis(x.shape[3], sizes[1])
    windows = Windows(tuple(x.shape[2:]), (h[0], w[0]), (h[1], w[1]), (1, 1))
    out = AdaptiveAvgPool2dBackward.apply(x, windows=windows, divisors=(h[1], w[1]))
    return _unbatched(out, unbatched)
