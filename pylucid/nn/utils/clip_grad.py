"""Gradient clipping, as ``torch.nn.utils.clip_grad_norm_`` and ``clip_grad_value_``."""

from __future__ import annotations

import math
from collections.abc import Iterable

from pylucid.graph.grad_mode import no_grad
from pylucid.ops import abs as absolute
from pylucid.ops import clamp, stack
from pylucid.ops.inplace import copy_, mul_
from pylucid.ops.updates import clip_grads_by_norm_, refuse_nonfinite_norm
from pylucid.tensor import Tensor

__all__ = ["clip_grad_norm_", "clip_grad_value_"]


def _grads(parameters: Tensor | Iterable[Tensor]) -> list[Tensor]:
    params = [parameters] if isinstance(parameters, Tensor) else list(parameters)
    return [p.grad for p in params if p.grad is not None]


def _norm(t: Tensor, norm_type: float) -> Tensor:
    """The ``norm_type``-norm of ``t``'s elements, as ``torch.linalg.vector_norm``
    (``inf``: the largest magnitude, ``-inf``: the smallest, 0: the count of non-zeros)."""
    if norm_type == math.inf:
        return absolute(t).amax()
    if norm_type == -math.inf:
        return absolute(t).amin()
    if norm_type == 0:
        return (t != 0).sum().to(t.dtype)
    if norm_type == 2:
        return (t * t).sum().sqrt()
    if norm_type == 1:
        return absolute(t).sum()
    return (absolute(t) ** norm_type).sum() ** (1.0 / norm_type)


def clip_grad_norm_(
    parameters: Tensor | Iterable[Tensor],
    max_norm: float,
    norm_type: float = 2.0,
    error_if_nonfinite: bool = False,
    foreach: bool | None = None,
) -> Tensor:
    r"""Scale the gradients in place so that their total norm is at most ``max_norm``.

    The total norm is the ``norm_type``-norm of the per-gradient norms (that of all the
    elements together); each gradient is multiplied by
    :math:`\min(1, \text{max\_norm} / (\text{total} + 10^{-6}))`, as in PyTorch (so a
    gradient is scaled, by about 1, even when the norm is below ``max_norm``).

    Returns
    -------
    Tensor
        The total norm before clipping (0-d, float; 0 without gradients).
    """
    grads = _grads(parameters)
    norm_type = float(norm_type)
    if not grads:
        from pylucid.factories import tensor

        return tensor(0.0)
    if len({(g._backend, g.dtype) for g in grads}) == 1:  # one device and dtype: fused
        return clip_grads_by_norm_(grads, max_norm, norm_type, error_if_nonfinite)
    with no_grad():
        per_grad = [_norm(g, norm_type) for g in grads]
        devices = {n.device for n in per_grad}
        if len(devices) > 1:
            per_grad = [n.to(grads[0].device) for n in per_grad]
        total = per_grad[0] if len(per_grad) == 1 else _norm(stack(per_grad), norm_type)
        if error_if_nonfinite:
            refuse_nonfinite_norm(total.item(), norm_type)
        coefficient = clamp(max_norm / (total + 1e-6), max=1.0)
        for g in grads:
            scale = coefficient if coefficient.device == g.device else coefficient.to(g.device)
            mul_(g, scale.to(g.dtype))
    return total


def clip_grad_value_(
    parameters: Tensor | Iterable[Tensor], clip_value: float, foreach: bool | None = None
) -> None:
    """Clamp every gradient element to ``[-clip_value, clip_value]`` in place."""
    if clip_value < 0:
        raise ValueError(f"clip_grad_value_: clip_value must be >= 0, got {clip_value}")
    with no_grad():
        for g in _grads(parameters):
            copy_(g, clamp(g, -clip_value, clip_value))
