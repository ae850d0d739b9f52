"""``Parameter`` and ``Buffer``: tensors that a :class:`~pylucid.nn.Module` registers as its
parameter or buffer when assigned to one of its attributes."""

from __future__ import annotations

from typing import Any

from pylucid.factories import empty
from pylucid.tensor import Tensor

__all__ = ["Buffer", "Parameter"]


class Parameter(Tensor):
    """A leaf tensor that requires grad (by default) and that a module attribute holding
    it registers in :meth:`~pylucid.nn.Module.parameters`, as ``torch.nn.Parameter``.

    ``Parameter(data)`` shares ``data``'s storage (no copy); ops on a parameter give plain
    tensors. Unlike PyTorch's, the parameter is not an alias of ``data``: on the numba
    backend an in-place change of one shows in the other (one NumPy array), on the mlx
    backend (immutable arrays, each tensor rebinds its own) it does not.

    Parameters
    ----------
    data : Tensor, optional
        The values (an empty float32 tensor when omitted).
    requires_grad : bool
        Whether the parameter is trained.
    """

    __slots__ = ()

    def __new__(cls, data: Tensor | None = None, requires_grad: bool = True) -> Parameter:
        if data is None:
            data = empty(0)
        if not isinstance(data, Tensor):
            raise TypeError(
                f"Parameter: expected a Tensor, got {type(data).__name__}; make it a tensor "
                f"first (pylucid.tensor(...))"
            )
        return cls._make(data._storage, data._backend, data.dtype, requires_grad, data.shape)

    def __init__(self, data: Tensor | None = None, requires_grad: bool = True) -> None:
        """(All set up by ``__new__``.)"""

    def __repr__(self) -> str:
        return f"Parameter containing:\n{super().__repr__()}"

    def __deepcopy__(self, memo: dict[int, Any]) -> Parameter:
        values = Tensor.__deepcopy__(self, memo)  # (copies .grad too)
        copied = Parameter(values.detach(), self.requires_grad)
        copied.grad = values.grad
        memo[id(self)] = copied
        return copied

    def __reduce_ex__(self, protocol: int) -> tuple[Any, ...]:
        return (Parameter, (self.detach(), self.requires_grad))


class Buffer(Tensor):
    """A tensor that a module attribute holding it registers as a buffer (state that is
    not trained: moved by :meth:`~pylucid.nn.Module.to`, in the state dict if
    ``persistent``), as ``torch.nn.Buffer``: ``self.steps = nn.Buffer(pl.zeros(()))`` is
    ``self.register_buffer("steps", pl.zeros(()))``.

    ``Buffer(data)`` shares ``data``'s storage and keeps its ``requires_grad`` (as
    :class:`Parameter`, not an alias of ``data`` on the mlx backend); ops on a buffer give
    plain tensors.

    Parameters
    ----------
    data : Tensor, optional
        The values (an empty float32 tensor when omitted).
    persistent : bool
        Whether the buffer is part of its module's state dict.
    """

    __slots__ = ("persistent",)

    def __new__(cls, data: Tensor | None = None, *, persistent: bool = True) -> Buffer:
        if data is None:
            data = empty(0)
        if not isinstance(data, Tensor):
            raise TypeError(
                f"Buffer: expected a Tensor, got {type(data).__name__}; make it a tensor "
                f"first (pylucid.tensor(...))"
            )
        made = cls._make(data._storage, data._backend, data.dtype, data.requires_grad,
                         data.shape)  # fmt: skip
        made.persistent = persistent
        return made

    def __init__(self, data: Tensor | None = None, *, persistent: bool = True) -> None:
        """(All set up by ``__new__``.)"""
