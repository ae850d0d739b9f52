"""Linear algebra: matmul with NumPy's semantics.

Public: matmul (and the ``@`` operator, both ways).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from pylucid.backends.base import Backend, Shape
from pylucid.dtypes import DType
from pylucid.ops.base import BinaryOp, broadcast_shapes
from pylucid.ops.schema import AmpPolicy, OpSchema
from pylucid.ops.wrapping import binary_operator, require_tensor, tensor_method
from pylucid.tensor import Tensor

__all__ = [
    "addmm",
    "baddbmm",
    "bmm",
    "dot",
    "mm",
    "mv",
    "outer","MatmulBackward", "matmul"]


def _as_matrices(a_shape: Shape, b_shape: Shape) -> tuple[Shape, Shape]:
    """The operand shapes as stacks of matrices: a 1-d ``a`` is a row, a 1-d ``b`` a column."""
    return (a_shape if len(a_shape) > 1 else (1, *a_shape)), (
        b_shape if len(b_shape) > 1 else (*b_shape, 1)
    )


def _swap_last(ndim: int) -> tuple[int, ...]:
    return (*range(ndim - 2), ndim - 1, ndim - 2)


class MatmulBackward(BinaryOp):
    r"""Autograd node for the matrix product :math:`y = a\,b`; saves ``a`` and ``b``.

    NumPy's ``matmul`` semantics: 2-d operands are matrices; operands of more dimensions are
    stacks of matrices in their last two dimensions, and the stack ("batch") dimensions
    broadcast; a 1-d ``a`` is promoted to a row :math:`(1, k)` and a 1-d ``b`` to a column
    :math:`(k, 1)`, and the added dimension is removed from the result (1-d @ 1-d is the
    0-d dot product). 0-d operands are refused, as by NumPy. Integer operands give an
    integer product (no gradient); bool operands are refused (PyTorch refuses them too).

    With :math:`A, B, G` the promoted operands and output gradient, batch by batch:

    .. math::
        \frac{\partial L}{\partial A} = G B^{\top}, \qquad
        \frac{\partial L}{\partial B} = A^{\top} G

    then summed over the batch dimensions that broadcasting added to an operand (by the
    shared backward) and reshaped to the operand's shape. When ``b`` has no batch
    dimensions, :math:`\partial L / \partial B` is one product of the batch-flattened
    :math:`A^{\top}` and :math:`G` (no per-batch temporaries).
    """

    schema_v1 = OpSchema(
        name="matmul", amp_policy=AmpPolicy.PROMOTE, input_arity=2, saved=("a", "b")
    )
    primitive = "matmul"

    @classmethod
    def output_shape(cls, shapes: Sequence[Shape], **params: Any) -> Shape:
        a_shape, b_shape = shapes
        if not a_shape or not b_shape:
            raise ValueError(
                f"matmul: both operands need at least 1 dimension, got shapes {a_shape} and "
                f"{b_shape}; use mul for a product with a scalar"
            )
        a2, b2 = _as_matrices(a_shape, b_shape)
        if a2[-1] != b2[-2]:
            raise ValueError(
                f"matmul: the inner dimensions of shapes {a_shape} and {b_shape} differ "
                f"({a2[-1]} != {b2[-2]})"
            )
        try:
            batch = broadcast_shapes("matmul", a2[:-2], b2[:-2])
        except ValueError:
            raise ValueError(
                f"matmul: the batch dimensions {a2[:-2]} and {b2[:-2]} of shapes {a_shape} "
                f"and {b_shape} cannot be broadcast together"
            ) from None
        return (
            *batch,
            *((a2[-2],) if len(a_shape) > 1 else ()),
            *((b2[-1],) if len(b_shape) > 1 else ()),
        )

    @classmethod
    def compute_dtype(cls, dtypes: Sequence[DType], **params: Any) -> DType:
        if any(d.name == "bool" for d in dtypes):
            names = " and ".join(d.name for d in dtypes)
            raise TypeError(f"matmul: bool operands are not supported ({names}); convert them")
        return super().compute_dtype(dtypes)

    @staticmethod
    def dispatch(be: Backend, a: Any, b: Any, shape: Shape, dtype: DType) -> Any:
        return be.matmul(a, b, shape, dtype)

    def grad_formula(self, g: Any) -> tuple[Any, Any]:
        be, dtype = self.backend, self.dtype
        a_shape, b_shape = self.input_shapes
        needs_a, needs_b = self.needs_input_grad
        if len(a_shape) == 2 and len(b_shape) == 2:  # two matrices: no batch, no reshapes
            grad_a = grad_b = None
            if needs_a:
                grad_a = be.matmul(g, be.transpose(self.saved["b"], (1, 0)), a_shape, dtype)
            if needs_b:
                grad_b = be.matmul(be.transpose(self.saved["a"], (1, 0)), g, b_shape, dtype)
            return grad_a, grad_b
        a2, b2 = _as_matrices(a_shape, b_shape)
        batch = broadcast_shapes("matmul", a2[:-2], b2[:-2])
        (n, k), m = a2[-2:], b2[-1]
        g = be.reshape(g, (*batch, n, m))
        grad_a = grad_b = None
        if needs_a:
            b_t = be.transpose(be.reshape(self.saved["b"], b2), _swap_last(len(b2)))
            grad_a = be.matmul(g, b_t, (*batch, n, k), dtype)
            if len(a_shape) == 1:
                grad_a = be.reshape(grad_a, (*batch, k))
        if needs_b:
            a = be.reshape(self.saved["a"], a2)
            grad_shape = (*batch, k, m)
            if len(b2) == 2 and batch:  # then a2 has the batch: fold it into the rows
                rows = math.prod(batch) * n
                a, g, grad_shape = be.reshape(a, (rows, k)), be.reshape(g, (rows, m)), (k, m)
            a_t = be.transpose(a, _swap_last(len(be.shape(a))))
            grad_b = be.matmul(a_t, g, grad_shape, dtype)
            if len(b_shape) == 1:
                grad_b = be.reshape(grad_b, grad_shape[:-1])
        return grad_a, grad_b

    def grad_graph(self, g: Tensor) -> tuple[Tensor | None, Tensor | None]:
        a_shape, b_shape = self.input_shapes
        a2, b2 = _as_matrices(a_shape, b_shape)
        batch = broadcast_shapes("matmul", a2[:-2], b2[:-2])
        (n, k), m = a2[-2:], b2[-1]
        g = g.reshape(*batch, n, m)
        needs_a, needs_b = self.needs_input_grad
        grad_a = grad_b = None
        if needs_a:
            grad_a = g @ self.saved_tensor("b").reshape(b2).mT
            if len(a_shape) == 1:
                grad_a = grad_a.reshape(*batch, k)
        if needs_b:
            a = self.saved_tensor("a").reshape(a2)
            if len(b2) == 2 and batch:  # then a2 has the batch: fold it into the rows
                rows = math.prod(batch) * n
                a, g = a.reshape(rows, k), g.reshape(rows, m)
            grad_b = a.mT @ g
            if len(b_shape) == 1:
                grad_b = grad_b.reshape(grad_b.shape[:-1])
        return grad_a, grad_b


@binary_operator("matmul")
@tensor_method
def matmul(a: Tensor, b: Tensor) -> Tensor:
    """The matrix product ``a @ b`` with NumPy's semantics; see :class:`MatmulBackward`."""
    require_tensor("matmul", "a", a)
    require_tensor("matmul", "b", b)
    return MatmulBackward.apply(a, b)


