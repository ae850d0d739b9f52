"""Zero-size inputs against PyTorch: every op of the op database, every PyTorch spelling of
:mod:`pylucid.opinfo.torch_aliases`, the ``nn`` layers and the ``nn.functional`` functions
without a layer, on both backends.

Each case gives its inputs a 0 in the batch dimension (the first axis of the inputs'
broadcast frame) and, as a second case, in the last axis (an empty feature, channel or
reduced axis), or has its own zero-size shapes where the inputs do not broadcast together
(:data:`OP_SHAPES`, :data:`ALIAS_SHAPES`). It is run with pylucid and with PyTorch, in
float32:

- where PyTorch returns, pylucid returns the same structure (tuples, named tuples), every
  output's shape and dtype and values (an empty tensor; the sum of nothing, 0; the mean of
  nothing, nan ...), and backward of the floating outputs (upstream gradient of ones) gives
  every input and parameter the gradient PyTorch gives (empty gradients of the inputs'
  shapes; zeros of a parameter's shape);
- where PyTorch raises, pylucid raises a clear error of its own (:func:`assert_clear`): the
  op's name first and the shapes it refused, not a NumPy, Numba or MLX message.

Where PyTorch itself fails on a zero-size input - its backward of ``pixel_shuffle`` returns a
gradient of the wrong shape, its affine ``instance_norm`` indexes an empty batch - pylucid
gives what the math gives (empty outputs, empty gradients, zeros for the parameters), and
the case says so.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import numpy as np
import pytest

import pylucid as pl
from pylucid.opinfo import OPS, OpInfo
from pylucid.opinfo.torch_aliases import ALIASES, AliasInfo
from tests.conftest import MLX_MISSING, TORCH_REASON

torch = pytest.importorskip("torch", reason=TORCH_REASON)

pytestmark = pytest.mark.filterwarnings(
    "ignore::UserWarning", "ignore::RuntimeWarning", "ignore::FutureWarning"
)

Shapes = tuple[tuple[int, ...], ...]

#: Zero-size shapes of the records whose inputs do not share one broadcast frame.
OP_SHAPES: dict[str, tuple[Shapes, ...]] = {
    "matmul": (
        ((0,), (0,)),  # an empty dot product: 0
        ((0, 3), (3, 4)),
        ((2, 0), (0, 4)),  # an empty inner dimension: zeros
        ((2, 3), (3, 0)),
        ((0, 2, 3), (3, 4)),
        ((5, 0, 3), (3, 4)),
        ((3,), (0, 3, 4)),
        ((2, 0, 4), (4,)),
        ((2, 1, 2, 3), (0, 3, 2)),
    ),
    "conv2d": (
        ((0, 4, 5, 6), (6, 2, 3, 2)),
        ((0, 3, 4, 4), (2, 3, 2, 2)),
        ((2, 4, 5, 6), (0, 2, 3, 2)),  # no output channels
        ((2, 3, 0, 4), (2, 3, 2, 2)),  # an empty image
        ((2, 0, 5, 6), (6, 0, 3, 2)),  # no input channels: zeros
    ),
    "concatenate": (((0, 3), (0, 1), (0, 4)), ((2, 0), (2, 1), (2, 0)), ((0,), (1,), (0,))),
    "setitem": (((0, 4), (3,)), ((0, 4), (0, 1)), ((2, 0, 4), (1, 1, 3, 3))),
}


def _frame(shapes: Shapes) -> tuple[int, ...] | None:
    try:
        return tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        return None


def zeroed(shapes: Shapes, axis: int) -> Shapes | None:
    """``shapes`` with axis ``axis`` of their broadcast frame made 0 (in every input that
    spans it), or None where they have no frame (0-d, or not broadcastable)."""
    frame = _frame(shapes)
    if not frame:
        return None
    k = axis % len(frame)
    out = []
    for shape in shapes:
        j = k - (len(frame) - len(shape))
        spans = j >= 0 and shape[j] == frame[k]
        out.append(shape[:j] + (0,) + shape[j + 1 :] if spans else shape)
    return tuple(out)


def zero_size_shapes(name: str, shapes: Sequence[Shapes]) -> list[Shapes]:
    """The zero-size shapes of a record: its own (:data:`OP_SHAPES`), or each of its shapes
    with the batch axis, then the last axis, made 0."""
    if name in OP_SHAPES:
        return list(OP_SHAPES[name])
    found: list[Shapes] = []
    for combo in shapes:
        for axis in (0, -1):
            z = zeroed(combo, axis)
            if z is not None and z not in found:
                found.append(z)
    return found


# -- running one case with both libraries ------------------------------------------------------
#: Messages that are not pylucid's own: NumPy's, Numba's, MLX's internals.
_INTERNAL = re.compile(
    r"cannot reshape array|zero-size array|^\[\w+\]|numba|mlx|NoneType|has no attribute"
    r"|division by zero|out of bounds for axis|list index|tuple index",
    re.IGNORECASE,
)
#: pylucid's clear errors: ``op: ...`` naming a shape or a size.
_CLEAR = re.compile(
    r"^[\w.]+(\(\))?: .*(\(\d*(, \d+)*,?\)|size|empty|no element|\d+ elements)", re.DOTALL
)


def assert_clear(error: BaseException, label: str) -> None:
    """A pylucid error raised where PyTorch raises too: one of Python's (ValueError,
    IndexError, RuntimeError, TypeError, NotImplementedError), whose message names the op
    first and then the shape or size it refused, not an internal message of NumPy, Numba or
    MLX."""
    message = str(error)
    assert isinstance(
        error, (ValueError, IndexError, RuntimeError, TypeError, NotImplementedError)
    ), f"{label}: {type(error).__module__}.{type(error).__name__}: {message}"
    assert not _INTERNAL.search(message), f"{label}: internal message: {message}"
    assert _CLEAR.search(message), f"{label}: unclear message: {message}"


def _leaves(ours: Any, theirs: Any, where: str) -> list[tuple[pl.Tensor, Any]]:
    """The pairs of tensors of two results, after checking that their structure matches."""
    if isinstance(theirs, (tuple, list)):
        assert isinstance(ours, (tuple, list)) and len(ours) == len(theirs), where
        if hasattr(theirs, "_fields"):
            assert ours._fields == theirs._fields, where
        pairs = []
        for i, (o, t) in enumerate(zip(ours, theirs)):
            pairs += _leaves(o, t, f"{where}[{i}]")
        return pairs
    if isinstance(theirs, torch.Tensor):
        assert isinstance(ours, pl.Tensor), f"{where}: {type(ours).__name__}, not a tensor"
        return [(ours, theirs)]
    if theirs is None:
        assert ours is None, where
        return []
    assert ours == theirs or (ours != ours and theirs != theirs), f"{where}: {ours} != {theirs}"
    return []


def _floating(pairs: list[tuple[pl.Tensor, Any]]) -> list[tuple[pl.Tensor, Any]]:
    return [(o, t) for o, t in pairs if t.requires_grad and t.dtype.is_floating_point]


def run(
    label: str,
    ours: Callable[[], Any],
    theirs: Callable[[], Any],
    our_leaves: list[pl.Tensor],
    their_leaves: list[Any],
    device: str,
) -> None:
    """Run one case with both libraries and compare (see the module docstring).

    ``ours`` / ``theirs`` make the call; ``our_leaves`` / ``their_leaves`` are the tensors
    whose gradients are compared (inputs, then parameters) after it."""
    try:
        expected = theirs()
    except Exception as error:  # noqa: BLE001  (PyTorch refuses: pylucid must too, clearly)
        with pytest.raises(Exception) as raised:  # noqa: PT011
            ours()
        assert_clear(raised.value, f"{label} (PyTorch: {type(error).__name__}: {error})")
        return
    got = ours()
    pairs = _leaves(got, expected, label)
    for o, t in pairs:
        assert o.shape == tuple(t.shape), f"{label}: shape {o.shape}, PyTorch {tuple(t.shape)}"
        assert o.dtype.name == str(t.dtype).removeprefix("torch."), f"{label}: dtype {o.dtype}"
        assert o.device == device, f"{label}: on {o.device}"
        np.testing.assert_allclose(
            o.detach().numpy().astype(np.float64),
            t.detach().double().numpy(),
            rtol=1e-5,
            atol=1e-5,
            err_msg=label,
        )
    floating = _floating(pairs)
    if not floating:
        return
    pl.graph.backward(
        [o for o, _ in floating],
        [pl.ones(o.shape, dtype=o.dtype, device=device) for o, _ in floating],
    )
    compare_grads(label, our_leaves, torch_grads(floating, their_leaves), device)


def torch_grads(floating: list[tuple[pl.Tensor, Any]], leaves: list[Any]) -> list[Any]:
    """PyTorch's gradients of ``leaves`` after backward of the floating outputs (upstream
    gradient of ones); where its own backward fails on outputs without elements, the
    derivative of an empty output: zeros of each leaf's shape."""
    try:
        torch.autograd.backward([t for _, t in floating], [torch.ones_like(t) for _, t in floating])
    except RuntimeError:
        assert all(t.numel() == 0 for _, t in floating), "PyTorch's backward failed"
        return [torch.zeros_like(t) for t in leaves]
    return [t.grad for t in leaves]


