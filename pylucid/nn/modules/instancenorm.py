"""``InstanceNorm1d``, ``InstanceNorm2d`` and ``InstanceNorm3d``, as in ``torch.nn``
(:func:`pylucid.nn.functional.instance_norm`)."""

from __future__ import annotations

import warnings
from typing import Any

from pylucid.nn import functional as F  # noqa: N812  (PyTorch's idiom)
from pylucid.nn.modules.normalization import _BatchNorm
from pylucid.tensor import Tensor

__all__ = ["InstanceNorm1d", "InstanceNorm2d", "InstanceNorm3d"]


class _InstanceNorm(_BatchNorm):
    """Instance normalisation: each ``(n, c)`` plane by its own statistics.

    The parameters and buffers are batch norm's (``weight``, ``bias`` with ``affine``;
    ``running_mean``, ``running_var``, ``num_batches_tracked`` with
    ``track_running_stats``), so state dicts have PyTorch's keys. In training, or always
    without ``track_running_stats``, the instances' own statistics normalise and the running
    ones (where kept) follow their batch averages with ``momentum`` (None: 0, no update, as
    PyTorch's; ``num_batches_tracked`` is never counted); in evaluation with
    ``track_running_stats`` the running ones normalise. An unbatched input (no ``N``) is
    one instance.
    """

    #: The dimensions of an unbatched input (channels and the spatial ones).
    unbatched_dims: int

    def __init__(
        self, num_features: int, eps: float = 1e-5, momentum: float | None = 0.1,
        affine: bool = False, track_running_stats: bool = False, device: str | None = None,
        dtype: Any = None, *, bias: bool = True,
    ) -> None:  # fmt: skip
        super().__init__(num_features, eps, momentum, affine, track_running_stats, device,
                         dtype, bias=bias)  # fmt: skip

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        name, dims = type(self).__name__, self.unbatched_dims
        if input.ndim not in (dims, dims + 1):
            raise ValueError(f"{name}: expected a {dims}-d or {dims + 1}-d input, got shape "
                             f"{input.shape}")  # fmt: skip
        channel = input.ndim - dims
        if input.shape[channel] != self.num_features:
            if self.affine:
                raise ValueError(
                    f"{name}: expected input's size at dim={channel} to match num_features "
                    f"({self.num_features}), but got: {input.shape[channel]}."
                )
            warnings.warn(
                f"{name}: input's size at dim={channel} does not match num_features "
                f"({self.num_features}); num_features is not used because affine=False",
                UserWarning,
                stacklevel=2,
            )
        batched = input if input.ndim == dims + 1 else input.reshape(1, *input.shape)
        out = F.instance_norm(
            batched, self.running_mean, self.running_var, self.weight, self.bias,
            self.training or not self.track_running_stats,
            0.0 if self.momentum is None else self.momentum, self.eps,
        )  # fmt: skip
        return out if input.ndim == dims + 1 else out.reshape(input.shape)


class InstanceNorm1d(_InstanceNorm):
    """Instance normalisation of ``(N, C, L)`` or ``(C, L)`` inputs."""

    unbatched_dims = 2


class InstanceNorm2d(_InstanceNorm):
    """Instance normalisation of ``(N, C, H, W)`` or ``(C, H, W)`` inputs."""

    unbatched_dims = 3


class InstanceNorm3d(_InstanceNorm):
    """Instance normalisation of ``(N, C, D, H, W)`` or ``(C, D, H, W)`` inputs."""

    unbatched_dims = 4
