"""Indexing: ``x[index]`` with NumPy's semantics, differentiable, and its out-of-place
assignment ``setitem``.

Public: getitem (and the ``[]`` operator), setitem. Internal: index_add (getitem's adjoint,
so that getitem's gradient is itself differentiable).

An index is validated and normalised once, by :func:`plan_index`, into an :class:`IndexPlan`
that the backends execute: ints, slices (with steps, negative ones too), ``None``,
``Ellipsis``, boolean masks (bool tensors, NumPy bool arrays, nested lists of bools) and
integer arrays (int tensors, NumPy int arrays, lists), combined as NumPy combines them. A
boolean mask is replaced by its ``nonzero()`` arrays, as NumPy defines it. Index tensors are
read on the host (an index on the mlx backend is copied to NumPy) so that every index is
bounds-checked before any kernel runs: MLX itself does not check. The exception is one
integer tensor along one dimension, every other dimension whole (``logits[idx]``,
``x[:, idx]``): that is the embedding op (:mod:`pylucid.ops.embedding`), whose index is an
input checked and read by the backend's primitives, so that a compiled step captures it.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Any

import numpy as np

from pylucid.backends.base import Backend, Shape
from pylucid.dtypes import DType, int32, int64
from pylucid.ops.base import Op, UnaryOp, sum_to, sum_to_tensor
from pylucid.ops.embedding import take
from pylucid.ops.schema import AmpPolicy, OpSchema
from pylucid.ops.wrapping import Number, dunder, is_number, require_tensor
from pylucid.tensor import Tensor

__all__ = [
    "GetitemBackward",
    "IndexAddBackward",
    "IndexPlan",
    "SetitemBackward",
    "getitem",
    "plan_index",
    "setitem",
]

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
    """A slice bound: None, an int, or what converts to one exactly (``__index__``: a NumPy
    integer, a one-element integer tensor, as in ``data[i:i + n]`` with ``i`` a tensor)."""
    if value is None or (isinstance(value, (int, np.integer)) and not isinstance(value, bool)):
        return value
    if not isinstance(value, bool) and hasattr(type(value), "__index__"):
        try:
            return operator.index(value)
        except TypeError as exc:
            raise TypeError(f"{op}: slice bound {value!r}: {exc}") from None
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
    Integer and bool tensors can be indexed too (without gradient). With
    ``create_graph=True`` the scatter is an :class:`IndexAddBackward` node, whose gradient is
    this gather again.
    """

    schema_v1 = OpSchema(name="getitem", amp_policy=AmpPolicy.KEEP_INPUT)
    returns_view = True

    @classmethod
    def output_shape(cls, shapes: Any, *, plan: IndexPlan) -> Shape:
        return plan.shape

    @staticmethod
    def dispatch(be: Backend, a: Any, shape: Shape, dtype: DType, plan: IndexPlan) -> Any:
        return be.getitem(a, plan.index, plan.mesh, shape, dtype)

    @classmethod
    def makes_view(cls, backend: Backend, x: Tensor, out: Any, *, plan: IndexPlan) -> bool:
        return plan.mesh is None  # integer arrays and masks gather a copy, as in NumPy

    @classmethod
    def view_layout(cls, layout: np.ndarray, *, plan: IndexPlan) -> np.ndarray:
        return layout[plan.index]

    def grad_formula(self, g: Any) -> tuple[Any]:
        plan = self.plan
        return (
            self.backend.getitem_backward(g, plan.index, plan.mesh, plan.input_shape, self.dtype),
        )

    def grad_graph(self, g: Tensor) -> tuple[Tensor]:
        return (IndexAddBackward.apply(g, plan=self.plan),)


class IndexAddBackward(UnaryOp):
    r"""Autograd node for getitem's adjoint: :math:`y` = zeros of ``plan.input_shape`` with
    :math:`x` added at ``plan.index`` (repeated positions accumulate),

    .. math:: y_j = \sum_{i \,:\, \text{index}(i) = j} x_i

    saves nothing but the index plan. Internal: it is the differentiable form of
    :class:`GetitemBackward`'s gradient (backend primitive ``getitem_backward``). Its own
    gradient gathers the positions back:

    .. math:: \frac{\partial L}{\partial x_i} = g_{\text{index}(i)}
    """

    schema_v1 = OpSchema(name="index_add", amp_policy=AmpPolicy.KEEP_INPUT, internal=True)

    @classmethod
    def output_shape(cls, shapes: Any, *, plan: IndexPlan) -> Shape:
        return plan.input_shape

    @staticmethod
    def dispatch(be: Backend, a: Any, shape: Shape, dtype: DType, plan: IndexPlan) -> Any:
        return be.getitem_backward(a, plan.index, plan.mesh, shape, dtype)

    def grad_formula(self, g: Any) -> tuple[Any]:
        plan = self.plan
        return (self.backend.getitem(g, plan.index, plan.mesh, plan.shape, self.dtype),)

    def grad_graph(self, g: Tensor) -> tuple[Tensor]:
        return (GetitemBackward.apply(g, plan=self.plan),)


