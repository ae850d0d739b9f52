"""Op records of the layers: convolution, pooling, layer and batch normalisation.

Each record fixes one geometry that exercises the options (stride, padding, dilation and
groups of conv2d; stride and padding of the pools; an affine layer_norm); the references
are direct float64 NumPy loops over the kernel taps. ``tests/test_layers.py`` covers the
other options against PyTorch. Forward tolerances in float32: the sums of products of
conv2d (up to 12 terms of magnitude ~1) and of the averages carry a few ULPs of float32
rounding; layer_norm's ``1 / sqrt(var + eps)`` amplifies the rounding of inputs near the
mean, hence 1e-5 (batch_norm's likewise).
"""

from __future__ import annotations

import numpy as np

import pylucid as pl
from pylucid.opinfo.records import OpInfo, torch_module, torch_op, uniform

_F = pl.nn.functional
_STRIDE, _PADDING, _DILATION = (2, 1), (1, 0), (1, 2)


def _groups(x_channels: int, w_channels: int) -> int:
    """The groups that make the channels fit (1 for a weight without input channels, which
    PyTorch refuses itself)."""
    return x_channels // w_channels if w_channels else 1


def _conv(x: pl.Tensor, w: pl.Tensor) -> pl.Tensor:
    groups = _groups(x.shape[1], w.shape[1])
    return _F.conv2d(x, w, stride=_STRIDE, padding=_PADDING, dilation=_DILATION, groups=groups)


def _taps(padded: np.ndarray, kernel: tuple[int, int], stride, dilation, output):
    """Each tap's ``(N, C, OH, OW)`` view of the padded input, with its tap index."""
    for i in range(kernel[0]):
        for j in range(kernel[1]):
            top, left = i * dilation[0], j * dilation[1]
            yield (i, j), padded[
                :,
                :,
                top : top + (output[0] - 1) * stride[0] + 1 : stride[0],
                left : left + (output[1] - 1) * stride[1] + 1 : stride[1],
            ]


def _output(size, kernel, stride, padding, dilation):
    return tuple(
        (size[a] + 2 * padding[a] - dilation[a] * (kernel[a] - 1) - 1) // stride[a] + 1
        for a in (0, 1)
    )


