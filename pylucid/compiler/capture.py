"""Capture: one eager run of a step, with every backend primitive it calls recorded.

:class:`Recorder` runs the step's function on the ``numba`` backend as it always runs, and
notes on the way what a replay needs to do the same work again without the Python:

- every primitive call that computes (forward ops, the backward the engine ran, the
  optimizer's in-place updates), with its arrays numbered as *values*;
- for an elementwise primitive, the loop it ran (the kernel's scalar function, operands and
  scalar arguments: :class:`Elementwise`), so that a plan can fuse chains of them; for a
  fused optimizer update, the compiled loop and the arrays it updated (:class:`Update`);
- the tensors the arrays belong to (inputs, parameters, optimizer state, gradients), so
  that guards can check a replay sees the same ones;
- the Python-side effects a replay must repeat: the optimizer steps (whose learning rates
  and step counts are Python state), ``zero_grad(set_to_none=True)``, the draws of
  random numbers (dropout), and each leaf's ``.grad`` at the end.

The bound fast path (``DispatchPlan.run``) calls compiled loops behind the backend's back,
so the recorder gives capture its own plan cache, planned without it.

What cannot be captured is refused where it happens (:class:`CaptureError`): reading a
tensor's values in Python (``.item()``, ``print``, ``bool(t)``) makes the step's ops depend
on data, which a replay would not see.
"""

from __future__ import annotations

import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pylucid import factories
from pylucid.dtypes import as_dtype
from pylucid.graph import engine
from pylucid.graph.anomaly import in_package
from pylucid.kernels.log2_avx512 import Log2Kernel
from pylucid.kernels.loops import ElementwiseKernel
from pylucid.kernels.optimizers import UpdateKernel
from pylucid.nn.modules.module import Module
from pylucid.ops import base as op_base
from pylucid.optim.lr_scheduler import LRScheduler
from pylucid.optim.optimizer import Optimizer
from pylucid.tensor import Tensor

__all__ = ["CaptureError", "Call", "Elementwise", "Recorder", "Shadowing", "Trace", "Update"]

#: Backend methods that answer questions about storage rather than compute: not recorded.
QUERIES = frozenset({
    "shape", "dtype", "is_writable", "is_private", "aliases", "is_available",
    "unavailable_reason", "info", "check_allocation",
})  # fmt: skip
#: Primitives that run one elementwise kernel on their first ``n`` arguments, in order, as
#: ``_operand`` gives them (broadcast, cast to the compute dtype), without ``_nary``:
#: primitive -> n.
KERNEL_ON_ARGUMENTS = {"where": 3, "eq": 2, "ne": 2, "lt": 2, "le": 2, "gt": 2, "ge": 2}
#: Primitives that change their first array argument in place (and return it).
IN_PLACE = frozenset({"accumulate", "write", "setitem"})

_READS_VALUES = "reads a tensor's values in Python (.item(), .numpy(), print, bool())"
_MAKES_FROM_DATA = (
    "makes a tensor from Python data (pl.tensor, from_numpy, a DataLoader's batch), whose "
    "values a replay would not see again; pass such tensors as arguments"
)


class CaptureError(RuntimeError):
    """A step cannot be captured: it reads tensor values in Python, or does something a
    replay could not repeat. The message names the op and the line of the user's code."""


@dataclass(frozen=True)
class Ref:
    """A value of the trace: an array, by its number."""

    index: int


@dataclass
class Elementwise:
    """The loop an elementwise primitive ran: ``out = fn(*operands, *scalars)`` per element
    over ``shape``, computed in ``compute`` (operands are Refs or Python numbers; scalars
    NumPy scalars of the types the kernel got, or tuples of them)."""

    fn: Callable
    operands: tuple[Any, ...]
    scalars: tuple[Any, ...]
    shape: tuple[int, ...]
    compute: np.dtype
    #: the eager kernel (its threaded loop runs a replay's large loops)
    kernel: ElementwiseKernel


@dataclass
class Update:
    """A fused optimizer update: ``kernel``'s loop of ``choices`` on flat views of
    ``arrays`` (Refs, or None for an unused state), with ``scalars`` - Python state, read
    again at every replay."""

    kernel: UpdateKernel
    choices: tuple[bool, ...]
    arrays: tuple[Ref | None, ...]
    scalars: tuple[float, ...]
    compute: np.dtype


