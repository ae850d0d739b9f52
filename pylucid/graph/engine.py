"""The backward engine: order the graph, run each node once, route gradients to leaves.

The order is Kahn's algorithm over the nodes reachable from the roots (iterative, so a chain
of any length works without recursion): a node runs once every node that feeds it a gradient
has run, with the sum of those gradients. Gradients are backend storage, or Tensors recorded
by differentiable ops when ``create_graph`` asks for a graph of the backward pass itself.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from pylucid import memory
from pylucid.graph.anomaly import check_gradients, is_anomaly_enabled
from pylucid.graph.grad_mode import swap_grad_mode
from pylucid.graph.node import AccumulateGrad, Node

__all__ = ["backward", "grad", "run_backward"]


def add_gradients(a: Any, b: Any) -> Any:
    """The sum of two gradients of one node (storages, or tensors under ``create_graph``):
    one function, so that ``pl.compile``'s capture can record it as the backend's add.

    Two host arrays of one shape and dtype are summed into a pooled array
    (:func:`pylucid.memory.empty`): NumPy's own would be fresh pages, a fault per 4 KiB on
    first touch - 531 faults a step of the benchmark's CNN."""
    if type(a) is np.ndarray and type(b) is np.ndarray and a.shape == b.shape:
        if a.dtype == b.dtype:
            return np.add(a, b, out=memory.empty(a.shape, a.dtype))
    return a + b


def _dependencies(roots: Sequence[Node]) -> dict[Node, int]:
    """For every node reachable from ``roots``: how many edges point to it (0 for a root
    that no edge reaches). A node is in the dict once it is seen, so the dict is also the
    set of the nodes seen: one lookup an edge."""
    counts: dict[Node, int] = dict.fromkeys(roots, 0)
    stack = list(counts)
    while stack:
        for child in stack.pop().next_edges:
            if child is None:
                continue
            count = counts.get(child)
            if count is None:
                counts[child] = 1
                stack.append(child)
            else:
                counts[child] = count + 1
    return counts


def _leading_to(roots: Sequence[Node], targets: set[Node]) -> set[Node]:
    """The nodes reachable from ``roots`` from which a node of ``targets`` is reachable."""
    counts = _dependencies(roots)
    ready = [n for n in roots if counts.get(n, 0) == 0]
    topological = []
    while ready:  # a topological order, so children are decided before their parents
        node = ready.pop()
        topological.append(node)
        for child in node.next_edges:
            if child is not None:
                counts[child] -= 1
                if counts[child] == 0:
                    ready.append(child)
    needed = set()
    for node in reversed(topological):
        if node in targets or any(c in needed for c in node.next_edges if c is not None):
            needed.add(node)
    return needed


