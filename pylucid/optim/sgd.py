"""Stochastic gradient descent, with optional momentum and weight decay."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pylucid.graph.grad_mode import no_grad

__all__ = ["Optimizer", "SGD"]


class Optimizer:
    """Holds parameters (leaf tensors that require grad) and updates them from ``.grad``.

    A parameter's storage is replaced by the updated values, never written in place, so a
    graph that saved the old values stays valid.
    """

    def __init__(self, params: Iterable[Any]) -> None:
        self.params = list(params)
        if not self.params:
            raise ValueError(f"{type(self).__name__}: got an empty parameter list")
        for i, p in enumerate(self.params):
            if not p.is_leaf or not p.requires_grad:
                raise ValueError(
                    f"{type(self).__name__}: params[{i}] must be a leaf tensor that requires "
                    f"grad (shape {p.shape}, requires_grad={p.requires_grad}, "
                    f"is_leaf={p.is_leaf})"
                )

    def zero_grad(self) -> None:
        """Forget every parameter's gradient (set it to None)."""
        for p in self.params:
            p.grad = None

    def step(self) -> None:
        """Update every parameter that has a gradient."""
        raise NotImplementedError(f"{type(self).__name__} does not define step")


class SGD(Optimizer):
    r"""Gradient descent: :math:`v \leftarrow \mu v + (g + \lambda p)`, :math:`p \leftarrow p -
    \eta v` (PyTorch's formulation; with :math:`\mu = 0`, :math:`p \leftarrow p - \eta g`).

    Parameters
    ----------
    params : iterable of Tensor
        Leaf tensors that require grad.
    lr : float
        Learning rate :math:`\eta`.
    momentum : float
        :math:`\mu`.
    weight_decay : float
        :math:`\lambda`.
    """

    def __init__(
        self, params: Iterable[Any], lr: float, momentum: float = 0.0, weight_decay: float = 0.0
    ) -> None:
        super().__init__(params)
        if lr <= 0 or momentum < 0 or weight_decay < 0:
            raise ValueError(
                f"SGD: need lr > 0, momentum >= 0 and weight_decay >= 0; got lr={lr}, "
                f"momentum={momentum}, weight_decay={weight_decay}"
            )
        self.lr, self.momentum, self.weight_decay = lr, momentum, weight_decay
        self._velocity: list[Any] = [None] * len(self.params)

    @no_grad()
    def step(self) -> None:
        for i, p in enumerate(self.params):
            if p.grad is None:
                continue
            update = p.grad.detach()
            if self.weight_decay:
                update = update + self.weight_decay * p.detach()
            if self.momentum:
                previous = self._velocity[i]
                update = update if previous is None else self.momentum * previous + update
                self._velocity[i] = update
            p.sub_(self.lr * update)  # in place: views and aliases of p see the step