@dataclass
class Call:
    """One recorded primitive call: arguments with arrays as Refs, the result likewise."""

    name: str
    args: tuple[Any, ...]
    result: Any
    elementwise: Elementwise | None = None
    update: Update | None = None


@dataclass
class Trace:
    """What a capture saw; :mod:`pylucid.compiler.plan` turns it into a program."""

    arrays: list[np.ndarray] = field(default_factory=list)
    calls: list[Call] = field(default_factory=list)
    #: value -> index of the call that produced it
    producers: dict[int, int] = field(default_factory=dict)
    #: value -> the tensor whose storage it is (inputs, parameters, state, gradients)
    owners: dict[int, Tensor] = field(default_factory=dict)
    #: values that are the storages of the function's tensor arguments, in argument order
    inputs: list[int] = field(default_factory=list)
    #: the function's tensor arguments of the capture
    input_tensors: list[Tensor] = field(default_factory=list)
    #: value -> (draw kind, shape, dtype, device, generator) of a random draw
    draws: dict[int, tuple] = field(default_factory=dict)
    #: the leaves whose .grad the backward set: (tensor, grad tensor at the end, assigned?)
    grads: list[tuple[Tensor, Tensor, bool]] = field(default_factory=list)
    #: tensors whose .grad the function set to None (zero_grad)
    cleared: set[int] = field(default_factory=set)
    #: Python calls to repeat at each replay, in order: ("step", optimizer) / ("sched", s)
    python_calls: list[tuple[str, Any]] = field(default_factory=list)
    #: optimizer -> its state signature when its step began
    optimizer_states: dict[int, tuple[Optimizer, tuple]] = field(default_factory=dict)
    #: whether an optimizer created state during the capture (a first step)
    created_state: bool = False
    #: modules whose forward ran, for the guard on their training flag
    modules: dict[int, Module] = field(default_factory=dict)
    #: the values of the tensors the function returned (None for other leaves)
    outputs: list[int | None] = field(default_factory=list)
    #: the first read of tensor values in Python: (what, where), or None
    host_read: tuple[str, str] | None = None

    def ref(self, array: np.ndarray) -> Ref:
        """The value of ``array``, numbered on first sight (the trace keeps it alive, so
        that its id stays unique)."""
        index = self._ids.get(id(array))
        if index is None:
            index = self._ids[id(array)] = len(self.arrays)
            self.arrays.append(array)
        return Ref(index)

    def __post_init__(self) -> None:
        self._ids: dict[int, int] = {}

    def index_of(self, array: np.ndarray) -> int | None:
        return self._ids.get(id(array))


def optimizer_state_signature(optimizer: Optimizer) -> tuple:
    """What an optimizer's step depends on beyond its hyperparameters: which parameters
    have state, the state's keys and the identity of its arrays."""
    signature = []
    for group in optimizer.param_groups:
        for p in group["params"]:
            state = optimizer.state.get(p)
            entries = ()
            if state:
                for key in sorted(state):
                    value = state[key]
                    entries += ((key, id(value._storage)) if isinstance(value, Tensor) else (key,),)
            signature.append((id(p), entries))
    return tuple(signature)


def user_site() -> str:
    """``file:line`` of the innermost frame outside pylucid (the user's code)."""
    for frame in reversed(traceback.extract_stack()):
        if not in_package(frame.filename):
            return f"{frame.filename}:{frame.lineno} ({frame.line})"
    return "<pylucid>"


class Shadowing:
    """Attributes of classes and objects replaced while a context is open (``_patch``) and
    put back in reverse order when it closes (``_restore``; an attribute that was not the
    owner's own is removed again)."""

    def __init__(self) -> None:
        self._patches: list[tuple[Any, str, Any, bool]] = []

    def _patch(self, owner: Any, name: str, replacement: Any) -> None:
        self._patches.append((owner, name, vars(owner).get(name), name in vars(owner)))
        setattr(owner, name, replacement)

    def _shadow_primitives(self, backend: Any, wrap: Callable[[str, Callable], Callable]) -> None:
        """Replace each primitive of ``backend`` (its public methods but the queries) by
        ``wrap(name, method)``."""
        for name in dir(type(backend)):
            if name.startswith("_") or name in QUERIES:
                continue
            method = getattr(backend, name)
            if callable(method):
                self._patch(backend, name, wrap(name, method))

    def _restore(self) -> None:
        for owner, name, previous, had in reversed(self._patches):
            if had:
                setattr(owner, name, previous)
            else:
                delattr(owner, name)
        self._patches.clear()


