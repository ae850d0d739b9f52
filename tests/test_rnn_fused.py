"""The fused recurrent ops (``pylucid.ops.recurrent``: one node per layer and direction over
the whole sequence) against the composed path they replace (the cells, one op per sum,
product and activation at every step), a float64 NumPy forward, finite differences and
``pl.compile``. ``tests/test_rnn.py`` compares the layers built on them with PyTorch.

Tolerances:

- float64 against the cells and NumPy: 1e-12 relative and absolute. The same formulas; only
  the order of the sums differs (the input's projection as one product over all steps
  instead of one per step; the weights' and biases' gradients summed over all steps in one
  product or sum instead of step by step): a few ulps (1e-16) per operation, carried
  through a dozen steps.
- float32 against the float64 cells: 2e-5, the same bound for the cells themselves (both are
  float32 computations of the same sums, each a few ulps per operation through the steps).
- float32 forward against the float32 cells: 1e-6 absolute (values of order 1): the gate
  kernels round where the ops round (each activation, product and sum to float32), so the
  only difference is the order of the projection's sums, a few float32 ulps (6e-8).
"""

from __future__ import annotations

import numpy as np
import pytest

import pylucid as pl
from pylucid import nn
from pylucid.graph import gradcheck, gradgradcheck
from pylucid.graph.node import FreedGraphError
from pylucid.ops.recurrent import gru_cell, lstm_cell, recurrent, rnn_cell
from tests.torch_oracle import TORCH_REASON

MODES = ("LSTM", "GRU", "RNN_TANH", "RNN_RELU")
GATES = {"LSTM": 4, "GRU": 3, "RNN_TANH": 1, "RNN_RELU": 1}


def _inputs(mode: str, steps: int, batch: int, features: int, size: int, seed: int = 0):
    """x (T, B, I), h0, c0 (None but for an LSTM), w_ih, w_hh, b_ih, b_hh as float64
    arrays."""
    rng = np.random.default_rng(seed)
    gates = GATES[mode] * size
    arrays = [
        rng.standard_normal((steps, batch, features)),
        rng.standard_normal((batch, size)) * 0.5,
        rng.standard_normal((batch, size)) * 0.5 if mode == "LSTM" else None,
        rng.standard_normal((gates, features)) * 0.5,
        rng.standard_normal((gates, size)) * 0.5,
        rng.standard_normal(gates) * 0.5,
        rng.standard_normal(gates) * 0.5,
    ]
    return arrays


def _composed(mode, x, h, c, w_ih, w_hh, b_ih, b_hh, reverse, batch_first):
    """The old path: the cells step by step, the output stacked as the fused op's."""
    axis = 1 if batch_first else 0
    steps = x.shape[axis]
    ys = [None] * steps
    for t in range(steps - 1, -1, -1) if reverse else range(steps):
        x_t = x[:, t] if batch_first else x[t]
        if mode == "LSTM":
            h, c = lstm_cell(x_t, h, c, w_ih, w_hh, b_ih, b_hh)
        elif mode == "GRU":
            h = gru_cell(x_t, h, w_ih, w_hh, b_ih, b_hh)
        else:
            h = rnn_cell(x_t, h, w_ih, w_hh, b_ih, b_hh, mode[4:].lower())
        ys[t] = h
    return pl.stack(ys + ([c] if mode == "LSTM" else []), axis=axis)


def _sigmoid(a: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-a))