def compare_grads(label: str, leaves: list[pl.Tensor], expected: list[Any], device: str) -> None:
    """The ``.grad`` of each of ``leaves`` is the ``expected`` one (a torch tensor, or None
    where PyTorch gives none: then pylucid gives none, or zeros)."""
    for k, (o, t) in enumerate(zip(leaves, expected)):
        if t is None:
            assert o.grad is None or not o.grad.numpy().any(), f"{label}: grad {k}"
            continue
        assert o.grad is not None, f"{label}: grad {k} is None, PyTorch's {tuple(t.shape)}"
        assert o.grad.shape == tuple(t.shape), f"{label}: grad {k} shape {o.grad.shape}"
        assert o.grad.device == device, f"{label}: grad {k} on {o.grad.device}"
        np.testing.assert_allclose(
            o.grad.numpy().astype(np.float64),
            t.double().numpy(),
            rtol=1e-5,
            atol=1e-5,
            err_msg=f"{label}: grad {k}",
        )


def _pair(arrays: list[np.ndarray], device: str, grad: bool = True) -> tuple[list, list]:
    ours = [pl.tensor(a, dtype=pl.float32, device=device, requires_grad=grad) for a in arrays]
    theirs = [torch.tensor(a, dtype=torch.float32, requires_grad=grad) for a in arrays]
    return ours, theirs


