"""Rounding to integers: floor, ceil, trunc, round (ties to even, as ``torch.round``).

Public: floor, ceil, trunc, round (also Tensor methods; ``round`` shadows Python's built-in
only inside ``pylucid``: ``pl.round``).

Each output keeps the input's dtype (integer tensors pass unchanged; nan, +-inf and -0 are
kept). The gradient is zero everywhere, as PyTorch's: the output is piecewise constant, and
a loss through a rounding gives its inputs a zero ``.grad`` rather than none. On the CPU each
is a Numba loop of ``np.floor`` (``ceil``, ``trunc``, ``rint``); on MLX, ``mlx.core``'s own.
AMP: KEEP_INPUT.
"""

from __future__ import annotations

from typing import Any

from pylucid.ops.schema import AmpPolicy, OpSchema
from pylucid.ops.unary import PointwiseOp
from pylucid.ops.wrapping import unary_wrapper
from pylucid.tensor import Tensor

__all__ = [
    "CeilBackward",
    "FloorBackward",
    "RoundBackward",
    "TruncBackward",
    "ceil",
    "floor",
    "round",
    "trunc",
]

_KEEP = AmpPolicy.KEEP_INPUT


class _RoundingOp(PointwiseOp):
    """A rounding: the backend primitive named like the op forward, a zero gradient."""

    def grad_formula(self, g: Any) -> tuple[Any]:
        return (self.backend.full(self.shape, 0.0, self.dtype),)

    def grad_graph(self, g: Tensor) -> tuple[Tensor]:
        return (g * 0.0,)


class FloorBackward(_RoundingOp):
    r"""Autograd node for :math:`y = \lfloor x \rfloor`; saves nothing.

    .. math:: \frac{\partial L}{\partial x} = 0
    """

    schema_v1 = OpSchema(name="floor", amp_policy=_KEEP)


class CeilBackward(_RoundingOp):
    r"""Autograd node for :math:`y = \lceil x \rceil`; saves nothing.

    .. math:: \frac{\partial L}{\partial x} = 0
    """

    schema_v1 = OpSchema(name="ceil", amp_policy=_KEEP)


class TruncBackward(_RoundingOp):
    r"""Autograd node for :math:`y = \operatorname{trunc} x` (toward zero); saves nothing.

    .. math:: \frac{\partial L}{\partial x} = 0
    """

    schema_v1 = OpSchema(name="trunc", amp_policy=_KEEP)


class RoundBackward(_RoundingOp):
    r"""Autograd node for :math:`y = \operatorname{round} x`, the nearest integer with ties
    to even (``torch.round``, ``np.rint``: 0.5 and -0.5 give 0, 2.5 gives 2); saves nothing.

    .. math:: \frac{\partial L}{\partial x} = 0
    """

    schema_v1 = OpSchema(name="round", amp_policy=_KEEP)


floor = unary_wrapper(FloorBackward)
ceil = unary_wrapper(CeilBackward)
trunc = unary_wrapper(TruncBackward)
round = unary_wrapper(RoundBackward)  # noqa: A001  (pl.round, as torch.round)