def _tensor_axis(x: Tensor, key: Any) -> tuple[Tensor, int] | None:
    """For ``x[key]`` whose only index array is one int64 or int32 tensor on ``x``'s device,
    every other entry a full slice ``:`` or one ``...`` (``logits[idx]``, ``x[:, idx]``,
    ``x[..., idx]``): that tensor and the dimension it indexes; else None."""
    entries = key if isinstance(key, tuple) else (key,)
    found, position, ellipsis = None, -1, -1
    for i, entry in enumerate(entries):
        if isinstance(entry, Tensor):
            if found is not None:
                return None
            found, position = entry, i
        elif entry is Ellipsis and ellipsis < 0:
            ellipsis = i
        elif not (isinstance(entry, slice) and entry == slice(None)):
            return None
    if found is None or found.dtype not in (int32, int64) or found._backend is not x._backend:
        return None
    if len(entries) - (ellipsis >= 0) > x.ndim:
        return None  # (too many indices: plan_index says so)
    if 0 <= ellipsis < position:
        return found, x.ndim - (len(entries) - position)
    return found, position


@dunder("__getitem__")
def getitem(x: Tensor, index: Any) -> Tensor:
    """``x[index]`` with NumPy's semantics (basic and advanced indexing); see
    :class:`GetitemBackward` for the gradient and :func:`plan_index` for the errors. One
    integer tensor along one dimension (the others whole) is the embedding op instead
    (:func:`~pylucid.ops.embedding.take`: the same values and gradient, its index read by
    the backend, not in Python, so that a compiled step captures it)."""
    require_tensor("getitem", "x", x)
    taken = _tensor_axis(x, index)
    if taken is not None:
        tensor, axis = taken
        return take("getitem", x, tensor, axis, f"dimension {axis}", negative=True)
    return GetitemBackward.apply(x, plan=plan_index("getitem", index, x.shape))


# -- assignment ------------------------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class LastWrites:
    """An assignment ``x[index] = value`` whose index repeats positions of ``x``, reduced to
    the last write to each position (in the row-major order of the index's result).

    Attributes
    ----------
    target : IndexPlan
        Each written position of ``x`` once (1-d integer arrays, one per dimension).
    source : IndexPlan
        Into the value broadcast to the index's result shape: the element whose write is
        kept for each position of ``target``, in the same order.
    """

    target: IndexPlan
    source: IndexPlan


def last_writes(plan: IndexPlan) -> LastWrites | None:
    """For an index that selects some position of ``x`` more than once, the
    :class:`LastWrites` of an assignment through it; None when every position is selected at
    most once (always for a basic index)."""
    if plan.mesh is None:
        return None
    positions = tuple(np.broadcast_to(m, plan.shape) for m in plan.mesh)
    flat = np.ravel_multi_index(positions, plan.input_shape).reshape(-1)
    written, last_in_reversed = np.unique(flat[::-1], return_index=True)
    if written.size == flat.size:
        return None
    kept = flat.size - 1 - last_in_reversed
    target = np.unravel_index(written, plan.input_shape)
    source = np.unravel_index(kept, plan.shape)
    count = (written.size,)
    return LastWrites(
        IndexPlan(target, target, count, plan.input_shape),
        IndexPlan(source, source, count, plan.shape),
    )


def _fitted(value_shape: Shape, shape: Shape) -> Shape:
    """``value_shape`` without the leading size-1 dimensions it has beyond ``shape``'s
    (NumPy and PyTorch ignore them in an assignment)."""
    lead = 0
    while len(value_shape) - lead > len(shape) and value_shape[lead] == 1:
        lead += 1
    return value_shape[lead:]


