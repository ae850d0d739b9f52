"""PyTorch's spellings run on pylucid as on PyTorch (the table pylucid.opinfo.torch_aliases):
the same line, called with ``lib = pylucid`` and ``lib = torch``, gives the same named tuples,
shapes, dtypes and values, and the same gradients, on both backends, in float32 and float64.
Also the dtype names, devices, the CUDA answers and the random ``*_like`` factories."""

from __future__ import annotations

import warnings
from types import ModuleType
from typing import Any

import numpy as np
import pytest

import pylucid as pl
from pylucid.opinfo.torch_aliases import ALIASES, AliasInfo
from tests.conftest import TORCH_REASON


@pytest.fixture(scope="module")
def torch() -> ModuleType:
    return pytest.importorskip("torch", reason=TORCH_REASON)


# float64: the same float64 arithmetic up to summation order; float32: a few ULP of products
# of 4 to 9 terms, and var's two passes (relative 1e-5 of values of magnitude ~5).
_TOLERANCES = {"float32": (1e-5, 1e-5), "float64": (1e-12, 1e-12)}


def _leaves(ours: Any, theirs: Any, torch: ModuleType, where: str) -> list[tuple[Any, Any]]:
    """The pairs of tensors in two results, after checking that their structure matches:
    the same named-tuple type and fields, the same tuple lengths, equal Python values."""
    if isinstance(theirs, tuple):
        assert isinstance(ours, tuple) and len(ours) == len(theirs), where
        if hasattr(theirs, "_fields"):
            assert type(ours).__name__ == type(theirs).__name__, where
            assert ours._fields == theirs._fields, where
        pairs = []
        for i, (o, t) in enumerate(zip(ours, theirs)):
            pairs += _leaves(o, t, torch, f"{where}[{i}]")
        return pairs
    if isinstance(theirs, torch.Tensor):
        assert isinstance(ours, pl.Tensor), f"{where}: {type(ours).__name__}, not a tensor"
        assert ours.shape == tuple(theirs.shape), where
        assert ours.dtype.name == str(theirs.dtype).removeprefix("torch."), where
        return [(ours, theirs)]
    assert ours == theirs, f"{where}: {ours!r} != {theirs!r}"
    return []


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("info", ALIASES, ids=[a.name for a in ALIASES])
def test_spelling_matches_torch(
    info: AliasInfo, dtype: str, device: str, rng: np.random.Generator, torch: ModuleType
) -> None:
    arrays = [sample(rng, shape) for sample, shape in zip(info.samplers, info.shapes)]
    ours_in = [
        pl.tensor(a, dtype=dtype, device=device, requires_grad=info.grad) for a in arrays
    ]
    theirs_in = [
        torch.tensor(a, dtype=getattr(torch, dtype), requires_grad=info.grad) for a in arrays
    ]
    pairs = _leaves(info.call(pl, *ours_in), info.call(torch, *theirs_in), torch, info.name)
    rtol, atol = _TOLERANCES[dtype]
    for ours, theirs in pairs:
        if ours.dtype.is_floating_point:
            np.testing.assert_allclose(
                ours.numpy().astype(np.float64), theirs.detach().double().numpy(), rtol, atol
            )
        elif info.indices:
            np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
    if not info.grad:
        return
    floating = [(o, t) for o, t in pairs if o.dtype.is_floating_point and t.requires_grad]
    upstream = [rng.standard_normal(o.shape) for o, _ in floating]
    pl.graph.backward(
        [o for o, _ in floating], [pl.tensor(u, dtype=dtype, device=device) for u in upstream]
    )
    torch.autograd.backward(
        [t for _, t in floating], [torch.tensor(u, dtype=getattr(torch, dtype)) for u in upstream]
    )
    for ours, theirs in zip(ours_in, theirs_in):
        if theirs.grad is None:
            assert ours.grad is None or not ours.grad.numpy().any()
            continue
        np.testing.assert_allclose(
            ours.grad.numpy().astype(np.float64), theirs.grad.double().numpy(), rtol, atol
        )


