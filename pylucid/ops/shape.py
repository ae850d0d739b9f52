"""Shape ops: transpose, permute, reshape, expand, concatenate, stack and their relatives.

Public: transpose, swapaxes, permute, ``.T``, ``.mT``, reshape, view, flatten, squeeze,
unsqueeze, expand, broadcast_to, concatenate (alias cat), stack, split.

They move data without arithmetic, so they keep their input's dtype (``KEEP_INPUT``) and,
on the numba backend, return NumPy views where NumPy can (transpose, reshape of a contiguous
array, expand, a basic slice): zero copies. Their gradients only read ``g`` (never write
into a view of another array).

``view`` is an alias of ``reshape``: pylucid has no in-place ops, so whether a result shares
memory with its input is only visible through ``numpy()`` on the numba backend, and
``reshape`` already returns a view whenever NumPy can (it copies, rather than failing as
PyTorch's ``view`` does, when the input's strides do not allow one). ``flatten``,
``squeeze`` and ``unsqueeze`` are reshapes too (their node is :class:`ReshapeBackward`), and
``split`` returns slices (:class:`~pylucid.ops.indexing.GetitemBackward` nodes).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from pylucid.backends.base import Backend, Shape
from pylucid.compat import differs
from pylucid.dtypes import DType, names_dtype
from pylucid.ops import views
from pylucid.ops.base import VARIADIC, Op, UnaryOp, broadcast_shapes
from pylucid.ops.indexing import GetitemBackward, plan_index
from pylucid.ops.schema import AmpPolicy, OpSchema
from pylucid.ops.wrapping import dunder, normalize_axes, require_tensor, tensor_method
from pylucid.tensor import Tensor

__all__ = [
    "ConcatenateBackward",
    "ExpandBackward",
    "PermuteBackward",
    "ReshapeBackward",
    "StackBackward",
    "TransposeBackward",
    "broadcast_to",
    "chunk",
    "cat",
    "concatenate",
    "expand",
    "flatten",
    "permute",
    "reshape",
    "split",
    "tensor_split",
    "squeeze",
    "stack",
    "swapaxes",
    "t",
    "transpose",
    "unsqueeze",
    "view",
]


# -- argument checks -------------------------------------------------------------------------
def _is_int(value: Any) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def _axis(op: str, axis: Any, ndim: int, name: str = "axis") -> int:
    """``axis`` as an index in ``range(ndim)`` (negative counts from the end)."""
    if not _is_int(axis):
        raise TypeError(f"{op}: {name} must be an integer, got {axis!r}")
    if not -ndim <= axis < ndim:
        raise ValueError(
            f"{op}: {name} {axis} is out of range for a tensor of {ndim} dimensions; valid "
            f"values are {-ndim}..{ndim - 1}"
        )
    return int(axis) % ndim


def _alias(op: str, axis: Any, dim: Any, default: Any = None) -> Any:
    """NumPy's ``axis=`` or PyTorch's ``dim=`` (not both)."""
    if dim is not None:
        if axis is not None:
            raise TypeError(f"{op}: pass axis= or its alias dim=, not both")
        return dim
    return default if axis is None else axis


def _sizes(op: str, args: tuple[Any, ...], what: str = "sizes") -> tuple[int, ...]:
    """Sizes given as ``f(x, 2, 3)`` or ``f(x, (2, 3))``, checked to be integers."""
    if len(args) == 1 and isinstance(args[0], (tuple, list)):
        args = tuple(args[0])
    if not all(_is_int(n) for n in args):
        raise TypeError(f"{op}: {what} must be integers, got {args!r}")
    return tuple(int(n) for n in args)


def _tensors(op: str, tensors: Any) -> list[Tensor]:
    if isinstance(tensors, Tensor) or not isinstance(tensors, Sequence):
        raise TypeError(f"{op}: expected a list or tuple of tensors, got {type(tensors).__name__}")
    if not tensors:
        raise ValueError(f"{op}: expected at least one tensor, got an empty sequence")
    for i, t in enumerate(tensors):
        require_tensor(op, f"tensors[{i}]", t)
    return list(tensors)


# -- permutations ----------------------------------------------------------------------------
def _swap(ndim: int, dim0: int, dim1: int) -> tuple[int, ...]:
    perm = list(range(ndim))
    perm[dim0], perm[dim1] = dim1, dim0
    return tuple(perm)


def _inverse(dims: tuple[int, ...]) -> tuple[int, ...]:
    """The permutation that undoes ``dims``."""
    return tuple(int(i) for i in np.argsort(dims))


class TransposeBackward(UnaryOp):
    r"""Autograd node for swapping two dimensions, :math:`y = x^{\top}` in ``dim0, dim1``;
    saves nothing. The swap is its own inverse:

    .. math:: \frac{\partial L}{\partial x} = g^{\top} \text{ (the same two dimensions)}
    """

    schema_v1 = OpSchema(name="transpose", amp_policy=AmpPolicy.KEEP_INPUT)
    returns_view = True

    @classmethod
    def output_shape(cls, shapes: Sequence[Shape], *, dim0: int, dim1: int) -> Shape:
        (shape,) = shapes
        return tuple(shape[i] for i in _swap(len(shape), dim0, dim1))

    @staticmethod
    def dispatch(be: Backend, a: Any, shape: Shape, dtype: DType, dim0: int, dim1: int) -> Any:
        return be.transpose(a, _swap(len(shape), dim0, dim1))

    @classmethod
    def view_layout(cls, layout: np.ndarray, *, dim0: int, dim1: int) -> np.ndarray:
        return np.transpose(layout, _swap(layout.ndim, dim0, dim1))

    def grad_formula(self, g: Any) -> tuple[Any]:
        return (self.backend.transpose(g, _swap(len(self.shape), self.dim0, self.dim1)),)

    def grad_graph(self, g: Tensor) -> tuple[Tensor]:
        return (TransposeBackward.apply(g, dim0=self.dim0, dim1=self.dim1),)


class PermuteBackward(UnaryOp):
    r"""Autograd node for :math:`y = x` with dimensions reordered, ``y.shape[i] =
    x.shape[dims[i]]``; saves nothing. The gradient applies the inverse permutation
    :math:`\pi^{-1}`:

    .. math:: \frac{\partial L}{\partial x} = \operatorname{permute}(g, \pi^{-1})
    """

    schema_v1 = OpSchema(name="permute", amp_policy=AmpPolicy.KEEP_INPUT)
    returns_view = True

    @classmethod
    def output_shape(cls, shapes: Sequence[Shape], *, dims: tuple[int, ...]) -> Shape:
        (shape,) = shapes
        return tuple(shape[d] for d in dims)

    @staticmethod
    def dispatch(be: Backend, a: Any, shape: Shape, dtype: DType, dims: tuple[int, ...]) -> Any:
        return be.transpose(a, dims)

    @classmethod
    def view_layout(cls, layout: np.ndarray, *, dims: tuple[int, ...]) -> np.ndarray:
        return np.transpose(layout, dims)

    def grad_formula(self, g: Any) -> tuple[Any]:
        return (self.backend.transpose(g, _inverse(self.dims)),)

    def grad_graph(self, g: Tensor) -> tuple[Tensor]:
        return (PermuteBackward.apply(g, dims=_inverse(self.dims)),)


@tensor_method
def transpose(x: Tensor, dim0: int, dim1: int) -> Tensor:
    """``x`` with dimensions ``dim0`` and ``dim1`` swapped; see :class:`TransposeBackward`."""
    require_tensor("transpose", "x", x)
    ndim = x.ndim
    d0, d1 = _axis("transpose", dim0, ndim, "dim0"), _axis("transpose", dim1, ndim, "dim1")
    return TransposeBackward.apply(x, dim0=d0, dim1=d1)


@tensor_method
def swapaxes(x: Tensor, axis0: int, axis1: int) -> Tensor:
    """NumPy's name for :func:`transpose`: ``x`` with ``axis0`` and ``axis1`` swapped."""
    require_tensor("swapaxes", "x", x)
    a0, a1 = _axis("swapaxes", axis0, x.ndim, "axis0"), _axis("swapaxes", axis1, x.ndim, "axis1")
    return TransposeBackward.apply(x, dim0=a0, dim1=a1)


