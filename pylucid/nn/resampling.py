"""Functions that move elements around: ``pad``, ``interpolate``, ``pixel_shuffle`` /
``pixel_unshuffle`` and ``unfold`` / ``fold``, with PyTorch's names, signatures and
semantics (re-exported by :mod:`pylucid.nn.functional`).

Each is a composition of differentiable ops - indexing by integer arrays (whose gradient
adds up repeated positions), its adjoint (:class:`~pylucid.ops.indexing.IndexAddBackward`),
products with constant weights, reshapes and permutations - so gradients of every order
come from those ops and every backend runs them.

Interpolation is separable: each spatial axis, the last first, is resampled by gathering
the source positions of its taps and adding them with their weights, the positions and
weights computed in NumPy with PyTorch's formulas and rounding (``align_corners``,
``scale_factor`` used as given unless ``recompute_scale_factor``), so the sums are those of
PyTorch's CPU kernels, in the same order.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from pylucid.factories import full, tensor
from pylucid.ops.convolution import as_ints
from pylucid.ops.indexing import IndexAddBackward, plan_index
from pylucid.ops.pooling import adaptive_avg_pool2d
from pylucid.ops.shape import concatenate
from pylucid.ops.wrapping import require_tensor
from pylucid.tensor import Tensor

__all__ = [
    "INTERPOLATE_MODES",
    "PAD_MODES",
    "fold",
    "interpolate",
    "pad",
    "pixel_shuffle",
    "pixel_unshuffle",
    "unfold",
]

PAD_MODES = ("constant", "reflect", "replicate", "circular")


def _pad_indices(size: int, before: int, after: int, mode: str) -> np.ndarray:
    """The source position of each padded position along one dimension."""
    positions = np.arange(-before, size + after)
    if mode == "replicate":
        return np.clip(positions, 0, size - 1)
    if mode == "circular":
        return positions % size
    period = 2 * (size - 1)  # reflect: mirror at the end elements, which are not repeated
    folded = np.abs(positions) % period if period else np.zeros_like(positions)
    return np.where(folded >= size, period - folded, folded)


def pad(
    input: Tensor,  # noqa: A002
    pad: Sequence[int],
    mode: str = "constant",
    value: float | None = None,
) -> Tensor:
    """Pad the last ``len(pad) // 2`` dimensions: ``pad = (left, right)`` for the last,
    then ``(top, bottom)`` for the one before, and so on, as PyTorch. ``"constant"`` fills
    with ``value`` (0 when None; negative amounts crop); ``"reflect"`` mirrors without
    repeating the edge, ``"replicate"`` repeats it, ``"circular"`` wraps around."""
    require_tensor("pad", "input", input)
    if mode not in PAD_MODES:
        raise ValueError(f"pad: mode must be one of {', '.join(PAD_MODES)}, got {mode!r}")
    if value and mode != "constant":
        raise ValueError(f"pad: padding mode {mode!r} doesn't take in a value argument")
    amounts = tuple(int(v) for v in pad)
    if len(amounts) % 2 or len(amounts) // 2 > input.ndim:
        raise ValueError(
            f"pad: expected an even number of amounts, two per padded dimension (at most "
            f"{input.ndim}), got {len(amounts)}"
        )
    out = input
    for k in range(len(amounts) // 2):
        axis, (before, after) = input.ndim - 1 - k, amounts[2 * k : 2 * k + 2]
        size = out.shape[axis]
        if mode == "constant":
            out = _pad_constant(out, axis, before, after, 0.0 if value is None else value)
            continue
        if before < 0 or after < 0:
            raise ValueError(f"pad: {mode} padding takes no negative amounts, got {amounts}")
        limit = size - 1 if mode == "reflect" else size
        if max(before, after) > limit or size == 0:
            raise ValueError(
                f"pad: {mode} padding of ({before}, {after}) is too large for dimension "
                f"{axis} of size {size} (at most {limit})"
            )
        out = out[(slice(None),) * axis + (_pad_indices(size, before, after, mode),)]
    return out


def _pad_constant(x: Tensor, axis: int, before: int, after: int, value: float) -> Tensor:
    lead = (slice(None),) * axis
    size = x.shape[axis]
    if before < 0 or after < 0:  # crop first
        x = x[(*lead, slice(max(-before, 0), size - max(-after, 0)))]
        before, after = max(before, 0), max(after, 0)
    if not before and not after:
        return x
    parts = []
    for amount in (before, after):
        shape = (*x.shape[:axis], amount, *x.shape[axis + 1 :])
        parts.append(full(shape, value, dtype=x.dtype, device=x.device))
    return concatenate([parts[0], x, parts[1]], axis=axis)


# -- interpolate ----------------------------------------------------------------------------
INTERPOLATE_MODES = ("nearest", "nearest-exact", "linear", "bilinear", "trilinear", "bicubic",
                     "area")  # fmt: skip
#: The number of spatial dimensions each interpolating mode works on.
_MODE_DIMS = {"linear": 1, "bilinear": 2, "trilinear": 3, "bicubic": 2}
#: The cubic convolution's coefficient (PyTorch's and OpenCV's choice).
_CUBIC_A = -0.75


def _opmath(x: Tensor) -> type[np.floating]:
    """The type PyTorch's CPU kernels compute source positions and weights in: float64 for
    float64 tensors, float32 for the others."""
    return np.float64 if x.dtype.name == "float64" else np.float32


def _scale(size: int, out: int, scale: float | None, kind: type[np.floating]) -> np.floating:
    """Source elements per output element: ``1 / scale_factor`` where one is used, else
    ``size / out`` (computed in ``kind``)."""
    if scale is not None and scale > 0:
        return kind(1.0 / scale)
    return kind(size) / kind(out)


def _nearest_taps(size: int, out: int, scale: float | None, exact: bool) -> np.ndarray:
    """The source position of each output position (``"nearest"``: ``floor(i s)``, with
    PyTorch's exact shortcuts for the same size and twice it; ``"nearest-exact"``:
    ``floor((i + 0.5) s)``), in float32 as PyTorch, at most ``size - 1``."""
    i = np.arange(out)
    if not exact and out == size:
        return i
    if not exact and out == 2 * size:
        return i >> 1
    s = _scale(size, out, scale, np.float32)
    if exact:  # ((i + 0.5) in double times the float scale, rounded to float, then floored)
        source = np.floor(((i + 0.5) * np.float64(s)).astype(np.float32))
    else:
        source = np.floor(i.astype(np.float32) * s)
    return np.minimum(source.astype(np.int64), size - 1)


def _source_positions(
    size: int, out: int, scale: float | None, align_corners: bool, cubic: bool,
    kind: type[np.floating],
) -> np.ndarray:  # fmt: skip
    """Where each output position falls in the input, as PyTorch's
    ``area_pixel_compute_source_index`` (in ``kind``): ``i (size - 1) / (out - 1)`` with
    ``align_corners``, else ``(i + 0.5) s - 0.5`` (clamped at 0 but for cubic)."""
    i = np.arange(out).astype(kind)
    if align_corners:
        ratio = kind(size - 1) / kind(out - 1) if out > 1 else kind(0)
        return ratio * i
    real = _scale(size, out, scale, kind) * (i + kind(0.5)) - kind(0.5)
    return real if cubic else np.maximum(real, kind(0))


def _floor_and_fraction(
    real: np.ndarray, size: int, kind: type[np.floating]
) -> tuple[np.ndarray, np.ndarray]:
    """PyTorch's ``guard_index_and_lambda``: the floor (taken in float32, at most
    ``size - 1``) and the fraction past it, clamped to [0, 1]."""
    index = np.minimum(np.floor(real.astype(np.float32)).astype(np.int64), size - 1)
    fraction = np.clip(real - index.astype(kind), kind(0), kind(1)).astype(kind)
    return index, fraction


def _linear_taps(
    size: int, out: int, scale: float | None, align_corners: bool, kind: type[np.floating]
) -> list[tuple[np.ndarray, np.ndarray]]:
    """Two taps ``(positions, weights)``: ``(1 - l) x[i0] + l x[i1]``."""
    real = _source_positions(size, out, scale, align_corners, False, kind)
    first, fraction = _floor_and_fraction(real, size, kind)
    second = first + (first < size - 1)
    return [(first, kind(1) - fraction), (second, fraction)]


def _cubic_taps(
    size: int, out: int, scale: float | None, align_corners: bool, kind: type[np.floating]
) -> list[tuple[np.ndarray, np.ndarray]]:
    """Four taps of the cubic convolution (``A = -0.75``) around each source position,
    positions clamped to the input (PyTorch's border rule)."""
    real = _source_positions(size, out, scale, align_corners, True, kind)
    first, t = _floor_and_fraction(real, size, kind)
    a, one = kind(_CUBIC_A), kind(1)

    def near(x: np.ndarray) -> np.ndarray:  # |x| <= 1
        return ((a + 2) * x - (a + 3)) * x * x + one

    def far(x: np.ndarray) -> np.ndarray:  # 1 < |x| < 2
        return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a

    weights = [far(t + one), near(t), near(one - t), far(one - t + one)]
    return [(np.clip(first - 1 + k, 0, size - 1), w.astype(kind)) for k, w in enumerate(weights)]


def _resample_axis(
    x: Tensor, axis: int, taps: list[tuple[np.ndarray, np.ndarray | None]]
) -> Tensor:
    """``sum_k x[..., positions_k, ...] * weights_k`` along ``axis``, added left to right."""
    lead = (slice(None),) * axis
    trailing = (1,) * (x.ndim - axis - 1)
    out = None
    for positions, weights in taps:
        term = x[(*lead, positions)]
        if weights is not None:
            term = term * tensor(weights.reshape(-1, *trailing), dtype=x.dtype, device=x.device)
        out = term if out is None else out + term
    return out


def _area(x: Tensor, sizes: tuple[int, ...]) -> Tensor:
    """Adaptive average pooling to ``sizes`` over 1, 2 or 3 spatial axes (the mean over a
    box is the mean over each of its axes in turn)."""
    n, c = x.shape[:2]
    if len(sizes) == 1:
        return adaptive_avg_pool2d(x.reshape(n, c, 1, x.shape[2]), (1, sizes[0])).reshape(
            n, c, sizes[0]
        )
    if len(sizes) == 2:
        return adaptive_avg_pool2d(x, sizes)
    depth = x.shape[2]
    planes = adaptive_avg_pool2d(x.reshape(n, c * depth, *x.shape[3:]), sizes[1:])
    rows = planes.reshape(n, c, depth, sizes[1] * sizes[2])
    return adaptive_avg_pool2d(rows, (sizes[0], sizes[1] * sizes[2])).reshape(n, c, *sizes)


def _per_axis(op: str, name: str, value: Any, spatial: int, shape: tuple[int, ...]) -> tuple:
    values = tuple(value) if isinstance(value, (tuple, list)) else (value,) * spatial
    if len(values) != spatial:
        raise ValueError(
            f"{op}: {name} {value!r} has {len(values)} entries but the input of shape "
            f"{shape} (N, C, *spatial) has {spatial} spatial dimensions"
        )
    return values


def interpolate(
    input: Tensor,  # noqa: A002
    size: int | Sequence[int] | None = None,
    scale_factor: float | Sequence[float] | None = None,
    mode: str = "nearest",
    align_corners: bool | None = None,
    recompute_scale_factor: bool | None = None,
    antialias: bool = False,
) -> Tensor:
    """Resample the spatial dimensions of ``input`` ``(N, C, *spatial)`` (1 to 3 of them)
    to ``size``, or to ``floor(in * scale_factor)``, as ``torch.nn.functional.interpolate``.

    Parameters
    ----------
    input : Tensor
        ``(N, C, L)``, ``(N, C, H, W)`` or ``(N, C, D, H, W)``; floating for the
        interpolating modes.
    size, scale_factor : int or float, or one per spatial dimension
        Exactly one of them.
    mode : str
        ``"nearest"`` (PyTorch's legacy rule ``floor(i * in / out)``), ``"nearest-exact"``
        (pixel centres), ``"linear"`` (3-d input), ``"bilinear"`` (4-d), ``"trilinear"``
        (5-d), ``"bicubic"`` (4-d; may overshoot the input's range, as PyTorch's) or
        ``"area"`` (adaptive average pooling).
    align_corners : bool, optional
        For the interpolating modes only (False when None): the corner elements' centres
        of input and output coincide, else their outer edges.
    recompute_scale_factor : bool, optional
        With ``scale_factor``: compute the positions from the sizes (``in / out``) rather
        than from ``1 / scale_factor``.
    antialias : bool
        Not supported (a NotImplementedError): PyTorch low-pass filters when
        downsampling, which pylucid does not.

    Returns
    -------
    Tensor
        ``(N, C, *size)`` of ``input``'s dtype; differentiable (each output element is a
        weighted sum of input elements, so the gradient adds ``g`` times the weights back).
    """
    op = "interpolate"
    require_tensor(op, "input", input)
    if mode not in INTERPOLATE_MODES:
        raise ValueError(f"{op}: mode must be one of {INTERPOLATE_MODES}, got {mode!r}")
    spatial = input.ndim - 2
    if spatial not in (1, 2, 3):
        raise ValueError(
            f"{op}: expected a 3-, 4- or 5-d input (N, C, *spatial), got shape {input.shape}"
        )
    if mode in _MODE_DIMS and _MODE_DIMS[mode] != spatial:
        raise ValueError(
            f"{op}: mode {mode!r} needs a {_MODE_DIMS[mode] + 2}-d input, got shape {input.shape}"
        )
    if mode in ("nearest", "nearest-exact", "area"):
        if align_corners is not None:
            raise ValueError(
                f"{op}: align_corners option can only be set with the interpolating modes: "
                f"linear | bilinear | bicubic | trilinear (got mode {mode!r})"
            )
    elif not input.dtype.is_floating_point:
        raise TypeError(f"{op}: mode {mode!r} needs a floating input, got {input.dtype.name}")
    if antialias:
        raise NotImplementedError(
            f"{op}: antialias=True is not supported by pylucid (PyTorch low-pass filters "
            f"before downsampling); downsample with mode='area' or avg_pool2d instead"
        )
    sizes, scales = _output_sizes(op, input, size, scale_factor, recompute_scale_factor)
    if mode == "area":
        return _area(input, sizes)
    kind, corners = _opmath(input), bool(align_corners)
    out = input
    for k in reversed(range(spatial)):  # the last axis first, as PyTorch's kernels
        axis, length, target, scale = 2 + k, input.shape[2 + k], sizes[k], scales[k]
        if mode in ("nearest", "nearest-exact"):
            positions = _nearest_taps(length, target, scale, mode == "nearest-exact")
            out = out[(slice(None),) * axis + (positions,)]
        elif mode == "bicubic":
            out = _resample_axis(out, axis, _cubic_taps(length, target, scale, corners, kind))
        elif target != length:  # (linear at the same size: PyTorch copies)
            out = _resample_axis(out, axis, _linear_taps(length, target, scale, corners, kind))
    return out


def _output_sizes(
    op: str, input: Tensor, size: Any, scale_factor: Any,  # noqa: A002
    recompute_scale_factor: bool | None,
) -> tuple[tuple[int, ...], tuple[float | None, ...]]:  # fmt: skip
    """The output's spatial sizes and the scale factors the positions use (None: from the
    sizes)."""
    spatial = input.ndim - 2
    if (size is None) == (scale_factor is None):
        raise ValueError(f"{op}: give exactly one of size and scale_factor")
    if size is not None:
        if recompute_scale_factor:
            raise ValueError(
                f"{op}: recompute_scale_factor is not meaningful with an explicit size"
            )
        sizes = tuple(int(s) for s in _per_axis(op, "size", size, spatial, input.shape))
        scales: tuple[float | None, ...] = (None,) * spatial
    else:
        factors = tuple(
            float(f) for f in _per_axis(op, "scale_factor", scale_factor, spatial, input.shape)
        )
        sizes = tuple(math.floor(n * f) for n, f in zip(input.shape[2:], factors))
        scales = (None,) * spatial if recompute_scale_factor else factors
    if min(sizes) < 1 or min(input.shape[2:]) < 1:
        raise ValueError(
            f"{op}: input and output sizes should be greater than 0, got input of shape "
            f"{input.shape} and output size {sizes}"
        )
    return sizes, scales


# -- pixel shuffle ---------------------------------------------------------------------------
def _factor(op: str, name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{op}: {name} must be a positive int, got {value!r}")
    return value


def pixel_shuffle(input: Tensor, upscale_factor: int) -> Tensor:  # noqa: A002
    """``(*, C r^2, H, W)`` to ``(*, C, H r, W r)``: each group of ``r^2`` channels becomes
    an ``r x r`` block of one channel (channel ``c r^2 + i r + j`` to offset ``(i, j)``),
    as ``torch.nn.functional.pixel_shuffle``."""
    op = "pixel_shuffle"
    require_tensor(op, "input", input)
    r = _factor(op, "upscale_factor", upscale_factor)
    if input.ndim < 3 or input.shape[-3] % (r * r):
        raise ValueError(
            f"{op}: expected an input (*, C * {r * r}, H, W) whose channels divide by "
            f"upscale_factor^2 = {r * r}, got shape {input.shape}"
        )
    *lead, channels, h, w = input.shape
    c, k = channels // (r * r), len(lead)
    blocks = input.reshape(*lead, c, r, r, h, w)
    order = (*range(k), k, k + 3, k + 1, k + 4, k + 2)  # (*, C, H, r, W, r)
    return blocks.permute(*order).reshape(*lead, c, h * r, w * r)


def pixel_unshuffle(input: Tensor, downscale_factor: int) -> Tensor:  # noqa: A002
    """``(*, C, H r, W r)`` to ``(*, C r^2, H, W)``, the inverse of :func:`pixel_shuffle`,
    as ``torch.nn.functional.pixel_unshuffle``."""
    op = "pixel_unshuffle"
    require_tensor(op, "input", input)
    r = _factor(op, "downscale_factor", downscale_factor)
    if input.ndim < 3 or input.shape[-2] % r or input.shape[-1] % r:
        raise ValueError(
            f"{op}: expected an input (*, C, H, W) whose H and W divide by "
            f"downscale_factor = {r}, got shape {input.shape}"
        )
    *lead, c, hr, wr = input.shape
    h, w, k = hr // r, wr // r, len(lead)
    blocks = input.reshape(*lead, c, h, r, w, r)
    order = (*range(k), k, k + 2, k + 4, k + 1, k + 3)  # (*, C, r, r, H, W)
    return blocks.permute(*order).reshape(*lead, c * r * r, h, w)


# -- unfold / fold ---------------------------------------------------------------------------
def _block_geometry(
    op: str, kernel_size: Any, dilation: Any, padding: Any, stride: Any
) -> tuple[tuple[int, int], ...]:
    geometry = tuple(
        as_ints(op, name, value, 2)
        for name, value in (("kernel_size", kernel_size), ("dilation", dilation),
                            ("padding", padding), ("stride", stride))
    )  # fmt: skip
    kernel, dilations, pads, strides = geometry
    if min(kernel + dilations + strides) < 1 or min(pads) < 0:
        raise ValueError(
            f"{op}: kernel_size, dilation and stride must be positive and padding "
            f"non-negative, got kernel_size={kernel}, dilation={dilations}, padding={pads}, "
            f"stride={strides}"
        )
    return geometry


def _block_positions(
    op: str, size: tuple[int, int], geometry: tuple[tuple[int, int], ...]
) -> tuple[np.ndarray, np.ndarray, tuple[int, int]]:
    """The padded-input rows ``(kh, 1, oh, 1)`` and columns ``(1, kw, 1, ow)`` that each
    kernel offset reads at each block position, and the blocks per axis ``(oh, ow)``."""
    kernel, dilations, pads, strides = geometry
    counts = tuple(
        (size[a] + 2 * pads[a] - dilations[a] * (kernel[a] - 1) - 1) // strides[a] + 1
        for a in (0, 1)
    )
    if min(counts) < 1:
        raise ValueError(
            f"{op}: a kernel of {kernel} (dilation {dilations}) does not fit the spatial size "
            f"{size} padded by {pads}: no block positions"
        )
    offsets = [np.arange(kernel[a])[:, None] * dilations[a] for a in (0, 1)]
    starts = [np.arange(counts[a])[None, :] * strides[a] for a in (0, 1)]
    rows = (offsets[0] + starts[0])[:, None, :, None]
    columns = (offsets[1] + starts[1])[None, :, None, :]
    return rows, columns, counts


def unfold(
    input: Tensor,  # noqa: A002
    kernel_size: int | tuple[int, int],
    dilation: int | tuple[int, int] = 1,
    padding: int | tuple[int, int] = 0,
    stride: int | tuple[int, int] = 1,
) -> Tensor:
    """The sliding blocks of ``input`` ``(N, C, H, W)`` (or ``(C, H, W)``) as columns
    ``(N, C kh kw, L)``, ``L`` the number of block positions (im2col), as
    ``torch.nn.functional.unfold``: row ``c kh kw + i kw + j`` holds the element at kernel
    offset ``(i, j)`` of channel ``c``, zero in the padding. The gradient adds the columns
    back where they were read (:func:`fold`)."""
    op = "unfold"
    require_tensor(op, "input", input)
    if input.ndim not in (3, 4):
        raise ValueError(f"{op}: expected a 3-d or 4-d input (N, C, H, W), got {input.shape}")
    x = input.reshape(1, *input.shape) if input.ndim == 3 else input
    geometry = _block_geometry(op, kernel_size, dilation, padding, stride)
    (kh, kw), _, (ph, pw), _ = geometry
    rows, columns, (oh, ow) = _block_positions(op, x.shape[2:], geometry)
    padded = pad(x, (pw, pw, ph, ph)) if ph or pw else x
    n, c = x.shape[:2]
    out = padded[:, :, rows, columns].reshape(n, c * kh * kw, oh * ow)
    return out.reshape(out.shape[1:]) if input.ndim == 3 else out


def fold(
    input: Tensor,  # noqa: A002
    output_size: int | tuple[int, int],
    kernel_size: int | tuple[int, int],
    dilation: int | tuple[int, int] = 1,
    padding: int | tuple[int, int] = 0,
    stride: int | tuple[int, int] = 1,
) -> Tensor:
    """The inverse layout of :func:`unfold`: columns ``(N, C kh kw, L)`` (or
    ``(C kh kw, L)``) summed into an ``(N, C, *output_size)`` tensor, overlapping blocks
    adding up (col2im), as ``torch.nn.functional.fold``. Its gradient reads the blocks back
    (:func:`unfold`)."""
    op = "fold"
    require_tensor(op, "input", input)
    if input.ndim not in (2, 3):
        raise ValueError(f"{op}: expected a 2-d or 3-d input (N, C * kh * kw, L), got "
                         f"{input.shape}")  # fmt: skip
    x = input.reshape(1, *input.shape) if input.ndim == 2 else input
    size = as_ints(op, "output_size", output_size, 2)
    geometry = _block_geometry(op, kernel_size, dilation, padding, stride)
    (kh, kw), _, (ph, pw), _ = geometry
    rows, columns, (oh, ow) = _block_positions(op, size, geometry)
    n, channels, length = x.shape
    if channels % (kh * kw) or length != oh * ow:
        raise ValueError(
            f"{op}: expected an input (N, C * {kh * kw}, {oh * ow}) for a kernel of "
            f"{(kh, kw)} over {size} ({oh} x {ow} blocks), got shape {input.shape}"
        )
    c = channels // (kh * kw)
    blocks = x.reshape(n, c, kh, kw, oh, ow)
    plan = plan_index(op, (slice(None), slice(None), rows, columns),
                      (n, c, size[0] + 2 * ph, size[1] + 2 * pw))  # fmt: skip
    out = IndexAddBackward.apply(blocks, plan=plan)
    if ph or pw:
        out = out[:, :, ph : ph + size[0], pw : pw + size[1]]
    return out.reshape(out.shape[1:]) if input.ndim == 2 else out
