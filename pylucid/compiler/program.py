"""A captured step ready to replay: its arrays, its compiled segments, its guards.

Its guards (:meth:`Program.failed_guard`) come first: what the capture read by identity
or by value is the same. A replay then copies the new inputs into their places and runs
the targets' checks, repeats the Python-side calls the step made (each optimizer's
``step`` runs its Python - step counts, learning rates and the other hyperparameters -
with its update loops collecting their scalars instead of running; a scheduler's ``step``
runs as it is), abandoning the replay (:class:`Retrace`) with that Python state put back
where an update takes another form; then it draws the random numbers, runs the segments
(each one call of a compiled function, through its entry point) and host calls in order,
leaves each gradient as the eager step leaves it and returns copies of the step's outputs.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from contextlib import contextmanager
from typing import Any

import numpy as np

from pylucid import factories
from pylucid.backends.numba_backend import optimizers as numba_optimizers
from pylucid.compiler.capture import (
    ENTRY,
    MISSING,
    NONE,
    PLAIN,
    CaptureError,
    Contents,
    GradTrack,
    Identity,
    Ref,
    Trace,
    optimizer_state_signature,
    reads_again,
    same_kind,
)
from pylucid.compiler.codegen import Segment, generate, load
from pylucid.compiler.plan import ALIGNMENT, Plan, Step
from pylucid.compiler.tape import INDEX_OUT_OF_RANGE, TARGETS_CHANGED, lower
from pylucid.dtypes import as_dtype
from pylucid.kernels import blas
from pylucid.kernels.jit import entry_point
from pylucid.kernels.optimizers import UpdateKernel
from pylucid.kernels.parallel import get_num_threads
from pylucid.ops import updates
from pylucid.tensor import Tensor

__all__ = [
    "Program",
    "Retrace",
    "aligned_arena",
    "describe_read",
    "flatten",
    "read_now",
    "rebuild",
    "same_read",
]


class Retrace(Exception):  # noqa: N818  (a signal, not an error)
    """A replay found, before changing anything, that its trace does not fit this call;
    ``reason`` says what changed."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def flatten(value: Any, leaves: list[Any]) -> Any:
    """``value`` (nested tuples, lists, dicts) with each leaf moved into ``leaves`` and
    replaced by its position; :func:`rebuild` undoes it."""
    if isinstance(value, (tuple, list)) and not hasattr(value, "_fields"):
        return type(value)(flatten(v, leaves) for v in value)
    if isinstance(value, dict):
        return {k: flatten(v, leaves) for k, v in value.items()}
    leaves.append(value)
    return _Leaf(len(leaves) - 1)


class _Leaf(int):
    """A leaf's position in a flattened structure."""


def rebuild(template: Any, leaves: list[Any]) -> Any:
    if isinstance(template, _Leaf):
        return leaves[template]
    if isinstance(template, (tuple, list)):
        return type(template)(rebuild(v, leaves) for v in template)
    if isinstance(template, dict):
        return {k: rebuild(v, leaves) for k, v in template.items()}
    return template


def _flat(value: Any) -> list[Any]:
    """The leaves of nested tuples and lists, in order."""
    if isinstance(value, (tuple, list)):
        return [leaf for v in value for leaf in _flat(v)]
    return [value]


#: One replay at a time runs optimizers' steps for their scalars (the shadowing of the
#: backend's update runner below is process-wide, its effect this thread's).
_COLLECT_LOCK = threading.Lock()


@contextmanager
def _collecting(into: list[tuple]) -> Any:
    """In this thread, the backend's updates append ``(kernel, choices, scalars)`` to
    ``into`` instead of running, and the update ops skip their checks of the arrays (the
    guards found the capture's arrays, which passed them); other threads update as always."""
    run, check = numba_optimizers._run, updates._check
    thread = threading.get_ident()

    def collect(kernel: UpdateKernel, choices: tuple, param: np.ndarray, grad: np.ndarray,
                states: tuple, scalars: tuple) -> tuple:  # fmt: skip
        if threading.get_ident() != thread:
            return run(kernel, choices, param, grad, states, scalars)
        into.append((kernel, tuple(choices), tuple([float(s) for s in scalars])))
        return (param, *states)

    def no_check(*args: Any) -> None:
        if threading.get_ident() != thread:
            check(*args)

    with _COLLECT_LOCK:
        numba_optimizers._run, updates._check = collect, no_check
        try:
            yield
        finally:
            numba_optimizers._run, updates._check = run, check


