"""Max and average pooling over the planes of an ``(N, C, H, W)`` array, and their gradients.

Every kernel takes the planes as a C-contiguous ``(P, H W)`` array and the windows as the
``(T, L)`` table of :func:`pylucid.backends.windows.window_sources`: for each of ``T`` taps
and ``L`` outputs the plane position it reads, or -1 (padding, or past a shorter window).

- **max**: the largest value read, as PyTorch: the first largest in the window's row-major
  order, and a NaN wins over every number (the last NaN, since each NaN replaces the
  previous choice); a window of -inf only selects its first position. The backward
  recomputes the max and then the chosen position from the saved input (no index array is
  kept from the forward) and adds the gradient there; overlapping windows may choose one
  position, so it accumulates, within its plane.
- **average**: the sum of the values read (in float64, rounded once) over the output's
  divisor; its backward adds ``g / divisor`` onto each position read.

The loops run in parallel over the planes, which are independent.
"""

from __future__ import annotations

import math

import numba
import numpy as np
from numba.extending import register_jitable

from pylucid.kernels.jit import njit
from pylucid.kernels.parallel import parallel_threshold

__all__ = [
    "PARALLEL_THRESHOLD_POOL",
    "avg_pool",
    "avg_pool_backward",
    "max_pool",
    "max_pool_backward",
    "max_pool_positions",
]

#: Taps read (planes x taps x outputs) from which the loops run in parallel (a compare or
#: an add per tap: the ``memory`` cost).
PARALLEL_THRESHOLD_POOL = parallel_threshold("memory")

_JIT = {"cache": True, "error_model": "numpy", "nogil": True}


@register_jitable
def _max_values(plane, sources, best):
    """Each window's max into ``best``: -inf for a window of padding, nan where it holds
    one. The loop runs over the outputs for one tap at a time with selects only, so it
    vectorises (a gather per output; ``plane[-1]``, read for a padding tap, is discarded):
    245 us for 2 x 2 windows over (512, 28, 28) float32, where tracking the position in the
    same loop took 2.1 ms."""
    if best.size == 0:
        return
    best[:] = -math.inf
    low = best[0]  # -inf in the plane's dtype: a float64 constant would stop vectorising
    for t in range(sources.shape[0]):
        row = sources[t]
        for i in range(row.size):
            j = row[i]
            read = plane[j]  # (unconditional: a load under a condition stops vectorising)
            value = read if j >= 0 else low
            current = best[i]
            best[i] = value if (value > current) | (value != value) else current


@register_jitable
def _positions_of(plane, sources, best, chosen):
    """The position each max in ``best`` is taken from, PyTorch's choice: the first tap
    holding it (the first inside the plane for a window of -inf), the last holding nan;
    -1 for a window of padding. The taps run backwards, each output's choice overwritten
    by every earlier tap holding the max (so the first one stays) but set only once for
    nan (the last one); selects only, so the loop over the outputs vectorises."""
    chosen[:] = -1
    for t in range(sources.shape[0] - 1, -1, -1):
        row = sources[t]
        for i in range(row.size):
            j = row[i]
            read, target = plane[j], best[i]
            hit = (j >= 0) & (read == target)
            first_nan = (j >= 0) & (read != read) & (target != target) & (chosen[i] < 0)
            chosen[i] = j if hit | first_nan else chosen[i]


@register_jitable
def _max_plane(plane, sources, out):
    _max_values(plane, sources, out)


@register_jitable
def _positions_plane(plane, sources, out):
    best, chosen = np.empty(out.size, plane.dtype), np.empty(out.size, np.int32)
    _max_values(plane, sources, best)
    _positions_of(plane, sources, best, chosen)
    out[:] = chosen


@register_jitable
def _max_backward_plane(plane, sources, g, out):
    best, chosen = np.empty(g.size, plane.dtype), np.empty(g.size, np.int32)
    _max_values(plane, sources, best)
    _positions_of(plane, sources, best, chosen)
    out[:] = 0
    for i in range(g.size):
        if chosen[i] >= 0:
            out[chosen[i]] += g[i]


@register_jitable
def _avg_plane(plane, sources, divisors, out):
    for i in range(out.size):
        total = 0.0
        for t in range(sources.shape[0]):
            j = sources[t, i]
            if j >= 0:
                total += plane[j]
        out[i] = total / divisors[i]


