"""``Unfold`` and ``Fold``, as in ``torch.nn`` (:func:`pylucid.nn.functional.unfold`,
:func:`pylucid.nn.functional.fold`)."""

from __future__ import annotations

from pylucid.nn import functional as F  # noqa: N812  (PyTorch's idiom)
from pylucid.nn.modules.module import Module
from pylucid.tensor import Tensor

__all__ = ["Fold", "Unfold"]

_Size = int | tuple[int, int]


class Unfold(Module):
    """The sliding blocks of ``(N, C, H, W)`` inputs as columns ``(N, C kh kw, L)``."""

    def __init__(
        self, kernel_size: _Size, dilation: _Size = 1, padding: _Size = 0, stride: _Size = 1
    ) -> None:
        super().__init__()
        self.kernel_size, self.dilation = kernel_size, dilation
        self.padding, self.stride = padding, stride

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return F.unfold(input, self.kernel_size, self.dilation, self.padding, self.stride)

    def extra_repr(self) -> str:
        return (
            f"kernel_size={self.kernel_size}, dilation={self.dilation}, "
            f"padding={self.padding}, stride={self.stride}"
        )


class Fold(Module):
    """Columns ``(N, C kh kw, L)`` summed into ``(N, C, *output_size)`` (the inverse
    layout of :class:`Unfold`; overlapping blocks add up)."""

    def __init__(
        self, output_size: _Size, kernel_size: _Size, dilation: _Size = 1, padding: _Size = 0,
        stride: _Size = 1,
    ) -> None:  # fmt: skip
        super().__init__()
        self.output_size, self.kernel_size = output_size, kernel_size
        self.dilation, self.padding, self.stride = dilation, padding, stride

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return F.fold(input, self.output_size, self.kernel_size, self.dilation, self.padding,
                      self.stride)  # fmt: skip

    def extra_repr(self) -> str:
        return (
            f"output_size={self.output_size}, kernel_size={self.kernel_size}, "
            f"dilation={self.dilation}, padding={self.padding}, stride={self.stride}"
        )
