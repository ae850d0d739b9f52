"""Reductions over all axes, one axis or a tuple of axes.

Public: sum, mean, prod, amax, amin, max and min (PyTorch's: all elements, or ``(values,
indices)`` along one dim, or elementwise against a tensor), aminmax, argmax, argmin, var, std,
var_mean, std_mean.

Each takes ``axis=`` (None: every axis; an int; a tuple of ints) and ``keepdims=``, with
PyTorch's ``dim=`` / ``keepdim=`` as aliases; ``argmax`` / ``argmin`` take one axis or None
(the flattened tensor), as :func:`torch.argmax` does. The gradient formulas get ``g`` and the
saved result at the reduced shape and reshape them to the input's rank with the reduced axes
as size 1 (:meth:`ReduceOp._keepdims_shape`) so that they broadcast against ``x``.

AMP policies follow PyTorch's autocast lists: ``sum`` and ``prod`` are on its CUDA float32
list (FORCE_FP32); ``mean``, ``var`` and ``std`` are on no list and run in their input's dtype
(KEEP_INPUT); ``max``, ``min``, ``argmax`` and ``argmin`` only select elements (KEEP_INPUT).

Edge cases: ``sum`` of no elements is 0, ``prod`` 1, ``mean`` NaN; ``max``, ``min``,
``argmax`` and ``argmin`` over an axis of size 0 raise a ValueError naming the op and the
shape (no identity exists), before any kernel runs. NaN propagates through ``max`` and
``min`` as in PyTorch (NumPy's ``max``, not ``nanmax``). ``var`` divides by
``max(0, n - correction)``: with ``n <= correction`` it is inf, or NaN for a constant or
empty slice, as in PyTorch, and nothing warns.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from pylucid import return_types
from pylucid.backends.base import Axes, Backend, Shape
from pylucid.dtypes import DType, int64
from pylucid.ops.base import Op, ReduceOp, bound_primitive
from pylucid.ops.binary import maximum, minimum, where
from pylucid.ops.gathering import gather
from pylucid.ops.schema import AmpPolicy, OpSchema
from pylucid.ops.shape import concatenate
from pylucid.ops.wrapping import (
    is_number,
    normalize_axes,
    reduction_wrapper,
    require_tensor,
    tensor_method,
)
from pylucid.tensor import Tensor

__all__ = [
    "ArgmaxBackward",
    "ArgminBackward",
    "MaxBackward",
    "MeanBackward",
    "MinBackward",
    "ProdBackward",
    "StdBackward",
    "SumBackward",
    "VarBackward",
    "amax",
    "amin",
    "aminmax",
    "argmax",
    "argmin",
    "max",
    "mean",
    "min",
    "prod",
    "std",
    "sum",
    "std_mean",
    "var",
    "var_mean",
]


def _refuse_empty(op: str, shape: Shape, axes: Axes) -> None:
    """Raise the ValueError of a reduction with no identity over a size-0 axis."""
    for i in axes:
        if shape[i] == 0:
            raise ValueError(
                f"{op}: cannot reduce over axis {i}, which has size 0 (input shape {shape}): "
                f"the {op} of no elements is undefined; reduce over non-empty axes only"
            )


class _AccumulatingOp(ReduceOp):
    """sum and prod: integer and bool inputs accumulate in int64 (as in PyTorch); the
    backend primitive is named like the op."""

    @classmethod
    def compute_dtype(cls, dtypes: Any, **params: Any) -> DType:
        return dtypes[0] if dtypes[0].is_floating_point else int64

    @classmethod
    def dispatch(
        cls, be: Backend, a: Any, shape: Shape, dtype: DType, axes: Axes, keepdims: bool
    ) -> Any:
        return getattr(be, cls.schema_v1.name)(a, axes, keepdims, dtype)


class SumBackward(_AccumulatingOp):
    r"""Autograd node for :math:`y = \sum_{i \in \text{axes}} x_i`; saves nothing.

    .. math:: \frac{\partial L}{\partial x_i} = g \quad \text{(g broadcast back over axes)}

    Integer and bool inputs sum in int64, as in PyTorch. AMP: FORCE_FP32 (PyTorch's
    autocast float32 list).
    """

    schema_v1 = OpSchema(name="sum", amp_policy=AmpPolicy.FORCE_FP32)
    primitive = "sum"

    def grad_formula(self, g: Any) -> tuple[Any]:
        be = self.backend
        return (be.broadcast_copy(be.reshape(g, self._keepdims_shape()), self.input_shapes[0]),)

    def grad_graph(self, g: Tensor) -> tuple[Tensor]:
        return (g.reshape(self._keepdims_shape()).broadcast_to(self.input_shapes[0]),)


class MeanBackward(ReduceOp):
    r"""Autograd node for :math:`y = \frac{1}{n}\sum_{i \in \text{axes}} x_i`, where
    :math:`n` is the number of elements reduced; saves nothing.

    .. math:: \frac{\partial L}{\partial x_i} = \frac{g}{n}

    Integer input gives float32 (``real_valued``); the mean of no elements is nan. AMP:
    KEEP_INPUT (on none of PyTorch's autocast lists).
    """

    schema_v1 = OpSchema(name="mean", amp_policy=AmpPolicy.KEEP_INPUT, real_valued=True)

    @staticmethod
    def dispatch(
        be: Backend, a: Any, shape: Shape, dtype: DType, axes: Axes, keepdims: bool
    ) -> Any:
        count = math.prod(be.shape(a)[i] for i in axes)
        return be.div(be.sum(a, axes, keepdims, dtype), count, shape, dtype)

    @classmethod
    def bind(
        cls,
        backend: Backend,
        input_shapes: tuple[Shape, ...],
        input_dtypes: tuple[DType, ...],
        shape: Shape,
        dtype: DType,
        params: dict[str, Any],
    ) -> Callable[[Any], Any] | None:
        """``dispatch`` from the backend's bound ``sum`` and ``div``: the sum's runner, then
        the division by the count, a one-element storage of ``dtype`` (the scalar the
        general path's ``div`` makes of the Python int)."""
        total = bound_primitive(backend, "sum", input_shapes, input_dtypes, shape, dtype, params)
        divide = bound_primitive(backend, "div", (shape, ()), (dtype, dtype), shape, dtype, {})
        if total is None or divide is None:
            return None
        count = backend.full((), math.prod(input_shapes[0][i] for i in params["axes"]), dtype)

        def run_mean(a: Any) -> Any:
            summed = total(a)
            return None if summed is None else divide(summed, count)

        return run_mean

    def grad_formula(self, g: Any) -> tuple[Any]:
        be = self.backend
        count = math.prod(self.input_shapes[0][i] for i in self.axes)
        scaled = be.div(g, count, self.shape, self.dtype)
        return (
            be.broadcast_copy(be.reshape(scaled, self._keepdims_shape()), self.input_shapes[0]),
        )

    def grad_graph(self, g: Tensor) -> tuple[Tensor]:
        count = math.prod(self.input_shapes[0][i] for i in self.axes)
        scaled = g / count
        return (scaled.reshape(self._keepdims_shape()).broadcast_to(self.input_shapes[0]),)


class ProdBackward(_AccumulatingOp):
    r"""Autograd node for :math:`y = \prod_{i \in \text{axes}} x_i`; saves ``x``.

    .. math:: \frac{\partial L}{\partial x_j} = g \prod_{i \ne j} x_i

    The product of the others is computed as an exclusive prefix product times an exclusive
    suffix product along each reduced slice - not as :math:`y / x_j` - so it is exact with
    one zero (only that element gets a nonzero gradient) and with several (every gradient
    is 0). With ``create_graph=True`` the same two products come from Hillis-Steele scans
    written with pylucid ops (:func:`_inclusive_products`: :math:`\lceil \log_2 n \rceil`
    steps of three slices, a product and a concatenation), so higher derivatives are exact
    with zeros too.
    Integer and bool inputs multiply in int64, as in PyTorch; the product of no elements
    is 1. AMP: FORCE_FP32 (PyTorch's autocast float32 list).
    """

    schema_v1 = OpSchema(name="prod", amp_policy=AmpPolicy.FORCE_FP32, saved=("x",))

    def grad_formula(self, g: Any) -> tuple[Any]:
        be = self.backend
        g = be.reshape(g, self._keepdims_shape())
        return (be.prod_backward(self.saved["x"], g, self.axes, self.dtype),)

    def grad_graph(self, g: Tensor) -> tuple[Tensor]:
        # Each reduced slice as a row; others_j = before_(j-1) * after_(j+1) from the
        # inclusive prefix (before) and suffix (after) products, the ends taking one factor.
        shape = self.input_shapes[0]
        g = g.reshape(self._keepdims_shape())
        n = math.prod(shape[i] for i in self.axes)
        if n <= 1:  # no other elements: their product is 1
            return (g.broadcast_to(shape),)
        order = [i for i in range(len(shape)) if i not in self.axes] + list(self.axes)
        moved = [shape[i] for i in order]
        rows = self.saved_tensor("x").permute(order).reshape(math.prod(moved) // n, n)
        before = _inclusive_products(rows, reverse=False)
        after = _inclusive_products(rows, reverse=True)
        pieces = [after[:, 1:2], before[:, : n - 2] * after[:, 2:], before[:, n - 2 : n - 1]]
        others = concatenate([p for p in pieces if p.shape[1]], axis=1)
        return (g * others.reshape(moved).permute(np.argsort(order).tolist()),)


def _inclusive_products(rows: Tensor, reverse: bool) -> Tensor:
    """The inclusive prefix products along the last axis of the 2-d ``rows`` (suffix
    products if ``reverse``), by Hillis-Steele doubling: ceil(log2 n) steps of pylucid ops,
    differentiable and exact with zeros."""
    n, step = rows.shape[1], 1
    while step < n:
        if reverse:
            pieces = [rows[:, : n - step] * rows[:, step:], rows[:, n - step :]]
        else:
            pieces = [rows[:, :step], rows[:, step:] * rows[:, : n - step]]
        rows = concatenate(pieces, axis=1)
        step *= 2
    return rows


class _ExtremumOp(ReduceOp):
    """max and min: refuse empty axes; the gradient goes to the selected elements."""

    @classmethod
    def output_shape(
        cls, shapes: Sequence[Shape], *, axes: tuple[int, ...], keepdims: bool
    ) -> Shape:
        _refuse_empty(cls.schema_v1.name, shapes[0], axes)
        return super().output_shape(shapes, axes=axes, keepdims=keepdims)

    def grad_formula(self, g: Any) -> tuple[Any]:
        be, keep = self.backend, self._keepdims_shape()
        result, g = be.reshape(self.saved["result"], keep), be.reshape(g, keep)
        return (be.extremum_backward(self.saved["x"], result, g, self.axes, self.dtype),)

    def grad_graph(self, g: Tensor) -> tuple[Tensor]:
        keep = self._keepdims_shape()
        x, result = self.saved_tensor("x"), self.saved_tensor("result").reshape(keep)
        chosen = where(result != result, x != x, x == result)
        count = chosen.sum(axis=self.axes, keepdims=True)
        return (where(chosen, g.reshape(keep) / count, 0.0),)


class MaxBackward(_ExtremumOp):
    r"""Autograd node for :math:`y = \max_{i \in \text{axes}} x_i`; saves ``x`` and the result.

    .. math::
        \frac{\partial L}{\partial x_j} = \frac{g\,[x_j = y]}{\sum_i [x_i = y]}

    Tied maxima share the gradient equally, as in PyTorch's ``amax``. NaN propagates: the
    max of a slice holding NaN is NaN, and its gradient is shared by the NaN elements. Over
    an axis of size 0 it raises a ValueError. AMP: KEEP_INPUT (selects elements).
    """

    schema_v1 = OpSchema(name="max", amp_policy=AmpPolicy.KEEP_INPUT, saved=("x", "result"))

    @staticmethod
    def dispatch(
        be: Backend, a: Any, shape: Shape, dtype: DType, axes: Axes, keepdims: bool
    ) -> Any:
        return be.amax(a, axes, keepdims, dtype)


class MinBackward(_ExtremumOp):
    r"""Autograd node for :math:`y = \min_{i \in \text{axes}} x_i`; saves ``x`` and the result.

    .. math::
        \frac{\partial L}{\partial x_j} = \frac{g\,[x_j = y]}{\sum_i [x_i = y]}

    Tied minima share the gradient equally, as in PyTorch's ``amin``; NaN propagates and
    takes the gradient, as for :class:`MaxBackward`. AMP: KEEP_INPUT (selects elements).
    """

    schema_v1 = OpSchema(name="min", amp_policy=AmpPolicy.KEEP_INPUT, saved=("x", "result"))

    @staticmethod
    def dispatch(
        be: Backend, a: Any, shape: Shape, dtype: DType, axes: Axes, keepdims: bool
    ) -> Any:
        return be.amin(a, axes, keepdims, dtype)


class _ArgExtremumOp(Op):
    """argmax and argmin: one axis or None (flattened); an int64 result, no gradient."""

    input_names = ("x",)

    @classmethod
    def output_shape(cls, shapes: Sequence[Shape], *, axis: int | None, keepdims: bool) -> Shape:
        (shape,) = shapes
        axes = tuple(range(len(shape))) if axis is None else (axis,)
        _refuse_empty(cls.schema_v1.name, shape, axes)
        if keepdims:
            return tuple(1 if i in axes else n for i, n in enumerate(shape))
        return tuple(n for i, n in enumerate(shape) if i not in axes)

    @classmethod
    def result_dtype(cls, compute_dtype: DType) -> DType:
        return int64

    @classmethod
    def dispatch(
        cls, be: Backend, a: Any, shape: Shape, dtype: DType, axis: int | None, keepdims: bool
    ) -> Any:
        """The backend primitive named like the op: ``be.argmax(a, axis, keepdims, dtype)``."""
        return getattr(be, cls.schema_v1.name)(a, axis, keepdims, dtype)


class ArgmaxBackward(_ArgExtremumOp):
    """The op ``argmax``: the index of the first maximum along ``axis`` (of the flattened
    tensor when ``axis`` is None), as int64. A NaN counts as the maximum, as in PyTorch and
    NumPy. Not differentiable (its node is never recorded); AMP: KEEP_INPUT.
    """

    schema_v1 = OpSchema(name="argmax", amp_policy=AmpPolicy.KEEP_INPUT, differentiable=False)


class ArgminBackward(_ArgExtremumOp):
    """The op ``argmin``: the index of the first minimum along ``axis`` (of the flattened
    tensor when ``axis`` is None), as int64. A NaN counts as the minimum, as in PyTorch and
    NumPy. Not differentiable (its node is never recorded); AMP: KEEP_INPUT.
    """

    schema_v1 = OpSchema(name="argmin", amp_policy=AmpPolicy.KEEP_INPUT, differentiable=False)


class _MomentOp(ReduceOp):
    """var and std: a reduction with a ``correction`` (subtracted from the count)."""

    @classmethod
    def output_shape(
        cls, shapes: Sequence[Shape], *, axes: tuple[int, ...], keepdims: bool, correction: float
    ) -> Shape:
        return super().output_shape(shapes, axes=axes, keepdims=keepdims)

    @classmethod
    def dispatch(
        cls,
        be: Backend,
        a: Any,
        shape: Shape,
        dtype: DType,
        axes: Axes,
        keepdims: bool,
        correction: float,
    ) -> Any:
        """The backend primitive named like the op: ``be.var(a, axes, keepdims, c, dtype)``."""
        return getattr(be, cls.schema_v1.name)(a, axes, keepdims, correction, dtype)

    def _divisor(self) -> float:
        """``max(0, n - correction)``, with ``n`` the number of elements reduced."""
        excess = math.prod(self.input_shapes[0][i] for i in self.axes) - self.correction
        return excess if excess > 0 else 0.0


class VarBackward(_MomentOp):
    r"""Autograd node for :math:`y = \frac{1}{\max(0,\, n - c)} \sum_i (x_i - \bar x)^2` over
    the reduced axes, with :math:`n` elements and correction :math:`c` (1 by default:
    Bessel's, as in PyTorch); saves ``x``.

    .. math:: \frac{\partial L}{\partial x_j} = \frac{2 g\,(x_j - \bar x)}{n - c}

    Two-pass (the mean first, then the squared deviations, accumulated in float64 on the
    CPU). With :math:`n \le c` the divisor is 0: inf, or NaN for a constant or empty slice.
    Integer input gives float32 (``real_valued``). AMP: KEEP_INPUT (on none of PyTorch's
    autocast lists).
    """

    schema_v1 = OpSchema(
        name="var", amp_policy=AmpPolicy.KEEP_INPUT, saved=("x",), real_valued=True
    )

    def grad_formula(self, g: Any) -> tuple[Any]:
        be = self.backend
        g = be.reshape(g, self._keepdims_shape())
        return (be.var_backward(self.saved["x"], g, self.axes, self.correction, self.dtype),)

    def grad_graph(self, g: Tensor) -> tuple[Tensor]:
        x = self.saved_tensor("x")
        divisor = self._divisor()
        k = g.reshape(self._keepdims_shape()) * (2.0 / divisor if divisor else math.inf)
        return (k * (x - x.mean(axis=self.axes, keepdims=True)),)


class StdBackward(_MomentOp):
    r"""Autograd node for :math:`y = \sqrt{\operatorname{var}(x)}` (see :class:`VarBackward`
    for the correction); saves ``x`` and the result.

    .. math:: \frac{\partial L}{\partial x_j} = \frac{g\,(x_j - \bar x)}{(n - c)\, y}

    and 0 where :math:`y = 0` (a constant slice), as PyTorch does. Integer input gives
    float32 (``real_valued``). AMP: KEEP_INPUT (on none of PyTorch's autocast lists).
    """

    schema_v1 = OpSchema(
        name="std", amp_policy=AmpPolicy.KEEP_INPUT, saved=("x", "result"), real_valued=True
    )

    def grad_formula(self, g: Any) -> tuple[Any]:
        be, keep = self.backend, self._keepdims_shape()
        result, g = be.reshape(self.saved["result"], keep), be.reshape(g, keep)
        x = self.saved["x"]
        return (be.std_backward(x, result, g, self.axes, self.correction, self.dtype),)

    def grad_graph(self, g: Tensor) -> tuple[Tensor]:
        # The masked branch divides by 1 instead of 0, so that the zero gradient where()
        # sends it is not turned into nan.
        keep, x = self._keepdims_shape(), self.saved_tensor("x")
        divisor = self._divisor()
        result = self.saved_tensor("result").reshape(keep)
        constant = result == 0
        k = where(constant, 0.0, g.reshape(keep) / (where(constant, 1.0, result) * divisor))
        return (k * (x - x.mean(axis=self.axes, keepdims=True)),)


# -- wrappers -------------------------------------------------------------------------------
def _arg_wrapper(op_class: type[Op]) -> Callable[..., Tensor]:
    name = op_class.schema_v1.name

    def wrapper(
        x: Tensor,
        axis: int | None = None,
        keepdims: bool = False,
        *,
        dim: int | None = None,
        keepdim: bool | None = None,
    ) -> Tensor:
        require_tensor(name, "x", x)
        chosen = axis if dim is None else dim
        if chosen is not None and not isinstance(chosen, (int, np.integer)):
            raise TypeError(
                f"{name}: axis must be one int, or None for the flattened tensor; got {chosen!r}"
            )
        axes = normalize_axes(name, x, axis, dim)
        keep = bool(keepdims if keepdim is None else keepdim)
        axis = axes[0] if chosen is not None and axes else None  # () for a 0-d tensor
        return op_class.apply(x, axis=axis, keepdims=keep)

    wrapper.__name__ = wrapper.__qualname__ = name
    wrapper.__doc__ = (
        f"Index (int64) of the first {name[3:]}imum of ``x`` along ``axis`` (one int), or of "
        f"the flattened ``x`` when ``axis`` is None; ``keepdims`` keeps the reduced axis (all "
        f"axes when None) as size 1. PyTorch's ``dim=`` / ``keepdim=`` are accepted as "
        f"aliases. Not differentiable; see :class:`{op_class.__name__}`."
    )
    return tensor_method(wrapper)


def _correction(op: str, correction: float | None, unbiased: bool | None) -> float:
    if unbiased is not None:
        if correction is not None:
            raise TypeError(f"{op}: pass correction= or unbiased=, not both")
        if not isinstance(unbiased, (bool, np.bool_)):
            raise TypeError(f"{op}: unbiased must be a bool, got {unbiased!r}")
        return 1 if unbiased else 0
    if correction is None:
        return 1
    if not is_number(correction) or isinstance(correction, (bool, np.bool_)):
        raise TypeError(f"{op}: correction must be a number, got {correction!r}")
    if not (math.isfinite(correction) and correction >= 0):
        raise ValueError(f"{op}: correction must be finite and >= 0, got {correction!r}")
    return correction


def _moment_wrapper(op_class: type[Op]) -> Callable[..., Tensor]:
    name = op_class.schema_v1.name

    def wrapper(
        x: Tensor,
        axis: int | Sequence[int] | None = None,
        keepdims: bool = False,
        *,
        correction: float | None = None,
        unbiased: bool | None = None,
        dim: int | Sequence[int] | None = None,
        keepdim: bool | None = None,
    ) -> Tensor:
        require_tensor(name, "x", x)
        axes = normalize_axes(name, x, axis, dim)
        keep = bool(keepdims if keepdim is None else keepdim)
        c = _correction(name, correction, unbiased)
        return op_class.apply(x, axes=axes, keepdims=keep, correction=c)

    wrapper.__name__ = wrapper.__qualname__ = name
    wrapper.__doc__ = (
        f"``{name}`` of ``x`` over ``axis`` (all axes when None; an int or a tuple), dividing "
        f"by ``n - correction`` (``correction=1`` by default, as in PyTorch; "
        f"``unbiased=True/False`` means 1/0), keeping reduced axes as size 1 if ``keepdims``. "
        f"PyTorch's ``dim=`` / ``keepdim=`` are accepted as aliases. See "
        f":class:`{op_class.__name__}` for the gradient."
    )
    return tensor_method(wrapper)


sum = reduction_wrapper(SumBackward)  # noqa: A001  (pylucid.sum, like numpy.sum and torch.sum)
mean = reduction_wrapper(MeanBackward)
prod = reduction_wrapper(ProdBackward)
_amax = reduction_wrapper(MaxBackward, method=False)
_amin = reduction_wrapper(MinBackward, method=False)
argmax = _arg_wrapper(ArgmaxBackward)
argmin = _arg_wrapper(ArgminBackward)
var = _moment_wrapper(VarBackward)
std = _moment_wrapper(StdBackward)


def _one_dim(op: str, x: Tensor, dim: Any) -> int:
    """``dim`` (one int) normalised for ``x``; a tuple raises, naming what to call."""
    if not isinstance(dim, (int, np.integer)) or isinstance(dim, bool):
        raise TypeError(
            f"{op}: dim must be one int (PyTorch's {op}(x, dim) returns values and indices "
            f"along it), got {dim!r}; for several axes use a{op}(x, dim=...), values only"
        )
    return normalize_axes(op, x, dim, None)[0] if x.ndim else 0


def _select(
    op: str, arg_class: type[Op], result: type, x: Tensor, dim: Any, keepdim: bool
) -> Any:
    """``(values, indices)`` of the extremum along ``dim``: the indices by ``arg_class``, the
    values gathered at them, so the gradient goes to the selected element alone (PyTorch's
    rule for ``max(x, dim)``, where ``amax`` shares it among ties)."""
    axis = _one_dim(op, x, dim)
    flat = x.reshape((1,)) if x.ndim == 0 else x
    _refuse_empty(op, flat.shape, (axis,))
    indices = arg_class.apply(flat, axis=axis, keepdims=True)
    values = gather(flat, axis, indices)
    if x.ndim == 0:
        return result(values.reshape(()), indices.reshape(()))
    if not keepdim:
        values, indices = values.squeeze(axis), indices.squeeze(axis)
    return result(values, indices)


def _extremum(
    op: str,
    whole: Callable[..., Tensor],
    arg_class: type[Op],
    elementwise: Callable[[Any, Any], Tensor],
    result: type,
) -> Callable[..., Any]:
    def extremum(
        x: Tensor,
        dim: int | Tensor | None = None,
        keepdim: bool = False,
        *,
        axis: int | None = None,
        keepdims: bool | None = None,
    ) -> Any:
        require_tensor(op, "x", x)
        if isinstance(dim, Tensor):  # torch.max(a, b): the elementwise maximum
            return elementwise(x, dim)
        if dim is not None and axis is not None:
            raise TypeError(f"{op}: pass dim= or its alias axis=, not both")
        chosen = dim if axis is None else axis
        keep = bool(keepdim if keepdims is None else keepdims)
        if chosen is None:
            if keep:
                raise TypeError(f"{op}: keepdim needs a dim (PyTorch's {op}(x) reduces all)")
            return whole(x)
        return _select(op, arg_class, result, x, chosen, keep)

    extremum.__name__ = extremum.__qualname__ = op
    extremum.__doc__ = (
        f"PyTorch's ``{op}``: ``{op}(x)`` is the {op}imum of all elements (a 0-d tensor; "
        f"tied elements share the gradient, see :class:`{whole.__name__}`); "
        f"``{op}(x, dim, keepdim=False)`` returns the named tuple ``(values, indices)`` along "
        f"``dim`` (the first {op}imum; NaN counts as the {op}imum; the gradient goes to the "
        f"selected element); ``{op}(x, other)`` is the elementwise {op}imum. Use "
        f"``a{op}`` for the values over several axes."
    )
    return tensor_method(extremum)


max = _extremum("max", _amax, ArgmaxBackward, maximum, return_types.max)  # noqa: A001
min = _extremum("min", _amin, ArgminBackward, minimum, return_types.min)  # noqa: A001


@tensor_method
def aminmax(x: Tensor, *, dim: int | None = None, keepdim: bool = False) -> Any:
    """The named tuple ``(min, max)`` of ``x`` (over ``dim``, or all elements), as
    :func:`amin` and :func:`amax` give them."""
    return return_types.aminmax(
        amin(x, dim=dim, keepdim=keepdim), amax(x, dim=dim, keepdim=keepdim)
    )


def _with_mean(
    moment: Callable[..., Tensor],
    x: Tensor,
    dim: int | Sequence[int] | None,
    correction: float | None,
    unbiased: bool | None,
    keepdim: bool,
) -> tuple[Tensor, Tensor]:
    return (
        moment(x, dim=dim, correction=correction, unbiased=unbiased, keepdim=keepdim),
        mean(x, dim=dim, keepdim=keepdim),
    )


@tensor_method
def var_mean(
    x: Tensor,
    dim: int | Sequence[int] | None = None,
    *,
    correction: float | None = None,
    unbiased: bool | None = None,
    keepdim: bool = False,
) -> tuple[Tensor, Tensor]:
    """``(var(x), mean(x))`` over ``dim`` (a plain tuple, as PyTorch returns)."""
    return _with_mean(var, x, dim, correction, unbiased, keepdim)


@tensor_method
def std_mean(
    x: Tensor,
    dim: int | Sequence[int] | None = None,
    *,
    correction: float | None = None,
    unbiased: bool | None = None,
    keepdim: bool = False,
) -> tuple[Tensor, Tensor]:
    """``(std(x), mean(x))`` over ``dim`` (a plain tuple, as PyTorch returns)."""
    return _with_mean(std, x, dim, correction, unbiased, keepdim)


@tensor_method
def amax(
    x: Tensor,
    axis: int | Sequence[int] | None = None,
    keepdims: bool = False,
    *,
    dim: int | Sequence[int] | None = None,
    keepdim: bool | None = None,
) -> Tensor:
    """The maximum over ``axis`` (all axes when None; an int or a tuple), values only, as
    ``torch.amax``: tied maxima share the gradient; see :class:`MaxBackward`."""
    return _amax(x, axis, keepdims, dim=dim, keepdim=keepdim)


@tensor_method
def amin(
    x: Tensor,
    axis: int | Sequence[int] | None = None,
    keepdims: bool = False,
    *,
    dim: int | Sequence[int] | None = None,
    keepdim: bool | None = None,
) -> Tensor:
    """The minimum over ``axis`` (all axes when None; an int or a tuple), values only, as
    ``torch.amin``: tied minima share the gradient; see :class:`MinBackward`."""
    return _amin(x, axis, keepdims, dim=dim, keepdim=keepdim)