def _numpy_forward(mode, x, h, c, w_ih, w_hh, b_ih, b_hh, reverse):
    """The float64 NumPy forward of the cells' formulas, time-major."""
    steps, size = x.shape[0], w_hh.shape[1]
    ys = [None] * steps
    for t in range(steps - 1, -1, -1) if reverse else range(steps):
        gx, gh = x[t] @ w_ih.T + b_ih, h @ w_hh.T + b_hh
        if mode == "LSTM":
            i, f, g, o = np.split(gx + gh, 4, axis=-1)
            c = _sigmoid(f) * c + _sigmoid(i) * np.tanh(g)
            h = _sigmoid(o) * np.tanh(c)
        elif mode == "GRU":
            r = _sigmoid(gx[:, :size] + gh[:, :size])
            z = _sigmoid(gx[:, size : 2 * size] + gh[:, size : 2 * size])
            n = np.tanh(gx[:, 2 * size :] + r * gh[:, 2 * size :])
            h = (1 - z) * n + z * h
        else:
            h = np.maximum(gx + gh, 0) if mode == "RNN_RELU" else np.tanh(gx + gh)
        ys[t] = h
    return np.stack(ys + ([c] if mode == "LSTM" else []))


def _run(arrays, mode, dtype, device, reverse, batch_first, upstream, fused):
    tensors = [
        None if a is None else pl.tensor(a, dtype=dtype, device=device, requires_grad=True)
        for a in arrays
    ]
    x, *rest = tensors
    if batch_first:
        x = x.transpose(0, 1)
    run = recurrent if fused else _composed
    out = run(mode, x, *rest, reverse=reverse, batch_first=batch_first)
    (out * pl.tensor(upstream, dtype=dtype, device=device)).sum().backward()
    return [out.numpy().astype(np.float64)] + [
        t.grad.numpy().astype(np.float64) for t in tensors if t is not None
    ]


@pytest.mark.parametrize("layout", ["time-major", "batch-first"])
@pytest.mark.parametrize("reverse", [False, True], ids=["forward", "reverse"])
@pytest.mark.parametrize("mode", MODES)
def test_fused_matches_composed_cells_and_numpy(mode, reverse, layout, device) -> None:
    batch_first = layout == "batch-first"
    steps, batch = 7, 3
    arrays = _inputs(mode, steps, batch, 5, 4)
    shape = (steps + (mode == "LSTM"), batch, 4)
    upstream = np.random.default_rng(1).standard_normal(shape)  # (non-uniform, c_T included)
    if batch_first:
        upstream = upstream.transpose(1, 0, 2)
    fused = _run(arrays, mode, pl.float64, device, reverse, batch_first, upstream, True)
    cells = _run(arrays, mode, pl.float64, device, reverse, batch_first, upstream, False)
    expected = _numpy_forward(mode, *arrays, reverse)
    np.testing.assert_allclose(
        fused[0], expected.transpose(1, 0, 2) if batch_first else expected, 1e-12, 1e-12
    )
    for ours, theirs in zip(fused, cells):
        np.testing.assert_allclose(ours, theirs, rtol=1e-12, atol=1e-12)
    single = _run(arrays, mode, pl.float32, device, reverse, batch_first, upstream, True)
    single_cells = _run(arrays, mode, pl.float32, device, reverse, batch_first, upstream, False)
    for ours, theirs, exact in zip(single, single_cells, cells):
        np.testing.assert_allclose(ours, exact, rtol=2e-5, atol=2e-5)
        np.testing.assert_allclose(theirs, exact, rtol=2e-5, atol=2e-5)
    np.testing.assert_allclose(single[0], single_cells[0], rtol=0, atol=1e-6)


@pytest.mark.parametrize(("mode", "reverse", "batch_first"), [
    ("LSTM", False, False), ("LSTM", True, True), ("GRU", True, False),
    ("GRU", False, True), ("RNN_TANH", False, False), ("RNN_RELU", True, True),
])  # fmt: skip
def test_gradients_against_finite_differences(mode, reverse, batch_first) -> None:
    arrays = _inputs(mode, 3, 2, 3, 2, seed=3)
    if batch_first:
        arrays[0] = arrays[0].transpose(1, 0, 2).copy()
    tensors = [pl.tensor(a, requires_grad=True) for a in arrays if a is not None]

    def f(x, h, *rest):
        c = rest[0] if mode == "LSTM" else None
        weights = rest[1:] if mode == "LSTM" else rest
        return recurrent(mode, x, h, c, *weights, reverse=reverse, batch_first=batch_first)

    assert gradcheck(f, tensors)
    assert gradgradcheck(f, tensors)  # (grad_graph: the cells recomputed as a graph)


