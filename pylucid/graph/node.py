"""Graph nodes: the backward functions that ops record, and AccumulateGrad for leaves.

A node knows its edges (the nodes of its inputs) and how to turn the gradient of its output
into gradients of its inputs; it knows no op by name. Op nodes subclass :class:`Node` in
:mod:`pylucid.ops.base`.
"""

from __future__ import annotations

from typing import Any

__all__ = ["Node", "AccumulateGrad", "SavedValues", "FreedGraphError"]


class FreedGraphError(RuntimeError):
    """Backward reached a node whose saved values were freed by an earlier backward."""


class SavedValues:
    """The values a node saved for backward, by name; freed after backward.

    Reading a value after :meth:`release` raises :class:`FreedGraphError` naming the node.
    """

    __slots__ = ("_owner", "_values")

    def __init__(self, owner: str, values: dict[str, Any]) -> None:
        self._owner = owner
        self._values: dict[str, Any] | None = values

    def __getattr__(self, name: str) -> Any:
        values = self._values
        if values is None:
            raise FreedGraphError(
                f"{self._owner}: trying to backward through the graph a second time, but its "
                f"saved values were freed after the first backward; pass retain_graph=True to "
                f"the first backward() to keep them"
            )
        try:
            return values[name]
        except KeyError:
            raise AttributeError(f"{self._owner} saved no value named {name!r}") from None

    def release(self) -> None:
        """Drop the references to the saved values."""
        self._values = None

    @property
    def released(self) -> bool:
        """Whether :meth:`release` was called."""
        return self._values is None


class Node:
    """A backward function in the graph.

    Attributes
    ----------
    next_edges : tuple of (Node or None)
        For each input of the forward op, the node its gradient flows to (None where the
        input needs no gradient).
    """

    next_edges: tuple[Node | None, ...] = ()

    @property
    def name(self) -> str:
        """The node's class name, e.g. ``Log2Backward``."""
        return type(self).__name__

    def backward(self, grad: Any) -> tuple[Any, ...]:
        """Map the gradient of the output to one gradient (or None) per edge."""
        raise NotImplementedError(f"{self.name} does not define backward")

    def release(self) -> None:
        """Free what was saved for backward (called by the engine unless retain_graph)."""

    def __repr__(self) -> str:
        return f"<{self.name}>"


class AccumulateGrad(Node):
    """The sink of a leaf tensor: adds the incoming gradient into ``variable.grad``."""

    def __init__(self, variable: Any) -> None:
        self.variable = variable

    def backward(self, grad: Any) -> tuple[Any, ...]:
        self.variable._accumulate_grad(grad)
        return ()
