"""Activation modules, as in ``torch.nn``: each calls its function in
:mod:`pylucid.nn.functional` with the arguments it was made with."""

from __future__ import annotations

from pylucid.nn import functional as F  # noqa: N812  (PyTorch's idiom)
from pylucid.nn.modules.module import Module
from pylucid.tensor import Tensor

__all__ = [
    "ELU",
    "GELU",
    "LeakyReLU",
    "LogSoftmax",
    "ReLU",
    "SiLU",
    "Sigmoid",
    "Softmax",
    "Softplus",
    "Tanh",
]


class ReLU(Module):
    """``max(x, 0)``; ``inplace`` is accepted and the result is a new tensor."""

    def __init__(self, inplace: bool = False) -> None:
        super().__init__()
        self.inplace = inplace

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return F.relu(input)

    def extra_repr(self) -> str:
        return "inplace=True" if self.inplace else ""


class Tanh(Module):
    """``tanh(x)``."""

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return F.tanh(input)


class Sigmoid(Module):
    """``1 / (1 + exp(-x))``."""

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return F.sigmoid(input)


class SiLU(Module):
    """``x sigmoid(x)``."""

    def __init__(self, inplace: bool = False) -> None:
        super().__init__()
        self.inplace = inplace

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return F.silu(input)

    def extra_repr(self) -> str:
        return "inplace=True" if self.inplace else ""


class GELU(Module):
    """``x Phi(x)`` (``approximate="tanh"``: the tanh approximation)."""

    def __init__(self, approximate: str = "none") -> None:
        super().__init__()
        self.approximate = approximate

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return F.gelu(input, approximate=self.approximate)

    def extra_repr(self) -> str:
        return f"approximate={self.approximate!r}"


class LeakyReLU(Module):
    """``x`` where positive, ``negative_slope x`` elsewhere."""

    def __init__(self, negative_slope: float = 0.01, inplace: bool = False) -> None:
        super().__init__()
        self.negative_slope, self.inplace = negative_slope, inplace

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return F.leaky_relu(input, self.negative_slope)

    def extra_repr(self) -> str:
        return f"negative_slope={self.negative_slope}" + (", inplace=True" if self.inplace else "")


class ELU(Module):
    """``x`` where positive, ``alpha (exp(x) - 1)`` elsewhere."""

    def __init__(self, alpha: float = 1.0, inplace: bool = False) -> None:
        super().__init__()
        self.alpha, self.inplace = alpha, inplace

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return F.elu(input, self.alpha)

    def extra_repr(self) -> str:
        return f"alpha={self.alpha}" + (", inplace=True" if self.inplace else "")


class Softplus(Module):
    """``log(1 + exp(beta x)) / beta``, linear beyond ``threshold``."""

    def __init__(self, beta: float = 1.0, threshold: float = 20.0) -> None:
        super().__init__()
        self.beta, self.threshold = beta, threshold

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return F.softplus(input, self.beta, self.threshold)

    def extra_repr(self) -> str:
        return f"beta={self.beta}, threshold={self.threshold}"


class Softmax(Module):
    """``exp(x) / sum(exp(x))`` along ``dim``."""

    def __init__(self, dim: int | None = None) -> None:
        super().__init__()
        self.dim = dim

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return F.softmax(input, _dim("Softmax", self.dim, input))

    def extra_repr(self) -> str:
        return f"dim={self.dim}"


class LogSoftmax(Module):
    """``x - log(sum(exp(x)))`` along ``dim``."""

    def __init__(self, dim: int | None = None) -> None:
        super().__init__()
        self.dim = dim

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return F.log_softmax(input, _dim("LogSoftmax", self.dim, input))

    def extra_repr(self) -> str:
        return f"dim={self.dim}"


def _dim(module: str, dim: int | None, input: Tensor) -> int:  # noqa: A002
    """``dim``, or PyTorch's legacy choice when None (0 for 0-, 1- and 3-d inputs, else
    1)."""
    if dim is not None:
        return dim
    return 0 if input.ndim in (0, 1, 3) else 1
