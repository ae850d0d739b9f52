"""``pylucid.autograd``: PyTorch's ``torch.autograd`` names over :mod:`pylucid.graph`.

``grad``, ``backward``, ``Function``, the grad modes, anomaly detection and the gradient
checks are pylucid's own (see :mod:`pylucid.graph`); ``Variable`` is the pre-0.4 wrapper that
PyTorch keeps for old programs: a tensor sharing ``data``'s memory, a new leaf.
"""

from __future__ import annotations

from pylucid.autograd import functional, profiler
from pylucid.graph import (
    Function,
    backward,
    detect_anomaly,
    enable_grad,
    grad,
    gradcheck,
    gradgradcheck,
    inference_mode,
    no_grad,
    set_grad_enabled,
)
from pylucid.graph.anomaly import set_detect_anomaly
from pylucid.tensor import Tensor

__all__ = [
    "Function",
    "Variable",
    "backward",
    "detect_anomaly",
    "enable_grad",
    "functional",
    "grad",
    "gradcheck",
    "gradgradcheck",
    "inference_mode",
    "no_grad",
    "profiler",
    "set_detect_anomaly",
    "set_grad_enabled",
]


def Variable(data: Tensor, requires_grad: bool = False, volatile: bool = False) -> Tensor:  # noqa: N802
    """``torch.autograd.Variable(data, requires_grad)``: a new leaf sharing ``data``'s memory
    (``data.detach()``), requiring grad if asked, as PyTorch's since 0.4."""
    if not isinstance(data, Tensor):
        raise TypeError(f"Variable: expected a Tensor, got {type(data).__name__}")
    return data.detach().requires_grad_(bool(requires_grad))
