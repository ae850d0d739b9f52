"""pylucid.nn.functional: losses and layers against PyTorch (float64 values and gradients
to rtol 1e-10: every formula here is a handful of correctly rounded steps, so agreement is
to a few ULPs), finite differences, second derivatives, and the errors of bad input.

PyTorch is the oracle where it is installed; those tests skip, saying so, where it is not.
"""

from __future__ import annotations

import numpy as np
import pytest

import pylucid as pl
import pylucid.nn.functional as F  # noqa: N812  (PyTorch's spelling: F.cross_entropy)
from tests.conftest import TORCH_REASON

torch = pytest.importorskip("torch", reason=TORCH_REASON)
TF = torch.nn.functional

RTOL = 1e-10  # float64: a few ULPs of the losses and gradients, whose terms are O(1)
#: float32 against the float64 oracle: the loss of a row is formed in float64 and rounded
#: once, the mean of 32 rows adds the float32 sum's rounding: 4 ULPs of float32 relative.
RTOL_F32 = 4 * 2.0**-23

#: (logits shape, target shape): a batch, one example, and K-dimensional (an image).
CE_SHAPES = [((6, 5), (6,)), ((5,), ()), ((3, 4, 2, 3), (3, 2, 3))]


def _targets(rng: np.random.Generator, shape: tuple, classes: int, ignored: bool) -> np.ndarray:
    t = rng.integers(0, classes, shape)
    if ignored and t.ndim:
        t.reshape(-1)[1] = -100  # one ignored position (PyTorch's default ignore_index)
    return t


def _compare(pl_out: pl.Tensor, torch_out: torch.Tensor, rtol: float = RTOL) -> None:
    np.testing.assert_allclose(pl_out.numpy(), torch_out.detach().numpy(), rtol=rtol, atol=rtol)


@pytest.mark.parametrize("shapes", CE_SHAPES, ids=["batch", "one", "k-dim"])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("smoothing", [0.0, 0.2])
def test_cross_entropy_with_indices_matches_torch(device, rng, shapes, reduction, smoothing):
    x_shape, t_shape = shapes
    classes = x_shape[0] if len(x_shape) == 1 else x_shape[1]
    x = rng.standard_normal(x_shape) * 3
    t = _targets(rng, t_shape, classes, ignored=True)
    ours = pl.tensor(x, device=device, requires_grad=True)
    theirs = torch.tensor(x, requires_grad=True)
    loss = F.cross_entropy(ours, pl.tensor(t, device=device), reduction=reduction,
                           label_smoothing=smoothing)  # fmt: skip
    expected = TF.cross_entropy(theirs, torch.tensor(t), reduction=reduction,
                                label_smoothing=smoothing)  # fmt: skip
    _compare(loss, expected)
    g = rng.standard_normal(expected.shape)
    loss.backward(pl.tensor(g, device=device))
    expected.backward(torch.tensor(g))
    _compare(ours.grad, theirs.grad)
    assert loss.grad_fn.name == "CrossEntropyBackward"


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_cross_entropy_with_probabilities_matches_torch(device, rng, reduction, smoothing):
    x = rng.standard_normal((4, 3, 2))
    p = rng.random((4, 3, 2))
    p /= p.sum(axis=1, keepdims=True)
    ours, target = pl.tensor(x, device=device, requires_grad=True), pl.tensor(p, device=device)
    theirs, target_t = torch.tensor(x, requires_grad=True), torch.tensor(p, requires_grad=True)
    ours_target = pl.tensor(p, device=device, requires_grad=True)
    loss = F.cross_entropy(ours, ours_target, reduction=reduction, label_smoothing=smoothing)
    expected = TF.cross_entropy(theirs, target_t, reduction=reduction, label_smoothing=smoothing)
    _compare(loss, expected)
    g = rng.standard_normal(expected.shape)
    loss.backward(pl.tensor(g, device=device))
    expected.backward(torch.tensor(g))
    _compare(ours.grad, theirs.grad)
    _compare(ours_target.grad, target_t.grad)  # probabilities get a gradient too
    assert target.shape == ours.shape


def test_cross_entropy_float32_within_a_few_ulps(device, rng):
    x = rng.standard_normal((32, 10)).astype(np.float32) * 4
    t = rng.integers(0, 10, 32)
    ours = pl.tensor(x, device=device, requires_grad=True)
    loss = F.cross_entropy(ours, pl.tensor(t, device=device), label_smoothing=0.1)
    theirs = torch.tensor(x.astype(np.float64), requires_grad=True)
    expected = TF.cross_entropy(theirs, torch.tensor(t), label_smoothing=0.1)
    expected.backward()
    loss.backward()
    assert loss.dtype is pl.float32 and ours.grad.dtype is pl.float32
    np.testing.assert_allclose(loss.item(), expected.item(), rtol=RTOL_F32)
    # each gradient element is g (p - q) with |.| <= 1/32: its float32 rounding is absolute
    np.testing.assert_allclose(ours.grad.numpy(), theirs.grad.numpy(), rtol=0, atol=2.0**-24)