def _conv_reference(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    groups = _groups(x.shape[1], w.shape[1])
    (ph, pw), kernel = _PADDING, w.shape[2:]
    padded = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    output = _output(x.shape[2:], kernel, _STRIDE, _PADDING, _DILATION)
    out = np.zeros((x.shape[0], w.shape[0], *output))
    per_in, per_out = w.shape[1], w.shape[0] // groups
    for (i, j), patch in _taps(padded, kernel, _STRIDE, _DILATION, output):
        for g in range(groups):
            inputs = patch[:, g * per_in : (g + 1) * per_in]
            weights = w[g * per_out : (g + 1) * per_out, :, i, j]
            out[:, g * per_out : (g + 1) * per_out] += np.einsum("nchw,oc->nohw", inputs, weights)
    return out


def _torch_conv(x, w):  # noqa: ANN001, ANN202  (torch.Tensors: torch is imported only here)
    groups = _groups(x.shape[1], w.shape[1])
    return torch_module().nn.functional.conv2d(
        x, w, stride=_STRIDE, padding=_PADDING, dilation=_DILATION, groups=groups
    )


_POOL = {"kernel_size": 3, "stride": 2, "padding": 1}


def _pool_reference(x: np.ndarray, fill: float, combine) -> np.ndarray:  # noqa: ANN001
    if x.ndim == 3:  # unbatched (C, H, W)
        return _pool_reference(x[None], fill, combine)[0]
    p = _POOL["padding"]
    padded = np.pad(x, ((0, 0), (0, 0), (p, p), (p, p)), constant_values=fill)
    kernel = (_POOL["kernel_size"],) * 2
    stride = (_POOL["stride"],) * 2
    output = _output(x.shape[2:], kernel, stride, (p, p), (1, 1))
    return combine(np.stack([t for _, t in _taps(padded, kernel, stride, (1, 1), output)]))


def _max_reference(x: np.ndarray) -> np.ndarray:
    return _pool_reference(x, -np.inf, lambda taps: taps.max(axis=0))


def _avg_reference(x: np.ndarray) -> np.ndarray:  # count_include_pad: every divisor is 9
    return _pool_reference(x, 0.0, lambda taps: taps.sum(axis=0) / taps.shape[0])


_ADAPTIVE = (3, 2)


def _adaptive_reference(x: np.ndarray) -> np.ndarray:
    (h, w), (oh, ow) = x.shape[2:], _ADAPTIVE
    out = np.empty((*x.shape[:2], oh, ow))
    for i in range(oh):
        top, bottom = (i * h) // oh, -(-((i + 1) * h) // oh)
        for j in range(ow):
            left, right = (j * w) // ow, -(-((j + 1) * w) // ow)
            out[:, :, i, j] = x[:, :, top:bottom, left:right].mean(axis=(2, 3))
    return out


def _layer_norm(x: pl.Tensor, w: pl.Tensor, b: pl.Tensor) -> pl.Tensor:
    return _F.layer_norm(x, w.shape, w, b)


def _layer_norm_reference(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> np.ndarray:
    axes = tuple(range(x.ndim - w.ndim, x.ndim))
    centred = x - x.mean(axis=axes, keepdims=True)
    var = (centred**2).mean(axis=axes, keepdims=True)
    return centred / np.sqrt(var + 1e-5) * w + b


def _torch_layer_norm(x, w, b):  # noqa: ANN001, ANN202
    return torch_module().nn.functional.layer_norm(x, tuple(w.shape), w, b)


def _batch_norm(x: pl.Tensor, w: pl.Tensor, b: pl.Tensor) -> pl.Tensor:
    return _F.batch_norm(x, None, None, w, b, training=True)


def _batch_norm_reference(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> np.ndarray:
    axes, channel = (0, *range(2, x.ndim)), (1, -1) + (1,) * (x.ndim - 2)
    centred = x - x.mean(axis=axes, keepdims=True)
    var = (centred**2).mean(axis=axes, keepdims=True)
    return centred / np.sqrt(var + 1e-5) * w.reshape(channel) + b.reshape(channel)


def _torch_batch_norm(x, w, b):  # noqa: ANN001, ANN202
    # pylucid's rule where PyTorch checks nothing of an empty input: (N, C, ...) whose C the
    # weight and bias fit (PyTorch takes a (0,) input, or (0, 0) with a weight of 2)
    if x.dim() < 2 or not x.shape[1] == w.shape[0] == b.shape[0]:
        raise ValueError(f"batch_norm: input {tuple(x.shape)}, weight {tuple(w.shape)}")
    return torch_module().nn.functional.batch_norm(x, None, None, w, b, training=True)


RECORDS: tuple[OpInfo, ...] = (
    OpInfo(
        "conv2d",
        _conv,
        _conv_reference,
        (uniform(-1, 1), uniform(-1, 1)),
        (((2, 4, 5, 6), (6, 2, 3, 2)), ((1, 3, 4, 4), (2, 3, 2, 2))),
        rtol=1e-5,
        atol=1e-6,
        torch=_torch_conv,
    ),
    OpInfo(
        "max_pool2d",
        lambda x: _F.max_pool2d(x, **_POOL),
        _max_reference,
        (uniform(-2, 2),),
        (((2, 3, 5, 6),), ((3, 4, 4),)),
        torch=torch_op("nn.functional.max_pool2d", **_POOL),
    ),
    OpInfo(
        "avg_pool2d",
        lambda x: _F.avg_pool2d(x, **_POOL),
        _avg_reference,
        (uniform(-2, 2),),
        (((2, 3, 5, 6),), ((3, 4, 4),)),
        torch=torch_op("nn.functional.avg_pool2d", **_POOL),
    ),
    OpInfo(
        "adaptive_avg_pool2d",
        lambda x: _F.adaptive_avg_pool2d(x, _ADAPTIVE),
        _adaptive_reference,
        (uniform(-2, 2),),
        (((2, 3, 7, 5),), ((1, 2, 2, 3),)),
        torch=torch_op("nn.functional.adaptive_avg_pool2d", _ADAPTIVE),
    ),
    OpInfo(
        "layer_norm",
        _layer_norm,
        _layer_norm_reference,
        (uniform(-2, 2), uniform(0.5, 1.5), uniform(-1, 1)),
        (((3, 5), (5,), (5,)), ((2, 3, 4), (3, 4), (3, 4))),
        rtol=1e-5,
        atol=1e-5,
        torch=_torch_layer_norm,
    ),
    OpInfo(
        "batch_norm",
        _batch_norm,
        _batch_norm_reference,
        (uniform(-2, 2), uniform(0.5, 1.5), uniform(-1, 1)),
        (((4, 3, 5), (3,), (3,)), ((3, 2, 3, 4), (2,), (2,)), ((5, 4), (4,), (4,))),
        rtol=1e-5,
        atol=1e-5,
        torch=_torch_batch_norm,
    ),
)
