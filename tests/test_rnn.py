"""``nn.RNN``, ``nn.GRU``, ``nn.LSTM``, their cells and ``nn.utils.rnn.pad_sequence``
against PyTorch.

PyTorch's weights loaded with ``load_state_dict`` (so the keys, their order and the shapes
are PyTorch's), the same inputs and initial states: the same outputs and final states, and
the same gradients of the input, the initial states and every parameter, in float64 and
float32 on each backend (tolerances in ``tests/torch_oracle.py``). Dropout between layers
cannot match PyTorch's random numbers: it is checked by its statistics. Gradients are also
checked against finite differences (``gradcheck``), second derivatives of a cell included.
"""

from __future__ import annotations

import warnings
from types import ModuleType
from typing import Any

import numpy as np
import pytest

import pylucid as pl
from pylucid import nn
from pylucid.graph import gradcheck, gradgradcheck
from pylucid.nn.utils.rnn import (
    PackedSequence,
    pack_padded_sequence,
    pack_sequence,
    pad_packed_sequence,
    pad_sequence,
    unpack_sequence,
    unpad_sequence,
)
from tests.torch_oracle import DTYPES, TORCH_REASON, assert_close, compare_module

# PyTorch's note that its oneDNN kernels do not cover LSTM projections
pytestmark = pytest.mark.filterwarnings("ignore:LSTM with projections is not supported")


@pytest.fixture
def torch() -> ModuleType:
    """The oracle, or a skip naming how to install it."""
    return pytest.importorskip("torch", reason=TORCH_REASON)


def _build(kind: str, *args: Any, **kwargs: Any) -> Any:
    return lambda lib: getattr(lib.nn, kind)(*args, **kwargs)


def _arrays(*shapes: tuple[int, ...]) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(sum(map(sum, shapes)))
    return tuple(rng.standard_normal(s) for s in shapes)


# (module, positional arguments: the input and the initial state(s), training mode)
LAYER_CASES = [
    pytest.param(_build("RNN", 3, 4), _arrays((5, 2, 3)), True, id="rnn"),
    pytest.param(
        _build("RNN", 3, 4, 2, "relu", batch_first=True, bidirectional=True),
        (*_arrays((2, 5, 3)), *_arrays((4, 2, 4))),
        True,
        id="rnn-relu-2-layers-bidirectional-batch-first-h0",
    ),
    pytest.param(
        _build("RNN", 3, 4, 3, bias=False), _arrays((6, 3), (3, 4)), True, id="rnn-unbatched"
    ),
    pytest.param(
        _build("GRU", 3, 4, 2, bidirectional=True),
        (*_arrays((5, 2, 3)), *_arrays((4, 2, 4))),
        True,
        id="gru-2-layers-bidirectional-h0",
    ),
    pytest.param(
        _build("GRU", 3, 4, bias=False, batch_first=True),
        _arrays((2, 5, 3)),
        True,
        id="gru-no-bias-batch-first",
    ),
    pytest.param(_build("GRU", 3, 4), _arrays((5, 3), (1, 4)), True, id="gru-unbatched"),
    pytest.param(
        _build("LSTM", 3, 4, 2, bidirectional=True),
        (*_arrays((5, 2, 3)), _arrays((4, 2, 4), (4, 2, 4))),
        True,
        id="lstm-2-layers-bidirectional-h0-c0",
    ),
    pytest.param(
        _build("LSTM", 3, 4, 2, batch_first=True, bidirectional=True, proj_size=2),
        (*_arrays((2, 5, 3)), _arrays((4, 2, 2), (4, 2, 4))),
        True,
        id="lstm-projection-batch-first",
    ),
    pytest.param(
        _build("LSTM", 3, 4, proj_size=3),
        (*_arrays((5, 3)), _arrays((1, 3), (1, 4))),
        True,
        id="lstm-unbatched-projection",
    ),  # fmt: skip
    pytest.param(_build("LSTM", 3, 4, bias=False), _arrays((5, 2, 3)), True, id="lstm-no-h0"),
    pytest.param(
        _build("LSTM", 3, 4, 3, dropout=0.5), _arrays((5, 2, 3)), False, id="lstm-dropout-eval"
    ),
    pytest.param(
        _build("GRU", 3, 4, 2, dropout=0.0), _arrays((5, 2, 3)), True, id="gru-dropout-0-training"
    ),
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("build", "args", "train"), LAYER_CASES)
def test_recurrent_layer_matches_torch(
    torch: ModuleType, device: str, dtype: str, build: Any, args: Any, train: bool
) -> None:
    compare_module(torch, build, args, {}, dtype, device, train=train)


