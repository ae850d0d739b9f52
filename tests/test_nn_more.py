"""More ``nn`` layers against PyTorch: instance and RMS normalisation, the hard and other
activations, PReLU, transposed and 3-d convolutions, padding layers, 1-d pools, channel
dropout; and ``nn.Buffer``, ``ParameterList`` / ``ParameterDict``, ``DataParallel``,
``init.dirac_`` / ``orthogonal_`` and the deprecated init names.

Layers are compared with ``tests/torch_oracle.compare_module``: PyTorch's ``state_dict``
loaded (so keys, order and shapes are PyTorch's), then outputs and the gradients of the
input and of every parameter, float64 and float32 on each backend (tolerances 1e-10 and
1e-5 there). The functions are also checked against finite differences (``gradcheck``,
second order where the composition has a non-trivial one).
"""

from __future__ import annotations

import copy
import warnings
from types import ModuleType
from typing import Any

import numpy as np
import pytest

import pylucid as pl
from pylucid import nn
from pylucid.graph import gradcheck, gradgradcheck
from pylucid.nn import functional as F  # noqa: N812
from tests.conftest import TORCH_REASON
from tests.torch_oracle import DTYPES, assert_close, compare_module, torch_state

# PyTorch's note that padding="same" with an even kernel copies the input (tested here)
pytestmark = pytest.mark.filterwarnings("ignore:Using padding='same' with even kernel")


@pytest.fixture
def torch() -> ModuleType:
    """The oracle, or a skip naming how to install it."""
    return pytest.importorskip("torch", reason=TORCH_REASON)


def _build(kind: str, *args: Any, **kwargs: Any) -> Any:
    return lambda lib: getattr(lib.nn, kind)(*args, **kwargs)


def _input(*shape: int, scale: float = 1.0) -> np.ndarray:
    return np.random.default_rng(sum(shape)).standard_normal(shape) * scale