class SetitemBackward(Op):
    r"""Autograd node for the out-of-place assignment :math:`y = x` with
    :math:`y[\text{index}] = v` (a new storage; ``x`` is unchanged); saves nothing but the
    index plan.

    ``value`` broadcasts to the shape of ``x[index]`` (NumPy's rules; leading size-1
    dimensions beyond it are ignored, as by NumPy and PyTorch) and is cast to ``x``'s dtype.
    When the index selects a position more than once, the **last write wins**, in the
    row-major order of ``x[index]``'s elements (what NumPy and PyTorch's CPU kernels do in
    practice; neither promises it): the op reduces such an index to one write per position
    (:func:`last_writes`), so both backends give the same, deterministic result.

    With :math:`u` the value broadcast to ``x[index]``'s shape, :math:`S` the positions of
    ``x`` written, and :math:`w(j)` the element of :math:`u` whose write to position
    :math:`j` is kept:

    .. math::
        \frac{\partial L}{\partial x_j} =
        \begin{cases} 0 & j \in S \\ g_j & j \notin S \end{cases}, \qquad
        \frac{\partial L}{\partial u_i} =
        \begin{cases} g_j & i = w(j) \\ 0 & \text{otherwise (an overwritten write)} \end{cases}

    and :math:`\partial L / \partial v` sums :math:`\partial L / \partial u` over the
    dimensions broadcasting added to ``v``: ``g`` with zeros written at the index, and the
    gather ``g[index]`` summed to ``v``'s shape.
    """

    input_names = ("x", "value")
    schema_v1 = OpSchema(name="setitem", amp_policy=AmpPolicy.KEEP_INPUT, input_arity=2)

    @classmethod
    def output_shape(cls, shapes: Any, *, plan: IndexPlan, writes: LastWrites | None) -> Shape:
        x_shape, value_shape = shapes
        fitted = _fitted(value_shape, plan.shape)
        try:
            valid = np.broadcast_shapes(fitted, plan.shape) == plan.shape
        except ValueError:
            valid = False
        if not valid:
            raise ValueError(
                f"setitem: a value of shape {value_shape} cannot be broadcast to the shape "
                f"{plan.shape} that the index selects (tensor of shape {x_shape})"
            )
        return x_shape

    @classmethod
    def compute_dtype(cls, dtypes: Any, **params: Any) -> DType:
        return dtypes[0]

    @staticmethod
    def dispatch(
        be: Backend,
        a: Any,
        value: Any,
        shape: Shape,
        dtype: DType,
        plan: IndexPlan,
        writes: LastWrites | None,
    ) -> Any:
        value = be.reshape(value, _fitted(be.shape(value), plan.shape))
        if writes is None:
            return be.setitem(a, plan.index, plan.mesh, value, shape, dtype)
        source, target = writes.source, writes.target
        value = be.getitem(
            be.broadcast_to(value, plan.shape), source.index, source.mesh, source.shape, dtype
        )
        return be.setitem(a, target.index, target.mesh, value, shape, dtype)

    def grad_formula(self, g: Any) -> tuple[Any, Any]:
        be, dtype, plan, writes = self.backend, self.dtype, self.plan, self.writes
        target = plan if writes is None else writes.target
        needs_x, needs_value = self.needs_input_grad
        grad_x = grad_value = None
        if needs_x:
            zero = be.full((), 0, dtype)
            grad_x = be.setitem(g, target.index, target.mesh, zero, self.shape, dtype)
        if needs_value:
            picked = be.getitem(g, target.index, target.mesh, target.shape, dtype)
            if writes is not None:
                source = writes.source
                picked = be.getitem_backward(picked, source.index, source.mesh, plan.shape, dtype)
            value_shape = self.input_shapes[1]
            fitted = _fitted(value_shape, plan.shape)
            grad_value = be.reshape(sum_to(be, picked, plan.shape, fitted), value_shape)
        return grad_x, grad_value

    def grad_graph(self, g: Tensor) -> tuple[Tensor | None, Tensor | None]:
        plan, writes = self.plan, self.writes
        target = plan if writes is None else writes.target
        needs_x, needs_value = self.needs_input_grad
        grad_x = grad_value = None
        if needs_x:
            zero = Tensor._make(self.backend.full((), 0, self.dtype), self.backend, self.dtype)
            grad_x = SetitemBackward.apply(g, zero, plan=target, writes=None)
        if needs_value:
            picked = GetitemBackward.apply(g, plan=target)
            if writes is not None:
                picked = IndexAddBackward.apply(picked, plan=writes.source)
            value_shape = self.input_shapes[1]
            grad_value = sum_to_tensor(picked, _fitted(value_shape, plan.shape))
            grad_value = grad_value.reshape(value_shape)
        return grad_x, grad_value


def setitem(x: Tensor, index: Any, value: Tensor | Number) -> Tensor:
    """A copy of ``x`` with ``value`` assigned at ``index`` (``x`` itself is unchanged):
    what ``x[index] = value`` leaves in ``x``, NumPy's semantics. ``value`` is a tensor
    broadcastable to ``x[index]``'s shape or a Python number, and takes ``x``'s dtype; an
    index that repeats a position keeps the last write. See :class:`SetitemBackward`."""
    require_tensor("setitem", "x", x)
    if not isinstance(value, Tensor):
        if not is_number(value):
            raise TypeError(
                f"setitem: expected a Tensor or a Python number for value, got "
                f"{type(value).__name__}"
            )
        value = Tensor._make(x._backend.full((), value, x.dtype), x._backend, x.dtype)
    plan = plan_index("setitem", index, x.shape)
    return SetitemBackward.apply(x, value, plan=plan, writes=last_writes(plan))