@tensor_method
def permute(x: Tensor, *dims: Any) -> Tensor:
    """``x`` with its dimensions reordered: ``permute(x, 2, 0, 1)`` or ``x.permute((2, 0,
    1))``; result dimension ``i`` is input dimension ``dims[i]``. See :class:`PermuteBackward`."""
    require_tensor("permute", "x", x)
    listed = _sizes("permute", dims, "dims")
    normal = tuple(int(d) % x.ndim if -x.ndim <= d < x.ndim else -1 for d in listed)
    if sorted(normal) != list(range(x.ndim)):
        raise ValueError(
            f"permute: dims {listed} is not a permutation of the {x.ndim} dimensions of a "
            f"tensor of shape {x.shape}"
        )
    return PermuteBackward.apply(x, dims=normal)


def _transpose_all(x: Tensor) -> Tensor:
    """``x`` with all its dimensions reversed (NumPy's ``.T``; ``x`` itself below 2-d)."""
    if x.ndim < 2:
        return x
    return PermuteBackward.apply(x, dims=tuple(reversed(range(x.ndim))))


def _matrix_transpose(x: Tensor) -> Tensor:
    """``x`` with its last two dimensions swapped (a batch of transposed matrices)."""
    if x.ndim < 2:
        raise ValueError(
            f".mT needs a matrix or a batch of matrices, got a tensor of shape {x.shape}"
        )
    return TransposeBackward.apply(x, dim0=x.ndim - 2, dim1=x.ndim - 1)