CELL_CASES = [
    pytest.param(_build("RNNCell", 3, 4), _arrays((2, 3), (2, 4)), id="rnn-cell"),
    pytest.param(
        _build("RNNCell", 3, 4, False, "relu"), _arrays((3,)), id="rnn-cell-relu-unbatched"
    ),
    pytest.param(_build("GRUCell", 3, 4), _arrays((2, 3), (2, 4)), id="gru-cell"),
    pytest.param(_build("GRUCell", 3, 4, bias=False), _arrays((3,), (4,)), id="gru-cell-unbatched"),
    pytest.param(
        _build("LSTMCell", 3, 4), (*_arrays((2, 3)), _arrays((2, 4), (2, 4))), id="lstm-cell"
    ),
    pytest.param(_build("LSTMCell", 3, 4, bias=False), _arrays((3,)), id="lstm-cell-unbatched"),
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("build", "args"), CELL_CASES)
def test_cell_matches_torch(
    torch: ModuleType, device: str, dtype: str, build: Any, args: Any
) -> None:
    compare_module(torch, build, args, {}, dtype, device)


@pytest.mark.parametrize(
    "build",
    [
        _build("RNN", 3, 4, 2, "relu", bias=False, batch_first=True, dropout=0.5,
               bidirectional=True),
        _build("GRU", 3, 4, 3, bidirectional=True),
        _build("LSTM", 3, 4, 2, bidirectional=True, proj_size=2),
        _build("LSTM", 3, 4),
        _build("RNNCell", 3, 4, False, "relu"),
        _build("GRUCell", 3, 4),
        _build("LSTMCell", 3, 4),
    ],
)  # fmt: skip
def test_parameters_and_repr_match_torch(torch: ModuleType, build: Any) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs, ours = build(torch), build(pl)
    assert [(k, tuple(v.shape)) for k, v in ours.state_dict().items()] == [
        (k, tuple(v.shape)) for k, v in theirs.state_dict().items()
    ]
    assert repr(ours) == repr(theirs)
    if hasattr(theirs, "all_weights"):
        assert [[tuple(p.shape) for p in ps] for ps in ours.all_weights] == [
            [tuple(p.shape) for p in ps] for ps in theirs.all_weights
        ]
        ours.flatten_parameters()  # (a no-op, as on PyTorch's CPU)


@pytest.mark.parametrize("build", [_build("LSTM", 8, 40, 2), _build("GRUCell", 8, 40)])
def test_initialisation_is_uniform_within_one_over_sqrt_hidden(build: Any) -> None:
    pl.manual_seed(0)
    values = np.concatenate([p.numpy().ravel() for p in build(pl).parameters()])
    bound = 1 / np.sqrt(40)
    assert np.abs(values).max() <= bound
    # thousands of U(-b, b) draws: mean 0 and variance b^2/3 within a few percent
    assert abs(values.mean()) < 0.05 * bound
    assert abs(values.var() / (bound**2 / 3) - 1) < 0.05


