"""``pylucid.nn``: modules, ``Parameter``, ``init`` and ``utils``, against PyTorch.

PyTorch is the oracle where it is installed: the same architectures must give the same
state-dict keys, traversal names and printed text, and, after loading PyTorch's
``state_dict``, the same forward values and gradients. The semantic tests (registration,
loading errors, hooks, containers, copying, ``init`` statistics) need no torch.

Tolerances: forward values and gradients are compared in float64 with ``rtol=1e-12`` and
``atol=1e-12``: the two libraries sum the same products in other orders (a few ulps per
sum), and the absolute term covers entries that cancel to about zero.
"""

from __future__ import annotations

import copy
import math
import pickle
from collections import OrderedDict
from types import ModuleType
from typing import Any

import numpy as np
import pytest

import pylucid as pl
from pylucid import nn
from pylucid.nn import init
from pylucid.nn.utils import (
    clip_grad_norm_,
    clip_grad_value_,
    parameters_to_vector,
    vector_to_parameters,
)

TORCH_REASON = "torch is the oracle (pip install -e '.[peers]')"
RTOL = ATOL = 1e-12  # float64, summation order differs (see the module docstring)


@pytest.fixture
def torch() -> ModuleType:
    """The oracle, or a skip naming how to install it."""
    return pytest.importorskip("torch", reason=TORCH_REASON)


def to_pl(t: Any, device: str = "cpu", requires_grad: bool = False) -> pl.Tensor:
    """A torch tensor's values as a pylucid tensor (same dtype)."""
    return pl.tensor(t.detach().numpy().copy(), device=device, requires_grad=requires_grad)


def torch_state(module: Any) -> dict[str, pl.Tensor]:
    """A torch module's state dict converted to pylucid tensors on the cpu."""
    return {key: to_pl(value) for key, value in module.state_dict().items()}


def close(ours: pl.Tensor, theirs: Any) -> None:
    """Equal values within the float64 tolerances of the module docstring."""
    expected = theirs.detach().numpy() if hasattr(theirs, "detach") else np.asarray(theirs)
    assert ours.shape == tuple(expected.shape)
    np.testing.assert_allclose(ours.numpy(), expected, rtol=RTOL, atol=ATOL)


def snapshot(module: nn.Module) -> dict[str, np.ndarray]:
    """Copies of every state-dict entry, to check that a module was left bit-identical."""
    return {key: np.array(value.numpy(), copy=True) for key, value in module.state_dict().items()}


def same_snapshot(before: dict[str, np.ndarray], module: nn.Module) -> None:
    after = snapshot(module)
    assert list(after) == list(before)
    for key, values in before.items():
        assert after[key].dtype == values.dtype, key
        np.testing.assert_array_equal(after[key], values, err_msg=key)


# -- architectures built from either library (``lib`` is pylucid or torch) ----------------------
def mlp(lib: ModuleType) -> Any:
    nn_ = lib.nn
    return nn_.Sequential(
        nn_.Linear(4, 8),
        nn_.LayerNorm(8),
        nn_.ReLU(),
        nn_.Dropout(0.2),
        nn_.Linear(8, 3, bias=False),
    )


def cnn(lib: ModuleType) -> Any:
    nn_ = lib.nn
    return nn_.Sequential(
        nn_.Conv2d(3, 4, 3, padding=1),
        nn_.BatchNorm2d(4),
        nn_.ReLU(),
        nn_.MaxPool2d(2),
        nn_.Conv2d(4, 6, 3, bias=False),
        nn_.Flatten(),
        nn_.Linear(24, 5),
    )


def nested(lib: ModuleType) -> Any:
    """Custom modules with buffers (one non-persistent), a parameter of their own, a
    ModuleList, a ModuleDict, BatchNorm1d and a weight shared by two layers."""
    nn_ = lib.nn

    class Block(nn_.Module):
        def __init__(self, width: int) -> None:
            super().__init__()
            self.fc = nn_.Linear(width, width)
            self.norm = nn_.BatchNorm1d(width)
            self.register_buffer("scale", lib.ones(width))
            self.register_buffer("cache", lib.zeros(width), persistent=False)
            self.gate = nn_.Parameter(lib.zeros(1))

        def forward(self, x: Any) -> Any:
            return self.norm(self.fc(x)) * self.scale + self.gate

    class Net(nn_.Module):
        def __init__(self) -> None:
            super().__init__()
            self.temperature = nn_.Parameter(lib.ones(1))
            self.embed = nn_.Embedding(10, 4, padding_idx=0)
            self.blocks = nn_.ModuleList([Block(4), Block(4)])
            self.heads = nn_.ModuleDict({"a": nn_.Linear(4, 2), "b": nn_.Linear(4, 3, bias=False)})
            self.tied = nn_.Linear(4, 10, bias=False)
            self.tied.weight = self.embed.weight

        def forward(self, idx: Any) -> Any:
            h = self.embed(idx).mean(1)
            for block in self.blocks:
                h = block(h)
            return self.heads["a"](h) * self.temperature, self.tied(h)

    return Net()


ARCHITECTURES = [
    pytest.param(mlp, id="mlp"),
    pytest.param(cnn, id="cnn"),
    pytest.param(nested, id="nested"),
]


# -- state dicts, traversal and printing against torch ---------------------------------------
@pytest.mark.parametrize("build", ARCHITECTURES)
def test_state_dict_keys_shapes_and_order_match_torch(torch: ModuleType, build: Any) -> None:
    ours, theirs = build(pl).state_dict(), build(torch).state_dict()
    assert list(ours) == list(theirs)
    for key, value in theirs.items():
        assert ours[key].shape == tuple(value.shape), key
        assert ours[key].dtype.name == str(value.dtype).removeprefix("torch."), key


@pytest.mark.parametrize("build", ARCHITECTURES)
def test_traversal_names_match_torch(torch: ModuleType, build: Any) -> None:
    ours, theirs = build(pl), build(torch)
    for method in ("named_parameters", "named_buffers", "named_modules", "named_children"):
        names = [name for name, _ in getattr(ours, method)()]
        assert names == [name for name, _ in getattr(theirs, method)()], method
    assert [type(m).__name__ for m in ours.children()] == [
        type(m).__name__ for m in theirs.children()
    ]
    assert len(list(ours.parameters())) == len(list(theirs.parameters()))
    assert len(list(ours.buffers())) == len(list(theirs.buffers()))
    assert [n for n, _ in ours.named_parameters(recurse=False)] == [
        n for n, _ in theirs.named_parameters(recurse=False)
    ]


def test_shared_parameters_are_listed_once_but_stored_under_both_keys(torch: ModuleType) -> None:
    ours, theirs = nested(pl), nested(torch)
    assert ours.tied.weight is ours.embed.weight
    names = [name for name, _ in ours.named_parameters()]
    assert "embed.weight" in names and "tied.weight" not in names
    assert "tied.weight" in ours.state_dict()
    kept = [n for n, _ in ours.named_parameters(remove_duplicate=False)]
    assert kept == [n for n, _ in theirs.named_parameters(remove_duplicate=False)]
    assert kept.count("tied.weight") == 1


def test_shared_submodule_traversal_without_deduplication_matches_torch(
    torch: ModuleType,
) -> None:
    def build(lib: ModuleType) -> Any:
        shared = lib.nn.BatchNorm1d(3)
        return lib.nn.Sequential(shared, lib.nn.ReLU(), shared)

    ours, theirs = build(pl), build(torch)
    for method in ("named_modules", "named_parameters", "named_buffers"):
        for flag in (True, False):
            names = [n for n, _ in getattr(ours, method)(remove_duplicate=flag)]
            expected = [n for n, _ in getattr(theirs, method)(remove_duplicate=flag)]
            assert names == expected, (method, flag)
    assert list(ours.state_dict()) == list(theirs.state_dict())
    assert [n for n, _ in ours.named_buffers(prefix="net")] == [
        n for n, _ in theirs.named_buffers(prefix="net")
    ]


def test_non_persistent_buffers_are_listed_but_not_saved() -> None:
    model = nested(pl)
    assert "blocks.0.cache" in dict(model.named_buffers())
    assert not any(key.endswith("cache") for key in model.state_dict())
    assert "blocks.0.scale" in model.state_dict()