@tensor_method
def t(x: Tensor) -> Tensor:
    """The transpose of a matrix; a tensor of fewer dimensions itself (``torch.t``)."""
    require_tensor("t", "x", x)
    if x.ndim > 2:
        raise ValueError(f"t: expects a tensor of at most 2 dimensions, got shape {x.shape}")
    return _transpose_all(x)


dunder("T")(property(_transpose_all, doc=_transpose_all.__doc__))
dunder("mT")(property(_matrix_transpose, doc=_matrix_transpose.__doc__))


# -- reshapes --------------------------------------------------------------------------------
class ReshapeBackward(UnaryOp):
    r"""Autograd node for :math:`y = x` seen in another shape with the same elements in the
    same (row-major) order; saves nothing.

    .. math:: \frac{\partial L}{\partial x} = \operatorname{reshape}(g, x\text{.shape})
    """

    schema_v1 = OpSchema(name="reshape", amp_policy=AmpPolicy.KEEP_INPUT)
    returns_view = True

    @classmethod
    def output_shape(cls, shapes: Sequence[Shape], *, new_shape: Shape) -> Shape:
        return new_shape

    @staticmethod
    def dispatch(be: Backend, a: Any, shape: Shape, dtype: DType, new_shape: Shape) -> Any:
        return be.reshape(a, shape)

    @classmethod
    def makes_view(cls, backend: Backend, x: Tensor, out: Any, *, new_shape: Shape) -> bool:
        """A view where the strides allow (NumPy's rule; PyTorch's too), else a copy: on
        numba the arrays say which it was; mlx has no strides of its own, so the layout of
        ``x``'s view steps decides (:func:`pylucid.ops.views.reshape_is_view`)."""
        aliases = backend.aliases(out, x._storage)
        return views.reshape_is_view(x, new_shape) if aliases is None else aliases

    @classmethod
    def view_layout(cls, layout: np.ndarray, *, new_shape: Shape) -> np.ndarray:
        return np.reshape(layout, new_shape, copy=False)

    def grad_formula(self, g: Any) -> tuple[Any]:
        return (self.backend.reshape(g, self.input_shapes[0]),)

    def grad_graph(self, g: Tensor) -> tuple[Tensor]:
        return (ReshapeBackward.apply(g, new_shape=self.input_shapes[0]),)


