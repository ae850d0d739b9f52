"""2-d convolution (and 1-d as a 2-d one of height 1), with PyTorch's arguments.

Public: conv1d, conv2d (also in :mod:`pylucid.nn.functional`).

A convolution is bilinear in its input and weight, and so are its two gradients, which are
convolutions themselves. Three ops close the family under differentiation, so gradients of
any order are ops with kernels:

- :class:`Conv2dBackward` ``y = conv(x, w)``;
- :class:`Conv2dInputGradBackward` ``x' = conv_x^T(g, w)`` (the transposed convolution);
- :class:`Conv2dWeightGradBackward` ``w' = conv_w^T(x, g)``.

Their geometry is one parameter, ``(stride, padding, dilation, groups)`` with the padding
before and after each axis (``padding="same"`` pads an even kernel one more after, as
PyTorch). AMP: PROMOTE (under autocast the inputs are cast to the autocast dtype, as
PyTorch's autocast does for convolutions).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pylucid.backends.base import Backend, ConvGeometry, Shape
from pylucid.dtypes import DType
from pylucid.ops.base import Op
from pylucid.ops.schema import AmpPolicy, OpSchema
from pylucid.ops.wrapping import require_tensor
from pylucid.tensor import Tensor

__all__ = [
    "Conv2dBackward",
    "Conv2dInputGradBackward",
    "Conv2dWeightGradBackward",
    "as_ints",
    "checked_output_shape",
    "conv1d",
    "conv2d",
    "conv_output_size",
    "with_batch_axis",
]


def conv_output_size(
    size: int, kernel: int, stride: int, before: int, after: int, dilation: int
) -> int:
    """The number of positions of a kernel of ``kernel`` taps dilated by ``dilation``, moved
    by ``stride`` over ``size`` elements padded by ``before`` and ``after`` (PyTorch's rule)."""
    return (size + before + after - dilation * (kernel - 1) - 1) // stride + 1


def _same_dtype(op: str, names: Sequence[str], dtypes: Sequence[DType]) -> DType:
    first = dtypes[0]
    if not first.is_floating_point:
        raise TypeError(f"{op}: expected a floating-point {names[0]}, got {first.name}")
    for name, dtype in zip(names[1:], dtypes[1:]):
        if dtype is not first:
            raise TypeError(
                f"{op}: {names[0]} is {first.name} but {name} is {dtype.name}; expected one "
                f"dtype (convert one with .to())"
            )
    return first


def checked_output_shape(op: str, x: Shape, w: Shape, geometry: ConvGeometry) -> Shape:
    """The output shape of a convolution of input ``x`` ``(N, C, *spatial)`` with weight
    ``w`` ``(O, C/groups, *kernel)``, or a ValueError naming ``op`` and the shapes; the
    last ``len(spatial)`` axes of ``geometry`` are the spatial axes'.

    As PyTorch's, the batch and the input channels may be empty (the output is empty, or
    zeros), but not the input's spatial axes, the kernel, or the output channels."""
    spatial = len(x) - 2
    if spatial < 1 or len(w) != len(x):
        raise ValueError(
            f"{op}: expected an input (N, C, *spatial) and a weight (O, C/groups, *kernel) "
            f"of {len(x)} dimensions, got input of shape {tuple(x)} and weight of shape "
            f"{tuple(w)}"
        )
    stride, padding, dilation, groups = geometry
    if w[0] < groups or min(w[2:]) < 1:
        raise ValueError(
            f"{op}: weight of shape {tuple(w)} has no elements to convolve with: expected at "
            f"least groups={groups} output channels and a kernel of at least 1 tap per axis"
        )
    if min(x[2:]) < 1:
        raise ValueError(
            f"{op}: input of shape {tuple(x)} is empty in a spatial axis; only the batch and "
            f"the channels may be empty"
        )
    if x[1] != w[1] * groups or w[0] % groups:
        raise ValueError(
            f"{op}: input of shape {tuple(x)} has {x[1]} channels and weight of shape "
            f"{tuple(w)} has {w[0]} output channels; with groups={groups} expected "
            f"{w[1] * groups} input channels and a multiple of {groups} output channels"
        )
    out = []
    for axis in range(spatial):
        at = len(stride) - spatial + axis
        size, kernel, (before, after) = x[2 + axis], w[2 + axis], padding[at]
        span = dilation[at] * (kernel - 1) + 1
        if span > size + before + after:
            raise ValueError(
                f"{op}: the kernel of shape {tuple(w[2:])} (dilation {dilation[at]}) spans "
                f"{span} elements on axis {2 + axis}, more than the padded input's "
                f"{size + before + after} (input of shape {tuple(x)}, padding "
                f"{tuple(padding[at])} there)"
            )
        out.append(conv_output_size(size, kernel, stride[at], before, after, dilation[at]))
    return (x[0], w[0], *out)


class _ConvolutionOp(Op):
    """What the three ops share: the schema's policy, one dtype for both inputs."""

    @classmethod
    def compute_dtype(cls, dtypes: Sequence[DType], **params: Any) -> DType:
        return _same_dtype(cls.schema_v1.name, cls.input_names, dtypes)


class Conv2dBackward(_ConvolutionOp):
    r"""Autograd node of 2-d convolution (PyTorch's cross-correlation); saves ``input`` and
    ``weight``.

    For ``x`` ``(N, C, H, W)`` and ``w`` ``(O, C/G, KH, KW)`` in ``G`` groups, output
    channel ``o`` of group ``G(o)``:

    .. math::
        y_{n,o,i,j} = \sum_{c \in G(o)} \sum_{k,l}
            w_{o,c,k,l}\, x_{n,c,\, i s_h - p_h + k d_h,\; j s_w - p_w + l d_w}

    (padding reads 0). It is linear in each argument, so

    .. math::
        \frac{\partial L}{\partial x} = \operatorname{conv}_x^{\top}(g, w), \qquad
        \frac{\partial L}{\partial w_{o,c,k,l}} =
            \sum_{n,i,j} g_{n,o,i,j}\, x_{n,c,\, i s_h - p_h + k d_h,\; j s_w - p_w + l d_w}

    the transposed convolution (:class:`Conv2dInputGradBackward`) and the correlation of
    the input with the gradient (:class:`Conv2dWeightGradBackward`).
    """

    schema_v1 = OpSchema(
        name="conv2d",
        amp_policy=AmpPolicy.PROMOTE,
        input_arity=2,
        saved=("input", "weight"),
    )
    input_names = ("input", "weight")

    @classmethod
    def output_shape(cls, shapes: Sequence[Shape], *, geometry: ConvGeometry) -> Shape:
        return checked_output_shape("conv2d", *shapes, geometry)

    @staticmethod
    def dispatch(
        be: Backend, x: Any, w: Any, shape: Shape, dtype: DType, geometry: ConvGeometry
    ) -> Any:
        return be.conv2d(x, w, geometry, shape, dtype)

    def grad_formula(self, g: Any) -> tuple[Any, Any]:
        be, (x_shape, w_shape) = self.backend, self.input_shapes
        needs_x, needs_w = self.needs_input_grad
        x, w = self.saved["input"], self.saved["weight"]
        gx = be.conv2d_input_grad(g, w, self.geometry, x_shape, self.dtype) if needs_x else None
        gw = be.conv2d_weight_grad(x, g, self.geometry, w_shape, self.dtype) if needs_w else None
        return gx, gw

    def grad_graph(self, g: Tensor) -> tuple[Tensor, Tensor]:
        x, w = self.saved_tensor("input"), self.saved_tensor("weight")
        x_shape, w_shape = self.input_shapes
        return (
            Conv2dInputGradBackward.apply(g, w, size=x_shape, geometry=self.geometry),
            Conv2dWeightGradBackward.apply(x, g, size=w_shape, geometry=self.geometry),
        )


class Conv2dInputGradBackward(_ConvolutionOp):
    r"""Autograd node of the transposed convolution ``x' = conv_x^T(g, w)`` that is the
    input gradient of :class:`Conv2dBackward` (an input of shape ``size``); saves
    ``grad_output`` and ``weight``.

    It is linear in each argument, the adjoint of ``x -> conv(x, w)``, so for an incoming
    gradient ``u`` (of the input's shape):

    .. math::
        \frac{\partial L}{\partial g} = \operatorname{conv}(u, w), \qquad
        \frac{\partial L}{\partial w} = \operatorname{conv}_w^{\top}(u, g)
    """

    schema_v1 = OpSchema(
        name="conv2d_input_grad",
        amp_policy=AmpPolicy.PROMOTE,
        input_arity=2,
        saved=("grad_output", "weight"),
        internal=True,
    )
    input_names = ("grad_output", "weight")

    @classmethod
    def output_shape(cls, shapes: Sequence[Shape], *, size: Shape, geometry: ConvGeometry) -> Shape:
        return size

    @staticmethod
    def dispatch(
        be: Backend, g: Any, w: Any, shape: Shape, dtype: DType, size: Shape,
        geometry: ConvGeometry,
    ) -> Any:  # fmt: skip
        return be.conv2d_input_grad(g, w, geometry, shape, dtype)

    def grad_formula(self, u: Any) -> tuple[Any, Any]:
        be, (g_shape, w_shape) = self.backend, self.input_shapes
        needs_g, needs_w = self.needs_input_grad
        g, w = self.saved["grad_output"], self.saved["weight"]
        dg = be.conv2d(u, w, self.geometry, g_shape, self.dtype) if needs_g else None
        dw = be.conv2d_weight_grad(u, g, self.geometry, w_shape, self.dtype) if needs_w else None
        return dg, dw

    def grad_graph(self, u: Tensor) -> tuple[Tensor, Tensor]:
        g, w = self.saved_tensor("grad_output"), self.saved_tensor("weight")
        return (
            Conv2dBackward.apply(u, w, geometry=self.geometry),
            Conv2dWeightGradBackward.apply(u, g, size=self.input_shapes[1], geometry=self.geometry),
        )


class Conv2dWeightGradBackward(_ConvolutionOp):
    r"""Autograd node of ``w' = conv_w^T(x, g)``, the weight gradient of
    :class:`Conv2dBackward` (a weight of shape ``size``); saves ``input`` and
    ``grad_output``.

    It is bilinear, :math:`\langle u, \operatorname{conv}_w^{\top}(x, g)\rangle =
    \langle \operatorname{conv}(x, u), g\rangle`, so for an incoming gradient ``u`` (of
    the weight's shape):

    .. math::
        \frac{\partial L}{\partial x} = \operatorname{conv}_x^{\top}(g, u), \qquad
        \frac{\partial L}{\partial g} = \operatorname{conv}(x, u)
    """

    schema_v1 = OpSchema(
        name="conv2d_weight_grad",
        amp_policy=AmpPolicy.PROMOTE,
        input_arity=2,
        saved=("input", "grad_output"),
        internal=True,
    )
    input_names = ("input", "grad_output")

    @classmethod
    def output_shape(cls, shapes: Sequence[Shape], *, size: Shape, geometry: ConvGeometry) -> Shape:
        return size

    @staticmethod
    def dispatch(
        be: Backend, x: Any, g: Any, shape: Shape, dtype: DType, size: Shape,
        geometry: ConvGeometry,
    ) -> Any:  # fmt: skip
        return be.conv2d_weight_grad(x, g, geometry, shape, dtype)

    def grad_formula(self, u: Any) -> tuple[Any, Any]:
        be, (x_shape, g_shape) = self.backend, self.input_shapes
        needs_x, needs_g = self.needs_input_grad
        x, g = self.saved["input"], self.saved["grad_output"]
        dx = be.conv2d_input_grad(g, u, self.geometry, x_shape, self.dtype) if needs_x else None
        dg = be.conv2d(x, u, self.geometry, g_shape, self.dtype) if needs_g else None
        return dx, dg

    def grad_graph(self, u: Tensor) -> tuple[Tensor, Tensor]:
        x, g = self.saved_tensor("input"), self.saved_tensor("grad_output")
        return (
            Conv2dInputGradBackward.apply(g, u, size=self.input_shapes[0], geometry=self.geometry),
            Conv2dBackward.apply(x, u, geometry=self.geometry),
        )


def as_ints(op: str, name: str, value: Any, count: int) -> tuple[int, ...]:
    """An int or a sequence of ``count`` ints, as a tuple of ``count`` ints."""
    values = (value,) * count if isinstance(value, int) else tuple(value)
    if len(values) != count or not all(type(v) is int for v in values):
        raise TypeError(f"{op}: {name} must be an int or {count} ints, got {value!r}")
    return values


def _geometry(
    op: str,
    kernel: Sequence[int],
    stride: Any,
    padding: Any,
    dilation: Any,
    groups: int,
) -> ConvGeometry:
    """The geometry of a convolution with PyTorch's arguments, checked (``count`` axes)."""
    count = len(kernel)
    strides = as_ints(op, "stride", stride, count)
    dilations = as_ints(op, "dilation", dilation, count)
    if isinstance(groups, bool) or not isinstance(groups, int) or groups < 1:
        raise ValueError(f"{op}: groups must be a positive int, got {groups!r}")
    if min(strides) < 1 or min(dilations) < 1:
        raise ValueError(
            f"{op}: stride and dilation must be positive, got stride={strides}, "
            f"dilation={dilations}"
        )
    if padding == "valid":
        pads = tuple((0, 0) for _ in kernel)
    elif padding == "same":
        if max(strides) != 1:
            raise ValueError(f"{op}: padding='same' needs stride 1, got stride={strides}")
        totals = [d * (k - 1) for k, d in zip(kernel, dilations)]
        pads = tuple((t // 2, t - t // 2) for t in totals)
    elif isinstance(padding, str):
        raise ValueError(f"{op}: padding must be 'valid', 'same', or ints, got {padding!r}")
    else:
        amounts = as_ints(op, "padding", padding, count)
        if min(amounts) < 0:
            raise ValueError(f"{op}: padding must be non-negative, got {amounts}")
        pads = tuple((p, p) for p in amounts)
    if count == 1:  # a 1-d convolution is a 2-d one of height 1
        return (1, strides[0]), ((0, 0), pads[0]), (1, dilations[0]), groups
    return strides, pads, dilations, groups


def _with_bias(op: str, out: Tensor, bias: Tensor | None, spatial: int) -> Tensor:
    if bias is None:
        return out
    require_tensor(op, "bias", bias)
    if bias.shape != (out.shape[1],):
        raise ValueError(
            f"{op}: bias of shape {bias.shape} does not fit {out.shape[1]} output channels: "
            f"expected shape ({out.shape[1]},)"
        )
    return out + bias.reshape((1, out.shape[1]) + (1,) * spatial)


def with_batch_axis(op: str, input: Tensor, spatial: int) -> tuple[Tensor, bool]:  # noqa: A002
    """``input`` with a batch axis, and whether one was added (an unbatched input)."""
    if input.ndim == spatial + 1:
        return input.reshape((1, *input.shape)), True
    if input.ndim != spatial + 2:
        raise ValueError(
            f"{op}: expected a {spatial + 1}-d (unbatched) or {spatial + 2}-d (batched) "
            f"input, got shape {input.shape}"
        )
    return input, False


def conv2d(
    input: Tensor,  # noqa: A002  (PyTorch's name)
    weight: Tensor,
    bias: Tensor | None = None,
    stride: int | tuple[int, int] = 1,
    padding: int | tuple[int, int] | str = 0,
    dilation: int | tuple[int, int] = 1,
    groups: int = 1,
) -> Tensor:
    """2-d convolution of ``input`` ``(N, C, H, W)`` (or ``(C, H, W)``) with ``weight``
    ``(O, C/groups, KH, KW)``, plus ``bias`` ``(O,)``, as ``torch.nn.functional.conv2d``.

    ``padding`` is an int, a pair, ``"valid"`` (none) or ``"same"`` (the output as large as
    the input; stride 1). See :class:`Conv2dBackward` for the math and the gradients.
    """
    require_tensor("conv2d", "input", input)
    require_tensor("conv2d", "weight", weight)
    if weight.ndim != 4:
        raise ValueError(
            f"conv2d: expected a 4-d weight (O, C/groups, KH, KW), got shape {weight.shape}"
        )
    x, unbatched = with_batch_axis("conv2d", input, 2)
    geometry = _geometry("conv2d", weight.shape[2:], stride, padding, dilation, groups)
    out = _with_bias("conv2d", Conv2dBackward.apply(x, weight, geometry=geometry), bias, 2)
    return out.reshape(out.shape[1:]) if unbatched else out


def conv1d(
    input: Tensor,  # noqa: A002  (PyTorch's name)
    weight: Tensor,
    bias: Tensor | None = None,
    stride: int | tuple[int] = 1,
    padding: int | tuple[int] | str = 0,
    dilation: int | tuple[int] = 1,
    groups: int = 1,
) -> Tensor:
    """1-d convolution of ``input`` ``(N, C, L)`` (or ``(C, L)``) with ``weight``
    ``(O, C/groups, K)``, plus ``bias`` ``(O,)``, as ``torch.nn.functional.conv1d``: the 2-d
    convolution of height 1 (:class:`Conv2dBackward`)."""
    require_tensor("conv1d", "input", input)
    require_tensor("conv1d", "weight", weight)
    if weight.ndim != 3:
        raise ValueError(
            f"conv1d: expected a 3-d weight (O, C/groups, K), got shape {weight.shape}"
        )
    x, unbatched = with_batch_axis("conv1d", input, 1)
    geometry = _geometry("conv1d", weight.shape[2:], stride, padding, dilation, groups)
    checked_output_shape("conv1d", x.shape, weight.shape, geometry)
    n, c, length = x.shape
    o, cg, k = weight.shape
    out = Conv2dBackward.apply(
        x.reshape((n, c, 1, length)), weight.reshape((o, cg, 1, k)), geometry=geometry
    )
    out = _with_bias("conv1d", out.reshape((n, o, out.shape[3])), bias, 1)
    return out.reshape(out.shape[1:]) if unbatched else out