class Program:
    """The replay of one trace (see the module's docstring).

    Parameters
    ----------
    trace, plan
        The capture and its plan.
    backend
        The numba backend.
    template
        The structure of the step's result (:func:`flatten`); ``outputs`` its leaves, each a
        value number (a tensor), or the object itself (anything else).
    mode : {"tape", "fused"}
        How the plan runs: rows of a tape (:mod:`pylucid.compiler.tape`, nothing compiled
        per graph) or generated functions (:mod:`pylucid.compiler.codegen`).

    Attributes
    ----------
    text : str
        The generated source ("" for a tape).
    segments : int
        How many compiled functions (fused) or tapes a replay runs.
    rows : int
        How many loop kernels a replay's tapes call (0 when fused).
    host_calls : list of str
        The primitives a replay calls through the backend (the graph breaks), in order.
    """

    def __init__(self, trace: Trace, plan: Plan, backend: Any, template: Any,
                 outputs: list[Any], mode: str = "tape",
                 function_reads: list[tuple] = ()) -> None:  # fmt: skip
        self.backend = backend
        self.mode = mode
        self.text, entries = generate(plan) if mode == "fused" else ("", [])
        self.module = load(self.text) if mode == "fused" else None
        self.arenas = {
            dtype: aligned_arena(size, dtype) for dtype, size in plan.arena_sizes.items()
        }
        arrays: dict[int, np.ndarray] = {}
        for index, (dtype, offset, shape, transposed) in plan.places.items():
            end = offset + math.prod(shape)
            place = self.arenas[dtype][offset:end]
            arrays[index] = place.reshape(shape[::-1]).T if transposed else place.reshape(shape)
        for index, kind in plan.kinds.items():
            if kind == "owned":
                arrays[index] = trace.arrays[index]
            elif kind == "constant":
                arrays[index] = plan.constants[index]
        for index, (base, name, args) in plan.views.items():
            source = arrays[base]
            if name == "reshape":
                arrays[index] = source.reshape(args[0])
            elif name == "transpose":
                arrays[index] = np.transpose(source, args[0])
            else:
                arrays[index] = np.broadcast_to(source, args[0])
        self.arrays = arrays
        self.inputs = [arrays[v] for v in trace.inputs]
        self.draws = [(arrays[v], spec) for v, spec in trace.draws.items()]
        self.python_calls = list(trace.python_calls)
        self._unchanged_state: tuple | None = None
        #: the counts of targets this replay's checks found, where a loss divides by one
        self.targets = np.zeros(max(1, plan.count_slots))
        self.updates = [(s.call.update.kernel, s.call.update.choices, len(s.call.update.scalars))
                        for s in plan.steps if s.kind == "update"]  # fmt: skip
        self.products = any(step.kind == "matmul" for step in plan.steps)
        if mode == "fused":
            self.scalars = np.zeros(max(1, sum(n for _, _, n in self.updates)))
            self._scalar_setters = self._slices_of_scalars()
            runs = [self._runner(entry, plan) for entry in entries]
            first = entries and isinstance(entries[0], Segment) and entries[0].checks
            self.checks, self.runs = (runs[:1], runs[1:]) if first else ([], runs)
            self.segments, self.rows = sum(isinstance(e, Segment) for e in entries), 0
            self.host_calls = [e.call.name for e in entries if isinstance(e, Step)]
        else:
            lowered = lower(plan, arrays, self._host, Retrace, self.targets)
            self.checks, self.runs = lowered.checks, lowered.runs
            self.segments, self.rows = lowered.tapes, lowered.rows
            self.host_calls = lowered.host_calls
            self._constants = lowered.constants  # (kept alive: the tapes hold their addresses)
            self._scalar_setters = lowered.scalar_setters
        self._guards(trace, plan, function_reads)
        self._gradients(trace, plan)
        self.template = template
        self.outputs = [
            (arrays[o.index], as_dtype(trace.arrays[o.index].dtype)) if isinstance(o, Ref) else o
            for o in outputs
        ]

    # -- building -------------------------------------------------------------------------
    def _slices_of_scalars(self) -> list[Callable[[tuple[float, ...]], None]]:
        """Per update, the setter of its scalars' slice of :attr:`scalars` (the vector the
        generated functions read)."""
        setters, start = [], 0
        for _, _, count in self.updates:

            def set_slice(values: tuple, start: int = start, count: int = count) -> None:
                self.scalars[start : start + count] = values

            setters.append(set_slice)
            start += count
        return setters

    def _runner(self, entry: Segment | Step, plan: Plan) -> Callable[[], None]:
        if isinstance(entry, Segment):
            function = getattr(self.module, entry.name)
            args = tuple(
                self.arenas[a[1]] if a[0] == "arena" else self.arrays[a[1]] if a[0] == "value"
                else self.targets if a[0] == "counts" else blas.THREADS if a[0] == "threads"
                else self.scalars
                for a in entry.arguments
            )  # fmt: skip
            segment = entry_point(function, args)

            def run() -> None:
                code = segment(*args)
                if code:  # (a check found other targets, or a bad index: nothing changed yet)
                    raise Retrace(TARGETS_CHANGED if code == 1 else INDEX_OUT_OF_RANGE)

            return run
        return self._host(entry)

    def _host(self, step: Step) -> Callable[[], None]:
        """A call of the backend's primitive with the planned arrays; its result copied to
        the value's place. A result that is not an array (a check's answer) must be the one
        the capture saw: a step that depends on it cannot be replayed with another."""
        method = getattr(type(self.backend), step.call.name)
        backend, arrays = self.backend, self.arrays

        def resolve(token: Any) -> Any:
            if isinstance(token, Ref):
                return arrays[token.index]
            if isinstance(token, (list, tuple)):
                return same_kind(token, [resolve(t) for t in token])
            return token

        args = tuple(resolve(a) for a in step.call.args)
        expected = step.call.result
        # (position in the flattened result, its planned array) of each array it returns
        targets = [
            (position, arrays[ref.index]) for position, ref in enumerate(_flat(expected))
            if isinstance(ref, Ref) and ref.index in arrays
        ]  # fmt: skip
        name = step.call.name

        def run() -> None:
            result = method(backend, *args)
            if targets:
                produced = _flat(result)
                for position, target in targets:
                    if produced[position] is not target:
                        np.copyto(target, produced[position])
            elif not isinstance(expected, (Ref, list, tuple)) and result != expected:
                raise RuntimeError(
                    f"pl.compile: {name} gave {result!r} where the captured step saw "
                    f"{expected!r}; the step depends on it, so it cannot be replayed for these "
                    f"inputs (run it eagerly)"
                )

        return run

    def _guards(self, trace: Trace, plan: Plan, function_reads: list[tuple]) -> None:
        """The checks of :meth:`failed_guard`, from what the capture read: tensors by
        identity (their arrays, ``requires_grad``), optimizers' state, the attributes of
        modules (and the compiled function's closure and globals, ``function_reads``)."""
        self.owned = [
            (trace.owners[v], trace.arrays[v], trace.owners[v]._requires_grad)
            for v, kind in plan.kinds.items()
            if kind == "owned" and v in trace.owners
        ]
        self.optimizers = [(o, sig) for o, sig in trace.optimizer_states.values()]
        self.reads = [("attribute", module, name, value)
                      for module, name, value in trace.reads.values()]  # fmt: skip
        self.reads += function_reads
        #: id of a tensor -> its name where a module holds it ("Linear.weight")
        self._names = {
            id(value.value): f"{type(module).__name__}.{name}"
            for module, name, value in trace.reads.values()
            if isinstance(value, Identity) and isinstance(value.value, Tensor)
        }

    def _gradients(self, trace: Trace, plan: Plan) -> None:
        """What a replay does with each gradient the step touched: its guard (the entry
        gradient by identity, or its absence), and the gradient it leaves (None, the
        entry, or the trace's array); an argument's gradient is given or added to as the
        eager step does."""
        positions = {id(t): i for i, t in enumerate(trace.input_tensors)}
        self.grad_identity: list[tuple[Tensor, Tensor, Any]] = []
        self.grad_absent: list[Tensor] = []
        self.final_grads: list[tuple[Tensor, Tensor | None]] = []
        self.input_grads: list[tuple[int, np.ndarray | None]] = []
        for track in trace.grads.values():
            tensor = track.tensor
            if id(tensor) in positions:
                self._input_gradient(trace, track, positions[id(tensor)])
                continue
            index = trace.index_of(tensor._storage)
            if index is not None and (index in trace.producers or index in trace.draws):
                continue  # (a tensor the step made: nothing outside it holds it)
            if track.needs == "identity":
                self.grad_identity.append((tensor, track.entry, track.entry._storage))
            elif track.needs == "presence" and track.entry is None:
                self.grad_absent.append(tensor)
            if track.state is NONE:
                self.final_grads.append((tensor, None))
            elif track.state is not ENTRY:
                self.final_grads.append((tensor, self._tensor_of(trace, plan, track.state)))
        self._stood_in = list({id(p): p for kind, _, gradients in self.python_calls
                               if kind == "step" for p, _ in gradients}.values())  # fmt: skip

    def _input_gradient(self, trace: Trace, track: GradTrack, position: int) -> None:
        if track.entry is not None and track.needs != "nothing":
            raise CaptureError(
                f"pl.compile: argument {position} of the step (shape {track.tensor.shape}) "
                f"came with a .grad that the step reads or adds to; a replay would use the "
                f"captured call's. Set its .grad to None before calling the compiled step"
            )
        if track.state is NONE:
            self.input_grads.append((position, None))
        elif track.state is not ENTRY:
            self.input_grads.append((position, self.arrays[trace.index_of(track.state._storage)]))

    def _tensor_of(self, trace: Trace, plan: Plan, grad: Tensor) -> Tensor:
        """The tensor a replay leaves as a gradient the step assigned: the step's own array
        (overwritten by the next replay), or the tensor itself where it is not computed."""
        index = trace.index_of(grad._storage)
        if plan.kinds.get(index) == "owned":
            return grad
        return Tensor._make(self.arrays[index], self.backend, grad._dtype)

    # -- replaying ------------------------------------------------------------------------
    def failed_guard(self) -> str | None:
        """What no longer holds of what the trace read beyond the call signature (None:
        everything holds): the tensors it read by identity, their ``requires_grad``,
        gradients in the state it needs, optimizers' state, attributes of modules."""
        for tensor, array, requires_grad in self.owned:
            if tensor._storage is not array or tensor._requires_grad is not requires_grad:
                what = "new storage (.data =, .to())" if tensor._storage is not array else (
                    f"requires_grad={tensor._requires_grad}")  # fmt: skip
                return f"{self._name(tensor)}, which the step reads, has {what}"
        for leaf, entry, storage in self.grad_identity:
            if leaf._grad is not entry or entry._storage is not storage:
                return (f"the .grad of {self._name(leaf)} is not the gradient the captured "
                        f"step read or added to")  # fmt: skip
        for leaf in self.grad_absent:
            if leaf._grad is not None:
                return (f"{self._name(leaf)} has a .grad, where the captured step began "
                        f"without one (the step now adds to it)")  # fmt: skip
        for optimizer, signature in self.optimizers:
            if optimizer_state_signature(optimizer) != signature:
                return (f"{type(optimizer).__name__}'s parameters or state changed (a "
                        f"parameter added or replaced, state created or loaded)")  # fmt: skip
        for kind, owner, name, expected in self.reads:
            value = read_now(kind, owner, name)
            if not same_read(value, expected):
                where = describe_read(kind, owner, name)
                return f"{where} changed ({_show(expected)} -> {_show(value)})"
        return None

    def _name(self, tensor: Tensor) -> str:
        name = self._names.get(id(tensor))
        described = f"a tensor of shape {tuple(tensor.shape)} ({tensor.dtype.name})"
        return f"{name} ({described[2:]})" if name else described

    def __call__(self, tensors: list[Tensor]) -> Any:
        for array, tensor in zip(self.inputs, tensors):
            np.copyto(array, tensor._storage)
        for check in self.checks:
            check()
        if self.python_calls:
            self._repeat_python_calls()
        for array, (kind, shape, dtype, device, generator) in self.draws:
            drawn = factories._random(kind, shape, dtype, device, False, generator)
            np.copyto(array, drawn._storage)
        if self.products:  # (the threads a large product gets, as eager's now)
            blas.THREADS[1] = get_num_threads()
        for run in self.runs:
            run()
        for leaf, grad in self.final_grads:
            leaf._grad = grad
        for position, array in self.input_grads:
            leaf = tensors[position]
            if array is None:
                leaf._grad = None
            else:  # (eager's own: a copy where it has none, else added into it in place)
                leaf._accumulate_grad(array)
        leaves = [
            Tensor._make(o[0].copy(), self.backend, o[1]) if isinstance(o, tuple) else o
            for o in self.outputs
        ]
        return rebuild(self.template, leaves)

    def _repeat_python_calls(self) -> None:
        """Run the optimizers' steps for their scalars (and schedulers' steps), each
        parameter with a gradient where it had one at capture - or, where the last run
        changed no Python state (SGD: no step counts) and nothing has changed it since (a
        learning rate), keep the scalars it collected. Where an update takes another form
        (a hyperparameter that selects it changed), the Python state goes back to what it
        was and the replay is abandoned (:class:`Retrace`)."""
        before = _python_state(self.python_calls)
        if before is not None and before == self._unchanged_state:
            return
        saved = [_saved(owner) for owner in {id(o): o for _, o, _ in self.python_calls}.values()]
        gradients = [(p, p._grad) for p in self._stood_in]
        collected: list[tuple] = []
        ranges: list[tuple[Any, int, int]] = []
        owner: Any = None
        try:
            with _collecting(collected):
                for kind, owner, stand_ins in self.python_calls:
                    if kind == "step":
                        for p, grad in stand_ins:
                            p._grad = grad
                    start = len(collected)
                    owner.step()
                    ranges.append((owner, start, len(collected)))
        except Exception as error:  # (the eager step raises it after its forward and
            # backward: a capture runs it so, leaving eager's state)
            for restore in saved:
                restore()
            raise Retrace(
                f"{type(owner).__name__}.step raised {type(error).__name__}: {error}"
            ) from error
        except BaseException:
            for restore in saved:
                restore()
            raise
        finally:
            for p, grad in gradients:
                p._grad = grad
        changed = self._changed_update(collected, ranges)
        if changed is not None:
            for restore in saved:
                restore()
            raise Retrace(
                f"{changed}'s update took another form than at capture (a hyperparameter "
                f"that selects it changed: nesterov, amsgrad, centered, a momentum or weight "
                f"decay turned on or off, Adam's beta1 across 0.5)"
            )
        for set_scalars, (_, _, scalars) in zip(self._scalar_setters, collected):
            set_scalars(scalars)
        self._unchanged_state = before if _python_state(self.python_calls) == before else None

    def _changed_update(self, collected: list[tuple],
                        ranges: list[tuple[Any, int, int]]) -> str | None:  # fmt: skip
        """The name of the optimizer whose collected updates are not the captured ones
        (kernel, choices, number of scalars), or None."""
        if len(collected) == len(self.updates) and all(
            c[0] is u[0] and c[1] == u[1] and len(c[2]) == u[2]
            for c, u in zip(collected, self.updates)
        ):
            return None
        for owner, start, end in ranges:
            mine, captured = collected[start:end], self.updates[start:end]
            if len(mine) != len(captured) or any(
                c[0] is not u[0] or c[1] != u[1] for c, u in zip(mine, captured)
            ):
                return type(owner).__name__
        return type(ranges[-1][0]).__name__ if ranges else "an optimizer"




