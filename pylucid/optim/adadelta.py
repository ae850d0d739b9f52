"""Adadelta, as ``torch.optim.Adadelta``."""

from __future__ import annotations

from typing import Any

from pylucid.factories import zeros_like
from pylucid.ops.updates import adadelta_update_
from pylucid.optim.optimizer import (
    Optimizer,
    ParamsT,
    check_nonnegative,
    refuse_differentiable,
)
from pylucid.tensor import Tensor

__all__ = ["Adadelta"]


class Adadelta(Optimizer):
    r"""Adadelta (Zeiler), with PyTorch's formulation and defaults:
    :math:`s \leftarrow \rho s + (1 - \rho) g^2`,
    :math:`\Delta = \frac{\sqrt{a + \epsilon}}{\sqrt{s + \epsilon}} g`,
    :math:`a \leftarrow \rho a + (1 - \rho) \Delta^2`, :math:`p \leftarrow p - \eta \Delta`
    (:math:`g` with :math:`\lambda p` added under weight decay; :math:`s` and :math:`a`
    start at zero). State per parameter: ``step``, ``square_avg``, ``acc_delta``.
    """

    def __init__(
        self,
        params: ParamsT,
        lr: float = 1.0,
        rho: float = 0.9,
        eps: float = 1e-6,
        weight_decay: float = 0.0,
        foreach: bool | None = None,
        *,
        capturable: bool = False,
        maximize: bool = False,
        differentiable: bool = False,
    ) -> None:
        refuse_differentiable("Adadelta", differentiable)
        check_nonnegative("Adadelta", lr=lr, rho=rho, eps=eps, weight_decay=weight_decay)
        if rho > 1.0:
            raise ValueError(f"Adadelta: rho must be in [0, 1], got {rho}")
        defaults = dict(lr=lr, rho=rho, eps=eps, weight_decay=weight_decay, maximize=maximize,
                        capturable=capturable, foreach=foreach,
                        differentiable=False)  # fmt: skip
        super().__init__(params, defaults)

    def _update(self, p: Tensor, grad: Tensor, group: dict[str, Any], state: dict) -> None:
        grad = self._checked_grad("Adadelta", p, grad)
        if not state:
            state["step"] = 0
            state["square_avg"] = zeros_like(p)
            state["acc_delta"] = zeros_like(p)
        state["step"] += 1
        adadelta_update_(
            p, grad, state["square_avg"], state["acc_delta"], lr=group["lr"], rho=group["rho"],
            eps=group["eps"], weight_decay=group["weight_decay"], maximize=group["maximize"],
        )  # fmt: skip
