"""The everyday tensor ops of issue 12 against PyTorch: sort, argsort, topk, scatter,
scatter_add, cumsum, cumprod, remainder, floor_divide (``%`` and ``//``), hypot, einsum.

float64 values and gradients to rtol 1e-12 (each is exact, a short sum, or one rounding of
a correctly rounded step); orders and indices exactly (stable sorts, NaN above every
number); second derivatives by gradgradcheck; bad input gets its clear error. PyTorch is
the oracle; these tests skip, saying so, where it is not installed.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

import pylucid as pl
from tests.conftest import TORCH_REASON

torch = pytest.importorskip("torch", reason=TORCH_REASON)

RTOL = 1e-12


def _same(actual: pl.Tensor, expected, rtol: float = RTOL) -> None:  # noqa: ANN001
    np.testing.assert_allclose(actual.numpy(), expected.detach().numpy(), rtol=rtol, atol=rtol)


def _values_and_grads(rng, device, pl_fn, torch_fn, *arrays) -> None:  # noqa: ANN001
    ours = [pl.tensor(a, device=device, requires_grad=True) for a in arrays]
    theirs = [torch.tensor(a, requires_grad=True) for a in arrays]
    out, expected = pl_fn(*ours), torch_fn(*theirs)
    _same(out, expected)
    g = rng.standard_normal(tuple(expected.shape))
    out.backward(pl.tensor(g, device=device))
    expected.backward(torch.tensor(g))
    for p, t in zip(ours, theirs):
        _same(p.grad, t.grad)


# -- sorting -------------------------------------------------------------------------------
def _with_ties_and_nan(rng: np.random.Generator) -> np.ndarray:
    x = rng.integers(0, 4, (3, 7)).astype(np.float64)
    x[0, 2] = x[1, 5] = np.nan
    x[2] = [1, np.nan, 1, np.inf, -np.inf, np.nan, 1]
    return x


@pytest.mark.parametrize("descending", [False, True])
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_sort_and_argsort_are_torchs_stable_order(descending, dim, device, rng) -> None:
    x = _with_ties_and_nan(rng)
    values, indices = pl.sort(pl.tensor(x, device=device), dim=dim, descending=descending)
    expected = torch.sort(torch.tensor(x), dim=dim, descending=descending, stable=True)
    np.testing.assert_array_equal(values.numpy(), expected.values.numpy())
    np.testing.assert_array_equal(indices.numpy(), expected.indices.numpy())
    order = pl.tensor(x, device=device).argsort(dim=dim, descending=descending)
    assert order.dtype is pl.int64
    np.testing.assert_array_equal(order.numpy(), expected.indices.numpy())


def test_sort_of_integers_and_of_a_number(device, rng) -> None:
    x = rng.integers(0, 3, (4, 6))
    got = pl.tensor(x, device=device).sort(descending=True)
    want = torch.tensor(x).sort(descending=True, stable=True)
    np.testing.assert_array_equal(got.indices.numpy(), want.indices.numpy())
    values, indices = pl.sort(pl.tensor(2.0, device=device))
    assert values.shape == () and indices.item() == 0


@pytest.mark.parametrize("largest", [True, False])
def test_topk_values_indices_and_gradient(largest, device, rng) -> None:
    y = rng.standard_normal((4, 9))
    got = pl.topk(pl.tensor(y, device=device), 3, dim=1, largest=largest)
    want = torch.topk(torch.tensor(y), 3, dim=1, largest=largest)
    np.testing.assert_array_equal(got.indices.numpy(), want.indices.numpy())
    _values_and_grads(
        rng, device, lambda a: pl.topk(a, 3, largest=largest).values,
        lambda a: torch.topk(a, 3, largest=largest).values, y,
    )  # fmt: skip
    with pytest.raises(ValueError, match=r"k must be an int in \[0, 9\]"):
        pl.topk(pl.tensor(y), 10)


def test_sort_second_derivatives(device, rng) -> None:
    x = pl.tensor(rng.standard_normal((3, 4)), device=device, requires_grad=True)
    assert pl.graph.gradgradcheck(lambda a: pl.sort(a, dim=0).values, [x])


# -- scatter -------------------------------------------------------------------------------
@pytest.mark.parametrize("dim", [0, 1])
def test_scatter_add_values_and_gradients(dim, device, rng) -> None:
    x, src = rng.standard_normal((3, 5)), rng.standard_normal((2, 3))
    index = rng.integers(0, x.shape[dim], (2, 3))  # repeated positions add up
    _values_and_grads(
        rng, device, lambda a, s: pl.scatter_add(a, dim, pl.tensor(index, device=device), s),
        lambda a, s: torch.scatter_add(a, dim, torch.tensor(index), s), x, src,
    )  # fmt: skip
    inputs = [pl.tensor(a, device=device, requires_grad=True) for a in (x, src)]
    index_t = pl.tensor(index, device=device)
    assert pl.graph.gradgradcheck(lambda a, s: pl.scatter_add(a, dim, index_t, s), inputs)


def test_scatter_with_a_tensor_and_a_value(device, rng) -> None:
    x, src = rng.standard_normal((3, 5)), rng.standard_normal((2, 3))
    index = np.stack([rng.permutation(5)[:3] for _ in range(2)])  # no repeats: defined
    _values_and_grads(
        rng, device, lambda a, s: pl.scatter(a, 1, pl.tensor(index, device=device), s),
        lambda a, s: torch.scatter(a, 1, torch.tensor(index), s), x, src,
    )  # fmt: skip
    got = pl.tensor(x, device=device).scatter(1, pl.tensor(index, device=device), value=2.5)
    _same(got, torch.tensor(x).scatter(1, torch.tensor(index), 2.5))


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (lambda x, s: pl.scatter_add(x, 1, pl.tensor([[5]]), s), IndexError, "out of range"),
        (lambda x, s: pl.scatter_add(x, 1, pl.tensor([0]), s), ValueError, "dimensions"),
        (lambda x, s: pl.scatter_add(x, 1, pl.tensor([[0]]), s.to(pl.float64)), TypeError,
         "one dtype"),  # fmt: skip
        (lambda x, s: pl.scatter(x, 1, pl.tensor([[0]])), TypeError, "exactly one"),
        (lambda x, s: pl.scatter_add(x, 1, pl.tensor(np.zeros((4, 1), int)), s), ValueError,
         "larger"),  # fmt: skip
        (lambda x, s: pl.scatter_add(x, 1, pl.tensor([[0.5]]), s), TypeError, "int64"),
    ],
)
def test_scatter_errors(call, error, message) -> None:  # noqa: ANN001
    with pytest.raises(error, match=message):
        call(pl.zeros((3, 5)), pl.ones((3, 4)))


# -- scans ---------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["cumsum", "cumprod"])
@pytest.mark.parametrize("dim", [0, 1, 2, -1])
def test_scans_match_torch_with_zeros(name, dim, device, rng) -> None:
    x = rng.standard_normal((3, 4, 5))
    x[0, 1, 2] = 0.0
    x[1, :, 3] = 0.0
    x[2, 2, :] = 0.0  # cumprod's gradient is exact through zeros (no division)
    _values_and_grads(
        rng, device, lambda a: getattr(pl, name)(a, dim), lambda a: getattr(torch, name)(a, dim), x
    )
    y = pl.tensor(rng.standard_normal((3, 4)), device=device, requires_grad=True)
    assert pl.graph.gradgradcheck(lambda a: getattr(pl, name)(a, dim % 2), [y])


def test_scan_dtypes_and_float32_accumulation(device, rng) -> None:
    xi = rng.integers(-3, 4, (4, 5)).astype(np.int32)
    got = pl.tensor(xi, device=device).cumsum(1)
    assert got.dtype is pl.int64
    np.testing.assert_array_equal(got.numpy(), torch.tensor(xi).cumsum(1).numpy())
    np.testing.assert_array_equal(pl.cumprod(pl.tensor(xi, device=device), 0).numpy(),
                                  torch.cumprod(torch.tensor(xi), 0).numpy())  # fmt: skip
    f = rng.standard_normal(1000).astype(np.float32)
    exact = np.cumsum(f.astype(np.float64))
    got = pl.cumsum(pl.tensor(f, device=device), 0).numpy().astype(np.float64)
    # the CPU accumulates in float64 (one rounding per output, as PyTorch's CPU scan); MLX
    # in float32: 1000 roundings of partial sums of magnitude <= 40
    bound = 2.0**-24 if device == "cpu" else 1000 * 2.0**-24
    assert np.all(np.abs(got - exact) <= bound * np.maximum(np.abs(exact), 40))


def test_cumprod_create_graph_through_a_zero_is_refused(device) -> None:
    x = pl.tensor([1.0, 0.0, 2.0], dtype=pl.float64, device=device, requires_grad=True)
    (grad,) = pl.graph.grad(pl.cumprod(x, 0).sum(), [x])
    assert grad.tolist() == [1.0, 3.0, 0.0]
    with pytest.raises(NotImplementedError, match="holding zeros"):
        pl.graph.grad(pl.cumprod(x, 0).sum(), [x], create_graph=True)


# -- remainder, floor_divide, hypot ------------------------------------------------------------
@pytest.mark.parametrize("name", ["remainder", "hypot"])
def test_binary_values_and_gradients(name, device, rng) -> None:
    a, b = rng.uniform(-10, 10, (4, 5)), rng.uniform(0.5, 3, (5,)) * rng.choice([-1, 1], 5)
    _values_and_grads(rng, device, getattr(pl, name), getattr(torch, name), a, b)


def test_floor_divide_and_the_operators(device) -> None:
    values = np.array([1.0, -1.0, 5.5, -4.0, 0.0, -0.0])
    x, t = pl.tensor(values, device=device), torch.tensor(values)
    for got, want in [(x // 0.1, t // 0.1), (x % 2, t % 2), (7.0 % x[:4], 7.0 % t[:4]),
                      (x // -3, t // -3), (7 // x[:4], 7 // t[:4])]:  # fmt: skip
        np.testing.assert_array_equal(got.numpy(), want.numpy())
        np.testing.assert_array_equal(np.signbit(got.numpy()), np.signbit(want.numpy()))
    assert (x // 2).grad_fn is None  # a step: no gradient, as PyTorch's
    xi = pl.tensor([7, -7], device=device)
    assert (xi // 2).tolist() == [3, -4] and (xi % 3).tolist() == [1, 2]
    with pytest.raises(ZeroDivisionError, match="integer division by zero"):
        xi % 0
    with pytest.raises(ZeroDivisionError, match="integer division by zero"):
        pl.floor_divide(xi, pl.tensor([1, 0], device=device))


# -- einsum --------------------------------------------------------------------------------
EQUATIONS = [
    ("ij,jk->ik", [(3, 4), (4, 5)]),
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("ii->i", [(4, 4)]),
    ("ii", [(4, 4)]),
    ("ij->", [(3, 4)]),
    ("ji", [(3, 4)]),
    ("i,j->ij", [(3,), (4,)]),
    ("i,i", [(4,), (4,)]),
    ("...ij,...jk->...ik", [(2, 3, 4), (4, 5)]),
    ("bhqd,bhkd->bhqk", [(2, 3, 4, 5), (2, 3, 6, 5)]),
    ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)]),
    ("iij->j", [(3, 3, 4)]),
    ("iji->j", [(3, 4, 3)]),
    ("b...,b...->b", [(2, 3, 4), (2, 3, 4)]),
    ("ab,cd->abcd", [(2, 3), (4, 5)]),
    ("bij,j->bi", [(1, 3, 4), (4,)]),
    ("ij,j->i", [(3, 1), (4,)]),  # a summed label of size 1 against 4: broadcast
]


@pytest.mark.parametrize(("equation", "shapes"), EQUATIONS, ids=[e for e, _ in EQUATIONS])
def test_einsum_matches_torch(equation, shapes, device, rng) -> None:
    arrays = [rng.standard_normal(s) for s in shapes]
    _values_and_grads(
        rng, device, lambda *xs: pl.einsum(equation, *xs),
        lambda *xs: torch.einsum(equation, *xs), *arrays,
    )  # fmt: skip


def test_einsum_second_derivatives_list_operands_and_errors(device, rng) -> None:
    a, b = (pl.tensor(rng.standard_normal(s), device=device, requires_grad=True)
            for s in ((2, 2, 3), (2, 3, 2)))  # fmt: skip
    assert pl.graph.gradgradcheck(lambda u, v: pl.einsum("bij,bjk->bik", u, v), [a, b])
    _same(pl.einsum("bij,bjk->bik", [a, b]), torch.tensor(a.numpy()) @ torch.tensor(b.numpy()))
    for equation, shapes, message in [
        ("ij,jk->ik", [(3, 4), (5, 5)], "has size 4 in one operand and 5"),
        ("ij->ik", [(3, 4)], "names one no operand has"),
        ("ij", [(3,)], "2 labels but a tensor of shape (3,)"),
        ("ij,jk", [(3, 4)], "2 operand(s), got 1"),
        ("i1->i", [(3,)], "must be letters"),
    ]:
        with pytest.raises(ValueError, match=re.escape(message)):
            pl.einsum(equation, *[pl.zeros(s) for s in shapes])
