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
  and step counts are Python state, with the parameters that had a gradient then), the
  schedulers' steps, the draws of random numbers (dropout), and what the step did with
  each gradient (:class:`GradTrack`: what a replay needs of it, what it leaves);
- the attributes of modules the step read (``Dropout.p``, ``training``, a parameter by
  name), which the replay's guards read again.

The bound fast path (``DispatchPlan.run``) calls compiled loops behind the backend's back,
so the recorder gives capture its own plan cache, planned without it. Everything it shadows
acts in the capturing thread only (:class:`Shadowing`); captures are serialised
(:data:`CAPTURE_LOCK`).

What cannot be captured is refused where it happens (:class:`CaptureError`): reading a
tensor's values in Python (``.item()``, ``print``, ``bool(t)``) makes the step's ops depend
on data, which a replay would not see.
"""

from __future__ import annotations

import functools
import inspect
import sys
import threading
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

__all__ = [
    "CAPTURE_LOCK",
    "ENTRY",
    "MISSING",
    "NONE",
    "CaptureError",
    "Call",
    "Contents",
    "Elementwise",
    "GradTrack",
    "Identity",
    "Recorder",
    "Shadowing",
    "Trace",
    "Update",
    "capturing",
    "reads_again",
]

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


#: The state of a gradient that a capture left as it found it (see :class:`GradTrack`).
ENTRY = "entry"
#: The state of a gradient the step set to None.
NONE = "none"


@dataclass
class GradTrack:
    """What a capture saw of one tensor's ``.grad`` (a parameter's, a leaf's).

    ``entry`` is the gradient when the step first touched it (None or a tensor); ``needs``
    what a replay needs of it - ``"nothing"`` (the step dropped it before anything read it:
    ``zero_grad()``), ``"presence"`` (whether there is one decided what the step did: a
    backward that assigned it, an optimizer that skipped the parameter) or ``"identity"``
    (the step read or changed its storage: accumulated into it, zeroed it in place, updated
    with it); ``state`` the gradient at the end: :data:`ENTRY` (the entry, maybe changed in
    place), :data:`NONE`, or the tensor the step assigned (a backward's new gradient, a
    ``.grad =``)."""

    tensor: Tensor
    entry: Tensor | None
    needs: str = "nothing"
    state: Any = ENTRY

    def need(self, what: str) -> None:
        """Raise the need of the entry to ``what`` (``presence`` < ``identity``)."""
        if self.needs != "identity":
            self.needs = what


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
    #: id of a tensor -> what the step did with its .grad
    grads: dict[int, GradTrack] = field(default_factory=dict)
    #: Python calls to repeat at each replay, in order: ("step", optimizer, the gradient of
    #: each of its parameters when it stepped: a tensor or None) / ("schedule", s, None)
    python_calls: list[tuple[str, Any, Any]] = field(default_factory=list)
    #: optimizer -> its state signature when its step began
    optimizer_states: dict[int, tuple[Optimizer, tuple]] = field(default_factory=dict)
    #: whether an optimizer created state during the capture (a first step)
    created_state: bool = False
    #: (id of a module, attribute) -> (module, attribute, value): the attributes of modules
    #: the step read (the first read of each), by value or identity (see ``reads_again``)
    reads: dict[tuple[int, str], tuple[Module, str, Any]] = field(default_factory=dict)
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


#: Serialises captures (and the plans and code made from them) across threads: a capture
#: shadows class attributes for its duration.
CAPTURE_LOCK = threading.RLock()
_CAPTURING = threading.local()


def capturing() -> bool:
    """Whether this thread is inside a capture (a compiled function called there runs
    eagerly: its primitives belong to the outer capture)."""
    return getattr(_CAPTURING, "depth", 0) > 0


class Shadowing:
    """Attributes of classes and objects replaced while a context is open (``_patch``) and
    put back in reverse order when it closes (``_restore``; an attribute that was not the
    owner's own is removed again). Replacements made with :meth:`_patch_for_thread` act
    only in the thread that opened the context; other threads get the original."""

    def __init__(self) -> None:
        self._patches: list[tuple[Any, str, Any, bool]] = []
        self._thread = threading.get_ident()

    def _patch(self, owner: Any, name: str, replacement: Any) -> None:
        self._patches.append((owner, name, vars(owner).get(name), name in vars(owner)))
        setattr(owner, name, replacement)

    def _patch_for_thread(self, owner: Any, name: str, original: Callable,
                          replacement: Callable) -> None:  # fmt: skip
        """Shadow ``owner.name`` (``original``) by ``replacement`` in this thread only."""
        thread = self._thread

        @functools.wraps(original)
        def dispatch(*args: Any, **kwargs: Any) -> Any:
            if threading.get_ident() == thread:
                return replacement(*args, **kwargs)
            return original(*args, **kwargs)

        self._patch(owner, name, dispatch)

    def _shadow_primitives(self, backend: Any, wrap: Callable[[str, Callable], Callable]) -> None:
        """Replace each primitive of ``backend`` (its public methods but the queries) by
        ``wrap(name, method)``, in this thread."""
        for name in dir(type(backend)):
            if name.startswith("_") or name in QUERIES:
                continue
            method = getattr(backend, name)
            if callable(method):
                self._patch_for_thread(backend, name, method, wrap(name, method))

    def _record_module_reads(self, reads: dict[tuple[int, str], tuple[Module, str, Any]]) -> None:
        """Note in ``reads``, (id of the module, attribute) -> (module, attribute,
        :func:`reads_again` of the value), the first read in this thread of each attribute a
        module holds itself (its ``__dict__``: numbers, flags, hooks, registries) or in its
        registries (a parameter, buffer or submodule by name) - not its class's methods.

        Modules the step itself makes (``self.layers[1:]`` is a new ``ModuleList`` at every
        call) are not read: they are made again from what is read of the others, and their
        registries, read while their ``__init__`` filled them, never looked the same again,
        so that such a step was captured at every call and never replayed."""
        thread = self._thread
        get = object.__getattribute__
        registry = Module.__getattr__
        made: dict[int, Module] = {}  # (held, so that no id is reused during the capture)
        initialise = Module.__init__

        def make(module: Module, *args: Any, **kwargs: Any) -> None:
            made[id(module)] = module
            initialise(module, *args, **kwargs)

        def read(module: Module, name: str) -> Any:
            value = get(module, name)
            if threading.get_ident() == thread and name[:2] != "__":
                key = (id(module), name)
                if key not in reads and key[0] not in made and name in get(module, "__dict__"):
                    reads[key] = (module, name, reads_again(value))
            return value

        def read_registry(module: Module, name: str) -> Any:
            key = (id(module), name)
            try:
                value = registry(module, name)
            except AttributeError:  # (``hasattr`` said no: that is read too)
                if key[0] not in made:
                    reads.setdefault(key, (module, name, Identity(MISSING)))
                raise
            if key[0] not in made:
                reads.setdefault(key, (module, name, reads_again(value)))
            return value

        self._patch_for_thread(Module, "__init__", initialise, make)
        self._patch(Module, "__getattribute__", read)
        self._patch_for_thread(Module, "__getattr__", registry, read_registry)

    def _restore(self) -> None:
        for owner, name, previous, had in reversed(self._patches):
            if had:
                setattr(owner, name, previous)
            else:
                delattr(owner, name)
        self._patches.clear()


class _ThreadView:
    """A cache dict seen as an empty one of its own by one thread (a capture's: it plans
    afresh, without the fast paths that call compiled loops behind the backend's back),
    and as itself by the others."""

    def __init__(self, original: dict, thread: int) -> None:
        self._original, self._thread, self._own = original, thread, {}

    def _target(self) -> dict:
        return self._own if threading.get_ident() == self._thread else self._original

    def get(self, key: Any, default: Any = None) -> Any:
        return self._target().get(key, default)

    def __getitem__(self, key: Any) -> Any:
        return self._target()[key]

    def __setitem__(self, key: Any, value: Any) -> None:
        self._target()[key] = value

    def __contains__(self, key: Any) -> bool:
        return key in self._target()

    def __len__(self) -> int:
        return len(self._target())

    def clear(self) -> None:
        self._target().clear()


#: Values of module attributes read by value (others are read by identity).
PLAIN = (bool, int, float, complex, str, bytes, type(None))


class _Missing:
    """The value of an attribute that is not there (``hasattr`` said no)."""

    def __repr__(self) -> str:
        return "absent"


MISSING = _Missing()


class Recorder(Shadowing):
    """A context manager that records a run on ``backend`` into :attr:`trace`, from the
    thread that enters it (other threads run as they always run).

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
        #: inside zero_grad(set_to_none=True): reading a gradient there decides nothing
        self._clearing = False
        super().__init__()

    # -- installing and removing the recording methods ----------------------------------

    def __enter__(self) -> Recorder:
        self._thread = threading.get_ident()
        _CAPTURING.depth = getattr(_CAPTURING, "depth", 0) + 1
        try:
            self._shadow()
        except BaseException:
            self.__exit__()
            raise
        return self

    def _shadow(self) -> None:
        """Install the recording methods (see the module's docstring)."""
        backend = self.backend
        self._shadow_primitives(backend, self._recording)
        self._patch_for_thread(backend, "_nary", backend._nary, self._recording_loop(backend._nary))
        if hasattr(backend, "_fused"):
            self._patch_for_thread(backend, "_fused", backend._fused,
                                   self._recording_loop(backend._fused, fused=True))  # fmt: skip
        self._patch_for_thread(backend, "_bind", backend._bind, lambda *args, **params: None)
        self._patch_for_thread(backend, "_bind_in_place", backend._bind_in_place,
                               lambda *args: None)  # fmt: skip
        direct_loops = sys.modules.get("pylucid.backends.numba_backend.elementwise")
        if getattr(direct_loops, "direct", None) is not None:  # (loops called behind _nary)
            self._patch_for_thread(direct_loops, "direct", direct_loops.direct, lambda *a: None)
        # (plans made before bind compiled loops the recording would not see: a capture
        # plans afresh, with _bind off, and the eager plans come back after it)
        for name in ("_PLANS", "_SUMS_TO", "_GRAD_RUNS"):
            self._patch(op_base, name, _ThreadView(getattr(op_base, name), self._thread))
        self._patch(Tensor, "grad", self._recording_grad_property(Tensor.grad))
        recorders = (  # (owner, attribute, the wrapper that records its calls)
            (UpdateKernel, "__call__", self._recording_update),
            (ElementwiseKernel, "run", self._recording_run),
            (Tensor, "_accumulate_grad", self._recording_grad),
            (Optimizer, "_run_step", self._recording_step),
            (Optimizer, "zero_grad", self._recording_zero_grad),
            (Module, "zero_grad", self._recording_zero_grad),
            (LRScheduler, "step", self._recording_schedule),
            (Module, "__call__", self._recording_module),
            (factories, "_random", self._recording_draw),
            (engine, "add_gradients", self._recording_gradient_sum),
        )
        for owner, name, recording in recorders:
            original = getattr(owner, name)
            self._patch_for_thread(owner, name, original, recording(original))
        self._record_module_reads(self.trace.reads)

    def __exit__(self, *exc: object) -> None:
        self._restore()
        _CAPTURING.depth -= 1

    # -- the recording methods ----------------------------------------------------------
    def _recording(self, name: str, method: Callable) -> Callable:
        if name == "to_numpy":
            return self._host_read(method, _READS_VALUES)
        if name == "from_numpy":  # (random draws record their own from_numpy: as a draw)
            return self._recording_from_numpy(method)
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

    def _recording_from_numpy(self, method: Callable) -> Callable:
        """``from_numpy``: an array of pylucid's made from Python numbers alone (``arange``,
        ``linspace``, ``eye``, the mask of ``tril``/``triu``) is recorded as a constant of
        the trace; any other (``pl.tensor(data)``, a batch) is a read of Python data."""
        trace, noted = self.trace, self._host_read(method, _MAKES_FROM_DATA)

        def record(*args: Any) -> Any:
            if self._depth or not _made_from_numbers():
                return noted(*args)
            result = method(*args)
            call = Call("from_numpy", (np.array(args[0], copy=True), *args[1:]),
                        _tokens(trace, result))  # fmt: skip
            trace.producers[call.result.index] = len(trace.calls)
            trace.calls.append(call)
            return result

        return record

    def _host_read(self, method: Callable, what: str) -> Callable:
        def note(*args: Any) -> Any:
            # (noted, not raised here: an op building an error message reads values too,
            # and its own error must come out)
            if self.trace.host_read is None and not self._depth:
                self.trace.host_read = (what, user_site())
            return method(*args)

        return note

    # -- gradients ------------------------------------------------------------------------
    def _track(self, tensor: Tensor) -> GradTrack:
        """The :class:`GradTrack` of ``tensor``'s gradient, begun at its first touch."""
        track = self.trace.grads.get(id(tensor))
        if track is None:
            track = self.trace.grads[id(tensor)] = GradTrack(tensor, tensor._grad)
        return track

    def _recording_grad(self, accumulate: Callable) -> Callable:
        trace = self.trace

        def record(tensor: Tensor, grad: Any, owned: bool = False) -> None:
            track = self._track(tensor)
            if track.state is ENTRY:  # (None: assigned; else added into in place)
                track.need("identity" if track.entry is not None else "presence")
            if tensor._grad is not None:
                trace.owners.setdefault(trace.ref(tensor._grad._storage).index, tensor._grad)
            accumulate(tensor, grad, owned)
            trace.owners.setdefault(trace.ref(tensor._storage).index, tensor)
            if not (track.state is ENTRY and tensor._grad is track.entry):
                track.state = tensor._grad
            trace.ref(tensor._grad._storage)

        return record

    def _recording_grad_property(self, prop: property) -> property:
        thread = self._thread

        def get_grad(tensor: Tensor) -> Tensor | None:
            if threading.get_ident() == thread:
                track = self._track(tensor)
                if track.state is ENTRY and self._clearing:
                    if track.entry is None:  # (skipped: as good as set to None)
                        track.state = NONE
                elif track.state is ENTRY:
                    track.need("identity" if track.entry is not None else "presence")
            return prop.fget(tensor)

        def set_grad(tensor: Tensor, value: Tensor | None) -> None:
            if threading.get_ident() == thread:
                track = self._track(tensor)
                if value is None:
                    track.state = NONE
                elif value is not tensor._grad:
                    track.state = value
                    self.trace.ref(value._storage)
            prop.fset(tensor, value)

        return property(get_grad, set_grad, None, prop.__doc__)

    def _recording_zero_grad(self, zero_grad: Callable) -> Callable:
        """``zero_grad``: with ``set_to_none`` its reads of the gradients only skip those
        that are None already - every gradient ends None whatever it was."""

        def record(owner: Any, set_to_none: bool = True) -> None:
            self._clearing = set_to_none
            try:
                zero_grad(owner, set_to_none)
            finally:
                self._clearing = False

        return record

    # -- Python state ---------------------------------------------------------------------
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
            gradients = [(p, p._grad) for g in optimizer.param_groups for p in g["params"]]
            trace.python_calls.append(("step", optimizer, gradients))
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
            trace.python_calls.append(("schedule", scheduler, None))
            return step(scheduler)

        return record

    def _recording_module(self, call: Callable) -> Callable:
        trace = self.trace

        def record(module: Module, *args: Any, **kwargs: Any) -> Any:
            registries = object.__getattribute__(module, "__dict__")
            for registry in ("_parameters", "_buffers"):
                for tensor in registries[registry].values():
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


@functools.cache
def _number_factories() -> frozenset:
    """The code of pylucid's functions whose arrays depend on Python numbers only (sizes,
    bounds, a diagonal), made in NumPy and handed to ``from_numpy``: the factories, the
    masks of ``tril``/``triu`` and the causal mask of ``scaled_dot_product_attention``
    (``nn.functional._constant_mask``, where it is defined)."""
    from pylucid.nn import functional
    from pylucid.ops import selection

    functions = [factories.arange, factories.linspace, factories.eye, selection._triangle]
    functions += [f for f in (getattr(functional, "_constant_mask", None),) if f is not None]
    return frozenset(inspect.unwrap(f).__code__ for f in functions)


def _made_from_numbers() -> bool:
    """Whether the ``from_numpy`` being called was called by one of
    :func:`_number_factories` (looking up the stack through pylucid's frames)."""
    codes = _number_factories()
    frame = sys._getframe(2)
    while frame is not None and in_package(frame.f_code.co_filename):
        if frame.f_code in codes:
            return True
        frame = frame.f_back
    return False


class Identity:
    """A value compared by identity (a tensor, a module, a function, any object)."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Identity) and other.value is self.value

    def __hash__(self) -> int:
        return id(self.value)

    def __repr__(self) -> str:
        return f"<{type(self.value).__name__} at {id(self.value):#x}>"


class Contents:
    """A list's or dict's items, compared by :func:`reads_again` of each."""

    __slots__ = ("items",)

    def __init__(self, items: tuple) -> None:
        self.items = items

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Contents) and other.items == self.items

    def __hash__(self) -> int:
        return hash(self.items)

    def __repr__(self) -> str:
        return f"<{len(self.items)} items>"


def reads_again(value: Any) -> Any:
    """What a guard compares of a value a step read: plain Python values (numbers, strings,
    None, tuples of them) by value, lists and dicts by their items (a module's registry of
    parameters, its hooks), anything else by identity."""
    if isinstance(value, PLAIN):
        return value
    if type(value) is tuple and all(isinstance(v, PLAIN) for v in value):
        return value
    if isinstance(value, dict):
        return Contents(tuple((k, reads_again(v)) for k, v in value.items()))
    if isinstance(value, list):
        return Contents(tuple(reads_again(v) for v in value))
    return Identity(value)


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