LAYER_CASES = [
    pytest.param(_build("InstanceNorm1d", 3), _input(2, 3, 5), id="instance1d"),
    pytest.param(_build("InstanceNorm2d", 3, affine=True), _input(2, 3, 4, 5), id="instance2d"),
    pytest.param(
        _build("InstanceNorm2d", 3, affine=True, track_running_stats=True),
        _input(2, 3, 4, 5),
        id="instance2d-tracked",
    ),
    pytest.param(_build("InstanceNorm2d", 3, affine=True), _input(3, 4, 5), id="instance2d-1"),
    pytest.param(_build("InstanceNorm3d", 2, eps=1e-3), _input(2, 2, 3, 4, 2), id="instance3d"),
    pytest.param(_build("RMSNorm", 5), _input(2, 3, 5), id="rms"),
    pytest.param(_build("RMSNorm", (3, 5), eps=1e-3), _input(2, 3, 5), id="rms-2d"),
    pytest.param(_build("RMSNorm", 5, elementwise_affine=False), _input(4, 5), id="rms-plain"),
    pytest.param(_build("PReLU"), _input(2, 3, 4), id="prelu"),
    pytest.param(_build("PReLU", 3, init=0.1), _input(2, 3, 4), id="prelu-channels"),
    pytest.param(_build("Hardtanh", -2.0, 1.5), _input(40, scale=3), id="hardtanh"),
    pytest.param(_build("ReLU6"), _input(40, scale=5), id="relu6"),
    pytest.param(_build("Hardswish"), _input(40, scale=4), id="hardswish"),
    pytest.param(_build("Mish"), _input(40, scale=4), id="mish"),
    pytest.param(_build("Softsign"), _input(40, scale=4), id="softsign"),
    pytest.param(_build("Tanhshrink"), _input(40, scale=2), id="tanhshrink"),
    pytest.param(_build("LogSigmoid"), _input(40, scale=30), id="logsigmoid"),
    pytest.param(_build("GLU", 1), _input(3, 6, 2), id="glu"),
    pytest.param(
        _build("ConvTranspose2d", 4, 6, 3, stride=2, padding=1, output_padding=1, groups=2),
        _input(2, 4, 5, 6),
        id="convT2d",
    ),
    pytest.param(
        _build("ConvTranspose2d", 3, 2, (2, 3), stride=(1, 2), dilation=(2, 1), bias=False),
        _input(2, 3, 4, 5),
        id="convT2d-dilated",
    ),
    pytest.param(
        _build("ConvTranspose2d", 2, 3, 3, stride=1, padding=1, output_padding=1, dilation=2),
        _input(2, 4, 5),
        id="convT2d-unbatched-op>=s",
    ),
    pytest.param(
        _build("ConvTranspose1d", 3, 4, 3, stride=3, padding=1, output_padding=2),
        _input(2, 3, 7),
        id="convT1d",
    ),
    pytest.param(
        _build("Conv3d", 4, 6, 3, padding=1, groups=2), _input(2, 4, 3, 4, 5), id="conv3d"
    ),
    pytest.param(
        _build("Conv3d", 2, 3, (2, 3, 1), stride=(2, 1, 2), padding=1, padding_mode="reflect"),
        _input(2, 2, 5, 4, 5),
        id="conv3d-reflect",
    ),
    pytest.param(
        _build("Conv3d", 2, 3, 2, padding="same", dilation=(1, 2, 1), bias=False),
        _input(2, 4, 5, 4),
        id="conv3d-same-unbatched",
    ),
    pytest.param(_build("ReflectionPad2d", (1, 2, 0, 2)), _input(2, 3, 4, 5), id="reflect2d"),
    pytest.param(_build("ReflectionPad1d", 2), _input(2, 3, 5), id="reflect1d"),
    pytest.param(_build("ReplicationPad2d", 1), _input(3, 4, 5), id="replicate2d"),
    pytest.param(_build("ZeroPad2d", (1, 0, 2, 1)), _input(2, 3, 4, 5), id="zero2d"),
    pytest.param(_build("ConstantPad2d", 1, 2.5), _input(2, 3, 4, 5), id="constant2d"),
    pytest.param(_build("CircularPad2d", (1, 1, 2, 0)), _input(1, 2, 3, 4), id="circular2d"),
    pytest.param(_build("ZeroPad3d", 1), _input(1, 2, 3, 2, 2), id="zero3d"),
    pytest.param(_build("MaxPool1d", 3, 2, 1, ceil_mode=True), _input(2, 3, 10), id="maxpool1d"),
    pytest.param(
        _build("AvgPool1d", 3, 2, 1, count_include_pad=False), _input(2, 3, 10), id="avgpool1d"
    ),
    pytest.param(_build("AdaptiveAvgPool1d", 4), _input(3, 10), id="adaptive1d"),
    pytest.param(
        lambda lib: lib.nn.DataParallel(lib.nn.Linear(3, 2)), _input(4, 3), id="data-parallel"
    ),
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("build", "x"), LAYER_CASES)
def test_layer_matches_torch(
    torch: ModuleType, device: str, dtype: str, build: Any, x: np.ndarray
) -> None:
    compare_module(torch, build, (x,), {}, dtype, device)


def test_hardsigmoid_layer_matches_torch(torch: ModuleType, device: str) -> None:
    """In float32 only: PyTorch's float64 gradient is ``g * float32(1/6)``, 1e-8 from the
    exact ``g / 6`` that pylucid gives (checked in the corner test below)."""
    compare_module(torch, _build("Hardsigmoid"), (_input(40, scale=4),), {}, "float32", device)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("momentum", [0.1, None])
def test_instance_norm_running_statistics(
    torch: ModuleType, device: str, dtype: str, momentum: float | None
) -> None:
    """Training updates the running statistics by the instances' averages (momentum None:
    no update, as PyTorch's), never counts batches; evaluation normalises by them."""
    theirs = torch.nn.InstanceNorm2d(3, affine=True, track_running_stats=True,
                                     momentum=momentum).to(getattr(torch, dtype))  # fmt: skip
    ours = nn.InstanceNorm2d(3, affine=True, track_running_stats=True, momentum=momentum)
    ours = ours.to(device).to(getattr(pl, dtype))
    ours.load_state_dict(torch_state(theirs))
    rng = np.random.default_rng(0)
    for _ in range(3):
        x = (rng.standard_normal((2, 3, 4, 5)) * 2 + 1).astype(dtype)
        theirs(torch.tensor(x))
        ours(pl.tensor(x, device=device))
    state = ours.state_dict()
    assert state["num_batches_tracked"].item() == theirs.num_batches_tracked.item() == 0
    for key in ("running_mean", "running_var"):
        assert_close(state[key], theirs.state_dict()[key], dtype, key)
    theirs.eval()
    ours.eval()
    x = rng.standard_normal((2, 3, 4, 5)).astype(dtype)
    assert_close(ours(pl.tensor(x, device=device)), theirs(torch.tensor(x)), dtype, "eval")