REPR_MODELS = [
    pytest.param(mlp, id="mlp"),
    pytest.param(cnn, id="cnn"),
    pytest.param(nested, id="nested"),
    pytest.param(
        lambda lib: lib.nn.Sequential(
            lib.nn.Conv1d(2, 4, 3, padding="same", dilation=2),
            lib.nn.Conv1d(4, 4, 3, padding="valid", bias=False),
            lib.nn.Conv2d(
                2, 4, (3, 2), stride=(2, 1), padding=(1, 0), groups=2, padding_mode="reflect"
            ),
            lib.nn.BatchNorm1d(5, momentum=None, affine=False),
            lib.nn.BatchNorm2d(3, eps=1e-3, track_running_stats=False),
            lib.nn.LayerNorm((2, 3), elementwise_affine=False),
            lib.nn.LayerNorm(3, bias=False),
            lib.nn.MaxPool2d(3, 1, 1, ceil_mode=True),
            lib.nn.AvgPool2d(3, 2, 1),
            lib.nn.AdaptiveAvgPool2d((1, 2)),
            lib.nn.Unflatten(1, (2, 3)),
            lib.nn.Identity(),
            lib.nn.Embedding(10, 3, padding_idx=-1),
            lib.nn.Dropout(0.25, inplace=True),
        ),
        id="layers",
    ),
    pytest.param(
        lambda lib: lib.nn.Sequential(
            lib.nn.ReLU(),
            lib.nn.ReLU(inplace=True),
            lib.nn.SiLU(),
            lib.nn.SiLU(inplace=True),
            lib.nn.GELU(),
            lib.nn.GELU(approximate="tanh"),
            lib.nn.LeakyReLU(),
            lib.nn.LeakyReLU(0.2, inplace=True),
            lib.nn.ELU(),
            lib.nn.ELU(0.5, inplace=True),
            lib.nn.Softplus(2.0, 10.0),
            lib.nn.Softmax(dim=1),
            lib.nn.LogSoftmax(-1),
            lib.nn.Tanh(),
            lib.nn.Sigmoid(),
            lib.nn.MSELoss(),
            lib.nn.L1Loss(reduction="sum"),
            lib.nn.SmoothL1Loss(beta=0.5),
            lib.nn.BCELoss(),
            lib.nn.BCEWithLogitsLoss(),
            lib.nn.NLLLoss(),
            lib.nn.CrossEntropyLoss(label_smoothing=0.1),
        ),
        id="activations-losses",
    ),
    pytest.param(
        lambda lib: lib.nn.ModuleList(
            [
                lib.nn.Linear(2, 2),
                lib.nn.Linear(2, 2),
                lib.nn.ReLU(),
                lib.nn.Linear(2, 2),
                lib.nn.ModuleList([lib.nn.Tanh(), lib.nn.Tanh()]),
                lib.nn.ModuleList(),
            ]
        ),
        id="modulelist-repeats",
    ),
    pytest.param(
        lambda lib: lib.nn.ModuleDict(
            {
                "enc": lib.nn.Sequential(OrderedDict(fc=lib.nn.Linear(3, 3), act=lib.nn.ReLU())),
                "empty": lib.nn.Sequential(),
            }
        ),
        id="moduledict",
    ),
]


@pytest.mark.parametrize("build", REPR_MODELS)
def test_repr_matches_torch(torch: ModuleType, build: Any) -> None:
    ours, theirs = repr(build(pl)), repr(build(torch))
    print(ours, theirs, sep="\n")
    assert ours == theirs


def test_parameter_repr_type_and_ops() -> None:
    p = nn.Parameter(pl.tensor([1.0, 2.0]))
    assert repr(p).startswith("Parameter containing:\ntensor([1., 2.]")
    assert "requires_grad=True" in repr(p)
    assert isinstance(p, pl.Tensor) and type(p) is nn.Parameter
    assert p.is_leaf and p.requires_grad
    assert not nn.Parameter(pl.tensor([1.0]), requires_grad=False).requires_grad
    assert type(p * 2) is pl.Tensor and type(p.detach()) is pl.Tensor
    assert nn.Parameter().shape == (0,) and nn.Parameter().dtype is pl.float32
    with pytest.raises(TypeError, match="Parameter: expected a Tensor, got list"):
        nn.Parameter([1.0, 2.0])


# -- forward values and gradients after loading torch's weights ---------------------------------
def _compare_layer(torch: ModuleType, build: Any, shape: tuple[int, ...], device: str) -> None:
    """Same weights, same float64 input: same output and same gradients (of the input and of
    every parameter) for a random upstream gradient."""
    torch.manual_seed(0)
    theirs = build(torch).double()
    ours = build(pl).double().to(device)
    ours.load_state_dict(torch_state(theirs))
    values = np.random.default_rng(7).standard_normal(shape)
    x = torch.tensor(values, requires_grad=True)
    px = pl.tensor(values, device=device, requires_grad=True)
    out, expected = ours(px), theirs(x)
    assert out.device == device and out.dtype is pl.float64
    close(out, expected)
    upstream = np.random.default_rng(8).standard_normal(tuple(expected.shape))
    (expected * torch.tensor(upstream)).sum().backward()
    (out * pl.tensor(upstream, device=device)).sum().backward()
    close(px.grad, x.grad)
    named = dict(theirs.named_parameters())
    for name, param in ours.named_parameters():
        close(param.grad, named[name].grad)


LAYERS = [
    pytest.param(lambda lib: lib.nn.Linear(5, 3), (4, 5), id="linear"),
    pytest.param(lambda lib: lib.nn.Linear(5, 3, bias=False), (2, 4, 5), id="linear-nobias-3d"),
    pytest.param(lambda lib: lib.nn.Conv1d(3, 4, 3, stride=2, padding=1), (2, 3, 11), id="conv1d"),
    pytest.param(
        lambda lib: lib.nn.Conv1d(2, 4, 4, padding="same", dilation=2, groups=2),
        (2, 2, 9),
        id="conv1d-same-even-kernel",
    ),
    pytest.param(
        lambda lib: lib.nn.Conv1d(2, 3, 3, padding=2, padding_mode="circular"),
        (2, 2, 7),
        id="conv1d-circular",
    ),
    pytest.param(
        lambda lib: lib.nn.Conv2d(4, 6, 3, stride=2, padding=1, dilation=2, groups=2),
        (2, 4, 9, 9),
        id="conv2d-stride-dilation-groups",
    ),
    pytest.param(
        lambda lib: lib.nn.Conv2d(2, 3, (3, 2), stride=(1, 2), padding=(2, 1), bias=False),
        (2, 2, 6, 7),
        id="conv2d-rectangular",
    ),
    pytest.param(
        lambda lib: lib.nn.Conv2d(2, 3, 3, padding=(1, 2), padding_mode="reflect"),
        (2, 2, 5, 6),
        id="conv2d-reflect",
    ),
    pytest.param(
        lambda lib: lib.nn.Conv2d(2, 3, 3, stride=2, padding=1, padding_mode="replicate"),
        (2, 2, 5, 6),
        id="conv2d-replicate",
    ),
    pytest.param(
        lambda lib: lib.nn.Conv2d(2, 3, 3, padding=(2, 1), padding_mode="circular"),
        (2, 2, 5, 6),
        id="conv2d-circular",
    ),
    pytest.param(
        lambda lib: lib.nn.Conv2d(2, 3, (4, 3), padding="same", dilation=(1, 2)),
        (2, 2, 6, 7),
        id="conv2d-same",
        marks=pytest.mark.filterwarnings("ignore:Using padding='same' with even kernel"),
    ),
    pytest.param(
        lambda lib: lib.nn.Conv2d(2, 3, 4, padding="same", padding_mode="reflect"),
        (2, 2, 6, 7),
        id="conv2d-same-reflect",
    ),
    pytest.param(
        lambda lib: lib.nn.Conv2d(2, 3, 3, padding="valid"), (1, 2, 5, 6), id="conv2d-valid"
    ),
    pytest.param(lambda lib: lib.nn.Conv2d(2, 3, 3, padding=1), (2, 5, 6), id="conv2d-unbatched"),
    pytest.param(lambda lib: lib.nn.MaxPool2d(2), (2, 3, 6, 7), id="maxpool"),
    pytest.param(
        lambda lib: lib.nn.MaxPool2d(3, stride=2, padding=1, dilation=2),
        (2, 3, 9, 8),
        id="maxpool-padding-dilation",
    ),
    pytest.param(
        lambda lib: lib.nn.MaxPool2d((3, 2), stride=2, ceil_mode=True),
        (1, 2, 7, 6),
        id="maxpool-ceil",
    ),
    pytest.param(lambda lib: lib.nn.AvgPool2d(2), (2, 3, 6, 7), id="avgpool"),
    pytest.param(
        lambda lib: lib.nn.AvgPool2d(3, 2, 1, count_include_pad=False),
        (2, 3, 7, 6),
        id="avgpool-exclude-pad",
    ),
    pytest.param(
        lambda lib: lib.nn.AvgPool2d(3, 2, 1, ceil_mode=True, divisor_override=4),
        (1, 2, 6, 6),
        id="avgpool-ceil-divisor",
    ),
    pytest.param(lambda lib: lib.nn.AdaptiveAvgPool2d((2, 3)), (2, 3, 7, 5), id="adaptive"),
    pytest.param(lambda lib: lib.nn.AdaptiveAvgPool2d(1), (2, 3, 4, 5), id="adaptive-global"),
    pytest.param(lambda lib: lib.nn.LayerNorm(6), (3, 4, 6), id="layernorm"),
    pytest.param(
        lambda lib: lib.nn.LayerNorm((4, 6), eps=1e-3, bias=False), (3, 4, 6), id="layernorm-nobias"
    ),
    pytest.param(
        lambda lib: lib.nn.LayerNorm(6, elementwise_affine=False), (3, 6), id="layernorm-noaffine"
    ),
    pytest.param(lambda lib: lib.nn.Dropout(0.5).eval(), (3, 6), id="dropout-eval"),
    pytest.param(lambda lib: lib.nn.Identity(7, k=1), (3, 6), id="identity"),
    pytest.param(lambda lib: lib.nn.Flatten(), (2, 3, 4, 5), id="flatten"),
    pytest.param(lambda lib: lib.nn.Flatten(0, 2), (2, 3, 4, 5), id="flatten-0-2"),
    pytest.param(lambda lib: lib.nn.Unflatten(-1, (2, 3)), (4, 6), id="unflatten"),
    pytest.param(lambda lib: lib.nn.ReLU(), (4, 6), id="relu"),
    pytest.param(lambda lib: lib.nn.Tanh(), (4, 6), id="tanh"),
    pytest.param(lambda lib: lib.nn.Sigmoid(), (4, 6), id="sigmoid"),
    pytest.param(lambda lib: lib.nn.SiLU(), (4, 6), id="silu"),
    pytest.param(lambda lib: lib.nn.GELU(), (4, 6), id="gelu"),
    pytest.param(lambda lib: lib.nn.GELU(approximate="tanh"), (4, 6), id="gelu-tanh"),
    pytest.param(lambda lib: lib.nn.LeakyReLU(0.2), (4, 6), id="leaky-relu"),
    pytest.param(lambda lib: lib.nn.ELU(0.7), (4, 6), id="elu"),
    pytest.param(lambda lib: lib.nn.Softplus(beta=2.0, threshold=3.0), (4, 6), id="softplus"),
    pytest.param(lambda lib: lib.nn.Softmax(dim=1), (2, 3, 4), id="softmax"),
    pytest.param(lambda lib: lib.nn.LogSoftmax(dim=-1), (2, 3, 4), id="log-softmax"),
    pytest.param(
        lambda lib: lib.nn.Softmax(),
        (2, 3, 4),
        id="softmax-implicit-dim-3d",
        marks=pytest.mark.filterwarnings("ignore:Implicit dimension"),
    ),
    pytest.param(
        lambda lib: lib.nn.LogSoftmax(),
        (2, 3),
        id="log-softmax-implicit-dim-2d",
        marks=pytest.mark.filterwarnings("ignore:Implicit dimension"),
    ),
]


