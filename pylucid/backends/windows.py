"""Sliding windows over the planes of an ``(N, C, H, W)`` array, as index tables.

Convolution and pooling read, for each output position, a window of input positions: a
grid of taps, ``lengths`` of them from ``starts`` with a ``step`` (the dilation), on each
axis; taps outside the plane read the padding. One description, :class:`Windows`, covers
convolution (``start = o s - p``), max and average pooling (the same, with ``ceil_mode``'s
extra windows) and adaptive pooling (windows of varying length). From it come two tables
that both backends' kernels index with, built once per geometry (cached):

- :func:`window_sources`: ``(taps, outputs)``, the position ``ih W + iw`` in the plane
  that each tap of each output reads, or -1 in the padding (``im2col``, pooling);
- :func:`window_readers`: ``(taps, H W)``, the output that reads each position through
  each tap, or -1: the adjoint as a gather, where windows of one tap never share a
  position (``col2im``; regular windows with a stride of at least 1).
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

import numpy as np

__all__ = [
    "Windows",
    "adaptive_axis",
    "convolution_windows",
    "regular_axis",
    "window_readers",
    "window_sources",
]

Axis = tuple[tuple[int, ...], tuple[int, ...]]


class Windows(NamedTuple):
    """The windows of an op over an ``(H, W)`` plane (a tuple of ints, so that it can be an
    op parameter that dispatch plans are cached by).

    Attributes
    ----------
    size : (int, int)
        The plane's height and width.
    starts, lengths : pairs of tuples of int
        Per axis, each output position's first input position (negative in the padding)
        and its number of taps.
    steps : (int, int)
        The distance between taps (the dilation).
    """

    size: tuple[int, int]
    starts: tuple[tuple[int, ...], tuple[int, ...]]
    lengths: tuple[tuple[int, ...], tuple[int, ...]]
    steps: tuple[int, int]

    @property
    def output(self) -> tuple[int, int]:
        """The output's height and width."""
        return len(self.starts[0]), len(self.starts[1])

    @property
    def taps(self) -> tuple[int, int]:
        """The most taps of a window on each axis."""
        return max(self.lengths[0], default=0), max(self.lengths[1], default=0)


def regular_axis(outputs: int, kernel: int, stride: int, before: int) -> Axis:
    """Windows of ``kernel`` taps at ``o stride - before`` for each of ``outputs``."""
    return tuple(o * stride - before for o in range(outputs)), (kernel,) * outputs


def adaptive_axis(size: int, outputs: int) -> Axis:
    """PyTorch's adaptive windows: output ``o`` covers ``[floor(o size / outputs),
    ceil((o + 1) size / outputs))``."""
    starts = tuple(o * size // outputs for o in range(outputs))
    ends = tuple(-(-(o + 1) * size // outputs) for o in range(outputs))
    return starts, tuple(e - s for s, e in zip(starts, ends))


def convolution_windows(
    size: tuple[int, int],
    kernel: tuple[int, int],
    stride: tuple[int, int],
    before: tuple[int, int],
    dilation: tuple[int, int],
    output: tuple[int, int],
) -> Windows:
    """The windows of a convolution (or of max and average pooling) over a plane of
    ``size``: per axis, ``output`` windows of ``kernel`` taps ``dilation`` apart, at
    ``o stride - before``."""
    h = regular_axis(output[0], kernel[0], stride[0], before[0])
    w = regular_axis(output[1], kernel[1], stride[1], before[1])
    return Windows(tuple(size), (h[0], w[0]), (h[1], w[1]), tuple(dilation))


def _axis_positions(
    starts: tuple[int, ...], lengths: tuple[int, ...], step: int, size: int, taps: int
) -> np.ndarray:
    """``(taps, outputs)`` positions on one axis, -1 where a tap is outside the axis or
    beyond its window's length."""
    k = np.arange(taps)[:, None]
    positions = np.asarray(starts)[None, :] + k * step
    inside = (positions >= 0) & (positions < size) & (k < np.asarray(lengths)[None, :])
    return np.where(inside, positions, -1)


@functools.lru_cache(maxsize=256)
def window_sources(windows: Windows) -> np.ndarray:
    """``(taps, outputs)`` int32 (the kernels' gathers vectorise twice as wide as with
    int64 beside float32 values): the position ``ih W + iw`` that tap ``kh KW + kw`` of
    output ``oh OW + ow`` reads, or -1 (padding, or beyond a shorter window). Read-only."""
    (height, width), (kh, kw) = windows.size, windows.taps
    rows = _axis_positions(windows.starts[0], windows.lengths[0], windows.steps[0], height, kh)
    cols = _axis_positions(windows.starts[1], windows.lengths[1], windows.steps[1], width, kw)
    # (kh, 1, oh, 1) and (1, kw, 1, ow) -> (kh, kw, oh, ow)
    r, c = rows[:, None, :, None], cols[None, :, None, :]
    table = np.where((r >= 0) & (c >= 0), r * width + c, -1).astype(np.int32)
    table = table.reshape(kh * kw, math.prod(windows.output))
    table.flags.writeable = False
    return table


@functools.lru_cache(maxsize=256)
def window_readers(windows: Windows) -> np.ndarray:
    """``(taps, H W)`` int32: the output that reads each position of the plane through each
    tap, or -1; for windows whose starts strictly increase (no two windows of a tap share a
    position). Read-only."""
    sources = window_sources(windows)
    taps, outputs = sources.shape
    readers = np.full((taps, math.prod(windows.size)), -1, np.int32)
    tap, output = np.nonzero(sources >= 0)
    readers[tap, sources[tap, output]] = output
    readers.flags.writeable = False
    return readers