def test_value_selecting_gradients_pass_gradcheck(device: str) -> None:
    """float64 central differences agree with the gradients of the selections (no ties)."""
    x = pl.tensor(np.random.default_rng(3).permutation(20).reshape(4, 5) * 1.0, dtype=pl.float64,
                  device=device, requires_grad=True)  # fmt: skip
    for fn in (
        lambda t: pl.max(t, 1).values,
        lambda t: pl.median(t, 0).values,
        lambda t: pl.kthvalue(t, 3, 1).values,
        lambda t: pl.cummin(t, 1).values,
        lambda t: pl.var_mean(t, 1)[0] * pl.var_mean(t, 1)[1],
    ):
        assert pl.graph.gradcheck(fn, [x])


def test_dtype_names_are_torchs(torch: ModuleType) -> None:
    for name in ("long", "int", "float", "double", "half", "bool", "bfloat16", "float16",
                 "float32", "float64", "int32", "int64"):  # fmt: skip
        assert getattr(pl, name).name == str(getattr(torch, name)).removeprefix("torch."), name
    assert pl.get_default_dtype() is pl.float32
    assert pl.tensor([1], dtype=float).dtype.name == str(torch.tensor([1], dtype=float).dtype)[6:]


def test_missing_dtypes_say_what_to_use() -> None:
    for name in ("uint8", "int8", "int16", "complex64", "cfloat"):
        with pytest.raises(AttributeError, match=f"no attribute '{name}': pylucid has no"):
            getattr(pl, name)
    with pytest.raises(AttributeError, match="^module 'pylucid' has no attribute 'nope'$"):
        pl.nope  # noqa: B018


def test_set_default_dtype_changes_every_default() -> None:
    pl.set_default_dtype(pl.float64)
    try:
        made = [pl.tensor([1.5]), pl.zeros(2), pl.ones(1), pl.rand(2), pl.randn(2), pl.eye(2),
                pl.arange(0.0, 1.0, 0.5), pl.full((1,), 2.5), pl.tensor([1, 2]) * 0.5,
                pl.log2(pl.tensor([1, 2])), pl.Tensor([1, 2])]  # fmt: skip
        assert [t.dtype for t in made] == [pl.float64] * len(made)
        assert pl.get_default_dtype() is pl.float64
    finally:
        pl.set_default_dtype(pl.float32)
    assert (pl.tensor([1, 2]) * 0.5).dtype is pl.float32  # (the lifted-number cache emptied)
    assert pl.log2(pl.tensor([1, 2])).dtype is pl.float32  # (the dispatch plans emptied)
    with pytest.raises(TypeError, match="only floating-point"):
        pl.set_default_dtype(pl.int64)


def test_finfo_and_iinfo_are_torchs(torch: ModuleType) -> None:
    for name in ("float16", "bfloat16", "float32", "float64"):
        ours, theirs = pl.finfo(getattr(pl, name)), torch.finfo(getattr(torch, name))
        assert (float(ours.eps), float(ours.max), float(ours.tiny)) == (
            theirs.eps, theirs.max, theirs.tiny)  # fmt: skip
    assert pl.iinfo(pl.int64).max == torch.iinfo(torch.int64).max
    with pytest.raises(TypeError, match="iinfo"):
        pl.finfo(pl.int32)


def test_device_objects(torch: ModuleType) -> None:
    d = pl.device("cpu")
    assert d == "cpu" and d.type == "cpu" and d.index is None
    assert repr(d) == repr(torch.device("cpu"))
    assert str(pl.device("cuda", 1)) == str(torch.device("cuda", 1)) == "cuda:1"
    assert pl.device("cuda:1").index == 1 and pl.device(d) is d
    x = pl.ones(2, device=pl.device("cpu"))
    assert x.device == "cpu" and x.device.type == "cpu" and isinstance(x.device, pl.device)
    assert x.to(pl.device("cpu")) is x and x.cpu() is x and not x.is_cuda and x.is_cpu
    with pytest.raises(RuntimeError, match="no cuda device.*use device='gpu'"):
        pl.ones(2, device="cuda")
    with pytest.raises(RuntimeError, match="no cuda device"):
        x.cuda()
    with pytest.raises(RuntimeError, match="no mps device"):
        x.to("mps")
    with pytest.raises(ValueError, match="unknown device type 'tpu'"):
        pl.device("tpu")


