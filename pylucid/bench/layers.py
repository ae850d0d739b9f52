"""Layer scenarios: one model layer forward and backward, in pylucid, PyTorch and MLX.

Each is a program scenario of :mod:`pylucid.bench.programs` (timed the same ways, reported
with the others) doing one call of a layer on fixed seeded float32 inputs and the backward
from a fixed upstream gradient, every input's gradient computed:

``conv2d_1to8``
    ``conv2d`` of (32, 1, 28, 28) with (8, 1, 3, 3), padding 1 (a first CNN layer on MNIST).
``conv2d_16to32``
    ``conv2d`` of (32, 16, 14, 14) with (32, 16, 3, 3), padding 1.
``max_pool2d``
    2 x 2 max pooling of (32, 16, 28, 28).
``layer_norm``
    ``layer_norm`` over the last axis of (256, 512), with weight and bias.
``cross_entropy``
    ``cross_entropy`` of (256, 10) logits against class indices (mean).

Each call returns the first element of the input's gradient (which the tests compare across
libraries). pylucid and PyTorch run eagerly through their autograd (gradients set to None
each call, so no accumulation is timed); MLX runs ``mx.value_and_grad`` of ``sum(layer(...)
* g)`` and ``mx.eval`` of the value and gradients, in its own channels-last layout for
convolution and pooling (``mlx.nn``'s pool, ``mx.fast.layer_norm``,
``mlx.nn.losses.cross_entropy``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

import pylucid as pl

__all__ = ["LAYER_SCENARIOS", "build_layer_program"]

#: name -> description, in the order they are reported.
LAYER_SCENARIOS: dict[str, str] = {
    "conv2d_1to8": "conv2d (32, 1, 28, 28) x (8, 1, 3, 3), padding 1, float32: fwd + bwd",
    "conv2d_16to32": "conv2d (32, 16, 14, 14) x (32, 16, 3, 3), padding 1, float32: fwd + bwd",
    "max_pool2d": "max_pool2d 2 x 2 of (32, 16, 28, 28) float32: fwd + bwd",
    "layer_norm": "layer_norm over 512 of (256, 512) float32, affine: fwd + bwd",
    "cross_entropy": "cross_entropy (256, 10) float32, class indices, mean: fwd + bwd",
}

_CONV_SHAPES = {
    "conv2d_1to8": ((32, 1, 28, 28), (8, 1, 3, 3)),
    "conv2d_16to32": ((32, 16, 14, 14), (32, 16, 3, 3)),
}


def _inputs(name: str) -> tuple[list[np.ndarray], np.ndarray | None]:
    """The float32 inputs of scenario ``name`` and its integer targets (cross_entropy)."""
    rng = np.random.default_rng(0)

    def normal(*shape: int) -> np.ndarray:
        return rng.standard_normal(shape).astype(np.float32)

    if name in _CONV_SHAPES:
        x, w = _CONV_SHAPES[name]
        return [normal(*x), normal(*w) / np.float32(np.sqrt(np.prod(w[1:])))], None
    if name == "max_pool2d":
        return [normal(32, 16, 28, 28)], None
    if name == "layer_norm":
        return [normal(256, 512), normal(512), normal(512)], None
    return [normal(256, 10)], rng.integers(0, 10, 256)


def _eager_layer(name: str, functional: Any, labels: Any) -> Callable[..., Any]:
    """The layer of scenario ``name`` with ``functional`` (pylucid's or PyTorch's)."""
    if name == "cross_entropy":
        return lambda x: functional.cross_entropy(x, labels)
    if name in _CONV_SHAPES:
        return lambda x, w: functional.conv2d(x, w, padding=1)
    if name == "max_pool2d":
        return lambda x: functional.max_pool2d(x, 2)
    if name == "layer_norm":
        return lambda x, w, b: functional.layer_norm(x, (512,), w, b)
    raise ValueError(name)


def _eager(name: str, library: str, module: Any) -> Callable[[], Any]:
    arrays, target = _inputs(name)
    lib = pl if library == "pylucid" else module
    functional = pl.nn.functional if library == "pylucid" else module.nn.functional
    tensors = [lib.from_numpy(a).requires_grad_() for a in arrays]
    layer = _eager_layer(name, functional, None if target is None else lib.from_numpy(target))
    upstream = None  # (the loss is a scalar)
    if name != "cross_entropy":
        shape = tuple(layer(*tensors).shape)
        upstream = lib.from_numpy(
            np.random.default_rng(1).standard_normal(shape).astype(np.float32)
        )

    corner = (0,) * len(arrays[0].shape)

    def call() -> Any:
        for t in tensors:
            t.grad = None
        layer(*tensors).backward(upstream)
        return tensors[0].grad[corner]  # (one element of the input's gradient: compared)

    return call


def _mlx(name: str, mx: Any) -> Callable[[], Any]:
    import mlx.nn as nn

    arrays, target = _inputs(name)
    if name in _CONV_SHAPES or name == "max_pool2d":  # MLX's layout: channels last
        arrays = [np.ascontiguousarray(a.transpose(0, 2, 3, 1)) for a in arrays]
    inputs = [mx.array(a) for a in arrays]
    if name in _CONV_SHAPES:
        layer = lambda x, w: mx.conv2d(x, w, padding=1)  # noqa: E731
    elif name == "max_pool2d":
        layer = nn.MaxPool2d(2)
    elif name == "layer_norm":
        layer = lambda x, w, b: mx.fast.layer_norm(x, w, b, 1e-5)  # noqa: E731
    else:
        labels = mx.array(target)
        layer = lambda x: nn.losses.cross_entropy(x, labels, reduction="mean")  # noqa: E731
    shape = layer(*inputs).shape
    channels_last = name in _CONV_SHAPES or name == "max_pool2d"
    if channels_last:  # the eager programs' upstream values, in MLX's layout
        n, h, w, c = shape
        seed = np.random.default_rng(1).standard_normal((n, c, h, w)).astype(np.float32)
        seed = np.ascontiguousarray(seed.transpose(0, 2, 3, 1))
    elif name == "cross_entropy":  # a scalar loss: the eager backward seeds it with 1
        seed = np.float32(1.0)
    else:
        seed = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    upstream = mx.array(seed)
    arguments = list(range(len(inputs)))
    value_and_grad = mx.value_and_grad(lambda *xs: mx.sum(layer(*xs) * upstream), argnums=arguments)

    corner = (0,) * len(arrays[0].shape)  # (the same element in the channels-last layout)

    def call() -> Any:
        value, grads = value_and_grad(*inputs)
        mx.eval(value, grads)
        first = grads[0] if isinstance(grads, (list, tuple)) else grads  # (one argument)
        return first[corner]

    return call


def build_layer_program(name: str, library: str, module: Any) -> Callable[[], Any]:
    """A callable doing one forward and backward of layer scenario ``name`` in ``library``
    (``"pylucid"``, ``"torch"`` or ``"mlx"``, whose module is ``module``)."""
    if name not in LAYER_SCENARIOS:
        raise ValueError(f"unknown layer scenario {name!r}; choose from {tuple(LAYER_SCENARIOS)}")
    if library == "mlx":
        return _mlx(name, module)
    return _eager(name, library, module)
