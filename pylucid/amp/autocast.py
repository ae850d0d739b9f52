"""Autocast: mixed precision as PyTorch users know it, applied through each op's AmpPolicy.

Inside ``with pl.autocast("cpu", dtype=pl.bfloat16):`` the shared op machinery asks
:func:`pylucid.ops.schema.resolve_dtypes` which dtype an op computes in and which it returns;
no op looks at autocast itself. The state is thread-local and nestable; ``enabled=False``
turns autocast off inside an enclosing block.
"""

from __future__ import annotations

import warnings
from contextlib import ContextDecorator

from pylucid import modes
from pylucid.device import TYPES, UNAVAILABLE_TYPES
from pylucid.dtypes import DType, as_dtype, bfloat16, names_dtype

__all__ = ["autocast", "autocast_dtype"]


def autocast_dtype() -> DType | None:
    """The dtype of the innermost enabled autocast block of this thread, or None."""
    return modes.state.modes.autocast


class autocast(ContextDecorator):  # noqa: N801  (named like torch.autocast)
    """Run ops in mixed precision inside a block or a decorated function.

    Parameters
    ----------
    device_type : str
        As ``torch.autocast``'s first argument: ``"cpu"`` or ``"gpu"`` (ops run in mixed
        precision on whichever backend their inputs are on). ``"cuda"`` (no CUDA here)
        disables autocast with a warning, as PyTorch does on a machine without CUDA.
    dtype : dtype, optional
        The lower precision: ``pl.bfloat16`` (the default, as PyTorch's on the CPU) or
        ``pl.float16``.
    enabled : bool
        False turns autocast off inside this block, also within an enabled outer block.
    cache_enabled : bool, optional
        Accepted for PyTorch's signature; pylucid keeps no cast cache.

    Notes
    -----
    Per op, by its schema's :class:`~pylucid.ops.schema.AmpPolicy`:

    - ``PROMOTE`` (matmul, add, mul, ...): float32 inputs are computed in ``dtype`` and the
      result has ``dtype``;
    - ``FORCE_FP32`` (exp, log, log2, pow, softmax, sum, ...): half inputs are computed in
      float32 and the result is float32;
    - ``KEEP_INPUT`` (shape ops, relu, max, comparisons, ...): autocast is ignored.

    float64 inputs are never lowered, as in PyTorch. Backward runs in the dtypes the forward
    chose, and every leaf gradient has its leaf's dtype.
    """

    def __init__(
        self,
        device_type: str = "cpu",
        dtype: DType | str | None = None,
        enabled: bool = True,
        cache_enabled: bool | None = None,
    ) -> None:
        if not isinstance(device_type, str) or names_dtype(device_type):
            raise TypeError(
                f"autocast: the first argument is the device type, as in torch.autocast "
                f"('cpu' or 'gpu'), got {device_type!r}; pass the dtype as dtype=..."
            )
        self.device_type = str(device_type).partition(":")[0]
        self.dtype = bfloat16 if dtype is None else as_dtype(dtype)
        if not self.dtype.is_half:
            raise ValueError(f"autocast: dtype must be float16 or bfloat16, got {self.dtype.name}")
        if enabled and self.device_type in UNAVAILABLE_TYPES:
            warnings.warn(
                f"autocast: device_type {self.device_type!r} is not available (pylucid has no "
                f"CUDA); autocast is disabled. Use autocast('cpu' or 'gpu', dtype=...)",
                UserWarning,
                stacklevel=2,
            )
            enabled = False
        elif self.device_type not in TYPES:
            raise ValueError(f"autocast: unknown device_type {device_type!r}; use 'cpu' or 'gpu'")
        self.enabled = bool(enabled)

    def __enter__(self) -> autocast:
        modes.push_autocast(self.dtype if self.enabled else None)
        return self

    def __exit__(self, *exc_info: object) -> None:
        modes.pop_autocast()
