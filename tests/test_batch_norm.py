"""batch_norm as one op (BatchNormBackward over the float64 statistics of batch_norm_stats),
on both backends, against a float64 NumPy reference, finite differences and PyTorch.

Tolerances:

- float64 inputs: rtol 1e-12, atol 1e-12. The kernels form the same formulas in float64
  with the sums in another order (a few ulp of 1e-16 per value; the gradients' sums over
  a channel of up to a few hundred terms).
- float32 inputs: rtol 1e-5, atol 1e-5 (about 80 float32 ulps). The forward is within
  2 ulp of the float64 formula (statistics in float64, one FMA); ``dx`` within a few ulp of
  its terms ``w rstd (|g| + |mean g| + |xhat mean(g xhat)|)``, which for these data are
  O(1) and can cancel, hence the absolute term; ``dw`` and ``db`` are float64 sums rounded
  once.
- large-mean data (mean 1e4, deviation 1e-2, float32): the float64 statistics and the split
  mean keep the normalised values within 2e-6 relative to their spread (rtol 1e-5 keeps a
  margin); a float32 composition of mean and deviation loses them entirely.
"""

from __future__ import annotations

import numpy as np
import pytest

import pylucid as pl
from tests.conftest import TORCH_REASON

F = pl.nn.functional
SHAPES = [(4, 3, 5, 6), (6, 3), (5, 4, 7), (2, 3, 4, 5, 3), (8, 5, 20, 20)]
TOL = {"float64": 1e-12, "float32": 1e-5}


def _reference(x, w, b, g, eps=1e-5, running=None):
    """Output, dx, dw, db in float64 (``running``: (mean, var) constants, eval mode)."""
    axes = (0, *range(2, x.ndim))
    channel = (1, -1) + (1,) * (x.ndim - 2)
    if running is None:
        mean = x.mean(axis=axes, keepdims=True)
        var = ((x - mean) ** 2).mean(axis=axes, keepdims=True)
    else:
        mean, var = (r.reshape(channel) for r in running)
    rstd = 1 / np.sqrt(var + eps)
    xhat = (x - mean) * rstd
    w_, b_ = w.reshape(channel), b.reshape(channel)
    if running is None:
        inner = g - g.mean(axis=axes, keepdims=True)
        dx = w_ * rstd * (inner - xhat * (g * xhat).mean(axis=axes, keepdims=True))
    else:
        dx = g * w_ * rstd
    return xhat * w_ + b_, dx, (g * xhat).sum(axis=axes), g.sum(axis=axes)


def _inputs(rng, shape, loc=0.0, scale=1.0):
    channels = shape[1]
    x = rng.standard_normal(shape) * scale + loc
    return (
        x,
        rng.uniform(0.5, 1.5, channels),
        rng.uniform(-1, 1, channels),
        rng.standard_normal(shape),
    )


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_matches_float64_reference(shape, training, dtype, device, rng) -> None:
    x, w, b, g = _inputs(rng, shape, loc=3.0, scale=2.0)
    cast = [a.astype(dtype).astype(np.float64) for a in (x, w, b, g)]
    channels = shape[1]
    rm, rv = rng.standard_normal(channels), rng.uniform(0.5, 2.0, channels)
    xp, wp, bp = (pl.tensor(a, dtype=dtype, device=device, requires_grad=True) for a in cast[:3])
    rmp, rvp = pl.tensor(rm, dtype=dtype, device=device), pl.tensor(rv, dtype=dtype, device=device)
    start_mean, start_var = rmp.numpy().astype(np.float64), rvp.numpy().astype(np.float64)
    out = F.batch_norm(xp, rmp, rvp, wp, bp, training=training, momentum=0.3)
    out.backward(pl.tensor(cast[3], dtype=dtype, device=device))
    running = None if training else (start_mean, start_var)
    expected = _reference(*cast, running=running)
    tol = TOL[dtype]
    for got, want in zip((out, xp.grad), expected):
        np.testing.assert_allclose(got.numpy().astype(np.float64), want, rtol=tol, atol=tol)
    # dw, db: sums over the channel in the backend's arithmetic (MLX's float32: an error
    # growing with the count), so normwise: within tol of the sum of the terms' magnitudes
    axes, channel = (0, *range(2, x.ndim)), (1, -1) + (1,) * (x.ndim - 2)
    xhat = (expected[0] - cast[2].reshape(channel)) / cast[1].reshape(channel)
    for got, terms in ((wp.grad, cast[3] * xhat), (bp.grad, cast[3])):
        scale = np.abs(terms).sum(axis=axes)
        want = terms.sum(axis=axes)
        assert np.all(np.abs(got.numpy() - want) <= tol * scale), (got.numpy(), want)
    if training:  # running = 0.7 running + 0.3 batch, the variance unbiased
        axes = (0, *range(2, x.ndim))
        count = x.size // channels
        mean, var = cast[0].mean(axis=axes), cast[0].var(axis=axes) * count / (count - 1)
        np.testing.assert_allclose(rmp.numpy(), 0.7 * start_mean + 0.3 * mean, rtol=tol, atol=tol)
        np.testing.assert_allclose(rvp.numpy(), 0.7 * start_var + 0.3 * var, rtol=tol, atol=tol)
    else:
        np.testing.assert_array_equal(rmp.numpy(), start_mean.astype(dtype))


