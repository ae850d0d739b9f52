"""The shared op machinery: one node class per op, declared once.

An op is a subclass of :class:`Op` (through a family base: :class:`UnaryOp`,
:class:`BinaryOp`, :class:`ReduceOp`) whose body is its ``schema_v1``, its static
``dispatch`` forward and its ``grad_formula`` backward. Declaring the class registers it.
:meth:`Op.apply` does everything else the same way for every op: it checks devices and
shapes and chooses the compute dtype from the schema - decisions a :class:`DispatchPlan`
holds, made once per call signature -, dispatches to the inputs' backend, and - only when
grad mode is on and an input requires grad - records the node, saving what the schema
names. The node's :meth:`Op.backward` undoes broadcasting and casts each gradient back
to its input's dtype, so no ``grad_formula`` has to. An op declaring
``input_arity=VARIADIC`` takes any number of tensors (``concatenate``, ``stack``).
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import numpy as np

from pylucid import dtypes as _dtypes
from pylucid.backends.base import Backend, Shape
from pylucid.backends.half import reads_half_natively
from pylucid.dtypes import DType, float32, promote_tiers, promote_types
from pylucid.graph.anomaly import creation_site
from pylucid.graph.node import NOTHING_SAVED, Node, SavedValues
from pylucid.modes import state as thread_state
from pylucid.ops.schema import OpSchema, register_op, resolve_dtypes
from pylucid.tensor import Tensor

__all__ = [
    "VARIADIC",
    "DispatchPlan",
    "Op",
    "UnaryOp",
    "BinaryOp",
    "ReduceOp",
    "bound_primitive",
    "broadcast_shapes",
    "dispatch_plan",
    "sum_to",
]

#: ``OpSchema.input_arity`` of an op taking any number (at least one) of tensors, such as
#: ``concatenate``: its class names one input, and input ``i`` is called ``name[i]`` in
#: messages. It can save ``"result"`` but no input by name.
VARIADIC = -1


def broadcast_shapes(op: str, *shapes: Shape) -> Shape:
    """The NumPy broadcast of ``shapes``, or a ValueError naming ``op`` and the shapes."""
    first = tuple(shapes[0]) if shapes else ()
    for shape in shapes[1:]:  # (equal shapes, the common case, without NumPy's ~1 us)
        if tuple(shape) != first:
            break
    else:
        return first
    try:
        return tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        listed = " and ".join(str(tuple(s)) for s in shapes)
        raise ValueError(f"{op}: shapes {listed} cannot be broadcast together") from None


#: (backend, gradient shape, input shape, dtype) -> how :func:`sum_to` reduces: the axes,
#: the backend's bound sum over them (or None), and whether the sum needs a reshape;
#: emptied at :data:`PLAN_CACHE_SIZE` entries.
_SUMS_TO: dict[tuple, tuple[tuple[int, ...], Callable[[Any], Any] | None, bool]] = {}


def _sum_to_plan(
    backend: Backend, grad_shape: Shape, shape: Shape, dtype: DType
) -> tuple[tuple[int, ...], Callable[[Any], Any] | None, bool]:
    lead = len(grad_shape) - len(shape)
    axes = tuple(range(lead)) + tuple(
        lead + i for i, size in enumerate(shape) if size == 1 and grad_shape[lead + i] != 1
    )
    summed = tuple(n for i, n in enumerate(grad_shape) if i not in axes)
    params = {"axes": axes, "keepdims": False}
    run = (
        bound_primitive(backend, "sum", (grad_shape,), (dtype,), summed, dtype, params)
        if axes
        else None
    )
    return axes, run, summed != shape


def sum_to(backend: Backend, grad: Any, grad_shape: Shape, shape: Shape) -> Any:
    """Sum ``grad`` (of ``grad_shape``) over the dimensions broadcasting added to ``shape``:
    planned once per signature, through the backend's bound sum where it has one (a bias's
    gradient, summed over the batch at every step)."""
    dtype = backend.dtype(grad)
    key = (backend, grad_shape, shape, dtype)
    plan = _SUMS_TO.get(key)
    if plan is None:
        if len(_SUMS_TO) >= PLAN_CACHE_SIZE:
            _SUMS_TO.clear()
        plan = _SUMS_TO[key] = _sum_to_plan(backend, grad_shape, shape, dtype)
    axes, run, reshaped = plan
    if axes:
        summed = None if run is None else run(grad)
        grad = backend.sum(grad, axes, False, dtype) if summed is None else summed
    return backend.reshape(grad, shape) if reshaped else grad


def sum_to_tensor(grad: Tensor, shape: Shape) -> Tensor:
    """:func:`sum_to` with differentiable ops, for gradients that carry a graph."""
    lead = grad.ndim - len(shape)
    axes = tuple(range(lead)) + tuple(
        lead + i for i, size in enumerate(shape) if size == 1 and grad.shape[lead + i] != 1
    )
    if axes:
        grad = grad.sum(axis=axes)
    return grad.reshape(shape)


def bound_primitive(
    backend: Backend,
    primitive: str | None,
    input_shapes: Sequence[Shape],
    input_dtypes: Sequence[DType],
    shape: Shape,
    dtype: DType,
    params: dict[str, Any],
) -> Callable[..., Any] | None:
    """``backend``'s runner of ``primitive`` bound to one signature (``backend._bind``, an
    optional fast path of a backend), or None where the backend binds nothing."""
    bind = getattr(backend, "_bind", None)
    if primitive is None or bind is None:
        return None
    return bind(primitive, input_shapes, input_dtypes, shape, dtype, **params)


#: (backend, primitive, operand shapes, output shape, dtype, parameters) -> the backend's
#: runner of a gradient's primitive bound to that signature, or None where it binds none
#: (:meth:`Op.run_primitive`); emptied at :data:`PLAN_CACHE_SIZE` entries.
_GRAD_RUNS: dict[tuple, Callable[..., Any] | None] = {}


def _common_backend(op: str, names: Sequence[str], inputs: Sequence[Tensor]) -> Backend:
    backend = inputs[0]._backend
    for name, tensor in zip(names[1:], inputs[1:]):
        if tensor._backend is not backend:
            raise RuntimeError(
                f"{op}: expected all tensors on one device, but {names[0]} is on "
                f"'{inputs[0].device}' ({backend.name}) and {name} is on '{tensor.device}' "
                f"({tensor._backend.name}); move one with .to()"
            )
    return backend


def _weakened(
    cls: type[Op], inputs: Sequence[Tensor], dtypes: tuple[DType, ...]
) -> tuple[DType, ...]:
    """``dtypes`` with the dtype of each Python number and 0-d tensor among the promoted
    inputs replaced by the result of PyTorch's promotion (:func:`promote_tiers`), so that
    plain promotion of the tuple gives that result (once per call signature: the
    :class:`DispatchPlan` keeps it)."""
    tiers = [0 if t._wrapped else 2 if t._shape else 1 for t in inputs]
    labels = cls.input_labels(len(inputs))
    promoted = [i for i, label in enumerate(labels) if label not in cls.uncast_inputs]
    result = promote_tiers([dtypes[i] for i in promoted], [tiers[i] for i in promoted])
    return tuple(
        result if i in promoted and tiers[i] < 2 else dtype for i, dtype in enumerate(dtypes)
    )


class DispatchPlan:
    """What :meth:`Op.apply` decides from the inputs' backends, dtypes and shapes (and the
    op's parameters and the thread's :class:`~pylucid.modes.Modes`: grad, inference and
    anomaly mode, the autocast dtype) before it runs the op: computed once per combination
    by :func:`dispatch_plan`, so that a repeated call - a training loop's - only casts,
    dispatches and wraps.

    Attributes
    ----------
    backend, target : Backend
        Where the op runs, and the backend of its output (another for a device copy).
    shape : tuple of int
        The output's shape.
    dtype : DType
        The compute dtype (the node's ``dtype``).
    run_dtype : DType
        The dtype ``dispatch`` is asked for: ``dtype``, or the half input dtype of a
        ``FORCE_FP32`` op on a backend that computes halves in float32 itself.
    result_dtype : DType
        The output's dtype.
    casts : tuple of (DType or None)
        Per input, the dtype its storage is cast to, or None where it goes as it is.
    casts_any : bool
        Whether any input is cast.
    result_cast : DType or None
        The dtype the dispatched storage is cast to, or None.
    records : bool
        Whether a node is recorded where an input requires grad: the op has a gradient and
        a floating output, in grad mode.
    inference : bool
        Whether the result is an inference tensor (made in inference mode).
    anomaly : bool
        Whether a recorded node keeps where its op was called (anomaly detection).
    check_allocation : bool
        Whether the backend must check the output fits before the op runs (MLX).
    input_shapes, input_dtypes : tuple
        Of every input (a recorded node keeps them, to undo broadcasts and casts).
    plain_grads : bool
        Every input that can need a gradient - all but lifted Python numbers - has the
        output's shape and the compute dtype, so a gradient needs no sum over broadcast
        dimensions and no cast (the backward's common case: ``y * 3`` too).
    run : callable or None
        The op's forward bound to this signature (:meth:`Op.bind`; for an op declaring its
        :attr:`Op.primitive`, the backend's runner of that primitive, ``backend._bind``):
        called with the storages, it returns the output straight from the compiled loop, or
        None where a storage needs the general path (``dispatch``). None where the backend
        binds nothing, and for a plan made for one call (``bind=False``: binding compiles).
    """

    __slots__ = (
        "backend",
        "target",
        "shape",
        "dtype",
        "run_dtype",
        "result_dtype",
        "casts",
        "casts_any",
        "result_cast",
        "records",
        "inference",
        "anomaly",
        "check_allocation",
        "input_shapes",
        "input_dtypes",
        "plain_grads",
        "run",
    )

    def __init__(
        self, cls: type[Op], inputs: Sequence[Tensor], params: dict[str, Any], bind: bool = True
    ) -> None:
        schema = cls.schema_v1
        labels = cls.input_labels(len(inputs))
        backend = (
            inputs[0]._backend if len(inputs) == 1 else _common_backend(schema.name, labels, inputs)
        )
        self.input_shapes = tuple([t._shape for t in inputs])
        self.shape = cls.output_shape(self.input_shapes, **params)
        dtypes = self.input_dtypes = tuple([t._dtype for t in inputs])
        weak = cls.weak_scalars and not all([t._shape for t in inputs])
        if weak:
            dtypes = _weakened(cls, inputs, dtypes)
        natural = cls.compute_dtype(dtypes, **params)
        dtype, result_dtype = resolve_dtypes(schema.amp_policy, natural)
        if weak and dtype.is_half:  # a number takes part at float32 precision (opmath)
            dtype = float32
        target = cls.result_backend(backend, **params) if params else backend
        # FORCE_FP32 on half inputs, on a backend that reads halves natively: the inputs go
        # uncast and - outside autocast, unless the backward needs the float32 result - the
        # backend writes the half result itself (it computes a half dtype in float32 and
        # rounds once); the node still records float32 as its compute dtype.
        native = dtype is not natural and natural.is_half and reads_half_natively(backend)
        casts = self.casts = tuple(
            None
            if label in cls.uncast_inputs or t._dtype is dtype or (native and t._dtype is natural)
            else dtype
            for label, t in zip(labels, inputs)
        )
        self.casts_any = any([cast is not None for cast in casts])
        run_dtype = (
            natural
            if native and result_dtype is natural and "result" not in schema.saved
            else dtype
        )
        result_dtype = cls.result_dtype(result_dtype)
        self.result_cast = None if result_dtype is cls.result_dtype(run_dtype) else result_dtype
        self.backend, self.target = backend, target
        self.dtype, self.run_dtype, self.result_dtype = dtype, run_dtype, result_dtype
        modes = thread_state.modes
        differentiable = schema.differentiable and result_dtype.is_floating_point
        self.records = differentiable and modes.grad_enabled
        self.inference, self.anomaly = modes.inference, modes.anomaly
        self.check_allocation = target.allocates_lazily and not cls.returns_view
        self.plain_grads = all(
            [
                t._wrapped or (s == self.shape and d is dtype)
                for t, s, d in zip(inputs, self.input_shapes, self.input_dtypes)
            ]
        )
        self.run = None
        if bind and self.result_cast is None and not cls.returns_view:
            cast = tuple([d if c is None else c for d, c in zip(self.input_dtypes, casts)])
            self.run = cls.bind(backend, self.input_shapes, cast, self.shape, run_dtype, params)


_STORAGE = operator.attrgetter("_storage")
#: The ``needs_input_grad`` patterns, each one shared tuple (:meth:`Op._record`).
_NEEDS: dict[tuple[bool, ...], tuple[bool, ...]] = {}
#: ``needs_input_grad`` of a one-input node (its input requires grad, or it is not recorded).
_ONE_NEEDED = _NEEDS.setdefault((True,), (True,))

#: The plans of :func:`dispatch_plan`, by call signature; emptied when it reaches
#: :data:`PLAN_CACHE_SIZE` entries (a program's signatures are few; a loop over ever new
#: shapes must not grow it without bound).
_PLANS: dict[tuple, DispatchPlan] = {}
_dtypes.on_default_change(_PLANS.clear)  # (real-valued ops of integers compute in the default)
PLAN_CACHE_SIZE = 4096
#: Parameter values that identify a plan by value and type (anything else - an index plan,
#: an array - is planned afresh at each call).
_PLAIN_PARAMS = (int, float, bool, str, type(None), DType)


#: Whether instances of a type are backends: Backend is a runtime-checkable Protocol, whose
#: isinstance takes ~140 us (it looks up every member), so it runs once per type.
_BACKEND_TYPES: dict[type, bool] = {}


#: The exact types of :data:`_PLAIN_PARAMS` values, tested first (a set lookup).
_PLAIN_TYPES = frozenset({int, float, bool, str, type(None)})


def _plain(value: Any) -> bool:
    if type(value) is tuple:
        for v in value:  # (a loop: axes are tuples of ints, and a comprehension a frame)
            if type(v) is not int and not _plain(v):
                return False
        return True
    if isinstance(value, tuple):
        return all([_plain(v) for v in value])
    if isinstance(value, _PLAIN_PARAMS):
        return True
    kind = type(value)
    is_backend = _BACKEND_TYPES.get(kind)
    if is_backend is None:
        is_backend = _BACKEND_TYPES[kind] = isinstance(value, Backend)
    return is_backend


def dispatch_plan(cls: type[Op], inputs: Sequence[Tensor], params: dict[str, Any]) -> DispatchPlan:
    """The :class:`DispatchPlan` of a call of ``cls`` on ``inputs`` with ``params``, from the
    cache where the call's signature was planned before.

    The signature is everything the plan is a function of: the op, the thread's modes (one
    interned object), each input's backend, dtype, shape and whether it is a lifted Python
    number, and the parameters, each with its type (``exponent=2`` and ``exponent=2.0`` plan
    differently).
    Invalid calls raise while planning and leave nothing in the cache.
    """
    if len(inputs) == 1:  # (the common arities spelled out: a tuple built at once is cheapest)
        (a,) = inputs
        key = (cls, thread_state.modes, a._backend, a._dtype, a._shape, a._wrapped)
    elif len(inputs) == 2:
        a, b = inputs
        key = (cls, thread_state.modes, a._backend, a._dtype, a._shape, a._wrapped,
               b._backend, b._dtype, b._shape, b._wrapped)  # fmt: skip
    else:
        key = (cls, thread_state.modes)
        for t in inputs:
            key += (t._backend, t._dtype, t._shape, t._wrapped)
    if params:
        for name, value in params.items():
            kind = type(value)
            if kind not in _PLAIN_TYPES and not _plain(value):
                return DispatchPlan(cls, inputs, params, bind=False)
            key += (name, kind, value)
    plan = _PLANS.get(key)
    if plan is None:
        plan = DispatchPlan(cls, inputs, params)
        if len(_PLANS) >= PLAN_CACHE_SIZE:
            _PLANS.clear()
        _PLANS[key] = plan
    return plan


class Op(Node):
    """Base of every op node. Subclasses declare ``schema_v1``, ``dispatch``, ``grad_formula``.

    Attributes set on a recorded node
    ---------------------------------
    saved : SavedValues
        The storages named by ``schema_v1.saved`` (inputs by name, or ``result``), freed
        after backward.
    backend : Backend
        The backend the forward ran on.
    input_shapes, input_dtypes : tuple
        Of every input, for undoing broadcasts and casting gradients back.
    shape, dtype
        The output's shape and the compute dtype.
    needs_input_grad : tuple of bool
        Which inputs need a gradient; a formula may return None for the others.
    rounded_result : bool
        The output was rounded from ``dtype`` to a half dtype (``FORCE_FP32`` outside
        autocast); the incoming gradient is widened back before ``grad_formula``.
    """

    schema_v1: ClassVar[OpSchema]
    input_names: ClassVar[tuple[str, ...]] = ("x",)
    #: Inputs that keep their own dtype instead of taking the compute dtype (``where``'s
    #: bool ``condition``).
    uncast_inputs: ClassVar[frozenset[str]] = frozenset()
    #: The output may share memory with the first input (shape ops): where
    #: :meth:`makes_view` says it does, it becomes an alias of the input
    #: (:meth:`~pylucid.tensor.Tensor._alias`: one version counter, and in-place changes to
    #: either reach the other; see :mod:`pylucid.ops.views`).
    returns_view: ClassVar[bool] = False
    #: Python numbers and 0-d tensors among the inputs promote as PyTorch's do: they decide
    #: the category, not the width (``float16 * 2.5`` is float16, ``float32 * 0-d float64``
    #: float32), and with a half result they take part at float32 precision, the result
    #: rounded once (``float16(0.853) * 70000.0`` is 59712, not inf).
    weak_scalars: ClassVar[bool] = False
    #: The backend primitive that ``dispatch`` calls, and nothing else: with the storages,
    #: the op's parameters and the dtype (an elementwise one as ``primitive(*storages,
    #: shape, dtype)``). A backend may then bind it to a plan (:meth:`bind`,
    #: :attr:`DispatchPlan.run`). None for the other ops.
    primitive: ClassVar[str | None] = None
    #: ``schema_v1.saved`` as (name, input index, or None for the result), for recording.
    _saved_inputs: ClassVar[tuple[tuple[str, int | None], ...]] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "schema_v1" in cls.__dict__:
            schema = cls.schema_v1
            if schema.input_arity == VARIADIC:
                if len(cls.input_names) != 1 or set(schema.saved) - {"result"}:
                    raise TypeError(
                        f"{cls.__name__}: a variadic op names exactly one input and saves "
                        f"at most 'result', got {cls.input_names} and saved={schema.saved}"
                    )
            elif schema.input_arity != len(cls.input_names):
                raise TypeError(
                    f"{cls.__name__}: schema says {schema.input_arity} inputs but the class "
                    f"names {len(cls.input_names)}: {cls.input_names}"
                )
            cls._saved_inputs = tuple(
                (name, None if name == "result" else cls.input_names.index(name))
                for name in schema.saved
            )
            register_op(cls)

    @classmethod
    def input_labels(cls, count: int) -> tuple[str, ...]:
        """The names of ``count`` inputs in messages (``tensors[i]`` for a variadic op)."""
        if cls.schema_v1.input_arity == VARIADIC:
            return tuple(f"{cls.input_names[0]}[{i}]" for i in range(count))
        return cls.input_names

    # -- declared by each op ----------------------------------------------------------------
    @staticmethod
    def dispatch(
        backend: Backend, *storages: Any, shape: Shape, dtype: DType, **params: Any
    ) -> Any:
        """Run the forward on ``backend``; return the output storage."""
        raise NotImplementedError

    def grad_formula(self, g: Any) -> tuple[Any, ...]:
        """Gradients of the inputs (storage or None each) from the output gradient ``g``."""
        raise NotImplementedError(f"{self.name} has no gradient")

    @classmethod
    def bind(
        cls,
        backend: Backend,
        input_shapes: tuple[Shape, ...],
        input_dtypes: tuple[DType, ...],
        shape: Shape,
        dtype: DType,
        params: dict[str, Any],
    ) -> Callable[..., Any] | None:
        """The forward bound to one call signature (:attr:`DispatchPlan.run`), or None: a
        runner called with the storages (of ``input_dtypes``, as cast) that returns what
        ``dispatch`` returns, bit for bit, or None where a storage needs ``dispatch``.
        This one binds :attr:`primitive` (:func:`bound_primitive`)."""
        return bound_primitive(
            backend, cls.primitive, input_shapes, input_dtypes, shape, dtype, params
        )

    @classmethod
    def output_shape(cls, shapes: Sequence[Shape], **params: Any) -> Shape:
        """The output shape; raise a ValueError naming the op for invalid shapes."""
        return broadcast_shapes(cls.schema_v1.name, *shapes)

    @classmethod
    def compute_dtype(cls, dtypes: Sequence[DType], **params: Any) -> DType:
        """The dtype the op computes in: promoted inputs, float32 for integer real_valued."""
        dtype = dtypes[0]
        for other in dtypes[1:]:
            dtype = promote_types(dtype, other)
        if cls.schema_v1.real_valued and not dtype.is_floating_point:
            dtype = _dtypes.default_float
        return dtype

    @classmethod
    def result_dtype(cls, compute_dtype: DType) -> DType:
        """The output's dtype (comparisons override this to bool)."""
        return compute_dtype

    @classmethod
    def result_backend(cls, backend: Backend, **params: Any) -> Backend:
        """The backend of the output (a device copy overrides this)."""
        return backend

    # -- views (ops with ``returns_view``) --------------------------------------------------
    @classmethod
    def makes_view(cls, backend: Backend, x: Tensor, out: Any, **params: Any) -> bool:
        """Whether the output ``out`` of a call on ``x`` shares ``x``'s memory."""
        return True

    @classmethod
    def view_layout(cls, layout: np.ndarray, **params: Any) -> np.ndarray:
        """The NumPy view this op makes of an array laid out like its input, without reading
        its elements (``layout`` may have no memory behind its strides)."""
        raise NotImplementedError(f"{cls.__name__} makes no view")

    @classmethod
    def view_overlaps(cls, shape: Shape, **params: Any) -> bool:
        """Whether the view of an input of ``shape`` has several elements at one place in
        memory (a broadcast), so that it cannot be written in place."""
        return False

    # -- shared machinery -------------------------------------------------------------------
    @classmethod
    def apply(cls, *inputs: Tensor, **params: Any) -> Tensor:
        """Run the op forward and, when gradients are needed, record its node."""
        plan = dispatch_plan(cls, inputs, params)
        backend = plan.backend
        if plan.check_allocation:  # MLX allocates lazily and dies where it would fail
            backend.check_allocation(cls.schema_v1.name, plan.shape, plan.dtype)
        if plan.casts_any:
            storages = [
                t._storage if cast is None else backend.cast(t._storage, cast)
                for t, cast in zip(inputs, plan.casts)
            ]
        elif len(inputs) == 1:  # (the common arities spelled out: list(map(...)) costs
            storages = (inputs[0]._storage,)  # four times as much for one or two inputs)
        elif len(inputs) == 2:
            a, b = inputs
            storages = (a._storage, b._storage)
        else:
            storages = tuple(map(_STORAGE, inputs))
        out = None if plan.run is None else plan.run(*storages)  # (the bound compiled loop)
        if out is None:
            out = cls.dispatch(backend, *storages, shape=plan.shape, dtype=plan.run_dtype, **params)
        result_storage = out if plan.result_cast is None else backend.cast(out, plan.result_cast)
        result = Tensor._make(
            result_storage, plan.target, plan.result_dtype, False, plan.shape, plan.inference
        )
        if plan.records:
            for t in inputs:
                if t._requires_grad:
                    node = cls.__new__(cls)
                    node._record(inputs, storages, out, result, plan, params)
                    result.grad_fn, result._requires_grad = node, True
                    break
        if cls.returns_view and cls.makes_view(backend, inputs[0], out, **params):
            result._alias(inputs[0], (cls, params))
        return result

    def _record(
        self,
        inputs: Sequence[Tensor],
        storages: Sequence[Any],
        out: Any,
        result: Tensor,
        plan: DispatchPlan,
        params: dict[str, Any],
    ) -> None:
        """Fill this new node in: what the schema saves, the plan's facts, the edges.

        Every op that records runs this, so it is written for CPython's cost model: no
        comprehension (each is a frame), no call for a node that saves nothing, each
        ``grad_fn`` read once, and the one-input case - whose input requires grad, or no
        node would be recorded - without a loop."""
        if self._saved_inputs:
            self.saved = self._saved_values(inputs, storages, out, result)
        else:
            self.saved = NOTHING_SAVED
        if params:
            self.__dict__.update(params)
        self.backend = plan.backend
        self.shape, self.dtype, self.output_dtype = plan.shape, plan.dtype, plan.result_dtype
        self.rounded_result = plan.result_cast is not None
        self.input_shapes, self.input_dtypes = plan.input_shapes, plan.input_dtypes
        self.plain_grads = plan.plain_grads
        if len(inputs) == 1:
            (x,) = inputs
            edge = x.grad_fn
            self.next_edges = (x._grad_edge() if edge is None else edge,)
            self.needs_input_grad = _ONE_NEEDED
        else:
            edges, needs = (), ()  # (tuples grown in a loop: a comprehension costs a frame)
            for t in inputs:
                if t._requires_grad:
                    edge = t.grad_fn
                    edges += (t._grad_edge() if edge is None else edge,)
                    needs += (True,)
                else:
                    edges += (None,)
                    needs += (False,)
            # (one shared tuple per pattern: a node's own would be one more object for the
            # cyclic collector to count, whose passes a program of tiny ops pays for)
            self.next_edges, self.needs_input_grad = edges, _NEEDS.setdefault(needs, needs)
        if plan.anomaly:  # where the op was called, for anomaly reports
            self.creation_site = creation_site()

    def _saved_values(
        self, inputs: Sequence[Tensor], storages: Sequence[Any], out: Any, result: Tensor
    ) -> SavedValues:
        """What ``schema_v1.saved`` names, each with what is watched for in-place changes
        (:meth:`SavedValues.entry`, spelled out)."""
        entries = ()  # (grown in a loop: a comprehension costs a frame, per node)
        for name, index in self._saved_inputs:
            if index is None:  # the result: watched through its counter (holding the
                # result itself would make a cycle through its grad_fn)
                counter = result._version
                entries += (out, None, counter, counter.value)
                continue
            tensor = inputs[index]
            if tensor._is_inference:
                raise RuntimeError(
                    f"{self.schema_v1.name}: {name} is an inference tensor (created "
                    f"under inference_mode), which cannot be saved for backward; make it "
                    f"with grad mode on, or clone it outside inference_mode"
                )
            counter = tensor._counter  # (watched through the tensor: no counter is made)
            entries += (storages[index], tensor, tensor, 0 if counter is None else counter.value)
        return SavedValues(type(self).__name__, self.schema_v1.saved, entries)

    def saved_tensor(self, name: str) -> Tensor:
        """A saved value as a Tensor in the graph, in the compute dtype, for
        :meth:`grad_graph`: an input as the op received it (cast differentiably if the op
        computed in another dtype), or ``"result"`` as this node's own output."""
        if name == "result":
            result = Tensor._make(self.saved["result"], self.backend, self.dtype)
            result._set_grad_fn(self)
            return result
        tensor = self.saved.tensor(name)
        return tensor if tensor.dtype is self.dtype else tensor.to(self.dtype)

    def grad_graph(self, g: Tensor) -> tuple[Tensor | None, ...]:
        """The gradients of the inputs as pylucid ops on Tensors (so they are differentiable),
        from the output gradient ``g`` (in the compute dtype). Used by backward with
        ``create_graph=True``; the broadcast and dtype are undone by :meth:`backward_graph`."""
        raise NotImplementedError(
            f"{self.name}: no differentiable gradient formula, so backward with "
            f"create_graph=True cannot differentiate through {self.schema_v1.name}"
        )

    def run_primitive(
        self,
        primitive: str,
        operands: tuple[Any, ...],
        shapes: tuple,
        params: tuple[tuple[str, Any], ...] = (),
    ) -> Any:
        """``backend.<primitive>(*operands, *values, shape, dtype)`` with this node's output
        shape and compute dtype, for a grad formula: through the backend's runner bound to
        the signature where it has one (:func:`bound_primitive`, planned once per signature
        as a forward is: a training loop runs each formula at every step), else the
        primitive. ``params``: the primitive's scalar parameters as ``(name, value)`` pairs
        in its order, constants of the op (part of the signature: a class attribute, so
        that its hash is all it costs).

        ``shapes`` are the operands' shapes, known from the node (the incoming gradient has
        the output's, a saved input its input's): the runner is chosen by them, and reads
        its operands without looking at their shapes again. The operands are storages in
        the compute dtype; a runner declines (None) any of another dtype or layout."""
        backend, shape, dtype = self.backend, self.shape, self.dtype
        key = (backend, primitive, shapes, shape, dtype, params)
        run = _GRAD_RUNS.get(key, False)
        if run is False:
            if len(_GRAD_RUNS) >= PLAN_CACHE_SIZE:
                _GRAD_RUNS.clear()
            dtypes = (dtype,) * len(shapes)
            run = bound_primitive(backend, primitive, shapes, dtypes, shape, dtype, dict(params))
            _GRAD_RUNS[key] = run
        out = None if run is None else run(*operands)
        if out is None:
            values = [value for _, value in params]
            return getattr(backend, primitive)(*operands, *values, shape, dtype)
        return out

    def backward_graph(self, grad: Tensor) -> tuple[Tensor | None, ...]:
        if grad.dtype is not self.dtype:
            grad = grad.to(self.dtype)
        results = []
        for g, needed, shape, dtype in zip(
            self.grad_graph(grad), self.needs_input_grad, self.input_shapes, self.input_dtypes
        ):
            if g is None or not needed:
                results.append(None)
                continue
            if g.shape != shape:
                g = sum_to_tensor(g, shape)
            results.append(g if g.dtype is dtype else g.to(dtype))
        return tuple(results)

    def as_tensor(self, grad: Any) -> Tensor:
        return Tensor._make(grad, self.backend, self.output_dtype)

    def all_finite(self, grad: Any) -> bool:
        storage = grad._storage if isinstance(grad, Tensor) else grad
        return bool(np.isfinite(self.backend.to_numpy(storage)).all())

    def backward(self, grad: Any) -> tuple[Any, ...]:
        if self.rounded_result:  # FORCE_FP32 outside autocast: g has the half output dtype
            grad = self.backend.cast(grad, self.dtype)
        grads = self.grad_formula(grad)
        if self.plain_grads:  # each gradient has its input's shape and dtype already
            if all(self.needs_input_grad):
                return grads
            plain = ()  # (grown in a loop: a comprehension costs a frame, per node)
            for g, needed in zip(grads, self.needs_input_grad):
                plain += (g if needed else None,)
            return plain
        backend = self.backend
        results = []
        for g, needed, shape, dtype in zip(
            grads, self.needs_input_grad, self.input_shapes, self.input_dtypes
        ):
            if g is None or not needed:
                results.append(None)
                continue
            g_shape = backend.shape(g)
            if g_shape != shape:
                g = sum_to(backend, g, g_shape, shape)
            results.append(backend.cast(g, dtype))
        return tuple(results)

    def release(self) -> None:
        self.saved.release()


class UnaryOp(Op):
    """An elementwise op of one tensor ``x``: output shape = input shape."""

    input_names = ("x",)

    @classmethod
    def output_shape(cls, shapes: Sequence[Shape], **params: Any) -> Shape:
        return shapes[0]


class BinaryOp(Op):
    """An elementwise op of tensors ``a`` and ``b`` with NumPy broadcasting; numbers and 0-d
    tensors among them promote weakly (:attr:`Op.weak_scalars`)."""

    input_names = ("a", "b")
    weak_scalars = True

    @classmethod
    def output_shape(cls, shapes: Sequence[Shape], **params: Any) -> Shape:
        a, b = shapes
        return a if a == b else broadcast_shapes(cls.schema_v1.name, a, b)


class ReduceOp(Op):
    """A reduction of ``x`` over ``axes`` (a normalised tuple), with ``keepdims``."""

    input_names = ("x",)

    @classmethod
    def output_shape(
        cls, shapes: Sequence[Shape], *, axes: tuple[int, ...], keepdims: bool
    ) -> Shape:
        (shape,) = shapes
        if keepdims:
            return tuple(1 if i in axes else size for i, size in enumerate(shape))
        return tuple(size for i, size in enumerate(shape) if i not in axes)

    def _keepdims_shape(self) -> Shape:
        """The output shape with the reduced axes kept as size 1 (for broadcasting back)."""
        return tuple(1 if i in self.axes else n for i, n in enumerate(self.input_shapes[0]))
