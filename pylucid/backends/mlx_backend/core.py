"""Core of the ``mlx`` backend: ``mlx.core.array`` storage, MLX's GPU where it has one.

On a machine without a Metal or CUDA device MLX runs on its CPU stream; :meth:`info` says
which. MLX computes float64 only on its CPU stream, so float64 work is sent there explicitly
(never silently degraded to float32). MLX is imported lazily: pylucid imports without it.
"""

from __future__ import annotations

import importlib
import math
import platform
from functools import cached_property
from typing import Any

import numpy as np

from pylucid.backends.base import Axes, Shape
from pylucid.dtypes import DType, as_dtype, bfloat16, float64

LN2 = 0.69314718055994530942
#: Arrays from this size on are checked against MLX's memory limit (smaller ones cannot
#: exhaust it alone, and the check costs two calls into MLX).
_CHECKED_FROM = 1 << 28

_INSTALL_HINT = (
    'the mlx backend needs MLX: pip install "pylucid[mlx]" '
    '(or: pip install "mlx[cpu]" on Linux, pip install mlx on macOS)'
)


class MLXCore:
    """Conversion and core primitives; the family mixins use ``mx``, ``_stream``, ``_operands``."""

    @cached_property
    def _import_error(self) -> str:
        try:
            importlib.import_module("mlx.core")
        except ImportError as exc:
            return f"{_INSTALL_HINT} ({exc})"
        return ""

    @cached_property
    def mx(self) -> Any:
        """The ``mlx.core`` module."""
        import mlx.core

        return mlx.core

    @cached_property
    def _has_gpu(self) -> bool:
        return bool(self.mx.is_available(self.mx.gpu))

    def is_available(self) -> bool:
        return not self._import_error

    def unavailable_reason(self) -> str:
        return self._import_error

    def info(self) -> dict[str, str]:
        runs_on = (
            "gpu"
            if self._has_gpu
            else f"cpu stream (no Metal or CUDA device on {platform.system()})"
        )
        return {"runs_on": runs_on, "mlx": self.mx.__version__, "float64": "cpu stream"}

    def _stream(self, dtype: DType) -> Any:
        return self.mx.cpu if dtype is float64 or not self._has_gpu else self.mx.gpu

    def _mx_dtype(self, dtype: DType) -> Any:
        return self.mx.bool_ if dtype.name == "bool" else getattr(self.mx, dtype.name)

    # -- conversion -------------------------------------------------------------------------
    def from_numpy(self, array: np.ndarray, dtype: DType) -> Any:
        # The dtype must be explicit: mx.array(float64 ndarray) silently gives float32.
        # Contiguous: MLX refuses arrays with negative strides (a[::-1]).
        if array.size == 0:  # MLX reductions read garbage from an array built on an empty
            return self.mx.zeros(array.shape, dtype=self._mx_dtype(dtype))  # NumPy buffer
        contiguous = np.asarray(array, dtype=dtype.numpy, order="C")
        return self.mx.array(contiguous, dtype=self._mx_dtype(dtype))

    def to_numpy(self, storage: Any) -> np.ndarray:
        if storage.dtype == self.mx.bfloat16:  # no buffer-protocol format for bfloat16
            return np.array(storage.astype(self.mx.float32)).astype(bfloat16.numpy)
        return np.array(storage)  # a copy: NumPy code must not write into MLX's buffers

    def shape(self, storage: Any) -> Shape:
        return tuple(storage.shape)

    def dtype(self, storage: Any) -> DType:
        return as_dtype(str(storage.dtype).rsplit(".", 1)[-1])

    def full(self, shape: Shape, value: float, dtype: DType) -> Any:
        self.check_allocation("full", shape, dtype)
        if isinstance(value, np.generic):  # (an ml_dtypes bfloat16 scalar: MLX makes complex)
            value = value.item()
        return self.mx.full(shape, value, dtype=self._mx_dtype(dtype), stream=self._stream(dtype))

    def cast(self, a: Any, dtype: DType) -> Any:
        target = self._mx_dtype(dtype)
        return a if a.dtype == target else a.astype(target, stream=self._stream(dtype))

    def clone(self, a: Any) -> Any:
        return a  # mx.array values are immutable: sharing one is safe.

    def check_allocation(self, op: str, shape: Shape, dtype: DType) -> None:
        """MLX allocates when it evaluates, and an allocation it cannot make there kills the
        process: refuse an array larger than MLX's memory limit less what it holds now."""
        nbytes = math.prod(shape) * dtype.itemsize
        if nbytes < _CHECKED_FROM:
            return
        mx = self.mx
        limit, used = mx.get_memory_limit(), mx.get_active_memory()
        if nbytes > limit - used:
            raise MemoryError(
                f"{op}: an array of shape {tuple(shape)} in {dtype.name} needs "
                f"{nbytes / 2**30:.1f} GiB, more than the mlx backend can hold: MLX's memory "
                f"limit is {limit / 2**30:.1f} GiB and {used / 2**30:.1f} GiB are in use "
                f"(mlx.core.set_memory_limit changes the limit)"
            )

    def is_contiguous(self, a: Any) -> bool:
        return True  # (MLX exposes no strides: its arrays are row-major to every reader)

    def element_strides(self, a: Any) -> Shape:
        strides, step = [], 1
        for n in reversed(a.shape):
            strides.append(step)
            step *= max(n, 1)
        return tuple(reversed(strides))

    def data_pointer(self, a: Any) -> int:
        return id(a)  # (MLX exposes no addresses: the array's identity)

    def is_writable(self, a: Any) -> bool:
        return True  # a tensor takes a new array; views are logical (pylucid.ops.views)

    def aliases(self, out: Any, a: Any) -> None:
        return None  # no views of MLX's own: pylucid.ops.views decides by the layout

    def accumulate(self, dst: Any, src: Any) -> Any:
        return self.mx.add(dst, src, stream=self._stream(self.dtype(dst)))

    def synchronize(self) -> None:
        """Wait for MLX's default stream (its lazy graphs evaluate asynchronously)."""
        self.mx.synchronize()

    def is_private(self, a: Any) -> bool:
        return True  # immutable: no one can change it under a tensor that takes it

    def write(self, dst: Any, src: Any) -> Any:
        return src  # immutable: the tensor takes the new array

    # -- elementwise ------------------------------------------------------------------------
    def _operands(self, dtype: DType, *operands: Any) -> list[Any]:
        mx = self.mx
        return [
            self.cast(a, dtype)
            if isinstance(a, mx.array)
            else mx.array(a, dtype=self._mx_dtype(dtype))
            for a in operands
        ]

    def log2(self, a, shape, dtype):
        return self.mx.log2(self.cast(a, dtype), stream=self._stream(dtype))

    def neg(self, a, shape, dtype):
        return self.mx.negative(self.cast(a, dtype), stream=self._stream(dtype))

    def add(self, a, b, shape, dtype):
        return self.mx.add(*self._operands(dtype, a, b), stream=self._stream(dtype))

    def sub(self, a, b, shape, dtype):
        return self.mx.subtract(*self._operands(dtype, a, b), stream=self._stream(dtype))

    def mul(self, a, b, shape, dtype):
        return self.mx.multiply(*self._operands(dtype, a, b), stream=self._stream(dtype))

    def div(self, a, b, shape, dtype):
        return self.mx.divide(*self._operands(dtype, a, b), stream=self._stream(dtype))

    def div_backward_b(self, a, b, g, shape, dtype):
        """``-g ((a / b) / b)``, as PyTorch and the numba backend's float64: with g = 1 it is
        in range wherever a / b^2 is, and b^2 is never formed (``g a / b^2`` gave -inf for
        float32 b = 1e-24, exact -1e24)."""
        mx, s = self.mx, self._stream(dtype)
        a, b, g = self._operands(dtype, a, b, g)
        quotient = mx.divide(mx.divide(a, b, stream=s), b, stream=s)
        return mx.negative(mx.multiply(g, quotient, stream=s), stream=s)

    def pow_scalar(self, a, exponent, shape, dtype):
        mx, s = self.mx, self._stream(dtype)
        return mx.power(
            self.cast(a, dtype), mx.array(exponent, dtype=self._mx_dtype(dtype)), stream=s
        )

    def pow_scalar_backward(self, x, g, exponent, shape, dtype):
        mx, s = self.mx, self._stream(dtype)
        x, g = self._operands(dtype, x, g)
        if exponent == 0:
            return mx.zeros_like(g, stream=s)
        p = mx.array(exponent, dtype=self._mx_dtype(dtype))
        return mx.multiply(mx.multiply(g, p, stream=s), mx.power(x, p - 1, stream=s), stream=s)

    # -- reductions and shape ---------------------------------------------------------------
    def sum(self, a: Any, axes: Axes, keepdims: bool, dtype: DType) -> Any:
        return self.mx.sum(
            self.cast(a, dtype), axis=list(axes), keepdims=keepdims, stream=self._stream(dtype)
        )

    def broadcast_to(self, a: Any, shape: Shape) -> Any:
        return self.mx.broadcast_to(a, shape, stream=self._stream(self.dtype(a)))

    def broadcast_copy(self, a: Any, shape: Shape) -> Any:
        # (MLX arrays are immutable and evaluated lazily: the broadcast is the copy)
        return self.broadcast_to(a, shape)

    def reshape(self, a: Any, shape: Shape) -> Any:
        return self.mx.reshape(a, shape, stream=self._stream(self.dtype(a)))
