"""Scatter kernels: the backward of indexing, where repeated indices must add up."""

from __future__ import annotations

import numpy as np

from pylucid.kernels.jit import njit

__all__ = ["scatter_add_rows"]


@njit(cache=True, error_model="numpy", nogil=True)
def scatter_add_rows(out: np.ndarray, rows: np.ndarray, g: np.ndarray) -> None:
    """``out[p, rows[i], q] += g[p, i, q]`` for all p, i, q; repeated rows accumulate.

    Serial: two gradients for one row would race in a parallel loop. ``rows`` is already
    bounds-checked by the op.
    """
    for p in range(out.shape[0]):
        for i in range(rows.size):
            row = rows[i]
            for q in range(out.shape[2]):
                out[p, row, q] += g[p, i, q]
