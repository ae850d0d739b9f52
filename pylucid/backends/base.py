"""The Backend protocol: what every backend implements, documented once.

A backend owns a storage type (``numpy.ndarray`` for ``numba``, ``mlx.core.array`` for
``mlx``) and implements the primitives that ops dispatch to. Primitives take and return
storage (binary primitives also accept a Python number as an operand); ``shape`` is the
output shape the op validated and ``dtype`` the compute :class:`~pylucid.dtypes.DType` the op
chose. Backends never see tensors or graphs.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import numpy as np

from pylucid.dtypes import DType

Storage = Any
Shape = tuple[int, ...]
Axes = tuple[int, ...]


@runtime_checkable
class Backend(Protocol):
    """The contract between ops and a compute library.

    Attributes
    ----------
    name : str
        Registry key (``"numba"``, ``"mlx"``).
    device : str
        The device tensors on this backend report (``"cpu"``, ``"gpu"``).
    """

    name: str
    device: str

    # -- availability and conversion -------------------------------------------------------
    def is_available(self) -> bool:
        """Whether the backend's library can be imported and used here."""

    def unavailable_reason(self) -> str:
        """Why the backend cannot be used, with the command that fixes it ("" if available)."""

    def info(self) -> dict[str, str]:
        """What runs where: library versions, the physical device, thread counts."""

    def from_numpy(self, array: np.ndarray, dtype: DType) -> Storage:
        """Storage holding ``array`` as ``dtype`` (zero copy where the backend allows)."""

    def to_numpy(self, storage: Storage) -> np.ndarray:
        """The values of ``storage`` as a NumPy array."""

    def shape(self, storage: Storage) -> Shape:
        """The shape of ``storage`` as a tuple."""

    def dtype(self, storage: Storage) -> DType:
        """The dtype of ``storage``."""

    def full(self, shape: Shape, value: float, dtype: DType) -> Storage:
        """New storage of ``shape`` filled with ``value``."""

    def cast(self, a: Storage, dtype: DType) -> Storage:
        """``a`` converted to ``dtype`` (the same storage when it already is)."""

    def clone(self, a: Storage) -> Storage:
        """A copy of ``a`` that shares no memory with it."""

    # -- primitives ------------------------------------------------------------------------
    def log2(self, a: Storage, shape: Shape, dtype: DType) -> Storage:
        """Elementwise base-2 logarithm."""

    def log2_backward(self, x: Storage, g: Storage, shape: Shape, dtype: DType) -> Storage:
        """Fused ``g / (x ln 2)``."""

    def neg(self, a: Storage, shape: Shape, dtype: DType) -> Storage:
        """Elementwise negation."""

    def add(self, a: Storage, b: Storage, shape: Shape, dtype: DType) -> Storage:
        """``a + b`` with broadcasting to ``shape``."""

    def sub(self, a: Storage, b: Storage, shape: Shape, dtype: DType) -> Storage:
        """``a - b`` with broadcasting to ``shape``."""

    def mul(self, a: Storage, b: Storage, shape: Shape, dtype: DType) -> Storage:
        """``a * b`` with broadcasting to ``shape``."""

    def div(self, a: Storage, b: Storage, shape: Shape, dtype: DType) -> Storage:
        """``a / b`` with broadcasting to ``shape``."""

    def div_backward_b(
        self, a: Storage, b: Storage, g: Storage, shape: Shape, dtype: DType
    ) -> Storage:
        """Fused ``-g a / b^2``, the gradient of ``a / b`` with respect to ``b``."""

    def pow_scalar(self, a: Storage, exponent: float, shape: Shape, dtype: DType) -> Storage:
        """Elementwise ``a ** exponent``."""

    def pow_scalar_backward(
        self, x: Storage, g: Storage, exponent: float, shape: Shape, dtype: DType
    ) -> Storage:
        """Fused ``g p x^(p-1)`` (0 where ``p == 0``)."""

    def sum(self, a: Storage, axes: Axes, keepdims: bool, dtype: DType) -> Storage:
        """Sum over ``axes`` (all axes when empty is not meant: ``axes`` lists them)."""

    def broadcast_to(self, a: Storage, shape: Shape) -> Storage:
        """``a`` broadcast to ``shape`` (may be a read-only view)."""

    def reshape(self, a: Storage, shape: Shape) -> Storage:
        """``a`` with the same elements in ``shape`` (a view where possible)."""
