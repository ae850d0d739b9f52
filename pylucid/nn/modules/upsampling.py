"""``Upsample``, ``UpsamplingNearest2d`` and ``UpsamplingBilinear2d``, as in ``torch.nn``
(:func:`pylucid.nn.functional.interpolate`)."""

from __future__ import annotations

from collections.abc import Sequence

from pylucid.nn import functional as F  # noqa: N812  (PyTorch's idiom)
from pylucid.nn.modules.module import Module
from pylucid.tensor import Tensor

__all__ = ["Upsample", "UpsamplingBilinear2d", "UpsamplingNearest2d"]


class Upsample(Module):
    """Resample the spatial dimensions to ``size`` or by ``scale_factor`` with ``mode``
    (``"nearest"``, ``"nearest-exact"``, ``"linear"``, ``"bilinear"``, ``"bicubic"``,
    ``"trilinear"``), as ``torch.nn.Upsample``; see
    :func:`pylucid.nn.functional.interpolate`."""

    def __init__(
        self,
        size: int | Sequence[int] | None = None,
        scale_factor: float | Sequence[float] | None = None,
        mode: str = "nearest",
        align_corners: bool | None = None,
        recompute_scale_factor: bool | None = None,
    ) -> None:
        super().__init__()
        self.name = type(self).__name__
        self.size = size
        if isinstance(scale_factor, (tuple, list)):
            self.scale_factor: float | tuple[float, ...] | None = tuple(
                float(factor) for factor in scale_factor
            )
        else:
            self.scale_factor = float(scale_factor) if scale_factor else None
        self.mode, self.align_corners = mode, align_corners
        self.recompute_scale_factor = recompute_scale_factor

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return F.interpolate(input, self.size, self.scale_factor, self.mode, self.align_corners,
                             recompute_scale_factor=self.recompute_scale_factor)  # fmt: skip

    def extra_repr(self) -> str:
        if self.scale_factor is not None:
            info = f"scale_factor={self.scale_factor!r}"
        else:
            info = f"size={self.size!r}"
        return f"{info}, mode={self.mode!r}"


class UpsamplingNearest2d(Upsample):
    """Nearest-neighbour upsampling of ``(N, C, H, W)`` inputs (``Upsample`` with
    ``mode="nearest"``)."""

    def __init__(
        self, size: int | Sequence[int] | None = None,
        scale_factor: float | Sequence[float] | None = None,
    ) -> None:  # fmt: skip
        super().__init__(size, scale_factor, mode="nearest")


class UpsamplingBilinear2d(Upsample):
    """Bilinear upsampling of ``(N, C, H, W)`` inputs with ``align_corners=True``."""

    def __init__(
        self, size: int | Sequence[int] | None = None,
        scale_factor: float | Sequence[float] | None = None,
    ) -> None:  # fmt: skip
        super().__init__(size, scale_factor, mode="bilinear", align_corners=True)