def test_cross_entropy_all_ignored_is_nan_with_zero_gradient(device):
    x = pl.tensor(np.ones((2, 3)), device=device, requires_grad=True)
    loss = F.cross_entropy(x, pl.tensor(np.array([-100, -100]), device=device))
    assert np.isnan(loss.item())  # 0 / 0, as PyTorch
    loss.backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.zeros((2, 3)))


def test_cross_entropy_is_stable_for_huge_logits(device):
    x = np.array([[1e4, 0.0, -1e4], [-1e308, 0.0, 1e308]])
    loss = F.cross_entropy(pl.tensor(x, device=device), pl.tensor(np.array([0, 1]), device=device),
                           reduction="none")  # fmt: skip
    expected = TF.cross_entropy(torch.tensor(x), torch.tensor([0, 1]), reduction="none")
    _compare(loss, expected)


def test_cross_entropy_custom_ignore_index(device, rng):
    x = rng.standard_normal((5, 4))
    t = np.array([0, 3, 2, 3, 1])
    ours = pl.tensor(x, device=device, requires_grad=True)
    theirs = torch.tensor(x, requires_grad=True)
    F.cross_entropy(ours, pl.tensor(t, device=device), ignore_index=3).backward()
    TF.cross_entropy(theirs, torch.tensor(t), ignore_index=3).backward()
    _compare(ours.grad, theirs.grad)


@pytest.mark.parametrize("smoothing", [0.0, 0.3])
@pytest.mark.parametrize("reduction", ["mean", "none"])
def test_cross_entropy_gradcheck_and_gradgradcheck(device, rng, smoothing, reduction):
    x = pl.tensor(rng.standard_normal((4, 3)), device=device, requires_grad=True)
    t = pl.tensor(np.array([0, 2, -100, 1]), device=device)

    def fn(logits):
        return F.cross_entropy(logits, t, reduction=reduction, label_smoothing=smoothing)

    assert pl.graph.gradcheck(fn, [x])
    assert pl.graph.gradgradcheck(fn, [x])


def test_cross_entropy_errors_name_the_problem(device):
    x = pl.tensor(np.zeros((3, 4)), device=device)
    with pytest.raises(IndexError, match=r"cross_entropy: target 4 .* 4 classes"):
        F.cross_entropy(x, pl.tensor(np.array([0, 4, 1]), device=device))
    with pytest.raises(IndexError, match="target -1"):
        F.cross_entropy(x, pl.tensor(np.array([0, -1, 1]), device=device))
    with pytest.raises(ValueError, match=r"target of shape \(2,\) does not fit input"):
        F.cross_entropy(x, pl.tensor(np.array([0, 1]), device=device))
    with pytest.raises(TypeError, match="class indices of dtype int64"):
        F.cross_entropy(x, pl.tensor(np.array([True, False, True]), device=device))
    with pytest.raises(TypeError, match="floating-point logits"):
        F.cross_entropy(pl.tensor(np.zeros((3, 4), np.int64), device=device),
                        pl.tensor(np.array([0, 1, 2]), device=device))  # fmt: skip
    with pytest.raises(ValueError, match="reduction must be one of"):
        F.cross_entropy(x, pl.tensor(np.array([0, 1, 2]), device=device), reduction="avg")
    with pytest.raises(ValueError, match="label_smoothing must be in"):
        F.cross_entropy(x, pl.tensor(np.array([0, 1, 2]), device=device), label_smoothing=1.5)
    with pytest.raises(ValueError, match="must have the input's shape"):
        F.cross_entropy(x, pl.tensor(np.zeros((3, 2)), device=device))


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_nll_loss_matches_torch(device, rng, reduction):
    x = np.log(rng.dirichlet(np.ones(4), size=6))
    t = np.array([0, 3, -100, 2, 1, 3])
    ours, theirs = (
        pl.tensor(x, device=device, requires_grad=True),
        torch.tensor(x, requires_grad=True),
    )
    loss = F.nll_loss(ours, pl.tensor(t, device=device), reduction=reduction)
    expected = TF.nll_loss(theirs, torch.tensor(t), reduction=reduction)
    _compare(loss, expected)
    g = rng.standard_normal(expected.shape)
    loss.backward(pl.tensor(g, device=device))
    expected.backward(torch.tensor(g))
    _compare(ours.grad, theirs.grad)
    with pytest.raises(IndexError, match="nll_loss: target 4"):
        F.nll_loss(ours, pl.tensor(np.array([0, 4, 1, 1, 1, 1]), device=device))


def _normal_pair(r: np.random.Generator, s: tuple) -> tuple[np.ndarray, np.ndarray]:
    return r.standard_normal(s), r.standard_normal(s)


