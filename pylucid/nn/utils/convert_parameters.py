"""Parameters as one flat vector and back, as ``torch.nn.utils.parameters_to_vector`` and
``vector_to_parameters``."""

from __future__ import annotations

from collections.abc import Iterable

from pylucid.graph.grad_mode import no_grad
from pylucid.ops import concatenate
from pylucid.ops.inplace import copy_
from pylucid.tensor import Tensor

__all__ = ["parameters_to_vector", "vector_to_parameters"]


def parameters_to_vector(parameters: Iterable[Tensor]) -> Tensor:
    """The parameters' elements, flattened and joined into one 1-d tensor (differentiable;
    all on one device)."""
    params = list(parameters)
    if not params:
        raise ValueError("parameters_to_vector: got no parameters")
    devices = {p.device for p in params}
    if len(devices) > 1:
        raise TypeError(f"parameters_to_vector: the parameters are on several devices "
                        f"{sorted(devices)}")  # fmt: skip
    return concatenate([p.reshape(-1) for p in params])


def vector_to_parameters(vec: Tensor, parameters: Iterable[Tensor]) -> None:
    """Copy consecutive slices of the 1-d ``vec`` into the parameters, in place."""
    if not isinstance(vec, Tensor) or vec.ndim != 1:
        raise TypeError(f"vector_to_parameters: expected a 1-d Tensor, got {vec!r}")
    params = list(parameters)
    total = sum(p.numel() for p in params)
    if total != vec.shape[0]:
        raise ValueError(
            f"vector_to_parameters: the vector has {vec.shape[0]} elements, the parameters "
            f"{total}"
        )
    offset = 0
    with no_grad():
        for p in params:
            size = p.numel()
            copy_(p, vec[offset : offset + size].reshape(p.shape))
            offset += size