def _check_ndim(op: str, name: str, x: Tensor, ndim: int) -> None:
    require_tensor(op, name, x)
    if x.ndim != ndim:
        raise ValueError(f"{op}: {name} must be {ndim}-d, got shape {x.shape}")


@tensor_method
def mm(a: Tensor, b: Tensor) -> Tensor:
    """The product of two matrices (2-d only, as ``torch.mm``); see :func:`matmul`."""
    _check_ndim("mm", "a", a, 2)
    _check_ndim("mm", "b", b, 2)
    return matmul(a, b)


@tensor_method
def bmm(a: Tensor, b: Tensor) -> Tensor:
    """Batched matrix products of two 3-d tensors with one batch size (no broadcasting, as
    ``torch.bmm``); see :func:`matmul`."""
    _check_ndim("bmm", "a", a, 3)
    _check_ndim("bmm", "b", b, 3)
    if a.shape[0] != b.shape[0]:
        raise ValueError(f"bmm: batch sizes differ: a {a.shape}, b {b.shape}")
    return matmul(a, b)


@tensor_method
def mv(a: Tensor, v: Tensor) -> Tensor:
    """The product of a matrix and a vector."""
    _check_ndim("mv", "a", a, 2)
    _check_ndim("mv", "v", v, 1)
    return matmul(a, v)


@tensor_method
def dot(a: Tensor, b: Tensor) -> Tensor:
    """The inner product of two 1-d tensors of one length."""
    _check_ndim("dot", "a", a, 1)
    _check_ndim("dot", "b", b, 1)
    return matmul(a, b)


@tensor_method
def outer(a: Tensor, b: Tensor) -> Tensor:
    """The outer product ``a[:, None] * b[None, :]`` of two 1-d tensors."""
    _check_ndim("outer", "a", a, 1)
    _check_ndim("outer", "b", b, 1)
    return a.reshape((-1, 1)) * b.reshape((1, -1))


def _scaled_sum(input: Tensor, product: Tensor, beta: float, alpha: float) -> Tensor:  # noqa: A002
    """``beta * input + alpha * product``; ``beta = 0`` ignores ``input`` (nan included),
    as PyTorch does."""
    scaled = product if alpha == 1 else product * alpha
    if beta == 0:
        return scaled
    return (input if beta == 1 else input * beta) + scaled


@tensor_method
def addmm(
    input: Tensor, mat1: Tensor, mat2: Tensor, *, beta: float = 1, alpha: float = 1  # noqa: A002
) -> Tensor:
    """``beta * input + alpha * (mat1 @ mat2)`` (``input`` broadcast), as ``torch.addmm``."""
    return _scaled_sum(input, mm(mat1, mat2), beta, alpha)


@tensor_method
def baddbmm(
    input: Tensor, batch1: Tensor, batch2: Tensor, *, beta: float = 1, alpha: float = 1  # noqa: A002
) -> Tensor:
    """``beta * input + alpha * bmm(batch1, batch2)``, as ``torch.baddbmm``."""
    return _scaled_sum(input, bmm(batch1, batch2), beta, alpha)
