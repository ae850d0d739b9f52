"""Graph nodes: the backward functions that ops record, and AccumulateGrad for leaves.

A node knows its edges (the nodes of its inputs) and how to turn the gradient of its output
into gradients of its inputs; it knows no op by name. Op nodes subclass :class:`Node` in
:mod:`pylucid.ops.base`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = [
    "AccumulateGrad",
    "FreedGraphError",
    "InplaceModifiedError",
    "Node",
    "RemovableHandle",
    "NOTHING_SAVED",
    "SavedValues",
]


class FreedGraphError(RuntimeError):
    """Backward reached a node whose saved values were freed by an earlier backward."""


class InplaceModifiedError(RuntimeError):
    """A value a node saved for backward was modified in place after it was saved."""


class RemovableHandle:
    """Returned by hook registrations: :meth:`remove` unregisters the hook."""

    def __init__(self, hooks: list[Callable[..., Any]], hook: Callable[..., Any]) -> None:
        self._hooks, self._hook = hooks, hook

    def remove(self) -> None:
        """Unregister the hook (a second call does nothing)."""
        if self._hook in self._hooks:
            self._hooks.remove(self._hook)


class SavedValues:
    """The values a node saved for backward, by name; freed after backward.

    Each value is backend storage; an input's :class:`~pylucid.tensor.Tensor` is kept beside
    it with its version at save time, so that :meth:`tensor` can give it back for
    differentiable gradient formulas and every read can check that it was not modified in
    place since. Reading after :meth:`release` raises :class:`FreedGraphError` naming the
    node.

    The fields are parallel sequences indexed like ``names`` (one or two entries, as a
    node's schema names them): every recorded node makes one, so it is a handful of
    tuples rather than dicts.
    """

    __slots__ = ("_owner", "_names", "_values", "_tensors", "_counters", "_versions")

    def __init__(
        self,
        owner: str,
        names: tuple[str, ...],
        values: list[Any],
        tensors: tuple[Any, ...],
        counters: tuple[Any, ...],
        versions: tuple[int, ...],
    ) -> None:
        """``values``: the storages, one per name; ``tensors``: the input Tensor of each
        (None for the op's result); ``counters``: the version counter of each value's
        memory, and ``versions`` its value when saved."""
        self._owner = owner
        self._names = names
        self._values: list[Any] | None = values
        self._tensors = tensors
        self._counters = counters
        self._versions = versions

    def _index(self, name: str) -> int:
        if self._values is None:
            raise FreedGraphError(
                f"{self._owner}: trying to backward through the graph a second time, but its "
                f"saved values were freed after the first backward; pass retain_graph=True to "
                f"the first backward() to keep them"
            )
        try:
            index = self._names.index(name)
        except ValueError:
            raise AttributeError(f"{self._owner} saved no value named {name!r}") from None
        counter, saved_version = self._counters[index], self._versions[index]
        if counter.value != saved_version:
            shape = getattr(self._values[index], "shape", "?")
            raise InplaceModifiedError(
                f"{self._owner}: the tensor it saved as {name!r} (shape {tuple(shape)}) was "
                f"modified by an in-place operation after the forward pass (version "
                f"{saved_version} when saved, now {counter.value}); compute the gradient "
                f"before modifying it, or modify a copy (x.clone())"
            )
        return index

    def __getitem__(self, name: str) -> Any:
        """The saved value ``name``, checked (not freed, not changed in place since). Three
        times cheaper than the attribute (``saved.x``), whose lookup fails before it reaches
        :meth:`__getattr__`: backward formulas use this.

        The checks of :meth:`_index` are spelled out for the common case, a value that is
        there and unchanged (one call fewer for every read of every backward); the others
        go to :meth:`_index`, which raises the error that says what is wrong."""
        values = self._values
        if values is not None:
            try:
                index = self._names.index(name)
            except ValueError:
                pass
            else:
                if self._counters[index].value == self._versions[index]:
                    return values[index]
        return values[self._index(name)]

    def __getattr__(self, name: str) -> Any:
        return self[name]

    def tensor(self, name: str) -> Any:
        """The saved input ``name`` as the Tensor the op was called with."""
        tensor = self._tensors[self._index(name)]
        if tensor is None:
            raise AttributeError(f"{self._owner}: {name!r} is its result, not an input")
        return tensor

    def holds(self, tensor: Any) -> bool:
        """Whether ``tensor`` is one of the saved (and not yet freed) inputs."""
        return self._values is not None and any(t is tensor for t in self._tensors)

    def rebind(self, old: Any, snapshot: Any) -> None:
        """Point every value saved from tensor ``old`` at ``snapshot`` (a copy of ``old``'s
        values before an in-place op overwrites them), keeping a cast copy that is already
        private to this node."""
        tensors, counters = list(self._tensors), list(self._counters)
        versions = list(self._versions)
        for index, tensor in enumerate(tensors):
            if tensor is old:
                if self._values[index] is old._storage:
                    self._values[index] = snapshot._storage
                tensors[index], counters[index] = snapshot, snapshot._version
                versions[index] = snapshot._version.value
        self._tensors, self._counters, self._versions = (
            tuple(tensors), tuple(counters), tuple(versions)
        )

    def release(self) -> None:
        """Drop the references to the saved values (:data:`NOTHING_SAVED` has none)."""
        if self._names:
            self._values = None
            self._tensors = ()

    @property
    def released(self) -> bool:
        """Whether :meth:`release` was called."""
        return self._values is None


#: The saved values of every node that saves none (one shared, empty and never released).
NOTHING_SAVED = SavedValues("a node that saves nothing", (), [], (), (), ())


class Node:
    """A backward function in the graph.

    Attributes
    ----------
    next_edges : tuple of (Node or None)
        For each input of the forward op, the node its gradient flows to (None where the
        input needs no gradient).
    pre_hooks : list of callable
        Hooks of the tensor this node produced (``Tensor.register_hook``): each is called
        with the gradient of that tensor before the node runs and may return a replacement.
    """

    next_edges: tuple[Node | None, ...] = ()
    #: No hooks until :meth:`hook_list` makes the node its own list (most nodes never do).
    pre_hooks: list[Callable[[Any], Any]] | tuple[()] = ()

    def __init__(self) -> None:
        self.pre_hooks = []

    def hook_list(self) -> list[Callable[[Any], Any]]:
        """The node's list of pre-hooks, to register one in (made on first use)."""
        if type(self.pre_hooks) is not list:
            self.pre_hooks = []
        return self.pre_hooks

    @property
    def name(self) -> str:
        """The node's class name, e.g. ``Log2Backward``."""
        return type(self).__name__

    def backward(self, grad: Any) -> tuple[Any, ...]:
        """Map the gradient of the output (backend storage) to one gradient per edge."""
        raise NotImplementedError(f"{self.name} does not define backward")

    def backward_graph(self, grad: Any) -> tuple[Any, ...]:
        """As :meth:`backward`, with Tensors and differentiable ops (``create_graph``)."""
        raise NotImplementedError(
            f"{self.name} has no differentiable gradient formula, so backward with "
            f"create_graph=True cannot differentiate through it"
        )

    def as_tensor(self, grad: Any) -> Any:
        """The gradient storage as a Tensor (for hooks)."""
        raise NotImplementedError(f"{self.name} cannot show its gradient as a tensor")

    def run_pre_hooks(self, grad: Any) -> Any:
        """Call the hooks on the incoming gradient (storage, or a Tensor in graph mode)."""
        as_tensor = not hasattr(grad, "_storage")
        value = self.as_tensor(grad) if as_tensor else grad
        for hook in list(self.pre_hooks):
            replaced = hook(value)
            if replaced is not None:
                if getattr(replaced, "shape", None) != value.shape:
                    raise RuntimeError(
                        f"a hook on the gradient into {self.name} returned "
                        f"{_described(replaced)}; it must return None or a tensor of the "
                        f"gradient's shape {value.shape}"
                    )
                value = replaced
        return value._storage if as_tensor else value

    def release(self) -> None:
        """Free what was saved for backward (called by the engine unless retain_graph)."""

    def __repr__(self) -> str:
        return f"<{self.name}>"


def _described(value: Any) -> str:
    shape = getattr(value, "shape", None)
    return f"a tensor of shape {shape}" if shape is not None else type(value).__name__


class AccumulateGrad(Node):
    """The sink of a leaf tensor: adds the incoming gradient into ``variable.grad``."""

    def __init__(self, variable: Any) -> None:
        super().__init__()
        self.variable = variable
        self.pre_hooks = variable._hooks  # (the variable's own list, or () until it has one)

    def as_tensor(self, grad: Any) -> Any:
        return self.variable._wrap_grad(grad)

    def accumulate(self, grad: Any, owned: bool) -> None:
        """Add ``grad`` into ``variable.grad``; ``owned``: no one else holds this storage, so
        it can become ``.grad`` without a copy."""
        self.variable._accumulate_grad(grad, owned)