def _param(values: tuple[Any, ...], case_id: str) -> Any:
    """A parameter set named ``case_id``."""
    return pytest.param(*values, id=case_id)


# -- the op database ---------------------------------------------------------------------------
OP_CASES = [
    _param((info, shapes), f"{info.name}-{'x'.join(map(str, shapes))}")
    for info in OPS
    for shapes in zero_size_shapes(info.name, info.shapes)
]


#: Cases where PyTorch's result has another shape than the op's definition, by id: pylucid
#: gives the record's own NumPy reference (:attr:`OpInfo.reference`) there.
BY_DEFINITION: dict[str, str] = {
    "conv2d-(2, 0, 5, 6)x(6, 0, 3, 2)": (
        "a convolution of 0 input channels is zeros of (N, O, OH, OW); PyTorch's shortcut "
        "for empty inputs returns (N, 0, OH, OW), whatever the weight's O"
    ),
    "batch_norm-(5, 0)x(0,)x(0,)": (
        "batch normalisation of 0 channels is an empty (N, 0) result; PyTorch's affine "
        "batch_norm indexes the empty weight (IndexError)"
    ),
}


@pytest.mark.parametrize(("info", "shapes"), OP_CASES)
def test_op_zero_size_matches_torch(info: OpInfo, shapes: Shapes, device: str) -> None:
    if "needs_mlx" in info.tags and MLX_MISSING:
        pytest.skip("needs both backends; mlx is not installed")
    arrays = info.sample(np.random.default_rng(0), shapes)
    differentiable = pl.ops.get_schema(info.name).differentiable
    ours, theirs = _pair(arrays, device, grad=differentiable)
    if f"{info.name}-{'x'.join(map(str, shapes))}" in BY_DEFINITION:
        out = info.call(*ours)
        expected = info.reference(*arrays)
        assert out.shape == expected.shape
        np.testing.assert_array_equal(out.numpy(), expected.astype(np.float32))
        out.backward(pl.ones(out.shape, device=device))
        zeros = [torch.zeros_like(t) for t in theirs]
        compare_grads(f"{info.name}{shapes}", ours, zeros, device)
        return
    run(
        f"{info.name}{shapes}",
        lambda: info.call(*ours),
        lambda: info.torch(*theirs),
        ours,
        theirs,
        device,
    )


# -- PyTorch's spellings -----------------------------------------------------------------------
#: Zero-size shapes of the spellings whose inputs do not share one broadcast frame.
ALIAS_SHAPES: dict[str, tuple[Shapes, ...]] = {
    "mm(a, b)": (((0, 4), (4, 2)), ((3, 0), (0, 2))),
    "a.mm(b)": (((3, 4), (4, 0)),),
    "bmm(a, b)": (((0, 3, 4), (0, 4, 5)), ((2, 3, 0), (2, 0, 5))),
    "mv(a, v)": (((0, 4), (4,)), ((3, 0), (0,))),
    "outer(a, b)": (((0,), (3,)), ((4,), (0,))),
    "addmm(c, a, b, beta=0.5, alpha=2)": (((2,), (0, 4), (4, 2)), ((2,), (3, 0), (0, 2))),
    "baddbmm(c, a, b, alpha=0.5)": (((0, 3, 5), (0, 3, 4), (0, 4, 5)),),
    "x * 1 .index_add_(0, i, y, alpha=2)": (((4, 0), (3, 0)),),
    "index_add(x, 1, i, y)": (((0, 5), (0, 2)),),
}


