"""index_select, gather and nn.functional.embedding against PyTorch: values and gradients
exactly (each output element is one input element; repeated indices add gradients, which
for these small integer-valued upstream gradients is exact), on both backends, and the
errors of bad indices.

PyTorch is the oracle where it is installed; the tests skip, saying so, where it is not.
"""

from __future__ import annotations

import numpy as np
import pytest

import pylucid as pl
import pylucid.nn.functional as F  # noqa: N812  (PyTorch's spelling)
from tests.conftest import TORCH_REASON

torch = pytest.importorskip("torch", reason=TORCH_REASON)

X = np.arange(60.0).reshape(3, 4, 5) / 7.0
G_INT = np.random.default_rng(5).integers(-3, 4, size=200)  # integer upstream gradients


def _check(device, ours_fn, torch_fn, x=X):
    ours = pl.tensor(x, device=device, requires_grad=True)
    theirs = torch.tensor(x, requires_grad=True)
    out, expected = ours_fn(ours), torch_fn(theirs)
    np.testing.assert_array_equal(out.numpy(), expected.detach().numpy())
    g = G_INT[: expected.numel()].reshape(expected.shape).astype(np.float64)
    out.backward(pl.tensor(g, device=device))
    expected.backward(torch.tensor(g))
    np.testing.assert_array_equal(ours.grad.numpy(), theirs.grad.numpy())


@pytest.mark.parametrize("dim", [0, 1, 2, -1])
def test_index_select_matches_torch(device, dim):
    index = np.array([1, 0, 2, 1])  # a repeat: its gradient adds up
    _check(
        device,
        lambda v: pl.index_select(v, dim, pl.tensor(index, device=device)),
        lambda v: torch.index_select(v, dim, torch.tensor(index)),
    )


@pytest.mark.parametrize("dim", [0, 1, 2, -2])
def test_gather_matches_torch(device, rng, dim):
    axis = dim % 3
    shape = [2, 3, 4]
    index = rng.integers(0, X.shape[axis], size=shape)
    _check(
        device,
        lambda v: v.gather(dim, pl.tensor(index, device=device)),
        lambda v: v.gather(dim, torch.tensor(index)),
    )


@pytest.mark.parametrize("padding_idx", [None, 2, -1])
def test_embedding_matches_torch(device, rng, padding_idx):
    weight = rng.standard_normal((6, 3))
    index = np.array([[0, 2, 5], [2, 2, 1]])
    _check(
        device,
        lambda w: F.embedding(pl.tensor(index, device=device), w, padding_idx=padding_idx),
        lambda w: torch.nn.functional.embedding(torch.tensor(index), w, padding_idx=padding_idx),
        x=weight,
    )


def test_gathering_is_differentiable_twice(device, rng):
    x = pl.tensor(rng.standard_normal((3, 4)), device=device, requires_grad=True)
    index = pl.tensor(np.array([[0, 0], [2, 1], [3, 3]]), device=device)
    rows = pl.tensor(np.array([2, 0, 2]), device=device)

    def fn(v):
        return (v.gather(1, index) ** 2).sum(axis=1) + pl.index_select(v, 0, rows).sum(axis=1)

    assert pl.graph.gradcheck(fn, [x])
    assert pl.graph.gradgradcheck(fn, [x])


def test_bad_indices_are_refused_before_anything_runs(device):
    x = pl.tensor(X, device=device)
    with pytest.raises(
        IndexError, match=r"index_select: index 4 is out of range for dim 1 of size 4"
    ):
        pl.index_select(x, 1, pl.tensor([0, 4], device=device))
    with pytest.raises(IndexError, match="index -1 is out of range .* not counted from the end"):
        pl.index_select(x, 0, pl.tensor([-1], device=device))
    with pytest.raises(TypeError, match="index_select: index must be an int64"):
        pl.index_select(x, 0, pl.tensor([0.0], device=device))
    with pytest.raises(ValueError, match="index_select: index must be 1-d"):
        pl.index_select(x, 0, pl.tensor([[0]], device=device))
    with pytest.raises(IndexError, match=r"index_select: dim 3 is out of range"):
        pl.index_select(x, 3, pl.tensor([0], device=device))
    with pytest.raises(ValueError, match="gather: index must have as many dimensions as x"):
        pl.gather(x, 0, pl.tensor([0], device=device))
    with pytest.raises(ValueError, match=r"gather: index of shape \(1, 5, 1\) is larger"):
        pl.gather(x, 0, pl.tensor(np.zeros((1, 5, 1), np.int64), device=device))
    weight = pl.tensor(np.zeros((4, 2)), device=device)
    with pytest.raises(IndexError, match=r"embedding: index 4 is out of range for the embeddings"):
        F.embedding(pl.tensor([1, 4], device=device), weight)
    with pytest.raises(ValueError, match="embedding: padding_idx 9 is outside the 4 embeddings"):
        F.embedding(pl.tensor([1], device=device), weight, padding_idx=9)
    with pytest.raises(ValueError, match=r"embedding: weight must be \(num_embeddings, dim\)"):
        F.embedding(pl.tensor([1], device=device), pl.tensor(np.zeros(4), device=device))
