"""The stable ordering both backends sort by: NumPy's stable sort, NaN above every number.

NumPy's ``kind="stable"`` sort (radix sort for small integers, timsort otherwise, in C) is
stable and puts NaN last, which is PyTorch's ascending order. The descending order is the
ascending order of the reversed axis, reversed: equal elements keep their order and NaN
comes first, as in PyTorch's stable descending sort, for every dtype (negating would not
do for unsigned integers and bools). The mlx backend sorts on the host the same way: MLX's
``argsort`` does not say that it is stable.
"""

from __future__ import annotations

import numpy as np

__all__ = ["stable_argsort"]


def stable_argsort(a: np.ndarray, axis: int, descending: bool) -> np.ndarray:
    """The int64 indices that order ``a`` along ``axis`` (see the module)."""
    if not descending:
        return np.argsort(a, axis=axis, kind="stable").astype(np.int64, copy=False)
    reversed_order = np.argsort(np.flip(a, axis), axis=axis, kind="stable")
    return (a.shape[axis] - 1 - np.flip(reversed_order, axis)).astype(np.int64, copy=False)
