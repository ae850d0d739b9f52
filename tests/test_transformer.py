"""``nn.TransformerEncoderLayer``, ``nn.TransformerEncoder``, the decoder and
``nn.Transformer``, and the GELU they use, against PyTorch.

PyTorch's weights loaded with ``load_state_dict``, the same inputs and masks: the same
outputs and gradients of the inputs and every parameter, in float64 and float32 on each
backend (tolerances in ``tests/torch_oracle.py``). Dropout runs with p = 0 in training, or
in evaluation, where both libraries are deterministic; its training behaviour is checked
without PyTorch.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

import numpy as np
import pytest

import pylucid as pl
from pylucid import nn
from pylucid.compat import torch_differs
from pylucid.graph import gradcheck, gradgradcheck
from pylucid.nn import functional as F  # noqa: N812
from tests.torch_oracle import DTYPES, TORCH_REASON, assert_close, compare_module, torch_state

# PyTorch's own warnings about its fast paths and mixed mask types (the mix is tested here)
pytestmark = [
    pytest.mark.filterwarnings("ignore:Support for mismatched"),
    pytest.mark.filterwarnings("ignore:enable_nested_tensor is True"),
    pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors"),
]


@pytest.fixture
def torch() -> ModuleType:
    """The oracle, or a skip naming how to install it."""
    return pytest.importorskip("torch", reason=TORCH_REASON)


L, T, N, E = 5, 4, 3, 8
rng = np.random.default_rng(4)
PADDING = rng.random((N, L)) > 0.6
PADDING[:, 0] = False
CAUSAL = np.triu(np.full((L, L), -np.inf), 1)
CAUSAL_BOOL = np.isinf(CAUSAL)


def _arrays(*shapes: tuple[int, ...]) -> tuple[np.ndarray, ...]:
    data = np.random.default_rng(sum(map(sum, shapes)))
    return tuple(data.standard_normal(s) for s in shapes)


def _encoder_layer(lib: ModuleType, **options: Any) -> Any:
    return lib.nn.TransformerEncoderLayer(**{"d_model": E, "nhead": 2, "dim_feedforward": 16,
                                             "dropout": 0.0, **options})  # fmt: skip


def _decoder_layer(lib: ModuleType, **options: Any) -> Any:
    return lib.nn.TransformerDecoderLayer(**{"d_model": E, "nhead": 2, "dim_feedforward": 16,
                                             "dropout": 0.0, **options})  # fmt: skip


# (module, positional inputs, keyword arguments (masks), training mode)
CASES = [
    pytest.param(_encoder_layer, _arrays((L, N, E)), {}, True, id="encoder-layer"),
    pytest.param(
        lambda lib: _encoder_layer(lib, activation="gelu", norm_first=True, batch_first=True),
        _arrays((N, L, E)),
        {"src_key_padding_mask": PADDING, "src_mask": CAUSAL, "is_causal": True},
        True,
        id="encoder-layer-gelu-norm-first-masks",
    ),
    pytest.param(
        lambda lib: _encoder_layer(lib, bias=False, layer_norm_eps=1e-3),
        _arrays((L, N, E)),
        {"src_mask": CAUSAL_BOOL},
        True,
        id="encoder-layer-no-bias-bool-mask",
    ),
    pytest.param(
        lambda lib: _encoder_layer(lib, activation=lib.nn.GELU(approximate="tanh")),
        _arrays((L, E)),
        {"src_key_padding_mask": PADDING[0]},
        True,
        id="encoder-layer-module-activation-unbatched",
    ),
    pytest.param(
        lambda lib: _encoder_layer(lib, dropout=0.3),
        _arrays((L, N, E)),
        {},
        False,
        id="encoder-layer-dropout-eval",
    ),  # fmt: skip
    pytest.param(
        lambda lib: lib.nn.TransformerEncoder(
            _encoder_layer(lib, batch_first=True), 2, lib.nn.LayerNorm(E)
        ),
        _arrays((N, L, E)),
        {"src_key_padding_mask": PADDING, "mask": CAUSAL},
        True,
        id="encoder-2-layers-norm",
    ),
    pytest.param(
        lambda lib: lib.nn.TransformerDecoderLayer(E, 2, 16, 0.0, norm_first=True),
        _arrays((T, N, E), (L, N, E)),
        {"tgt_mask": CAUSAL[:T, :T], "memory_key_padding_mask": PADDING},
        True,
        id="decoder-layer-norm-first",
    ),
    pytest.param(
        lambda lib: lib.nn.TransformerDecoder(_decoder_layer(lib, batch_first=True), 2),
        _arrays((N, T, E), (N, L, E)),
        {"tgt_key_padding_mask": PADDING[:, :T], "memory_mask": CAUSAL_BOOL[:T]},
        True,
        id="decoder-2-layers",
    ),
    pytest.param(
        lambda lib: lib.nn.Transformer(E, 2, 2, 1, 16, 0.0, batch_first=True),
        _arrays((N, L, E), (N, T, E)),
        {
            "tgt_mask": CAUSAL[:T, :T],
            "src_key_padding_mask": PADDING,
            "memory_key_padding_mask": PADDING,
        },
        True,
        id="transformer",
    ),  # fmt: skip
    pytest.param(
        lambda lib: lib.nn.Transformer(E, 2, 1, 1, 16, 0.2, activation="gelu"),
        _arrays((L, E), (T, E)),
        {"tgt_mask": CAUSAL[:T, :T], "tgt_is_causal": True},
        False,
        id="transformer-unbatched-eval",
    ),
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("build", "args", "kwargs", "train"), CASES)
def test_transformer_layers_match_torch(
    torch: ModuleType, device: str, dtype: str, build: Any, args: Any, kwargs: Any, train: bool
) -> None:
    compare_module(torch, build, args, kwargs, dtype, device, train=train)


def test_state_dict_keys_repr_and_copies_match_torch(torch: ModuleType) -> None:
    for build in (
        lambda lib: lib.nn.TransformerEncoder(_encoder_layer(lib), 2, lib.nn.LayerNorm(E)),
        lambda lib: _encoder_layer(lib, activation=lib.nn.GELU()),
        lambda lib: lib.nn.Transformer(E, 2, 1, 2, 16),
    ):
        theirs, ours = build(torch), build(pl)
        assert [(k, tuple(v.shape)) for k, v in ours.state_dict().items()] == [
            (k, tuple(v.shape)) for k, v in theirs.state_dict().items()
        ]
        assert repr(ours) == repr(theirs)
    encoder = nn.TransformerEncoder(_encoder_layer(pl), 3)
    first, *others = encoder.layers
    for layer in others:  # deep copies: equal values, their own parameters
        assert layer is not first
        for (name, mine), theirs in zip(layer.named_parameters(), first.parameters()):
            assert mine is not theirs
            np.testing.assert_array_equal(mine.numpy(), theirs.numpy(), err_msg=name)


def test_transformer_initialisation_and_causal_mask(torch: ModuleType) -> None:
    pl.manual_seed(0)
    model = nn.Transformer(16, 2, 1, 1, 32)
    for name, param in model.named_parameters():
        if param.ndim > 1:  # Xavier-uniform, as torch's _reset_parameters
            bound = np.sqrt(6 / sum(param.shape))
            assert np.abs(param.numpy()).max() <= bound, name
    mask = nn.Transformer.generate_square_subsequent_mask(4)
    expected = torch.nn.Transformer.generate_square_subsequent_mask(4)
    assert mask.dtype is pl.float32
    np.testing.assert_array_equal(mask.numpy(), expected.numpy())
    assert nn.Transformer.generate_square_subsequent_mask(3, dtype=pl.float64).dtype is pl.float64


def test_encoder_dropout_in_training(device: str) -> None:
    layer = nn.TransformerEncoderLayer(E, 2, 16, dropout=0.5).double().to(device)
    x = pl.tensor(_arrays((L, N, E))[0], device=device)
    pl.manual_seed(3)
    first = layer(x).numpy()
    pl.manual_seed(3)
    assert np.array_equal(layer(x).numpy(), first)  # seeded
    assert not np.allclose(layer(x).numpy(), first)  # other draws
    layer.eval()
    plain = layer(x).numpy()
    assert not np.allclose(plain, first)
    no_dropout = nn.TransformerEncoderLayer(E, 2, 16, dropout=0.0).double().to(device)
    no_dropout.load_state_dict(layer.state_dict())
    np.testing.assert_allclose(no_dropout(x).numpy(), plain, rtol=1e-13, atol=1e-13)


def test_padded_positions_differ_from_torch_nested_fast_path_and_say_so(
    torch: ModuleType,
) -> None:
    """PyTorch's encoder in evaluation without grad runs on nested tensors where the padding
    is at the sequences' ends, and returns zeros at padded positions; pylucid computes them
    (as PyTorch does with grad) and the class carries the difference for the census."""
    assert "enable_nested_tensor" in torch_differs(nn.TransformerEncoder)
    theirs = torch.nn.TransformerEncoder(
        torch.nn.TransformerEncoderLayer(E, 2, 16, batch_first=True), 2
    ).eval()
    ours = nn.TransformerEncoder(nn.TransformerEncoderLayer(E, 2, 16, batch_first=True), 2).eval()
    ours.load_state_dict(torch_state(theirs))
    x = _arrays((N, L, E))[0].astype("float32")
    padding = np.arange(L) >= np.array([[2], [5], [4]])  # (padding at the ends, as torch needs)
    with torch.no_grad():
        fast = theirs(torch.tensor(x), src_key_padding_mask=torch.tensor(padding)).numpy()
    plain = theirs(torch.tensor(x), src_key_padding_mask=torch.tensor(padding)).detach().numpy()
    out = ours(pl.tensor(x), src_key_padding_mask=pl.tensor(padding)).numpy()
    np.testing.assert_allclose(out, plain, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(out[~padding], fast[~padding], rtol=1e-5, atol=1e-5)
    assert not fast[padding].any() and out[padding].any()


def test_transformer_errors() -> None:
    with pytest.raises(ValueError, match="activation should be 'relu', 'gelu' or a callable"):
        nn.TransformerEncoderLayer(E, 2, activation="tanh")
    layer = nn.TransformerEncoderLayer(E, 2, 16)
    with pytest.raises(RuntimeError, match="Need attn_mask if specifying the is_causal hint"):
        layer(pl.randn(L, N, E), is_causal=True)
    model = nn.Transformer(E, 2, 1, 1, 16)
    with pytest.raises(ValueError, match="batch sizes of src .* must be equal"):
        model(pl.randn(L, N, E), pl.randn(T, N + 1, E))
    with pytest.raises(ValueError, match="must be d_model=8"):
        model(pl.randn(L, N, E), pl.randn(T, N, E + 1))


# -- GELU ------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_matches_torch(torch: ModuleType, device: str, dtype: str, approximate: str) -> None:
    values = np.linspace(-6, 6, 97).astype(dtype)
    x = torch.tensor(values, requires_grad=True)
    px = pl.tensor(values, device=device, requires_grad=True)
    expected = torch.nn.functional.gelu(x, approximate=approximate)
    out = nn.GELU(approximate)(px)
    assert_close(out, expected, dtype, "gelu")
    expected.sum().backward()
    out.sum().backward()
    assert_close(px.grad, x.grad, dtype, "gelu gradient")
    assert repr(nn.GELU(approximate)) == repr(torch.nn.GELU(approximate))


def test_gelu_tanh_gradients_of_two_orders() -> None:
    x = pl.tensor(np.linspace(-3, 3, 7), requires_grad=True)
    assert gradcheck(lambda x: F.gelu(x, approximate="tanh"), [x])
    assert gradgradcheck(lambda x: F.gelu(x, approximate="tanh"), [x])