@pytest.mark.parametrize(("build", "shape"), LAYERS)
def test_layer_forward_and_gradients_match_torch(
    torch: ModuleType, device: str, build: Any, shape: tuple[int, ...]
) -> None:
    _compare_layer(torch, build, shape, device)


@pytest.mark.parametrize("build", [mlp, cnn])
def test_whole_model_forward_and_gradients_match_torch(
    torch: ModuleType, device: str, build: Any
) -> None:
    shape = (5, 4) if build is mlp else (2, 3, 8, 8)
    model = build(pl)
    model.eval()  # dropout off, batch norm on running statistics: deterministic
    model_t = build(torch).eval()
    assert not any(m.training for m in model.modules())

    def built(lib: ModuleType) -> Any:
        return model_t if lib is torch else model

    _compare_layer(torch, built, shape, device)


def test_max_pool_return_indices_match_torch(torch: ModuleType, device: str) -> None:
    values = np.random.default_rng(5).standard_normal((2, 3, 7, 6))
    out, idx = nn.MaxPool2d(3, 2, 1, return_indices=True)(pl.tensor(values, device=device))
    expected, expected_idx = torch.nn.MaxPool2d(3, 2, 1, return_indices=True)(torch.tensor(values))
    close(out, expected)
    assert idx.dtype is pl.int64
    np.testing.assert_array_equal(idx.numpy(), expected_idx.numpy())


def test_layer_construction_errors() -> None:
    with pytest.raises(ValueError, match=r"Conv2d: in_channels \(3\) and out_channels \(4\)"):
        nn.Conv2d(3, 4, 3, groups=2)
    with pytest.raises(ValueError, match="Conv1d: padding_mode must be one of"):
        nn.Conv1d(2, 2, 3, padding_mode="mirror")
    with pytest.raises(ValueError, match="padding='same' is not supported for strided"):
        nn.Conv2d(2, 2, 3, stride=2, padding="same")
    with pytest.raises(ValueError, match="Conv2d: padding must be 'same', 'valid' or ints"):
        nn.Conv2d(2, 2, 3, padding="full")
    with pytest.raises(ValueError, match="Conv2d: kernel_size must be an int or 2 ints"):
        nn.Conv2d(2, 2, (3, 3, 3))
    with pytest.raises(ValueError, match="Linear: in_features must be a non-negative int"):
        nn.Linear(-1, 2)
    with pytest.raises(ValueError, match="Embedding: padding_idx 3 is outside the 3"):
        nn.Embedding(3, 2, padding_idx=3)
    layer = nn.Conv2d(2, 4, 3, device="cpu", dtype=pl.float64)
    assert layer.weight.dtype is pl.float64 and layer.weight.shape == (4, 2, 3, 3)
    assert nn.Linear(3, 2, dtype=pl.float16).bias.dtype is pl.float16
    assert nn.BatchNorm1d(3, bias=False).bias is None  # torch 2.13's keyword


def test_nested_model_in_training_matches_torch(torch: ModuleType, device: str) -> None:
    """Batch norm on batch statistics, a padded embedding, and a weight used twice (the
    embedding's and the tied head's gradients add up)."""
    torch.manual_seed(1)
    theirs = nested(torch).double()
    ours = nested(pl).double().to(device)
    ours.load_state_dict(torch_state(theirs))
    idx = np.array([[1, 0, 4], [2, 2, 9], [0, 0, 0], [3, 7, 5], [8, 6, 1]])
    for _ in range(2):  # two steps: the gradients add up, the running statistics move twice
        head, tied = ours(pl.tensor(idx, device=device))
        head_t, tied_t = theirs(torch.tensor(idx))
        close(head, head_t)
        close(tied, tied_t)
        (head.sum() + tied.square().sum()).backward()
        (head_t.sum() + tied_t.square().sum()).backward()
    named = dict(theirs.named_parameters())
    assert named["heads.b.weight"].grad is None  # (an unused head)
    for name, param in ours.named_parameters():
        if named[name].grad is None:
            assert param.grad is None, name
        else:
            close(param.grad, named[name].grad)
    for key, value in theirs.state_dict().items():
        close(ours.state_dict()[key].to("cpu"), value)


@pytest.mark.parametrize("momentum", [0.1, None])
@pytest.mark.parametrize(
    ("kind", "shape"),
    [
        ("BatchNorm1d", (6, 3)),
        ("BatchNorm1d", (4, 3, 5)),
        ("BatchNorm2d", (4, 3, 5, 2)),
    ],
)
def test_batch_norm_train_then_eval_matches_torch(
    torch: ModuleType, device: str, kind: str, shape: tuple[int, ...], momentum: float | None
) -> None:
    theirs = getattr(torch.nn, kind)(3, momentum=momentum).double()
    ours = getattr(nn, kind)(3, momentum=momentum).double().to(device)
    with torch.no_grad():
        theirs.weight.uniform_(0.5, 1.5)
        theirs.bias.uniform_(-0.5, 0.5)
    ours.load_state_dict(torch_state(theirs))
    rng = np.random.default_rng(3)
    for step in range(4):
        values = rng.standard_normal(shape) * (step + 1) + step
        x = torch.tensor(values, requires_grad=True)
        px = pl.tensor(values, device=device, requires_grad=True)
        out, expected = ours(px), theirs(x)
        close(out, expected)
        (
            expected.square()
            * torch.arange(3.0, dtype=torch.float64).reshape(3, *[1] * (len(shape) - 2))
        ).sum().backward()
        (
            out.square()
            * pl.arange(3.0, dtype=pl.float64, device=device).reshape(3, *[1] * (len(shape) - 2))
        ).sum().backward()
        close(px.grad, x.grad)
        close(ours.weight.grad, theirs.weight.grad)
        close(ours.bias.grad, theirs.bias.grad)
        close(ours.running_mean, theirs.running_mean)
        close(ours.running_var, theirs.running_var)
        assert ours.num_batches_tracked.item() == theirs.num_batches_tracked.item() == step + 1
        assert ours.num_batches_tracked.dtype is pl.int64
    ours.eval()
    theirs.eval()
    values = rng.standard_normal(shape)
    close(ours(pl.tensor(values, device=device)), theirs(torch.tensor(values)))
    assert ours.num_batches_tracked.item() == 4  # evaluation tracks nothing


def test_batch_norm_without_running_stats_or_affine_matches_torch(
    torch: ModuleType, device: str
) -> None:
    theirs = torch.nn.BatchNorm2d(3, affine=False, track_running_stats=False).double()
    ours = nn.BatchNorm2d(3, affine=False, track_running_stats=False).double().to(device)
    assert ours.state_dict() == {} and list(theirs.state_dict()) == []
    values = np.random.default_rng(4).standard_normal((2, 3, 4, 4)) + 2
    for mode in (True, False):  # batch statistics in both modes
        close(
            ours.train(mode)(pl.tensor(values, device=device)),
            theirs.train(mode)(torch.tensor(values)),
        )


def test_batch_norm_rejects_wrong_rank() -> None:
    with pytest.raises(ValueError, match="BatchNorm2d: expected a 4-d input, got shape"):
        nn.BatchNorm2d(3)(pl.zeros(2, 3))
    with pytest.raises(ValueError, match="BatchNorm1d: expected a 2 or 3-d input"):
        nn.BatchNorm1d(3)(pl.zeros(2, 3, 4, 4))


