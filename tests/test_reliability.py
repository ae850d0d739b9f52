"""Edges where a result used to be silently wrong or an error unhelpful, each by its class:
reductions of empty tensors, empty Jacobians, bool arithmetic, integers out of range, NumPy
on either side of a tensor, copying and pickling, and the messages of common mistakes."""

from __future__ import annotations

import copy
import pickle
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

import pylucid as pl

EMPTY_SHAPES = [(0,), (3, 0), (0, 4), (2, 0, 3)]


# -- reductions of no elements -----------------------------------------------------------------
@pytest.mark.parametrize("shape", EMPTY_SHAPES, ids=str)
@pytest.mark.parametrize(
    ("op", "reference"),
    [
        ("sum", np.sum),
        ("prod", np.prod),
        ("mean", np.mean),
        ("var", lambda a, axis: np.var(a, axis=axis, ddof=1)),
        ("std", lambda a, axis: np.std(a, axis=axis, ddof=1)),
        ("logsumexp", lambda a, axis: np.log(np.sum(np.exp(a), axis=axis))),
    ],
)
def test_reductions_of_empty_tensors_give_the_identity(shape, op, reference, device) -> None:
    """Over all axes and over each axis (mlx read garbage for arrays made from empty NumPy
    buffers: 2e-309 for a sum)."""
    values = np.zeros(shape)
    x = pl.tensor(values, dtype=pl.float64, device=device)
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # NumPy's own mean-of-empty warning
        for axis in [None, *range(len(shape))]:
            expected = reference(values, axis=axis)
            got = getattr(pl, op)(x, axis=axis)
            np.testing.assert_array_equal(got.numpy(), expected)


def test_jacobian_of_an_empty_output_has_the_output_and_input_shapes(device) -> None:
    x = pl.ones(2, 3, dtype=pl.float64, device=device)
    jacobian = pl.graph.jacobian(lambda t: t.reshape(1, 2, 3)[0:0].sum(axis=1), x)
    assert jacobian.shape == (0, 3, 2, 3)


# -- bool and integer arithmetic ---------------------------------------------------------------
def test_bool_negation_and_subtraction_raise_as_in_numpy(device) -> None:
    mask = pl.tensor([True, False], device=device)
    with pytest.raises(TypeError, match="neg: the - operator on a bool tensor"):
        pl.neg(mask)
    with pytest.raises(TypeError, match="sub: the - operator with a bool tensor"):
        mask - mask
    assert (~mask).tolist() == [False, True]
    assert (mask ^ mask).tolist() == [False, False]
    assert (mask + mask).tolist() == [True, False] and (mask + mask).dtype is pl.bool


def test_logical_ops_and_truth_reductions(device) -> None:
    x = pl.tensor([[1.0, 0.0], [np.nan, -2.0]], device=device)
    assert pl.logical_not(x).tolist() == [[False, True], [False, False]]
    assert pl.logical_and(x, 1).tolist() == [[True, False], [True, True]]
    assert pl.logical_or(x, pl.zeros(2, device=device)).tolist() == [[True, False], [True, True]]
    assert x.any().item() and not x.all().item()
    assert x.all(dim=1).tolist() == [False, True]
    assert pl.any(x, axis=0, keepdims=True).shape == (1, 2)
    assert pl.all(pl.ones(0, device=device)).item() and not pl.any(pl.ones(0, device=device)).item()
    with pytest.raises(TypeError, match="bool tensors only"):
        ~pl.tensor([1, 2], device=device)


def test_integers_out_of_range_raise(device) -> None:
    with pytest.raises(OverflowError, match="does not fit int64"):
        pl.tensor(2**63, device=device)
    with pytest.raises(OverflowError, match="does not fit int64"):
        pl.tensor([1, 2**63], device=device)
    with pytest.raises(OverflowError, match="2147483648 does not fit int32"):
        pl.tensor(2**31, dtype=pl.int32, device=device)
    with pytest.raises(OverflowError, match="does not fit int32"):
        pl.full(3, 2**40, dtype=pl.int32, device=device)
    with pytest.raises(ValueError, match="nan and inf cannot be converted to int64"):
        pl.tensor([1.0, np.nan], dtype=pl.int64, device=device)
    assert pl.tensor(2**63 - 1, device=device).item() == 2**63 - 1
    assert pl.tensor([1.5, 2**63], device=device).dtype is pl.float32  # floats: as PyTorch


def test_values_beyond_a_float_dtype_become_inf_without_a_warning(device) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert pl.tensor(1e40, device=device).item() == np.inf
        assert pl.full(2, -1e40, device=device).tolist() == [-np.inf, -np.inf]
        assert (pl.ones(1, dtype=pl.float16, device=device) * 1e40).item() == np.inf


