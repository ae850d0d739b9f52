"""PyTorch's legacy tensor types: ``torch.Tensor(data)``, ``torch.FloatTensor([...])``,
``torch.LongTensor(3)``, ``isinstance(x, torch.LongTensor)`` and ``x.type()``.

Each legacy type is a constructor of tensors of one dtype: given data it copies it (as
:func:`pylucid.tensor` with that dtype), given integers it makes a tensor of that shape
(zeros: PyTorch leaves the memory uninitialised). ``isinstance`` against it asks whether a
tensor has that dtype, as PyTorch's does on the CPU.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pylucid import dtypes
from pylucid.dtypes import DType

__all__ = [
    "BFloat16Tensor",
    "BoolTensor",
    "DoubleTensor",
    "FloatTensor",
    "HalfTensor",
    "IntTensor",
    "LongTensor",
    "construct",
    "type_name",
]


def construct(name: str, dtype: DType, args: tuple[Any, ...], device: Any) -> Any:
    """A tensor of ``dtype`` from a legacy constructor's arguments (see the module)."""
    from pylucid.factories import tensor, zeros
    from pylucid.tensor import Tensor

    if not args:
        return zeros(0, dtype=dtype, device=device)
    if all(isinstance(a, (int, np.integer)) and not isinstance(a, bool) for a in args):
        return zeros(*args, dtype=dtype, device=device)
    if len(args) == 1 and isinstance(args[0], (tuple, list, np.ndarray, Tensor)):
        return tensor(args[0], dtype=dtype, device=device)
    raise TypeError(
        f"{name}(): expected data (a list, tuple, array or tensor) or sizes (ints), got "
        f"{', '.join(type(a).__name__ for a in args)}; prefer pylucid.tensor(data, dtype=...)"
    )


class _LegacyType(type):
    """The metaclass: calling the type constructs a tensor; ``isinstance`` checks the dtype."""

    dtype: DType

    def __call__(cls, *args: Any, device: Any = None) -> Any:
        return construct(cls.__name__, cls.dtype, args, device)

    def __instancecheck__(cls, obj: Any) -> bool:
        from pylucid.tensor import Tensor

        return isinstance(obj, Tensor) and obj.dtype is cls.dtype


def _legacy(name: str, dtype: DType) -> type:
    return _LegacyType(name, (), {"dtype": dtype, "__doc__": f"Tensors of {dtype.name}."})


FloatTensor = _legacy("FloatTensor", dtypes.float32)
DoubleTensor = _legacy("DoubleTensor", dtypes.float64)
HalfTensor = _legacy("HalfTensor", dtypes.float16)
BFloat16Tensor = _legacy("BFloat16Tensor", dtypes.bfloat16)
IntTensor = _legacy("IntTensor", dtypes.int32)
LongTensor = _legacy("LongTensor", dtypes.int64)
BoolTensor = _legacy("BoolTensor", dtypes.bool_)

_NAMES = {
    t.dtype: t.__name__
    for t in (FloatTensor, DoubleTensor, HalfTensor, BFloat16Tensor, IntTensor, LongTensor,
              BoolTensor)
}  # fmt: skip


def type_name(dtype: DType) -> str:
    """PyTorch's CPU type name of a dtype, ``"torch.FloatTensor"`` for float32: what
    ``x.type()`` returns, so that programs comparing it keep working."""
    return f"torch.{_NAMES[dtype]}"