def test_cuda_answers_as_on_a_machine_without_cuda() -> None:
    assert pl.cuda.is_available() is False and pl.cuda.device_count() == 0
    assert pl.cuda.is_bf16_supported() is False
    pl.cuda.manual_seed(0)
    pl.cuda.manual_seed_all(0)
    pl.cuda.synchronize()
    pl.cuda.empty_cache()
    assert pl.mps.device_count() == 0 and not pl.backends.mps.is_available()
    with pytest.raises(NotImplementedError, match="torch.cuda.get_device_name"):
        pl.cuda.get_device_name()
    pl.backends.cudnn.benchmark = True
    pl.backends.cudnn.deterministic = True
    pl.backends.cuda.matmul.allow_tf32 = True
    assert pl.backends.cudnn.benchmark and pl.backends.cuda.matmul.allow_tf32
    pl.set_float32_matmul_precision("high")
    assert pl.get_float32_matmul_precision() == "high"
    pl.set_float32_matmul_precision("highest")
    with pytest.raises(ValueError, match="expected one of"):
        pl.set_float32_matmul_precision("low")


def test_autocast_and_scaler_signatures() -> None:
    with pl.autocast("cpu", dtype=pl.float16):
        assert pl.amp.autocast_dtype() is pl.float16
    with pl.autocast(device_type="cpu"):
        assert pl.amp.autocast_dtype() is pl.bfloat16
    with pytest.warns(UserWarning, match="autocast is disabled"), pl.autocast("cuda"):
        assert pl.amp.autocast_dtype() is None
    with pytest.raises(TypeError, match="first argument is the device type"):
        pl.autocast(pl.float16)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert not pl.amp.GradScaler(enabled=False).is_enabled()
        assert not pl.cuda.amp.GradScaler(enabled=False).is_enabled()
        assert pl.amp.GradScaler("cpu").is_enabled()
    with pytest.warns(UserWarning, match="scaler is disabled"):
        scaler = pl.cuda.amp.GradScaler()
    assert scaler.scale(pl.tensor(2.0)).item() == 2.0 and scaler.state_dict() == {}


def test_random_like_factories_keep_shape_dtype_device() -> None:
    x = pl.zeros(3, 2, dtype=pl.float64)
    for made in (pl.rand_like(x), pl.randn_like(x), pl.randint_like(x, 5),
                 pl.randint_like(x, 2, 5)):  # fmt: skip
        assert made.shape == (3, 2) and made.dtype is pl.float64 and made.device == "cpu"
    assert 2 <= pl.randint_like(x, 2, 5).numpy().min() and pl.randint_like(x, 5).numpy().max() < 5


def test_legacy_constructors(torch: ModuleType) -> None:
    for name in ("FloatTensor", "LongTensor", "DoubleTensor", "IntTensor", "BoolTensor"):
        ours, theirs = getattr(pl, name)([1, 0]), getattr(torch, name)([1, 0])
        assert ours.dtype.name == str(theirs.dtype)[6:] and ours.tolist() == theirs.tolist()
        assert isinstance(ours, getattr(pl, name)) and ours.type() == theirs.type()
    assert pl.Tensor([1, 2]).dtype is pl.float32 and pl.Tensor(2, 3).shape == (2, 3)
    assert isinstance(pl.Tensor([1.0]), pl.Tensor) and not isinstance(pl.ones(1), pl.LongTensor)
    assert pl.tensor([1.0]).type(pl.LongTensor).dtype is pl.int64
    with pytest.raises(AttributeError, match="ByteTensor.*no uint8"):
        pl.ByteTensor  # noqa: B018


def test_strides_and_addresses_of_views() -> None:
    """The numba backend's views have NumPy's strides, in elements, as PyTorch's."""
    x = pl.ones(3, 4)
    assert x.stride() == (4, 1) and x.t().stride() == (1, 4) and x[:, 1:].stride(-1) == 1
    assert x[0].data_ptr() == x.data_ptr() and x[1].data_ptr() == x.data_ptr() + 16
    assert not x.t().is_contiguous() and x.t().contiguous().is_contiguous()