def test_instance_norm_checks_and_warnings() -> None:
    with pytest.raises(ValueError, match="expected a 3-d or 4-d input"):
        nn.InstanceNorm2d(3)(pl.randn(2, 3, 4, 5, 6))
    with pytest.raises(ValueError, match="to match num_features"):
        nn.InstanceNorm2d(4, affine=True)(pl.randn(2, 3, 4, 5))
    with pytest.warns(UserWarning, match="does not match num_features"):
        nn.InstanceNorm2d(4)(pl.randn(2, 3, 4, 5))
    with pytest.raises(ValueError, match="more than 1 spatial element"):
        nn.InstanceNorm1d(3)(pl.randn(2, 3, 1))
    assert repr(nn.InstanceNorm2d(3)) == (
        "InstanceNorm2d(3, eps=1e-05, momentum=0.1, affine=False, bias=False, "
        "track_running_stats=False)"
    )
    assert list(nn.InstanceNorm1d(2, affine=True, track_running_stats=True).state_dict()) == [
        "weight", "bias", "running_mean", "running_var", "num_batches_tracked"
    ]  # fmt: skip


@pytest.mark.parametrize("dtype", DTYPES)
def test_hard_activations_at_their_corners(torch: ModuleType, device: str, dtype: str) -> None:
    """Values and gradients at (and around) each corner are PyTorch's: hardtanh, relu6 and
    hardsigmoid pass no gradient at their corners, hardswish 0 at -3 and 1 at 3 (its inner
    ``x / 3 + 1/2`` strictly inside), PReLU the slope at 0."""
    x = np.array([-7.0, -6.0, -3.0, -1.0, -0.5, 0.0, 0.5, 1.0, 3.0, 6.0, 7.0], dtype=dtype)
    names = ["hardtanh", "relu6", "hardswish", "hardsigmoid", "mish", "softsign", "tanhshrink",
             "logsigmoid", "relu", "silu", "elu", "leaky_relu", "gelu", "softplus",
             "sigmoid", "tanh"]  # fmt: skip
    for name in names:
        tx = torch.tensor(x, requires_grad=True)
        px = pl.tensor(x, device=device, requires_grad=True)
        expected, out = getattr(torch.nn.functional, name)(tx), getattr(F, name)(px)
        assert_close(out, expected, dtype, name)
        expected.sum().backward()
        out.sum().backward()
        if name == "hardsigmoid" and dtype == "float64":
            # PyTorch's gradient is g * float32(1/6), 1e-8 off in float64; ours is g / 6
            np.testing.assert_allclose(px.grad.numpy(), tx.grad.numpy(), rtol=1e-7)
            np.testing.assert_array_equal(px.grad.numpy(), np.where(np.abs(x) < 3, 1 / 6, 0))
        else:
            assert_close(px.grad, tx.grad, dtype, f"gradient of {name}")
    weight = torch.tensor([0.3], dtype=getattr(torch, dtype), requires_grad=True)
    tx = torch.tensor(x, requires_grad=True)
    torch.nn.functional.prelu(tx, weight).sum().backward()
    pw = pl.tensor([0.3], dtype=getattr(pl, dtype), device=device, requires_grad=True)
    px = pl.tensor(x, device=device, requires_grad=True)
    F.prelu(px, pw).sum().backward()
    assert_close(px.grad, tx.grad, dtype, "prelu input gradient")
    assert_close(pw.grad, weight.grad, dtype, "prelu weight gradient")