class Recorder(Shadowing):
    """A context manager that records a run on ``backend`` into :attr:`trace`.

    Parameters
    ----------
    backend : Backend
        The numba backend instance (its methods are shadowed by recording ones for the
        duration, and restored).
    The first read of tensor values in Python is noted in ``trace.host_read``.
    """

    def __init__(self, backend: Any) -> None:
        self.backend = backend
        self.trace = Trace()
        self._depth = 0
        self._loops: list[tuple[Elementwise | None, Any]] = []
        self._runs: list[tuple[ElementwiseKernel, Any]] = []
        self._nary_depth = 0
        self._updates: list[tuple] = []
        super().__init__()

    # -- installing and removing the recording methods ----------------------------------

    def __enter__(self) -> Recorder:
        backend = self.backend
        self._shadow_primitives(backend, self._recording)
        self._patch(backend, "_nary", self._recording_loop(backend._nary))
        if hasattr(backend, "_fused"):
            self._patch(backend, "_fused", self._recording_loop(backend._fused, fused=True))
        self._patch(backend, "_bind", lambda *args, **params: None)
        self._patch(backend, "_bind_in_place", lambda *args: None)
        direct_loops = sys.modules.get("pylucid.backends.numba_backend.elementwise")
        if getattr(direct_loops, "direct", None) is not None:  # (loops called behind _nary)
            self._patch(direct_loops, "direct", lambda *args: None)
        # (plans made before bind compiled loops the recording would not see: a capture
        # plans afresh, with _bind off, and the eager plans come back after it)
        self._saved_plans = op_base._PLANS, op_base._SUMS_TO, op_base._GRAD_RUNS
        op_base._PLANS, op_base._SUMS_TO, op_base._GRAD_RUNS = {}, {}, {}
        self._patch(UpdateKernel, "__call__", self._recording_update(UpdateKernel.__call__))
        self._patch(ElementwiseKernel, "run", self._recording_run(ElementwiseKernel.run))
        self._patch(Tensor, "_accumulate_grad", self._recording_grad(Tensor._accumulate_grad))
        self._patch(Tensor, "grad", self._recording_grad_setter(Tensor.grad))
        self._patch(Optimizer, "_run_step", self._recording_step(Optimizer._run_step))
        self._patch(LRScheduler, "step", self._recording_schedule(LRScheduler.step))
        self._patch(Module, "__call__", self._recording_module(Module.__call__))
        self._patch(factories, "_random", self._recording_draw(factories._random))
        self._patch(engine, "add_gradients", self._recording_gradient_sum(engine.add_gradients))
        return self

    def __exit__(self, *exc: object) -> None:
        self._restore()
        op_base._PLANS, op_base._SUMS_TO, op_base._GRAD_RUNS = self._saved_plans

    # -- the recording methods ----------------------------------------------------------
    def _recording(self, name: str, method: Callable) -> Callable:
        if name == "to_numpy":
            return self._host_read(method, _READS_VALUES)
        if name == "from_numpy":  # (random draws record their own from_numpy: as a draw)
            return self._host_read(method, _MAKES_FROM_DATA)
        trace = self.trace

        def record(*args: Any) -> Any:
            if self._depth:  # a primitive's own use of another: part of the outer call
                return method(*args)
            self._depth += 1
            self._loops, self._updates, self._runs = [], [], []
            try:
                result = method(*args)
            finally:
                self._depth -= 1
            call = Call(name, tuple(_tokens(trace, a) for a in args), _tokens(trace, result))
            index = len(trace.calls)
            for token in _flat_refs(call.result):
                if token.index not in trace.producers and not _is_argument(token, call.args):
                    trace.producers[token.index] = index
            if (
                len(self._loops) == 1
                and self._loops[0][0] is not None
                and self._loops[0][1] is result
            ):
                call.elementwise = self._loops[0][0]
            if len(self._updates) == 1:
                call.update = _update_of(trace, self._updates[0], args)
            arity = KERNEL_ON_ARGUMENTS.get(name)
            if arity and not self._loops and len(self._runs) == 1 and self._runs[0][1] is result:
                kernel, _ = self._runs[0]
                dtype = args[-1]
                if not dtype.is_half:
                    call.elementwise = Elementwise(
                        kernel._scalar_fn, tuple(_tokens(trace, a) for a in args[:arity]), (),
                        tuple(args[-2]), np.dtype(dtype.numpy), kernel,
                    )  # fmt: skip
            trace.calls.append(call)
            return result

        return record

    def _recording_loop(self, nary: Callable, fused: bool = False) -> Callable:
        """Record the outermost ``_nary`` (or ``_fused``: two operands and a parameter
        passed as it is) call of a primitive: the loop it runs."""
        trace = self.trace

        def record(kernel, *args):  # noqa: ANN001, ANN202
            self._nary_depth += 1  # (a Fortran-ordered call runs itself on transposes)
            try:
                result = nary(kernel, *args)
            finally:
                self._nary_depth -= 1
            if self._nary_depth:
                return result
            if fused:
                x, g, param, shape, dtype = args
                operands, scalars = (x, g), (param,)
            else:
                operands, shape, dtype, *rest = args
                compute = np.dtype(np.float32) if dtype.is_half else np.dtype(dtype.numpy)
                scalars = tuple(compute.type(s) for s in rest)
            generic = kernel.generic if isinstance(kernel, Log2Kernel) else kernel
            loop = None
            if isinstance(generic, ElementwiseKernel) and not dtype.is_half:
                loop = Elementwise(
                    generic._scalar_fn,
                    tuple(_tokens(trace, a) for a in operands),
                    scalars,
                    tuple(shape),
                    np.dtype(dtype.numpy),
                    generic,
                )
            self._loops.append((loop, result))
            return result

        return record

    def _recording_run(self, run: Callable) -> Callable:
        def record(kernel: ElementwiseKernel, *args: Any) -> Any:
            result = run(kernel, *args)
            self._runs.append((kernel, result))
            return result

        return record

    def _recording_update(self, call: Callable) -> Callable:
        def record(kernel: UpdateKernel, choices: tuple, param: Any, *args: Any) -> None:
            self._updates.append((kernel, choices, param, args))
            return call(kernel, choices, param, *args)

        return record

    def _host_read(self, method: Callable, what: str) -> Callable:
        def note(*args: Any) -> Any:
            # (noted, not raised here: an op building an error message reads values too,
            # and its own error must come out)
            if self.trace.host_read is None and not self._depth:
                self.trace.host_read = (what, user_site())
            return method(*args)

        return note

    def _recording_grad(self, accumulate: Callable) -> Callable:
        trace = self.trace

        def record(tensor: Tensor, grad: Any, owned: bool = False) -> None:
            assigned = tensor._grad is None
            if not assigned:
                trace.owners.setdefault(trace.ref(tensor._grad._storage).index, tensor._grad)
            accumulate(tensor, grad, owned)
            trace.owners.setdefault(trace.ref(tensor._storage).index, tensor)
            trace.grads.append((tensor, tensor._grad, assigned))

        return record

    def _recording_grad_setter(self, prop: property) -> property:
        trace = self.trace

        def set_grad(tensor: Tensor, value: Tensor | None) -> None:
            if value is None:
                trace.cleared.add(id(tensor))
            prop.fset(tensor, value)

        return property(prop.fget, set_grad, None, prop.__doc__)

    def _recording_step(self, step: Callable) -> Callable:
        trace = self.trace

        def record(optimizer: Optimizer, closure: Callable | None = None) -> Any:
            if closure is not None:
                raise CaptureError(
                    f"pl.compile: {type(optimizer).__name__}.step(closure) at {user_site()}: "
                    f"a closure re-evaluates the loss, which a replay cannot repeat; call "
                    f"the loss and backward in the compiled function and step() without one"
                )
            before = optimizer_state_signature(optimizer)
            trace.optimizer_states.setdefault(id(optimizer), (optimizer, before))
            trace.python_calls.append(("step", optimizer))
            result = step(optimizer, None)
            if optimizer_state_signature(optimizer) != before:
                trace.created_state = True
            for group in optimizer.param_groups:
                for p in group["params"]:
                    trace.owners.setdefault(trace.ref(p._storage).index, p)
                    for value in optimizer.state.get(p, {}).values():
                        if isinstance(value, Tensor):
                            trace.owners.setdefault(trace.ref(value._storage).index, value)
            return result

        return record

    def _recording_schedule(self, step: Callable) -> Callable:
        trace = self.trace

        def record(scheduler: LRScheduler, *args: Any, **kwargs: Any) -> Any:
            if args or kwargs:
                raise CaptureError(
                    f"pl.compile: {type(scheduler).__name__}.step with arguments at "
                    f"{user_site()} cannot be replayed; call it outside the compiled function"
                )
            trace.python_calls.append(("schedule", scheduler))
            return step(scheduler)

        return record

    def _recording_module(self, call: Callable) -> Callable:
        trace = self.trace

        def record(module: Module, *args: Any, **kwargs: Any) -> Any:
            trace.modules.setdefault(id(module), module)
            for tensor in (*module._parameters.values(), *module._buffers.values()):
                if tensor is not None:
                    trace.owners.setdefault(trace.ref(tensor._storage).index, tensor)
            return call(module, *args, **kwargs)

        return record

    def _recording_draw(self, draw: Callable) -> Callable:
        trace = self.trace

        def record(kind, shape, dtype, device, rg, generator):  # noqa: ANN001, ANN202
            self._depth += 1  # (its from_numpy is part of the draw)
            try:
                tensor = draw(kind, shape, dtype, device, rg, generator)
            finally:
                self._depth -= 1
            index = trace.ref(tensor._storage).index
            trace.draws[index] = (kind, shape, dtype, device, generator)
            return tensor

        return record

    def _recording_gradient_sum(self, add_gradients: Callable) -> Callable:
        """The engine's sum of two gradient storages, as the backend's (recorded) add: the
        same IEEE sum as NumPy's ``+`` for operands of one dtype."""
        backend = self.backend

        def record(a, b):  # noqa: ANN001, ANN202
            if not (isinstance(a, np.ndarray) and isinstance(b, np.ndarray)) or a.dtype != b.dtype:
                return add_gradients(a, b)
            return backend.add(a, b, np.broadcast_shapes(a.shape, b.shape), as_dtype(a.dtype))

        return record


