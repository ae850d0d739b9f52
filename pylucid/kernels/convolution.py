"""The data movement of 2-d convolution: ``im2col`` and its adjoint ``col2im``.

A convolution of ``x`` ``(N, C, H, W)`` with a kernel of ``KH x KW`` taps (stride ``s``,
padding ``p`` before each axis, dilation ``d``) reads, for output position ``(oh, ow)`` and
tap ``(kh, kw)``, the input element at ``(oh s_h - p_h + kh d_h, ow s_w - p_w + kw d_w)``,
or 0 where that lies in the padding. ``im2col`` writes those elements as the columns of a
``(N, C KH KW, OH OW)`` array, row ``(c KH + kh) KW + kw`` per tap, so that the convolution
is one matrix product per example and group (BLAS, in the backend); ``col2im`` adds such an
array back onto the input's positions - the adjoint, which the input gradient needs.

The columns are laid out batch-major inside each row - ``(C KH KW, N OH OW)``, example ``n``'s
outputs at ``n OH OW ...`` - so that a convolution over the whole batch is one matrix
product per group (``weight (O, C KH KW) @ columns``) rather than one per example: one BLAS
call whose columns dimension is ``N OH OW``, and the weight gradient one product too, not a
product per example and a sum over the batch.

Both are gathers through a table of the windows (:mod:`pylucid.backends.windows`): for each
tap, the input position each output position reads (``im2col``), and the output position
that reads each input position (``col2im``: a tap reads an input position at most once, so
the adjoint is a gather too, not a scatter). A gather over a whole plane is one long loop
that vectorises (a masked load per element); loops over the rows of a plane were 4-6x slower
on 14 x 14 planes, their 14-element inner loops spending more on loop overhead than on
copying (2.3 ms against 0.44 ms serial for (32, 16, 14, 14) and a 3 x 3 kernel, float32).
Both loops run over the ``N C`` planes, which are independent. The column arrays (``KH KW``
times the input) come from the host buffer pool (:mod:`pylucid.memory`): fresh ones faulted
a page at a time on first touch, ~1,700 faults a step of the benchmark's CNN (batch 64).
"""

from __future__ import annotations

import numba
import numpy as np
from numba.extending import register_jitable

from pylucid import memory
from pylucid.kernels.jit import njit
from pylucid.kernels.parallel import parallel_threshold

__all__ = ["PARALLEL_THRESHOLD_IM2COL", "col2im", "im2col"]

#: Element count of the column array from which the loops run in parallel (a copy per
#: element: the ``memory`` cost).
PARALLEL_THRESHOLD_IM2COL = parallel_threshold("memory")

_JIT = {"cache": True, "error_model": "numpy", "nogil": True}


@register_jitable
def _gather_plane(src, table, dst):
    for t in range(table.shape[0]):
        row, out = table[t], dst[t]
        for i in range(row.size):
            j = row[i]
            out[i] = src[j] if j >= 0 else 0


@register_jitable
def _add_gathered(src, table, dst):
    dst[:] = 0
    for t in range(table.shape[0]):
        row, column = table[t], src[t]
        for i in range(row.size):
            j = row[i]
            dst[i] += column[j] if j >= 0 else 0


@register_jitable
def _example_channel(plane, channels):
    """The example and channel of plane ``plane`` of an ``(N, C)`` stack, as int64 (a
    ``prange`` index is unsigned, and Numba's divmod of unsigned by signed is a float)."""
    p = np.int64(plane)
    n = p // channels
    return n, p - n * channels


def _im2col(planes, sources, cols, channels):
    outputs = sources.shape[1]
    for p in range(planes.shape[0]):
        n, c = _example_channel(p, channels)
        _gather_plane(planes[p], sources, cols[c, :, n * outputs : (n + 1) * outputs])


def _im2col_parallel(planes, sources, cols, channels):
    outputs = sources.shape[1]
    for p in numba.prange(planes.shape[0]):
        n, c = _example_channel(p, channels)
        _gather_plane(planes[p], sources, cols[c, :, n * outputs : (n + 1) * outputs])


def _col2im(cols, columns, planes, channels, outputs):
    for p in range(planes.shape[0]):
        n, c = _example_channel(p, channels)
        _add_gathered(cols[c, :, n * outputs : (n + 1) * outputs], columns, planes[p])


def _col2im_parallel(cols, columns, planes, channels, outputs):
    for p in numba.prange(planes.shape[0]):
        n, c = _example_channel(p, channels)
        _add_gathered(cols[c, :, n * outputs : (n + 1) * outputs], columns, planes[p])


_IM2COL = (njit(**_JIT)(_im2col), njit(parallel=True, **_JIT)(_im2col_parallel))
_COL2IM = (njit(**_JIT)(_col2im), njit(parallel=True, **_JIT)(_col2im_parallel))


def im2col(x: np.ndarray, sources: np.ndarray) -> np.ndarray:
    """The ``(C T, N L)`` columns of the C-contiguous ``(N, C, H, W)`` array ``x`` for the
    windows of ``sources`` (``(T, L)``, :func:`pylucid.backends.windows.window_sources`), in
    ``x``'s dtype: row ``c T + t`` holds tap ``t`` of channel ``c`` at each output of each
    example, example ``n``'s at columns ``n L`` to ``(n + 1) L``."""
    n, c, height, width = x.shape
    taps, outputs = sources.shape
    cols = memory.empty((c, taps, n * outputs), x.dtype)
    parallel = cols.size >= PARALLEL_THRESHOLD_IM2COL and n * c > 1
    _IM2COL[parallel](x.reshape(n * c, height * width), sources, cols, c)
    return cols.reshape(c * taps, n * outputs)


def col2im(cols: np.ndarray, readers: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """The adjoint of :func:`im2col`: each element of the ``(C T, N L)`` columns added onto
    the input position it was read from, into a new array of ``shape`` ``(N, C, H, W)``;
    ``readers`` is :func:`pylucid.backends.windows.window_readers` of the windows."""
    n, c, height, width = shape
    taps = readers.shape[0]
    outputs = cols.shape[-1] // max(n, 1)
    out = memory.empty((n * c, height * width), cols.dtype)
    parallel = cols.size >= PARALLEL_THRESHOLD_IM2COL and n * c > 1
    grouped = np.ascontiguousarray(cols).reshape(c, taps, n * outputs)
    _COL2IM[parallel](grouped, readers, out, c, outputs)
    return out.reshape(shape)
