"""Adam and AdamW, as ``torch.optim.Adam`` and ``torch.optim.AdamW``."""

from __future__ import annotations

from typing import Any

from pylucid.factories import zeros_like
from pylucid.ops.updates import adam_update_
from pylucid.optim.optimizer import Optimizer, ParamsT, refuse_differentiable
from pylucid.tensor import Tensor

__all__ = ["Adam", "AdamW"]


class Adam(Optimizer):
    r"""Adam (Kingma and Ba), with PyTorch's formulation and defaults.

    .. math::
        m_t &= \beta_1 m_{t-1} + (1 - \beta_1) g_t, \qquad
        v_t = \beta_2 v_{t-1} + (1 - \beta_2) g_t^2, \\
        p_t &= p_{t-1} - \frac{\eta}{1 - \beta_1^t}
            \frac{m_t}{\sqrt{v_t} / \sqrt{1 - \beta_2^t} + \epsilon}

    (``amsgrad``: :math:`v_t` replaced by :math:`\max_{s \le t} v_s`). Weight decay adds
    :math:`\lambda p` to :math:`g` (L2); with ``decoupled_weight_decay`` (AdamW) it
    multiplies :math:`p` by :math:`1 - \eta\lambda` first. One fused pass per parameter
    reads ``p``, ``g``, ``m``, ``v`` once and writes them once.

    Parameters
    ----------
    params : iterable
        Parameters or parameter groups.
    lr : float
        :math:`\eta`.
    betas : (float, float)
        :math:`(\beta_1, \beta_2)`.
    eps : float
        :math:`\epsilon`.
    weight_decay : float
        :math:`\lambda`.
    amsgrad : bool
        Use the running maximum of :math:`v`.
    maximize : bool
        Ascend instead.
    decoupled_weight_decay : bool
        AdamW's decay.
    foreach, fused, capturable, differentiable
        Accepted for compatibility (see :class:`~pylucid.optim.SGD`).
    """

    def __init__(
        self,
        params: ParamsT,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        amsgrad: bool = False,
        *,
        foreach: bool | None = None,
        maximize: bool = False,
        capturable: bool = False,
        differentiable: bool = False,
        fused: bool | None = None,
        decoupled_weight_decay: bool = False,
    ) -> None:
        name = type(self).__name__
        refuse_differentiable(name, differentiable)
        if lr < 0 or eps < 0 or weight_decay < 0:
            raise ValueError(
                f"{name}: need lr >= 0, eps >= 0 and weight_decay >= 0; got lr={lr}, "
                f"eps={eps}, weight_decay={weight_decay}"
            )
        for i, beta in enumerate(betas):
            if not 0.0 <= beta < 1.0:
                raise ValueError(f"{name}: betas[{i}] must be in [0, 1), got {beta}")
        defaults = dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay,
                        amsgrad=amsgrad, maximize=maximize, foreach=foreach,
                        capturable=capturable, differentiable=False, fused=fused,
                        decoupled_weight_decay=decoupled_weight_decay)  # fmt: skip
        super().__init__(params, defaults)

    def _update(self, p: Tensor, grad: Tensor, group: dict[str, Any], state: dict) -> None:
        grad = self._checked_grad(type(self).__name__, p, grad)
        if not state:
            state["step"] = 0
            state["exp_avg"] = zeros_like(p)
            state["exp_avg_sq"] = zeros_like(p)
            if group["amsgrad"]:
                state["max_exp_avg_sq"] = zeros_like(p)
        state["step"] += 1
        beta1, beta2 = group["betas"]
        adam_update_(
            p, grad, state["exp_avg"], state["exp_avg_sq"], state.get("max_exp_avg_sq"),
            step=state["step"], lr=group["lr"], beta1=beta1, beta2=beta2, eps=group["eps"],
            weight_decay=group["weight_decay"],
            decoupled_weight_decay=group["decoupled_weight_decay"], maximize=group["maximize"],
        )  # fmt: skip


class AdamW(Adam):
    r"""Adam with decoupled weight decay (Loshchilov and Hutter):
    :math:`p \leftarrow (1 - \eta\lambda) p` before Adam's step; PyTorch's default
    :math:`\lambda = 10^{-2}`. Parameters as :class:`Adam`'s."""

    def __init__(
        self,
        params: ParamsT,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 1e-2,
        amsgrad: bool = False,
        *,
        maximize: bool = False,
        foreach: bool | None = None,
        capturable: bool = False,
        differentiable: bool = False,
        fused: bool | None = None,
    ) -> None:
        super().__init__(
            params, lr, betas, eps, weight_decay, amsgrad, foreach=foreach, maximize=maximize,
            capturable=capturable, differentiable=differentiable, fused=fused,
            decoupled_weight_decay=True,
        )  # fmt: skip
