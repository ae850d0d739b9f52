"""Transposed and 3-d convolutions, with PyTorch's names, signatures and semantics
(re-exported by :mod:`pylucid.nn.functional`), composed of the 2-d convolution ops of
:mod:`pylucid.ops.convolution`, so their gradients of every order are those ops'.

- ``conv_transpose2d(x, w)`` *is* the input gradient of a 2-d convolution with weight
  ``w`` (:class:`~pylucid.ops.convolution.Conv2dInputGradBackward`, the adjoint of
  ``x -> conv2d(x, w)``) whose input has the transposed convolution's output shape;
  ``conv_transpose1d`` is that of height 1.
- ``conv3d`` sums, over the kernel's depth taps ``kd``, 2-d convolutions of the input's
  depth slices ``kd d_d, kd d_d + s_d, ...`` (batched as ``N * D_out`` planes) with the
  weight's slice ``w[:, :, kd]``: ``kD`` convolutions, each over the whole output.
"""

from __future__ import annotations

from typing import Any

from pylucid.backends.base import ConvGeometry
from pylucid.nn.resampling import pad
from pylucid.ops.convolution import (
    Conv2dInputGradBackward,
    as_ints,
    checked_output_shape,
    conv2d,
    conv_output_size,
    with_batch_axis,
)
from pylucid.ops.wrapping import require_tensor
from pylucid.tensor import Tensor

__all__ = ["conv3d", "conv_transpose1d", "conv_transpose2d", "transposed_output_padding"]


def _with_bias(op: str, out: Tensor, bias: Tensor | None) -> Tensor:
    if bias is None:
        return out
    require_tensor(op, "bias", bias)
    if bias.shape != (out.shape[1],):
        raise ValueError(
            f"{op}: bias of shape {bias.shape} does not fit {out.shape[1]} output channels: "
            f"expected shape ({out.shape[1]},)"
        )
    return out + bias.reshape((1, out.shape[1]) + (1,) * (out.ndim - 2))


def _positive(op: str, **values: tuple[int, ...]) -> None:
    for name, value in values.items():
        if min(value) < 1:
            raise ValueError(f"{op}: {name} must be positive, got {value}")


def _transposed(
    op: str, input: Tensor, weight: Tensor, bias: Tensor | None, stride: Any,  # noqa: A002
    padding: Any, output_padding: Any, groups: int, dilation: Any, dims: int,
) -> Tensor:  # fmt: skip
    """The transposed convolution of ``dims`` (1 or 2) spatial axes; see
    :func:`conv_transpose2d`."""
    require_tensor(op, "input", input)
    require_tensor(op, "weight", weight)
    if weight.ndim != dims + 2:
        raise ValueError(
            f"{op}: expected a {dims + 2}-d weight (C_in, C_out/groups, *kernel), got shape "
            f"{weight.shape}"
        )
    x, unbatched = with_batch_axis(op, input, dims)
    strides = as_ints(op, "stride", stride, dims)
    pads = as_ints(op, "padding", padding, dims)
    extra = as_ints(op, "output_padding", output_padding, dims)
    dilations = as_ints(op, "dilation", dilation, dims)
    _positive(op, stride=strides, dilation=dilations)
    if isinstance(groups, bool) or not isinstance(groups, int) or groups < 1:
        raise ValueError(f"{op}: groups must be a positive int, got {groups!r}")
    if min(pads) < 0 or min(extra) < 0:
        raise ValueError(f"{op}: padding and output_padding must be non-negative, got "
                         f"{pads} and {extra}")  # fmt: skip
    for e, s, d in zip(extra, strides, dilations):
        if e >= max(s, d):
            raise ValueError(
                f"{op}: output_padding {extra} must be smaller than either stride {strides} "
                f"or dilation {dilations}"
            )
    if x.shape[1] != weight.shape[0] or weight.shape[0] % groups:
        raise ValueError(
            f"{op}: input of shape {input.shape} has {x.shape[1]} channels and weight of "
            f"shape {weight.shape} expects {weight.shape[0]} (C_in, C_out/groups, *kernel), "
            f"a multiple of groups={groups}"
        )
    kernel = weight.shape[2:]
    sizes = tuple(
        (n - 1) * s - 2 * p + d * (k - 1) + e + 1
        for n, s, p, d, k, e in zip(x.shape[2:], strides, pads, dilations, kernel, extra)
    )
    if min(sizes) < 1:
        raise ValueError(
            f"{op}: the output would have spatial size {sizes} for input of shape "
            f"{input.shape}, kernel {tuple(kernel)}, stride {strides}, padding {pads}"
        )
    # A convolution of the output's shape gives back at least the input's positions; with
    # an output_padding of a stride or more (allowed below the dilation) it gives more, at
    # which the input is taken as zero.
    more = [
        conv_output_size(size, k, s, p, p, d) - n
        for size, k, s, p, d, n in zip(sizes, kernel, strides, pads, dilations, x.shape[2:])
    ]
    if any(more):
        x = pad(x, tuple(a for m in reversed(more) for a in (0, m)))
    if dims == 1:
        n, c, length = x.shape
        x = x.reshape(n, c, 1, length)
        weight = weight.reshape(weight.shape[0], weight.shape[1], 1, weight.shape[2])
        strides, pads, dilations, sizes = (
            (1, *strides), (0, *pads), (1, *dilations), (1, *sizes)
        )  # fmt: skip
    geometry: ConvGeometry = (strides, tuple((p, p) for p in pads), dilations, groups)
    out_shape = (x.shape[0], weight.shape[1] * groups, *sizes)
    checked_output_shape(op, out_shape, weight.shape, geometry)
    out = Conv2dInputGradBackward.apply(x, weight, size=out_shape, geometry=geometry)
    if dims == 1:
        out = out.reshape(out.shape[0], out.shape[1], out.shape[3])
    out = _with_bias(op, out, bias)
    return out.reshape(out.shape[1:]) if unbatched else out