def alias_shapes(info: AliasInfo) -> list[Shapes]:
    if info.name in ALIAS_SHAPES:
        return list(ALIAS_SHAPES[info.name])
    return zero_size_shapes(info.name, (info.shapes,))


#: Spellings left out: the strides of a tensor without elements describe no memory, and
#: PyTorch's differ by how the tensor was made ((5, 1) for ``torch.zeros(0, 5)``, (0, 0) for
#: ``torch.tensor(np.zeros((0, 5)))``).
LAYOUT_ONLY = frozenset({"x.stride(), x.stride(0)"})

ALIAS_CASES = [
    _param((info, shapes), f"{info.name}-{'x'.join(map(str, shapes))}")
    for info in ALIASES
    if info.name not in LAYOUT_ONLY
    for shapes in alias_shapes(info)
]


@pytest.mark.parametrize(("info", "shapes"), ALIAS_CASES)
def test_alias_zero_size_matches_torch(info: AliasInfo, shapes: Shapes, device: str) -> None:
    rng = np.random.default_rng(0)
    arrays = [sample(rng, shape) for sample, shape in zip(info.samplers, shapes)]
    ours, theirs = _pair(arrays, device, grad=info.grad)
    run(
        f"{info.name}{shapes}",
        lambda: info.call(pl, *ours),
        lambda: info.call(torch, *theirs),
        ours,
        theirs,
        device,
    )


# -- nn layers ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Layer:
    """One layer called on zero-size inputs.

    Attributes
    ----------
    build : callable
        ``build(lib)``: the module (``lib`` is pylucid or torch), in training mode unless
        ``train`` is False.
    inputs : tuple
        One ``(kind, shape)`` per argument: ``"real"`` (standard normal), ``"probability"``
        (in (0, 1)), ``"class"`` (indices below 4), ``"index"`` (below 10, for embeddings).
    train : bool
        Training mode (dropout on, batch norm on the batch's statistics).
    torch_fails : str
        Why PyTorch's forward fails where the math has an answer: then pylucid's output has
        the input's shape and its gradients are empty, the parameters' zeros.
    """

    build: Callable[[ModuleType], Any]
    inputs: tuple[tuple[str, tuple[int, ...]], ...]
    train: bool = True
    torch_fails: str = ""


