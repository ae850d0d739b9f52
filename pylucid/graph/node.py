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
    "VersionCounter",
    "current_version",
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


class VersionCounter:
    """How many in-place changes a tensor's memory has seen; shared by views of it, so a
    node that saved any of them notices a change through another. A tensor makes its
    counter on first use (most never need one: :attr:`pylucid.tensor.Tensor._version`)."""

    __slots__ = ("value",)

    def __init__(self, value: int = 0) -> None:
        self.value = value

    def bump(self) -> None:
        """Record one in-place change."""
        self.value += 1


def current_version(watched: Any) -> int:
    """The version now of what a saved value watches: a :class:`VersionCounter` (an op's
    result), or a Tensor (an input), whose counter may not exist yet (then it is 0)."""
    if type(watched) is VersionCounter:
        return watched.value
    counter = watched._counter
    return 0 if counter is None else counter.value


class SavedValues:
    """The values a node saved for backward, by name; freed after backward.

    Each value is backend storage; an input's :class:`~pylucid.tensor.Tensor` is kept beside
    it with its version at save time, so that :meth:`tensor` can give it back for
    differentiable gradient formulas and every read can check that it was not modified in
    place since. Reading after :meth:`release` raises :class:`FreedGraphError` naming the
    node.

    Every recorded node makes one, and the cyclic garbage collector runs a pass after every
    700 net new container objects (a chain of tiny ops left 7.7 per op, and with the
    collector off its forward and backward took a fifth less): so the values are one flat
    tuple, four entries per name (:meth:`entry`), and an input is watched through its Tensor
    (whose version counter is read at check time) rather than through a counter made for
    the occasion: 4.6 objects per op now.
    """

    __slots__ = ("_owner", "_names", "_entries")

    def __init__(self, owner: str, names: tuple[str, ...], entries: tuple[Any, ...]) -> None:
        """``entries``: for each of ``names``, in order, what :meth:`entry` gives."""
        self._owner = owner
        self._names = names
        self._entries: tuple[Any, ...] | None = entries

    @staticmethod
    def entry(value: Any, tensor: Any, result_counter: VersionCounter | None = None) -> tuple:
        """The four entries of one saved value: the storage ``value``; the input Tensor it
        came from (None for the op's result); what is watched for in-place changes (the
        Tensor, or the result's ``result_counter``); and its version now."""
        watched = tensor if result_counter is None else result_counter
        return value, tensor, watched, current_version(watched)

    def _index(self, name: str) -> int:
        """The position of ``name``'s entries, checked: not freed, not changed in place."""
        entries = self._entries
        if entries is None:
            raise FreedGraphError(
                f"{self._owner}: trying to backward through the graph a second time, but its "
                f"saved values were freed after the first backward; pass retain_graph=True to "
                f"the first backward() to keep them"
            )
        try:
            index = 4 * self._names.index(name)
        except ValueError:
            raise AttributeError(f"{self._owner} saved no value named {name!r}") from None
        now, saved_version = current_version(entries[index + 2]), entries[index + 3]
        if now != saved_version:
            shape = getattr(entries[index], "shape", "?")
            raise InplaceModifiedError(
                f"{self._owner}: the tensor it saved as {name!r} (shape {tuple(shape)}) was "
                f"modified by an in-place operation after the forward pass (version "
                f"{saved_version} when saved, now {now}); compute the gradient "
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
        entries = self._entries
        if entries is not None:
            try:
                index = 4 * self._names.index(name)
            except ValueError:
                pass
            else:
                watched = entries[index + 2]
                if type(watched) is VersionCounter:
                    now = watched.value
                else:
                    counter = watched._counter
                    now = 0 if counter is None else counter.value
                if now == entries[index + 3]:
                    return entries[index]
        return self._entries[self._index(name)]

    def __getattr__(self, name: str) -> Any:
        return self[name]

    def tensor(self, name: str) -> Any:
        """The saved input ``name`` as the Tensor the op was called with."""
        tensor = self._entries[self._index(name) + 1]
        if tensor is None:
            raise AttributeError(f"{self._owner}: {name!r} is its result, not an input")
        return tensor

    def holds(self, tensor: Any) -> bool:
        """Whether ``tensor`` is one of the saved (and not yet freed) inputs."""
        entries = self._entries
        return entries is not None and any(t is tensor for t in entries[1::4])

    def rebind(self, old: Any, snapshot: Any) -> None:
        """Point every value saved from tensor ``old`` at ``snapshot`` (a copy of ``old``'s
        values before an in-place op overwrites them), keeping a cast copy that is already
        private to this node."""
        entries = list(self._entries)
        for index in range(0, len(entries), 4):
            if entries[index + 1] is old:
                if entries[index] is old._storage:
                    entries[index] = snapshot._storage
                entries[index + 1 : index + 4] = self.entry(None, snapshot)[1:]
        self._entries = tuple(entries)

    def release(self) -> None:
        """Drop the references to the saved values (:data:`NOTHING_SAVED` has none)."""
        if self._names:
            self._entries = None

    @property
    def released(self) -> bool:
        """Whether :meth:`release` was called."""
        return self._entries is None


#: The saved values of every node that saves none (one shared, empty and never released).
NOTHING_SAVED = SavedValues("a node that saves nothing", (), ())


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
