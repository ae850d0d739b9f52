"""The graph engine: ordering, accumulation, retain_graph, freed graphs, grad mode."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import pylucid as pl
from pylucid.graph import FreedGraphError


def test_fan_out_gradients_are_summed(device: str) -> None:
    x = pl.tensor([1.0, 2.0, 3.0], device=device, requires_grad=True)
    y = x * x + x * 3.0 + x  # dy/dx = 2x + 4
    y.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [6.0, 8.0, 10.0])


def test_diamond_graph_runs_each_node_once() -> None:
    x = pl.tensor(2.0, requires_grad=True)
    a = x * 3.0
    b = a * a  # used twice below
    loss = b + b * a  # 9x^2 + 27x^3 -> 18x + 81x^2 = 36 + 324
    loss.backward()
    assert x.grad.item() == pytest.approx(360.0)


def test_deep_chain_of_100_000_ops_is_iterative() -> None:
    x = pl.tensor(1.0, requires_grad=True)
    y = x
    for _ in range(100_000):
        y = y + 1.0
    y.backward()
    assert y.item() == 100_001.0
    assert x.grad.item() == 1.0


def test_grads_accumulate_across_backward_calls() -> None:
    x = pl.tensor([1.0, 2.0], requires_grad=True)
    (x * 2.0).sum().backward()
    first = x.grad
    (x * 3.0).sum().backward()
    assert x.grad is first  # the same tensor, updated
    np.testing.assert_array_equal(x.grad.numpy(), [5.0, 5.0])


def test_first_grad_does_not_alias_other_leaves() -> None:
    a = pl.tensor([1.0], requires_grad=True)
    b = pl.tensor([1.0], requires_grad=True)
    (a + b).sum().backward()
    (a * 2.0).sum().backward()
    assert a.grad.item() == 3.0
    assert b.grad.item() == 1.0


def test_retain_graph_allows_second_backward(device: str) -> None:
    x = pl.tensor([1.0, 4.0], device=device, requires_grad=True)
    y = pl.log2(x).sum()
    y.backward(retain_graph=True)
    y.backward()
    np.testing.assert_allclose(x.grad.numpy(), 2 / (np.array([1.0, 4.0]) * np.log(2)), rtol=1e-6)


def test_backward_through_freed_graph_names_the_node() -> None:
    x = pl.tensor([1.0, 4.0], requires_grad=True)
    y = pl.log2(x).sum()
    y.backward()
    with pytest.raises(FreedGraphError, match="Log2Backward.*retain_graph=True"):
        y.backward()


def test_non_scalar_backward_needs_gradient() -> None:
    y = pl.tensor([1.0, 2.0], requires_grad=True) * 2.0
    with pytest.raises(RuntimeError, match=r"one element.*shape \(2,\).*gradient="):
        y.backward()


def test_non_scalar_backward_with_gradient() -> None:
    x = pl.tensor([1.0, 2.0], requires_grad=True)
    (x * x).backward(pl.tensor([1.0, 10.0]))
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, 40.0])


def test_gradient_shape_mismatch_is_reported() -> None:
    y = pl.tensor([1.0, 2.0], requires_grad=True) * 2.0
    with pytest.raises(RuntimeError, match=r"shape \(3,\) does not match .* shape \(2,\)"):
        y.backward(pl.tensor([1.0, 2.0, 3.0]))


def test_backward_of_tensor_without_grad_is_reported() -> None:
    with pytest.raises(RuntimeError, match="does not require grad"):
        pl.tensor([1.0]).sum().backward()


def test_graph_backward_function_takes_several_roots() -> None:
    x = pl.tensor([1.0, 2.0], requires_grad=True)
    a, b = x * 2.0, x * x
    pl.graph.backward([a, b], [pl.tensor([1.0, 1.0]), pl.tensor([0.5, 0.5])])
    np.testing.assert_array_equal(x.grad.numpy(), [3.0, 4.0])


def test_broadcasting_backward_sums_over_broadcast_dims(device: str) -> None:
    a = pl.tensor(np.ones((2, 3, 4)), device=device, requires_grad=True)
    b = pl.tensor(np.full((3, 1), 2.0), device=device, requires_grad=True)
    c = pl.tensor(5.0, device=device, requires_grad=True)
    (a * b + c).sum().backward()
    assert b.grad.shape == (3, 1)
    np.testing.assert_array_equal(b.grad.numpy(), np.full((3, 1), 8.0))
    np.testing.assert_array_equal(a.grad.numpy(), np.full((2, 3, 4), 2.0))
    assert c.grad.shape == () and c.grad.item() == 24.0


def test_mixed_dtype_gradients_take_each_leaf_dtype() -> None:
    a = pl.tensor([1.0, 2.0], dtype=pl.float32, requires_grad=True)
    b = pl.tensor([3.0, 4.0], dtype=pl.float64, requires_grad=True)
    y = a * b
    assert y.dtype is pl.float64
    y.sum().backward()
    assert a.grad.dtype is pl.float32 and b.grad.dtype is pl.float64


def test_no_grad_context_and_decorator() -> None:
    x = pl.tensor([1.0], requires_grad=True)
    with pl.no_grad():
        y = x * 2.0
        with pl.enable_grad():
            z = x * 2.0
    assert y.grad_fn is None and not y.requires_grad
    assert z.grad_fn is not None

    @pl.no_grad()
    def step() -> pl.Tensor:
        return x * 2.0

    assert step().grad_fn is None
    assert pl.is_grad_enabled()


def test_set_grad_enabled_call_and_context() -> None:
    with pl.set_grad_enabled(False):
        assert not pl.is_grad_enabled()
    assert pl.is_grad_enabled()
    pl.set_grad_enabled(False)
    try:
        assert not pl.is_grad_enabled()
    finally:
        pl.set_grad_enabled(True)


def test_grad_mode_is_thread_local() -> None:
    seen = []
    with pl.no_grad():
        thread = threading.Thread(target=lambda: seen.append(pl.is_grad_enabled()))
        thread.start()
        thread.join()
        assert not pl.is_grad_enabled()
    assert seen == [True]


def test_leaf_and_detach() -> None:
    x = pl.tensor([1.0], requires_grad=True)
    y = x * 2.0
    assert x.is_leaf and not y.is_leaf
    d = y.detach()
    assert d.is_leaf and not d.requires_grad
    assert np.shares_memory(d.numpy(), y.numpy())


def test_requires_grad_off_on_non_leaf_is_refused() -> None:
    y = pl.tensor([1.0], requires_grad=True) * 2.0
    with pytest.raises(RuntimeError, match="MulBackward.*detach"):
        y.requires_grad_(False)


def test_unused_input_gets_no_grad() -> None:
    x = pl.tensor([1.0], requires_grad=True)
    w = pl.tensor([1.0], requires_grad=True)
    (x * 2.0).sum().backward()
    assert w.grad is None


def test_gradcheck_catches_a_wrong_gradient() -> None:
    from pylucid.graph.gradcheck import GradcheckError

    x = pl.tensor([0.5, 2.0], dtype=pl.float64, requires_grad=True)
    assert pl.graph.gradcheck(lambda t: pl.log2(t) * 3.0, [x])
    # A function whose backward is wrong: detach part of it behind the engine's back.
    with pytest.raises(GradcheckError, match="Jacobian mismatch"):
        pl.graph.gradcheck(lambda t: t * t.detach(), [x])
    assert not pl.graph.gradcheck(lambda t: t * t.detach(), [x], raise_exception=False)


def test_gradcheck_refuses_float32() -> None:
    x = pl.tensor([1.0], requires_grad=True)
    with pytest.raises(TypeError, match="float64"):
        pl.graph.gradcheck(pl.log2, [x])


def test_leaf_gradients_are_not_copied_for_a_recycled_address(monkeypatch) -> None:
    """A weight's gradient becomes its .grad without a copy unless some other place holds
    it. The engine once kept the ids of shared storages: a fresh gradient at the address of
    a freed shared one (CPython reuses addresses) was copied for nothing - 36 of the 47
    leaf gradients of the benchmark's GPT step."""
    from pylucid.backends import registry
    from pylucid.bench import models

    cfg = models.GPTConfig(vocab=65, block=32, width=64, heads=4, layers=2, batch=4)
    tokens, targets = models.batch_data(cfg)
    pl.manual_seed(0)
    model = models.build_module(pl, cfg)
    backend = registry.get("numba")
    copied = []
    original = backend.clone

    def counting_clone(a):  # noqa: ANN001, ANN202
        copied.append(a.shape)
        return original(a)

    monkeypatch.setattr(backend, "clone", counting_clone)
    for _ in range(3):
        model.zero_grad()
        logits = model(pl.tensor(tokens)).reshape(-1, cfg.vocab)
        pl.nn.functional.cross_entropy(logits, pl.tensor(targets).reshape(-1)).backward()
    weights = [p.shape for p in model.parameters() if p.ndim == 2]
    assert weights and not [shape for shape in copied if len(shape) == 2], copied
