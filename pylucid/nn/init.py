"""Parameter initialisation, as ``torch.nn.init``: each function fills a tensor in place
(without recording a gradient) and returns it, drawing from ``generator=`` or pylucid's
default generator (:func:`pylucid.manual_seed`).

The draws are made in float64 and rounded once to the tensor's dtype. They are not
PyTorch's random numbers (another generator): to start from PyTorch's weights, load its
``state_dict``.

PyTorch's deprecated names without the trailing underscore (``constant``, ``uniform``,
``normal``, ``eye``, ``dirac``, ``xavier_*``, ``kaiming_*``, ``orthogonal``) call the
functions with a FutureWarning, as PyTorch's.
"""

from __future__ import annotations

import functools
import math
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

from pylucid.dtypes import float64
from pylucid.factories import eye as _eye
from pylucid.factories import from_numpy, full, rand, randn
from pylucid.generator import Generator
from pylucid.graph.grad_mode import no_grad
from pylucid.ops.inplace import copy_
from pylucid.tensor import Tensor

__all__ = [
    "calculate_gain",
    "constant",
    "constant_",
    "dirac",
    "dirac_",
    "eye",
    "eye_",
    "kaiming_normal",
    "kaiming_normal_",
    "kaiming_uniform",
    "kaiming_uniform_",
    "normal",
    "normal_",
    "ones_",
    "orthogonal",
    "orthogonal_",
    "trunc_normal_",
    "uniform",
    "uniform_",
    "xavier_normal",
    "xavier_normal_",
    "xavier_uniform",
    "xavier_uniform_",
    "zeros_",
]

_LINEAR = ("linear", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d",
           "conv_transpose3d", "sigmoid")  # fmt: skip


def calculate_gain(nonlinearity: str, param: float | None = None) -> float:
    """The recommended gain for ``nonlinearity`` (PyTorch's table): 1 for linear layers and
    sigmoid, 5/3 for tanh, sqrt(2) for relu, sqrt(2 / (1 + a^2)) for leaky_relu of slope
    ``param`` (default 0.01), 3/4 for selu."""
    if nonlinearity in _LINEAR:
        return 1.0
    if nonlinearity == "tanh":
        return 5.0 / 3
    if nonlinearity == "relu":
        return math.sqrt(2.0)
    if nonlinearity == "leaky_relu":
        slope = 0.01 if param is None else param
        if isinstance(slope, bool) or not isinstance(slope, (int, float)):
            raise ValueError(f"calculate_gain: negative_slope {slope!r} is not a number")
        return math.sqrt(2.0 / (1 + slope**2))
    if nonlinearity == "selu":
        return 3.0 / 4
    raise ValueError(f"calculate_gain: unsupported nonlinearity {nonlinearity!r}")


def _fans(op: str, tensor: Tensor) -> tuple[int, int]:
    """(fan_in, fan_out): ``(in, out) x`` the receptive field, PyTorch's convention for a
    weight ``(out, in, *kernel)``."""
    if tensor.ndim < 2:
        raise ValueError(
            f"{op}: fan in and fan out need a tensor of 2 or more dimensions, got shape "
            f"{tensor.shape}"
        )
    receptive = math.prod(tensor.shape[2:])
    return tensor.shape[1] * receptive, tensor.shape[0] * receptive


def _fan(op: str, tensor: Tensor, mode: str) -> int:
    if mode not in ("fan_in", "fan_out"):
        raise ValueError(f"{op}: mode must be 'fan_in' or 'fan_out', got {mode!r}")
    fan_in, fan_out = _fans(op, tensor)
    return fan_in if mode == "fan_in" else fan_out


def _fill(op: str, tensor: Tensor, values: Tensor) -> Tensor:
    if not isinstance(tensor, Tensor):
        raise TypeError(f"{op}: expected a Tensor, got {type(tensor).__name__}")
    with no_grad():
        copy_(tensor, values)
    return tensor


def _floating(op: str, tensor: Tensor) -> None:
    if not isinstance(tensor, Tensor):
        raise TypeError(f"{op}: expected a Tensor, got {type(tensor).__name__}")
    if not tensor.dtype.is_floating_point:
        raise TypeError(f"{op}: expected a floating tensor, got {tensor.dtype.name}")


