"""``F.scaled_dot_product_attention`` and ``nn.MultiheadAttention`` against PyTorch.

Same inputs (and, for the module, PyTorch's weights loaded with ``load_state_dict``): same
outputs, and same gradients of every input and parameter, in float64 and float32 on each
backend (tolerances in ``tests/torch_oracle.py``). Dropout cannot match PyTorch's random
numbers: ``dropout_p = 0`` must equal PyTorch, and above 0 the dropped fraction and the
scaling of the kept weights are checked. Gradients are also checked against finite
differences (``gradcheck``), second derivatives included.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

import numpy as np
import pytest

import pylucid as pl
from pylucid import nn
from pylucid.graph import gradcheck, gradgradcheck
from pylucid.nn import functional as F  # noqa: N812
from tests.torch_oracle import DTYPES, TORCH_REASON, assert_close, compare_module, leaves

# PyTorch deprecates a bool key_padding_mask with a float attn_mask (the mix is tested here)
pytestmark = pytest.mark.filterwarnings("ignore:Support for mismatched")


@pytest.fixture
def torch() -> ModuleType:
    """The oracle, or a skip naming how to install it."""
    return pytest.importorskip("torch", reason=TORCH_REASON)


def _convert(torch: ModuleType, array: np.ndarray, dtype: str, device: str) -> tuple[Any, Any]:
    if array.dtype == bool:
        return torch.tensor(array), pl.tensor(array, device=device)
    array = array.astype(dtype)
    return (
        torch.tensor(array, requires_grad=True),
        pl.tensor(array, device=device, requires_grad=True),
    )


def _masks(rng: np.random.Generator) -> dict[str, np.ndarray]:
    bool_mask = rng.random((4, 6)) > 0.4
    bool_mask[1] = False  # a query that may attend to nothing: zeros, as torch
    float_mask = rng.standard_normal((3, 4, 6))
    float_mask[0, 2] = -np.inf  # (a row of -inf: zeros too)
    float_mask[1, :, 3] = -np.inf
    return {"bool": bool_mask, "float": float_mask}


rng = np.random.default_rng(3)
MASKS = _masks(rng)
# (query, key, value shapes, keyword arguments); arrays in the keywords are masks
SDPA_CASES = [
    pytest.param(((2, 4, 5), (2, 6, 5), (2, 6, 3)), {}, id="3d-L-ne-S"),
    pytest.param(((4, 5), (6, 5), (6, 3)), {}, id="2d"),
    pytest.param(((2, 3, 4, 5), (2, 3, 6, 5), (2, 3, 6, 3)), {"scale": 0.3}, id="4d-scale"),
    pytest.param(((1, 3, 4, 5), (2, 1, 6, 5), (2, 1, 6, 3)), {}, id="broadcast-batch"),
    pytest.param(
        ((2, 3, 4, 5), (2, 3, 6, 5), (2, 3, 6, 3)), {"attn_mask": MASKS["bool"]}, id="bool-mask"
    ),
    pytest.param(
        ((2, 3, 4, 5), (2, 3, 6, 5), (2, 3, 6, 3)), {"attn_mask": MASKS["float"]}, id="float-mask"
    ),
    pytest.param(((2, 1, 4, 5), (2, 1, 6, 5), (2, 1, 6, 3)), {"is_causal": True}, id="causal-L<S"),
    pytest.param(((2, 6, 5), (2, 4, 5), (2, 4, 3)), {"is_causal": True}, id="causal-L>S"),
    pytest.param(
        ((2, 4, 3, 5), (2, 2, 6, 5), (2, 2, 6, 3)), {"enable_gqa": True}, id="grouped-query"
    ),
    pytest.param(((2, 3, 4, 5), (2, 3, 6, 5), (2, 3, 6, 3)), {"dropout_p": 0.0}, id="dropout-0"),
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("shapes", "options"), SDPA_CASES)
def test_sdpa_matches_torch(
    torch: ModuleType, device: str, dtype: str, shapes: tuple[Any, ...], options: dict[str, Any]
) -> None:
    data = np.random.default_rng(5)
    t_args, p_args = zip(*(_convert(torch, data.standard_normal(s), dtype, device) for s in shapes))
    t_opts, p_opts = {}, {}
    for name, value in options.items():
        if isinstance(value, np.ndarray):
            t_opts[name], p_opts[name] = _convert(torch, value, dtype, device)
        else:
            t_opts[name] = p_opts[name] = value
    expected = torch.nn.functional.scaled_dot_product_attention(*t_args, **t_opts)
    out = F.scaled_dot_product_attention(*p_args, **p_opts)
    assert out.device == device
    assert_close(out, expected, dtype, "output")
    upstream = data.standard_normal(tuple(expected.shape)).astype(dtype)
    (expected * torch.tensor(upstream)).sum().backward()
    (out * pl.tensor(upstream, device=device)).sum().backward()
    t_leaves = [*t_args, *(v for v in t_opts.values() if leaves(v))]
    p_leaves = [*p_args, *(v for v in p_opts.values() if leaves(v))]
    for i, (mine, theirs) in enumerate(zip(p_leaves, t_leaves)):
        assert_close(mine.grad, theirs.grad, dtype, f"gradient of argument {i}")


def test_sdpa_gradients_against_finite_differences() -> None:
    data = np.random.default_rng(0)
    q, k, v = (
        pl.tensor(data.standard_normal(s), requires_grad=True)
        for s in ((1, 2, 3, 2), (1, 2, 4, 2), (1, 2, 4, 3))
    )
    keep = pl.tensor(data.random((3, 4)) > 0.3)
    additive = pl.tensor(data.standard_normal((3, 4)), requires_grad=True)
    assert gradcheck(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, keep), [q, k, v])
    assert gradcheck(
        lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, m, scale=0.7),
        [q, k, v, additive],
    )
    assert gradcheck(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
                     [q, k, v])  # fmt: skip
    small = [x[:, :1] for x in (q, k, v)]
    assert gradgradcheck(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, keep),
                         [x.detach().requires_grad_() for x in small])  # fmt: skip


def test_sdpa_dropout_statistics(device: str) -> None:
    """With ``value`` the identity, the output is the attention weights after dropout: a
    fraction ``p`` of them zero, the others the weights without dropout over ``1 - p``."""
    p, size = 0.25, 64
    data = np.random.default_rng(1)
    q = pl.tensor(data.standard_normal((8, size, 4)), device=device)
    k = pl.tensor(data.standard_normal((8, size, 4)), device=device)
    v = pl.tensor(np.broadcast_to(np.eye(size), (8, size, size)).copy(), device=device)
    plain = F.scaled_dot_product_attention(q, k, v).numpy()
    assert (plain > 0).all()
    pl.manual_seed(4)
    dropped = F.scaled_dot_product_attention(q, k, v, dropout_p=p).numpy()
    kept = dropped != 0
    # 32768 Bernoulli(0.25) draws: the fraction's std is 0.0024, so 0.015 is about 6 sigma
    assert abs((~kept).mean() - p) < 0.015
    np.testing.assert_allclose(dropped[kept], plain[kept] / (1 - p), rtol=1e-12)
    pl.manual_seed(4)
    assert np.array_equal(F.scaled_dot_product_attention(q, k, v, dropout_p=p).numpy(), dropped)
    assert not F.scaled_dot_product_attention(q, k, v, dropout_p=1.0).numpy().any()


def test_sdpa_errors() -> None:
    q, k, v = pl.randn(2, 3, 4), pl.randn(2, 5, 4), pl.randn(2, 5, 6)
    sdpa = F.scaled_dot_product_attention
    with pytest.raises(RuntimeError, match="attn_mask should not be set when is_causal=True"):
        sdpa(q, k, v, attn_mask=pl.ones(3, 5, dtype=pl.bool), is_causal=True)
    with pytest.raises(ValueError, match="at least 2 dimensions"):
        sdpa(pl.randn(4), pl.randn(4), pl.randn(4))
    with pytest.raises(TypeError, match="one floating dtype, got float32, float64 and float32"):
        sdpa(q, k.double(), v)
    with pytest.raises(ValueError, match=r"expected query \(..., L, E\), key \(..., S, E\)"):
        sdpa(q, pl.randn(2, 5, 3), v)
    with pytest.raises(ValueError, match=r"expected query \(..., L, E\)"):
        sdpa(q, k, pl.randn(2, 4, 6))
    with pytest.raises(ValueError, match=r"attn_mask of shape \(4, 5\) does not broadcast"):
        sdpa(q, k, v, attn_mask=pl.zeros(4, 5))
    with pytest.raises(ValueError, match="does not broadcast"):
        sdpa(q, k, v, attn_mask=pl.zeros(7, 2, 3, 5))  # (would enlarge the output)
    with pytest.raises(TypeError, match="bool mask .* or a float mask .* got int64"):
        sdpa(q, k, v, attn_mask=pl.zeros(3, 5, dtype=pl.int64))
    with pytest.raises(ValueError, match=r"dropout_p must be in \[0, 1\], got 1.5"):
        sdpa(q, k, v, dropout_p=1.5)
    with pytest.raises(ValueError, match=r"number of heads \(3\) must divide the query's \(4\)"):
        sdpa(pl.randn(2, 4, 3, 4), pl.randn(2, 3, 5, 4), pl.randn(2, 3, 5, 6), enable_gqa=True)


# -- MultiheadAttention ---------------------------------------------------------------------
L, S, N, E = 4, 5, 3, 8
data = np.random.default_rng(9)
PADDING = data.random((N, S)) > 0.7
PADDING[:, 0] = False  # every query keeps a key (a fully masked one is tested below)
ATTN_BOOL = data.random((L, S)) > 0.7
ATTN_BOOL[:, 1] = False
ATTN_FLOAT = data.standard_normal((N * 2, L, S))
CAUSAL = np.triu(np.full((L, L), -np.inf), 1)


def _mha(**options: Any) -> Any:
    return lambda lib: lib.nn.MultiheadAttention(**{"embed_dim": E, "num_heads": 2, **options})


def _inputs(*shapes: tuple[int, ...]) -> tuple[np.ndarray, ...]:
    rng_ = np.random.default_rng(sum(map(sum, shapes)))
    return tuple(rng_.standard_normal(s) for s in shapes)


MHA_CASES = [
    pytest.param(_mha(), _inputs((L, N, E), (S, N, E), (S, N, E)), {}, id="plain"),
    pytest.param(
        _mha(), _inputs((L, N, E), (S, N, E), (S, N, E)), {"need_weights": False}, id="no-weights"
    ),
    pytest.param(
        _mha(batch_first=True),
        _inputs((N, L, E), (N, S, E), (N, S, E)),
        {"key_padding_mask": PADDING, "attn_mask": ATTN_BOOL, "average_attn_weights": False},
        id="batch-first-bool-masks-per-head",
    ),
    pytest.param(
        _mha(batch_first=True),
        _inputs((N, L, E), (N, S, E), (N, S, E)),
        {"key_padding_mask": PADDING, "attn_mask": ATTN_FLOAT, "need_weights": False},
        id="3d-float-mask-sdpa-path",
    ),
    pytest.param(
        _mha(),
        _inputs((L, N, E), (S, N, E), (S, N, E)),
        {"key_padding_mask": np.where(PADDING, -1e9, 0.5), "attn_mask": ATTN_FLOAT},
        id="float-padding-mask",
    ),  # fmt: skip
    pytest.param(
        _mha(kdim=3, vdim=5, add_bias_kv=True, add_zero_attn=True),
        _inputs((L, N, E), (S, N, 3), (S, N, 5)),
        {"key_padding_mask": PADDING, "attn_mask": ATTN_BOOL},
        id="kdim-vdim-bias-kv-zero-attn",
    ),
    pytest.param(
        _mha(num_heads=4, bias=False, add_zero_attn=True),
        _inputs((L, E), (S, E), (S, E)),
        {"key_padding_mask": PADDING[0], "attn_mask": ATTN_FLOAT[:4]},
        id="unbatched-no-bias",
    ),
    pytest.param(
        _mha(add_bias_kv=True),
        _inputs((L, E), (S, E), (S, E)),
        {"key_padding_mask": PADDING[0], "need_weights": False},
        id="unbatched-bias-kv-sdpa-path",
    ),
    pytest.param(
        _mha(batch_first=True),
        _inputs((N, L, E), (N, L, E), (N, L, E)),
        {"attn_mask": CAUSAL, "is_causal": True, "need_weights": False},
        id="causal",
    ),
    pytest.param(
        _mha(dropout=0.5), _inputs((L, N, E), (S, N, E), (S, N, E)), {}, id="dropout-in-eval"
    ),
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("build", "args", "kwargs"), MHA_CASES)
def test_multihead_attention_matches_torch(
    torch: ModuleType, device: str, dtype: str, build: Any, args: Any, kwargs: dict[str, Any]
) -> None:
    train = build(pl).dropout == 0.0  # (with dropout: both in evaluation)
    compare_module(torch, build, args, kwargs, dtype, device, train=train)


def test_multihead_attention_fully_masked_query_matches_torch(torch: ModuleType) -> None:
    """A query whose keys are all masked: nan with ``need_weights`` (plain softmax), zeros
    without (scaled_dot_product_attention), as PyTorch."""
    padding = np.zeros((N, S), dtype=bool)
    padding[1] = True
    args = _inputs((L, N, E), (S, N, E), (S, N, E))
    for need_weights in (True, False):
        compare_module(
            torch, _mha(), args, {"key_padding_mask": padding, "need_weights": need_weights},
            "float64", "cpu", backward=False,
        )  # fmt: skip
    out, _ = nn.MultiheadAttention(E, 2)(*map(pl.tensor, args), pl.tensor(padding),
                                         need_weights=False)  # fmt: skip
    assert np.isfinite(out.numpy()).all()


@pytest.mark.parametrize("options", [{}, {"kdim": 3, "vdim": 5, "add_bias_kv": True},
                                     {"bias": False}])  # fmt: skip
def test_multihead_attention_parameters_match_torch(torch: ModuleType, options: dict) -> None:
    theirs, ours = (
        torch.nn.MultiheadAttention(E, 2, **options),
        nn.MultiheadAttention(E, 2, **options),
    )
    assert [(k, tuple(v.shape)) for k, v in ours.state_dict().items()] == [
        (k, tuple(v.shape)) for k, v in theirs.state_dict().items()
    ]
    assert [name for name, _ in ours.named_parameters()] == [
        name for name, _ in theirs.named_parameters()
    ]
    assert repr(ours) == repr(theirs)
    assert type(ours.out_proj).__name__ == "NonDynamicallyQuantizableLinear"
    assert isinstance(ours.out_proj, nn.Linear)


def test_multihead_attention_initialisation() -> None:
    pl.manual_seed(0)
    layer = nn.MultiheadAttention(64, 4, add_bias_kv=True)
    weight = layer.in_proj_weight.numpy()
    bound = np.sqrt(6 / (64 + 3 * 64))  # Xavier-uniform of (3E, E)
    assert np.abs(weight).max() <= bound
    # 12288 uniform draws: the variance bound^2/3 is estimated within about 1.3 %
    assert abs(weight.var() / (bound**2 / 3) - 1) < 0.06
    assert not layer.in_proj_bias.numpy().any() and not layer.out_proj.bias.numpy().any()
    out_bound = 1 / np.sqrt(64)  # out_proj.weight keeps Linear's initialisation
    assert np.abs(layer.out_proj.weight.numpy()).max() <= out_bound
    assert abs(layer.out_proj.weight.numpy().var() / (out_bound**2 / 3) - 1) < 0.1
    bias_k = np.concatenate([layer.bias_k.numpy().ravel(), layer.bias_v.numpy().ravel()])
    assert 0.3 < bias_k.std() / np.sqrt(2 / 128) < 1.7  # Xavier-normal, 128 draws
    separate = nn.MultiheadAttention(8, 2, kdim=3)
    assert separate.in_proj_weight is None and separate.k_proj_weight.shape == (8, 3)


def test_multihead_attention_dropout_in_training(device: str) -> None:
    p = 0.5
    layer = nn.MultiheadAttention(E, 2, dropout=p).double().to(device)
    x = pl.tensor(np.random.default_rng(2).standard_normal((16, 8, E)), device=device)
    pl.manual_seed(1)
    _, weights = layer(x, x, x, average_attn_weights=False)
    layer.eval()
    _, plain = layer(x, x, x, average_attn_weights=False)
    weights, plain = weights.numpy(), plain.numpy()
    kept = weights != 0
    # 4096 Bernoulli(0.5) draws: the fraction's std is 0.0078, so 0.04 is about 5 sigma
    assert abs((~kept).mean() - p) < 0.04
    np.testing.assert_allclose(weights[kept], plain[kept] / (1 - p), rtol=1e-12)
    assert (plain > 0).all()
    no_dropout = nn.MultiheadAttention(E, 2).double().to(device)
    no_dropout.load_state_dict(layer.state_dict())
    np.testing.assert_allclose(no_dropout(x, x, x)[0].numpy(), layer(x, x, x)[0].numpy(),
                               rtol=1e-13)  # fmt: skip


def test_multihead_attention_errors() -> None:
    with pytest.raises(ValueError, match=r"embed_dim \(10\) must be divisible by num_heads \(3\)"):
        nn.MultiheadAttention(10, 3)
    layer = nn.MultiheadAttention(E, 2)
    x = pl.randn(L, N, E)
    with pytest.raises(RuntimeError, match="Need attn_mask if specifying the is_causal hint"):
        layer(x, x, x, is_causal=True)
    with pytest.raises(ValueError, match=r"attn_mask of shape \(3, 4\), expected \(4, 4\)"):
        layer(x, x, x, attn_mask=pl.zeros(3, 4))
    with pytest.raises(ValueError, match=r"key_padding_mask of shape \(4, 4\), expected \(3, 4\)"):
        layer(x, x, x, key_padding_mask=pl.zeros(4, 4, dtype=pl.bool))
    with pytest.raises(ValueError, match=r"widths \(embed_dim, kdim, vdim\) = \(8, 8, 8\)"):
        layer(x, pl.randn(L, N, 3), x)
    with pytest.raises(ValueError, match="batched 3-d .* unbatched 2-d"):
        layer(x, x[0], x)
    with pytest.raises(TypeError, match="key_padding_mask must be bool .* got int64"):
        layer(x, x, x, key_padding_mask=pl.zeros(N, L, dtype=pl.int64))
