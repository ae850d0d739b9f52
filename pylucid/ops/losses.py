"""Losses computed by their own kernels: cross entropy with class-index targets.

Public: cross_entropy (also :func:`pylucid.nn.functional.cross_entropy`, which adds class
probabilities as targets).

The input holds logits with the classes on axis 1 - ``(N, C)``, or ``(N, C, d1, ...)`` with
a target ``(N, d1, ...)`` - or on axis 0 for one example ``(C,)`` with a 0-d target, as in
PyTorch. On the CPU the forward and the backward are each one Numba row kernel
(:mod:`pylucid.kernels.losses`) over ``(rows, C)`` logits, the class axis moved last when it
is not; on MLX they are compositions of ``mlx.core`` ops. AMP: FORCE_FP32 (cross entropy is
on PyTorch's autocast float32 list).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from pylucid.backends.base import Backend, Shape
from pylucid.dtypes import DType, int32, int64
from pylucid.ops.base import Op
from pylucid.ops.schema import AmpPolicy, OpSchema
from pylucid.ops.wrapping import require_tensor
from pylucid.tensor import Tensor

__all__ = ["CrossEntropyBackward", "check_options", "checked_target_count", "cross_entropy"]

REDUCTIONS = ("none", "mean", "sum")


def _class_axis(ndim: int) -> int:
    return 0 if ndim == 1 else 1


def _to_rows(be: Backend, x: Any, shape: Shape) -> Any:
    """Logits of ``shape`` as ``(rows, C)``: the class axis moved last where it is not."""
    if len(shape) == 1:
        return be.reshape(x, (1, shape[0]))
    if len(shape) == 2:
        return x
    order = (0, *range(2, len(shape)), 1)
    return be.reshape(be.transpose(x, order), (math.prod(shape) // shape[1], shape[1]))


def _from_rows(be: Backend, rows: Any, shape: Shape) -> Any:
    """Undo :func:`_to_rows` for an array of the logits' layout."""
    if len(shape) <= 2:
        return be.reshape(rows, shape)
    moved = be.reshape(rows, (shape[0], *shape[2:], shape[1]))
    return be.transpose(moved, (0, len(shape) - 1, *range(1, len(shape) - 1)))


def checked_target_count(
    op: str, be: Backend, target: Any, shape: Shape, ignore_index: int
) -> int:
    """The number of class-index targets (storage) that are not ``ignore_index``, after
    checking that each of them is a class of the logits of ``shape`` (classes on axis 1,
    or axis 0 of a 1-d input)."""
    classes = shape[_class_axis(len(shape))]
    flat = be.reshape(target, (math.prod(be.shape(target)),))
    count, bad = be.check_targets(flat, classes, ignore_index)
    if bad >= 0:
        value = int(be.to_numpy(flat)[bad])
        raise IndexError(
            f"{op}: target {value} (at flat position {bad} of the target) is out of range "
            f"for input of shape {tuple(shape)} with {classes} classes: expected "
            f"0..{classes - 1}, or ignore_index={ignore_index}"
        )
    return count


def check_options(op: str, reduction: str, label_smoothing: float = 0.0) -> None:
    """Refuse a ``reduction`` other than none/mean/sum and a smoothing outside [0, 1]."""
    if reduction not in REDUCTIONS:
        raise ValueError(
            f"{op}: reduction must be one of {', '.join(REDUCTIONS)}, got {reduction!r}"
        )
    if not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(f"{op}: label_smoothing must be in [0, 1], got {label_smoothing}")


