"""Adagrad, as ``torch.optim.Adagrad``."""

from __future__ import annotations

from typing import Any

from pylucid.factories import full_like
from pylucid.ops.updates import adagrad_update_
from pylucid.optim.optimizer import (
    Optimizer,
    ParamsT,
    check_nonnegative,
    refuse_differentiable,
)
from pylucid.tensor import Tensor

__all__ = ["Adagrad"]


class Adagrad(Optimizer):
    r"""Adagrad (Duchi et al.), with PyTorch's formulation and defaults:
    :math:`s \leftarrow s + g^2`,
    :math:`p \leftarrow p - \frac{\eta}{1 + (t - 1)\delta} \frac{g}{\sqrt{s} + \epsilon}`
    (:math:`s` starts at ``initial_accumulator_value``)."""

    def __init__(
        self,
        params: ParamsT,
        lr: float = 1e-2,
        lr_decay: float = 0.0,
        weight_decay: float = 0.0,
        initial_accumulator_value: float = 0.0,
        eps: float = 1e-10,
        foreach: bool | None = None,
        *,
        maximize: bool = False,
        differentiable: bool = False,
        fused: bool | None = None,
    ) -> None:
        refuse_differentiable("Adagrad", differentiable)
        check_nonnegative("Adagrad", lr=lr, lr_decay=lr_decay, weight_decay=weight_decay,
                           initial_accumulator_value=initial_accumulator_value,
                           eps=eps)  # fmt: skip
        defaults = dict(lr=lr, lr_decay=lr_decay, eps=eps, weight_decay=weight_decay,
                        initial_accumulator_value=initial_accumulator_value, foreach=foreach,
                        maximize=maximize, differentiable=False, fused=fused)  # fmt: skip
        super().__init__(params, defaults)
        for group in self.param_groups:  # PyTorch makes Adagrad's state at construction
            for p in group["params"]:
                self.state[p]["step"] = 0
                self.state[p]["sum"] = full_like(p, group["initial_accumulator_value"])

    def _update(self, p: Tensor, grad: Tensor, group: dict[str, Any], state: dict) -> None:
        grad = self._checked_grad("Adagrad", p, grad)
        state["step"] += 1
        adagrad_update_(
            p, grad, state["sum"], step=state["step"], lr=group["lr"],
            lr_decay=group["lr_decay"], eps=group["eps"], weight_decay=group["weight_decay"],
            maximize=group["maximize"],
        )  # fmt: skip