def run_backward(
    roots: Sequence[tuple[Node, Any]],
    retain_graph: bool = False,
    create_graph: bool = False,
    capture: Sequence[Node] | None = None,
) -> dict[Node, Any]:
    """Propagate gradients from ``roots`` (pairs of node and the gradient of its output).

    Parameters
    ----------
    roots : sequence of (Node, gradient)
    retain_graph : bool
        Keep the saved values; otherwise each node frees them once it has run.
    create_graph : bool
        Gradients are Tensors computed by recorded ops (differentiable).
    capture : sequence of Node, optional
        Return the gradient arriving at each of these nodes instead of accumulating into
        leaves; only the nodes leading to them run.

    Returns
    -------
    dict
        The captured gradients by node (empty without ``capture``).
    """
    pending: dict[Node, Any] = {}
    # Ownership of gradient storages is decided here, and only here: a storage may become a
    # leaf's .grad without a copy unless it is in ``shared`` - a root's gradient (the
    # caller's), one routed to several places, or one a hook saw or returned (the hook may
    # keep it).
    shared = _SharedStorages()
    for node, g in roots:
        shared.add(g)
        pending[node] = add_gradients(pending[node], g) if node in pending else g
    dependencies = _dependencies(list(pending))
    targets = set(capture or ())
    needed = _leading_to(list(pending), targets) if capture is not None else None
    captured: dict[Node, Any] = {}
    ready = [node for node in pending if dependencies.get(node, 0) == 0]
    anomaly = is_anomaly_enabled()
    previous_mode = swap_grad_mode(create_graph)
    try:
        while ready:
            node = ready.pop()
            g = pending.pop(node, None)
            if g is not None and node.pre_hooks:
                shared.add(g)
                g = node.run_pre_hooks(g)
                shared.add(g)
            if targets and node in targets:
                captured[node] = g
            skip = g is None or (needed is not None and node not in needed)
            if isinstance(node, AccumulateGrad):
                if not skip and capture is None:
                    node.accumulate(g, owned=create_graph or g not in shared)
                continue
            if skip:
                outputs = (None,) * len(node.next_edges)
            else:
                outputs = node.backward_graph(g) if create_graph else node.backward(g)
                if anomaly:
                    check_gradients(node, outputs)
                if not retain_graph:
                    node.release()
                if len(outputs) == 1:  # (the common case, without a call: a chain's nodes)
                    if outputs[0] is g:
                        shared.add(g)
                elif _routes_one_storage_twice(g, outputs):
                    for o in outputs:
                        if o is not None:
                            shared.add(o)
            for child, child_grad in zip(node.next_edges, outputs):
                if child is None:
                    continue
                if child_grad is not None:  # (a pending gradient is never None)
                    previous = pending.get(child)
                    pending[child] = (
                        child_grad if previous is None else add_gradients(previous, child_grad)
                    )
                remaining = dependencies[child] - 1
                if remaining:
                    dependencies[child] = remaining
                else:  # (no edge is left to decrement it: the count is not stored back)
                    ready.append(child)
    finally:
        swap_grad_mode(previous_mode)
    return captured


class _SharedStorages:
    """The gradient storages of one backward pass that no receiver owns, by identity, without
    keeping them alive: a set of ids alone matched new arrays that reused a freed one's
    address (CPython reuses them), so that 36 of the 47 leaf gradients of a GPT step were
    copied for nothing (4.4 ms a step). A storage without weak references (another backend's
    type) is held until the pass ends."""

    __slots__ = ("_refs",)

    def __init__(self) -> None:
        self._refs: dict[int, Callable[[], Any]] = {}

    def add(self, storage: Any) -> None:
        try:
            ref = weakref.ref(storage)
        except TypeError:
            ref = functools.partial(_identity, storage)
        self._refs[id(storage)] = ref

    def __contains__(self, storage: Any) -> bool:
        ref = self._refs.get(id(storage))
        return ref is not None and ref() is storage


def _identity(value: Any) -> Any:
    return value


def _routes_one_storage_twice(g: Any, outputs: tuple[Any, ...]) -> bool:
    """Whether a node passes its incoming gradient ``g`` on, or one storage to two inputs
    (add's ``(g, g)``): then no receiver owns it."""
    if len(outputs) == 1:
        return outputs[0] is g
    if len(outputs) == 2:
        a, b = outputs
        return a is not None and (a is b or a is g) or b is not None and b is g
    routed = [id(o) for o in outputs if o is not None]
    return len(set(routed)) < len(routed) or id(g) in routed


def _seed(tensor: Any, gradient: Any, index: int, create_graph: bool) -> Any:
    """The gradient that starts backward from ``tensor``: storage, or a Tensor in graph mode."""
    if gradient is None:
        if tensor.numel() != 1:
            raise RuntimeError(
                f"backward: a gradient can be created implicitly only for a tensor with one "
                f"element, but tensors[{index}] has shape {tensor.shape}; pass gradient= "
                f"(a tensor of that shape)"
            )
        seed = tensor._backend.full(tensor.shape, 1.0, tensor.dtype)
        return tensor._wrap_grad(seed) if create_graph else seed
    if not hasattr(gradient, "_storage"):
        raise TypeError(
            f"backward: the gradient for tensors[{index}] must be a Tensor of shape "
            f"{tensor.shape}, got {type(gradient).__name__}"
        )
    if gradient._shape != tensor._shape:
        raise RuntimeError(
            f"backward: gradient of shape {gradient.shape} does not match "
            f"tensors[{index}] of shape {tensor.shape}"
        )
    if gradient._backend is not tensor._backend:
        raise RuntimeError(
            f"backward: gradient is on '{gradient.device}' but tensors[{index}] is on "
            f"'{tensor.device}'"
        )
    if create_graph:
        return gradient if gradient.dtype is tensor.dtype else gradient.to(tensor.dtype)
    return tensor._backend.cast(gradient._storage, tensor.dtype)