def conv_transpose2d(
    input: Tensor,  # noqa: A002  (PyTorch's name)
    weight: Tensor,
    bias: Tensor | None = None,
    stride: int | tuple[int, int] = 1,
    padding: int | tuple[int, int] = 0,
    output_padding: int | tuple[int, int] = 0,
    groups: int = 1,
    dilation: int | tuple[int, int] = 1,
) -> Tensor:
    r"""2-d transposed convolution of ``input`` ``(N, C_in, H, W)`` (or unbatched) with
    ``weight`` ``(C_in, C_out/groups, kH, kW)``, plus ``bias`` ``(C_out,)``, as
    ``torch.nn.functional.conv_transpose2d`` (note PyTorch's order: ``groups`` before
    ``dilation``).

    Each input element scatters its products with the kernel to the output positions
    :math:`i s - p + k d`; the output has size
    :math:`(H - 1) s - 2 p + d (k_H - 1) + \text{output\_padding} + 1` per axis. It is the
    gradient of :func:`~pylucid.ops.convolution.conv2d` with respect to its input, and its
    own gradients are a convolution (input) and a weight gradient of one.
    """
    return _transposed("conv_transpose2d", input, weight, bias, stride, padding,
                       output_padding, groups, dilation, 2)  # fmt: skip


def conv_transpose1d(
    input: Tensor,  # noqa: A002  (PyTorch's name)
    weight: Tensor,
    bias: Tensor | None = None,
    stride: int | tuple[int] = 1,
    padding: int | tuple[int] = 0,
    output_padding: int | tuple[int] = 0,
    groups: int = 1,
    dilation: int | tuple[int] = 1,
) -> Tensor:
    """1-d transposed convolution of ``input`` ``(N, C_in, L)`` (or ``(C_in, L)``) with
    ``weight`` ``(C_in, C_out/groups, k)``, as ``torch.nn.functional.conv_transpose1d``: the
    2-d one of height 1 (:func:`conv_transpose2d`)."""
    return _transposed("conv_transpose1d", input, weight, bias, stride, padding,
                       output_padding, groups, dilation, 1)  # fmt: skip