@register_jitable
def _avg_backward_plane(g, sources, divisors, out):
    out[:] = 0
    for i in range(g.size):
        share = g[i] / divisors[i]
        for t in range(sources.shape[0]):
            j = sources[t, i]
            if j >= 0:
                out[j] += share


def _max(planes, sources, out):
    for p in range(planes.shape[0]):
        _max_plane(planes[p], sources, out[p])


def _max_parallel(planes, sources, out):
    for p in numba.prange(planes.shape[0]):
        _max_plane(planes[p], sources, out[p])


def _positions(planes, sources, out):
    for p in range(planes.shape[0]):
        _positions_plane(planes[p], sources, out[p])


def _positions_parallel(planes, sources, out):
    for p in numba.prange(planes.shape[0]):
        _positions_plane(planes[p], sources, out[p])


def _max_backward(planes, sources, g, out):
    for p in range(planes.shape[0]):
        _max_backward_plane(planes[p], sources, g[p], out[p])


def _max_backward_parallel(planes, sources, g, out):
    for p in numba.prange(planes.shape[0]):
        _max_backward_plane(planes[p], sources, g[p], out[p])


def _avg(planes, sources, divisors, out):
    for p in range(planes.shape[0]):
        _avg_plane(planes[p], sources, divisors, out[p])


def _avg_parallel(planes, sources, divisors, out):
    for p in numba.prange(planes.shape[0]):
        _avg_plane(planes[p], sources, divisors, out[p])


def _avg_backward(g, sources, divisors, out):
    for p in range(g.shape[0]):
        _avg_backward_plane(g[p], sources, divisors, out[p])


def _avg_backward_parallel(g, sources, divisors, out):
    for p in numba.prange(g.shape[0]):
        _avg_backward_plane(g[p], sources, divisors, out[p])


def _pair(loop):
    return njit(**_JIT)(loop[0]), njit(parallel=True, **_JIT)(loop[1])


_MAX = _pair((_max, _max_parallel))
_POSITIONS = _pair((_positions, _positions_parallel))
_MAX_BACKWARD = _pair((_max_backward, _max_backward_parallel))
_AVG = _pair((_avg, _avg_parallel))
_AVG_BACKWARD = _pair((_avg_backward, _avg_backward_parallel))


def _parallel(planes: int, sources: np.ndarray) -> bool:
    return planes > 1 and planes * sources.size >= PARALLEL_THRESHOLD_POOL


def max_pool(planes: np.ndarray, sources: np.ndarray) -> np.ndarray:
    """The max of each window of each plane: ``(P, L)`` in ``planes``' dtype."""
    out = np.empty((planes.shape[0], sources.shape[1]), planes.dtype)
    _MAX[_parallel(planes.shape[0], sources)](planes, sources, out)
    return out


def max_pool_positions(planes: np.ndarray, sources: np.ndarray) -> np.ndarray:
    """The plane position (``ih W + iw``) each window's max is taken from: ``(P, L)`` int64."""
    out = np.empty((planes.shape[0], sources.shape[1]), np.int64)
    _POSITIONS[_parallel(planes.shape[0], sources)](planes, sources, out)
    return out


def max_pool_backward(planes: np.ndarray, sources: np.ndarray, g: np.ndarray) -> np.ndarray:
    """``g`` (``(P, L)``) added at each window's chosen position: ``planes``' shape."""
    out = np.empty(planes.shape, g.dtype)
    _MAX_BACKWARD[_parallel(planes.shape[0], sources)](planes, sources, g, out)
    return out


def avg_pool(planes: np.ndarray, sources: np.ndarray, divisors: np.ndarray) -> np.ndarray:
    """The sum of each window over its divisor (``divisors``: ``(L,)`` float64): ``(P, L)``."""
    out = np.empty((planes.shape[0], sources.shape[1]), planes.dtype)
    _AVG[_parallel(planes.shape[0], sources)](planes, sources, divisors, out)
    return out


def avg_pool_backward(
    g: np.ndarray, sources: np.ndarray, divisors: np.ndarray, plane_size: int
) -> np.ndarray:
    """``g / divisor`` (``g``: ``(P, L)``) added onto each position of each window:
    ``(P, plane_size)``."""
    out = np.empty((g.shape[0], plane_size), g.dtype)
    _AVG_BACKWARD[_parallel(g.shape[0], sources)](g, sources, divisors, out)
    return out
