"""nn.functional.pad against PyTorch (values exactly, gradients to rtol 1e-12: replicated
and wrapped positions add several g into one input), and dropout's contract (PyTorch's
random stream differs from NumPy's, so its masks are checked by their properties).

PyTorch is the oracle where it is installed; the tests skip, saying so, where it is not.
"""

from __future__ import annotations

import numpy as np
import pytest

import pylucid as pl
import pylucid.nn.functional as F  # noqa: N812  (PyTorch's spelling)
from tests.conftest import TORCH_REASON

torch = pytest.importorskip("torch", reason=TORCH_REASON)

X = np.arange(24.0).reshape(2, 3, 4) / 3.0

PADS = [
    ("constant", (1, 2)),
    ("constant", (1, -1, 2, 0)),
    ("constant", (0, 0, 1, 1, 1, 0)),
    ("reflect", (2, 3)),
    ("reflect", (1, 1, 2, 1)),
    ("replicate", (3, 1, 1, 2)),
    ("circular", (2, 4)),
    ("circular", (1, 0, 3, 2)),
]


@pytest.mark.parametrize("mode, amounts", PADS, ids=[f"{m}{a}" for m, a in PADS])
def test_pad_matches_torch(device, rng, mode, amounts):
    ours = pl.tensor(X, device=device, requires_grad=True)
    theirs = torch.tensor(X, requires_grad=True)
    extra = {"value": -1.5} if mode == "constant" else {}
    out = F.pad(ours, amounts, mode=mode, **extra)
    expected = torch.nn.functional.pad(theirs, amounts, mode=mode, **extra)
    np.testing.assert_array_equal(out.numpy(), expected.detach().numpy())
    g = rng.standard_normal(expected.shape)
    out.backward(pl.tensor(g, device=device))
    expected.backward(torch.tensor(g))
    np.testing.assert_allclose(ours.grad.numpy(), theirs.grad.numpy(), rtol=1e-12, atol=1e-12)


def test_pad_errors(device):
    x = pl.tensor(X, device=device)
    with pytest.raises(ValueError, match="pad: mode must be one of"):
        F.pad(x, (1, 1), mode="wrap")
    with pytest.raises(ValueError, match="pad: expected an even number of amounts"):
        F.pad(x, (1, 1, 1))
    with pytest.raises(
        ValueError, match=r"pad: reflect padding of \(4, 0\) is too large .* size 4"
    ):
        F.pad(x, (4, 0), mode="reflect")
    with pytest.raises(ValueError, match="no negative amounts"):
        F.pad(x, (-1, 0), mode="replicate")


def test_dropout_keeps_the_expectation_and_routes_the_gradient(device):
    pl.manual_seed(0)
    x = pl.tensor(np.ones(20_000), device=device, requires_grad=True)
    y = F.dropout(x, p=0.25)
    values = y.numpy()
    kept = values != 0
    assert abs(kept.mean() - 0.75) < 0.02  # 20k draws: the standard error is 0.003
    np.testing.assert_array_equal(values[kept], np.full(kept.sum(), 1 / 0.75))
    y.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), values)  # g times the same scaled mask
    pl.manual_seed(0)
    np.testing.assert_array_equal(F.dropout(x, p=0.25).numpy(), values)  # seeded


def test_dropout_edges(device):
    x = pl.tensor(X, device=device)
    assert F.dropout(x, p=0.5, training=False) is x
    assert F.dropout(x, p=0.0) is x
    np.testing.assert_array_equal(F.dropout(x, p=1.0).numpy(), np.zeros_like(X))
    with pytest.raises(ValueError, match=r"dropout: p must be in \[0, 1\]"):
        F.dropout(x, p=1.5)