# -- NumPy on either side ----------------------------------------------------------------------
def test_numpy_ufuncs_run_the_op_and_stay_in_the_graph(device) -> None:
    t = pl.tensor([1.0, 4.0], device=device, requires_grad=True)
    ops = (np.exp(t), np.sqrt(t), np.floor(t), np.ones(2) + t, t - np.ones(2), np.maximum(t, 2.0))
    for result in ops:
        assert isinstance(result, pl.Tensor) and result.device == device
    (np.exp(t) * np.ones(2)).sum().backward()
    np.testing.assert_allclose(t.grad.numpy(), np.exp([1.0, 4.0]), rtol=1e-6)


def test_numpy_functions_and_other_ufuncs_give_numeric_arrays(device) -> None:
    t = pl.tensor([1.5, 4.0], device=device)
    for result in (np.cbrt(t), np.concatenate([t, t]), np.add.reduce(t), np.sum(t), np.asarray(t)):
        assert np.asarray(result).dtype == np.float32
    assert not isinstance(np.cbrt(t), pl.Tensor)
    assert np.cbrt(t).tolist() == [np.cbrt(np.float32(1.5)), np.cbrt(np.float32(4.0))]
    assert np.sum(t) == 5.5
    assert np.asarray(pl.tensor([1, 2], device=device), dtype=np.float64).dtype == np.float64


# -- copies, pickles ---------------------------------------------------------------------------
def test_leaves_pickle_and_deepcopy_with_their_dtype_device_and_requires_grad(device) -> None:
    for dtype in (pl.float32, pl.float64, pl.float16, pl.bfloat16, pl.int32, pl.bool):
        x = pl.tensor([1, 0, 1], dtype=dtype, device=device)
        for copied in (pickle.loads(pickle.dumps(x)), copy.deepcopy(x)):
            assert copied.dtype is dtype and copied.device == device
            assert copied.tolist() == x.tolist() and copied is not x
    w = pl.tensor([1.0, 2.0], device=device, requires_grad=True)
    (w * w).sum().backward()  # w is used in a graph: the weak reference to its node stays out
    loaded = pickle.loads(pickle.dumps(w))
    assert loaded.requires_grad and loaded.is_leaf and loaded.grad is None
    duplicate = copy.deepcopy(w)
    assert duplicate.grad.tolist() == [2.0, 4.0] and duplicate.grad is not w.grad
    with pl.no_grad():
        duplicate.add_(1.0)
    assert w.tolist() == [1.0, 2.0]


def test_a_non_leaf_pickles_its_values_and_refuses_deepcopy(device) -> None:
    w = pl.tensor([1.0, 2.0], device=device, requires_grad=True)
    y = w * 3.0
    loaded = pickle.loads(pickle.dumps(y))
    assert loaded.tolist() == [3.0, 6.0] and loaded.is_leaf and loaded.requires_grad
    with pytest.raises(RuntimeError, match="only leaf tensors .* MulBackward"):
        copy.deepcopy(y)
    assert copy.deepcopy(y.detach()).tolist() == [3.0, 6.0]


def test_clone_is_a_differentiable_copy(device) -> None:
    w = pl.tensor([1.0, 2.0], device=device, requires_grad=True)
    c = w.clone()
    (c * c).sum().backward()
    assert w.grad.tolist() == [2.0, 4.0]
    x = pl.tensor([1.0, 2.0], device=device)
    y = x.clone()
    y.add_(1.0)
    assert x.tolist() == [1.0, 2.0]


# -- messages of common mistakes ---------------------------------------------------------------
def test_random_half_tensors(device) -> None:
    pl.manual_seed(0)
    for dtype in (pl.float16, pl.bfloat16):
        u = pl.rand(1000, dtype=dtype, device=device).numpy().astype(np.float64)
        assert u.min() >= 0.0 and u.max() < 1.0
        assert pl.randn(10, dtype=dtype, device=device).dtype is dtype


def test_reductions_of_a_zero_d_tensor_accept_axis_0_and_minus_1(device) -> None:
    x = pl.tensor(2.0, device=device, requires_grad=True)
    assert x.sum(axis=0).item() == 2.0 and x.mean(-1).item() == 2.0
    assert pl.argmax(x, dim=0).item() == 0
    with pytest.raises(ValueError, match="valid axes are 0 and -1"):
        x.sum(axis=1)
    with pytest.raises(TypeError, match=r"sum: axis must be an int or a tuple of ints, got 1.0"):
        pl.ones(2, 2, device=device).sum(axis=1.0)


