"""``Linear``, ``Identity``, ``Flatten`` and ``Unflatten``, as in ``torch.nn``; and
``NonDynamicallyQuantizableLinear``, filed here as in ``torch.nn.modules.linear``."""

from __future__ import annotations

import math
from typing import Any

from pylucid.factories import empty
from pylucid.nn import functional as F  # noqa: N812  (PyTorch's idiom)
from pylucid.nn import init
from pylucid.nn.modules.module import Module
from pylucid.nn.parameter import Parameter
from pylucid.tensor import Tensor

__all__ = ["Flatten", "Identity", "Linear", "NonDynamicallyQuantizableLinear", "Unflatten"]


class Identity(Module):
    """Returns its input (a placeholder); takes and ignores any arguments."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__()

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002  (PyTorch's name)
        return input


class Linear(Module):
    r""":math:`y = x W^T + b` with ``weight`` :math:`W` of shape ``(out_features,
    in_features)`` and ``bias`` :math:`b` of shape ``(out_features,)``.

    Both start as PyTorch's: :math:`U(-1/\sqrt{\text{in}}, 1/\sqrt{\text{in}})`
    (``kaiming_uniform_`` with ``a = sqrt(5)`` for the weight).

    Parameters
    ----------
    in_features, out_features : int
        The sizes of each input and output row.
    bias : bool
        Whether to add a learned bias.
    device : str, optional
        ``"cpu"`` or ``"gpu"``.
    dtype : dtype, optional
        The parameters' dtype (float32).
    """

    def __init__(
        self, in_features: int, out_features: int, bias: bool = True,
        device: str | None = None, dtype: Any = None,
    ) -> None:  # fmt: skip
        super().__init__()
        for name, size in (("in_features", in_features), ("out_features", out_features)):
            if not isinstance(size, int) or size < 0:
                raise ValueError(f"Linear: {name} must be a non-negative int, got {size!r}")
        self.in_features, self.out_features = in_features, out_features
        kind = {"device": device, **({"dtype": dtype} if dtype is not None else {})}
        self.weight = Parameter(empty(out_features, in_features, **kind))
        if bias:
            self.bias = Parameter(empty(out_features, **kind))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Draw the weight and bias again (PyTorch's initialisation)."""
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            bound = 1 / math.sqrt(self.in_features) if self.in_features > 0 else 0
            init.uniform_(self.bias, -bound, bound)

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return F.linear(input, self.weight, self.bias)

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, "
            f"bias={self.bias is not None}"
        )


class NonDynamicallyQuantizableLinear(Linear):
    """The :class:`Linear` that :class:`~pylucid.nn.MultiheadAttention` holds as
    ``out_proj``, under PyTorch's class name (there a marker for its quantization tools;
    here a plain ``Linear``), so that the two print alike."""


class Flatten(Module):
    """Flattens dimensions ``start_dim`` to ``end_dim`` into one (by default all but the
    batch dimension)."""

    def __init__(self, start_dim: int = 1, end_dim: int = -1) -> None:
        super().__init__()
        self.start_dim, self.end_dim = start_dim, end_dim

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return input.flatten(self.start_dim, self.end_dim)

    def extra_repr(self) -> str:
        return f"start_dim={self.start_dim}, end_dim={self.end_dim}"


class Unflatten(Module):
    """Splits dimension ``dim`` into ``unflattened_size``."""

    def __init__(self, dim: int, unflattened_size: tuple[int, ...]) -> None:
        super().__init__()
        self.dim, self.unflattened_size = dim, tuple(unflattened_size)

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        dim = self.dim % input.ndim
        shape = (*input.shape[:dim], *self.unflattened_size, *input.shape[dim + 1 :])
        return input.reshape(shape)

    def extra_repr(self) -> str:
        return f"dim={self.dim}, unflattened_size={self.unflattened_size}"
