"""Loss modules, as in ``torch.nn``: each calls its function in
:mod:`pylucid.nn.functional` with the reduction (and options) it was made with.

``weight=`` of the classification losses is not supported (it raises), nor the deprecated
``size_average=`` / ``reduce=``.
"""

from __future__ import annotations

from typing import Any

from pylucid.nn import functional as F  # noqa: N812  (PyTorch's idiom)
from pylucid.nn.modules.module import Module
from pylucid.tensor import Tensor

__all__ = [
    "BCELoss",
    "BCEWithLogitsLoss",
    "CrossEntropyLoss",
    "L1Loss",
    "MSELoss",
    "NLLLoss",
    "SmoothL1Loss",
]

_REDUCTIONS = ("none", "mean", "sum")


class _Loss(Module):
    def __init__(self, reduction: str = "mean", **unsupported: Any) -> None:
        super().__init__()
        given = sorted(name for name, value in unsupported.items() if value is not None)
        if given:
            raise NotImplementedError(f"{type(self).__name__}: {', '.join(given)} not supported")
        if reduction not in _REDUCTIONS:
            raise ValueError(f"{type(self).__name__}: reduction must be one of {_REDUCTIONS}, "
                             f"got {reduction!r}")  # fmt: skip
        self.reduction = reduction


class MSELoss(_Loss):
    """Mean squared error."""

    def __init__(self, size_average: Any = None, reduce: Any = None, reduction: str = "mean"):
        super().__init__(reduction, size_average=size_average, reduce=reduce)

    def forward(self, input: Tensor, target: Tensor) -> Tensor:  # noqa: A002
        return F.mse_loss(input, target, reduction=self.reduction)


class L1Loss(_Loss):
    """Mean absolute error."""

    def __init__(self, size_average: Any = None, reduce: Any = None, reduction: str = "mean"):
        super().__init__(reduction, size_average=size_average, reduce=reduce)

    def forward(self, input: Tensor, target: Tensor) -> Tensor:  # noqa: A002
        return F.l1_loss(input, target, reduction=self.reduction)


class SmoothL1Loss(_Loss):
    """Huber-like loss, quadratic below ``beta``."""

    def __init__(self, size_average: Any = None, reduce: Any = None, reduction: str = "mean",
                 beta: float = 1.0) -> None:  # fmt: skip
        super().__init__(reduction, size_average=size_average, reduce=reduce)
        self.beta = beta

    def forward(self, input: Tensor, target: Tensor) -> Tensor:  # noqa: A002
        return F.smooth_l1_loss(input, target, reduction=self.reduction, beta=self.beta)


class BCELoss(_Loss):
    """Binary cross entropy of probabilities."""

    def __init__(self, weight: Any = None, size_average: Any = None, reduce: Any = None,
                 reduction: str = "mean") -> None:  # fmt: skip
        super().__init__(reduction, weight=weight, size_average=size_average, reduce=reduce)

    def forward(self, input: Tensor, target: Tensor) -> Tensor:  # noqa: A002
        return F.binary_cross_entropy(input, target, reduction=self.reduction)


class BCEWithLogitsLoss(_Loss):
    """Binary cross entropy of logits (stable: no sigmoid then log)."""

    def __init__(self, weight: Any = None, size_average: Any = None, reduce: Any = None,
                 reduction: str = "mean", pos_weight: Any = None) -> None:  # fmt: skip
        super().__init__(reduction, weight=weight, size_average=size_average, reduce=reduce,
                         pos_weight=pos_weight)  # fmt: skip

    def forward(self, input: Tensor, target: Tensor) -> Tensor:  # noqa: A002
        return F.binary_cross_entropy_with_logits(input, target, reduction=self.reduction)


class NLLLoss(_Loss):
    """Negative log likelihood of log-probabilities at the target classes."""

    def __init__(self, weight: Any = None, size_average: Any = None, ignore_index: int = -100,
                 reduce: Any = None, reduction: str = "mean") -> None:  # fmt: skip
        super().__init__(reduction, weight=weight, size_average=size_average, reduce=reduce)
        self.ignore_index = ignore_index

    def forward(self, input: Tensor, target: Tensor) -> Tensor:  # noqa: A002
        return F.nll_loss(input, target, self.ignore_index, self.reduction)


class CrossEntropyLoss(_Loss):
    """Cross entropy of logits against class indices or class probabilities, with
    optional label smoothing."""

    def __init__(self, weight: Any = None, size_average: Any = None, ignore_index: int = -100,
                 reduce: Any = None, reduction: str = "mean",
                 label_smoothing: float = 0.0) -> None:  # fmt: skip
        super().__init__(reduction, weight=weight, size_average=size_average, reduce=reduce)
        self.ignore_index, self.label_smoothing = ignore_index, label_smoothing

    def forward(self, input: Tensor, target: Tensor) -> Tensor:  # noqa: A002
        return F.cross_entropy(input, target, self.ignore_index, self.reduction,
                               self.label_smoothing)  # fmt: skip
