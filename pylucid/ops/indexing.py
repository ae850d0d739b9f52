"""Indexing: ``x[index]`` with NumPy's semantics, differentiable.

Public: getitem (and the ``[]`` operator).

An index is validated and normalised once, by :func:`plan_index`, into an :class:`IndexPlan`
that the backends execute: ints, slices (with steps, negative ones too), ``None``,
``Ellipsis``, boolean masks (bool tensors, NumPy bool arrays, nested lists of bools) and
integer arrays (int tensors, NumPy int arrays, lists), combined as NumPy combines them. A
boolean mask is replaced by its ``nonzero()`` arrays, as NumPy defines it. Index tensors are
read on the host (an index on the mlx backend is copied to NumPy) so that every index is
bounds-checked before any kernel runs: MLX itself does not check.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from pylucid.backends.base import Backend, Shape
from pylucid.dtypes import DType
from pylucid.ops.base import UnaryOp
from pylucid.ops.schema import AmpPolicy, OpSchema
from pylucid.ops.wrapping import dunder, require_tensor
from pylucid.tensor import Tensor

__all__ = ["GetitemBackward", "IndexPlan", "getitem", "plan_index"]

_HELP = "use ints, slices, None, ..., integer or bool tensors/arrays, or lists of them"


@dataclass(frozen=True, eq=False)
class IndexPlan:
    """A validated index into a tensor of ``input_shape``.

    Attributes
    ----------
    index : tuple
        The normalised index, with NumPy's semantics: non-negative ints, slices with explicit
        in-range bounds, ``None``, at most one ``Ellipsis`` (kept only next to integer
        arrays, where it decides where the indexed dimensions go) and non-negative ``intp``
        arrays. Without arrays it has one entry per dimension (ints, slices) plus the Nones.
    mesh : tuple of numpy.ndarray or None
        For an index with arrays: one ``intp`` array per input dimension, all broadcastable
        to ``shape``, such that ``a[mesh]`` equals ``a[index]`` (an "open mesh": each array
        only spans its own dimensions). Backends whose own mixed basic/advanced indexing
        differs from NumPy's use it. None for a basic index (ints, slices, None).
    shape : tuple of int
        The result's shape.
    input_shape : tuple of int
        The indexed tensor's shape.
    """

    index: tuple[Any, ...]
    mesh: tuple[np.ndarray, ...] | None
    shape: Shape
    input_shape: Shape


def _index_array(op: str, item: Any) -> np.ndarray | None:
    """``item`` as an integer or bool NumPy array if it is an array-like index, else None."""
    if isinstance(item, Tensor):
        array = item._backend.to_numpy(item._storage)
    elif isinstance(item, np.ndarray):
        array = item
    elif isinstance(item, (list, tuple)):
        try:
            array = np.asarray(item)
        except ValueError:
            raise TypeError(f"{op}: a list index must be rectangular, got {item!r}") from None
        if array.size == 0 and array.dtype.kind == "f":
            array = array.astype(np.intp)  # [] is an empty integer index, as in NumPy
    else:
        return None
    if array.dtype.kind not in "biu":
        raise TypeError(
            f"{op}: index arrays must hold integers or bools, got {array.dtype} ({_HELP})"
        )
    return array


def _slice_bound(op: str, value: Any) -> int | None:
    if value is None or (isinstance(value, (int, np.integer)) and not isinstance(value, bool)):
        return value
    raise TypeError(f"{op}: slice bounds must be ints or None, got {type(value).__name__}")


def _normal_slice(op: str, item: slice, size: int) -> slice:
    """``item`` with explicit bounds inside ``[0, size]`` (``stop`` None when it runs past
    index 0 backwards), so that every backend reads it alike."""
    start, stop, step = (_slice_bound(op, v) for v in (item.start, item.stop, item.step))
    if step == 0:
        raise ValueError(f"{op}: slice step cannot be zero")
    start, stop, step = slice(start, stop, step).indices(size)
    length = len(range(start, stop, step))
    if length == 0:
        return slice(0, 0, 1)
    end = start + step * length
    return slice(start, end if end >= 0 else None, step)


def _parse(op: str, key: Any) -> list[Any]:
    """The entries of ``key``, classified: None, Ellipsis, slice, int, or an ndarray."""
    entries = []
    for item in key if isinstance(key, tuple) else (key,):
        if item is None or item is Ellipsis:
            if item is Ellipsis and any(e is Ellipsis for e in entries):
                raise IndexError(f"{op}: an index can only have a single ellipsis (...)")
            entries.append(item)
        elif isinstance(item, slice):
            entries.append(item)
        elif isinstance(item, (bool, np.bool_)):
            raise TypeError(
                f"{op}: a bool scalar is not a valid index; use None to add a dimension, "
                f"or a bool tensor of the indexed dimensions' shape as a mask"
            )
        elif isinstance(item, (int, np.integer)):
            entries.append(int(item))
        else:
            array = _index_array(op, item)
            if array is None:
                raise TypeError(f"{op}: unsupported index of type {type(item).__name__}; {_HELP}")
            if array.dtype == np.bool_ and array.ndim == 0:
                raise TypeError(f"{op}: a 0-d bool mask is not supported; use a Python if")
            entries.append(array)
    return entries


def _check_int(op: str, value: int, dim: int, shape: Shape) -> int:
    if not -shape[dim] <= value < shape[dim]:
        raise IndexError(
            f"{op}: index {value} is out of range for dimension {dim} of size {shape[dim]} "
            f"(tensor of shape {shape})"
        )
    return value % shape[dim]


def _check_array(op: str, array: np.ndarray, dim: int, shape: Shape) -> np.ndarray:
    size = shape[dim]
    low, high = (int(array.min()), int(array.max())) if array.size else (0, -1)
    if low < -size or high >= size:
        raise IndexError(
            f"{op}: index {low if low < -size else high} is out of range for dimension "
            f"{dim} of size {size} (tensor of shape {shape})"
        )
    array = np.array(array, dtype=np.intp)  # a private copy: the caller may change theirs
    if low < 0:
        array[array < 0] += size
    return array


def _normalise(op: str, entries: list[Any], shape: Shape) -> tuple[list[Any], bool]:
    """Check every entry against ``shape``; expand masks into their nonzero arrays.

    Returns the entries and whether they include arrays (then Ellipsis stays, since NumPy
    counts it as separating arrays; else it becomes full slices)."""
    used = sum(e.ndim if isinstance(e, np.ndarray) and e.dtype == np.bool_ else 1 for e in entries)
    used -= sum(e is None or e is Ellipsis for e in entries)
    if used > len(shape):
        raise IndexError(
            f"{op}: too many indices for a tensor of {len(shape)} dimensions (shape {shape}): "
            f"the index covers {used}"
        )
    advanced = any(isinstance(e, np.ndarray) for e in entries)
    rest = len(shape) - used
    out: list[Any] = []
    dim = 0
    for e in entries:
        if e is None:
            out.append(None)
        elif e is Ellipsis:
            if advanced:
                out.append(Ellipsis)
            else:
                out.extend(slice(0, shape[d], 1) for d in range(dim, dim + rest))
            dim += rest
        elif isinstance(e, slice):
            out.append(_normal_slice(op, e, shape[dim]))
            dim += 1
        elif isinstance(e, int):
            out.append(_check_int(op, e, dim, shape))
            dim += 1
        elif e.dtype == np.bool_:
            covered = shape[dim : dim + e.ndim]
            if e.shape != covered:
                raise IndexError(
                    f"{op}: the bool mask of shape {e.shape} does not match dimensions "
                    f"{dim}..{dim + e.ndim - 1} of the tensor, of sizes {covered} "
                    f"(tensor of shape {shape})"
                )
            out.extend(np.nonzero(e))
            dim += e.ndim
        else:
            out.append(_check_array(op, e, dim, shape))
            dim += 1
    if not any(e is Ellipsis for e in entries):
        out.extend(slice(0, shape[d], 1) for d in range(dim, len(shape)))
    return out, advanced


def plan_index(op: str, key: Any, shape: Shape) -> IndexPlan:
    """Validate ``key`` as an index into a tensor of ``shape``; see :class:`IndexPlan`.

    Raises
    ------
    IndexError
        For an index out of range, too many indices, a mask of the wrong shape, or index
        arrays that do not broadcast together; each names ``op``, the index and the shape.
    TypeError
        For an index of an unsupported type (float, str, float tensor, 0-d bool mask...).
    """
    index, advanced = _normalise(op, _parse(op, key), shape)
    ellipsis_size = len(shape) - sum(e is not None and e is not Ellipsis for e in index)
    # The result's dimensions from ints, slices and None, in order, with the input dimension
    # each one reads (None for a new axis), and where the arrays' dimensions go.
    basic: list[tuple[int | None, int, slice | None]] = []
    arrays: dict[int, np.ndarray] = {}
    first_array, last_array, before = None, -1, 0
    dim = 0
    for position, e in enumerate(index):
        if isinstance(e, np.ndarray) or (advanced and isinstance(e, int)):
            arrays[dim] = np.asarray(e, dtype=np.intp)
            if first_array is None:
                first_array, before = position, len(basic)
            last_array = position
            dim += 1
        elif e is None:
            basic.append((None, 1, None))
        elif e is Ellipsis:
            basic.extend(
                (d, shape[d], slice(0, shape[d], 1)) for d in range(dim, dim + ellipsis_size)
            )
            dim += ellipsis_size
        elif isinstance(e, slice):
            basic.append((dim, len(range(shape[dim])[e]), e))
            dim += 1
        else:
            dim += 1
    sizes = [size for _, size, _ in basic]
    if not advanced:
        return IndexPlan(tuple(index), None, tuple(sizes), tuple(shape))
    try:
        block = np.broadcast_shapes(*(a.shape for a in arrays.values()))
    except ValueError:
        listed = ", ".join(str(a.shape) for a in arrays.values())
        raise IndexError(
            f"{op}: the index arrays' shapes {listed} cannot be broadcast together "
            f"(tensor of shape {shape})"
        ) from None
    adjacent = last_array - first_array + 1 == len(arrays)
    at = before if adjacent else 0
    result = (*sizes[:at], *block, *sizes[at:])
    mesh: list[np.ndarray] = [np.empty(0, np.intp)] * len(shape)
    for d, array in arrays.items():
        lead = (1,) * (at + len(block) - array.ndim)
        mesh[d] = array.reshape(lead + array.shape + (1,) * (len(result) - len(lead) - array.ndim))
    for k, (d, size, s) in enumerate(basic):
        if d is not None:
            axis = k if k < at else k + len(block)
            ones = [1] * len(result)
            ones[axis] = size
            mesh[d] = np.arange(s.start, -1 if s.stop is None else s.stop, s.step).reshape(ones)
    return IndexPlan(tuple(index), tuple(mesh), result, tuple(shape))


class GetitemBackward(UnaryOp):
    r"""Autograd node for :math:`y = x[\text{index}]`; saves nothing but the index plan.

    Backward scatters with accumulation into zeros of ``x``'s shape, so an element that the
    index selects :math:`r` times receives the sum of its :math:`r` gradients:

    .. math:: \frac{\partial L}{\partial x_j} = \sum_{i \,:\, \text{index}(i) = j} g_i

    (numba: an assignment for a basic index, a Numba row-scatter kernel for one integer
    array, ``np.add.at`` otherwise; mlx: ``zeros.at[index].add(g)``). A basic index (ints,
    slices, None) gives a view of ``x`` on numba; integer arrays and masks gather a copy.
    Integer and bool tensors can be indexed too (without gradient).
    """

    schema_v1 = OpSchema(name="getitem", amp_policy=AmpPolicy.KEEP_INPUT)

    @classmethod
    def output_shape(cls, shapes: Any, *, plan: IndexPlan) -> Shape:
        return plan.shape

    @staticmethod
    def dispatch(be: Backend, a: Any, shape: Shape, dtype: DType, plan: IndexPlan) -> Any:
        return be.getitem(a, plan.index, plan.mesh, shape, dtype)

    def grad_formula(self, g: Any) -> tuple[Any]:
        plan = self.plan
        return (
            self.backend.getitem_backward(g, plan.index, plan.mesh, plan.input_shape, self.dtype),
        )


@dunder("__getitem__")
def getitem(x: Tensor, index: Any) -> Tensor:
    """``x[index]`` with NumPy's semantics (basic and advanced indexing); see
    :class:`GetitemBackward` for the gradient and :func:`plan_index` for the errors."""
    require_tensor("getitem", "x", x)
    return GetitemBackward.apply(x, plan=plan_index("getitem", index, x.shape))