def test_dropout_train_zeroes_or_scales_and_eval_is_identity(device: str) -> None:
    pl.manual_seed(0)
    p = 0.3
    x = pl.rand(200, 500, dtype=pl.float64, device=device) + 1.0  # no zeros in the input
    x.requires_grad_(True)
    layer = nn.Dropout(p)
    out = layer(x)
    values, inputs = out.numpy(), x.detach().numpy()
    kept = values != 0
    np.testing.assert_allclose(values[kept], inputs[kept] / (1 - p), rtol=1e-15)
    # 100 000 Bernoulli(0.3) draws: std of the fraction 0.0014, so 0.01 is about 7 sigma
    assert abs((~kept).mean() - p) < 0.01
    out.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), kept / (1 - p), rtol=1e-15)
    layer.eval()
    assert np.array_equal(layer(x).numpy(), inputs)
    assert np.array_equal(nn.Dropout(0.0)(x).numpy(), inputs)
    assert not nn.Dropout(1.0)(x).numpy().any()
    pl.manual_seed(5)
    first = nn.Dropout(0.5)(x).numpy()
    pl.manual_seed(5)
    assert np.array_equal(first, nn.Dropout(0.5)(x).numpy())
    with pytest.raises(ValueError, match=r"Dropout: p must be in \[0, 1\], got 1.5"):
        nn.Dropout(1.5)


def test_embedding_padding_row_and_gradient_match_torch(torch: ModuleType, device: str) -> None:
    theirs = torch.nn.Embedding(7, 3, padding_idx=2).double()
    ours = nn.Embedding(7, 3, padding_idx=2).double().to(device)
    assert not ours.weight.numpy()[2].any()  # the default init zeroes the padding row
    ours.load_state_dict(torch_state(theirs))
    idx = np.array([[0, 2, 5], [2, 2, 6]])
    out, expected = ours(pl.tensor(idx, device=device)), theirs(torch.tensor(idx))
    close(out, expected)
    upstream = np.random.default_rng(0).standard_normal((2, 3, 3))
    (expected * torch.tensor(upstream)).sum().backward()
    (out * pl.tensor(upstream, device=device)).sum().backward()
    close(ours.weight.grad, theirs.weight.grad)
    assert not ours.weight.grad.numpy()[2].any()
    assert nn.Embedding(5, 2, padding_idx=-1).padding_idx == 4


def test_embedding_from_pretrained(torch: ModuleType) -> None:
    values = np.arange(12.0).reshape(4, 3)
    ours = nn.Embedding.from_pretrained(pl.tensor(values), padding_idx=1)
    theirs = torch.nn.Embedding.from_pretrained(torch.tensor(values), padding_idx=1)
    assert ours.weight.requires_grad is theirs.weight.requires_grad is False
    close(ours.weight, theirs.weight)  # the padding row is kept, as torch's
    assert repr(ours) == repr(theirs)
    assert nn.Embedding.from_pretrained(pl.tensor(values), freeze=False).weight.requires_grad
    with pytest.raises(ValueError, match="expected 2-d embeddings"):
        nn.Embedding.from_pretrained(pl.zeros(3))
    with pytest.raises(NotImplementedError, match="max_norm"):
        nn.Embedding(3, 2, max_norm=1.0)


LOSSES = [  # (module, input kind, target kind)
    pytest.param(lambda lib: lib.nn.MSELoss(), "real", "real", id="mse"),
    pytest.param(lambda lib: lib.nn.MSELoss(reduction="none"), "real", "real", id="mse-none"),
    pytest.param(lambda lib: lib.nn.L1Loss(reduction="sum"), "real", "real", id="l1-sum"),
    pytest.param(lambda lib: lib.nn.SmoothL1Loss(beta=0.5), "real", "real", id="smooth-l1"),
    pytest.param(lambda lib: lib.nn.BCELoss(), "probability", "probability", id="bce"),
    pytest.param(
        lambda lib: lib.nn.BCEWithLogitsLoss(reduction="sum"),
        "real",
        "probability",
        id="bce-logits",
    ),
    pytest.param(
        lambda lib: lib.nn.NLLLoss(ignore_index=1), "log-probability", "class", id="nll-ignore"
    ),
    pytest.param(lambda lib: lib.nn.CrossEntropyLoss(), "real", "class", id="cross-entropy"),
    pytest.param(
        lambda lib: lib.nn.CrossEntropyLoss(label_smoothing=0.2, reduction="none"),
        "real",
        "class",
        id="cross-entropy-smoothing",
    ),
    pytest.param(
        lambda lib: lib.nn.CrossEntropyLoss(label_smoothing=0.1),
        "real",
        "distribution",
        id="cross-entropy-probabilities",
    ),
]


@pytest.mark.parametrize(("build", "input_kind", "target_kind"), LOSSES)
def test_loss_modules_match_torch(
    torch: ModuleType, device: str, build: Any, input_kind: str, target_kind: str
) -> None:
    rng = np.random.default_rng(11)
    logits = rng.standard_normal((6, 4))
    values = {
        "real": logits,
        "probability": 1 / (1 + np.exp(-logits)),
        "log-probability": logits - np.log(np.exp(logits).sum(1, keepdims=True)),
    }[input_kind]
    target = {
        "real": rng.standard_normal((6, 4)),
        "probability": rng.uniform(size=(6, 4)),
        "class": np.array([0, 3, 1, 2, 1, 3]),  # (class 1 is NLLLoss's ignore_index)
        "distribution": rng.dirichlet(np.ones(4), size=6),
    }[target_kind]
    x = torch.tensor(values, requires_grad=True)
    px = pl.tensor(values, device=device, requires_grad=True)
    out = build(pl)(px, pl.tensor(target, device=device))
    expected = build(torch)(x, torch.tensor(target))
    close(out, expected)
    out.sum().backward()
    expected.sum().backward()
    close(px.grad, x.grad)


def test_loss_modules_reject_unsupported_options() -> None:
    with pytest.raises(ValueError, match="MSELoss: reduction must be one of"):
        nn.MSELoss(reduction="avg")
    with pytest.raises(NotImplementedError, match="CrossEntropyLoss: weight not supported"):
        nn.CrossEntropyLoss(weight=pl.ones(3))


# -- load_state_dict ---------------------------------------------------------------------------
def test_load_state_dict_round_trip_between_models(device: str) -> None:
    source, target = cnn(pl), cnn(pl).to(device)
    result = target.load_state_dict(source.state_dict())
    assert result.missing_keys == [] and result.unexpected_keys == []
    assert tuple(result) == ([], [])
    for key, value in source.state_dict().items():
        loaded = target.state_dict()[key]
        assert loaded.device == device
        np.testing.assert_array_equal(loaded.numpy(), value.numpy(), err_msg=key)
    state = target.state_dict()  # detached, and sharing the module's memory (as torch's)
    assert not state["0.weight"].requires_grad and target[0].weight.requires_grad
    state["0.bias"].zero_()
    assert not target[0].bias.numpy().any()
    assert target.state_dict(keep_vars=True)["0.weight"] is target[0].weight
    assert list(target.state_dict(prefix="model.")) == [f"model.{k}" for k in state]


def test_load_state_dict_from_torch_converts_float64_into_float32(torch: ModuleType) -> None:
    theirs = mlp(torch).double()
    ours = mlp(pl)
    ours.load_state_dict(torch_state(theirs))
    for key, value in theirs.state_dict().items():
        loaded = ours.state_dict()[key]
        assert loaded.dtype is pl.float32
        np.testing.assert_array_equal(loaded.numpy(), value.numpy().astype(np.float32))


def test_load_state_dict_strict_errors_list_every_problem_and_change_nothing() -> None:
    model = nested(pl)
    before = snapshot(model)
    state = dict(nested(pl).state_dict())
    del state["blocks.1.fc.bias"], state["temperature"]
    state["extra.weight"] = pl.zeros(2)
    state["heads.a.weight"] = pl.zeros(3, 3)  # shape (2, 4) expected
    state["blocks.0.scale"] = [1.0, 2.0, 3.0, 4.0]  # not a tensor
    state["blocks.0.norm.num_batches_tracked"] = pl.tensor(3.0)  # float into int64
    for key in ("embed.weight", "tied.weight", "blocks.0.fc.weight"):  # valid, never copied
        state[key] = pl.ones(*state[key].shape)
    with pytest.raises(RuntimeError) as error:
        model.load_state_dict(state)
    text = str(error.value)
    print(text)
    assert text.startswith("Error(s) in loading state_dict for Net:")
    assert 'Missing key(s) in state_dict: "temperature", "blocks.1.fc.bias".' in text
    assert 'Unexpected key(s) in state_dict: "extra.weight".' in text
    assert "size mismatch for heads.a.weight" in text and "(3, 3)" in text and "(2, 4)" in text
    assert '"blocks.0.scale", expected a Tensor, got a list' in text
    assert "blocks.0.norm.num_batches_tracked" in text and "int64" in text
    assert text.index("Missing") < text.index("Unexpected") < text.index("size mismatch")
    same_snapshot(before, model)


