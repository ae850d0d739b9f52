"""Normalisation layers as functions, with PyTorch's arguments: layer norm and batch norm.

Public: layer_norm, batch_norm (in :mod:`pylucid.nn.functional`).

``layer_norm`` is one op with its own kernels (:class:`LayerNormBackward`: on the CPU a
Numba row kernel forward and one backward computing the three gradients). ``batch_norm``
is one op too (:class:`BatchNormBackward`: on the CPU Numba channel kernels, a forward
pass and a two-pass backward), normalising by per-channel statistics it takes as an input:
in training those of the batch, from the internal op ``batch_norm_stats``
(:class:`BatchNormStatsBackward`, float64, computed once and saved for the backward), which
also update the running statistics in place, as PyTorch does; in evaluation the running
ones.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from pylucid.backends.base import Backend, Shape
from pylucid.dtypes import DType, float64
from pylucid.factories import ones, zeros
from pylucid.graph.grad_mode import no_grad
from pylucid.ops.base import Op
from pylucid.ops.schema import AmpPolicy, OpSchema
from pylucid.ops.shape import stack
from pylucid.ops.wrapping import lift, require_tensor
from pylucid.tensor import Tensor

__all__ = [
    "BatchNormBackward",
    "BatchNormStatsBackward",
    "LayerNormBackward",
    "batch_norm",
    "layer_norm",
]


def _require_floating(op: str, dtype: DType) -> None:
    if not dtype.is_floating_point:
        raise TypeError(f"{op}: expected a floating-point input, got {dtype.name}")


class LayerNormBackward(Op):
    r"""Autograd node of layer normalisation over the trailing ``normalized_shape`` (``D``
    elements per row); saves ``input`` and ``weight``.

    With the row's mean :math:`\mu`, biased variance :math:`\sigma^2`,
    :math:`r = (\sigma^2 + \varepsilon)^{-1/2}` and :math:`\hat x = (x - \mu) r`:

    .. math::
        y = \hat x\, w + b, \qquad
        \frac{\partial L}{\partial x} = r \left(h - \overline{h} - \hat x\, \overline{h \hat x}
        \right),\ h = g w, \qquad
        \frac{\partial L}{\partial w} = \sum_{\text{rows}} g \hat x, \qquad
        \frac{\partial L}{\partial b} = \sum_{\text{rows}} g

    (bars: means over the row). AMP: FORCE_FP32, as on PyTorch's autocast list.
    """

    schema_v1 = OpSchema(
        name="layer_norm",
        amp_policy=AmpPolicy.FORCE_FP32,
        input_arity=3,
        saved=("input", "weight"),
    )
    input_names = ("input", "weight", "bias")

    @classmethod
    def output_shape(cls, shapes: Sequence[Shape], *, normalized_shape: Shape, eps: float) -> Shape:
        x, w, b = shapes
        count = len(normalized_shape)
        if tuple(x[len(x) - count :]) != normalized_shape or len(x) < count:
            raise ValueError(
                f"layer_norm: normalized_shape {normalized_shape} is not the trailing shape of "
                f"the input of shape {tuple(x)}"
            )
        if tuple(w) != normalized_shape or tuple(b) != normalized_shape:
            raise ValueError(
                f"layer_norm: weight of shape {tuple(w)} and bias of shape {tuple(b)} must "
                f"have the normalized_shape {normalized_shape}"
            )
        return tuple(x)

    @classmethod
    def compute_dtype(cls, dtypes: Sequence[DType], **params: Any) -> DType:
        _require_floating(cls.schema_v1.name, dtypes[0])
        return super().compute_dtype(dtypes)

    @staticmethod
    def dispatch(
        be: Backend,
        x: Any,
        w: Any,
        b: Any,
        shape: Shape,
        dtype: DType,
        normalized_shape: Shape,
        eps: float,
    ) -> Any:
        return be.layer_norm(x, w, b, math.prod(normalized_shape), eps, dtype)

    def grad_formula(self, g: Any) -> tuple[Any, Any, Any]:
        be = self.backend
        x, w = self.saved["input"], self.saved["weight"]
        dx, dw, db = be.layer_norm_backward(
            x, w, g, math.prod(self.normalized_shape), self.eps, self.dtype
        )
        return (
            be.reshape(dx, self.input_shapes[0]),
            be.reshape(dw, self.normalized_shape),
            be.reshape(db, self.normalized_shape),
        )

    def grad_graph(self, g: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        x, w = self.saved_tensor("input"), self.saved_tensor("weight")
        axes = tuple(range(x.ndim - len(self.normalized_shape), x.ndim))
        rows = tuple(range(x.ndim - len(self.normalized_shape)))
        centred = x - x.mean(axis=axes, keepdims=True)
        rstd = ((centred * centred).mean(axis=axes, keepdims=True) + self.eps).rsqrt()
        xhat = centred * rstd
        h = g * w
        dx = rstd * (
            h - h.mean(axis=axes, keepdims=True) - xhat * (h * xhat).mean(axis=axes, keepdims=True)
        )
        return dx, (g * xhat).sum(axis=rows), g.sum(axis=rows)


def _shape(op: str, value: Any) -> Shape:
    shape = (value,) if isinstance(value, int) else tuple(value)
    if not shape or not all(type(n) is int and n >= 0 for n in shape):
        raise ValueError(f"{op}: normalized_shape must be non-negative ints, got {value!r}")
    return shape


def layer_norm(
    input: Tensor,  # noqa: A002  (PyTorch's name)
    normalized_shape: int | Sequence[int],
    weight: Tensor | None = None,
    bias: Tensor | None = None,
    eps: float = 1e-5,
) -> Tensor:
    """Layer normalisation of ``input`` over its trailing ``normalized_shape``, then
    ``* weight + bias`` (each of that shape, or None), as
    ``torch.nn.functional.layer_norm``; see :class:`LayerNormBackward`."""
    require_tensor("layer_norm", "input", input)
    shape = _shape("layer_norm", normalized_shape)
    device = input.device
    if weight is None:
        weight = ones(shape, dtype=input.dtype, device=device)
    if bias is None:
        bias = zeros(shape, dtype=input.dtype, device=device)
    require_tensor("layer_norm", "weight", weight)
    require_tensor("layer_norm", "bias", bias)
    return LayerNormBackward.apply(input, weight, bias, normalized_shape=shape, eps=float(eps))


def _channel_shape(x: Tensor) -> tuple[int, ...]:
    """The shape that broadcasts a per-channel ``(C,)`` tensor against ``x`` ``(N, C, ...)``."""
    return (1, x.shape[1]) + (1,) * (x.ndim - 2)


class BatchNormStatsBackward(Op):
    """The internal op ``batch_norm_stats``: the ``(2, C)`` float64 mean and biased variance
    of each channel of an ``(N, C, ...)`` input, over every axis but 1 (on the CPU the
    corrected two-pass algorithm in float64: exact for data of any mean). Not
    differentiable: :class:`BatchNormBackward` differentiates through it. AMP: FORCE_FP32."""

    schema_v1 = OpSchema(
        name="batch_norm_stats",
        amp_policy=AmpPolicy.FORCE_FP32,
        differentiable=False,
        internal=True,
    )
    input_names = ("input",)

    @classmethod
    def output_shape(cls, shapes: Sequence[Shape], **params: Any) -> Shape:
        return (2, shapes[0][1])

    @classmethod
    def compute_dtype(cls, dtypes: Sequence[DType], **params: Any) -> DType:
        _require_floating(cls.schema_v1.name, dtypes[0])
        return super().compute_dtype(dtypes)

    @classmethod
    def result_dtype(cls, compute_dtype: DType) -> DType:
        return float64

    @staticmethod
    def dispatch(be: Backend, x: Any, shape: Shape, dtype: DType) -> Any:
        return be.batch_norm_stats(x, dtype)


class BatchNormBackward(Op):
    r"""Autograd node of batch normalisation of an ``(N, C, ...)`` input per channel by the
    ``(2, C)`` ``stats`` (mean, biased variance); saves ``input``, ``weight`` and ``stats``.
    ``weight`` and ``bias`` are ``(C,)``, or 0-d for one value for every channel (1 and 0
    where :func:`batch_norm` is given None).

    With the channel's :math:`\mu` and :math:`\sigma^2`,
    :math:`r = (\sigma^2 + \varepsilon)^{-1/2}` and :math:`\hat x = (x - \mu) r`:

    .. math::
        y = \hat x\, w + b, \qquad
        \frac{\partial L}{\partial x} = w r \left(g - \overline{g} - \hat x\,
        \overline{g \hat x}\right), \qquad
        \frac{\partial L}{\partial w} = \sum g \hat x, \qquad
        \frac{\partial L}{\partial b} = \sum g

    (bars: means, and sums, over the channel's :math:`N \cdot \prod` spatial values). That
    is the gradient in ``training``, where ``stats`` are the batch's own
    (:class:`BatchNormStatsBackward` of ``input``: an input of the op only to carry them,
    computed once, and differentiated through here); in evaluation they are constants (the
    running statistics) and :math:`\partial L / \partial x = w r g`. ``stats`` gets no
    gradient, as PyTorch's running statistics. AMP: FORCE_FP32, as on PyTorch's autocast
    list.
    """

    schema_v1 = OpSchema(
        name="batch_norm",
        amp_policy=AmpPolicy.FORCE_FP32,
        input_arity=4,
        saved=("input", "weight", "stats"),
    )
    input_names = ("input", "weight", "bias", "stats")
    uncast_inputs = frozenset({"stats"})

    @classmethod
    def output_shape(cls, shapes: Sequence[Shape], *, eps: float, training: bool) -> Shape:
        x, w, b, stats = shapes
        channels = x[1]
        for name, shape in (("weight", w), ("bias", b)):
            if tuple(shape) not in ((channels,), ()):
                raise ValueError(
                    f"batch_norm: {name} of shape {tuple(shape)} does not fit {channels} "
                    f"channels of the input of shape {tuple(x)}: expected ({channels},)"
                )
        if tuple(stats) != (2, channels):
            raise ValueError(f"batch_norm: stats of shape {tuple(stats)}, expected (2, {channels})")
        return tuple(x)

    @classmethod
    def compute_dtype(cls, dtypes: Sequence[DType], **params: Any) -> DType:
        _require_floating(cls.schema_v1.name, dtypes[0])
        return super().compute_dtype(dtypes[:3])  # (the stats keep their own dtype)

    @staticmethod
    def dispatch(
        be: Backend,
        x: Any,
        w: Any,
        b: Any,
        stats: Any,
        shape: Shape,
        dtype: DType,
        eps: float,
        training: bool,
    ) -> Any:
        return be.batch_norm(x, w, b, stats, eps, dtype)

    def grad_formula(self, g: Any) -> tuple[Any, Any, Any, None]:
        needs_x, needs_w, needs_b, _ = self.needs_input_grad
        dx, dw, db = self.backend.batch_norm_backward(
            self.saved["input"], self.saved["weight"], self.saved["stats"], g, self.eps,
            self.training, needs_x, needs_w or needs_b, self.dtype,
        )  # fmt: skip
        return dx, dw if needs_w else None, db if needs_b else None, None

    def grad_graph(self, g: Tensor) -> tuple[Tensor, Tensor, Tensor, None]:
        x, w = self.saved_tensor("input"), self.saved_tensor("weight")
        broadcast = _channel_shape(x)
        axes = (0, *range(2, x.ndim))
        w = w.reshape(broadcast) if w.ndim else w
        if self.training:
            centred = x - x.mean(axis=axes, keepdims=True)
            var = (centred * centred).mean(axis=axes, keepdims=True)
        else:
            stats = self.saved_tensor("stats")
            centred = x - stats[0].reshape(broadcast)
            var = stats[1].reshape(broadcast)
        rstd = (var + self.eps).rsqrt()
        xhat = centred * rstd
        if self.training:
            inner = g - g.mean(axis=axes, keepdims=True)
            dx = w * rstd * (inner - xhat * (g * xhat).mean(axis=axes, keepdims=True))
        else:
            dx = g * w * rstd
        return dx, (g * xhat).sum(axis=axes), g.sum(axis=axes), None


def batch_norm(
    input: Tensor,  # noqa: A002  (PyTorch's name)
    running_mean: Tensor | None,
    running_var: Tensor | None,
    weight: Tensor | None = None,
    bias: Tensor | None = None,
    training: bool = False,
    momentum: float = 0.1,
    eps: float = 1e-5,
) -> Tensor:
    r"""Batch normalisation of ``(N, C, ...)`` ``input`` per channel, as
    ``torch.nn.functional.batch_norm``; see :class:`BatchNormBackward`.

    In training it normalises by the batch's mean and biased variance over every axis but
    1, and updates ``running_mean`` and ``running_var`` (where given) in place, without
    gradient: ``running = (1 - momentum) running + momentum batch``, the variance unbiased
    there. Otherwise it normalises by the running statistics, which must then be given.
    One value per channel in training raises (no variance), as in PyTorch; an empty batch
    gives an empty result and leaves the running statistics unchanged.

    .. math:: y = \frac{x - \mu}{\sqrt{\sigma^2 + \varepsilon}}\, w + b
    """
    require_tensor("batch_norm", "input", input)
    if input.ndim < 2:
        raise ValueError(f"batch_norm: expected an input (N, C, ...), got shape {input.shape}")
    channels = input.shape[1]
    for name, t in (("running_mean", running_mean), ("running_var", running_var),
                    ("weight", weight), ("bias", bias)):  # fmt: skip
        if t is not None:
            require_tensor("batch_norm", name, t)
            if t.shape != (channels,):
                raise ValueError(
                    f"batch_norm: {name} of shape {t.shape} does not fit {channels} channels "
                    f"of the input of shape {input.shape}: expected ({channels},)"
                )
    if not training and (running_mean is None or running_var is None):
        raise ValueError(
            "batch_norm: running_mean and running_var must be given when not training "
            "(training=False normalises by them)"
        )
    if training:
        count = input.numel() // channels if channels else 0
        if count == 1:
            raise ValueError(
                f"batch_norm: expected more than 1 value per channel when training, got "
                f"input of shape {input.shape}"
            )
        stats = BatchNormStatsBackward.apply(input)
        if count:  # (an empty batch leaves the running statistics as they are, as PyTorch)
            _update_running(running_mean, running_var, stats, count, momentum)
    else:
        stats = stack((running_mean, running_var))
    weight = lift("batch_norm", "weight", 1.0, input) if weight is None else weight
    bias = lift("batch_norm", "bias", 0.0, input) if bias is None else bias
    return BatchNormBackward.apply(
        input, weight, bias, stats, eps=float(eps), training=bool(training)
    )


def _update_running(
    running_mean: Tensor | None,
    running_var: Tensor | None,
    stats: Tensor,
    count: int,
    momentum: float,
) -> None:
    """``running = (1 - momentum) running + momentum batch`` in place, from the float64
    ``(2, C)`` batch ``stats`` (the variance made unbiased in float64)."""
    with no_grad():
        if running_mean is not None:
            batch = stats[0].to(running_mean.dtype)
            running_mean.mul_(1.0 - momentum).add_(batch * momentum)
        if running_var is not None:
            unbiased = (stats[1] * (count / (count - 1))).to(running_var.dtype)
            running_var.mul_(1.0 - momentum).add_(unbiased * momentum)