def _values(kind: str, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    if kind == "real":
        return rng.standard_normal(shape)
    if kind == "probability":
        return rng.uniform(0.1, 0.9, shape)
    return rng.integers(0, 4 if kind == "class" else 10, shape)


def _real(*shapes: tuple[int, ...]) -> tuple[tuple[str, tuple[int, ...]], ...]:
    return tuple(("real", s) for s in shapes)


def _loss_layers() -> list[Any]:
    cases = []
    for reduction in ("none", "sum", "mean"):
        for name, kinds in (
            ("MSELoss", ("real", "real")),
            ("L1Loss", ("real", "real")),
            ("SmoothL1Loss", ("real", "real")),
            ("BCELoss", ("probability", "probability")),
            ("BCEWithLogitsLoss", ("real", "probability")),
        ):
            for shape in ((0, 4), (3, 0)):
                cases.append(
                    pytest.param(
                        Layer(
                            lambda lib, n=name, r=reduction: getattr(lib.nn, n)(reduction=r),
                            tuple((k, shape) for k in kinds),
                        ),
                        id=f"{name}-{reduction}-{shape}",
                    )
                )
        for name in ("NLLLoss", "CrossEntropyLoss"):
            cases.append(
                pytest.param(
                    Layer(
                        lambda lib, n=name, r=reduction: getattr(lib.nn, n)(reduction=r),
                        (("real", (0, 4)), ("class", (0,))),
                    ),
                    id=f"{name}-{reduction}-(0, 4)",
                )
            )
        # (pylucid's nll_loss takes (N, C) or (C,) only: the spatial case is cross entropy's)
        cases.append(
            pytest.param(
                Layer(
                    lambda lib, r=reduction: lib.nn.CrossEntropyLoss(reduction=r),
                    (("real", (2, 4, 0)), ("class", (2, 0))),
                ),
                id=f"CrossEntropyLoss-{reduction}-(2, 4, 0)",
            )
        )
        cases.append(
            pytest.param(
                Layer(
                    lambda lib, r=reduction: lib.nn.CrossEntropyLoss(
                        reduction=r, label_smoothing=0.1
                    ),
                    (("real", (0, 4)), ("probability", (0, 4))),
                ),
                id=f"CrossEntropyLoss-probabilities-{reduction}-(0, 4)",
            )
        )
    return cases


_LAYERS = [
    pytest.param(Layer(lambda lib: lib.nn.Linear(5, 3), _real((0, 5))), id="Linear-(0, 5)"),
    pytest.param(Layer(lambda lib: lib.nn.Linear(5, 3), _real((2, 0, 5))), id="Linear-(2, 0, 5)"),
    pytest.param(
        Layer(lambda lib: lib.nn.Linear(5, 3, bias=False), _real((0, 5))), id="Linear-nobias"
    ),
    pytest.param(
        Layer(lambda lib: lib.nn.Conv1d(3, 4, 3, stride=2, padding=1), _real((0, 3, 11))),
        id="Conv1d",
    ),
    pytest.param(
        Layer(
            lambda lib: lib.nn.Conv2d(4, 6, 3, stride=2, padding=1, dilation=2, groups=2),
            _real((0, 4, 9, 9)),
        ),
        id="Conv2d-groups",
    ),
    pytest.param(
        Layer(lambda lib: lib.nn.Conv2d(2, 3, 3, padding=1), _real((0, 2, 5, 6))), id="Conv2d"
    ),
    pytest.param(
        Layer(
            lambda lib: lib.nn.Conv2d(2, 3, 3, padding=1, padding_mode="reflect"),
            _real((0, 2, 5, 6)),
        ),
        id="Conv2d-reflect",
    ),
    pytest.param(
        Layer(lambda lib: lib.nn.Conv2d(2, 3, 3, padding=1), _real((2, 2, 0, 6))),
        id="Conv2d-empty-height",
    ),
    pytest.param(
        Layer(lambda lib: lib.nn.Conv3d(2, 3, 3, padding=1), _real((0, 2, 4, 4, 4))), id="Conv3d"
    ),
    pytest.param(
        Layer(lambda lib: lib.nn.ConvTranspose2d(4, 6, 3, stride=2, groups=2), _real((0, 4, 5, 5))),
        id="ConvTranspose2d",
    ),
    pytest.param(
        Layer(lambda lib: lib.nn.ConvTranspose1d(3, 2, 3, stride=2), _real((0, 3, 5))),
        id="ConvTranspose1d",
    ),
    pytest.param(Layer(lambda lib: lib.nn.MaxPool2d(2), _real((0, 3, 6, 7))), id="MaxPool2d"),
    pytest.param(
        Layer(lambda lib: lib.nn.MaxPool2d(3, 2, 1, dilation=2), _real((0, 3, 9, 8))),
        id="MaxPool2d-dilation",
    ),
    pytest.param(
        Layer(lambda lib: lib.nn.MaxPool2d(2, return_indices=True), _real((0, 3, 6, 7))),
        id="MaxPool2d-indices",
    ),
    pytest.param(
        Layer(lambda lib: lib.nn.MaxPool2d(2), _real((2, 0, 6, 7))), id="MaxPool2d-no-channels"
    ),
    pytest.param(Layer(lambda lib: lib.nn.AvgPool2d(2), _real((0, 3, 6, 7))), id="AvgPool2d"),
    pytest.param(
        Layer(lambda lib: lib.nn.AvgPool2d(3, 2, 1, count_include_pad=False), _real((0, 3, 7, 6))),
        id="AvgPool2d-exclude-pad",
    ),
    pytest.param(
        Layer(lambda lib: lib.nn.AdaptiveAvgPool2d((2, 3)), _real((0, 3, 7, 5))),
        id="AdaptiveAvgPool2d",
    ),
    pytest.param(
        Layer(lambda lib: lib.nn.AdaptiveAvgPool2d(1), _real((0, 3, 4, 5))),
        id="AdaptiveAvgPool2d-global",
    ),
    pytest.param(Layer(lambda lib: lib.nn.MaxPool1d(2), _real((0, 3, 7))), id="MaxPool1d"),
    pytest.param(Layer(lambda lib: lib.nn.AvgPool1d(3, 2, 1), _real((0, 3, 7))), id="AvgPool1d"),
    pytest.param(
        Layer(lambda lib: lib.nn.AdaptiveAvgPool1d(3), _real((0, 3, 7))), id="AdaptiveAvgPool1d"
    ),
    pytest.param(Layer(lambda lib: lib.nn.BatchNorm1d(4), _real((0, 4))), id="BatchNorm1d-train"),
    pytest.param(
        Layer(lambda lib: lib.nn.BatchNorm1d(4), _real((0, 4)), train=False),
        id="BatchNorm1d-eval",
    ),
    pytest.param(
        Layer(lambda lib: lib.nn.BatchNorm1d(4), _real((0, 4, 7))), id="BatchNorm1d-3d-train"
    ),
    pytest.param(
        Layer(lambda lib: lib.nn.BatchNorm2d(3), _real((0, 3, 4, 5))), id="BatchNorm2d-train"
    ),
    pytest.param(
        Layer(lambda lib: lib.nn.BatchNorm2d(3), _real((0, 3, 4, 5)), train=False),
        id="BatchNorm2d-eval",
    ),
    pytest.param(Layer(lambda lib: lib.nn.LayerNorm(6), _real((0, 6))), id="LayerNorm"),
    pytest.param(Layer(lambda lib: lib.nn.LayerNorm(6), _real((0, 4, 6))), id="LayerNorm-3d"),
    pytest.param(
        Layer(lambda lib: lib.nn.LayerNorm((4, 6)), _real((2, 0, 4, 6))), id="LayerNorm-2d-shape"
    ),
    pytest.param(Layer(lambda lib: lib.nn.RMSNorm(6), _real((0, 6))), id="RMSNorm"),
    pytest.param(
        Layer(lambda lib: lib.nn.InstanceNorm1d(3), _real((0, 3, 7))), id="InstanceNorm1d"
    ),
    pytest.param(
        Layer(
            lambda lib: lib.nn.InstanceNorm2d(3, affine=True),
            _real((0, 3, 4, 5)),
            torch_fails="PyTorch's affine instance_norm indexes the empty batch (IndexError)",
        ),
        id="InstanceNorm2d-affine",
    ),
    pytest.param(
        Layer(lambda lib: lib.nn.Embedding(10, 4), (("index", (0,)),)), id="Embedding-(0,)"
    ),
    pytest.param(
        Layer(lambda lib: lib.nn.Embedding(10, 4, padding_idx=0), (("index", (2, 0)),)),
        id="Embedding-(2, 0)",
    ),
    pytest.param(
        Layer(lambda lib: lib.nn.RNN(5, 4, num_layers=2, batch_first=True), _real((0, 3, 5))),
        id="RNN-batch",
    ),
    pytest.param(Layer(lambda lib: lib.nn.RNN(5, 4), _real((0, 2, 5))), id="RNN-no-steps"),
    pytest.param(
        Layer(lambda lib: lib.nn.GRU(5, 4, batch_first=True), _real((0, 3, 5))), id="GRU-batch"
    ),
    pytest.param(
        Layer(
            lambda lib: lib.nn.LSTM(5, 4, batch_first=True, bidirectional=True), _real((0, 3, 5))
        ),
        id="LSTM-batch",
    ),
    pytest.param(Layer(lambda lib: lib.nn.LSTM(5, 4), _real((3, 0, 5))), id="LSTM-batch-second"),
    pytest.param(Layer(lambda lib: lib.nn.GRUCell(5, 4), _real((0, 5))), id="GRUCell"),
    pytest.param(Layer(lambda lib: lib.nn.LSTMCell(5, 4), _real((0, 5))), id="LSTMCell"),
    pytest.param(Layer(lambda lib: lib.nn.RNNCell(5, 4), _real((0, 5))), id="RNNCell"),
    pytest.param(
        Layer(
            lambda lib: lib.nn.MultiheadAttention(8, 2, batch_first=True),
            _real((0, 3, 8), (0, 3, 8), (0, 3, 8)),
        ),
        id="MultiheadAttention-batch",
    ),
    pytest.param(
        Layer(
            lambda lib: lib.nn.MultiheadAttention(8, 2, batch_first=True),
            _real((2, 3, 8), (2, 0, 8), (2, 0, 8)),
        ),
        id="MultiheadAttention-no-keys",
    ),
    pytest.param(
        Layer(
            lambda lib: lib.nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True),
            _real((0, 3, 8)),
        ),
        id="TransformerEncoderLayer",
    ),
    pytest.param(
        Layer(
            lambda lib: lib.nn.TransformerDecoderLayer(8, 2, 16, dropout=0.0, batch_first=True),
            _real((0, 3, 8), (0, 4, 8)),
        ),
        id="TransformerDecoderLayer",
    ),
    pytest.param(Layer(lambda lib: lib.nn.Dropout(0.5), _real((0, 6))), id="Dropout"),
    pytest.param(Layer(lambda lib: lib.nn.Dropout2d(0.5), _real((0, 3, 4, 4))), id="Dropout2d"),
    pytest.param(Layer(lambda lib: lib.nn.ReLU(), _real((0, 6))), id="ReLU"),
    pytest.param(Layer(lambda lib: lib.nn.GELU(), _real((0, 6))), id="GELU"),
    pytest.param(Layer(lambda lib: lib.nn.Softmax(dim=1), _real((0, 6))), id="Softmax"),
    pytest.param(Layer(lambda lib: lib.nn.LogSoftmax(dim=0), _real((0, 6))), id="LogSoftmax"),
    pytest.param(Layer(lambda lib: lib.nn.PReLU(), _real((0, 6))), id="PReLU"),
    pytest.param(Layer(lambda lib: lib.nn.GLU(), _real((0, 6))), id="GLU"),
    pytest.param(Layer(lambda lib: lib.nn.Hardswish(), _real((0, 6))), id="Hardswish"),
    pytest.param(Layer(lambda lib: lib.nn.Flatten(), _real((0, 3, 4))), id="Flatten"),
    pytest.param(Layer(lambda lib: lib.nn.Unflatten(1, (2, 3)), _real((0, 6))), id="Unflatten"),
    pytest.param(
        Layer(lambda lib: lib.nn.ZeroPad2d((1, 2, 0, 1)), _real((0, 2, 3, 4))), id="ZeroPad2d"
    ),
    pytest.param(
        Layer(lambda lib: lib.nn.ReflectionPad1d(2), _real((0, 2, 5))), id="ReflectionPad1d"
    ),
    pytest.param(
        Layer(lambda lib: lib.nn.ReplicationPad2d(1), _real((0, 2, 3, 4))), id="ReplicationPad2d"
    ),
    pytest.param(Layer(lambda lib: lib.nn.CircularPad1d(1), _real((0, 2, 5))), id="CircularPad1d"),
    pytest.param(
        Layer(lambda lib: lib.nn.Upsample(scale_factor=2, mode="bilinear"), _real((0, 2, 3, 4))),
        id="Upsample-bilinear",
    ),
    pytest.param(
        Layer(lambda lib: lib.nn.Upsample(scale_factor=2), _real((0, 2, 3, 4))),
        id="Upsample-nearest",
    ),
    pytest.param(Layer(lambda lib: lib.nn.PixelShuffle(2), _real((0, 8, 2, 3))), id="PixelShuffle"),
    pytest.param(Layer(lambda lib: lib.nn.Unfold(2), _real((0, 2, 4, 5))), id="Unfold"),
    pytest.param(Layer(lambda lib: lib.nn.Fold((4, 5), 2), _real((0, 8, 12))), id="Fold"),
    *_loss_layers(),
]
LAYERS = [_param(p.values, p.id) for p in _LAYERS]


