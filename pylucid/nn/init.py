"""Parameter initialisation, as ``torch.nn.init``: each function fills a tensor in place
(without recording a gradient) and returns it, drawing from ``generator=`` or pylucid's
default generator (:func:`pylucid.manual_seed`).

The draws are made in float64 and rounded once to the tensor's dtype. They are not
PyTorch's random numbers (another generator): to start from PyTorch's weights, load its
``state_dict``.
"""

from __future__ import annotations

import math

from pylucid.dtypes import float64
from pylucid.factories import eye, from_numpy, full, rand, randn
from pylucid.generator import Generator
from pylucid.graph.grad_mode import no_grad
from pylucid.ops.inplace import copy_
from pylucid.tensor import Tensor

__all__ = [
    "calculate_gain",
    "constant_",
    "eye_",
    "kaiming_normal_",
    "kaiming_uniform_",
    "normal_",
    "ones_",
    "trunc_normal_",
    "uniform_",
    "xavier_normal_",
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
    return _fill("eye_", tensor, eye(rows, columns, dtype=tensor.dtype, device=tensor.device))


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