def _tokens(trace: Trace, value: Any) -> Any:
    """``value`` with each NumPy array replaced by its Ref (lists and tuples kept)."""
    if isinstance(value, np.ndarray):
        return trace.ref(value)
    if isinstance(value, (list, tuple)):
        return same_kind(value, [_tokens(trace, v) for v in value])
    return value


def same_kind(sequence: list | tuple, items: list) -> list | tuple:
    """``items`` as a sequence of ``sequence``'s type (a named tuple's fields positional)."""
    return type(sequence)(*items) if hasattr(sequence, "_fields") else type(sequence)(items)


def _flat_refs(token: Any) -> list[Ref]:
    if isinstance(token, Ref):
        return [token]
    if isinstance(token, (list, tuple)):
        return [r for t in token for r in _flat_refs(t)]
    return []


def _is_argument(ref: Ref, args: tuple) -> bool:
    return any(ref == r for r in _flat_refs(args))


def _update_of(trace: Trace, update: tuple, args: tuple) -> Update | None:
    """The :class:`Update` of a recorded kernel call, when it ran in place on the
    primitive's own arrays (flat views of them); None where it ran on copies."""
    kernel, choices, param, rest = update
    arrays = [a for a in args if isinstance(a, np.ndarray)]
    refs: list[Ref | None] = []
    scalars: list[float] = []
    for position, value in enumerate((param, *rest)):
        if isinstance(value, np.ndarray):
            if value.size == 0:
                refs.append(None)
                continue
            match = [
                a for a in arrays
                if a.size == value.size and a.dtype == value.dtype
                and a.flags.c_contiguous and a.ctypes.data == value.ctypes.data
            ]  # fmt: skip
            gradient = arrays[1] if len(arrays) > 1 else None
            if not match and position == 1 and gradient is not None and gradient.shape:
                # (a Fortran-ordered gradient - a Linear weight's - went as a C copy: the
                # generated code makes the same copy)
                if np.array_equal(np.ascontiguousarray(gradient).reshape(-1), value):
                    match = [gradient]
            if not match:
                return None
            refs.append(trace.ref(match[0]))
        else:
            scalars.append(float(value))
    return Update(kernel, tuple(choices), tuple(refs), tuple(scalars), np.dtype(param.dtype))
