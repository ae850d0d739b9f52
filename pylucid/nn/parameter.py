"""``Parameter``: a tensor that a :class:`~pylucid.nn.Module` registers as its parameter."""

from __future__ import annotations

from typing import Any

from pylucid.factories import empty
from pylucid.tensor import Tensor

__all__ = ["Parameter"]


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