def test_index_and_format_protocols() -> None:
    data = list(range(10))
    i = pl.tensor(3)
    assert data[i : i + 2] == [3, 4] and f"{pl.tensor(3.14159):.2f}" == "3.14"
    values = pl.arange(10)
    assert values[i : i + 2].tolist() == [3, 4]  # (tensor slice bounds: gpt.py's get_batch)
    assert values[pl.tensor([1])[0] :].shape == (9,)
    assert f"{pl.tensor([1.0, 2.0])}" == str(pl.tensor([1.0, 2.0]))
    with pytest.raises(TypeError, match="only integer tensors of a single element"):
        data[pl.tensor(1.0)]


def test_grad_modes_decorate_with_and_without_parentheses() -> None:
    x = pl.ones(2, requires_grad=True)

    @pl.no_grad
    def bare(t: pl.Tensor) -> pl.Tensor:
        return t * 2

    @pl.inference_mode()
    def called(t: pl.Tensor) -> pl.Tensor:
        return t * 2

    assert not bare(x).requires_grad and called(x).is_inference()
    with pl.inference_mode(False):
        assert (x * 2).requires_grad


def test_view_as_a_dtype_says_what_to_write() -> None:
    with pytest.raises(NotImplementedError, match=r"x.to\(pylucid.float16\)"):
        pl.ones(2).view(pl.float16)


def test_multinomial_draws_in_proportion() -> None:
    gen = pl.Generator().manual_seed(0)
    weights = pl.tensor([[1.0, 0.0, 3.0], [0.0, 5.0, 5.0]])
    drawn = pl.multinomial(weights, 4000, replacement=True, generator=gen).numpy()
    assert drawn.shape == (2, 4000) and drawn.dtype == np.int64
    assert abs((drawn[0] == 2).mean() - 0.75) < 0.03 and not (drawn[0] == 1).any()
    assert abs((drawn[1] == 1).mean() - 0.5) < 0.03 and not (drawn[1] == 0).any()
    once = pl.multinomial(pl.tensor([1.0, 1.0, 2.0, 0.0]), 3, generator=gen).numpy()
    assert sorted(once) == [0, 1, 2]  # without replacement: each category at most once
    first = [pl.multinomial(pl.tensor([1.0, 2.0, 7.0]), 1, generator=gen).item()
             for _ in range(3000)]  # fmt: skip
    assert abs(np.mean(np.array(first) == 2) - 0.7) < 0.03
    again = pl.multinomial(weights, 5, True, generator=pl.Generator().manual_seed(0))
    assert (again.numpy() == pl.multinomial(weights, 5, True,
            generator=pl.Generator().manual_seed(0)).numpy()).all()  # fmt: skip
    with pytest.raises(ValueError, match="without replacement"):
        pl.multinomial(pl.tensor([1.0, 0.0]), 2)
    with pytest.raises(ValueError, match="sums to zero"):
        pl.multinomial(pl.tensor([0.0, 0.0]), 1, True)
    with pytest.raises(ValueError, match="non-negative"):
        pl.multinomial(pl.tensor([-1.0, 2.0]), 1)


