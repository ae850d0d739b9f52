"""A captured step ready to replay: its arrays, its compiled segments, its guards.

A replay copies the new inputs and fresh random draws into their places, repeats the
Python-side calls the step made (each optimizer's ``step`` runs its Python - step counts,
learning rates - with its update loops collecting their scalars instead of running; a
scheduler's ``step`` runs as it is), runs the segments (each one call of a compiled
function, through its entry point) and host calls in order, gives each leaf its gradient
and returns copies of the step's outputs.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from contextlib import contextmanager
from typing import Any

import numpy as np

from pylucid import factories
from pylucid.backends.numba_backend import optimizers as numba_optimizers
from pylucid.compiler.capture import Ref, Trace, optimizer_state_signature, same_kind
from pylucid.compiler.codegen import Segment, generate, load
from pylucid.compiler.plan import Plan, Step
from pylucid.compiler.tape import lower
from pylucid.dtypes import as_dtype
from pylucid.kernels.jit import entry_point
from pylucid.kernels.optimizers import UpdateKernel
from pylucid.ops import updates
from pylucid.tensor import Tensor

__all__ = ["Program", "Retrace", "flatten", "rebuild"]


class Retrace(Exception):  # noqa: N818  (a signal, not an error)
    """A replay found, before changing anything, that its trace does not fit this call."""


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


@contextmanager
def _collecting(into: list[tuple]) -> Any:
    """The backend's updates append ``(kernel, choices, scalars)`` to ``into`` instead of
    running, and the update ops skip their checks of the arrays (the guards found the
    capture's arrays, which passed them)."""
    run, check = numba_optimizers._run, updates._check

    def collect(kernel: UpdateKernel, choices: tuple, param: np.ndarray, grad: np.ndarray,
                states: tuple, scalars: tuple) -> tuple:  # fmt: skip
        into.append((kernel, tuple(choices), tuple([float(s) for s in scalars])))
        return (param, *states)

    numba_optimizers._run, updates._check = collect, lambda *args: None
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
                 outputs: list[Any], mode: str = "tape") -> None:  # fmt: skip
        self.backend = backend
        self.mode = mode
        self.text, entries = generate(plan) if mode == "fused" else ("", [])
        self.module = load(self.text) if mode == "fused" else None
        self.arenas = {
            dtype: np.zeros(max(size, 1), dtype) for dtype, size in plan.arena_sizes.items()
        }
        arrays: dict[int, np.ndarray] = {}
        for index, (dtype, offset, shape) in plan.places.items():
            end = offset + math.prod(shape)
            arrays[index] = self.arenas[dtype][offset:end].reshape(shape)
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
        self.updates = [(s.call.update.kernel, s.call.update.choices, len(s.call.update.scalars))
                        for s in plan.steps if s.kind == "update"]  # fmt: skip
        if mode == "fused":
            self.scalars = np.zeros(max(1, sum(n for _, _, n in self.updates)))
            self._scalar_setters = self._slices_of_scalars()
            runs = [self._runner(entry, plan) for entry in entries]
            first = entries and isinstance(entries[0], Segment) and entries[0].checks
            self.checks, self.runs = (runs[:1], runs[1:]) if first else ([], runs)
            self.segments, self.rows = sum(isinstance(e, Segment) for e in entries), 0
            self.host_calls = [e.call.name for e in entries if isinstance(e, Step)]
        else:
            lowered = lower(plan, arrays, self._host, Retrace)
            self.checks, self.runs = lowered.checks, lowered.runs
            self.segments, self.rows = lowered.tapes, lowered.rows
            self.host_calls = lowered.host_calls
            self._constants = lowered.constants  # (kept alive: the tapes hold their addresses)
            self._scalar_setters = lowered.scalar_setters
        self._guards(trace, plan)
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
                else self.scalars
                for a in entry.arguments
            )  # fmt: skip
            segment = entry_point(function, args)

            def run() -> None:
                if segment(*args):  # (a check found other targets: nothing changed yet)
                    raise Retrace

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

    def _guards(self, trace: Trace, plan: Plan) -> None:
        self.owned = [
            (trace.owners[v], trace.arrays[v], trace.owners[v]._requires_grad)
            for v, kind in plan.kinds.items()
            if kind == "owned" and v in trace.owners
        ]
        final: dict[int, tuple[Tensor, Tensor, bool]] = {}
        for leaf, _, assigned in trace.grads:
            first = final.get(id(leaf))
            final[id(leaf)] = (leaf, leaf._grad, first[2] if first else assigned)
        self.assigned, self.accumulated, self.grads, self.input_grads = [], [], [], []
        positions = {id(t): i for i, t in enumerate(trace.input_tensors)}
        for leaf, grad, assigned in final.values():
            if assigned:
                index = trace.index_of(grad._storage)
                tensor = Tensor._make(self.arrays[index], self.backend, leaf._dtype)
                if id(leaf) in positions:  # an argument: this call's tensor gets it
                    self.input_grads.append((positions[id(leaf)], tensor))
                    continue
                self.assigned.append((leaf, id(leaf) in trace.cleared))
                self.grads.append((leaf, tensor))
            else:
                self.accumulated.append((leaf, grad, grad._storage))
        self.optimizers = [(o, sig) for o, sig in trace.optimizer_states.values()]
        self.modules = [(m, m.training) for m in trace.modules.values()]

    # -- replaying ------------------------------------------------------------------------
    def holds(self) -> bool:
        """Whether the guards beyond the call signature hold: the same parameter arrays,
        gradients in the state the capture saw, optimizer state and training flags."""
        for tensor, array, requires_grad in self.owned:
            if tensor._storage is not array or tensor._requires_grad is not requires_grad:
                return False
        for leaf, cleared in self.assigned:
            if leaf._grad is not None and not cleared:
                return False
        for leaf, grad, storage in self.accumulated:
            if leaf._grad is not grad or grad._storage is not storage:
                return False
        for optimizer, signature in self.optimizers:
            if optimizer_state_signature(optimizer) != signature:
                return False
        return all(m.training is training for m, training in self.modules)

    def __call__(self, tensors: list[Tensor]) -> Any:
        for array, tensor in zip(self.inputs, tensors):
            np.copyto(array, tensor._storage)
        for check in self.checks:
            check()
        for array, (kind, shape, dtype, device, generator) in self.draws:
            drawn = factories._random(kind, shape, dtype, device, False, generator)
            np.copyto(array, drawn._storage)
        if self.python_calls:
            self._repeat_python_calls()
        for run in self.runs:
            run()
        for leaf, grad in self.grads:
            leaf._grad = grad
        for position, grad in self.input_grads:
            leaf = tensors[position]
            if leaf._grad is None:
                leaf._grad = grad
            else:  # (eager adds into a gradient the argument already has)
                leaf._grad = Tensor._make(leaf._grad._storage + grad._storage, self.backend,
                                          leaf._dtype)  # fmt: skip
        leaves = [
            Tensor._make(o[0].copy(), self.backend, o[1]) if isinstance(o, tuple) else o
            for o in self.outputs
        ]
        return rebuild(self.template, leaves)

    def _repeat_python_calls(self) -> None:
        """Run the optimizers' steps for their scalars (and schedulers' steps) - or, where
        the last run changed no Python state (SGD: no step counts) and nothing has changed
        it since (a learning rate), keep the scalars it collected."""
        before = _python_state(self.python_calls)
        if before is not None and before == self._unchanged_state:
            return
        collected: list[tuple] = []
        with _collecting(collected):
            for _, owner in self.python_calls:
                owner.step()
        if len(collected) != len(self.updates) or any(
            c[0] is not u[0] or c[1] != u[1] or len(c[2]) != u[2]
            for c, u in zip(collected, self.updates)
        ):
            raise RuntimeError(
                "pl.compile: the optimizer's updates differ from the captured step's (a "
                "hyperparameter that selects the update's form changed, or parameters lost "
                "their gradients); the parameters were not updated. Create the compiled "
                "function again"
            )
        for set_scalars, (_, _, scalars) in zip(self._scalar_setters, collected):
            set_scalars(scalars)
        self._unchanged_state = before if _python_state(self.python_calls) == before else None


def _python_state(calls: list[tuple[str, Any]]) -> tuple | None:
    """The Python values the optimizers' steps read (hyperparameters, step counts), or None
    where a scheduler steps too (it changes them at every call)."""
    state: tuple = ()
    for kind, owner in calls:
        if kind != "step":
            return None
        for group in owner.param_groups:
            state += (tuple((k, _frozen(v)) for k, v in group.items() if k != "params"),)
        for entries in owner.state.values():
            state += (tuple((k, v) for k, v in entries.items() if not isinstance(v, Tensor)),)
    return state


def _frozen(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value
