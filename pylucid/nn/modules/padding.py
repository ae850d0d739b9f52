"""The padding layers of ``torch.nn``: ``ZeroPad``, ``ConstantPad``, ``ReflectionPad``,
``ReplicationPad`` and ``CircularPad`` for 1, 2 and 3 spatial dimensions
(:func:`pylucid.nn.functional.pad`)."""

from __future__ import annotations

from collections.abc import Sequence

from pylucid.nn import functional as F  # noqa: N812  (PyTorch's idiom)
from pylucid.nn.modules.module import Module
from pylucid.tensor import Tensor

__all__ = [
    "CircularPad1d", "CircularPad2d", "CircularPad3d", "ConstantPad1d", "ConstantPad2d",
    "ConstantPad3d", "ReflectionPad1d", "ReflectionPad2d", "ReflectionPad3d",
    "ReplicationPad1d", "ReplicationPad2d", "ReplicationPad3d", "ZeroPad1d", "ZeroPad2d",
    "ZeroPad3d",
]  # fmt: skip


class _PadNd(Module):
    """Pads the last ``dims`` dimensions by ``padding``: an int (every side) or
    ``2 * dims`` ints ``(left, right, top, bottom, front, back)``, the last dimension
    first, as ``F.pad``."""

    dims: int
    mode: str

    def __init__(self, padding: int | Sequence[int]) -> None:
        super().__init__()
        sides = 2 * self.dims
        amounts = (padding,) * sides if isinstance(padding, int) else tuple(padding)
        if len(amounts) != sides or not all(isinstance(a, int) for a in amounts):
            raise ValueError(f"{type(self).__name__}: padding must be an int or {sides} ints, "
                             f"got {padding!r}")  # fmt: skip
        self.padding = amounts

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        if input.ndim not in (self.dims + 1, self.dims + 2):
            raise ValueError(
                f"{type(self).__name__}: expected a {self.dims + 1}-d or {self.dims + 2}-d "
                f"input, got shape {input.shape}"
            )
        return F.pad(input, self.padding, self.mode)

    def extra_repr(self) -> str:
        return f"{self.padding}"


class _ConstantPadNd(_PadNd):
    mode = "constant"

    def __init__(self, padding: int | Sequence[int], value: float) -> None:
        super().__init__(padding)
        self.value = value

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return F.pad(input, self.padding, "constant", self.value)

    def extra_repr(self) -> str:
        return f"padding={self.padding}, value={self.value}"


class ConstantPad1d(_ConstantPadNd):
    """Pads the last dimension with ``value``."""

    dims = 1


class ConstantPad2d(_ConstantPadNd):
    """Pads the last 2 dimensions with ``value``."""

    dims = 2


class ConstantPad3d(_ConstantPadNd):
    """Pads the last 3 dimensions with ``value``."""

    dims = 3


class _ZeroPadNd(_ConstantPadNd):
    def __init__(self, padding: int | Sequence[int]) -> None:
        super().__init__(padding, 0.0)

    def extra_repr(self) -> str:
        return f"{self.padding}"


class ZeroPad1d(_ZeroPadNd):
    """Pads the last dimension with zeros."""

    dims = 1


class ZeroPad2d(_ZeroPadNd):
    """Pads the last 2 dimensions with zeros."""

    dims = 2


class ZeroPad3d(_ZeroPadNd):
    """Pads the last 3 dimensions with zeros."""

    dims = 3


class ReflectionPad1d(_PadNd):
    """Pads the last dimension with its reflection (the edge not repeated)."""

    dims, mode = 1, "reflect"


class ReflectionPad2d(_PadNd):
    """Pads the last 2 dimensions with their reflection (the edge not repeated)."""

    dims, mode = 2, "reflect"


class ReflectionPad3d(_PadNd):
    """Pads the last 3 dimensions with their reflection (the edge not repeated)."""

    dims, mode = 3, "reflect"


class ReplicationPad1d(_PadNd):
    """Pads the last dimension by repeating its edge."""

    dims, mode = 1, "replicate"


class ReplicationPad2d(_PadNd):
    """Pads the last 2 dimensions by repeating their edges."""

    dims, mode = 2, "replicate"


class ReplicationPad3d(_PadNd):
    """Pads the last 3 dimensions by repeating their edges."""

    dims, mode = 3, "replicate"


class CircularPad1d(_PadNd):
    """Pads the last dimension by wrapping around."""

    dims, mode = 1, "circular"


class CircularPad2d(_PadNd):
    """Pads the last 2 dimensions by wrapping around."""

    dims, mode = 2, "circular"


class CircularPad3d(_PadNd):
    """Pads the last 3 dimensions by wrapping around."""

    dims, mode = 3, "circular"
