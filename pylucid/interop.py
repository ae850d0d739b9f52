"""Interoperability: DLPack export and import, and :func:`asarray`.

Importing this module installs ``Tensor.__dlpack__`` and ``Tensor.__dlpack_device__``, so
``torch.from_dlpack(t)``, ``np.from_dlpack(t)`` and ``mx.from_dlpack(t)`` take pylucid
tensors.

What shares memory and what copies
----------------------------------
- Export (``__dlpack__``) of a tensor on the numba backend (``"cpu"``) shares its NumPy
  storage: a write through the consumer shows in the tensor (its version counter does not
  see it, as with :meth:`Tensor.numpy`). Storage with negative strides (a flipped view) is
  exported as a contiguous copy, because PyTorch 2.13 aborts the process on negative
  DLPack strides; ``copy=False`` refuses it instead.
- Export of a tensor on the mlx backend (``"gpu"``) is a copy: pylucid treats MLX arrays as
  immutable values that several tensors share (``clone`` returns the same array), and
  PyTorch writes into imported memory; ``copy=False`` refuses.
- A tensor that requires grad is refused, as PyTorch does (export ``t.detach()``).
- bfloat16 on the numba backend cannot be exported or imported through DLPack: NumPy's
  DLPack supports no bfloat16. View the bits as uint16 instead:
  ``torch.from_numpy(t.numpy().view(np.uint16)).view(torch.bfloat16)`` and
  ``pl.from_numpy(x.view(torch.uint16).numpy().view(ml_dtypes.bfloat16))`` share memory.
- :func:`from_dlpack` of a CPU producer (a NumPy array, a PyTorch CPU tensor) gives a numba
  tensor sharing its memory; of an ``mlx.core.array`` an mlx tensor sharing its buffer (a
  later ``a[i] = v`` in MLX gives ``a`` a new value, not the tensor); of a producer on
  another device (Metal, CUDA) an mlx tensor made by ``mx.from_dlpack``.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import numpy as np

from pylucid import backends, factories
from pylucid.dtypes import DType, as_dtype, bfloat16
from pylucid.ops.conversion import clone
from pylucid.ops.wrapping import DUNDERS, dunder
from pylucid.tensor import Tensor

__all__ = ["asarray", "from_dlpack"]

#: DLPack's device type of host memory (``kDLCPU``).
DLPACK_CPU = 1
_GRAD_EXPORT = "Can't export tensors that require gradient, use tensor.detach()"


# -- export ---------------------------------------------------------------------------------
@dunder("__dlpack__")
def tensor_dlpack(
    self: Tensor,
    *,
    stream: Any = None,
    max_version: tuple[int, int] | None = None,
    dl_device: tuple[int, int] | None = None,
    copy: bool | None = None,
) -> Any:
    """Export the tensor as a DLPack capsule (the array API's ``__dlpack__``).

    Parameters
    ----------
    stream, max_version, dl_device, copy
        As in the DLPack protocol; passed on to the storage's ``__dlpack__``. With
        ``copy=None`` a copy is made where sharing is unsafe (see the module docs).

    Raises
    ------
    BufferError
        For a tensor that requires grad (export ``t.detach()``), for bfloat16 on the numba
        backend, and for ``copy=False`` where only a copy can be exported.
    """
    if self._requires_grad:
        raise BufferError(_GRAD_EXPORT)
    storage = self._storage
    options = {"stream": stream, "max_version": max_version, "dl_device": dl_device}
    if not isinstance(storage, np.ndarray):  # an MLX array: give the consumer its own copy
        if copy is False:
            raise BufferError(
                f"__dlpack__(copy=False): a tensor on '{self.device}' ({self.backend}) is "
                f"exported as a copy, since its MLX array may be shared with other tensors"
            )
        return storage.__dlpack__(**options, copy=True)
    if self._dtype is bfloat16:
        raise BufferError(
            "__dlpack__: NumPy's DLPack has no bfloat16, so a bfloat16 tensor on 'cpu' cannot "
            "be exported; share its bits instead: torch.from_numpy(t.numpy().view(np.uint16))"
            ".view(torch.bfloat16)"
        )
    if any(s < 0 for s in storage.strides):
        if copy is False:
            raise BufferError(
                "__dlpack__(copy=False): this tensor's storage has negative strides (a "
                "flipped view), which it exports as a contiguous copy"
            )
        storage = np.asarray(storage, order="C")
    return storage.__dlpack__(**options, copy=copy)


@dunder("__dlpack_device__")
def tensor_dlpack_device(self: Tensor) -> tuple[int, int]:
    """The DLPack ``(device type, device id)`` of the tensor's memory (``(1, 0)``: host)."""
    kind, index = self._storage.__dlpack_device__()
    return int(kind), int(index)


for _name in ("__dlpack__", "__dlpack_device__"):
    setattr(Tensor, _name, DUNDERS[_name])


# -- import ---------------------------------------------------------------------------------
def _mlx_array_type() -> type | None:
    """``mlx.core.array`` if MLX has been imported (an MLX array exists only then)."""
    mx = sys.modules.get("mlx.core")
    return None if mx is None else mx.array


def from_dlpack(x: Any) -> Tensor:
    """A tensor sharing memory with ``x``, an object with ``__dlpack__`` (or a Tensor).

    Parameters
    ----------
    x : object
        A NumPy array or a PyTorch CPU tensor (gives a numba tensor on ``"cpu"``, no copy),
        an ``mlx.core.array`` (an mlx tensor on ``"gpu"`` on its buffer, no copy), another
        DLPack producer on the host (numba, no copy) or on a device (mlx, via
        ``mx.from_dlpack``), or a pylucid Tensor (``x.detach()``).

    Raises
    ------
    BufferError
        If ``x`` requires grad (a pylucid or PyTorch tensor) or its producer refuses.
    TypeError
        If ``x`` has no ``__dlpack__``, or its dtype is one pylucid does not hold or that
        NumPy's DLPack does not import (bfloat16 from a host producer).
    """
    if isinstance(x, Tensor):
        if x._requires_grad:
            raise BufferError(f"from_dlpack: {_GRAD_EXPORT}")
        return x.detach()
    mlx_array = _mlx_array_type()
    if mlx_array is not None and isinstance(x, mlx_array):
        return _from_mlx(x, lambda: sys.modules["mlx.core"].stop_gradient(x))
    if not hasattr(x, "__dlpack__") or not hasattr(x, "__dlpack_device__"):
        raise TypeError(
            f"from_dlpack: expected an object with __dlpack__ and __dlpack_device__ (a NumPy "
            f"array, a torch tensor, an mlx array), got {type(x).__name__}"
        )
    kind, _ = x.__dlpack_device__()
    if int(kind) != DLPACK_CPU:
        return _from_mlx(x, lambda: backends.get("mlx").mx.from_dlpack(x))
    try:
        array = np.from_dlpack(x)
    except BufferError as exc:
        raise BufferError(f"from_dlpack: {type(x).__name__} refused to export: {exc}") from None
    except (RuntimeError, TypeError) as exc:  # NumPy: "Unsupported dtype in DLTensor."
        raise TypeError(
            f"from_dlpack: NumPy (the CPU backend's storage) cannot import this "
            f"{type(x).__name__} through DLPack ({exc}); it takes bool, int32, int64, "
            f"float16, float32 and float64 (bfloat16: share its bits as uint16 and view them "
            f"as ml_dtypes.bfloat16, then pylucid.from_numpy)"
        ) from None
    return Tensor._make(array, backends.resolve("cpu"), _dtype(str(array.dtype), x))


def _from_mlx(x: Any, make: Callable[[], Any]) -> Tensor:
    """An mlx tensor on the MLX array ``make()`` returns."""
    backend = backends.get("mlx")
    try:
        storage = make()
    except (BufferError, RuntimeError, TypeError, ValueError) as exc:
        raise TypeError(f"from_dlpack: MLX cannot import this {type(x).__name__}: {exc}") from None
    dtype = _dtype(str(storage.dtype).rsplit(".", 1)[-1], x)
    return Tensor._make(storage, backend, dtype)


def _dtype(spec: Any, source: Any) -> DType:
    try:
        return as_dtype(spec)
    except TypeError as exc:
        raise TypeError(f"from_dlpack: {type(source).__name__} of {exc}") from None


# -- asarray --------------------------------------------------------------------------------
def asarray(
    obj: Any,
    *,
    dtype: DType | Any | None = None,
    device: str | None = None,
    copy: bool | None = None,
    requires_grad: bool | None = None,
) -> Tensor:
    """``obj`` as a tensor, sharing memory where it can (PyTorch's ``torch.asarray``).

    Parameters
    ----------
    obj : Tensor, NumPy array, DLPack producer, object with ``__array__``, number or sequence
        A Tensor is returned as it is when dtype and device match (differentiable
        conversions otherwise); a NumPy array, a torch tensor or an mlx array shares memory
        as :func:`from_dlpack` describes; a number or a (nested) list or tuple is copied.
    dtype : dtype, optional
        Convert to this dtype (a copy).
    device : str, optional
        ``"cpu"``, ``"gpu"`` or a backend name; moving is a copy. By default a tensor or
        array stays where it is and a sequence goes to the current backend.
    copy : bool, optional
        ``True``: always copy; ``False``: never copy (raise if a copy is needed); ``None``:
        copy only when needed.
    requires_grad : bool, optional
        Whether the result requires grad; by default it does when ``obj`` is a tensor that
        does (as PyTorch 2.13). ``False`` on such a tensor gives a detached alias; ``True``
        on a shared tensor that does not gives a new leaf sharing its memory.

    Raises
    ------
    ValueError
        With ``copy=False`` where a copy is needed (a conversion, a move, a sequence).
    TypeError
        For an object that is none of these (a dict, a set, a string).
    """
    if isinstance(obj, (list, tuple, bool, int, float, np.generic)):
        if copy is False:
            raise ValueError(
                f"asarray(copy=False): a {type(obj).__name__} has no memory to share; it "
                f"must be copied"
            )
        result = factories.tensor(obj, dtype=dtype, device=device)
        return result.requires_grad_(True) if requires_grad else result
    source, owned = _shared(obj, dtype)
    if owned and copy is False:
        raise ValueError(
            f"asarray(copy=False): a NumPy array of {obj.dtype} becomes {source.dtype.name} "
            f"only by a copy"
        )
    target = source._backend if device is None else backends.resolve(device)
    kind = source._dtype if dtype is None else as_dtype(dtype)
    result = source
    if target is not source._backend or kind is not source._dtype:
        if copy is False:
            raise ValueError(
                f"asarray(copy=False): converting {source.dtype.name} on '{source.device}' "
                f"to {kind.name} on '{target.device}' needs a copy"
            )
        result = source.to(target.name, kind)
    elif copy and not owned:
        result = clone(source)
    if requires_grad is False and result._requires_grad:
        return result.detach()
    if requires_grad and not result._requires_grad:
        return (result.detach() if result is obj else result).requires_grad_(True)
    return result


def _shared(obj: Any, dtype: Any) -> tuple[Tensor, bool]:
    """``obj`` as a tensor sharing its memory, and whether that tensor is a new copy."""
    if isinstance(obj, Tensor):
        return obj, False
    if not isinstance(obj, np.ndarray) and hasattr(obj, "__dlpack__"):
        return from_dlpack(obj), False
    if not isinstance(obj, np.ndarray) and hasattr(obj, "__array__"):
        obj = np.asarray(obj)
    if not isinstance(obj, np.ndarray):
        raise TypeError(
            f"asarray: cannot make a tensor from a {type(obj).__name__}; expected a Tensor, a "
            f"NumPy array, an object with __dlpack__ or __array__, a number or a sequence"
        )
    try:
        kind = as_dtype(str(obj.dtype))
    except TypeError as exc:
        if dtype is None or obj.dtype == object:
            raise TypeError(f"asarray: a NumPy array of {exc}") from None
        return factories.tensor(obj, dtype=dtype, device="cpu"), True  # uint8 to a dtype
    return Tensor._make(obj, backends.resolve("cpu"), kind), False
