"""``F.interpolate`` / ``nn.Upsample`` and the other resampling functions (``pixel_shuffle``,
``pixel_unshuffle``, ``unfold``, ``fold``) against PyTorch.

Same inputs: same outputs and same input gradients for one random upstream gradient, in
float64 and float32 on each backend. The positions and weights of each mode are computed
with PyTorch's formulas in its precision (float32 positions for float32 inputs), and each
output is the same weighted sum in the same order as PyTorch's CPU kernels; the gradients
add the same products in other orders. Float64 agrees to 1e-12 (observed worst: 6e-15, in
gradients) and float32 to 1e-5 (observed worst: 4e-6 on gradients of order 10, a few ulps
from summation order and PyTorch's fused multiply-adds).
Gradients are also checked against finite differences (``gradcheck``, second order for
bilinear and bicubic).
"""

from __future__ import annotations

import math
from types import ModuleType
from typing import Any

import numpy as np
import pytest

import pylucid as pl
from pylucid import nn
from pylucid.graph import gradcheck, gradgradcheck
from pylucid.nn import functional as F  # noqa: N812
from tests.conftest import TORCH_REASON
from tests.torch_oracle import compare_module

TOLERANCE = {"float64": 1e-12, "float32": 1e-5}


@pytest.fixture
def torch() -> ModuleType:
    """The oracle, or a skip naming how to install it."""
    return pytest.importorskip("torch", reason=TORCH_REASON)