@pytest.mark.parametrize("layer", LAYERS)
def test_layer_zero_size_matches_torch(layer: Layer, device: str) -> None:
    """Also the buffers after the call (batch norm's running statistics) are PyTorch's."""
    rng = np.random.default_rng(0)
    arrays = [_values(kind, shape, rng) for kind, shape in layer.inputs]
    torch.manual_seed(0)
    with warnings.catch_warnings():  # (PyTorch: initialising zero-element tensors)
        warnings.simplefilter("ignore")
        theirs = layer.build(torch).train(layer.train)
        ours = layer.build(pl).train(layer.train)
    ours.load_state_dict(
        {k: pl.tensor(v.detach().numpy().copy()) for k, v in theirs.state_dict().items()}
    )
    ours = ours.to(device)
    our_inputs, their_inputs = [], []
    for (kind, _), a in zip(layer.inputs, arrays):
        # (a probability target takes no gradient: PyTorch's binary_cross_entropy has none)
        grad = kind == "real" or not our_inputs
        if kind in ("class", "index"):
            our_inputs.append(pl.tensor(a, device=device))
            their_inputs.append(torch.tensor(a))
        else:
            our_inputs.append(pl.tensor(a, dtype=pl.float32, device=device, requires_grad=grad))
            their_inputs.append(torch.tensor(a, dtype=torch.float32, requires_grad=grad))
    our_leaves = [t for t in our_inputs if t.dtype.is_floating_point]
    our_leaves += [p for _, p in ours.named_parameters()]
    their_leaves = [t for t in their_inputs if t.dtype.is_floating_point]
    their_leaves += [p for _, p in theirs.named_parameters()]
    label = type(theirs).__name__
    if layer.torch_fails:
        with pytest.raises((IndexError, RuntimeError)):  # (the failure the case names)
            theirs(*their_inputs)
        out = ours(*our_inputs)
        assert out.shape == our_inputs[0].shape, label
        out.backward(pl.ones(out.shape, device=device))
        compare_grads(label, our_leaves, [torch.zeros_like(t) for t in their_leaves], device)
        return
    run(
        label,
        lambda: ours(*our_inputs),
        lambda: theirs(*their_inputs),
        our_leaves,
        their_leaves,
        device,
    )
    buffers = dict(ours.named_buffers())
    for name, buffer in theirs.named_buffers():
        np.testing.assert_allclose(buffers[name].numpy(), buffer.numpy(), err_msg=name)


