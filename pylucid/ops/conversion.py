"""Differentiable conversions and copies: to another dtype, to another device, clone."""

from __future__ import annotations

from typing import Any

from pylucid import backends
from pylucid.backends.base import Backend, Shape
from pylucid.dtypes import DType
from pylucid.ops.base import UnaryOp
from pylucid.ops.schema import AmpPolicy, OpSchema
from pylucid.ops.wrapping import require_tensor, tensor_method
from pylucid.tensor import Tensor

__all__ = ["CloneBackward", "ToDeviceBackward", "ToDtypeBackward", "clone", "to_device", "to_dtype"]


class ToDtypeBackward(UnaryOp):
    r"""Autograd node for a dtype conversion :math:`y = \mathrm{cast}(x)`; saves nothing.

    .. math:: \frac{\partial L}{\partial x} = \mathrm{cast}_{x}(g)

    (the cast back to ``x``'s dtype is done by the shared backward). Converting to an integer
    dtype gives a tensor outside the graph.
    """

    schema_v1 = OpSchema(name="to_dtype", amp_policy=AmpPolicy.KEEP_INPUT)

    @classmethod
    def compute_dtype(cls, dtypes: Any, *, target: DType) -> DType:
        return target

    @staticmethod
    def dispatch(be: Backend, a: Any, shape: Shape, dtype: DType, target: DType) -> Any:
        return a  # Op.apply already cast the input to the compute dtype, ``target``.

    def grad_formula(self, g: Any) -> tuple[Any]:
        return (g,)

    def grad_graph(self, g: Tensor) -> tuple[Tensor]:
        return (g,)


class CloneBackward(UnaryOp):
    r"""Autograd node for a copy :math:`y = x` that shares no memory with ``x``; saves
    nothing.

    .. math:: \frac{\partial L}{\partial x} = g
    """

    schema_v1 = OpSchema(name="clone", amp_policy=AmpPolicy.KEEP_INPUT)

    @staticmethod
    def dispatch(be: Backend, a: Any, shape: Shape, dtype: DType) -> Any:
        return be.clone(a)

    def grad_formula(self, g: Any) -> tuple[Any]:
        return (g,)

    def grad_graph(self, g: Tensor) -> tuple[Tensor]:
        return (g,)


class ToDeviceBackward(UnaryOp):
    r"""Autograd node for a copy to another backend :math:`y = x` on ``target``.

    .. math:: \frac{\partial L}{\partial x} = g \text{ copied back to } x\text{'s backend}
    """

    schema_v1 = OpSchema(name="to_device", amp_policy=AmpPolicy.KEEP_INPUT)

    @classmethod
    def result_backend(cls, backend: Backend, *, target: Backend) -> Backend:
        return target

    @staticmethod
    def dispatch(be: Backend, a: Any, shape: Shape, dtype: DType, target: Backend) -> Any:
        return target.from_numpy(be.to_numpy(a), dtype)

    def grad_formula(self, g: Any) -> tuple[Any]:
        return (self.backend.from_numpy(self.target.to_numpy(g), self.dtype),)

    def grad_graph(self, g: Tensor) -> tuple[Tensor]:
        return (g.to(self.backend.name),)


@tensor_method
def clone(x: Tensor) -> Tensor:
    """A copy of ``x`` in new memory (differentiable): changing one in place leaves the other
    as it was. See :class:`CloneBackward`."""
    require_tensor("clone", "x", x)
    return CloneBackward.apply(x)


def to_dtype(x: Tensor, dtype: DType) -> Tensor:
    """``x`` converted to ``dtype`` (``x`` itself when it already has it)."""
    if x.dtype is dtype:
        return x
    return ToDtypeBackward.apply(x, target=dtype)


def to_device(x: Tensor, device: str) -> Tensor:
    """``x`` copied to ``device`` (``"cpu"``, ``"gpu"`` or a backend name); differentiable."""
    target = backends.resolve(device)
    if target is x._backend:
        return x
    return ToDeviceBackward.apply(x, target=target)
