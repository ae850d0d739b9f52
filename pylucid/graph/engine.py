"""The backward engine: order the graph, run each node once, route gradients to leaves.

The order is Kahn's algorithm over the nodes reachable from the roots (iterative, so a chain
of any length works without recursion): a node runs once every node that feeds it a gradient
has run, with the sum of those gradients.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pylucid.graph.node import Node

__all__ = ["backward", "run_backward"]


def _dependencies(roots: Sequence[Node]) -> dict[Node, int]:
    """For every node reachable from ``roots``: how many edges point to it."""
    counts: dict[Node, int] = {}
    seen = set(roots)
    stack = list(seen)
    while stack:
        for child in stack.pop().next_edges:
            if child is None:
                continue
            counts[child] = counts.get(child, 0) + 1
            if child not in seen:
                seen.add(child)
                stack.append(child)
    return counts


def run_backward(roots: Sequence[tuple[Node, Any]], retain_graph: bool = False) -> None:
    """Propagate gradients from ``roots`` (pairs of node and the gradient of its output).

    Gradients are backend storage and are summed with ``+``. Unless ``retain_graph``, each
    node frees its saved values once it has run.
    """
    pending: dict[Node, Any] = {}
    for node, grad in roots:
        pending[node] = pending[node] + grad if node in pending else grad
    dependencies = _dependencies(list(pending))
    ready = [node for node in pending if dependencies.get(node, 0) == 0]
    while ready:
        node = ready.pop()
        grad = pending.pop(node, None)
        input_grads = node.backward(grad) if grad is not None else (None,) * len(node.next_edges)
        if not retain_graph:
            node.release()
        for child, child_grad in zip(node.next_edges, input_grads):
            if child is None:
                continue
            if child_grad is not None:
                pending[child] = pending[child] + child_grad if child in pending else child_grad
            dependencies[child] -= 1
            if dependencies[child] == 0:
                ready.append(child)


def _seed(tensor: Any, gradient: Any, index: int) -> Any:
    """The storage of the gradient that starts backward from ``tensor``."""
    if gradient is None:
        if tensor.numel() != 1:
            raise RuntimeError(
                f"backward: a gradient can be created implicitly only for a tensor with one "
                f"element, but tensors[{index}] has shape {tensor.shape}; pass gradient= "
                f"(a tensor of that shape)"
            )
        return tensor._backend.full(tensor.shape, 1.0, tensor.dtype)
    if tuple(gradient.shape) != tuple(tensor.shape):
        raise RuntimeError(
            f"backward: gradient of shape {tuple(gradient.shape)} does not match "
            f"tensors[{index}] of shape {tensor.shape}"
        )
    if gradient.device != tensor.device:
        raise RuntimeError(
            f"backward: gradient is on {gradient.device!r} but tensors[{index}] is on "
            f"{tensor.device!r}"
        )
    return tensor._backend.cast(gradient._storage, tensor.dtype)


def backward(
    tensors: Any | Sequence[Any],
    grad_tensors: Any | Sequence[Any] | None = None,
    retain_graph: bool = False,
) -> None:
    """Accumulate into the ``.grad`` of every leaf the sum of gradients of ``tensors``.

    Parameters
    ----------
    tensors : Tensor or sequence of Tensor
        The outputs to differentiate.
    grad_tensors : Tensor, sequence of (Tensor or None), or None
        The gradient of some loss with respect to each output; None for a one-element output
        means 1.
    retain_graph : bool
        Keep the saved values so that backward can run through the graph again.

    Raises
    ------
    RuntimeError
        If an output does not require grad, a gradient is missing for a non-scalar output,
        or a gradient's shape or device does not match its output.
    """
    if not isinstance(tensors, (list, tuple)):
        tensors = [tensors]
    if grad_tensors is None or not isinstance(grad_tensors, (list, tuple)):
        grad_tensors = [grad_tensors] * len(tensors)
    if len(grad_tensors) != len(tensors):
        raise RuntimeError(
            f"backward: got {len(grad_tensors)} gradients for {len(tensors)} tensors"
        )
    roots = []
    for index, (tensor, gradient) in enumerate(zip(tensors, grad_tensors)):
        if not tensor.requires_grad:
            raise RuntimeError(
                f"backward: tensors[{index}] does not require grad and has no grad_fn "
                f"(was it computed under no_grad, or from tensors without requires_grad?)"
            )
        roots.append((tensor._grad_edge(), _seed(tensor, gradient, index)))
    run_backward(roots, retain_graph=retain_graph)