# -- functions of nn.functional without a layer above ------------------------------------------
FUNCTIONS = [
    pytest.param(lambda lib, x: lib.nn.functional.normalize(x, dim=1), (0, 4), id="normalize"),
    pytest.param(lambda lib, x: lib.nn.functional.normalize(x, dim=1), (3, 0), id="normalize-0"),
    pytest.param(
        lambda lib, x: lib.nn.functional.scaled_dot_product_attention(x, x, x),
        (0, 2, 3, 4),
        id="scaled_dot_product_attention",
    ),
    pytest.param(
        lambda lib, x: lib.nn.functional.scaled_dot_product_attention(x, x[:, :, :0], x[:, :, :0]),
        (2, 2, 3, 4),
        id="scaled_dot_product_attention-no-keys",
    ),
    pytest.param(lambda lib, x: lib.nn.functional.softmax(x, dim=1), (3, 0), id="softmax-0"),
    pytest.param(lambda lib, x: lib.nn.functional.log_softmax(x, 0), (0, 3), id="log_softmax-0"),
    pytest.param(
        lambda lib, x: lib.nn.functional.pad(x, (1, 2), mode="reflect"), (0, 2, 5), id="pad"
    ),
    pytest.param(
        lambda lib, x: lib.nn.functional.interpolate(x, scale_factor=2, mode="bicubic"),
        (0, 2, 3, 4),
        id="interpolate-bicubic",
    ),
    pytest.param(lambda lib, x: lib.nn.functional.rms_norm(x, (4,)), (0, 3, 4), id="rms_norm"),
    pytest.param(
        lambda lib, x: lib.nn.functional.layer_norm(x, (0,)), (3, 0), id="layer_norm-empty-shape"
    ),
    pytest.param(lambda lib, x: lib.nn.functional.dropout(x, 0.5), (0, 4), id="dropout"),
    pytest.param(lambda lib, x: lib.nn.functional.one_hot(x.long().abs(), 4), (0,), id="one_hot"),
    pytest.param(
        lambda lib, x: lib.nn.functional.cross_entropy(x, x.argmax(1)), (0, 4), id="cross_entropy"
    ),
    pytest.param(lambda lib, x: lib.nn.functional.mse_loss(x, x * 2), (0, 4), id="mse_loss"),
]