def _as_list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, (list, tuple)) else [value]


def _roots(
    op: str, tensors: list[Any], grad_tensors: Any, create_graph: bool
) -> list[tuple[Node, Any]]:
    if grad_tensors is None:
        grad_tensors = [None] * len(tensors)
    grad_tensors = _as_list(grad_tensors)
    if len(grad_tensors) != len(tensors):
        raise RuntimeError(f"{op}: got {len(grad_tensors)} gradients for {len(tensors)} tensors")
    roots = []
    for index, (tensor, gradient) in enumerate(zip(tensors, grad_tensors)):
        if not tensor.requires_grad:
            raise RuntimeError(
                f"{op}: tensors[{index}] does not require grad and has no grad_fn "
                f"(was it computed under no_grad, or from tensors without requires_grad?)"
            )
        roots.append((tensor._grad_edge(), _seed(tensor, gradient, index, create_graph)))
    return roots


def backward(
    tensors: Any | Sequence[Any],
    grad_tensors: Any | Sequence[Any] | None = None,
    retain_graph: bool | None = None,
    create_graph: bool = False,
) -> None:
    """Accumulate into the ``.grad`` of every leaf the sum of gradients of ``tensors``.

    Parameters
    ----------
    tensors : Tensor or sequence of Tensor
        The outputs to differentiate.
    grad_tensors : Tensor, sequence of (Tensor or None), or None
        The gradient of some loss with respect to each output; None for a one-element output
        means 1.
    retain_graph : bool, optional
        Keep the saved values so that backward can run through the graph again (default:
        ``create_graph``).
    create_graph : bool
        Record the backward pass, so that the gradients are differentiable (higher-order
        gradients); the leaves' ``.grad`` then carry a graph.

    Raises
    ------
    RuntimeError
        If an output does not require grad, a gradient is missing for a non-scalar output,
        or a gradient's shape or device does not match its output.
    """
    roots = _roots("backward", _as_list(tensors), grad_tensors, create_graph)
    retain = create_graph if retain_graph is None else retain_graph
    run_backward(roots, retain_graph=retain, create_graph=create_graph)


def grad(
    outputs: Any | Sequence[Any],
    inputs: Any | Sequence[Any],
    grad_outputs: Any | Sequence[Any] | None = None,
    retain_graph: bool | None = None,
    create_graph: bool = False,
    allow_unused: bool = False,
) -> tuple[Any, ...]:
    """The gradients of ``outputs`` with respect to ``inputs``, without touching ``.grad``.

    Parameters
    ----------
    outputs, inputs : Tensor or sequence of Tensor
    grad_outputs : Tensor, sequence of (Tensor or None), or None
        As ``grad_tensors`` of :func:`backward`.
    retain_graph : bool, optional
        Default: ``create_graph``.
    create_graph : bool
        Make the returned gradients differentiable.
    allow_unused : bool
        Return None for an input the outputs do not depend on, instead of raising.

    Returns
    -------
    tuple of (Tensor or None)
        One gradient per input.
    """
    inputs = _as_list(inputs)
    for index, x in enumerate(inputs):
        if not x.requires_grad:
            raise RuntimeError(f"grad: inputs[{index}] does not require grad")
    roots = _roots("grad", _as_list(outputs), grad_outputs, create_graph)
    edges = [x._grad_edge() for x in inputs]
    retain = create_graph if retain_graph is None else retain_graph
    captured = run_backward(roots, retain, create_graph, capture=edges)
    results = []
    for index, (x, edge) in enumerate(zip(inputs, edges)):
        g = captured.get(edge)
        if g is None and not allow_unused:
            raise RuntimeError(
                f"grad: inputs[{index}] (shape {x.shape}) was not used to compute the outputs;"
                f" pass allow_unused=True to get None for it"
            )
        if g is None:
            results.append(None)
        else:
            results.append(g if create_graph else x._wrap_grad(g))
    return tuple(results)
