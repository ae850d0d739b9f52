"""Stochastic gradient descent, as ``torch.optim.SGD``."""

from __future__ import annotations

from typing import Any

from pylucid.ops.updates import sgd_update_
from pylucid.optim.optimizer import Optimizer, ParamsT, refuse_differentiable
from pylucid.tensor import Tensor

__all__ = ["SGD"]


class SGD(Optimizer):
    r"""Gradient descent with optional momentum (PyTorch's formulation).

    With :math:`d = g + \lambda p` (:math:`-g` when maximizing): momentum keeps
    :math:`b \leftarrow \mu b + (1 - \tau) d` (:math:`b = d` on the first step), then
    :math:`p \leftarrow p - \eta (d + \mu b)` (nesterov) or :math:`p - \eta b`; without
    momentum :math:`p \leftarrow p - \eta d`. One fused pass per parameter.

    Parameters
    ----------
    params : iterable
        Parameters or parameter groups.
    lr : float
        Learning rate :math:`\eta` (PyTorch's default, 1e-3).
    momentum : float
        :math:`\mu`.
    dampening : float
        :math:`\tau`.
    weight_decay : float
        :math:`\lambda`.
    nesterov : bool
        Nesterov momentum (needs ``momentum > 0`` and no dampening).
    maximize : bool
        Ascend instead.
    foreach, fused, differentiable
        PyTorch's implementation switches: accepted for compatibility; pylucid always runs
        one fused pass per parameter and its steps are not differentiable.
    """

    def __init__(
        self,
        params: ParamsT,
        lr: float = 1e-3,
        momentum: float = 0.0,
        dampening: float = 0.0,
        weight_decay: float = 0.0,
        nesterov: bool = False,
        *,
        maximize: bool = False,
        foreach: bool | None = None,
        differentiable: bool = False,
        fused: bool | None = None,
    ) -> None:
        refuse_differentiable("SGD", differentiable)
        if lr < 0 or momentum < 0 or weight_decay < 0:
            raise ValueError(
                f"SGD: need lr >= 0, momentum >= 0 and weight_decay >= 0; got lr={lr}, "
                f"momentum={momentum}, weight_decay={weight_decay}"
            )
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("SGD: Nesterov momentum needs momentum > 0 and dampening = 0")
        defaults = dict(lr=lr, momentum=momentum, dampening=dampening,
                        weight_decay=weight_decay, nesterov=nesterov, maximize=maximize,
                        foreach=foreach, differentiable=False, fused=fused)  # fmt: skip
        super().__init__(params, defaults)

    def _update(self, p: Tensor, grad: Tensor, group: dict[str, Any], state: dict) -> None:
        buffer = sgd_update_(
            p, self._checked_grad("SGD", p, grad), state.get("momentum_buffer"),
            lr=group["lr"], momentum=group["momentum"], dampening=group["dampening"],
            weight_decay=group["weight_decay"], nesterov=group["nesterov"],
            maximize=group["maximize"],
        )  # fmt: skip
        if buffer is not None:
            state["momentum_buffer"] = buffer