def test_large_mean_is_exact_in_float32(device, rng) -> None:
    x, w, b, g = _inputs(rng, (16, 4, 8, 8), loc=1e4, scale=1e-2)
    x32 = x.astype(np.float32).astype(np.float64)
    xp = pl.tensor(x32, dtype=pl.float32, device=device, requires_grad=True)
    wp, bp = (
        pl.tensor(w, dtype=pl.float32, device=device),
        pl.tensor(b, dtype=pl.float32, device=device),
    )
    out = F.batch_norm(xp, None, None, wp, bp, training=True)
    out.backward(pl.tensor(g, dtype=pl.float32, device=device))
    w32, b32 = (a.astype(np.float32).astype(np.float64) for a in (w, b))
    expected = _reference(x32, w32, b32, g.astype(np.float32).astype(np.float64))
    np.testing.assert_allclose(out.numpy(), expected[0], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(xp.grad.numpy(), expected[1], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
def test_gradcheck_float64(training, device, rng) -> None:
    x, w, b, _ = _inputs(rng, (3, 2, 4))
    rm, rv = pl.tensor(rng.standard_normal(2), device=device), pl.tensor([0.7, 1.3], device=device)
    inputs = [pl.tensor(a, device=device, requires_grad=True) for a in (x, w, b)]

    def fn(a, weight, bias):
        stats = (None, None) if training else (rm, rv)
        return F.batch_norm(a, *stats, weight, bias, training=training)

    assert pl.graph.gradcheck(fn, inputs)
    assert pl.graph.gradgradcheck(fn, inputs)


def test_affine_false_gives_no_parameter_work(device, rng) -> None:
    x, _, _, g = _inputs(rng, (4, 3, 5))
    xp = pl.tensor(x, device=device, requires_grad=True)
    out = F.batch_norm(xp, None, None, training=True)
    out.backward(pl.tensor(g, device=device))
    ones, zeros = np.ones(3), np.zeros(3)
    expected = _reference(x, ones, zeros, g)
    np.testing.assert_allclose(out.numpy(), expected[0], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(xp.grad.numpy(), expected[1], rtol=1e-12, atol=1e-12)


def test_only_the_needed_gradients(rng) -> None:
    """A frozen input (no grad) still gives dw and db; a frozen weight gives dx only."""
    x, w, b, g = _inputs(rng, (4, 3, 5))
    xp, wp = pl.tensor(x), pl.tensor(w, requires_grad=True)
    F.batch_norm(xp, None, None, wp, pl.tensor(b), training=True).backward(pl.tensor(g))
    np.testing.assert_allclose(wp.grad.numpy(), _reference(x, w, b, g)[2], rtol=1e-12)
    xp = pl.tensor(x, requires_grad=True)
    F.batch_norm(xp, None, None, pl.tensor(w), pl.tensor(b), training=True).backward(pl.tensor(g))
    np.testing.assert_allclose(xp.grad.numpy(), _reference(x, w, b, g)[1], rtol=1e-12, atol=1e-12)


def test_module_running_stats_and_cumulative_average(device, rng) -> None:
    """momentum=None: the cumulative average over the batches seen (the first batch's
    factor 1 replaces the initial values); num_batches_tracked counts the training calls."""
    norm = pl.nn.BatchNorm2d(3, momentum=None).to(device)
    batches = [rng.standard_normal((4, 3, 2, 2)) + i for i in range(3)]
    for batch in batches:
        norm(pl.tensor(batch, device=device))
    norm.eval()
    norm(pl.tensor(batches[0], device=device))
    assert int(norm.num_batches_tracked.item()) == 3
    means = [b.mean(axis=(0, 2, 3)) for b in batches]
    variances = [b.var(axis=(0, 2, 3), ddof=1) for b in batches]
    np.testing.assert_allclose(norm.running_mean.numpy(), np.mean(means, axis=0), rtol=1e-6)
    np.testing.assert_allclose(norm.running_var.numpy(), np.mean(variances, axis=0), rtol=1e-6)


def test_zero_size_batch_leaves_running_stats(device) -> None:
    rm, rv = pl.zeros(3, device=device), pl.ones(3, device=device)
    x = pl.zeros((0, 3, 4), device=device, requires_grad=True)
    w = pl.ones(3, device=device, requires_grad=True)
    out = F.batch_norm(x, rm, rv, w, None, training=True)
    assert out.shape == (0, 3, 4)
    out.sum().backward()
    assert x.grad.shape == (0, 3, 4)
    np.testing.assert_array_equal(w.grad.numpy(), np.zeros(3))
    np.testing.assert_array_equal(rm.numpy(), np.zeros(3))
    np.testing.assert_array_equal(rv.numpy(), np.ones(3))


def test_errors() -> None:
    with pytest.raises(ValueError, match="expected more than 1 value per channel"):
        F.batch_norm(pl.zeros((1, 3)), None, None, training=True)
    with pytest.raises(ValueError, match="running_mean and running_var must be given"):
        F.batch_norm(pl.zeros((2, 3)), None, None)
    with pytest.raises(ValueError, match=r"running_mean of shape \(2,\) does not fit 3"):
        F.batch_norm(pl.zeros((2, 3)), pl.zeros(2), pl.ones(2))
    with pytest.raises(ValueError, match=r"expected an input \(N, C, ...\)"):
        F.batch_norm(pl.zeros(3), None, None, training=True)
    with pytest.raises(TypeError, match="floating-point"):
        F.batch_norm(pl.zeros((2, 3), dtype=pl.int64), None, None, training=True)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_inputs_compute_in_float32(dtype, rng) -> None:
    x, w, b, g = _inputs(rng, (4, 3, 5))
    xp = pl.tensor(x, dtype=dtype, requires_grad=True)
    out = F.batch_norm(
        xp, None, None, pl.tensor(w, dtype=dtype), pl.tensor(b, dtype=dtype), training=True
    )
    assert out.dtype.name == dtype
    wide = F.batch_norm(
        xp.to(pl.float32), None, None, pl.tensor(w, dtype=dtype).to(pl.float32),
        pl.tensor(b, dtype=dtype).to(pl.float32), training=True,
    )  # fmt: skip
    np.testing.assert_array_equal(out.numpy(), wide.to(dtype).numpy())


@pytest.mark.parametrize("shape", [(8, 3, 5, 6), (16, 4), (6, 4, 9)], ids=str)
def test_module_matches_torch(shape, device, rng) -> None:
    torch = pytest.importorskip("torch", reason=TORCH_REASON)
    cls = "BatchNorm2d" if len(shape) == 4 else "BatchNorm1d"
    ours, theirs = getattr(pl.nn, cls)(shape[1]).to(device), getattr(torch.nn, cls)(shape[1])
    for _ in range(2):
        x, _, _, g = _inputs(rng, shape, loc=1.0)
        xp = pl.tensor(x, dtype=pl.float32, device=device, requires_grad=True)
        xt = torch.tensor(x, dtype=torch.float32, requires_grad=True)
        ours(xp).backward(pl.tensor(g, dtype=pl.float32, device=device))
        theirs(xt).backward(torch.tensor(g, dtype=torch.float32))
        np.testing.assert_allclose(xp.grad.numpy(), xt.grad.numpy(), rtol=1e-5, atol=1e-5)
    for name in ("running_mean", "running_var"):
        np.testing.assert_allclose(
            getattr(ours, name).numpy(), getattr(theirs, name).numpy(), rtol=1e-5, atol=1e-6
        )
    np.testing.assert_allclose(
        ours.weight.grad.numpy(), theirs.weight.grad.numpy(), rtol=1e-5, atol=1e-5
    )
    assert int(ours.num_batches_tracked.item()) == int(theirs.num_batches_tracked.item())
