"""``Conv1d``, ``Conv2d``, ``Conv3d``, ``ConvTranspose1d`` and ``ConvTranspose2d``, as in
``torch.nn`` (:func:`pylucid.nn.functional.conv2d` and the others)."""

from __future__ import annotations

import math
from typing import Any

from pylucid.factories import empty
from pylucid.nn import functional as F  # noqa: N812  (PyTorch's idiom)
from pylucid.nn import init
from pylucid.nn.convolutions import transposed_output_padding
from pylucid.nn.modules.module import Module
from pylucid.nn.parameter import Parameter
from pylucid.tensor import Tensor

__all__ = ["Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d", "ConvTranspose2d"]

_PADDING_MODES = ("zeros", "reflect", "replicate", "circular")


def _tuple(module: str, name: str, value: Any, dims: int) -> tuple[int, ...]:
    values = (value,) * dims if isinstance(value, int) else tuple(value)
    if len(values) != dims or not all(isinstance(v, int) for v in values):
        raise ValueError(f"{module}: {name} must be an int or {dims} ints, got {value!r}")
    return values


class _ConvNd(Module):
    """What the convolutions share: arguments, parameters, initialisation and printing.

    The weight is ``(out_channels, in_channels / groups, *kernel_size)``, or
    ``(in_channels, out_channels / groups, *kernel_size)`` for a ``transposed`` one.
    """

    dims: int
    transposed = False

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
            if padding == "same" and any(s != 1 for s in _tuple(name, "stride", stride, dims)):
                raise ValueError(f"{name}: padding='same' is not supported for strided "
                                 f"convolutions")  # fmt: skip
        self.in_channels, self.out_channels, self.groups = in_channels, out_channels, groups
        self.kernel_size = _tuple(name, "kernel_size", kernel_size, dims)
        self.stride = _tuple(name, "stride", stride, dims)
        self.padding = (
            padding if isinstance(padding, str) else _tuple(name, "padding", padding, dims)
        )
        self.dilation = _tuple(name, "dilation", dilation, dims)
        self.output_padding = (0,) * dims
        self.padding_mode = padding_mode
        kind = {"device": device, **({"dtype": dtype} if dtype is not None else {})}
        channels = (
            (in_channels, out_channels // groups)
            if self.transposed
            else (out_channels, in_channels // groups)
        )
        self.weight = Parameter(empty(*channels, *self.kernel_size, **kind))
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
        if self.output_padding != (0,) * self.dims:
            text += f", output_padding={self.output_padding}"
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


class Conv3d(_ConvNd):
    """3-d convolution over ``(N, C, D, H, W)`` (or ``(C, D, H, W)``) inputs, with a
    ``weight`` of shape ``(out_channels, in_channels / groups, kd, kh, kw)``; arguments as
    ``torch.nn.Conv3d`` (:func:`pylucid.nn.functional.conv3d`)."""

    dims = 3

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return self._convolve(input, F.conv3d)


class _ConvTransposeNd(_ConvNd):
    """What the transposed convolutions share: PyTorch's argument order (``output_padding``
    and ``groups`` before ``dilation``), zero padding only, and ``forward``'s
    ``output_size``, which picks the ``output_padding`` that gives that size."""

    transposed = True

    def __init__(
        self, in_channels: int, out_channels: int, kernel_size: Any, stride: Any = 1,
        padding: Any = 0, output_padding: Any = 0, groups: int = 1, bias: bool = True,
        dilation: Any = 1, padding_mode: str = "zeros", device: str | None = None,
        dtype: Any = None,
    ) -> None:  # fmt: skip
        name = type(self).__name__
        if padding_mode != "zeros":
            raise ValueError(f'{name}: only "zeros" padding mode is supported, got '
                             f"{padding_mode!r}")  # fmt: skip
        if isinstance(padding, str):
            raise ValueError(f"{name}: padding must be ints, got {padding!r}")
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation,
                         groups, bias, padding_mode, device, dtype)  # fmt: skip
        self.output_padding = _tuple(name, "output_padding", output_padding, self.dims)

    def _output_padding(self, input: Tensor, output_size: Any) -> tuple[int, ...]:  # noqa: A002
        if output_size is None:
            return self.output_padding
        return transposed_output_padding(
            type(self).__name__, input.shape, output_size, self.stride, self.padding,
            self.kernel_size, self.dilation,
        )  # fmt: skip


class ConvTranspose1d(_ConvTransposeNd):
    """1-d transposed convolution over ``(N, C, L)`` (or ``(C, L)``) inputs, with a
    ``weight`` of shape ``(in_channels, out_channels / groups, kernel_size)``; arguments as
    ``torch.nn.ConvTranspose1d`` (:func:`pylucid.nn.functional.conv_transpose1d`)."""

    dims = 1

    def forward(self, input: Tensor, output_size: Any = None) -> Tensor:  # noqa: A002
        return F.conv_transpose1d(
            input, self.weight, self.bias, self.stride, self.padding,
            self._output_padding(input, output_size), self.groups, self.dilation,
        )  # fmt: skip


class ConvTranspose2d(_ConvTransposeNd):
    """2-d transposed convolution over ``(N, C, H, W)`` (or ``(C, H, W)``) inputs, with a
    ``weight`` of shape ``(in_channels, out_channels / groups, kh, kw)``; arguments as
    ``torch.nn.ConvTranspose2d`` (:func:`pylucid.nn.functional.conv_transpose2d`): the
    gradient of a convolution with respect to its input, so ``ConvTranspose2d(c, o, k, s,
    p)`` inverts the shapes of ``Conv2d(o, c, k, s, p)``."""

    dims = 2

    def forward(self, input: Tensor, output_size: Any = None) -> Tensor:  # noqa: A002
        return F.conv_transpose2d(
            input, self.weight, self.bias, self.stride, self.padding,
            self._output_padding(input, output_size), self.groups, self.dilation,
        )  # fmt: skip