def test_layer_second_derivatives() -> None:
    pl.manual_seed(0)
    layer = nn.LSTM(3, 2, num_layers=2, bidirectional=True).double()
    x = pl.randn(3, 2, 3, dtype=pl.float64, requires_grad=True)
    assert gradgradcheck(lambda s: layer(s)[1][1], [x])
    gru = nn.GRU(3, 2, batch_first=True).double()
    assert gradgradcheck(lambda s: gru(s)[0], [x])


def test_backward_twice_needs_retain_graph() -> None:
    layer = nn.GRU(3, 4)
    out, _ = layer(pl.randn(5, 2, 3))
    out.sum().backward(retain_graph=True)
    first = layer.weight_hh_l0.grad.numpy().copy()
    out.sum().backward()
    np.testing.assert_allclose(layer.weight_hh_l0.grad.numpy(), 2 * first, rtol=1e-6)
    with pytest.raises(FreedGraphError):
        out.sum().backward()


def test_unbatched_batch_first_input_matches_torch() -> None:
    """An unbatched (L, I) input is a batch of one, batch_first or not (as PyTorch: it
    raised before, the batch inserted at the wrong axis)."""
    torch = pytest.importorskip("torch", reason=TORCH_REASON)
    torch.manual_seed(0)
    theirs = torch.nn.LSTM(3, 4, num_layers=2, batch_first=True, bidirectional=True).double()
    ours = nn.LSTM(3, 4, num_layers=2, batch_first=True, bidirectional=True).double()
    ours.load_state_dict({k: pl.tensor(v.detach().numpy()) for k, v in theirs.state_dict().items()})
    x = np.random.default_rng(0).standard_normal((5, 3))
    out, (h, c) = ours(pl.tensor(x))
    t_out, (t_h, t_c) = theirs(torch.tensor(x))
    for mine, reference in ((out, t_out), (h, t_h), (c, t_c)):
        assert mine.shape == tuple(reference.shape)
        np.testing.assert_allclose(mine.numpy(), reference.detach().numpy(), 1e-12, 1e-12)


def test_char_lm_step_compiles_and_replays_eager_bits() -> None:
    """The benchmark's char LM (Embedding, LSTM, Linear; cross_entropy, AdamW,
    clip_grad_norm_) under pl.compile: one capture, replays, the eager losses and weights
    bit for bit; the fused op and its backward are one host call each, not one per step
    (the cells' step took 843 host calls at 64 steps, 17 with the fused op)."""
    from pylucid.bench.models import CharLMConfig, _train_step, batch_data, build_module

    cfg = CharLMConfig(vocab=11, embed=8, hidden=16, length=6, batch=4)
    batches = [batch_data(cfg, seed) for seed in range(4)]
    runs = []
    for compiled in (False, True):
        pl.manual_seed(0)
        model = build_module(pl, cfg)
        step = _train_step(pl, cfg, model, model)
        run = pl.compile(step) if compiled else step
        losses = [run(pl.tensor(x), pl.tensor(y)).item() for x, y in batches]
        runs.append((losses, [p.numpy().copy() for p in model.parameters()], run))
    (eager_losses, eager_params, _), (losses, params, run) = runs
    assert losses == eager_losses
    for ours, theirs in zip(params, eager_params):
        np.testing.assert_array_equal(ours, theirs)
    assert run.stats.replays == 2
    (program,) = run.programs
    calls = program.host_calls
    assert calls.count("recurrent") == calls.count("recurrent_backward") == 1
    assert calls.count("matmul") == 0 and calls.count("getitem") < cfg.length
