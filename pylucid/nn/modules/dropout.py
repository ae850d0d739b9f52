"""``Dropout``, as ``torch.nn.Dropout``."""

from __future__ import annotations

from pylucid.nn import functional as F  # noqa: N812  (PyTorch's idiom)
from pylucid.nn.modules.module import Module
from pylucid.tensor import Tensor

__all__ = ["Dropout"]


class Dropout(Module):
    """In training, zero each element with probability ``p`` and scale the rest by
    ``1 / (1 - p)``; the identity in evaluation (:func:`pylucid.nn.functional.dropout`)."""

    def __init__(self, p: float = 0.5, inplace: bool = False) -> None:
        super().__init__()
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"Dropout: p must be in [0, 1], got {p}")
        self.p, self.inplace = p, inplace

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return F.dropout(input, self.p, self.training, self.inplace)

    def extra_repr(self) -> str:
        return f"p={self.p}, inplace={self.inplace}"
