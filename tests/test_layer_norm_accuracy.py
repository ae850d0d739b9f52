"""layer_norm's backward kernel within its stated bound (``pylucid.kernels.normalization``):
``|dx - dx_exact| <= 12 u rstd (|h| + mean|h| + |xhat| mean|h xhat|)`` and ``dw``, ``db`` within
``12 u`` of the sums of their terms' magnitudes, against an x87 extended-precision reference, on
random rows and adversarial ones (a large mean with a small variance, outliers, constant rows,
eps 0), serial and parallel, with rows that take the float64 path mixed in."""

from __future__ import annotations

import numpy as np
import pytest

from pylucid.kernels import normalization

#: The bound of the kernel's docstring, in units of the dtype's unit roundoff.
BOUND = 12.0  # (measured: float32 4.5 u, float64 9.5 u)
WIDE = np.longdouble


def _reference(x, w, g, eps):  # noqa: ANN001, ANN202
    x, w, g = x.astype(WIDE), w.astype(WIDE), g.astype(WIDE)
    d = x - x.mean(axis=1, keepdims=True)  # (exact: x is near its rounded mean)
    d -= d.mean(axis=1, keepdims=True)  # (the mean's rounding: else ~2**-64 |mean| off)
    r = 1 / np.sqrt((d * d).mean(axis=1, keepdims=True) + WIDE(eps))
    xhat, h = d * r, g * w
    dx = r * (h - h.mean(axis=1, keepdims=True) - xhat * (h * xhat).mean(axis=1, keepdims=True))
    terms = r * (
        abs(h) + abs(h).mean(axis=1, keepdims=True)
        + abs(xhat) * abs(h * xhat).mean(axis=1, keepdims=True)
    )  # fmt: skip
    return dx, terms, (g * xhat).sum(0), abs(g * xhat).sum(0), g.sum(0), abs(g).sum(0)


def _inputs(kind: str, shape: tuple[int, int], rng: np.random.Generator) -> np.ndarray:
    z = rng.standard_normal(shape)
    return {
        "random": 3 * z,
        "mean 1e4, std 1": 1e4 + z,
        "mean 1e3, std 1e-2": 1e3 + 1e-2 * z,
        "mean 1e4, std 1e-3": 1e4 + 1e-3 * z,  # (float32: about the values' ULP)
        "mean 1e6, std 0.1": 1e6 + 0.1 * z,
        "outliers": np.where(rng.random(shape) < 0.01, 1e3, z),
        "constant": np.full(shape, 0.1),
    }[kind]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("width", [64, 256, 1000])
@pytest.mark.parametrize(
    "kind",
    ["random", "mean 1e4, std 1", "mean 1e3, std 1e-2", "mean 1e4, std 1e-3",
     "mean 1e6, std 0.1", "outliers", "constant"],
)  # fmt: skip
@pytest.mark.parametrize("eps", [1e-5, 0.0])
def test_layer_norm_backward_within_bound(dtype, width, kind, eps) -> None:  # noqa: ANN001
    rng = np.random.default_rng(width)
    rows = 40 if kind != "random" else 300  # (300 x 256: the parallel kernel, where enabled)
    x = _inputs(kind, (rows, width), rng).astype(dtype)
    if kind == "constant" and eps == 0.0:
        x[:, 0] += 1  # (eps 0 and a constant row: a division by 0, not a bound)
    w = (1 + 0.1 * rng.standard_normal(width)).astype(dtype)
    g = rng.standard_normal((rows, width)).astype(dtype)
    dx, dw, db = normalization.layer_norm_backward_rows(x, w, g, eps)
    ref_dx, terms, ref_dw, dw_terms, ref_db, db_terms = _reference(x, w, g, eps)
    u = np.finfo(dtype).eps / 2
    assert dx.dtype == dtype
    err = abs(dx.astype(WIDE) - ref_dx)
    assert np.all(err <= BOUND * u * terms), float(np.max(err / terms) / u)
    for got, ref, scale in ((dw, ref_dw, dw_terms), (db, ref_db, db_terms)):
        err = abs(got.astype(dtype).astype(WIDE) - ref)
        assert np.all(err <= BOUND * u * scale), float(np.max(err / np.maximum(scale, 1e-300)) / u)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_layer_norm_backward_float64_rows_mixed_in(dtype) -> None:  # noqa: ANN001
    """Rows that leave the row's arithmetic (inf, huge values or gradients, tiny variance with
    eps 0) among ordinary ones in the same block: each as the float64 path gives it alone."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((20, 64)).astype(dtype)
    g = rng.standard_normal((20, 64)).astype(dtype)
    w = np.ones(64, dtype)
    x[2, 5] = np.inf
    x[5] *= np.finfo(dtype).max / 4  # (the variance overflows)
    g[7] *= np.finfo(dtype).max / 8  # (h mean(h xhat) would overflow the row's arithmetic)
    x[9] *= 1e-30  # (a variance of 1e-60, whose float32 squares underflow)
    dx, dw, db = normalization.layer_norm_backward_rows(x, w, g, 0.0)
    for r in range(20):
        alone, _, _ = normalization.layer_norm_backward_rows(x[r : r + 1], w, g[r : r + 1], 0.0)
        np.testing.assert_array_equal(dx[r], alone[0])
    finite = np.isfinite(x).all(axis=1)
    ref_dx, terms, *_ = _reference(x[finite], w, g[finite], 0.0)
    u = np.finfo(dtype).eps / 2
    assert np.all(abs(dx[finite].astype(WIDE) - ref_dx) <= BOUND * u * terms)
    assert np.isnan(dx[2]).all()
    np.testing.assert_allclose(db, g.astype(WIDE).sum(0), rtol=1e-6)