def _pair_losses():
    return [
        ("mse_loss", {}, _normal_pair),
        ("l1_loss", {}, _normal_pair),
        ("smooth_l1_loss", {"beta": 0.5}, _normal_pair),
        ("smooth_l1_loss", {"beta": 0.0}, _normal_pair),
        ("binary_cross_entropy", {}, lambda r, s: (r.uniform(0.05, 0.95, s), r.random(s))),
        ("binary_cross_entropy_with_logits", {},
         lambda r, s: (r.standard_normal(s) * 5, r.random(s))),
    ]  # fmt: skip


@pytest.mark.parametrize("case", _pair_losses(), ids=lambda c: f"{c[0]}{c[1] or ''}")
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_pair_losses_match_torch(device, rng, case, reduction):
    name, kwargs, draw = case
    x, y = draw(rng, (3, 5))
    ours, theirs = (
        pl.tensor(x, device=device, requires_grad=True),
        torch.tensor(x, requires_grad=True),
    )
    target, target_t = (
        pl.tensor(y, device=device, requires_grad=True),
        torch.tensor(y, requires_grad=True),
    )
    loss = getattr(F, name)(ours, target, reduction=reduction, **kwargs)
    expected = getattr(TF, name)(theirs, target_t, reduction=reduction, **kwargs)
    _compare(loss, expected)
    g = rng.standard_normal(expected.shape)
    loss.backward(pl.tensor(g, device=device))
    expected.backward(torch.tensor(g))
    _compare(ours.grad, theirs.grad)
    _compare(target.grad, target_t.grad)


def test_bce_with_logits_pos_weight_and_extremes(device, rng):
    x = np.array([[-800.0, -3.0, 0.0, 3.0, 800.0]])
    y = np.array([[0.0, 1.0, 0.5, 0.0, 1.0]])
    w = np.array([2.0, 0.5, 1.0, 3.0, 1.5])
    loss = F.binary_cross_entropy_with_logits(
        pl.tensor(x, device=device), pl.tensor(y, device=device),
        reduction="none", pos_weight=pl.tensor(w, device=device),
    )  # fmt: skip
    expected = TF.binary_cross_entropy_with_logits(
        torch.tensor(x), torch.tensor(y), reduction="none", pos_weight=torch.tensor(w)
    )
    _compare(loss, expected)  # finite at +-800: the stable form


def test_binary_cross_entropy_clamps_its_logs_as_torch(device):
    x, y = np.array([0.0, 1.0, 0.5]), np.array([1.0, 0.0, 1.0])
    loss = F.binary_cross_entropy(pl.tensor(x, device=device), pl.tensor(y, device=device),
                                  reduction="none")  # fmt: skip
    _compare(loss, TF.binary_cross_entropy(torch.tensor(x), torch.tensor(y), reduction="none"))


def test_linear_matches_torch(device, rng):
    x, w, b = rng.standard_normal((4, 3)), rng.standard_normal((2, 3)), rng.standard_normal(2)
    ours = [pl.tensor(v, device=device, requires_grad=True) for v in (x, w, b)]
    theirs = [torch.tensor(v, requires_grad=True) for v in (x, w, b)]
    out, expected = F.linear(*ours), TF.linear(*theirs)
    _compare(out, expected)
    out.sum().backward()
    expected.sum().backward()
    for a, e in zip(ours, theirs):
        _compare(a.grad, e.grad)
    _compare(F.linear(ours[0], ours[1]), TF.linear(theirs[0], theirs[1]))


def test_one_hot(device):
    t = pl.tensor(np.array([[0, 2], [1, 0]]), device=device)
    hot = F.one_hot(t)
    assert hot.dtype is pl.int64 and hot.shape == (2, 2, 3)
    np.testing.assert_array_equal(hot.numpy(), TF.one_hot(torch.tensor([[0, 2], [1, 0]])).numpy())
    assert F.one_hot(t, num_classes=5).shape == (2, 2, 5)
    with pytest.raises(IndexError, match=r"one_hot: class indices must be in 0\.\.1"):
        F.one_hot(t, num_classes=2)
    with pytest.raises(TypeError, match="integer dtype"):
        F.one_hot(pl.tensor(np.array([0.0]), device=device))


def test_pair_losses_refuse_mismatched_shapes(device):
    a, b = pl.tensor(np.zeros((2, 3)), device=device), pl.tensor(np.zeros(3), device=device)
    with pytest.raises(
        ValueError, match=r"mse_loss: input of shape \(2, 3\) and target of shape \(3,\)"
    ):
        F.mse_loss(a, b)
    with pytest.raises(ValueError, match="reduction must be one of"):
        F.l1_loss(a, a, reduction="avg")


def test_activations_are_the_ops_under_torchs_parameter_names():
    x = pl.tensor([[-1.0, 0.5, 2.0]])
    assert F.relu(input=x).tolist() == pl.relu(x).tolist()
    assert F.softmax(x, dim=1).tolist() == pl.softmax(x, dim=1).tolist()
    assert F.gelu(input=x, approximate="tanh").tolist() == pl.gelu(x, "tanh").tolist()