def test_load_state_dict_non_strict_reports_keys_like_torch(torch: ModuleType) -> None:
    def keys_of(lib: ModuleType, tensor: Any) -> Any:
        model = nested(lib)
        state = OrderedDict(mlp(lib).state_dict())  # every key unexpected, in another order
        state["zzz"] = tensor(1.0)
        state["blocks.0.fc.weight"] = model.blocks[0].fc.weight.detach() * 0 + 2
        state["blocks.0.fc.bogus"] = tensor(1.0)
        state["blocks.7.x"] = tensor(1.0)
        result = model.load_state_dict(state, strict=False)
        return model, result

    ours, result = keys_of(pl, pl.tensor)
    theirs, expected = keys_of(torch, torch.tensor)
    assert result.missing_keys == expected.missing_keys
    assert result.unexpected_keys == expected.unexpected_keys
    assert (ours.blocks[0].fc.weight.numpy() == 2).all()  # the matching key was loaded


def test_load_state_dict_tolerates_a_missing_num_batches_tracked(torch: ModuleType) -> None:
    ours, theirs = nn.BatchNorm1d(3), torch.nn.BatchNorm1d(3)
    ours(pl.ones(4, 3))  # one step: num_batches_tracked is 1
    theirs(torch.ones(4, 3))
    state = {
        "weight": pl.full((3,), 2.0),
        "bias": pl.zeros(3),
        "running_mean": pl.ones(3),
        "running_var": pl.ones(3),
    }  # an old checkpoint, before the buffer
    result = ours.load_state_dict(state)
    expected = theirs.load_state_dict({k: torch.tensor(v.numpy()) for k, v in state.items()})
    assert tuple(result) == tuple(expected) == ([], [])
    assert ours.num_batches_tracked.item() == theirs.num_batches_tracked.item() == 1
    assert (ours.weight.numpy() == 2).all()


def test_load_state_dict_size_mismatch_raises_even_when_not_strict() -> None:
    model = nn.Linear(3, 2)
    before = snapshot(model)
    with pytest.raises(RuntimeError, match="size mismatch for weight"):
        model.load_state_dict({"weight": pl.zeros(2, 4), "bias": pl.zeros(2)}, strict=False)
    same_snapshot(before, model)
    with pytest.raises(TypeError, match="expected a mapping"):
        model.load_state_dict([("weight", pl.zeros(2, 3))])


def test_load_state_dict_copies_into_the_same_parameters() -> None:
    model = nn.Linear(3, 2)
    weight = model.weight
    optimizer = pl.optim.SGD(model.parameters(), lr=0.1)
    source = pl.arange(6.0).reshape(2, 3)
    model.load_state_dict({"weight": source, "bias": pl.zeros(2)})
    assert model.weight is weight and type(weight) is nn.Parameter and weight.requires_grad
    source.add_(1)  # copied, not shared
    np.testing.assert_array_equal(weight.numpy(), np.arange(6.0).reshape(2, 3))
    model(pl.ones(1, 3)).sum().backward()
    optimizer.step()
    np.testing.assert_allclose(weight.numpy(), np.arange(6.0).reshape(2, 3) - 0.1, rtol=1e-6)


def test_load_state_dict_assign_takes_the_tensors(torch: ModuleType) -> None:
    model = nn.BatchNorm1d(3)
    model.weight.requires_grad_(False)
    state = {
        key: value.double() if value.dtype.is_floating_point else value
        for key, value in nn.BatchNorm1d(3).state_dict().items()
    }
    state["weight"] = pl.tensor([1.0, 2.0, 3.0], dtype=pl.float64)
    model.load_state_dict(state, assign=True)
    assert type(model.weight) is nn.Parameter and model.weight.dtype is pl.float64
    assert not model.weight.requires_grad and model.bias.requires_grad  # flags are kept
    assert np.shares_memory(model.running_mean.numpy(), state["running_mean"].numpy())
    np.testing.assert_array_equal(model.weight.numpy(), [1.0, 2.0, 3.0])
    theirs = torch.nn.BatchNorm1d(3)
    theirs.weight.requires_grad_(False)
    theirs.load_state_dict({k: torch.tensor(v.numpy()) for k, v in state.items()}, assign=True)
    assert theirs.weight.dtype == torch.float64 and not theirs.weight.requires_grad


def test_load_state_dict_across_devices(device: str) -> None:
    other = "gpu" if device == "cpu" else "cpu"
    if "mlx" not in pl.backends.available():
        pytest.skip('mlx is not installed (pip install "pylucid[mlx]")')
    source = nested(pl).to(other)
    target = nested(pl).to(device)
    target.load_state_dict(source.state_dict())
    for key, value in target.state_dict().items():
        assert value.device == device, key
        np.testing.assert_array_equal(value.numpy(), source.state_dict()[key].numpy())


# -- Module semantics -----------------------------------------------------------------------
def test_setattr_registers_and_reassigns() -> None:
    module = nn.Module()
    module.weight = nn.Parameter(pl.ones(2))
    module.child = nn.Linear(2, 2)
    module.register_buffer("stat", pl.zeros(2))
    module.plain = pl.zeros(1)  # a plain tensor attribute is not registered
    assert list(module._parameters) == ["weight"] and list(module._modules) == ["child"]
    assert list(module.state_dict()) == ["weight", "stat", "child.weight", "child.bias"]
    module.weight = None  # a declared, absent parameter
    assert module.weight is None and "weight" not in module.state_dict()
    with pytest.raises(TypeError, match="cannot assign a Tensor as parameter 'weight'"):
        module.weight = pl.ones(2)
    module.weight = nn.Parameter(pl.ones(3))
    assert module.weight.shape == (3,)
    replacement = nn.Tanh()
    module.child = replacement
    assert module.child is replacement and list(module.state_dict()) == ["weight", "stat"]
    with pytest.raises(TypeError, match="cannot assign a int as child module 'child'"):
        module.child = 3
    module.stat = pl.ones(4)  # a buffer stays a buffer
    assert module.state_dict()["stat"].shape == (4,)
    with pytest.raises(TypeError, match="cannot assign a str as buffer 'stat'"):
        module.stat = "x"
    module.stat = None
    assert "stat" not in module.state_dict() and module.stat is None
    module.stat = nn.Parameter(pl.zeros(1))  # a parameter replaces the buffer
    assert "stat" in module._parameters and "stat" not in module._buffers
    module.plain = nn.Parameter(pl.zeros(1))  # replaces the plain attribute
    assert "plain" not in module.__dict__ and module.plain is module._parameters["plain"]


def test_reassignment_keeps_the_state_dict_order_of_torch(torch: ModuleType) -> None:
    def edited(lib: ModuleType) -> list[str]:
        model = lib.nn.Sequential(lib.nn.Linear(2, 3), lib.nn.ReLU(), lib.nn.BatchNorm1d(3))
        model[0].weight = lib.nn.Parameter(lib.zeros(3, 2))
        model[2].running_mean = lib.ones(3)
        model[0] = lib.nn.Linear(2, 3, bias=False)
        model.add_module("1", lib.nn.Tanh())
        model.register_parameter("scale", lib.nn.Parameter(lib.ones(1)))
        model.register_parameter("scale", lib.nn.Parameter(lib.ones(2)))
        return [*model.state_dict(), *(n for n, _ in model.named_modules())]

    assert edited(pl) == edited(torch)


def test_register_errors_and_names() -> None:
    module = nn.Linear(2, 2)
    for register in (module.register_buffer, module.register_parameter, module.add_module):
        with pytest.raises(KeyError, match="be empty or contain"):
            register("a.b", None)
        with pytest.raises(KeyError, match="be empty or contain"):
            register("", None)
        with pytest.raises(TypeError, match="name should be a string"):
            register(1, None)
    with pytest.raises(KeyError, match="attribute 'in_features' already exists"):
        module.register_buffer("in_features", pl.zeros(1))
    with pytest.raises(KeyError, match="attribute 'weight' already exists"):
        module.register_buffer("weight", pl.zeros(1))  # torch's rule: not a parameter's name
    with pytest.raises(TypeError, match="cannot assign a Tensor as parameter 'p'"):
        module.register_parameter("p", pl.zeros(1))
    with pytest.raises(TypeError, match="cannot assign a list as buffer 'b'"):
        module.register_buffer("b", [1.0])
    with pytest.raises(TypeError, match="int is not a Module subclass"):
        module.add_module("m", 3)
    module.register_buffer("b", pl.zeros(1), persistent=False)
    assert "b" in dict(module.named_buffers()) and "b" not in module.state_dict()
    module.register_buffer("b", pl.zeros(1))  # registering again makes it persistent
    assert "b" in module.state_dict()
    assert "weight" in dir(module) and "b" in dir(module)


def test_assigning_before_init_raises() -> None:
    class Early(nn.Module):
        def __init__(self) -> None:
            self.weight = nn.Parameter(pl.zeros(1))
            super().__init__()

    class EarlyModule(nn.Module):
        def __init__(self) -> None:
            self.fc = nn.Linear(1, 1)

    with pytest.raises(AttributeError, match=r"cannot assign parameters before Module.__init"):
        Early()
    with pytest.raises(AttributeError, match=r"before Module.__init__\(\) call .*EarlyModule"):
        EarlyModule()


def test_getattr_and_delattr() -> None:
    module = nn.Linear(2, 2)
    with pytest.raises(AttributeError, match="^'Linear' object has no attribute 'wieght'$"):
        module.wieght  # noqa: B018
    assert not hasattr(module, "missing")
    del module.bias
    assert "bias" not in module.state_dict() and not hasattr(module, "bias")
    module.register_buffer("stat", pl.zeros(1), persistent=False)
    del module.stat
    assert "stat" not in module._non_persistent_buffers and not hasattr(module, "stat")
    module.note = 1
    del module.note
    assert not hasattr(module, "note")
    with pytest.raises(AttributeError):
        del module.never_set