def transposed_output_padding(
    op: str, input_shape: tuple[int, ...], output_size: Any, stride: tuple[int, ...],
    padding: tuple[int, ...], kernel: tuple[int, ...], dilation: tuple[int, ...],
) -> tuple[int, ...]:  # fmt: skip
    """The ``output_padding`` that makes a transposed convolution's output the spatial
    ``output_size`` (the last ``len(kernel)`` entries of a full size are taken), or a
    ValueError when it lies outside ``[smallest, smallest + stride - 1]``."""
    dims = len(kernel)
    wanted = tuple(output_size)
    if len(wanted) not in (dims, dims + 2):
        raise ValueError(f"{op}: output_size must have {dims} or {dims + 2} elements, got "
                         f"{wanted!r}")  # fmt: skip
    wanted = wanted[-dims:]
    extra = []
    for a in range(dims):
        smallest = (
            (input_shape[-dims + a] - 1) * stride[a] - 2 * padding[a]
            + dilation[a] * (kernel[a] - 1) + 1
        )  # fmt: skip
        if not smallest <= wanted[a] < smallest + stride[a]:
            raise ValueError(
                f"{op}: requested an output size of {wanted}, but valid sizes on axis {a} "
                f"range from {smallest} to {smallest + stride[a] - 1} (for an input of "
                f"shape {tuple(input_shape)})"
            )
        extra.append(wanted[a] - smallest)
    return tuple(extra)


def conv3d(
    input: Tensor,  # noqa: A002  (PyTorch's name)
    weight: Tensor,
    bias: Tensor | None = None,
    stride: int | tuple[int, int, int] = 1,
    padding: int | tuple[int, int, int] | str = 0,
    dilation: int | tuple[int, int, int] = 1,
    groups: int = 1,
) -> Tensor:
    """3-d convolution of ``input`` ``(N, C, D, H, W)`` (or ``(C, D, H, W)``) with
    ``weight`` ``(O, C/groups, kD, kH, kW)``, plus ``bias`` ``(O,)``, as
    ``torch.nn.functional.conv3d`` (``padding``: ints, ``"valid"`` or ``"same"``).

    A sum over the kernel's depth taps of 2-d convolutions of strided depth slices (see the
    module's docstring), so its gradients are those of :func:`conv2d`, slicing and sums.
    """
    op = "conv3d"
    require_tensor(op, "input", input)
    require_tensor(op, "weight", weight)
    if weight.ndim != 5:
        raise ValueError(f"{op}: expected a 5-d weight (O, C/groups, kD, kH, kW), got shape "
                         f"{weight.shape}")  # fmt: skip
    x, unbatched = with_batch_axis(op, input, 3)
    strides = as_ints(op, "stride", stride, 3)
    dilations = as_ints(op, "dilation", dilation, 3)
    _positive(op, stride=strides, dilation=dilations)
    depth_kernel, (sd, sh, sw), (dd, dh, dw) = weight.shape[2], strides, dilations
    planar: Any  # (the 2-d convolutions' padding)
    if padding == "valid":
        depth_pads, planar = (0, 0), 0
    elif padding == "same":
        if max(strides) != 1:
            raise ValueError(f"{op}: padding='same' needs stride 1, got stride={strides}")
        total = dd * (depth_kernel - 1)
        depth_pads, planar = (total // 2, total - total // 2), "same"
    elif isinstance(padding, str):
        raise ValueError(f"{op}: padding must be 'valid', 'same', or ints, got {padding!r}")
    else:
        pads = as_ints(op, "padding", padding, 3)
        if min(pads) < 0:
            raise ValueError(f"{op}: padding must be non-negative, got {pads}")
        depth_pads, planar = (pads[0], pads[0]), pads[1:]
    if x.shape[1] != weight.shape[1] * groups:
        raise ValueError(
            f"{op}: input of shape {input.shape} has {x.shape[1]} channels; the weight of "
            f"shape {weight.shape} with groups={groups} expects {weight.shape[1] * groups}"
        )
    if any(depth_pads):
        x = pad(x, (0, 0, 0, 0, *depth_pads))
    n, c, depth, h, w = x.shape
    span = dd * (depth_kernel - 1) + 1
    if span > depth:
        raise ValueError(
            f"{op}: the kernel spans {span} elements in depth (dilation {dd}), more than the "
            f"padded input's {depth} (input of shape {input.shape})"
        )
    out_depth = (depth - span) // sd + 1
    out = None
    for kd in range(depth_kernel):
        start = kd * dd
        planes = x[:, :, start : start + (out_depth - 1) * sd + 1 : sd]
        planes = planes.permute(0, 2, 1, 3, 4).reshape(n * out_depth, c, h, w)
        term = conv2d(planes, weight[:, :, kd], None, (sh, sw), planar, (dh, dw), groups)
        out = term if out is None else out + term
    o, oh, ow = out.shape[1:]
    out = out.reshape(n, out_depth, o, oh, ow).permute(0, 2, 1, 3, 4)
    out = _with_bias(op, out, bias)
    return out.reshape(out.shape[1:]) if unbatched else out
