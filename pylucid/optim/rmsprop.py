"""RMSprop, as ``torch.optim.RMSprop``."""

from __future__ import annotations

from typing import Any

from pylucid.factories import zeros_like
from pylucid.ops.updates import rmsprop_update_
from pylucid.optim.optimizer import (
    Optimizer,
    ParamsT,
    check_nonnegative,
    refuse_differentiable,
)
from pylucid.tensor import Tensor

__all__ = ["RMSprop"]


class RMSprop(Optimizer):
    r"""RMSprop (Hinton), with PyTorch's formulation and defaults.

    :math:`s \leftarrow \alpha s + (1 - \alpha) g^2`; centered: :math:`a \leftarrow \alpha a
    + (1 - \alpha) g` and :math:`r = \sqrt{s - a^2} + \epsilon`, else
    :math:`r = \sqrt{s} + \epsilon`; momentum: :math:`b \leftarrow \mu b + g / r`,
    :math:`p \leftarrow p - \eta b`, else :math:`p \leftarrow p - \eta g / r`
    (:math:`g` with :math:`\lambda p` added under weight decay).
    """

    def __init__(
        self,
        params: ParamsT,
        lr: float = 1e-2,
        alpha: float = 0.99,
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        momentum: float = 0.0,
        centered: bool = False,
        capturable: bool = False,
        foreach: bool | None = None,
        maximize: bool = False,
        differentiable: bool = False,
    ) -> None:
        refuse_differentiable("RMSprop", differentiable)
        check_nonnegative("RMSprop", lr=lr, alpha=alpha, eps=eps, weight_decay=weight_decay,
                           momentum=momentum)  # fmt: skip
        defaults = dict(lr=lr, alpha=alpha, eps=eps, weight_decay=weight_decay,
                        momentum=momentum, centered=centered, capturable=capturable,
                        foreach=foreach, maximize=maximize, differentiable=False)  # fmt: skip
        super().__init__(params, defaults)

    def _update(self, p: Tensor, grad: Tensor, group: dict[str, Any], state: dict) -> None:
        grad = self._checked_grad("RMSprop", p, grad)
        if not state:
            state["step"] = 0
            state["square_avg"] = zeros_like(p)
            if group["momentum"] > 0:
                state["momentum_buffer"] = zeros_like(p)
            if group["centered"]:
                state["grad_avg"] = zeros_like(p)
        state["step"] += 1
        rmsprop_update_(
            p, grad, state["square_avg"], state.get("grad_avg") if group["centered"] else None,
            state.get("momentum_buffer") if group["momentum"] > 0 else None, lr=group["lr"],
            alpha=group["alpha"], eps=group["eps"], weight_decay=group["weight_decay"],
            momentum=group["momentum"], maximize=group["maximize"],
        )  # fmt: skip