class CrossEntropyBackward(Op):
    r"""Autograd node of cross entropy with class-index targets and label smoothing;
    saves ``input`` and ``target``.

    For a row of logits :math:`x` (the classes of one example), target class :math:`t` and
    smoothing :math:`\varepsilon`, with :math:`q_j = (1-\varepsilon)[j = t] + \varepsilon / C`
    and :math:`\ell = \log \sum_j e^{x_j}`:

    .. math::
        L = \sum_j q_j (\ell - x_j)
          = (1-\varepsilon)(\ell - x_t) + \varepsilon\,(\ell - \bar{x}), \qquad
        \frac{\partial L}{\partial x_j} = \operatorname{softmax}(x)_j - q_j

    A row whose target is ``ignore_index`` has loss and gradient 0. ``reduction="mean"``
    divides the sum by the number of rows not ignored (NaN when every row is), ``"sum"``
    adds them (in the backend: in float64 on the CPU, rounded once), ``"none"`` keeps one
    loss per row; the incoming gradient of each row is scaled accordingly. The target gets
    no gradient.
    """

    schema_v1 = OpSchema(
        name="cross_entropy",
        amp_policy=AmpPolicy.FORCE_FP32,
        input_arity=2,
        saved=("input", "target"),
    )
    input_names = ("input", "target")
    uncast_inputs = frozenset({"target"})

    @classmethod
    def output_shape(
        cls,
        shapes: Sequence[Shape],
        *,
        ignore_index: int,
        label_smoothing: float,
        reduction: str,
    ) -> Shape:
        x, t = shapes
        if not x:
            raise ValueError("cross_entropy: the input must have a class axis, got a 0-d input")
        expected = () if len(x) == 1 else (x[0], *x[2:])
        if tuple(t) != expected:
            raise ValueError(
                f"cross_entropy: a target of shape {tuple(t)} does not fit input of shape "
                f"{tuple(x)}: expected {expected} (class indices), or {tuple(x)} (class "
                f"probabilities, a floating target)"
            )
        return tuple(t) if reduction == "none" else ()

    @classmethod
    def compute_dtype(cls, dtypes: Sequence[DType], **params: Any) -> DType:
        x, t = dtypes
        if not x.is_floating_point:
            raise TypeError(
                f"cross_entropy: expected floating-point logits, got {x.name}; convert them, "
                f"e.g. x.to(pylucid.float32)"
            )
        if t not in (int32, int64):
            raise TypeError(
                f"cross_entropy: expected class indices of dtype int64 (or int32) as target, "
                f"got {t.name}"
            )
        return x

    @staticmethod
    def dispatch(
        be: Backend,
        x: Any,
        target: Any,
        shape: Shape,
        dtype: DType,
        ignore_index: int,
        label_smoothing: float,
        reduction: str,
    ) -> Any:
        x_shape = be.shape(x)
        count = checked_target_count("cross_entropy", be, target, x_shape, ignore_index)
        rows = _to_rows(be, x, x_shape)
        flat = be.reshape(target, (be.shape(rows)[0],))
        divisor = {"none": None, "sum": 1.0, "mean": float(count)}[reduction]
        losses = be.cross_entropy(rows, flat, ignore_index, label_smoothing, divisor, dtype)
        return be.reshape(losses, shape) if reduction == "none" else losses

    def _divisor(self) -> float | None:
        """What the gradient of the reduced loss is divided by for each row (None: "none",
        one gradient per row)."""
        if self.reduction == "none":
            return None
        if self.reduction == "sum":
            return 1.0
        target, shape = self.saved["target"], self.input_shapes[0]
        return float(
            checked_target_count("cross_entropy", self.backend, target, shape, self.ignore_index)
        )

    def grad_formula(self, g: Any) -> tuple[Any, None]:
        be, x_shape = self.backend, self.input_shapes[0]
        rows = _to_rows(be, self.saved["input"], x_shape)
        count = be.shape(rows)[0]
        flat = be.reshape(self.saved["target"], (count,))
        divisor = self._divisor()
        grad = be.cross_entropy_backward(
            rows,
            flat,
            be.reshape(g, (count,)) if divisor is None else g,
            self.ignore_index,
            self.label_smoothing,
            divisor,
            self.dtype,
        )
        return _from_rows(be, grad, x_shape), None

    def grad_graph(self, g: Tensor) -> tuple[Tensor, None]:
        x = self.saved_tensor("input")
        target = self.saved.tensor("target").numpy().astype(np.int64)
        axis = _class_axis(x.ndim)
        classes = x.shape[axis]
        keep = target != self.ignore_index
        hot = np.moveaxis(np.eye(classes)[np.where(keep, target, 0)], -1, axis)
        q = (1.0 - self.label_smoothing) * hot + self.label_smoothing / classes
        mask = np.expand_dims(keep, axis).astype(np.float64)
        backend, dtype = x._backend, x.dtype
        q_t = Tensor._make(backend.from_numpy(q * mask, dtype), backend, dtype)
        mask_t = Tensor._make(backend.from_numpy(mask, dtype), backend, dtype)
        if self.reduction == "none":
            per_row = g.reshape(np.expand_dims(keep, axis).shape)
        else:
            count = int(keep.sum()) if self.reduction == "mean" else 1
            per_row = g / float(count) if self.reduction == "mean" else g
        return per_row * (x.softmax(axis=axis) * mask_t - q_t), None


def cross_entropy(
    input: Tensor,  # noqa: A002  (PyTorch's name)
    target: Tensor,
    ignore_index: int = -100,
    reduction: str = "mean",
    label_smoothing: float = 0.0,
) -> Tensor:
    """Cross entropy of logits ``input`` against class indices ``target``; see
    :class:`CrossEntropyBackward` for the shapes and the gradient, and
    :func:`pylucid.nn.functional.cross_entropy` for probabilities as targets."""
    require_tensor("cross_entropy", "input", input)
    require_tensor("cross_entropy", "target", target)
    check_options("cross_entropy", reduction, label_smoothing)
    return CrossEntropyBackward.apply(
        input,
        target,
        ignore_index=int(ignore_index),
        label_smoothing=float(label_smoothing),
        reduction=reduction,
    )
