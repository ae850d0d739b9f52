"""Autocast: mixed precision as PyTorch users know it, applied through each op's AmpPolicy.

Inside ``with pl.autocast(dtype=pl.bfloat16):`` the shared op machinery asks
:func:`pylucid.ops.schema.resolve_dtypes` which dtype an op computes in and which it returns;
no op looks at autocast itself. The state is thread-local and nestable; ``enabled=False``
turns autocast off inside an enclosing block.
"""

from __future__ import annotations

from contextlib import ContextDecorator

from pylucid import modes
from pylucid.dtypes import DType, as_dtype, bfloat16

__all__ = ["autocast", "autocast_dtype"]


def autocast_dtype() -> DType | None:
    """The dtype of the innermost enabled autocast block of this thread, or None."""
    return modes.state.modes.autocast


class autocast(ContextDecorator):  # noqa: N801  (named like torch.autocast)
    """Run ops in mixed precision inside a block or a decorated function.

    Parameters
    ----------
    dtype : dtype
        The lower precision: ``pl.bfloat16`` (default) or ``pl.float16``.
    enabled : bool
        False turns autocast off inside this block, also within an enabled outer block.

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

    def __init__(self, dtype: DType | str = bfloat16, enabled: bool = True) -> None:
        self.dtype = as_dtype(dtype)
        if not self.dtype.is_half:
            raise ValueError(f"autocast: dtype must be float16 or bfloat16, got {self.dtype.name}")
        self.enabled = bool(enabled)

    def __enter__(self) -> autocast:
        modes.push_autocast(self.dtype if self.enabled else None)
        return self

    def __exit__(self, *exc_info: object) -> None:
        modes.pop_autocast()
