"""``set_float32_matmul_precision``: PyTorch's switch between float32 products and faster,
less precise ones (TF32 or bfloat16 passes on GPUs that have them).

pylucid's float32 products are float32 on every backend (NumPy's OpenBLAS on the CPU, MLX on
the GPU), which is also what PyTorch computes on a CPU whatever the setting: the choice is
kept so a script can read it back, and changes no result.
"""

from __future__ import annotations

__all__ = ["get_float32_matmul_precision", "set_float32_matmul_precision"]

_CHOICES = ("highest", "high", "medium")
_precision = "highest"


def set_float32_matmul_precision(precision: str) -> None:
    """Record ``precision`` ("highest", "high" or "medium"); float32 products stay float32.

    Raises
    ------
    ValueError
        For another value (PyTorch's rule too).
    """
    global _precision
    if precision not in _CHOICES:
        raise ValueError(
            f"set_float32_matmul_precision: expected one of {', '.join(_CHOICES)}, got "
            f"{precision!r}"
        )
    _precision = precision


def get_float32_matmul_precision() -> str:
    """The precision last set ("highest" by default)."""
    return _precision