@pytest.mark.parametrize("dtype", DTYPES)
def test_functions_match_torch(torch: ModuleType, device: str, dtype: str) -> None:
    tf = torch.nn.functional
    inf = float("inf")
    cases = [
        (lambda x: tf.normalize(x), lambda x: F.normalize(x), (4, 5, 3)),
        (lambda x: tf.normalize(x, p=1, dim=-1), lambda x: F.normalize(x, p=1, dim=-1),
         (4, 5, 3)),
        (lambda x: tf.normalize(x, p=3.5, dim=(0, 2)), lambda x: F.normalize(x, 3.5, (0, 2)),
         (4, 5, 3)),
        (lambda x: tf.normalize(x, p=inf, dim=0), lambda x: F.normalize(x, inf, 0), (4, 5)),
        (lambda x: tf.rms_norm(x, (5, 3)), lambda x: F.rms_norm(x, (5, 3)), (4, 5, 3)),
        (lambda x: tf.rms_norm(x, (3,), eps=1e-3), lambda x: F.rms_norm(x, 3, eps=1e-3),
         (4, 3)),
        (lambda x: tf.instance_norm(x), lambda x: F.instance_norm(x), (2, 3, 4, 5)),
        (lambda x: tf.glu(x), lambda x: F.glu(x), (3, 4)),
        (lambda x: tf.max_pool1d(x, 3, 2, 1, ceil_mode=True),
         lambda x: F.max_pool1d(x, 3, 2, 1, ceil_mode=True), (2, 3, 11)),
        (lambda x: tf.max_pool1d(x, 2, dilation=2), lambda x: F.max_pool1d(x, 2, dilation=2),
         (3, 11)),
        (lambda x: tf.avg_pool1d(x, 4, 3, 2), lambda x: F.avg_pool1d(x, 4, 3, 2), (2, 3, 11)),
        (lambda x: tf.adaptive_avg_pool1d(x, 4), lambda x: F.adaptive_avg_pool1d(x, 4),
         (2, 3, 11)),
        (lambda x: tf.softmax(x, dim=0, dtype=torch.float64),
         lambda x: F.softmax(x, dim=0, dtype=pl.float64), (3, 4)),
        (lambda x: tf.log_softmax(input=x, dim=-1), lambda x: F.log_softmax(input=x, dim=-1),
         (3, 4)),
    ]  # fmt: skip
    rng = np.random.default_rng(0)
    for i, (theirs, ours, shape) in enumerate(cases):
        x = rng.standard_normal(shape).astype(dtype)
        tx = torch.tensor(x, requires_grad=True)
        px = pl.tensor(x, device=device, requires_grad=True)
        expected, out = theirs(tx), ours(px)
        assert_close(out, expected, str(out.dtype.name), f"case {i}")
        upstream = rng.standard_normal(tuple(expected.shape))
        (expected * torch.tensor(upstream, dtype=expected.dtype)).sum().backward()
        (out * pl.tensor(upstream, dtype=out.dtype, device=device)).sum().backward()
        assert_close(px.grad, tx.grad, dtype, f"gradient of case {i}")
    rows = rng.standard_normal((2, 7))
    values, indices = F.max_pool1d(pl.tensor(rows, device=device), 3, return_indices=True)
    t_values, t_indices = tf.max_pool1d(torch.tensor(rows), 3, return_indices=True)
    np.testing.assert_array_equal(indices.numpy(), t_indices.numpy())
    np.testing.assert_array_equal(values.numpy(), t_values.numpy())


def test_torch_keyword_names() -> None:
    """PyTorch's keywords work on every F function, those over ops included."""
    x = pl.randn(3, 4)
    assert F.gelu(input=x, approximate="tanh").shape == (3, 4)
    for name in ("relu", "sigmoid", "tanh", "silu", "elu", "leaky_relu", "softplus", "mish",
                 "hardswish", "hardsigmoid", "relu6", "hardtanh", "softsign", "tanhshrink",
                 "logsigmoid", "glu"):  # fmt: skip
        assert getattr(F, name)(input=x).shape[0] == 3, name
    assert F.relu(x, inplace=True).shape == (3, 4)
    assert F.softmax(input=x, dim=1).shape == (3, 4)
    assert F.normalize(input=x, dim=0).shape == (3, 4)
    assert F.prelu(input=x, weight=pl.tensor([0.2])).shape == (3, 4)
    with pytest.warns(UserWarning, match="Implicit dimension choice for softmax"):
        implicit = F.softmax(x)
    np.testing.assert_allclose(implicit.numpy(), F.softmax(x, 1).numpy())


def test_zero_vectors_normalise_to_zero_without_nan() -> None:
    x = pl.tensor([[0.0, 0.0], [3.0, 4.0]], dtype=pl.float64, requires_grad=True)
    out = F.normalize(x, dim=1)
    np.testing.assert_allclose(out.numpy(), [[0, 0], [0.6, 0.8]])
    out.sum().backward()
    assert np.isfinite(x.grad.numpy()).all()
    np.testing.assert_allclose(x.grad.numpy()[0], [1e12, 1e12])  # 1 / eps, as PyTorch