def test_forward_is_required() -> None:
    with pytest.raises(NotImplementedError, match=r'Module \[Module\] is missing "forward"'):
        nn.Module()(pl.zeros(1))


def test_train_eval_recurse_and_call_overrides() -> None:
    class Frozen(nn.Module):
        """A module that stays in evaluation mode (overrides train, as torch users do)."""

        def __init__(self) -> None:
            super().__init__()
            self.norm = nn.BatchNorm1d(2)

        def train(self, mode: bool = True) -> Frozen:
            super().train(False)
            return self

    model = nn.Sequential(nn.Linear(2, 2), nn.Sequential(nn.Dropout(), Frozen()))
    assert all(m.training for m in model.modules() if not isinstance(m, Frozen))
    assert model.eval() is model
    assert not any(m.training for m in model.modules())
    assert model.train() is model
    flags = {type(m).__name__: m.training for m in model.modules()}
    assert flags["Dropout"] and flags["Linear"] and not flags["Frozen"]
    assert not flags["BatchNorm1d"]  # the override's children follow it
    with pytest.raises(ValueError, match="mode must be a bool"):
        model.train("no")


def test_requires_grad_and_zero_grad() -> None:
    model = mlp(pl)
    assert model.requires_grad_(False) is model
    assert not any(p.requires_grad for p in model.parameters())
    model.requires_grad_()
    model(pl.ones(2, 4)).sum().backward()
    grads = [p.grad for p in model.parameters()]
    assert all(g is not None and g.numpy().any() for g in grads)
    model.zero_grad(set_to_none=False)
    assert all(p.grad is g and not g.numpy().any() for p, g in zip(model.parameters(), grads))
    model.zero_grad()
    assert all(p.grad is None for p in model.parameters())


def test_to_dtype_keeps_parameter_identity_for_an_optimizer_made_before() -> None:
    model = mlp(pl)
    params = list(model.parameters())
    optimizer = pl.optim.SGD(model.parameters(), lr=0.5)
    model(pl.ones(2, 4)).sum().backward()
    assert model.double() is model
    assert [p is q for p, q in zip(model.parameters(), params)] == [True] * len(params)
    assert all(
        type(p) is nn.Parameter and p.dtype is pl.float64 and p.requires_grad for p in params
    )
    assert all(p.grad.dtype is pl.float64 for p in params)  # the gradients moved too
    before = [p.numpy().copy() for p in params]
    optimizer.step()
    for p, old in zip(params, before):
        np.testing.assert_allclose(p.numpy(), old - 0.5 * p.grad.numpy(), rtol=1e-15)
    model.float()
    assert all(p.dtype is pl.float32 for p in model.parameters())


def test_to_device_moves_parameters_gradients_and_buffers(device: str) -> None:
    model = cnn(pl)
    weight = model[0].weight
    model(pl.ones(2, 3, 8, 8)).sum().backward()
    assert model.to(device) is model
    assert model[0].weight is weight
    assert all(p.device == device and p.grad.device == device for p in model.parameters())
    assert all(b.device == device for b in model.buffers())
    out = model(pl.ones(2, 3, 8, 8, device=device))
    assert out.device == device
    model.to(device=device, dtype=pl.float64)
    assert weight.dtype is pl.float64 and weight.device == device
    model.to(pl.zeros(1, dtype=pl.float32))
    assert weight.dtype is pl.float32 and weight.device == "cpu"
    assert model.cpu() is model


def test_half_and_double_only_touch_floating_tensors() -> None:
    model = nn.BatchNorm1d(3)
    model.half()
    assert model.weight.dtype is pl.float16 and model.running_mean.dtype is pl.float16
    assert model.num_batches_tracked.dtype is pl.int64
    model.double()
    assert model.running_var.dtype is pl.float64 and model.num_batches_tracked.dtype is pl.int64
    model.bfloat16()
    assert model.bias.dtype is pl.bfloat16
    with pytest.raises(TypeError, match="only floating dtypes"):
        model.to(pl.int32)
    with pytest.raises(TypeError, match="unexpected arguments"):
        model.to(copy=True)


def test_to_on_the_same_device_and_dtype_keeps_views_in_sync(device: str) -> None:
    model = nn.Linear(2, 2, device=device)
    alias = model.state_dict()["weight"]  # a detached alias of the parameter
    model.to(device).float()
    init.zeros_(model.weight)
    assert not alias.numpy().any()  # nothing was converted: the memory is still shared


def test_apply_visits_children_first() -> None:
    model = nn.Sequential(nn.Linear(2, 2), nn.Sequential(nn.ReLU(), nn.Tanh()))
    seen: list[str] = []
    assert model.apply(lambda m: seen.append(type(m).__name__)) is model
    assert seen == ["Linear", "ReLU", "Tanh", "Sequential", "Sequential"]

    def reset(m: nn.Module) -> None:
        if isinstance(m, nn.Linear):
            init.constant_(m.weight, 0.5)

    model.apply(reset)
    assert (model[0].weight.numpy() == 0.5).all()


def test_forward_hooks_modify_arguments_and_outputs() -> None:
    layer = nn.Linear(2, 2, bias=False)
    init.eye_(layer.weight)
    calls: list[str] = []

    def pre(module: nn.Module, args: tuple[Any, ...]) -> Any:
        calls.append("pre")
        assert module is layer and isinstance(args, tuple)
        return args[0] * 2  # one value: becomes the only argument

    def post(module: nn.Module, args: tuple[Any, ...], output: pl.Tensor) -> Any:
        calls.append("post")
        np.testing.assert_array_equal(args[0].numpy(), [[2.0, 4.0]])  # the changed args
        return output + 1

    def observe(module: nn.Module, args: tuple[Any, ...], output: pl.Tensor) -> None:
        calls.append("observe")

    handles = [
        layer.register_forward_pre_hook(pre),
        layer.register_forward_hook(post),
        layer.register_forward_hook(observe),
    ]
    out = layer(pl.tensor([[1.0, 2.0]]))
    np.testing.assert_array_equal(out.numpy(), [[3.0, 5.0]])
    assert calls == ["pre", "post", "observe"]
    for handle in handles:
        handle.remove()
    handles[0].remove()  # a second remove does nothing
    calls.clear()
    np.testing.assert_array_equal(layer(pl.tensor([[1.0, 2.0]])).numpy(), [[1.0, 2.0]])
    assert calls == []
    layer.register_forward_pre_hook(lambda m, args: (args[0] * 0,))  # a tuple: the args
    assert not layer(pl.tensor([[1.0, 2.0]])).numpy().any()


def test_get_submodule_and_get_parameter() -> None:
    model = nested(pl)
    assert model.get_submodule("") is model
    assert model.get_submodule("blocks.1.norm") is model.blocks[1].norm
    assert model.get_parameter("heads.a.bias") is model.heads["a"].bias
    assert model.get_parameter("temperature") is model.temperature
    with pytest.raises(AttributeError, match="ModuleList has no submodule '5'"):
        model.get_submodule("blocks.5")
    with pytest.raises(AttributeError, match="Linear has no parameter 'gamma'"):
        model.get_parameter("heads.a.gamma")


def test_sequential_indexing_and_editing(device: str) -> None:
    a, b, c = nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2)
    seq = nn.Sequential(a, b, c)
    assert len(seq) == 3 and list(seq) == [a, b, c]
    assert seq[0] is a and seq[-1] is c
    head = seq[:2]
    assert type(head) is nn.Sequential and list(head) == [a, b]
    assert list(seq[1:]._modules) == ["1", "2"]  # a slice keeps the names, as torch's
    with pytest.raises(IndexError, match="index 3 is out of range"):
        seq[3]  # noqa: B018
    with pytest.raises(TypeError, match="indices must be integers or slices"):
        seq["0"]  # noqa: B018
    seq.to(device)
    x = pl.tensor(np.random.default_rng(0).standard_normal((5, 3)), dtype=pl.float32, device=device)
    np.testing.assert_allclose(seq(x).numpy(), c(b(a(x))).numpy(), rtol=0)
    d = nn.Tanh()
    assert seq.append(d) is seq and seq[3] is d
    del seq[1]
    assert list(seq._modules) == ["0", "1", "2"] and list(seq) == [a, c, d]
    assert seq.insert(1, b) is seq and list(seq) == [a, b, c, d]
    seq.insert(-1, nn.Identity())
    assert type(seq[3]) is nn.Identity and seq[4] is d
    with pytest.raises(IndexError):
        seq.insert(9, nn.Identity())
    seq[0] = nn.Linear(3, 4)
    assert seq[0] is not a and list(seq._modules) == ["0", "1", "2", "3", "4"]
    del seq[3:]
    assert list(seq) == [seq[0], b, c]
    named = nn.Sequential(OrderedDict(fc=nn.Linear(2, 2), act=nn.ReLU()))
    assert list(named._modules) == ["fc", "act"] and type(named.act) is nn.ReLU
    assert list(named.state_dict()) == ["fc.weight", "fc.bias"]
    assert nn.Sequential()(x) is x  # an empty Sequential is the identity


