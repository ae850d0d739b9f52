"""Convolution, pooling and normalisation layers (pylucid.nn.functional) against PyTorch.

float64 values and gradients to rtol 1e-10 (sums of at most a few hundred products of O(1)
terms, in another order than PyTorch's: a few hundred ULPs at worst, far below 1e-10),
second derivatives by gradgradcheck, float32 to a stated bound, max pooling's choice of
position (ties, NaN, -inf) exactly, the running statistics of batch_norm, and the errors
of bad input - each before any kernel runs. The op-table tests (tests/test_ops_table.py)
cover one geometry per op on both backends; these cover the options.

PyTorch is the oracle where it is installed; these tests skip, saying so, where it is not.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

import pylucid as pl
import pylucid.nn.functional as F  # noqa: N812  (PyTorch's spelling)
from tests.conftest import TORCH_REASON

torch = pytest.importorskip("torch", reason=TORCH_REASON)
TF = torch.nn.functional

RTOL = 1e-10
#: float32 against PyTorch's float32: sums of K = C/groups x KH x KW products (at most 144
#: here) accumulate in float32 in both, in different orders: |error| <= K * 2^-24 * sum|terms|
#: each; relative to the output's scale, 144 * 2^-23 ~ 2e-5.
RTOL_F32 = 2e-5


def _compare(actual: pl.Tensor, expected: torch.Tensor, rtol: float = RTOL) -> None:
    want = expected.detach().numpy()
    scale = max(float(np.abs(want).max(initial=0.0)), 1.0)
    np.testing.assert_allclose(actual.numpy(), want, rtol=rtol, atol=rtol * scale)


def _both(rng: np.random.Generator, device: str, *shapes: tuple, grad: bool = True):
    """Each shape as a float64 (pylucid, torch) pair of the same values."""
    pairs = []
    for shape in shapes:
        a = rng.standard_normal(shape)
        pairs.append(
            (
                pl.tensor(a, device=device, requires_grad=grad),
                torch.tensor(a, requires_grad=grad),
            )
        )
    return pairs


def _check_against_torch(rng, device, pl_fn, torch_fn, *shapes, rtol=RTOL) -> None:  # noqa: ANN001
    """Values and the gradients of every input, with a random upstream gradient."""
    pairs = _both(rng, device, *shapes)
    out = pl_fn(*[p for p, _ in pairs])
    expected = torch_fn(*[t for _, t in pairs])
    _compare(out, expected, rtol)
    g = rng.standard_normal(tuple(expected.shape))
    out.backward(pl.tensor(g, device=device))
    expected.backward(torch.tensor(g))
    for p, t in pairs:
        _compare(p.grad, t.grad, rtol)


CONV_CASES = [
    pytest.param((2, 3, 7, 6), (4, 3, 3, 3), {}, id="plain"),
    pytest.param((2, 4, 9, 8), (6, 2, 3, 2), {"stride": (2, 3), "padding": (1, 2),
                 "dilation": (2, 1), "groups": 2}, id="all-options"),  # fmt: skip
    pytest.param((1, 3, 5, 5), (2, 3, 4, 4), {"padding": "same"}, id="same-even-kernel"),
    pytest.param((1, 2, 6, 7), (2, 2, 3, 3), {"padding": "same", "dilation": 2}, id="same-dil"),
    pytest.param((2, 4, 5, 5), (4, 1, 3, 3), {"groups": 4, "padding": 1}, id="depthwise"),
    pytest.param((3, 2, 4, 4), (5, 2, 1, 1), {"stride": 2}, id="1x1-stride"),
    pytest.param((2, 3, 5, 5), (4, 3, 3, 3), {"padding": "valid"}, id="valid"),
]


@pytest.mark.filterwarnings("ignore:Using padding='same' with even kernel:UserWarning")
@pytest.mark.parametrize(("x_shape", "w_shape", "options"), CONV_CASES)
def test_conv2d_matches_torch(x_shape, w_shape, options, device, rng) -> None:
    _check_against_torch(
        rng,
        device,
        lambda x, w, b: F.conv2d(x, w, b, **options),
        lambda x, w, b: TF.conv2d(x, w, b, **options),
        x_shape,
        w_shape,
        (w_shape[0],),
    )


@pytest.mark.parametrize(("x_shape", "w_shape", "options"), CONV_CASES[:3])
def test_conv2d_second_derivatives(x_shape, w_shape, options, device, rng) -> None:
    x = pl.tensor(rng.standard_normal(x_shape), device=device, requires_grad=True)
    w = pl.tensor(rng.standard_normal(w_shape), device=device, requires_grad=True)
    assert pl.graph.gradgradcheck(lambda a, b: F.conv2d(a, b, **options), [x, w])


def test_conv2d_float32_within_bound(device, rng) -> None:
    x, w = rng.standard_normal((4, 16, 9, 9)), rng.standard_normal((8, 16, 3, 3))
    out = F.conv2d(pl.tensor(x, dtype=pl.float32, device=device),
                   pl.tensor(w, dtype=pl.float32, device=device), padding=1)  # fmt: skip
    expected = TF.conv2d(torch.tensor(x, dtype=torch.float32),
                         torch.tensor(w, dtype=torch.float32), padding=1)  # fmt: skip
    assert out.dtype is pl.float32
    _compare(out, expected, RTOL_F32)


def test_conv1d_and_unbatched_inputs(device, rng) -> None:
    _check_against_torch(
        rng,
        device,
        lambda x, w, b: F.conv1d(x, w, b, stride=2, padding=1, dilation=2, groups=2),
        lambda x, w, b: TF.conv1d(x, w, b, stride=2, padding=1, dilation=2, groups=2),
        (3, 4, 11),
        (6, 2, 3),
        (6,),
    )
    _check_against_torch(
        rng, device, lambda x, w: F.conv1d(x, w, padding="same"),
        lambda x, w: TF.conv1d(x, w, padding="same"), (2, 9), (3, 2, 4),
    )  # fmt: skip
    _check_against_torch(
        rng, device, lambda x, w: F.conv2d(x, w, padding=1),
        lambda x, w: TF.conv2d(x, w, padding=1), (2, 5, 5), (3, 2, 3, 3),
    )  # fmt: skip


def test_conv2d_half_inputs_compute_in_float32(device, rng) -> None:
    x, w = rng.standard_normal((2, 3, 6, 6)), rng.standard_normal((4, 3, 3, 3))
    out = F.conv2d(pl.tensor(x, dtype=pl.float16, device=device),
                   pl.tensor(w, dtype=pl.float16, device=device))  # fmt: skip
    assert out.dtype is pl.float16
    expected = TF.conv2d(torch.tensor(x).half().double(), torch.tensor(w).half().double())
    # float16 result of a float32 computation: within 2 ULP of float16 of the scale
    _compare(out.to(pl.float64), expected, 2 * 2.0**-10)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda x, w: F.conv2d(x, w[:, :2]), "3 channels"),
        (lambda x, w: F.conv2d(x, w, groups=2), "groups=2"),
        (lambda x, w: F.conv2d(x[:, :, :2, :2], w), "spans 3 elements"),
        (lambda x, w: F.conv2d(x, w, dilation=4), "spans 9 elements"),
        (lambda x, w: F.conv2d(x, w, stride=2, padding="same"), "needs stride 1"),
        (lambda x, w: F.conv2d(x, w, padding="full"), "'valid', 'same'"),
        (lambda x, w: F.conv2d(x, w, padding=-1), "non-negative"),
        (lambda x, w: F.conv2d(x, w, stride=0), "positive"),
        (lambda x, w: F.conv2d(x, w[0]), "4-d weight"),
        (lambda x, w: F.conv2d(x[0, 0], w), "3-d (unbatched) or 4-d"),
        (lambda x, w: F.conv2d(x, w, pl.zeros(3)), "bias of shape (3,)"),
        (lambda x, w: F.conv2d(x, w.to(pl.float64)), "one dtype"),
        (lambda x, w: F.conv2d(x.to(pl.int64), w.to(pl.int64)), "floating-point"),
        (lambda x, w: F.conv1d(x[:, :2, 0], w[:, :, 0]), "conv1d: input of shape"),
        (lambda x, w: F.conv1d(x[:, :, 0, :2], w[:, :, 0]), "conv1d: the kernel"),
    ],
)
def test_conv_errors(call, message) -> None:  # noqa: ANN001
    x, w = pl.zeros((2, 3, 5, 5)), pl.zeros((4, 3, 3, 3))
    with pytest.raises((ValueError, TypeError), match=re.escape(message)):
        call(x, w)


MAX_CASES = [
    pytest.param({"kernel_size": 2}, id="2x2"),
    pytest.param({"kernel_size": 3, "stride": 2, "padding": 1}, id="pad"),
    pytest.param({"kernel_size": (3, 2), "stride": (2, 1), "padding": (1, 1),
                  "ceil_mode": True}, id="ceil"),  # fmt: skip
    pytest.param({"kernel_size": 2, "stride": 1, "dilation": 2}, id="dilation"),
    pytest.param({"kernel_size": 3, "stride": 2, "ceil_mode": True}, id="ceil-overhang"),
    pytest.param({"kernel_size": (3, 2)}, id="3x2"),  # (a row left over)
    pytest.param({"kernel_size": (2, 3)}, id="2x3"),  # (a row and 2 columns left over)
]


@pytest.mark.parametrize("options", MAX_CASES)
def test_max_pool2d_matches_torch(options, device, rng) -> None:
    _check_against_torch(rng, device, lambda x: F.max_pool2d(x, **options),
                         lambda x: TF.max_pool2d(x, **options), (2, 3, 7, 8))  # fmt: skip
    x = rng.standard_normal((2, 3, 7, 8))
    _, index = F.max_pool2d(pl.tensor(x, device=device), return_indices=True, **options)
    _, expected = TF.max_pool2d(torch.tensor(x), return_indices=True, **options)
    assert index.dtype is pl.int64
    np.testing.assert_array_equal(index.numpy(), expected.numpy())


def test_max_pool2d_chooses_as_torch(device) -> None:
    """Ties go to the first position, NaN wins (the last NaN), -inf windows and windows
    hanging over the padding choose their first position inside the input."""
    planes = np.zeros((3, 1, 4, 4))
    planes[0, 0, 1, 1] = planes[0, 0, 2, 3] = np.nan
    planes[0, 0, 3, 2] = -np.inf
    planes[1] = 1.0
    planes[2] = -np.inf
    for options in ({"kernel_size": 3, "stride": 1, "padding": 1}, {"kernel_size": 2}):
        out, index = F.max_pool2d(pl.tensor(planes, device=device), return_indices=True,
                                  **options)  # fmt: skip
        want, want_index = TF.max_pool2d(torch.tensor(planes), return_indices=True, **options)
        np.testing.assert_array_equal(out.numpy(), want.numpy())
        np.testing.assert_array_equal(index.numpy(), want_index.numpy())
        x = pl.tensor(planes, device=device, requires_grad=True)
        t = torch.tensor(planes, requires_grad=True)
        F.max_pool2d(x, **options).sum().backward()
        TF.max_pool2d(t, **options).sum().backward()
        np.testing.assert_array_equal(x.grad.numpy(), t.grad.numpy())


AVG_CASES = [
    pytest.param({"kernel_size": 2}, id="2x2"),
    pytest.param({"kernel_size": 3, "stride": 2, "padding": 1}, id="pad"),
    pytest.param({"kernel_size": 3, "stride": 2, "padding": 1, "count_include_pad": False},
                 id="pad-excluded"),  # fmt: skip
    pytest.param({"kernel_size": (3, 2), "stride": (2, 1), "padding": (1, 1),
                  "ceil_mode": True}, id="ceil"),  # fmt: skip
    pytest.param({"kernel_size": (3, 2), "stride": (2, 1), "padding": (1, 1),
                  "ceil_mode": True, "count_include_pad": False}, id="ceil-excluded"),  # fmt: skip
    pytest.param({"kernel_size": 2, "divisor_override": 3}, id="divisor"),
]


@pytest.mark.parametrize("options", AVG_CASES)
def test_avg_pool2d_matches_torch(options, device, rng) -> None:
    _check_against_torch(rng, device, lambda x: F.avg_pool2d(x, **options),
                         lambda x: TF.avg_pool2d(x, **options), (2, 3, 7, 8))  # fmt: skip


@pytest.mark.parametrize("size", [1, (3, 5), (None, 3), (10, 11), 4])
def test_adaptive_avg_pool2d_matches_torch(size, device, rng) -> None:
    _check_against_torch(rng, device, lambda x: F.adaptive_avg_pool2d(x, size),
                         lambda x: TF.adaptive_avg_pool2d(x, size), (2, 3, 7, 8))  # fmt: skip
    _check_against_torch(rng, device, lambda x: F.adaptive_avg_pool2d(x, size),
                         lambda x: TF.adaptive_avg_pool2d(x, size), (3, 7, 8))  # fmt: skip


@pytest.mark.parametrize(
    "call",
    [
        pytest.param(lambda x: F.max_pool2d(x, 3, 1, 1), id="max"),
        pytest.param(lambda x: F.avg_pool2d(x, 3, 2, 1, ceil_mode=True), id="avg"),
        pytest.param(lambda x: F.adaptive_avg_pool2d(x, (2, 3)), id="adaptive"),
    ],
)
def test_pool_second_derivatives(call, device, rng) -> None:  # noqa: ANN001
    x = pl.tensor(rng.standard_normal((2, 2, 5, 4)), device=device, requires_grad=True)
    assert pl.graph.gradgradcheck(call, [x])


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda x: F.max_pool2d(x, 3, padding=2), "at most half"),
        (lambda x: F.max_pool2d(x, 7), "too small"),
        (lambda x: F.max_pool2d(x, 0), "positive"),
        (lambda x: F.max_pool2d(x[0, 0], 2), "3-d"),
        (lambda x: F.avg_pool2d(x, 2, divisor_override=0), "non-zero"),
        (lambda x: F.avg_pool2d(x.to(pl.int64), 2), "floating-point"),
        (lambda x: F.adaptive_avg_pool2d(x, 0), "positive"),
        (lambda x: F.adaptive_avg_pool2d(x, (1, 2, 3)), "2"),
    ],
)
def test_pool_errors(call, message) -> None:  # noqa: ANN001
    with pytest.raises((ValueError, TypeError), match=re.escape(message)):
        call(pl.zeros((2, 3, 5, 5)))


@pytest.mark.parametrize(
    ("shape", "normalized"),
    [((4, 6), (6,)), ((2, 3, 4, 5), (4, 5)), ((3, 130), (130,)), ((5,), (5,))],
)
def test_layer_norm_matches_torch(shape, normalized, device, rng) -> None:
    dims = normalized
    _check_against_torch(
        rng, device, lambda x, w, b: F.layer_norm(x, normalized, w, b, eps=1e-3),
        lambda x, w, b: TF.layer_norm(x, normalized, w, b, eps=1e-3), shape, dims, dims,
    )  # fmt: skip
    _check_against_torch(rng, device, lambda x: F.layer_norm(x, normalized),
                         lambda x: TF.layer_norm(x, normalized), shape)  # fmt: skip


def test_layer_norm_float32_and_second_derivatives(device, rng) -> None:
    x = rng.standard_normal((8, 64)) * 3 + 5
    out = F.layer_norm(pl.tensor(x, dtype=pl.float32, device=device), (64,))
    expected = TF.layer_norm(torch.tensor(x, dtype=torch.float32), (64,))
    _compare(out, expected, 1e-5)  # |xhat| <= 8: a few float32 ULPs of the scale
    inputs = [pl.tensor(rng.standard_normal(s), device=device, requires_grad=True)
              for s in ((3, 4), (4,), (4,))]  # fmt: skip
    assert pl.graph.gradgradcheck(lambda a, w, b: F.layer_norm(a, (4,), w, b), inputs)


def test_layer_norm_errors() -> None:
    x = pl.zeros((2, 3))
    assert F.layer_norm(x, 3).shape == (2, 3)  # an int, as nn.LayerNorm takes it
    with pytest.raises(ValueError, match="trailing shape"):
        F.layer_norm(x, (2,))
    with pytest.raises(ValueError, match="normalized_shape"):
        F.layer_norm(x, (3,), pl.ones(2))
    with pytest.raises(ValueError, match="non-negative ints"):
        F.layer_norm(x, -1)


@pytest.mark.parametrize("shape", [(6, 3), (4, 3, 5), (4, 3, 5, 5)])
def test_batch_norm_training_matches_torch(shape, device, rng) -> None:
    channels = shape[1]
    running = (np.zeros(channels), np.ones(channels))
    pl_stats = [pl.tensor(a, device=device) for a in running]
    torch_stats = [torch.tensor(a) for a in running]
    for _ in range(2):  # the running statistics move, and the second step reads them
        _check_against_torch(
            rng, device,
            lambda x, w, b: F.batch_norm(x, *pl_stats, w, b, training=True, momentum=0.2),
            lambda x, w, b: TF.batch_norm(x, *torch_stats, w, b, training=True, momentum=0.2),
            shape, (channels,), (channels,),
        )  # fmt: skip
        for p, t in zip(pl_stats, torch_stats):
            _compare(p, t)
    _check_against_torch(
        rng, device, lambda x: F.batch_norm(x, *pl_stats),
        lambda x: TF.batch_norm(x, *torch_stats), shape,
    )  # fmt: skip


def test_batch_norm_second_derivatives_and_errors(device, rng) -> None:
    x = pl.tensor(rng.standard_normal((4, 2, 3)), device=device, requires_grad=True)
    assert pl.graph.gradgradcheck(lambda a: F.batch_norm(a, None, None, training=True), [x])
    with pytest.raises(ValueError, match="more than 1 value per channel"):
        F.batch_norm(pl.zeros((1, 3)), None, None, training=True)
    with pytest.raises(ValueError, match="must be given when not training"):
        F.batch_norm(pl.zeros((2, 3)), None, None)
    with pytest.raises(ValueError, match="does not fit 3 channels"):
        F.batch_norm(pl.zeros((2, 3)), pl.zeros(2), pl.ones(2))