def test_gradients_against_finite_differences() -> None:
    rng = np.random.default_rng(0)

    def leaf(*shape: int) -> pl.Tensor:
        return pl.tensor(rng.standard_normal(shape), requires_grad=True)

    x4, w_t = leaf(1, 4, 3, 3), leaf(4, 3, 2, 3)
    assert gradgradcheck(
        lambda x, w: F.conv_transpose2d(x, w, stride=(2, 1), padding=1, output_padding=(1, 0)),
        [x4, w_t],
    )
    assert gradgradcheck(lambda x, w: F.conv_transpose2d(x, w, stride=2, groups=2),
                         [leaf(1, 4, 2, 2), leaf(4, 1, 2, 2)])  # fmt: skip
    assert gradcheck(lambda x, w: F.conv_transpose1d(x, w, stride=2),
                     [leaf(1, 4, 3), leaf(4, 2, 2)])  # fmt: skip
    assert gradgradcheck(lambda x, w, b: F.conv3d(x, w, b, stride=(2, 1, 1), padding=1),
                         [leaf(1, 2, 3, 3, 2), leaf(2, 2, 2, 2, 2), leaf(2)])  # fmt: skip
    inorm_input, weight, bias = leaf(2, 3, 4), leaf(3), leaf(3)
    assert gradgradcheck(lambda x, w, b: F.instance_norm(x, weight=w, bias=b),
                         [inorm_input, weight, bias])  # fmt: skip
    assert gradgradcheck(lambda x: F.normalize(x, dim=1), [leaf(3, 4)])
    assert gradgradcheck(lambda x: F.normalize(x, p=3.0, dim=0), [leaf(3, 4)])
    assert gradgradcheck(lambda x, w: F.rms_norm(x, (4,), w), [leaf(3, 4), leaf(4)])
    assert gradcheck(lambda x, w: F.prelu(x, w), [leaf(2, 3, 4), leaf(3)])
    assert gradgradcheck(lambda x: F.mish(x) + F.logsigmoid(x) + F.hardswish(x), [leaf(8)])
    assert gradcheck(lambda x: F.glu(x, 0), [leaf(4, 3)])


def test_conv_transpose_output_size_and_errors(torch: ModuleType) -> None:
    torch.manual_seed(0)
    theirs = torch.nn.ConvTranspose2d(2, 3, 3, stride=2, padding=1).double()
    ours = nn.ConvTranspose2d(2, 3, 3, stride=2, padding=1).double()
    ours.load_state_dict(torch_state(theirs))
    x = np.random.default_rng(0).standard_normal((1, 2, 4, 5))
    for size in ((8, 10), (7, 9), [1, 3, 8, 9]):
        expected = theirs(torch.tensor(x), output_size=size)
        assert_close(ours(pl.tensor(x), output_size=size), expected, "float64", str(size))
    with pytest.raises(ValueError, match="valid sizes on axis 0 range from 7 to 8"):
        ours(pl.tensor(x), output_size=(9, 9))
    with pytest.raises(ValueError, match="output_padding .* must be smaller"):
        F.conv_transpose2d(pl.randn(1, 2, 3, 3), pl.randn(2, 2, 3, 3), stride=2, output_padding=2)
    with pytest.raises(ValueError, match='only "zeros" padding mode'):
        nn.ConvTranspose2d(2, 3, 3, padding_mode="reflect")
    with pytest.raises(ValueError, match="channels and weight of shape"):
        F.conv_transpose2d(pl.randn(1, 3, 3, 3), pl.randn(2, 2, 3, 3))
    with pytest.raises(ValueError, match="5-d weight"):
        F.conv3d(pl.randn(1, 2, 3, 3, 3), pl.randn(2, 2, 3, 3))
    assert repr(nn.ConvTranspose2d(4, 6, 3, 2, 1, 1, groups=2, bias=False)) == (
        "ConvTranspose2d(4, 6, kernel_size=(3, 3), stride=(2, 2), padding=(1, 1), "
        "output_padding=(1, 1), groups=2, bias=False)"
    )
    assert repr(nn.Conv3d(2, 4, 3, padding=1)) == (
        "Conv3d(2, 4, kernel_size=(3, 3, 3), stride=(1, 1, 1), padding=(1, 1, 1))"
    )
    assert nn.ConvTranspose2d(4, 6, 3, groups=2).weight.shape == (4, 3, 3, 3)


