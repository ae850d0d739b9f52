"""The embedding op: the slices of a tensor along one axis at the positions an integer tensor
holds, that tensor being an *input* of the op - its storage goes to the backend, its values
are never read in Python.

Public through :func:`pylucid.nn.functional.embedding` (rows of a weight, with
``padding_idx``), ``x[index]`` with one integer tensor along one dimension
(:func:`pylucid.ops.indexing.getitem`, negative positions counted from the end),
:func:`pylucid.index_select` and :func:`pylucid.nn.functional.nll_loss`; :func:`take` is
their common entry. The positions are checked first by a backend primitive,
``check_indices``, which answers with the first position out of range (an ``IndexError``
naming the op, the value and the valid range, as PyTorch raises one): a compiled step
(:mod:`pylucid.compiler`) runs that check again at every replay, before anything changes,
as it runs the targets' check of ``cross_entropy``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pylucid.backends.base import Backend, Shape
from pylucid.dtypes import DType, int32, int64
from pylucid.ops.base import Op
from pylucid.ops.binary import where
from pylucid.ops.schema import AmpPolicy, OpSchema
from pylucid.ops.wrapping import require_tensor
from pylucid.tensor import Tensor

__all__ = ["EmbeddingBackward", "EmbeddingScatterBackward", "take"]


def _taken_shape(x: Shape, index: Shape, axis: int) -> Shape:
    return (*x[:axis], *index, *x[axis + 1 :])


class EmbeddingBackward(Op):
    r"""Autograd node of :math:`y = x` taken at ``index`` along ``axis``; saves ``index``.

    With :math:`x` seen as :math:`(P, R, Q)` around the axis and the positions
    :math:`r_i` of ``index`` (flattened; negative ones are :math:`r_i + R`), the output
    (``x.shape[:axis] + index.shape + x.shape[axis + 1:]``, seen as :math:`(P, N, Q)`) is
    :math:`y_{p i q} = x_{p r_i q}` and the gradient a scatter-add of :math:`g` into zeros
    of ``x``'s shape, every use of a slice adding to it:

    .. math::
        \frac{\partial L}{\partial x_{p r q}} = \sum_{i \,:\, r_i = r,\ r \ne \pi} g_{p i q}

    where :math:`\pi` is ``padding_idx`` (an embedding's padding row gets no gradient; None:
    every row does). The sum runs in the order of ``index`` (numba: one serial kernel;
    mlx: ``.at[].add``), computed from the saved index by the backend - no value of it
    is read in Python. ``index`` gets no gradient. With ``create_graph=True`` the gradient is
    an :class:`EmbeddingScatterBackward` node (of :math:`g` masked where :math:`r_i = \pi`),
    whose own gradient is this gather again.
    """

    schema_v1 = OpSchema(
        name="embedding", amp_policy=AmpPolicy.KEEP_INPUT, input_arity=2, saved=("index",)
    )
    input_names = ("x", "index")
    uncast_inputs = frozenset({"index"})

    @classmethod
    def output_shape(cls, shapes: Sequence[Shape], *, axis: int, padding_idx: int | None
                     ) -> Shape:  # fmt: skip
        x, index = shapes
        return _taken_shape(x, index, axis)

    @classmethod
    def compute_dtype(cls, dtypes: Sequence[DType], **params: Any) -> DType:
        return dtypes[0]

    @staticmethod
    def dispatch(be: Backend, x: Any, index: Any, shape: Shape, dtype: DType, axis: int,
                 padding_idx: int | None) -> Any:  # fmt: skip
        return be.embedding(x, index, axis, shape, dtype)

    def grad_formula(self, g: Any) -> tuple[Any, None]:
        grad = self.backend.embedding_backward(
            g, self.saved["index"], self.axis, self.padding_idx, self.input_shapes[0], self.dtype
        )
        return grad, None

    def grad_graph(self, g: Tensor) -> tuple[Tensor, None]:
        index = self.saved.tensor("index")
        if self.padding_idx is not None:
            ndim = len(self.input_shapes[0])
            keep = (index != self.padding_idx).reshape(
                (1,) * self.axis + index.shape + (1,) * (ndim - self.axis - 1)
            )
            g = where(keep, g, 0.0)
        size = self.input_shapes[0][self.axis]
        return EmbeddingScatterBackward.apply(g, index, axis=self.axis, size=size), None


class EmbeddingScatterBackward(Op):
    r"""Autograd node of the embedding's gradient as an op (``create_graph=True``): zeros of
    ``g.shape[:axis] + (size,) + g.shape[axis + index.ndim:]`` with the slices of :math:`g`
    added at ``index`` along ``axis`` (:math:`z_{p r q} = \sum_{i : r_i = r} g_{p i q}`);
    saves ``index``. Internal. Its gradient gathers back: :math:`\partial L / \partial
    g_{p i q} = G_{p r_i q}`, an :class:`EmbeddingBackward` node.
    """

    schema_v1 = OpSchema(
        name="embedding_scatter",
        amp_policy=AmpPolicy.KEEP_INPUT,
        input_arity=2,
        saved=("index",),
        internal=True,
    )
    input_names = ("g", "index")
    uncast_inputs = frozenset({"index"})

    @classmethod
    def output_shape(cls, shapes: Sequence[Shape], *, axis: int, size: int) -> Shape:
        g, index = shapes
        return (*g[:axis], size, *g[axis + len(index) :])

    @classmethod
    def compute_dtype(cls, dtypes: Sequence[DType], **params: Any) -> DType:
        return dtypes[0]

    @staticmethod
    def dispatch(be: Backend, g: Any, index: Any, shape: Shape, dtype: DType, axis: int,
                 size: int) -> Any:  # fmt: skip
        return be.embedding_backward(g, index, axis, None, shape, dtype)

    def grad_formula(self, g: Any) -> tuple[Any, None]:
        shape = self.input_shapes[0]
        return self.backend.embedding(g, self.saved["index"], self.axis, shape, self.dtype), None

    def grad_graph(self, g: Tensor) -> tuple[Tensor, None]:
        index = self.saved.tensor("index")
        return EmbeddingBackward.apply(g, index, axis=self.axis, padding_idx=None), None


def take(op: str, x: Tensor, index: Tensor, axis: int, dimension: str, *, negative: bool = False,
         padding_idx: int | None = None) -> Tensor:  # fmt: skip
    """The slices of ``x`` along ``axis`` (normalised) at the positions ``index`` holds (an
    int64 or int32 tensor of any shape on ``x``'s device), after the backend's bounds
    check: each in ``[0, size)``, or in ``[-size, size)`` with ``negative`` (counted from
    the end). ``op`` and ``dimension`` (the axis in words) name them in the errors;
    ``padding_idx`` (non-negative, or None) is the slice that gets no gradient.

    Raises
    ------
    TypeError
        For an ``index`` that is not an int64 or int32 tensor.
    IndexError
        For a position out of range, naming ``op``, the value and the valid range.
    """
    require_tensor(op, "index", index)
    if index.dtype not in (int32, int64):
        raise TypeError(f"{op}: index must be an int64 (or int32) tensor, got {index.dtype.name}")
    size = x.shape[axis]
    be = index._backend
    bad = be.check_indices(index._storage, -size if negative else 0, size)
    if bad >= 0:
        value = int(be.to_numpy(index._storage).reshape(-1)[bad])
        detail = (
            f"(tensor of shape {x.shape})" if negative
            else f"(valid: 0..{size - 1}; negative indices are not counted from the end)"
        )  # fmt: skip
        raise IndexError(
            f"{op}: index {value} is out of range for {dimension} of size {size} {detail}"
        )
    return EmbeddingBackward.apply(x, index, axis=axis, padding_idx=padding_idx)