def aligned_arena(size: int, dtype: np.dtype) -> np.ndarray:
    """A zeroed flat array of ``max(size, 1)`` elements of ``dtype`` that starts at a multiple
    of :data:`~pylucid.compiler.plan.ALIGNMENT` bytes (the plan aligns the places in it)."""
    size, spare = max(size, 1), max(1, ALIGNMENT // dtype.itemsize)
    memory = np.zeros(size + spare, dtype)
    skip = (-memory.ctypes.data % ALIGNMENT) // dtype.itemsize
    return memory[skip : skip + size]


def same_read(value: Any, expected: Any) -> bool:
    """Whether ``value`` is what a guard saw (``expected``, from :func:`reads_again`)."""
    if type(expected) is Identity:
        return value is expected.value
    if value is expected:
        return True
    if type(expected) is Contents:
        return reads_again(value) == expected
    return type(value) is type(expected) and value == expected


def read_now(kind: str, owner: Any, name: str) -> Any:
    """The value a read of the step gives now: a module's ``attribute``, a closure's
    ``cell``, a ``global`` (a sentinel where it is gone)."""
    if kind == "attribute":
        return getattr(owner, name, MISSING)
    if kind == "cell":
        try:
            return owner.cell_contents
        except ValueError:  # (an empty cell: a variable not bound yet)
            return MISSING
    return owner.get(name, MISSING)


def describe_read(kind: str, owner: Any, name: str) -> str:
    """A read of the step in words: ``Dropout.p``, or a variable of the function."""
    if kind == "attribute":
        return f"{type(owner).__name__}.{name}"
    where = "closure" if kind == "cell" else "globals"
    return f"{name!r}, which the compiled function reads from its {where},"


def _show(value: Any) -> str:
    """A read value in a few words (a tensor by its shape, an object by its type)."""
    if isinstance(value, Identity):
        value = value.value
    if value is MISSING:
        return "absent"
    if isinstance(value, Tensor):
        return f"a tensor of shape {tuple(value.shape)} at {id(value):#x}"
    if not isinstance(value, PLAIN + (tuple, list, dict, Contents)):
        return f"a {type(value).__name__} at {id(value):#x}"
    shown = " ".join(repr(value).split())
    return shown if len(shown) <= 60 else shown[:57] + "..."


def _saved(owner: Any) -> Callable[[], None]:
    """A function that puts back the Python state of an optimizer (its attributes, groups'
    hyperparameters and per-parameter state entries) or a scheduler (its attributes and its
    optimizer's groups) as they are now, keeping each container's identity."""
    attributes = [(k, v, list(v) if type(v) is list else None) for k, v in vars(owner).items()]
    optimizer = owner if hasattr(owner, "param_groups") else getattr(owner, "optimizer", None)
    groups = [(g, dict(g)) for g in getattr(optimizer, "param_groups", ())]
    state = getattr(owner, "state", None) if owner is optimizer else None
    entries = [(p, s, dict(s)) for p, s in state.items()] if state is not None else []

    def restore() -> None:
        namespace = vars(owner)
        namespace.clear()
        for key, value, items in attributes:
            if items is not None:
                value[:] = items
            namespace[key] = value
        for group, values in groups:
            group.clear()
            group.update(values)
        if state is not None:
            state.clear()
            for p, s, values in entries:
                s.clear()
                s.update(values)
                state[p] = s

    return restore


def _python_state(calls: list[tuple[str, Any, Any]]) -> tuple | None:
    """The Python values the optimizers' steps read (hyperparameters, step counts), or None
    where a scheduler steps too (it changes them at every call)."""
    state: tuple = ()
    for kind, owner, _ in calls:
        if kind != "step":
            return None
        for group in owner.param_groups:
            state += (tuple((k, _frozen(v)) for k, v in group.items() if k != "params"),)
        for entries in owner.state.values():
            state += (tuple((k, v) for k, v in entries.items() if not isinstance(v, Tensor)),)
    return state


def _frozen(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value