def uniform_(
    tensor: Tensor, a: float = 0.0, b: float = 1.0, generator: Generator | None = None
) -> Tensor:
    """Fill with draws from U(a, b)."""
    _floating("uniform_", tensor)
    if not a <= b:
        raise ValueError(f"uniform_: need a <= b, got a={a}, b={b}")
    draws = rand(*tensor.shape, generator=generator, dtype=float64, device=tensor.device)
    return _fill("uniform_", tensor, draws * (b - a) + a)


def normal_(
    tensor: Tensor, mean: float = 0.0, std: float = 1.0, generator: Generator | None = None
) -> Tensor:
    """Fill with draws from N(mean, std^2)."""
    _floating("normal_", tensor)
    if std < 0:
        raise ValueError(f"normal_: std must be >= 0, got {std}")
    draws = randn(*tensor.shape, generator=generator, dtype=float64, device=tensor.device)
    return _fill("normal_", tensor, draws * std + mean)


def trunc_normal_(
    tensor: Tensor, mean: float = 0.0, std: float = 1.0, a: float = -2.0, b: float = 2.0,
    generator: Generator | None = None,
) -> Tensor:  # fmt: skip
    """Fill with draws from N(mean, std^2) truncated to [a, b] (rejected and redrawn)."""
    _floating("trunc_normal_", tensor)
    if not a < b or std <= 0:
        raise ValueError(f"trunc_normal_: need a < b and std > 0, got a={a}, b={b}, std={std}")
    draws = randn(*tensor.shape, generator=generator, dtype=float64).numpy() * std + mean
    outside = (draws < a) | (draws > b)
    while outside.any():
        redrawn = randn(int(outside.sum()), generator=generator, dtype=float64).numpy()
        redrawn = redrawn * std + mean
        draws[outside] = redrawn
        outside = (draws < a) | (draws > b)
    return _fill("trunc_normal_", tensor, from_numpy(draws).to(tensor.device))


def constant_(tensor: Tensor, val: float) -> Tensor:
    """Fill with ``val``."""
    return _fill("constant_", tensor, full(tensor.shape, val, dtype=tensor.dtype,
                                           device=tensor.device))  # fmt: skip


def zeros_(tensor: Tensor) -> Tensor:
    """Fill with zeros."""
    return constant_(tensor, 0)


def ones_(tensor: Tensor) -> Tensor:
    """Fill with ones."""
    return constant_(tensor, 1)


def eye_(tensor: Tensor) -> Tensor:
    """Fill a 2-d tensor with the identity (ones on the diagonal)."""
    if not isinstance(tensor, Tensor) or tensor.ndim != 2:
        raise ValueError("eye_: expected a 2-d tensor")
    rows, columns = tensor.shape
    return _fill("eye_", tensor, _eye(rows, columns, dtype=tensor.dtype, device=tensor.device))


def xavier_uniform_(
    tensor: Tensor, gain: float = 1.0, generator: Generator | None = None
) -> Tensor:
    """Glorot's uniform: U(-a, a) with ``a = gain sqrt(6 / (fan_in + fan_out))``."""
    fan_in, fan_out = _fans("xavier_uniform_", tensor)
    bound = gain * math.sqrt(6.0 / (fan_in + fan_out))
    return uniform_(tensor, -bound, bound, generator)


def xavier_normal_(tensor: Tensor, gain: float = 1.0, generator: Generator | None = None) -> Tensor:
    """Glorot's normal: N(0, std^2) with ``std = gain sqrt(2 / (fan_in + fan_out))``."""
    fan_in, fan_out = _fans("xavier_normal_", tensor)
    return normal_(tensor, 0.0, gain * math.sqrt(2.0 / (fan_in + fan_out)), generator)


def kaiming_uniform_(
    tensor: Tensor, a: float = 0.0, mode: str = "fan_in", nonlinearity: str = "leaky_relu",
    generator: Generator | None = None,
) -> Tensor:  # fmt: skip
    """He's uniform: U(-b, b) with ``b = gain sqrt(3 / fan)`` (``gain`` of
    ``nonlinearity`` with slope ``a``). ``nn.Linear`` and the convolutions start from
    ``a = sqrt(5)``, a bound of ``1 / sqrt(fan_in)``."""
    fan = _fan("kaiming_uniform_", tensor, mode)
    bound = calculate_gain(nonlinearity, a) * math.sqrt(3.0 / fan) if fan else 0.0
    return uniform_(tensor, -bound, bound, generator)