def test_channel_dropout_statistics(device: str) -> None:
    """Whole channels are zeroed, a fraction ``p`` of them, the rest scaled by 1/(1-p)."""
    p = 0.25
    x = pl.ones(64, 32, 3, 3, device=device)
    pl.manual_seed(0)
    out = F.dropout2d(x, p).numpy()
    per_channel = out.reshape(64, 32, 9)
    assert (per_channel == per_channel[..., :1]).all()  # one draw per channel
    dropped = (per_channel[..., 0] == 0).mean()
    assert abs(dropped - p) < 0.04  # 2048 channels: std 0.0096, so about 4 sigma
    np.testing.assert_allclose(out[out != 0], 1 / (1 - p))
    assert F.dropout2d(x, p, training=False) is x
    layer = nn.Dropout2d(p).eval()
    assert layer(x) is x
    assert repr(nn.Dropout2d()) == "Dropout2d(p=0.5, inplace=False)"
    with pytest.warns(UserWarning, match="3-D input"):
        lines = F.dropout2d(pl.ones(4, 8, 5, device=device), 0.5).numpy()
    assert (lines == lines[..., :1]).all()
    unbatched = F.dropout1d(pl.ones(16, 5, device=device), 0.5).numpy()
    assert (unbatched == unbatched[:, :1]).all()
    volumes = F.dropout3d(pl.ones(8, 2, 2, 2, device=device), 0.5).numpy().reshape(8, 8)
    assert (volumes == volumes[:, :1]).all()
    with pytest.raises(ValueError, match="between 0 and 1"):
        F.dropout2d(x, 1.5)
    with pytest.raises(ValueError, match="2-d or 3-d input"):
        F.dropout1d(x, 0.5)


def test_buffer_registers_as_torch(torch: ModuleType) -> None:
    def build(lib: Any) -> Any:
        model = lib.nn.Module()
        model.linear = lib.nn.Linear(2, 2)
        model.steps = lib.nn.Buffer(lib.zeros(()))
        model.scratch = lib.nn.Buffer(lib.ones(3), persistent=False)
        return model

    ours, theirs = build(pl), build(torch)
    assert list(ours.state_dict()) == list(theirs.state_dict())
    assert list(ours.state_dict()) == ["steps", "linear.weight", "linear.bias"]
    assert [name for name, _ in ours.named_buffers()] == ["steps", "scratch"]
    assert isinstance(ours.steps, nn.Buffer) and not ours.steps.requires_grad
    ours.double()
    assert ours.steps.dtype is pl.float64 and ours.scratch.dtype is pl.float64
    ours.steps = pl.tensor(3.0, dtype=pl.float64)  # (a plain tensor replaces the buffer)
    assert ours.state_dict()["steps"].item() == 3.0
    copied = copy.deepcopy(ours)
    assert list(copied.state_dict()) == list(ours.state_dict())
    assert [name for name, _ in copied.named_buffers()] == ["steps", "scratch"]
    with pytest.raises(TypeError, match="expected a Tensor"):
        nn.Buffer([1.0])


def test_parameter_containers_match_torch(torch: ModuleType) -> None:
    def build(lib: Any) -> Any:
        model = lib.nn.Module()
        model.scales = lib.nn.ParameterList([lib.nn.Parameter(lib.ones(3)), lib.zeros(2, 2)])
        model.scales.append(lib.ones(1))
        model.table = lib.nn.ParameterDict({"a": lib.ones(2)})
        model.table["b"] = lib.nn.Parameter(lib.zeros(4))
        return model

    ours, theirs = build(pl), build(torch)
    assert list(ours.state_dict()) == list(theirs.state_dict())
    ours.load_state_dict(torch_state(theirs))
    assert all(isinstance(p, nn.Parameter) for p in ours.scales)
    assert len(ours.scales) == 3 and ours.scales[-1].shape == (1,)
    assert len(ours.scales[1:]) == 2 and isinstance(ours.scales[1:], nn.ParameterList)
    assert list(ours.table) == ["a", "b"] and "b" in ours.table
    assert len(list(ours.parameters())) == 5
    assert repr(ours.scales).splitlines()[1] == (
        "    (0): Parameter containing: [pylucid.float32 of size 3]"
    )
    assert ours.table.pop("a").shape == (2,) and list(ours.table.keys()) == ["b"]
    assert list(ours.state_dict()) == ["scales.0", "scales.1", "scales.2", "table.b"]
    with pytest.raises(RuntimeError, match="should not be called"):
        ours.scales()
    with pytest.raises(IndexError):
        ours.scales[3]
    optimizer = pl.optim.SGD(ours.parameters(), lr=0.5)
    (ours.scales[0].sum() * 2).backward()
    optimizer.step()
    np.testing.assert_allclose(ours.scales[0].numpy(), [0.0, 0.0, 0.0])


