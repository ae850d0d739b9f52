"""Kernels of the embedding op (:mod:`pylucid.ops.embedding`): taking slices of an array at
integer indices along one axis, the scatter-add that is its gradient, and the bounds check
that comes first.

An array of any rank is seen as ``(pre, rows, post)`` around the indexed axis (the product
of the sizes before it, its size, the product of those after it); the indices are a flat
integer array (int32 or int64), negative ones counted from the end (the op's check has
refused them where they are not allowed: an embedding's). These are the loops both eager
steps and compiled ones (:mod:`pylucid.compiler`) run, so a replay's values are eager's bits.
"""

from __future__ import annotations

import numpy as np

from pylucid.kernels.jit import njit

__all__ = ["check_indices", "scatter_rows", "take_rows"]

_JIT = {"cache": True, "error_model": "numpy", "nogil": True}


@njit(**_JIT)
def check_indices(index: np.ndarray, low: int, high: int) -> int:
    """The position of the first value of the flat ``index`` outside ``[low, high)``, or
    -1 where every value lies inside."""
    for i in range(index.size):
        value = index[i]
        if value < low or value >= high:
            return i
    return -1


@njit(**_JIT)
def take_rows(x: np.ndarray, index: np.ndarray, out: np.ndarray) -> None:
    """``out[p, i, q] = x[p, index[i], q]`` (``x``: ``(pre, rows, post)``, ``out``:
    ``(pre, index.size, post)``; the indices checked, negative ones from the end)."""
    rows = x.shape[1]
    for p in range(x.shape[0]):
        for i in range(index.size):
            row = index[i]
            if row < 0:
                row += rows
            for q in range(x.shape[2]):
                out[p, i, q] = x[p, row, q]


@njit(**_JIT)
def scatter_rows(g: np.ndarray, index: np.ndarray, skip: int, out: np.ndarray) -> None:
    """``out`` (``(pre, rows, post)``) set to zeros with ``g[p, i, q]`` (``g``: ``(pre,
    index.size, post)``) added at ``[p, index[i], q]`` for every ``i`` whose row is not
    ``skip`` (an embedding's ``padding_idx``; -1: none). Repeated rows accumulate, in the
    order of ``index``; serial, as two gradients of one row would race in a parallel loop."""
    rows = out.shape[1]
    for p in range(out.shape[0]):
        for row in range(rows):
            for q in range(out.shape[2]):
                out[p, row, q] = 0
    for p in range(out.shape[0]):
        for i in range(index.size):
            row = index[i]
            if row < 0:
                row += rows
            if row == skip:
                continue
            for q in range(out.shape[2]):
                out[p, row, q] += g[p, i, q]