def test_data_that_is_not_numbers_is_refused_by_name() -> None:
    with pytest.raises(TypeError, match="dtype object"):
        pl.tensor([object()])
    with pytest.raises(TypeError, match="pylucid.stack"):
        pl.tensor([pl.tensor(1.0), pl.tensor(2.0)])
    with pytest.raises(ValueError, match="no backend named 'x'"):
        pl.backends.get("x")
    with pytest.raises(ValueError, match="ambiguous; use .any.. or .all.."):
        bool(pl.ones(2))
    assert bool(pl.ones(2).all())


def test_anomaly_report_names_a_script_in_a_folder_called_pylucid(tmp_path: Path) -> None:
    """Frames are left out by the package's directory, not by a "/pylucid/" substring."""
    folder = tmp_path / "pylucid"
    folder.mkdir()
    script = folder / "train.py"
    script.write_text(
        "import pylucid as pl\n"
        "x = pl.tensor([0.0], requires_grad=True)\n"
        "with pl.graph.detect_anomaly():\n"
        "    y = pl.log(x)  # the line the report must name\n"
        "    try:\n"
        "        (y * 0.0 + y).sum().backward()\n"
        "    except pl.graph.anomaly.AnomalyError as error:\n"
        "        print(error)\n"
    )
    run = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120, check=True
    )
    assert "train.py" in run.stdout and "the line the report must name" in run.stdout


@pytest.mark.skipif("mlx" not in pl.backends.available(), reason="mlx is not installed")
def test_mlx_allocations_that_cannot_fit_raise_before_mlx_sees_them() -> None:
    """MLX allocates lazily and crashes the interpreter (SIGSEGV) when it cannot."""
    with pytest.raises(MemoryError, match=r"full: an array of shape \(1000000, 1000000\)"):
        pl.zeros(10**6, 10**6, device="gpu")
    column, row = pl.ones(10**5, 1, device="gpu"), pl.ones(1, 10**5, device="gpu")
    with pytest.raises(MemoryError, match="mul: .* more than the mlx backend can hold"):
        column * row
    assert column.expand(10**5, 10**5).shape == (10**5, 10**5)  # a view: nothing allocated


# -- reductions at the ends of the range -------------------------------------------------------
@pytest.mark.parametrize("dtype", [pl.float32, pl.float64], ids=["float32", "float64"])
def test_prod_gradient_has_no_spurious_overflow(dtype, device) -> None:
    """The product of the other elements, exact where partial products leave the range:
    prefix and suffix products keep their exponents apart (PyTorch's result / x gives nan
    or inf for some of these)."""
    tiny, huge = (1e-30, 1e30) if dtype is pl.float32 else (1e-300, 1e300)
    cases = [
        ([np.inf] + [tiny] * 11, [0.0, np.inf, np.inf]),  # the first: tiny**11 rounds to 0
        ([0.0] + [huge] * 11, [np.inf, 0.0, 0.0]),
        ([huge, huge, 1.0 / huge], [1.0, 1.0, np.inf]),
        ([2.0, 3.0, 0.0, 0.0], [0.0, 0.0, 0.0]),
    ]
    for values, expected in cases:
        x = pl.tensor(values, dtype=dtype, device=device, requires_grad=True)
        pl.prod(x).backward()
        np.testing.assert_allclose(x.grad.numpy()[:3].astype(np.float64), expected, rtol=1e-6)


@pytest.mark.parametrize("dtype", [pl.float32, pl.float64], ids=["float32", "float64"])
def test_var_of_equal_huge_values_is_zero(dtype, device) -> None:
    """The mean of a row whose sum overflows is taken as the sum of x / n."""
    big = float(np.finfo(dtype.numpy).max) * 0.99
    x = pl.tensor([[big] * 4, [-big] * 4], dtype=dtype, device=device, requires_grad=True)
    variance, deviation = x.var(axis=1), x.std(axis=1)
    assert variance.tolist() == [0.0, 0.0] and deviation.tolist() == [0.0, 0.0]
    variance.sum().backward()
    assert np.all(x.grad.numpy() == 0.0)