def _compare(
    torch: ModuleType, theirs: Any, ours: Any, shape: tuple[int, ...], dtype: str, device: str,
    seed: int = 0,
) -> None:  # fmt: skip
    """``ours(x)`` against ``theirs(x)``: values, and the gradient of ``x``."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape).astype(dtype)
    tx = torch.tensor(x, requires_grad=True)
    px = pl.tensor(x, device=device, requires_grad=True)
    expected, out = theirs(tx), ours(px)
    assert out.shape == tuple(expected.shape)
    assert out.device == device
    tol = TOLERANCE[dtype]
    np.testing.assert_allclose(out.numpy(), expected.detach().numpy(), rtol=tol, atol=tol)
    upstream = rng.standard_normal(tuple(expected.shape)).astype(dtype)
    (expected * torch.tensor(upstream)).sum().backward()
    (out * pl.tensor(upstream, device=device)).sum().backward()
    np.testing.assert_allclose(px.grad.numpy(), tx.grad.numpy(), rtol=tol, atol=tol)


SIZES_2D = [
    {"size": (11, 13)},  # up, not a multiple
    {"size": (3, 2)},  # down
    {"size": (5, 7)},  # same size
    {"size": (10, 14)},  # twice (nearest's shortcut)
    {"scale_factor": 2},
    {"scale_factor": 1.7},
    {"scale_factor": (0.5, 3.3)},
    {"scale_factor": 0.37},
    {"scale_factor": 2.5, "recompute_scale_factor": True},
    {"size": 1},
]
MODES_2D = [("nearest", None), ("nearest-exact", None), ("area", None), ("bilinear", False),
            ("bilinear", True), ("bicubic", False), ("bicubic", True)]  # fmt: skip


def _id(options: dict[str, Any]) -> str:
    return "-".join(f"{k}={v}" for k, v in options.items())


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize(("mode", "align_corners"), MODES_2D, ids=[f"{m}-{a}" for m, a in MODES_2D])
def test_interpolate_2d_matches_torch(
    torch: ModuleType, device: str, dtype: str, mode: str, align_corners: bool | None
) -> None:
    for seed, options in enumerate(SIZES_2D):

        def theirs(x: Any, options: dict[str, Any] = options) -> Any:
            return torch.nn.functional.interpolate(
                x, mode=mode, align_corners=align_corners, **options
            )

        def ours(x: Any, options: dict[str, Any] = options) -> Any:
            return F.interpolate(x, mode=mode, align_corners=align_corners, **options)

        _compare(torch, theirs, ours, (2, 3, 5, 7), dtype, device, seed)


CASES_1D_3D = [
    ("linear", False, (2, 3, 9), {"size": 17}),
    ("linear", True, (2, 3, 9), {"scale_factor": 1.3}),
    ("linear", False, (2, 3, 9), {"size": 4}),
    ("nearest", None, (2, 3, 9), {"scale_factor": 3}),
    ("nearest-exact", None, (2, 3, 9), {"size": 5}),
    ("area", None, (2, 3, 9), {"size": 4}),
    ("trilinear", False, (1, 2, 4, 5, 6), {"size": (3, 7, 8)}),
    ("trilinear", True, (1, 2, 4, 5, 6), {"scale_factor": (2, 0.5, 1.2)}),
    ("nearest", None, (1, 2, 4, 5, 6), {"scale_factor": 1.5}),
    ("area", None, (1, 2, 4, 5, 6), {"size": (3, 2, 4)}),
]


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize(
    ("mode", "align_corners", "shape", "options"), CASES_1D_3D,
    ids=[f"{c[0]}-{c[1]}-{len(c[2]) - 2}d-{_id(c[3])}" for c in CASES_1D_3D],
)  # fmt: skip
def test_interpolate_1d_3d_matches_torch(
    torch: ModuleType, device: str, dtype: str, mode: str, align_corners: bool | None,
    shape: tuple[int, ...], options: dict[str, Any],
) -> None:  # fmt: skip
    _compare(
        torch,
        lambda x: torch.nn.functional.interpolate(x, mode=mode, align_corners=align_corners,
                                                  **options),  # fmt: skip
        lambda x: F.interpolate(x, mode=mode, align_corners=align_corners, **options),
        shape, dtype, device,
    )  # fmt: skip


def test_nearest_keeps_integers(torch: ModuleType, device: str) -> None:
    """Nearest is a gather: integer tensors keep their dtype and values (PyTorch has no
    int64 kernel; its float result is the reference)."""
    values = np.random.default_rng(1).integers(-50, 50, (1, 2, 3, 4))
    out = F.interpolate(pl.tensor(values, device=device), scale_factor=1.5)
    expected = torch.nn.functional.interpolate(torch.tensor(values, dtype=torch.float64),
                                               scale_factor=1.5)  # fmt: skip
    assert out.dtype is pl.int64
    np.testing.assert_array_equal(out.numpy(), expected.numpy().astype(np.int64))


UPSAMPLE_CASES = [
    pytest.param(lambda lib: lib.nn.Upsample(scale_factor=2), id="nearest-x2"),
    pytest.param(lambda lib: lib.nn.Upsample(size=(7, 9), mode="bilinear"), id="bilinear"),
    pytest.param(
        lambda lib: lib.nn.Upsample(scale_factor=(1.5, 2.0), mode="bicubic", align_corners=True),
        id="bicubic",
    ),
    pytest.param(lambda lib: lib.nn.UpsamplingNearest2d(size=5), id="nearest2d"),
    pytest.param(lambda lib: lib.nn.UpsamplingBilinear2d(scale_factor=3), id="bilinear2d"),
]


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("build", UPSAMPLE_CASES)
def test_upsample_modules_match_torch(
    torch: ModuleType, device: str, dtype: str, build: Any
) -> None:
    x = np.random.default_rng(3).standard_normal((2, 3, 4, 5))
    compare_module(torch, build, (x,), {}, dtype, device)


def test_upsample_repr_and_attributes() -> None:
    assert repr(nn.Upsample(scale_factor=2)) == "Upsample(scale_factor=2.0, mode='nearest')"
    assert repr(nn.Upsample(size=(3, 4), mode="bilinear", align_corners=True)) == (
        "Upsample(size=(3, 4), mode='bilinear')"
    )
    assert repr(nn.UpsamplingBilinear2d(size=5)) == "UpsamplingBilinear2d(size=5, mode='bilinear')"
    assert nn.UpsamplingBilinear2d(size=5).align_corners is True
    assert nn.Upsample(scale_factor=(2, 3)).scale_factor == (2.0, 3.0)


def test_interpolate_gradients_against_finite_differences() -> None:
    rng = np.random.default_rng(0)
    x = pl.tensor(rng.standard_normal((1, 2, 3, 4)), requires_grad=True)
    for mode, corners in (("bilinear", False), ("bilinear", True), ("bicubic", False)):
        assert gradcheck(lambda t, m=mode, c=corners: F.interpolate(
            t, size=(5, 3), mode=m, align_corners=c), [x])  # fmt: skip
    assert gradcheck(lambda t: F.interpolate(t, scale_factor=1.6, mode="nearest"), [x])
    assert gradcheck(lambda t: F.interpolate(t, size=(2, 3), mode="area"), [x])
    small = pl.tensor(rng.standard_normal((1, 1, 2, 3)), requires_grad=True)
    for mode in ("bilinear", "bicubic"):
        assert gradgradcheck(lambda t, m=mode: F.interpolate(t, size=(3, 4), mode=m), [small])
    line = pl.tensor(rng.standard_normal((1, 2, 5)), requires_grad=True)
    assert gradcheck(lambda t: F.interpolate(t, size=7, mode="linear", align_corners=True), [line])


def test_interpolate_errors() -> None:
    x = pl.randn(1, 2, 3, 4)
    with pytest.raises(ValueError, match="exactly one of size and scale_factor"):
        F.interpolate(x)
    with pytest.raises(ValueError, match="exactly one of size and scale_factor"):
        F.interpolate(x, size=3, scale_factor=2)
    with pytest.raises(ValueError, match="align_corners option can only be set"):
        F.interpolate(x, size=3, align_corners=True)
    with pytest.raises(ValueError, match="mode 'linear' needs a 3-d input"):
        F.interpolate(x, size=3, mode="linear")
    with pytest.raises(ValueError, match="mode must be one of"):
        F.interpolate(x, size=3, mode="lanczos")
    with pytest.raises(NotImplementedError, match="antialias=True is not supported"):
        F.interpolate(x, size=2, mode="bilinear", antialias=True)
    with pytest.raises(ValueError, match="has 3 entries but"):
        F.interpolate(x, size=(2, 3, 4))
    with pytest.raises(ValueError, match="greater than 0"):
        F.interpolate(x, scale_factor=0.1)
    with pytest.raises(ValueError, match="recompute_scale_factor is not meaningful"):
        F.interpolate(x, size=2, recompute_scale_factor=True)
    with pytest.raises(ValueError, match="expected a 3-, 4- or 5-d input"):
        F.interpolate(pl.randn(3, 4), size=2)
    with pytest.raises(TypeError, match="needs a floating input"):
        F.interpolate(pl.arange(6).reshape(1, 1, 6), size=3, mode="linear")


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_pixel_shuffle_unfold_fold_match_torch(torch: ModuleType, device: str, dtype: str) -> None:
    tf = torch.nn.functional
    cases = [
        (lambda x: tf.pixel_shuffle(x, 2), lambda x: F.pixel_shuffle(x, 2), (2, 3, 8, 4, 5)),
        (lambda x: tf.pixel_shuffle(x, 3), lambda x: F.pixel_shuffle(x, 3), (9, 2, 3)),
        (lambda x: tf.pixel_unshuffle(x, 2), lambda x: F.pixel_unshuffle(x, 2), (2, 3, 4, 6)),
        (lambda x: tf.unfold(x, (2, 3), dilation=(1, 2), padding=1, stride=(2, 1)),
         lambda x: F.unfold(x, (2, 3), dilation=(1, 2), padding=1, stride=(2, 1)), (2, 3, 6, 7)),
        (lambda x: tf.unfold(x, 2), lambda x: F.unfold(x, 2), (3, 4, 5)),
        (lambda x: tf.fold(x, (5, 6), (2, 3), padding=(1, 0), stride=2),
         lambda x: F.fold(x, (5, 6), (2, 3), padding=(1, 0), stride=2), (2, 18, 6)),
        (lambda x: tf.fold(x, 4, 2, dilation=2), lambda x: F.fold(x, 4, 2, dilation=2), (8, 4)),
    ]  # fmt: skip
    for seed, (theirs, ours, shape) in enumerate(cases):
        _compare(torch, theirs, ours, shape, dtype, device, seed)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize(
    "build",
    [
        pytest.param(lambda lib: lib.nn.PixelShuffle(2), id="shuffle"),
        pytest.param(lambda lib: lib.nn.Sequential(lib.nn.PixelUnshuffle(2),
                                                   lib.nn.PixelShuffle(2)), id="round-trip"),
        pytest.param(lambda lib: lib.nn.Unfold((2, 3), padding=1), id="unfold"),
        pytest.param(lambda lib: lib.nn.Sequential(
            lib.nn.Unfold(2, stride=2), lib.nn.Fold((4, 6), 2, stride=2)), id="fold"),
    ],
)  # fmt: skip
def test_resampling_modules_match_torch(
    torch: ModuleType, device: str, dtype: str, build: Any
) -> None:
    x = np.random.default_rng(4).standard_normal((2, 8, 4, 6))
    compare_module(torch, build, (x,), {}, dtype, device)


def test_unfold_fold_gradients_and_adjointness() -> None:
    """``fold`` is the adjoint of ``unfold``: <unfold(x), y> = <x, fold(y)>."""
    rng = np.random.default_rng(2)
    x = pl.tensor(rng.standard_normal((2, 3, 5, 4)), requires_grad=True)
    cols = F.unfold(x, (2, 2), padding=1, stride=(2, 1))
    y = pl.tensor(rng.standard_normal(cols.shape), requires_grad=True)
    back = F.fold(y, (5, 4), (2, 2), padding=1, stride=(2, 1))
    assert math.isclose((cols * y).sum().item(), (x * back).sum().item(), rel_tol=1e-12)
    assert gradgradcheck(lambda t: F.unfold(t, 2, padding=1) ** 2, [x])
    assert gradgradcheck(lambda t: F.fold(t, (5, 4), (2, 2), padding=1, stride=(2, 1)) ** 2, [y])
    assert gradcheck(lambda t: F.pixel_shuffle(t, 2) * 3.0, [pl.tensor(
        rng.standard_normal((1, 4, 2, 3)), requires_grad=True)])  # fmt: skip


def test_resampling_errors() -> None:
    with pytest.raises(ValueError, match="divide by upscale_factor"):
        F.pixel_shuffle(pl.randn(1, 3, 2, 2), 2)
    with pytest.raises(ValueError, match="positive int"):
        F.pixel_shuffle(pl.randn(1, 4, 2, 2), 0)
    with pytest.raises(ValueError, match="H and W divide"):
        F.pixel_unshuffle(pl.randn(1, 1, 3, 4), 2)
    with pytest.raises(ValueError, match="no block positions"):
        F.unfold(pl.randn(1, 1, 2, 2), 3)
    with pytest.raises(ValueError, match=r"expected an input \(N, C \* 4, 4\)"):
        F.fold(pl.randn(1, 8, 5), 3, 2)
    with pytest.raises(ValueError, match="3-d or 4-d input"):
        F.unfold(pl.randn(2, 2), 1)