def test_module_list_api() -> None:
    a, b, c = nn.Linear(2, 2), nn.ReLU(), nn.Tanh()
    layers = nn.ModuleList([a, b])
    assert len(layers) == 2 and list(layers) == [a, b] and layers[-1] is b
    layers.append(c)
    layers += [nn.Identity()]
    assert len(layers) == 4 and type(layers[3]) is nn.Identity
    assert type(layers[1:3]) is nn.ModuleList and list(layers[1:3]) == [b, c]
    layers.insert(0, nn.Sigmoid())
    assert type(layers[0]) is nn.Sigmoid and layers[1] is a
    del layers[0]
    assert list(layers._modules) == ["0", "1", "2", "3"] and layers[0] is a
    layers[1] = nn.GELU()
    assert type(layers[1]) is nn.GELU
    layers.extend([nn.ELU()])
    assert list(nn.ModuleList().parameters()) == []
    assert list(layers.state_dict()) == ["0.weight", "0.bias"]
    with pytest.raises(NotImplementedError):
        layers(pl.zeros(1))


def test_module_dict_api() -> None:
    a, b = nn.Linear(2, 2), nn.ReLU()
    heads = nn.ModuleDict({"a": a})
    heads["b"] = b
    assert list(heads) == ["a", "b"] and list(heads.keys()) == ["a", "b"]
    assert list(heads.values()) == [a, b] and list(heads.items()) == [("a", a), ("b", b)]
    assert "a" in heads and "z" not in heads and len(heads) == 2 and heads["a"] is a
    heads.update([("c", nn.Tanh())])
    heads.update({"a": nn.Linear(2, 3)})  # replaces, keeping the position
    assert list(heads) == ["a", "b", "c"] and heads["a"].out_features == 3
    assert heads.pop("b") is b and list(heads) == ["a", "c"]
    del heads["c"]
    assert list(heads) == ["a"]
    with pytest.raises(KeyError):
        heads["missing"]  # noqa: B018
    with pytest.raises(KeyError, match="be empty or contain"):
        heads["x.y"] = nn.ReLU()
    copied = nn.ModuleDict(nn.ModuleDict({"x": a, "y": b}))
    assert list(copied.items()) == [("x", a), ("y", b)]
    copied.update(nn.ModuleDict({"z": b}))
    assert list(copied) == ["x", "y", "z"]
    heads.clear()
    assert len(heads) == 0 and list(heads.state_dict()) == []


def test_deepcopy_gives_independent_parameters_and_keeps_sharing() -> None:
    model = nested(pl)
    model(pl.tensor([[1, 2], [3, 0]])).__getitem__(0).sum().backward()
    clone = copy.deepcopy(model)
    assert clone.tied.weight is clone.embed.weight  # sharing is kept
    assert clone.embed.weight is not model.embed.weight
    pairs = list(zip(model.parameters(), clone.parameters()))
    assert all(type(q) is nn.Parameter and q.requires_grad for _, q in pairs)
    assert all(not np.shares_memory(p.numpy(), q.numpy()) for p, q in pairs)
    for p, q in pairs:
        np.testing.assert_array_equal(p.numpy(), q.numpy())
        assert (p.grad is None) == (q.grad is None)
        if p.grad is not None:
            assert q.grad is not p.grad
            np.testing.assert_array_equal(p.grad.numpy(), q.grad.numpy())
    init.zeros_(clone.heads["a"].weight)
    assert model.heads["a"].weight.numpy().any()
    assert repr(clone) == repr(model)