def kaiming_normal_(
    tensor: Tensor, a: float = 0.0, mode: str = "fan_in", nonlinearity: str = "leaky_relu",
    generator: Generator | None = None,
) -> Tensor:  # fmt: skip
    """He's normal: N(0, std^2) with ``std = gain / sqrt(fan)``."""
    fan = _fan("kaiming_normal_", tensor, mode)
    std = calculate_gain(nonlinearity, a) / math.sqrt(fan) if fan else 0.0
    return normal_(tensor, 0.0, std, generator)


def dirac_(tensor: Tensor, groups: int = 1) -> Tensor:
    """Fill a 3-, 4- or 5-d convolution weight ``(out, in, *kernel)`` with the Dirac delta:
    a 1 at the kernel's centre (``k // 2`` on each axis) linking output channel ``d`` of
    each of the ``groups`` to input channel ``d``, zeros elsewhere, so that the convolution
    keeps as many input channels as it can unchanged."""
    if not isinstance(tensor, Tensor) or tensor.ndim not in (3, 4, 5):
        shape = getattr(tensor, "shape", type(tensor).__name__)
        raise ValueError(f"dirac_: only tensors with 3, 4, or 5 dimensions are supported, "
                         f"got {shape}")  # fmt: skip
    out_channels = tensor.shape[0]
    if (
        isinstance(groups, bool)
        or not isinstance(groups, int)
        or groups < 1
        or (out_channels % groups)
    ):
        raise ValueError(f"dirac_: dim 0 ({out_channels}) must be divisible by groups "
                         f"({groups!r})")  # fmt: skip
    per_group = out_channels // groups
    values = np.zeros(tensor.shape)
    centre = tuple(k // 2 for k in tensor.shape[2:])
    for g in range(groups):
        for d in range(min(per_group, tensor.shape[1])):
            values[(g * per_group + d, d, *centre)] = 1.0
    return _fill("dirac_", tensor, from_numpy(values).to(tensor.device))


def orthogonal_(tensor: Tensor, gain: float = 1.0, generator: Generator | None = None) -> Tensor:
    """Fill with a (semi-)orthogonal matrix times ``gain``: the tensor flattened to
    ``(rows, numel / rows)`` has orthonormal rows or columns (whichever are fewer), the Q of
    the QR decomposition of a standard normal draw with its signs fixed by R's diagonal
    (Saxe et al.), as PyTorch's."""
    _floating("orthogonal_", tensor)
    if tensor.ndim < 2:
        raise ValueError(f"orthogonal_: only tensors with 2 or more dimensions are supported, "
                         f"got shape {tensor.shape}")  # fmt: skip
    if tensor.numel() == 0:
        return tensor
    rows = tensor.shape[0]
    columns = tensor.numel() // rows
    draws = randn(rows, columns, generator=generator, dtype=float64).numpy()
    if rows < columns:
        draws = draws.T
    q, r = np.linalg.qr(draws)
    q = q * np.sign(np.diag(r))
    if rows < columns:
        q = q.T
    values = q.reshape(tensor.shape) * gain
    return _fill("orthogonal_", tensor, from_numpy(np.ascontiguousarray(values)).to(tensor.device))


def _deprecated(function: Callable[..., Tensor]) -> Callable[..., Tensor]:
    """PyTorch's deprecated name (without the trailing underscore) of ``function``."""
    old = function.__name__[:-1]

    @functools.wraps(function)
    def deprecated(*args: Any, **kwargs: Any) -> Tensor:
        warnings.warn(
            f"`nn.init.{old}` is now deprecated in favor of `nn.init.{function.__name__}`.",
            FutureWarning,
            stacklevel=2,
        )
        return function(*args, **kwargs)

    deprecated.__name__ = deprecated.__qualname__ = old
    deprecated.__doc__ = f"Deprecated: :func:`{function.__name__}`, with a FutureWarning."
    return deprecated


uniform = _deprecated(uniform_)
normal = _deprecated(normal_)
constant = _deprecated(constant_)
eye = _deprecated(eye_)
dirac = _deprecated(dirac_)
xavier_uniform = _deprecated(xavier_uniform_)
xavier_normal = _deprecated(xavier_normal_)
kaiming_uniform = _deprecated(kaiming_uniform_)
kaiming_normal = _deprecated(kaiming_normal_)
orthogonal = _deprecated(orthogonal_)