@pytest.mark.parametrize("dtype", [pl.float32, pl.float64], ids=["float32", "float64"])
def test_std_gradient_of_the_largest_values_is_finite(dtype, device) -> None:
    """(n - 1) std overflows where std is near the largest finite value; the gradient
    g (x - mean) / ((n - 1) std) does not (PyTorch gives 0 and nan here). Reference: the same
    values scaled down by 2^-900 (float64) / 2^-100 (float32) in float64 NumPy, for which
    the gradient is scale-free. About 6 roundings (mean, x - mean, the std's sum, root and the
    two divisions) at up to 1 ULP each: 8 eps."""
    big = float(np.finfo(dtype.numpy).max)
    values = np.array([big, -big, big / 2, 0.0])
    x = pl.tensor(values, dtype=dtype, device=device, requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        x.std().backward()
    scaled = values * 2.0 ** (-900 if dtype is pl.float64 else -100)
    expected = (scaled - scaled.mean()) / (3 * scaled.std(ddof=1))
    np.testing.assert_allclose(x.grad.numpy(), expected, rtol=8 * np.finfo(dtype.numpy).eps)

# -- gradients built as graphs (create_graph=True) ---------------------------------------------
def _elementwise_differentiable_records() -> list:
    from pylucid.opinfo.elementwise import RECORDS

    return [
        pytest.param(info, id=info.name)
        for info in RECORDS
        if pl.ops.get_schema(info.name).differentiable
    ]


EXTREME_BINADES = {
    "float32": [1e-30, -1e-30, 1e30, -1e30, 1e-24, 1e20, 0.5, -2.0, 3.0, 1e-40],
    "float64": [1e-300, -1e-300, 1e300, -1e300, 1e-160, 1e160, 1e155, 1e308, 0.5, -2.0, 3.0],
}


def _assert_same_gradient(name: str, fused: pl.Tensor, graphed: pl.Tensor) -> None:
    """nan and inf at the same places; finite values within 4 ULP of each other."""
    a, b = fused.numpy(), graphed.numpy()
    np.testing.assert_array_equal(np.isnan(a), np.isnan(b), err_msg=f"{name}: nan places")
    np.testing.assert_array_equal(np.isinf(a), np.isinf(b), err_msg=f"{name}: inf places")
    finite = np.isfinite(a)
    spacing = np.spacing(np.maximum(np.abs(a), np.abs(b))[finite]).astype(np.float64)
    difference = np.abs(a[finite].astype(np.float64) - b[finite].astype(np.float64))
    assert np.all(difference <= 4 * spacing), f"{name}: fused {a.tolist()} vs graphed {b.tolist()}"


@pytest.mark.parametrize("info", _elementwise_differentiable_records())
@pytest.mark.parametrize("dtype", [pl.float32, pl.float64], ids=["float32", "float64"])
def test_create_graph_gradients_match_the_fused_backward_at_extreme_binades(
    info, dtype, device
) -> None:
    """A gradient recorded as a graph of ops (for higher derivatives) is computed in the same
    form as the fused backward kernel, so it stays in range wherever that one does: e.g.
    ``g / (x ln b)`` as ``(g / ln b) / x``, not ``g / (x * ln b)``, which overflows at 1e-300.
    Both are a few roundings of the same formula: 4 ULP bound their difference; nan and inf
    must sit at the same places."""
    values = EXTREME_BINADES[dtype.name]
    x = pl.tensor(values, dtype=dtype, device=device, requires_grad=True)
    y = info.call(x)
    (fused,) = pl.graph.grad(y.sum(), x, retain_graph=True)
    (graphed,) = pl.graph.grad(y.sum(), x, create_graph=True)
    _assert_same_gradient(f"{info.name} {dtype.name} {device}", fused, graphed)


def _binary_differentiable_records() -> list:
    from pylucid.opinfo import OPS

    return [
        pytest.param(info, id=info.name)
        for info in OPS
        if len(info.samplers) == 2
        and info.shapes[0][0] == info.shapes[0][1]
        and pl.ops.get_schema(info.name).differentiable
    ]


@pytest.mark.parametrize("info", _binary_differentiable_records())
@pytest.mark.parametrize("dtype", [pl.float32, pl.float64], ids=["float32", "float64"])
def test_create_graph_gradients_of_binary_ops_match_the_fused_backward(info, dtype, device) -> None:
    """As above for every pair of the extreme binades (a full grid, so that each gradient
    element is that of one pair): e.g. div's ``-g a / b^2`` as ``-g (a / b) / b``."""
    values = np.asarray(EXTREME_BINADES[dtype.name])
    first, second = (grid.ravel() for grid in np.meshgrid(values, values, indexing="ij"))
    a = pl.tensor(first, dtype=dtype, device=device, requires_grad=True)
    b = pl.tensor(second, dtype=dtype, device=device, requires_grad=True)
    y = info.call(a, b)
    fused = pl.graph.grad(y.sum(), (a, b), retain_graph=True)
    graphed = pl.graph.grad(y.sum(), (a, b), create_graph=True)
    for which, plain, as_graph in zip("ab", fused, graphed, strict=True):
        _assert_same_gradient(f"{info.name} {dtype.name} {device} d/d{which}", plain, as_graph)