def test_data_parallel_is_the_module(torch: ModuleType) -> None:
    torch.manual_seed(0)
    theirs = torch.nn.DataParallel(torch.nn.Linear(3, 2))
    ours = nn.DataParallel(nn.Linear(3, 2))
    assert ours.device_ids == [] and theirs.device_ids == []
    ours.load_state_dict(torch_state(theirs))
    x = np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32)
    assert_close(ours(pl.tensor(x)), theirs(torch.tensor(x)), "float32", "forward")
    data_parallel = nn.parallel.data_parallel
    np.testing.assert_array_equal(data_parallel(ours.module, pl.tensor(x)).numpy(),
                                  ours(pl.tensor(x)).numpy())  # fmt: skip
    assert repr(ours).splitlines()[1] == (
        "  (module): Linear(in_features=3, out_features=2, bias=True)"
    )
    with pytest.raises(TypeError, match="expected a Module"):
        nn.DataParallel(pl.ones(2))


def test_init_dirac_and_orthogonal(torch: ModuleType) -> None:
    for shape, groups in (((6, 4, 3, 3), 1), ((6, 2, 3), 2), ((4, 6, 3, 2, 2), 2)):
        ours, theirs = pl.zeros(*shape), torch.zeros(*shape)
        nn.init.dirac_(ours, groups)
        torch.nn.init.dirac_(theirs, groups)
        np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
    with pytest.raises(ValueError, match="3, 4, or 5 dimensions"):
        nn.init.dirac_(pl.zeros(2, 2))
    for shape in ((5, 3), (3, 5), (4, 2, 3)):
        w = nn.init.orthogonal_(pl.empty(*shape, dtype=pl.float64), gain=2.0)
        flat = w.numpy().reshape(shape[0], -1)
        gram = flat @ flat.T if flat.shape[0] <= flat.shape[1] else flat.T @ flat
        np.testing.assert_allclose(gram, 4.0 * np.eye(min(flat.shape)), atol=1e-12)
    pl.manual_seed(3)
    first = nn.init.orthogonal_(pl.empty(4, 4)).numpy()
    pl.manual_seed(3)
    np.testing.assert_array_equal(nn.init.orthogonal_(pl.empty(4, 4)).numpy(), first)
    with pytest.raises(ValueError, match="2 or more dimensions"):
        nn.init.orthogonal_(pl.empty(3))


def test_deprecated_init_names_warn_and_fill() -> None:
    for name, args in (("constant", (0.5,)), ("uniform", ()), ("normal", ()), ("eye", ()),
                       ("xavier_uniform", ()), ("xavier_normal", ()), ("kaiming_uniform", ()),
                       ("kaiming_normal", ()), ("orthogonal", ()), ("dirac", ())):  # fmt: skip
        w = pl.zeros(3, 3) if name != "dirac" else pl.zeros(3, 3, 3)
        with pytest.warns(FutureWarning, match=rf"`nn.init.{name}` is now deprecated in favor"):
            assert getattr(nn.init, name)(w, *args) is w
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        assert (nn.init.constant(pl.zeros(2), 0.5).numpy() == 0.5).all()


def test_torch_module_paths() -> None:
    from pylucid.nn.modules.linear import NonDynamicallyQuantizableLinear
    from pylucid.utils.data.distributed import DistributedSampler

    assert DistributedSampler is pl.utils.data.DistributedSampler
    assert isinstance(nn.MultiheadAttention(4, 2).out_proj, NonDynamicallyQuantizableLinear)
    assert nn.parallel.DataParallel is nn.DataParallel