def test_dropout_between_layers_statistics(device: str) -> None:
    """Layer 0 outputs the constant 2 (relu of its bias), layer 1 copies its input (identity
    weights, relu of positive values): the output is layer 0's output after dropout."""
    p, size = 0.3, 50
    rnn = nn.RNN(1, size, 2, "relu", dropout=p).double().to(device)
    with pl.no_grad():
        for name, param in rnn.named_parameters():
            values = np.zeros(param.shape)
            if name == "bias_ih_l0":
                values[:] = 2.0
            if name == "weight_ih_l1":
                values = np.eye(size)
            param.copy_(pl.tensor(values, device=device))
    x = pl.zeros(20, 30, 1, dtype=pl.float64, device=device)
    pl.manual_seed(2)
    out = rnn(x)[0].numpy()
    kept = out != 0
    # 30000 Bernoulli(0.3) draws: the fraction's std is 0.0026, so 0.015 is about 6 sigma
    assert abs((~kept).mean() - p) < 0.015
    np.testing.assert_allclose(out[kept], 2.0 / (1 - p), rtol=1e-14)
    rnn.eval()
    np.testing.assert_array_equal(rnn(x)[0].numpy(), 2.0)
    pl.manual_seed(2)
    assert np.array_equal(rnn.train()(x)[0].numpy(), out)


def test_dropout_with_one_layer_warns_as_torch() -> None:
    with pytest.warns(UserWarning, match="non-zero dropout expects num_layers greater than 1"):
        nn.LSTM(3, 4, dropout=0.2)


def test_cells_and_layer_against_finite_differences() -> None:
    pl.manual_seed(0)
    x = pl.randn(2, 3, dtype=pl.float64, requires_grad=True)
    h = pl.randn(2, 4, dtype=pl.float64, requires_grad=True)
    c = pl.randn(2, 4, dtype=pl.float64, requires_grad=True)
    gru, lstm = nn.GRUCell(3, 4).double(), nn.LSTMCell(3, 4).double()
    assert gradcheck(lambda x, h: gru(x, h), [x, h])
    assert gradcheck(lambda x, h, c: lstm(x, (h, c)), [x, h, c])
    assert gradgradcheck(lambda x, h: gru(x, h), [x, h])
    layer = nn.LSTM(3, 2, bidirectional=True).double()
    sequence = pl.randn(3, 1, 3, dtype=pl.float64, requires_grad=True)
    assert gradcheck(lambda s: layer(s)[0], [sequence])


def test_recurrent_errors() -> None:
    lstm = nn.LSTM(3, 4, 2)
    with pytest.raises(ValueError, match="LSTM: expected input to be 2-d or 3-d, got 4-d"):
        lstm(pl.randn(1, 5, 2, 3))
    with pytest.raises(ValueError, match="input.size\\(-1\\) must be equal to input_size"):
        lstm(pl.randn(5, 2, 4))
    with pytest.raises(ValueError, match=r"expected h0 of shape \(2, 2, 4\), got \(1, 2, 4\)"):
        lstm(pl.randn(5, 2, 3), (pl.zeros(1, 2, 4), pl.zeros(2, 2, 4)))
    with pytest.raises(ValueError, match="for a 2-d input, h0 must be 2-d"):
        nn.GRU(3, 4)(pl.randn(5, 3), pl.zeros(1, 1, 4))
    with pytest.raises(TypeError, match=r"LSTM: hx must be a tuple \(h0, c0\)"):
        lstm(pl.randn(5, 2, 3), pl.zeros(2, 2, 4))
    with pytest.raises(ValueError, match="the input sequence has no time steps"):
        lstm(pl.randn(0, 2, 3))
    with pytest.raises(ValueError, match="unknown nonlinearity 'sigmoid'"):
        nn.RNN(3, 4, nonlinearity="sigmoid")
    with pytest.raises(ValueError, match="proj_size must be 0 .* smaller than hidden_size=4"):
        nn.LSTM(3, 4, proj_size=4)
    with pytest.raises(ValueError, match=r"dropout must be a number in \[0, 1\]"):
        nn.GRU(3, 4, 2, dropout=1.5)
    with pytest.raises(ValueError, match="hidden_size and num_layers must be greater than 0"):
        nn.RNN(3, 0)
    with pytest.raises(ValueError, match="GRUCell: expected input to be 1-d or 2-d"):
        nn.GRUCell(3, 4)(pl.randn(1, 2, 3))
    with pytest.raises(ValueError, match=r"LSTMCell: expected c of shape \(2, 4\)"):
        nn.LSTMCell(3, 4)(pl.randn(2, 3), (pl.zeros(2, 4), pl.zeros(4)))


