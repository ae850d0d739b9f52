"""``Conv1d`` and ``Conv2d``, as in ``torch.nn`` (:func:`pylucid.nn.functional.conv2d`)."""

from __future__ import annotations

import math
from typing import Any

from pylucid.factories import empty
from pylucid.nn import functional as F  # noqa: N812  (PyTorch's idiom)
from pylucid.nn import init
from pylucid.nn.modules.module import Module
from pylucid.nn.parameter import Parameter
from pylucid.tensor import Tensor

__all__ = ["Conv1d", "Conv2d"]

_PADDING_MODES = ("zeros", "reflect", "replicate", "circular")


def _tuple(name: str, value: Any, dims: int) -> tuple[int, ...]:
    values = (value,) * dims if isinstance(value, int) else tuple(value)
    if len(values) != dims or not all(isinstance(v, int) for v in values):
        raise ValueError(f"Conv{dims}d: {name} must be an int or {dims} ints, got {value!r}")
    return values


class _ConvNd(Module):
    """What the convolutions share: arguments, parameters, initialisation and printing."""

    dims: int

    def __init__(
        self, in_channels: int, out_channels: int, kernel_size: Any, stride: Any = 1,
        padding: Any = 0, dilation: Any = 1, groups: int = 1, bias: bool = True,
        padding_mode: str = "zeros", device: str | None = None, dtype: Any = None,
    ) -> None:  # fmt: skip
        super().__init__()
        name, dims = type(self).__name__, self.dims
        if groups <= 0 or in_channels % groups or out_channels % groups:
            raise ValueError(
                f"{name}: in_channels ({in_channels}) and out_channels ({out_channels}) must "
                f"be divisible by groups ({groups})"
            )
        if padding_mode not in _PADDING_MODES:
            raise ValueError(f"{name}: padding_mode must be one of {_PADDING_MODES}, got "
                             f"{padding_mode!r}")  # fmt: skip
        if isinstance(padding, str):
            if padding not in ("same", "valid"):
                raise ValueError(f"{name}: padding must be 'same', 'valid' or ints, got "
                                 f"{padding!r}")  # fmt: skip
            if padding == "same" and any(s != 1 for s in _tuple("stride", stride, dims)):
                raise ValueError(f"{name}: padding='same' is not supported for strided "
                                 f"convolutions")  # fmt: skip
        self.in_channels, self.out_channels, self.groups = in_channels, out_channels, groups
        self.kernel_size = _tuple("kernel_size", kernel_size, dims)
        self.stride = _tuple("stride", stride, dims)
        self.padding = padding if isinstance(padding, str) else _tuple("padding", padding, dims)
        self.dilation = _tuple("dilation", dilation, dims)
        self.padding_mode = padding_mode
        kind = {"device": device, **({"dtype": dtype} if dtype is not None else {})}
        self.weight = Parameter(empty(out_channels, in_channels // groups, *self.kernel_size,
                                      **kind))  # fmt: skip
        if bias:
            self.bias = Parameter(empty(out_channels, **kind))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """PyTorch's initialisation: ``kaiming_uniform_(a=sqrt(5))`` for the weight,
        ``U(-1/sqrt(fan_in), 1/sqrt(fan_in))`` for the bias."""
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            fan_in = self.weight.shape[1] * math.prod(self.kernel_size)
            bound = 1 / math.sqrt(fan_in) if fan_in else 0
            init.uniform_(self.bias, -bound, bound)

    def _convolve(self, input: Tensor, conv: Any) -> Tensor:  # noqa: A002
        if self.padding_mode == "zeros":
            return conv(input, self.weight, self.bias, self.stride, self.padding,
                        self.dilation, self.groups)  # fmt: skip
        if self.padding == "same":  # PyTorch's: the odd one of dilation (k - 1) at the end
            totals = [d * (k - 1) for d, k in zip(self.dilation, self.kernel_size)]
            pairs = [(total // 2, total - total // 2) for total in totals]
        elif self.padding == "valid":
            pairs = [(0, 0)] * self.dims
        else:
            pairs = [(p, p) for p in self.padding]
        amounts = tuple(p for pair in reversed(pairs) for p in pair)
        padded = F.pad(input, amounts, mode=self.padding_mode)
        return conv(padded, self.weight, self.bias, self.stride, 0, self.dilation, self.groups)

    def extra_repr(self) -> str:
        text = (
            f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
            f"stride={self.stride}"
        )
        zeros = (0,) * self.dims
        if self.padding != zeros:
            text += f", padding={self.padding}"
        if self.dilation != (1,) * self.dims:
            text += f", dilation={self.dilation}"
        if self.groups != 1:
            text += f", groups={self.groups}"
        if self.bias is None:
            text += ", bias=False"
        if self.padding_mode != "zeros":
            text += f", padding_mode={self.padding_mode}"
        return text


class Conv1d(_ConvNd):
    """1-d convolution over ``(N, C, L)`` (or ``(C, L)``) inputs, with a ``weight`` of shape
    ``(out_channels, in_channels / groups, kernel_size)``; arguments as
    ``torch.nn.Conv1d``."""

    dims = 1

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return self._convolve(input, F.conv1d)


class Conv2d(_ConvNd):
    """2-d convolution over ``(N, C, H, W)`` (or ``(C, H, W)``) inputs, with a ``weight`` of
    shape ``(out_channels, in_channels / groups, kh, kw)``; arguments as
    ``torch.nn.Conv2d``."""

    dims = 2

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return self._convolve(input, F.conv2d)