class Tied(nn.Module):
    """A picklable (module-level) custom model: a weight shared by two layers, a buffer."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(6, 4)
        self.body = nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4), nn.ReLU())
        self.out = nn.Linear(4, 6, bias=False)
        self.out.weight = self.embed.weight
        self.register_buffer("offset", pl.arange(6.0))

    def forward(self, idx: pl.Tensor) -> pl.Tensor:
        return self.out(self.body(self.embed(idx))) + self.offset


def test_pickle_round_trip() -> None:
    model = Tied()
    model(pl.tensor([1, 2, 3]))  # a training step: the running statistics change
    model.eval()
    restored = pickle.loads(pickle.dumps(model))
    assert type(restored) is Tied and not restored.training and not restored.body[1].training
    assert restored.out.weight is restored.embed.weight
    assert all(type(p) is nn.Parameter and p.requires_grad for p in restored.parameters())
    assert list(restored.state_dict()) == list(model.state_dict())
    for key, value in model.state_dict().items():
        np.testing.assert_array_equal(restored.state_dict()[key].numpy(), value.numpy())
    idx = pl.tensor([0, 5, 2])
    np.testing.assert_array_equal(restored(idx).numpy(), model(idx).numpy())
    p = pickle.loads(pickle.dumps(nn.Parameter(pl.ones(2), requires_grad=False)))
    assert type(p) is nn.Parameter and not p.requires_grad


# -- init ---------------------------------------------------------------------------------------
def _fans(shape: tuple[int, ...]) -> tuple[int, int]:
    receptive = math.prod(shape[2:])
    return shape[1] * receptive, shape[0] * receptive


BIG = (400, 250)  # 100 000 draws: the sample std is within 0.5% (1 sigma 0.22%) of the truth


def _std_close(values: np.ndarray, std: float, mean: float = 0.0) -> None:
    assert abs(values.mean() - mean) < 0.02 * std  # 1 sigma of the mean: 0.003 std
    assert abs(values.std() / std - 1) < 0.02  # 1 sigma: 0.0022 (normal), 0.0016 (uniform)


@pytest.mark.parametrize("shape", [(400, 250), (50, 40, 5, 10)])
def test_kaiming_and_xavier_bounds_and_stds(shape: tuple[int, ...]) -> None:
    pl.manual_seed(0)
    fan_in, fan_out = _fans(shape)
    w = pl.empty(*shape, dtype=pl.float64)
    gain = math.sqrt(2.0)  # relu
    bound = gain * math.sqrt(3.0 / fan_in)
    values = init.kaiming_uniform_(w, nonlinearity="relu").numpy()
    assert np.abs(values).max() <= bound and np.abs(values).max() > 0.99 * bound
    _std_close(values, bound / math.sqrt(3))
    values = init.kaiming_normal_(w, mode="fan_out", nonlinearity="relu").numpy()
    _std_close(values, gain / math.sqrt(fan_out))
    values = init.kaiming_uniform_(w, a=math.sqrt(5)).numpy()
    assert np.abs(values).max() <= 1 / math.sqrt(fan_in)
    values = init.kaiming_normal_(w, a=0.2, nonlinearity="leaky_relu").numpy()
    _std_close(values, math.sqrt(2 / (1 + 0.04)) / math.sqrt(fan_in))
    bound = 1.5 * math.sqrt(6.0 / (fan_in + fan_out))
    values = init.xavier_uniform_(w, gain=1.5).numpy()
    assert np.abs(values).max() <= bound and np.abs(values).max() > 0.99 * bound
    _std_close(values, bound / math.sqrt(3))
    values = init.xavier_normal_(w).numpy()
    _std_close(values, math.sqrt(2.0 / (fan_in + fan_out)))


def test_uniform_normal_trunc_normal_and_constants(device: str) -> None:
    pl.manual_seed(1)
    w = pl.empty(*BIG, device=device)
    assert init.uniform_(w, -2.0, 3.0) is w
    values = w.numpy()
    assert values.min() >= -2.0 and values.max() <= 3.0 and w.device == device
    _std_close(values, 5 / math.sqrt(12), mean=0.5)
    _std_close(init.normal_(w, 1.0, 0.5).numpy(), 0.5, mean=1.0)
    values = init.trunc_normal_(w, mean=0.5, std=1.0, a=-1.0, b=1.5).numpy()
    assert values.min() >= -1.0 and values.max() <= 1.5 and w.device == device
    # N(0.5, 1) truncated to [-1.5, 1] std-units: the truncated normal's moments
    alpha, beta = -1.5, 1.0
    phi = [math.exp(-v * v / 2) / math.sqrt(2 * math.pi) for v in (alpha, beta)]
    z = 0.5 * (math.erf(beta / math.sqrt(2)) - math.erf(alpha / math.sqrt(2)))
    mean = 0.5 + (phi[0] - phi[1]) / z
    var = 1 + (alpha * phi[0] - beta * phi[1]) / z - ((phi[0] - phi[1]) / z) ** 2
    _std_close(values, math.sqrt(var), mean=mean)
    assert (init.constant_(w, 0.25).numpy() == 0.25).all()
    assert not init.zeros_(w).numpy().any() and (init.ones_(w).numpy() == 1).all()
    eye = init.eye_(pl.empty(3, 4, device=device)).numpy()
    np.testing.assert_array_equal(eye, np.eye(3, 4))
    ints = pl.zeros(3, dtype=pl.int64)
    assert (init.constant_(ints, 2).numpy() == 2).all()
    with pytest.raises(TypeError, match="uniform_: expected a floating tensor, got int64"):
        init.uniform_(ints)
    with pytest.raises(ValueError, match="eye_: expected a 2-d tensor"):
        init.eye_(pl.empty(3))


def test_init_does_not_record_gradients_and_keeps_the_parameter() -> None:
    p = nn.Parameter(pl.zeros(3, 4))
    assert init.normal_(p) is p
    assert p.is_leaf and p.requires_grad and p.grad_fn is None and type(p) is nn.Parameter


def test_init_seeding_reproduces() -> None:
    draws = []
    for _ in range(2):
        pl.manual_seed(42)
        w = pl.empty(20, 30)
        draws.append(
            [
                init.kaiming_uniform_(w).numpy().copy(),
                init.normal_(w).numpy().copy(),
                init.trunc_normal_(w).numpy().copy(),
                nn.Linear(4, 3).weight.numpy(),
            ]
        )
    for first, second in zip(*draws):
        np.testing.assert_array_equal(first, second)
    assert not np.array_equal(draws[0][0], draws[0][1])
    fills = [
        init.uniform_,
        init.normal_,
        init.trunc_normal_,
        init.kaiming_uniform_,
        init.kaiming_normal_,
        init.xavier_uniform_,
        init.xavier_normal_,
    ]
    for fill in fills:  # torch's generator= argument: a generator of one's own
        first = fill(pl.empty(5, 6), generator=pl.Generator().manual_seed(9)).numpy().copy()
        pl.manual_seed(1)  # the default generator plays no part
        second = fill(pl.empty(5, 6), generator=pl.Generator().manual_seed(9)).numpy()
        np.testing.assert_array_equal(first, second, err_msg=fill.__name__)


@pytest.mark.parametrize("shape", [(3, 5), (6, 4, 3), (8, 2, 3, 5), (2, 3, 1, 4, 5), (0, 4)])
def test_fans_match_torch(torch: ModuleType, shape: tuple[int, ...]) -> None:
    expected = torch.nn.init._calculate_fan_in_and_fan_out(torch.empty(shape))
    assert init._fans("test", pl.empty(*shape)) == expected
    w = pl.empty(*shape)
    for mode, fan in zip(("fan_in", "fan_out"), expected):
        init.kaiming_uniform_(w, mode=mode, nonlinearity="linear")  # bound sqrt(3 / fan)
        assert w.numel() == 0 or np.abs(w.numpy()).max() <= math.sqrt(3 / fan)


@pytest.mark.parametrize(
    "fill", [init.kaiming_uniform_, init.kaiming_normal_, init.xavier_uniform_, init.xavier_normal_]
)
def test_fans_need_two_dimensions(fill: Any) -> None:
    with pytest.raises(ValueError, match="need a tensor of 2 or more dimensions, got shape"):
        fill(pl.empty(5))


@pytest.mark.parametrize(
    ("nonlinearity", "param"),
    [
        ("linear", None),
        ("conv2d", None),
        ("conv_transpose3d", None),
        ("sigmoid", None),
        ("tanh", None),
        ("relu", None),
        ("leaky_relu", None),
        ("leaky_relu", 0.2),
        ("leaky_relu", 1),
        ("selu", None),
    ],
)
def test_calculate_gain_matches_torch(torch: ModuleType, nonlinearity: str, param: Any) -> None:
    expected = torch.nn.init.calculate_gain(nonlinearity, param)
    assert init.calculate_gain(nonlinearity, param) == pytest.approx(expected, rel=1e-15)


def test_calculate_gain_errors() -> None:
    with pytest.raises(ValueError, match="unsupported nonlinearity 'swish'"):
        init.calculate_gain("swish")
    with pytest.raises(ValueError, match="negative_slope True is not a number"):
        init.calculate_gain("leaky_relu", True)
    with pytest.raises(ValueError, match="mode must be 'fan_in' or 'fan_out'"):
        init.kaiming_uniform_(pl.empty(2, 2), mode="fan_avg")


@pytest.mark.parametrize(
    "build",
    [
        lambda: nn.Linear(50, 40),
        lambda: nn.Conv1d(6, 8, 5),
        lambda: nn.Conv2d(6, 8, 3, groups=2),
    ],
)
def test_default_init_is_within_one_over_sqrt_fan_in(build: Any) -> None:
    pl.manual_seed(3)
    layer = build()
    fan_in = math.prod(layer.weight.shape[1:])
    bound = 1 / math.sqrt(fan_in)
    for param in (layer.weight, layer.bias):
        values = param.numpy()
        assert np.abs(values).max() <= bound
        assert np.abs(values).max() > 0.5 * bound  # drawn, not left at zero
    # kaiming_uniform_(a=sqrt(5)): U(-1/sqrt(fan_in), 1/sqrt(fan_in)), std bound / sqrt(3)
    weights = layer.weight.numpy()
    assert abs(weights.std() / (bound / math.sqrt(3)) - 1) < 0.2  # >= 500 draws: 1 sigma 3%


def test_norm_layers_start_at_ones_and_zeros() -> None:
    bn, ln = nn.BatchNorm2d(3), nn.LayerNorm((2, 3))
    np.testing.assert_array_equal(bn.weight.numpy(), np.ones(3))
    np.testing.assert_array_equal(bn.bias.numpy(), np.zeros(3))
    np.testing.assert_array_equal(bn.running_var.numpy(), np.ones(3))
    np.testing.assert_array_equal(ln.weight.numpy(), np.ones((2, 3)))
    assert bn.num_batches_tracked.item() == 0


# -- utils ------------------------------------------------------------------------------------
def _gradients(lib: ModuleType, device: str = "cpu") -> list[Any]:
    """Three float64 parameters with fixed random gradients (torch's on the cpu)."""
    rng = np.random.default_rng(21)
    kind = {"device": device} if lib is pl else {}
    params = []
    for shape in [(3, 4), (5,), (2, 2, 3)]:
        p = lib.tensor(np.zeros(shape), requires_grad=True, **kind)
        p.grad = lib.tensor(rng.standard_normal(shape), **kind)
        params.append(p)
    return params


@pytest.mark.parametrize("norm_type", [2, 1, math.inf, 3, 2.5, 0.5, 0, -math.inf])
@pytest.mark.parametrize("max_norm", [0.5, 1e6])
def test_clip_grad_norm_matches_torch(
    torch: ModuleType, device: str, norm_type: float, max_norm: float
) -> None:
    ours, theirs = _gradients(pl, device), _gradients(torch)
    total = clip_grad_norm_(ours, max_norm, norm_type=norm_type)
    expected = torch.nn.utils.clip_grad_norm_(theirs, max_norm, norm_type=norm_type)
    assert total.shape == () and total.dtype is pl.float64 and total.device == device
    close(total, expected)
    for p, q in zip(ours, theirs):
        close(p.grad, q.grad)
        assert p.grad.device == device


def test_clip_grad_norm_edge_cases(torch: ModuleType) -> None:
    ours, theirs = _gradients(pl), _gradients(torch)
    close(clip_grad_norm_(ours[0], 0.1), torch.nn.utils.clip_grad_norm_(theirs[0], 0.1))
    close(ours[0].grad, theirs[0].grad)
    assert clip_grad_norm_([pl.zeros(2, requires_grad=True)], 1.0).item() == 0.0
    bad = _gradients(pl)
    bad[1].grad = pl.tensor([1.0, math.inf, 0.0, 0.0, 0.0], dtype=pl.float64)
    before = [p.grad.numpy().copy() for p in bad]
    with pytest.raises(RuntimeError, match="total norm of order 2.0 .* is inf"):
        clip_grad_norm_(bad, 1.0, error_if_nonfinite=True)
    for p, old in zip(bad, before):
        np.testing.assert_array_equal(p.grad.numpy(), old)  # nothing was clipped
    assert clip_grad_norm_(bad, 1.0).item() == math.inf


def test_clip_grad_value_matches_torch(torch: ModuleType, device: str) -> None:
    ours, theirs = _gradients(pl, device), _gradients(torch)
    assert clip_grad_value_(ours, 0.7) is None
    torch.nn.utils.clip_grad_value_(theirs, 0.7)
    for p, q in zip(ours, theirs):
        close(p.grad, q.grad)
        assert np.abs(p.grad.numpy()).max() <= 0.7
    with pytest.raises(ValueError, match="clip_value must be >= 0"):
        clip_grad_value_(ours, -1.0)


def test_parameters_to_vector_round_trip(torch: ModuleType, device: str) -> None:
    model = nested(pl).to(device)
    params = list(model.parameters())
    vec = parameters_to_vector(params)
    assert vec.shape == (sum(p.numel() for p in params),) and vec.device == device
    expected = torch.nn.utils.parameters_to_vector([torch.tensor(p.numpy()) for p in params])
    close(vec.double(), expected.double())
    vec.sum().backward()  # differentiable: every element gets a gradient of one
    assert all((p.grad.numpy() == 1).all() for p in params)
    target = nested(pl).to(device)
    vector_to_parameters(vec.detach(), target.parameters())
    for p, q in zip(params, target.parameters()):
        np.testing.assert_array_equal(p.numpy(), q.numpy())
        assert type(q) is nn.Parameter and q.requires_grad and q.is_leaf
    with pytest.raises(ValueError, match="the vector has 3 elements"):
        vector_to_parameters(pl.zeros(3, device=device), params)
    with pytest.raises(TypeError, match="expected a 1-d Tensor"):
        vector_to_parameters(pl.zeros(3, 1), params)
    with pytest.raises(ValueError, match="got no parameters"):
        parameters_to_vector([])
