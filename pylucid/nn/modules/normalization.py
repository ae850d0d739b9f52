"""``BatchNorm1d``, ``BatchNorm2d``, ``LayerNorm`` and ``RMSNorm``, as in ``torch.nn``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pylucid.dtypes import int64
from pylucid.factories import ones, tensor, zeros
from pylucid.graph.grad_mode import no_grad
from pylucid.nn import functional as F  # noqa: N812  (PyTorch's idiom)
from pylucid.nn.modules.module import Module
from pylucid.nn.parameter import Parameter
from pylucid.ops.inplace import add_
from pylucid.tensor import Tensor

__all__ = ["BatchNorm1d", "BatchNorm2d", "LayerNorm", "RMSNorm"]


class _BatchNorm(Module):
    """Batch normalisation per channel (axis 1); see :func:`pylucid.nn.functional.batch_norm`.

    In training the batch's statistics normalise, and the running ones (buffers
    ``running_mean``, ``running_var``, ``num_batches_tracked``) are updated with
    ``momentum`` (None: a cumulative average, ``1 / num_batches_tracked``); in evaluation
    the running ones normalise. Without ``track_running_stats`` the batch's are always used.
    """

    expected_dims: tuple[int, ...]
    _optional_state = ("num_batches_tracked",)

    def __init__(
        self, num_features: int, eps: float = 1e-5, momentum: float | None = 0.1,
        affine: bool = True, track_running_stats: bool = True, device: str | None = None,
        dtype: Any = None, *, bias: bool = True,
    ) -> None:  # fmt: skip
        super().__init__()
        self.num_features, self.eps, self.momentum = num_features, eps, momentum
        self.affine, self.track_running_stats = affine, track_running_stats
        kind = {"device": device, **({"dtype": dtype} if dtype is not None else {})}
        if affine:
            self.weight = Parameter(ones(num_features, **kind))
            if bias:
                self.bias = Parameter(zeros(num_features, **kind))
            else:
                self.register_parameter("bias", None)
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)
        if track_running_stats:
            self.register_buffer("running_mean", zeros(num_features, **kind))
            self.register_buffer("running_var", ones(num_features, **kind))
            self.register_buffer("num_batches_tracked", tensor(0, dtype=int64, device=device))
        else:
            for name in ("running_mean", "running_var", "num_batches_tracked"):
                self.register_buffer(name, None)

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        if input.ndim not in self.expected_dims:
            raise ValueError(
                f"{type(self).__name__}: expected a {' or '.join(map(str, self.expected_dims))}"
                f"-d input, got shape {input.shape}"
            )
        factor = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats and self.num_batches_tracked is not None:
            with no_grad():
                add_(self.num_batches_tracked, 1)
            if self.momentum is None:
                factor = 1.0 / float(self.num_batches_tracked.item())
        use_batch = self.training or self.running_mean is None
        tracked = not self.training or self.track_running_stats
        return F.batch_norm(
            input, self.running_mean if tracked else None,
            self.running_var if tracked else None, self.weight, self.bias, use_batch,
            factor, self.eps,
        )  # fmt: skip

    def extra_repr(self) -> str:
        return (
            f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, "
            f"affine={self.affine}, bias={self.bias is not None}, "
            f"track_running_stats={self.track_running_stats}"
        )


class BatchNorm1d(_BatchNorm):
    """Batch normalisation of ``(N, C)`` or ``(N, C, L)`` inputs."""

    expected_dims = (2, 3)


class BatchNorm2d(_BatchNorm):
    """Batch normalisation of ``(N, C, H, W)`` inputs."""

    expected_dims = (4,)


class LayerNorm(Module):
    """Layer normalisation over the trailing ``normalized_shape``, with an elementwise
    ``weight`` (ones) and ``bias`` (zeros) of that shape; see
    :func:`pylucid.nn.functional.layer_norm`."""

    def __init__(
        self, normalized_shape: int | Sequence[int], eps: float = 1e-5,
        elementwise_affine: bool = True, bias: bool = True, device: str | None = None,
        dtype: Any = None,
    ) -> None:  # fmt: skip
        super().__init__()
        shape = (normalized_shape,) if isinstance(normalized_shape, int) else normalized_shape
        self.normalized_shape = tuple(shape)
        self.eps, self.elementwise_affine = eps, elementwise_affine
        kind = {"device": device, **({"dtype": dtype} if dtype is not None else {})}
        if elementwise_affine:
            self.weight = Parameter(ones(*self.normalized_shape, **kind))
            if bias:
                self.bias = Parameter(zeros(*self.normalized_shape, **kind))
            else:
                self.register_parameter("bias", None)
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return F.layer_norm(input, self.normalized_shape, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return (
            f"{self.normalized_shape}, eps={self.eps}, "
            f"elementwise_affine={self.elementwise_affine}, bias={self.bias is not None}"
        )


class RMSNorm(Module):
    """Root-mean-square normalisation over the trailing ``normalized_shape``, with an
    elementwise ``weight`` (ones) of that shape; ``eps`` None takes the input dtype's
    machine epsilon. See :func:`pylucid.nn.functional.rms_norm`."""

    def __init__(
        self, normalized_shape: int | Sequence[int], eps: float | None = None,
        elementwise_affine: bool = True, device: str | None = None, dtype: Any = None,
    ) -> None:  # fmt: skip
        super().__init__()
        shape = (normalized_shape,) if isinstance(normalized_shape, int) else normalized_shape
        self.normalized_shape = tuple(shape)
        self.eps, self.elementwise_affine = eps, elementwise_affine
        kind = {"device": device, **({"dtype": dtype} if dtype is not None else {})}
        if elementwise_affine:
            self.weight = Parameter(ones(*self.normalized_shape, **kind))
        else:
            self.register_parameter("weight", None)

    def reset_parameters(self) -> None:
        """The weight back to ones."""
        if self.weight is not None:
            with no_grad():
                self.weight.fill_(1.0)

    def forward(self, x: Tensor) -> Tensor:
        return F.rms_norm(x, self.normalized_shape, self.weight, self.eps)

    def extra_repr(self) -> str:
        return (
            f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}"
        )