@pytest.mark.parametrize(("call", "shape"), FUNCTIONS)
def test_function_zero_size_matches_torch(
    call: Callable[..., Any], shape: tuple[int, ...], device: str
) -> None:
    (ours,), (theirs,) = _pair([np.random.default_rng(0).standard_normal(shape)], device)
    run(
        f"{shape}",
        lambda: call(pl, ours),
        lambda: call(torch, theirs),
        [ours],
        [theirs],
        device,
    )


def test_reductions_of_permuted_zero_size_tensors(device: str) -> None:
    """Reductions over several axes of a permuted tensor without elements: the empty sum is
    0, the empty product 1, the empty mean nan, on both backends (MLX's own reductions read
    uninitialised memory for such an array); and the gradient of a broadcast bias summed
    back over a permuted empty batch is 0."""
    values = np.zeros((0, 3, 8))
    x = pl.tensor(values, dtype=pl.float32, device=device).permute(1, 0, 2)
    t = torch.tensor(values, dtype=torch.float32).permute(1, 0, 2)
    for name in ("sum", "prod", "mean", "amax"):
        label = f"{name} of a permuted (0, 3, 8)"
        try:
            expected = getattr(torch, name)(t, dim=(0, 1)) if name != "prod" else t.prod(0).prod(0)
        except (RuntimeError, IndexError) as error:
            with pytest.raises(Exception) as raised:  # noqa: PT011
                getattr(pl, name)(x, dim=(0, 1))
            assert_clear(raised.value, f"{label} (PyTorch: {error})")
            continue
        got = getattr(pl, name)(x, dim=(0, 1))
        np.testing.assert_array_equal(got.numpy(), expected.numpy(), err_msg=label)
    bias = pl.zeros(8, device=device, requires_grad=True)
    batch = pl.tensor(values, dtype=pl.float32, device=device).transpose(0, 1)
    (batch + bias).sum().backward()
    np.testing.assert_array_equal(bias.grad.numpy(), np.zeros(8, np.float32))