def _resolve_shape(op: str, x: Tensor, shape: tuple[int, ...]) -> tuple[int, ...]:
    """``shape`` with its one allowed -1 replaced by the size that keeps ``x.numel()``."""
    unknown = [i for i, n in enumerate(shape) if n == -1]
    if len(unknown) > 1 or any(n < -1 for n in shape):
        raise ValueError(
            f"{op}: invalid shape {shape}: sizes are non-negative, with at most one -1"
        )
    known = math.prod(n for n in shape if n != -1)
    numel = x.numel()
    if unknown and known and numel % known == 0:
        shape = shape[: unknown[0]] + (numel // known,) + shape[unknown[0] + 1 :]
    if unknown and -1 in shape or math.prod(shape) != numel:
        raise ValueError(
            f"{op}: cannot reshape a tensor of shape {x.shape} ({numel} elements) into shape "
            f"{shape}"
        )
    return shape


@tensor_method
def reshape(x: Tensor, *shape: Any) -> Tensor:
    """``x`` with the same elements in ``shape`` (``reshape(x, 2, 3)`` or ``x.reshape((2,
    3))``; one size may be -1); a view where possible. See :class:`ReshapeBackward`."""
    require_tensor("reshape", "x", x)
    new_shape = _resolve_shape("reshape", x, _sizes("reshape", shape))
    return ReshapeBackward.apply(x, new_shape=new_shape)


@tensor_method
@differs(
    "copies where the strides allow no view (PyTorch raises); view(dtype), which reinterprets "
    "the bytes, raises NotImplementedError"
)
def view(x: Tensor, *shape: Any) -> Tensor:
    """An alias of :func:`reshape` (see the module notes: it copies instead of failing when
    the strides do not allow a view). ``view(dtype)`` is not supported: it raises."""
    require_tensor("view", "x", x)
    if len(shape) == 1 and names_dtype(shape[0]) and not _is_int(shape[0]):
        raise NotImplementedError(
            f"view({shape[0]!r}): reinterpreting a tensor's bytes as another dtype is not "
            f"supported by pylucid; convert the values with x.to({shape[0]!r}), or go through "
            f"NumPy: pylucid.from_numpy(x.numpy().view(...))"
        )
    return ReshapeBackward.apply(x, new_shape=_resolve_shape("view", x, _sizes("view", shape)))


@tensor_method
def flatten(x: Tensor, start_dim: int = 0, end_dim: int = -1) -> Tensor:
    """``x`` with dimensions ``start_dim..end_dim`` (inclusive) merged into one; a 0-d
    tensor becomes 1-d, as in PyTorch. A reshape (:class:`ReshapeBackward`)."""
    require_tensor("flatten", "x", x)
    shape = x.shape or (1,)
    start = _axis("flatten", start_dim, len(shape), "start_dim")
    end = _axis("flatten", end_dim, len(shape), "end_dim")
    if start > end:
        raise ValueError(
            f"flatten: start_dim {start_dim} comes after end_dim {end_dim} for a tensor of "
            f"shape {x.shape}"
        )
    new_shape = (*shape[:start], math.prod(shape[start : end + 1]), *shape[end + 1 :])
    return ReshapeBackward.apply(x, new_shape=new_shape)


@tensor_method
def squeeze(
    x: Tensor, axis: int | Sequence[int] | None = None, *, dim: int | Sequence[int] | None = None
) -> Tensor:
    """``x`` without its size-1 dimensions (all of them, or those of ``axis``; PyTorch's
    ``dim=`` is an alias). As in NumPy, naming a dimension whose size is not 1 is an error
    (PyTorch ignores it). A reshape (:class:`ReshapeBackward`)."""
    require_tensor("squeeze", "x", x)
    if axis is None and dim is None:
        axes = tuple(i for i, n in enumerate(x.shape) if n == 1)
    else:
        axes = normalize_axes("squeeze", x, axis, dim)
        for i in axes:
            if x.shape[i] != 1:
                raise ValueError(
                    f"squeeze: cannot remove dimension {i} of size {x.shape[i]} from a tensor "
                    f"of shape {x.shape}; only size-1 dimensions can be squeezed"
                )
    new_shape = tuple(n for i, n in enumerate(x.shape) if i not in axes)
    return ReshapeBackward.apply(x, new_shape=new_shape)


@tensor_method
def unsqueeze(x: Tensor, axis: int | None = None, *, dim: int | None = None) -> Tensor:
    """``x`` with a size-1 dimension inserted at ``axis`` (``-1`` appends one; PyTorch's
    ``dim=`` is an alias). A reshape (:class:`ReshapeBackward`)."""
    require_tensor("unsqueeze", "x", x)
    where = _alias("unsqueeze", axis, dim)
    if where is None:
        raise TypeError("unsqueeze: missing the axis (dim) where the dimension goes")
    at = _axis("unsqueeze", where, x.ndim + 1)
    return ReshapeBackward.apply(x, new_shape=(*x.shape[:at], 1, *x.shape[at:]))


# -- broadcasting ----------------------------------------------------------------------------
class ExpandBackward(UnaryOp):
    r"""Autograd node for broadcasting :math:`x` to a larger shape (``expand``,
    ``broadcast_to``); saves nothing. Each input element is repeated along the broadcast
    dimensions, so its gradient is the sum of the repeats' gradients:

    .. math:: \frac{\partial L}{\partial x} = \sum_{\text{broadcast dims}} g

    (the shared backward does this sum). On numba the forward is a read-only zero-stride view.
    """

    schema_v1 = OpSchema(name="expand", amp_policy=AmpPolicy.KEEP_INPUT)
    returns_view = True

    @classmethod
    def output_shape(cls, shapes: Sequence[Shape], *, target: Shape) -> Shape:
        (shape,) = shapes
        if broadcast_shapes("expand", shape, target) != target:
            raise ValueError(f"expand: a tensor of shape {shape} cannot expand to {target}")
        return target

    @staticmethod
    def dispatch(be: Backend, a: Any, shape: Shape, dtype: DType, target: Shape) -> Any:
        return be.broadcast_to(a, shape)

    @classmethod
    def view_layout(cls, layout: np.ndarray, *, target: Shape) -> np.ndarray:
        return np.broadcast_to(layout, target)

    @classmethod
    def view_overlaps(cls, shape: Shape, *, target: Shape) -> bool:
        return math.prod(target) > math.prod(shape)

    def grad_formula(self, g: Any) -> tuple[Any]:
        return (g,)

    def grad_graph(self, g: Tensor) -> tuple[Tensor]:
        return (g,)


@tensor_method
def expand(x: Tensor, *sizes: Any) -> Tensor:
    """``x`` broadcast to ``sizes`` with PyTorch's rules: new dimensions go in front, a size-1
    dimension can grow, and -1 keeps a dimension's size. See :class:`ExpandBackward`."""
    require_tensor("expand", "x", x)
    sizes = _sizes("expand", sizes)
    lead = len(sizes) - x.ndim
    if lead < 0:
        raise ValueError(
            f"expand: {len(sizes)} sizes {sizes} are fewer than the {x.ndim} dimensions of a "
            f"tensor of shape {x.shape}"
        )
    target = []
    for i, n in enumerate(sizes):
        old = x.shape[i - lead] if i >= lead else None
        if n == -1 and old is not None:
            n = old
        if n < 0 or (old is not None and old != 1 and n != old):
            raise ValueError(
                f"expand: cannot expand a tensor of shape {x.shape} to {sizes}: size {sizes[i]} "
                f"at position {i} is invalid (only size-1 dimensions grow; -1 keeps an "
                f"existing one)"
            )
        target.append(n)
    return ExpandBackward.apply(x, target=tuple(target))


@tensor_method
def broadcast_to(x: Tensor, shape: Sequence[int]) -> Tensor:
    """``x`` broadcast to ``shape`` with NumPy's rules; see :class:`ExpandBackward`."""
    require_tensor("broadcast_to", "x", x)
    target = _sizes("broadcast_to", (shape,) if _is_int(shape) else tuple(shape))
    try:
        valid = min(target, default=0) >= 0 and np.broadcast_shapes(x.shape, target) == target
    except ValueError:
        valid = False
    if not valid:
        raise ValueError(f"broadcast_to: a tensor of shape {x.shape} cannot broadcast to {target}")
    return ExpandBackward.apply(x, target=target)


# -- joining and splitting -------------------------------------------------------------------
class ConcatenateBackward(Op):
    r"""Autograd node for joining tensors along ``axis``; saves nothing (the gradient needs
    only the inputs' sizes along ``axis``). Input :math:`i` occupies rows
    :math:`[o_i, o_i + n_i)` of the output, so

    .. math:: \frac{\partial L}{\partial x_i} = g[\ldots, o_i : o_i + n_i, \ldots]

    (views of ``g`` on numba). Inputs of different dtypes are promoted.
    """

    input_names = ("tensors",)
    schema_v1 = OpSchema(name="concatenate", amp_policy=AmpPolicy.KEEP_INPUT, input_arity=VARIADIC)

    @classmethod
    def output_shape(cls, shapes: Sequence[Shape], *, axis: int) -> Shape:
        first = shapes[0]
        for i, shape in enumerate(shapes):
            if not shape:
                raise ValueError(
                    f"concatenate: tensors[{i}] is 0-d and has no axis to join along; use stack"
                )
            if len(shape) != len(first) or any(
                n != m for d, (n, m) in enumerate(zip(shape, first)) if d != axis
            ):
                raise ValueError(
                    f"concatenate: tensors[{i}] has shape {shape} but tensors[0] has {first}; "
                    f"all dimensions except axis {axis} must match"
                )
        return (*first[:axis], sum(s[axis] for s in shapes), *first[axis + 1 :])

    @staticmethod
    def dispatch(be: Backend, *arrays: Any, shape: Shape, dtype: DType, axis: int) -> Any:
        return be.concatenate(list(arrays), axis, dtype)

    def _pieces(self) -> list[tuple[slice, ...]]:
        """For each input, the index of its rows in the output."""
        offsets = np.cumsum([0, *(shape[self.axis] for shape in self.input_shapes)])
        before = (slice(None),) * self.axis
        return [(*before, slice(int(o), int(e))) for o, e in zip(offsets[:-1], offsets[1:])]

    def grad_formula(self, g: Any) -> tuple[Any, ...]:
        return tuple(
            self.backend.getitem(g, index, None, shape, self.dtype) if needed else None
            for index, shape, needed in zip(
                self._pieces(), self.input_shapes, self.needs_input_grad
            )
        )

    def grad_graph(self, g: Tensor) -> tuple[Tensor | None, ...]:
        return tuple(
            g[index] if needed else None
            for index, needed in zip(self._pieces(), self.needs_input_grad)
        )


class StackBackward(Op):
    r"""Autograd node for stacking same-shaped tensors along a new ``axis``; saves nothing.
    Input :math:`i` is the output's slice :math:`i` along ``axis``:

    .. math:: \frac{\partial L}{\partial x_i} = g[\ldots, i, \ldots]

    Inputs of different dtypes are promoted.
    """

    input_names = ("tensors",)
    schema_v1 = OpSchema(name="stack", amp_policy=AmpPolicy.KEEP_INPUT, input_arity=VARIADIC)

    @classmethod
    def output_shape(cls, shapes: Sequence[Shape], *, axis: int) -> Shape:
        first = shapes[0]
        for i, shape in enumerate(shapes):
            if shape != first:
                raise ValueError(
                    f"stack: tensors[{i}] has shape {shape} but tensors[0] has {first}; "
                    f"stacked tensors must have one shape"
                )
        return (*first[:axis], len(shapes), *first[axis:])

    @staticmethod
    def dispatch(be: Backend, *arrays: Any, shape: Shape, dtype: DType, axis: int) -> Any:
        single = (*shape[:axis], 1, *shape[axis + 1 :])
        return be.concatenate([be.reshape(a, single) for a in arrays], axis, dtype)

    def grad_formula(self, g: Any) -> tuple[Any, ...]:
        be, before = self.backend, (slice(None),) * self.axis
        return tuple(
            be.getitem(g, (*before, i), None, shape, self.dtype) if needed else None
            for i, (shape, needed) in enumerate(zip(self.input_shapes, self.needs_input_grad))
        )

    def grad_graph(self, g: Tensor) -> tuple[Tensor | None, ...]:
        before = (slice(None),) * self.axis
        return tuple(
            g[(*before, i)] if needed else None for i, needed in enumerate(self.needs_input_grad)
        )


def concatenate(
    tensors: Sequence[Tensor], axis: int | None = None, *, dim: int | None = None
) -> Tensor:
    """The ``tensors`` joined along an existing ``axis`` (0 by default; PyTorch's ``dim=``
    is an alias); see :class:`ConcatenateBackward`."""
    tensors = _tensors("concatenate", tensors)
    where = _alias("concatenate", axis, dim, 0)
    ndim = max(tensors[0].ndim, 1)  # a 0-d first tensor is reported by the shape check
    return ConcatenateBackward.apply(*tensors, axis=_axis("concatenate", where, ndim))


cat = concatenate


def stack(tensors: Sequence[Tensor], axis: int | None = None, *, dim: int | None = None) -> Tensor:
    """The same-shaped ``tensors`` stacked along a new ``axis`` (0 by default; PyTorch's ``dim=``
    is an alias; -1 appends); see :class:`StackBackward`."""
    tensors = _tensors("stack", tensors)
    where = _alias("stack", axis, dim, 0)
    return StackBackward.apply(*tensors, axis=_axis("stack", where, tensors[0].ndim + 1))


@tensor_method
def split(
    x: Tensor,
    split_size_or_sections: int | Sequence[int],
    axis: int | None = None,
    *,
    dim: int | None = None,
) -> tuple[Tensor, ...]:
    """``x`` cut along ``axis`` (0 by default; ``dim=`` is an alias) into pieces, with
    PyTorch's semantics (not ``numpy.split``'s): an int is the size of every piece (the last
    may be smaller), a sequence gives each piece's size (they must sum to the dimension).
    Each piece is a slice (a :class:`~pylucid.ops.indexing.GetitemBackward` node), so the
    backward of ``n`` pieces that all get gradients costs ``n`` zero-filled arrays of
    ``x``'s size, summed."""
    require_tensor("split", "x", x)
    if not x.ndim:
        raise ValueError("split: a 0-d tensor has no axis to split")
    at = _axis("split", _alias("split", axis, dim, 0), x.ndim)
    total = x.shape[at]
    if _is_int(split_size_or_sections):
        size = int(split_size_or_sections)
        if size < 0 or (size == 0 and total):
            raise ValueError(f"split: the split size must be positive, got {size}")
        sizes = [min(size, total - o) for o in range(0, total, size)] if total else [0]
    else:
        sizes = list(_sizes("split", (split_size_or_sections,)))
        if any(n < 0 for n in sizes) or sum(sizes) != total:
            raise ValueError(
                f"split: sections {tuple(sizes)} must be non-negative and sum to {total}, the "
                f"size of axis {at} of a tensor of shape {x.shape}"
            )
    pieces, offset = [], 0
    for n in sizes:
        key = (*(slice(None),) * at, slice(offset, offset + n))
        pieces.append(GetitemBackward.apply(x, plan=plan_index("split", key, x.shape)))
        offset += n
    return tuple(pieces)


@tensor_method
def chunk(x: Tensor, chunks: int, dim: int = 0) -> tuple[Tensor, ...]:
    """``x`` cut along ``dim`` into ``chunks`` pieces of ``ceil(size / chunks)`` (the last
    may be smaller, and fewer pieces come back when the size does not allow ``chunks``), as
    ``torch.chunk``."""
    require_tensor("chunk", "x", x)
    if not _is_int(chunks) or chunks < 1:
        raise ValueError(f"chunk: chunks must be a positive int, got {chunks!r}")
    if not x.ndim:
        raise ValueError("chunk: a 0-d tensor has no dim to cut")
    total = x.shape[_axis("chunk", dim, x.ndim, "dim")]
    return split(x, -(-total // int(chunks)) if total else [0] * int(chunks), dim=dim)


@tensor_method
def tensor_split(
    x: Tensor, indices_or_sections: int | Sequence[int] | Tensor, dim: int = 0
) -> tuple[Tensor, ...]:
    """``x`` cut along ``dim`` as ``torch.tensor_split``: an int ``n`` gives ``n`` pieces,
    the first ``size % n`` one element longer; a sequence gives the indices to cut before."""
    require_tensor("tensor_split", "x", x)
    if not x.ndim:
        raise ValueError("tensor_split: a 0-d tensor has no dim to cut")
    at = _axis("tensor_split", dim, x.ndim, "dim")
    total = x.shape[at]
    if isinstance(indices_or_sections, Tensor):
        indices_or_sections = indices_or_sections.tolist()
    if _is_int(indices_or_sections):
        n = int(indices_or_sections)
        if n < 1:
            raise ValueError(f"tensor_split: sections must be a positive int, got {n}")
        sizes = [total // n + (1 if i < total % n else 0) for i in range(n)]
    else:
        cuts = [min(max(int(c) if c >= 0 else int(c) + total, 0), total)
                for c in _sizes("tensor_split", (indices_or_sections,), "indices")]  # fmt: skip
        bounds = [0, *cuts, total]
        return tuple(
            x[(*(slice(None),) * at, slice(start, max(start, end)))]
            for start, end in zip(bounds, bounds[1:])
        )
    return split(x, sizes, dim=at)
