"""``Dropout`` and the channel dropouts ``Dropout1d``, ``Dropout2d`` and ``Dropout3d``, as
in ``torch.nn``."""

from __future__ import annotations

from pylucid.nn import functional as F  # noqa: N812  (PyTorch's idiom)
from pylucid.nn.modules.module import Module
from pylucid.tensor import Tensor

__all__ = ["Dropout", "Dropout1d", "Dropout2d", "Dropout3d"]


class _DropoutNd(Module):
    """What the dropouts share: ``p`` (checked), ``inplace`` (accepted; the result is a new
    tensor) and printing; identity in evaluation."""

    def __init__(self, p: float = 0.5, inplace: bool = False) -> None:
        super().__init__()
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"{type(self).__name__}: p must be in [0, 1], got {p}")
        self.p, self.inplace = p, inplace

    def extra_repr(self) -> str:
        return f"p={self.p}, inplace={self.inplace}"


class Dropout(_DropoutNd):
    """In training, zero each element with probability ``p`` and scale the rest by
    ``1 / (1 - p)``; the identity in evaluation (:func:`pylucid.nn.functional.dropout`)."""

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return F.dropout(input, self.p, self.training, self.inplace)


class Dropout1d(_DropoutNd):
    """In training, zero whole channels of ``(N, C, L)`` or ``(C, L)`` inputs
    (:func:`pylucid.nn.functional.dropout1d`)."""

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return F.dropout1d(input, self.p, self.training, self.inplace)


class Dropout2d(_DropoutNd):
    """In training, zero whole channels of ``(N, C, H, W)`` inputs (a 3-d input is taken as
    ``(N, C, L)``, with PyTorch's warning; :func:`pylucid.nn.functional.dropout2d`)."""

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return F.dropout2d(input, self.p, self.training, self.inplace)


class Dropout3d(_DropoutNd):
    """In training, zero whole channels of ``(N, C, D, H, W)`` or ``(C, D, H, W)`` inputs
    (:func:`pylucid.nn.functional.dropout3d`)."""

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return F.dropout3d(input, self.p, self.training, self.inplace)