PACKED_CASES = [
    pytest.param("LSTM", {"num_layers": 2, "bidirectional": True}, False, True, id="lstm"),
    pytest.param("LSTM", {"bidirectional": True, "proj_size": 2}, True, False, id="lstm-proj"),
    pytest.param("GRU", {"num_layers": 2}, False, False, id="gru"),
    pytest.param("RNN", {"bidirectional": True, "nonlinearity": "relu"}, True, True, id="rnn"),
]


def _packed_model(
    lib: ModuleType, kind: str, options: dict[str, Any], lengths: list[int], batch_first: bool,
    enforce_sorted: bool,
) -> Any:  # fmt: skip
    """A module of ``lib`` that packs its padded input, runs the layer and pads again."""
    utils = lib.nn.utils.rnn

    class Packed(lib.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layer = getattr(lib.nn, kind)(3, 4, batch_first=batch_first, **options)

        def forward(self, x: Any, hx: Any) -> Any:
            packed = utils.pack_padded_sequence(x, lengths, batch_first, enforce_sorted)
            out, state = self.layer(packed, hx)
            padded, sizes = utils.pad_packed_sequence(out, batch_first, -1.0, total_length=6)
            assert sizes.tolist() == lengths
            return packed.data, padded, state

    return Packed()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("kind", "options", "enforce_sorted", "batch_first"), PACKED_CASES)
def test_packed_sequences_match_torch(
    torch: ModuleType, device: str, dtype: str, kind: str, options: dict[str, Any],
    enforce_sorted: bool, batch_first: bool,
) -> None:  # fmt: skip
    """A packed batch through the layer and back to padding: the same packed data, outputs,
    lengths and final states (each sequence's state after its own last step, in the
    original order) as PyTorch, and the same gradients."""
    lengths = [5, 4, 2] if enforce_sorted else [2, 5, 4]
    states = (2 if options.get("bidirectional") else 1) * options.get("num_layers", 1)
    x, h0, c0 = _arrays(
        (3, 5, 3) if batch_first else (5, 3, 3), (states, 3, options.get("proj_size") or 4),
        (states, 3, 4),
    )  # fmt: skip
    args = (x, (h0, c0)) if kind == "LSTM" else (x, h0)

    def build(lib: ModuleType) -> Any:
        return _packed_model(lib, kind, options, lengths, batch_first, enforce_sorted)

    compare_module(torch, build, args, {}, dtype, device)


# -- pad_sequence -----------------------------------------------------------------------------
@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("side", ["right", "left"])
def test_pad_sequence_matches_torch(
    torch: ModuleType, device: str, batch_first: bool, side: str
) -> None:
    arrays = _arrays((3, 2), (1, 2), (4, 2))
    theirs = [torch.tensor(a, requires_grad=True) for a in arrays]
    ours = [pl.tensor(a, device=device, requires_grad=True) for a in arrays]
    expected = torch.nn.utils.rnn.pad_sequence(theirs, batch_first, -1.5, side)
    out = pad_sequence(ours, batch_first, -1.5, side)
    assert out.device == device
    assert_close(out, expected, "float64", "padded")
    upstream = np.random.default_rng(0).standard_normal(tuple(expected.shape))
    (expected * torch.tensor(upstream)).sum().backward()
    (out * pl.tensor(upstream, device=device)).sum().backward()
    for mine, reference in zip(ours, theirs):
        assert_close(mine.grad, reference.grad, "float64", "gradient")