def test_in_place_random_fills() -> None:
    gen = pl.Generator().manual_seed(1)
    x = pl.zeros(20000, dtype=pl.float64)
    assert abs(x.normal_(2.0, 3.0, generator=gen).numpy().std() - 3.0) < 0.1
    values = x.uniform_(-1, 1, generator=gen).numpy()
    assert values.min() >= -1 and values.max() < 1 and abs(values.mean()) < 0.05
    w = pl.zeros(3, requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf tensor that requires grad"):
        w.normal_()
    with pl.no_grad():
        w.uniform_()
    assert w.numpy().any()


def test_namespaces_programs_reach_for(torch: ModuleType) -> None:
    """torch.autograd, torch.accelerator, torch.linalg, torch.testing, torch.version and the
    constants, as a program without CUDA sees them."""
    x = pl.ones(2)
    v = pl.autograd.Variable(x, requires_grad=True)
    assert v.requires_grad and v.is_leaf and not x.requires_grad and v.data_ptr() == x.data_ptr()
    (g,) = pl.autograd.grad((v * v).sum(), [v])
    assert g.tolist() == [2.0, 2.0]
    assert pl.autograd.functional.jacobian(lambda t: t * 3, x).numpy().tolist() == [[3, 0], [0, 3]]
    with pl.autograd.set_detect_anomaly(True):
        assert pl.graph.is_anomaly_enabled()
    assert not pl.graph.is_anomaly_enabled()
    with pl.autograd.profiler.record_function("block"):
        pass
    with pytest.raises(NotImplementedError, match="profiler"):
        pl.autograd.profiler.profile()
    assert not pl.accelerator.is_available() and pl.accelerator.current_accelerator() is None
    assert (pl.pi, pl.e, pl.inf) == (torch.pi, torch.e, torch.inf) and pl.version.cuda is None
    pl.testing.assert_close(pl.tensor([1.0, 2.0]), pl.tensor([1.0, 2.0 + 1e-7]))
    with pytest.raises(AssertionError):
        pl.testing.assert_close(pl.tensor([1.0]), pl.tensor([1.1]))
    with pytest.raises(AttributeError, match="no matrix decompositions"):
        pl.linalg.eigh  # noqa: B018
    for name in ("FloatTensor", "LongTensor"):
        with pytest.raises(AttributeError, match=f"for the CPU use pylucid.{name}"):
            getattr(pl.cuda, name)
    for stand_in in (pl.cuda.Event, pl.cuda.max_memory_allocated, pl.cuda.set_device):
        with pytest.raises(NotImplementedError, match="no CUDA device"):
            stand_in()
    y = pl.ones(1, 3, 4, 4)
    assert y.to(memory_format=pl.channels_last) is y
    assert y.contiguous(memory_format=pl.contiguous_format) is y


def test_random_fill_of_integers_and_detach_() -> None:
    x = pl.zeros(1000, dtype=pl.int64).random_(3, 7, generator=pl.Generator().manual_seed(2))
    assert set(x.tolist()) == {3, 4, 5, 6}
    y = pl.ones(2, requires_grad=True) * 2
    assert y.detach_() is y and not y.requires_grad and y.grad_fn is None


@pytest.mark.parametrize(
    "name", ["relu", "silu", "elu", "leaky_relu", "hardtanh", "relu6", "hardsigmoid",
             "hardswish", "mish"],  # fmt: skip
)
def test_inplace_true_changes_the_input_as_torchs_does(
    name: str, device: str, rng: np.random.Generator, torch: ModuleType
) -> None:
    """F.<act>(x, inplace=True) whose result is ignored: the program reads x afterwards, so
    x must hold the activation (a new tensor would leave it silently unchanged), and the
    gradient flows through it, as in PyTorch."""
    values = rng.uniform(-5, 5, size=(3, 4))
    results = []
    for lib, make in ((pl, lambda v: pl.tensor(v, device=device, requires_grad=True)),
                      (torch, lambda v: torch.tensor(v, requires_grad=True))):  # fmt: skip
        leaf = make(values)
        hidden = leaf * 2
        getattr(lib.nn.functional, name)(hidden, inplace=True)
        (hidden * hidden).sum().backward()
        results.append((hidden.detach().numpy(), leaf.grad.numpy()))
    (ours, our_grad), (theirs, their_grad) = results
    np.testing.assert_allclose(ours, theirs, rtol=1e-12, atol=1e-12)
    # (PyTorch's float64 hardsigmoid gradient multiplies by float32(1/6): 1e-8 off g/6)
    rtol = 1e-7 if name == "hardsigmoid" else 1e-12
    np.testing.assert_allclose(our_grad, their_grad, rtol=rtol, atol=rtol)
    module = {"relu": "ReLU", "hardswish": "Hardswish", "leaky_relu": "LeakyReLU"}.get(name)
    if module is not None:
        x = pl.tensor(values, device=device)
        expected = getattr(pl.nn.functional, name)(x).numpy().copy()
        getattr(pl.nn, module)(inplace=True)(x)
        np.testing.assert_array_equal(x.numpy(), expected)