def test_pad_sequence_tensor_input_dtype_and_errors(torch: ModuleType) -> None:
    stacked = np.arange(6.0).reshape(2, 3)
    np.testing.assert_array_equal(
        pad_sequence(pl.tensor(stacked)).numpy(),
        torch.nn.utils.rnn.pad_sequence(torch.tensor(stacked)).numpy(),
    )
    mixed = pad_sequence([pl.ones(2), pl.ones(3, dtype=pl.float64)])
    assert mixed.dtype is pl.float32 and mixed.shape == (3, 2)  # the first's dtype, as torch
    with pytest.raises(ValueError, match="received an empty list of sequences"):
        pad_sequence([])
    with pytest.raises(ValueError, match="same trailing dimensions"):
        pad_sequence([pl.ones(2, 3), pl.ones(3, 4)])
    with pytest.raises(ValueError, match="padding_side must be 'left' or 'right', got 'middle'"):
        pad_sequence([pl.ones(2)], padding_side="middle")


def test_packing_utilities_match_torch(torch: ModuleType, device: str) -> None:
    rnn_utils = torch.nn.utils.rnn
    arrays = _arrays((2, 3), (4, 3), (1, 3), (4, 3))
    ours = pack_sequence([pl.tensor(a, device=device) for a in arrays], enforce_sorted=False)
    theirs = rnn_utils.pack_sequence([torch.tensor(a) for a in arrays], enforce_sorted=False)
    assert isinstance(ours, PackedSequence) and isinstance(ours, tuple)
    assert ours.data.device == device and ours.batch_sizes.device == "cpu"
    for mine, reference in zip(ours, theirs):  # data, batch_sizes and both permutations
        np.testing.assert_array_equal(mine.numpy(), reference.numpy())
    for mine, reference in zip(unpack_sequence(ours), rnn_utils.unpack_sequence(theirs)):
        np.testing.assert_array_equal(mine.numpy(), reference.numpy())
    padded, lengths = pad_packed_sequence(ours, batch_first=True, padding_value=7.0)
    expected, expected_lengths = rnn_utils.pad_packed_sequence(theirs, True, 7.0)
    np.testing.assert_array_equal(padded.numpy(), expected.numpy())
    assert lengths.dtype is pl.int64 and lengths.tolist() == expected_lengths.tolist()
    for mine, reference in zip(
        unpad_sequence(padded, lengths, batch_first=True),
        rnn_utils.unpad_sequence(expected, expected_lengths, batch_first=True),
    ):
        np.testing.assert_array_equal(mine.numpy(), reference.numpy())
    moved = ours.to(pl.float32)
    assert moved.data.dtype is pl.float32 and moved.sorted_indices is not None


def test_packing_errors() -> None:
    x = pl.randn(5, 3, 2)
    with pytest.raises(ValueError, match="must be in decreasing order when enforce_sorted=True"):
        pack_padded_sequence(x, [2, 5, 3])
    with pytest.raises(ValueError, match="every length must be between 1 and the padded length 5"):
        pack_padded_sequence(x, [2, 0, 3], enforce_sorted=False)
    with pytest.raises(ValueError, match="every length must be between 1 and the padded length 5"):
        pack_padded_sequence(x, [6, 2, 3], enforce_sorted=False)
    with pytest.raises(ValueError, match="2 lengths for a batch of 3 sequences"):
        pack_padded_sequence(x, [5, 2])
    packed = pack_padded_sequence(x, [5, 3, 2])
    with pytest.raises(ValueError, match="total_length=3 and max sequence length being 5"):
        pad_packed_sequence(packed, total_length=3)
    with pytest.raises(ValueError, match="expected a packed batch's data to be 2-d"):
        nn.GRU(2, 4)(packed._replace(data=packed.data.unsqueeze(1)))
