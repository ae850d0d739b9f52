"""Tensor metadata, factories, conversions, promotion and operators."""

from __future__ import annotations

import numpy as np
import pytest

import pylucid as pl
from pylucid.dtypes import promote_types, result_type


def test_defaults_of_tensor() -> None:
    x = pl.tensor([0.5, 1.0, 8.0])
    assert x.dtype is pl.float32 and x.device == "cpu" and x.backend == "numba"
    assert x.shape == (3,) and x.ndim == 1 and x.numel() == 3 and len(x) == 3
    assert x.grad is None and x.grad_fn is None and x.is_leaf and not x.requires_grad
    assert pl.tensor([1, 2]).dtype is pl.int64
    assert pl.tensor([True]).dtype is pl.bool
    assert pl.tensor(np.zeros(2)).dtype is pl.float64  # a NumPy array keeps its dtype
    assert pl.tensor([1, 2], dtype=pl.float64).dtype is pl.float64
    assert pl.tensor(3.0).shape == ()


def test_tensor_copies_but_from_numpy_shares() -> None:
    a = np.arange(4.0)
    t = pl.tensor(a)
    f = pl.from_numpy(a)
    a[0] = 100.0
    assert t.numpy()[0] == 0.0
    assert f.numpy()[0] == 100.0
    assert f.dtype is pl.float64


def test_numpy_of_tensor_requiring_grad_is_read_only() -> None:
    x = pl.tensor([1.0], requires_grad=True)
    with pytest.raises(ValueError, match="read-only"):
        x.numpy()[0] = 2.0


def test_item_tolist_and_scalars() -> None:
    assert pl.tensor([[1.5]]).item() == 1.5
    assert pl.tensor([[1, 2], [3, 4]]).tolist() == [[1, 2], [3, 4]]
    assert float(pl.tensor(2.5)) == 2.5 and int(pl.tensor(3)) == 3
    with pytest.raises(ValueError, match=r"one-element.*shape \(2,\)"):
        pl.tensor([1.0, 2.0]).item()
    with pytest.raises(ValueError, match="ambiguous"):
        bool(pl.tensor([1.0, 2.0]))


def test_factories(device: str) -> None:
    assert pl.zeros(2, 3, device=device).tolist() == [[0.0] * 3] * 2
    assert pl.ones((2,), dtype=pl.int32, device=device).tolist() == [1, 1]
    assert pl.full((2,), 7.0, device=device).tolist() == [7.0, 7.0]
    base = pl.tensor([[1.0, 2.0]], dtype=pl.float64, device=device)
    z = pl.zeros_like(base)
    assert z.shape == (1, 2) and z.dtype is pl.float64 and z.device == device
    assert pl.ones_like(base, dtype=pl.float32).dtype is pl.float32
    assert pl.arange(4, device=device).tolist() == [0, 1, 2, 3]
    assert pl.arange(4).dtype is pl.int64
    assert pl.arange(0.0, 1.0, 0.25).tolist() == [0.0, 0.25, 0.5, 0.75]
    assert pl.zeros(2, requires_grad=True).requires_grad


def test_random_factories_are_seeded_and_backend_independent() -> None:
    pl.manual_seed(7)
    a = pl.rand(3, 4)
    pl.manual_seed(7)
    b = pl.rand(3, 4)
    np.testing.assert_array_equal(a.numpy(), b.numpy())
    assert 0.0 <= a.numpy().min() and a.numpy().max() < 1.0
    pl.manual_seed(3)
    n = pl.randn(10_000, dtype=pl.float64)
    assert abs(n.numpy().mean()) < 0.05 and abs(n.numpy().std() - 1.0) < 0.05
    with pytest.raises(TypeError, match="floating"):
        pl.rand(2, dtype=pl.int64)


def test_bad_shapes_and_data() -> None:
    with pytest.raises(ValueError, match="non-negative"):
        pl.zeros(-1)
    with pytest.raises(TypeError, match="cannot make a tensor"):
        pl.tensor([[1.0], [1.0, 2.0]])
    with pytest.raises(TypeError, match="unsupported dtype"):
        pl.tensor(np.zeros(2, dtype=np.complex64))
    with pytest.raises(ValueError, match="step"):
        pl.arange(0, 1, 0)


def test_only_floating_tensors_require_grad() -> None:
    with pytest.raises(TypeError, match="only floating-point.*int64"):
        pl.tensor([1, 2], requires_grad=True)
    with pytest.raises(TypeError, match="only floating-point"):
        pl.tensor([1, 2]).requires_grad_()


def test_repr() -> None:
    assert repr(pl.tensor([1.0, 2.0])) == "tensor([1., 2.])"
    assert "requires_grad=True" in repr(pl.tensor([1.0], requires_grad=True))
    y = pl.log2(pl.tensor([1.0], requires_grad=True))
    assert repr(y).endswith("grad_fn=<Log2Backward>)")
    assert "dtype=pylucid.float64" in repr(pl.tensor([1.0], dtype=pl.float64))


def test_to_dtype_is_differentiable() -> None:
    x = pl.tensor([1.0, 2.0], requires_grad=True)
    y = x.to(pl.float64)
    assert y.dtype is pl.float64 and y.grad_fn is not None
    (y * y).sum().backward()
    assert x.grad.dtype is pl.float32
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, 4.0])
    assert x.to("float32") is x
    assert x.to(pl.int32).grad_fn is None  # an integer result leaves the graph


# PyTorch's promotion: category first (bool < int < float), width within a category.
PROMOTION_TABLE = [
    ("bool", "int32", "int32"),
    ("int32", "int64", "int64"),
    ("int64", "float32", "float32"),
    ("int32", "float64", "float64"),
    ("float32", "float64", "float64"),
    ("bool", "float32", "float32"),
]


@pytest.mark.parametrize(("a", "b", "expected"), PROMOTION_TABLE)
def test_promotion_table(a: str, b: str, expected: str) -> None:
    da, db = pl.dtypes.as_dtype(a), pl.dtypes.as_dtype(b)
    assert promote_types(da, db).name == expected
    assert promote_types(db, da).name == expected
    x = pl.ones(2, dtype=da) + pl.ones(2, dtype=db)
    assert x.dtype.name == expected


@pytest.mark.parametrize(
    ("dtype", "scalar", "expected"),
    [
        ("float32", 2.5, "float32"),
        ("int32", 2, "int32"),
        ("int64", 2.5, "float32"),
        ("bool", 1, "int64"),
        ("float64", 1, "float64"),
    ],
)
def test_python_scalars_do_not_widen(dtype: str, scalar: float, expected: str) -> None:
    assert result_type(pl.dtypes.as_dtype(dtype), scalar).name == expected
    assert (pl.ones(2, dtype=pl.dtypes.as_dtype(dtype)) * scalar).dtype.name == expected


def test_operators_and_reflected_scalars(device: str) -> None:
    x = pl.tensor([1.0, 2.0, 4.0], device=device)
    np.testing.assert_allclose((x + 1).numpy(), [2, 3, 5])
    np.testing.assert_allclose((1 + x).numpy(), [2, 3, 5])
    np.testing.assert_allclose((x - 1).numpy(), [0, 1, 3])
    np.testing.assert_allclose((1 - x).numpy(), [0, -1, -3])
    np.testing.assert_allclose((x * 2).numpy(), [2, 4, 8])
    np.testing.assert_allclose((2 * x).numpy(), [2, 4, 8])
    np.testing.assert_allclose((x / 2).numpy(), [0.5, 1, 2])
    np.testing.assert_allclose((2 / x).numpy(), [2, 1, 0.5])
    np.testing.assert_allclose((-x).numpy(), [-1, -2, -4])
    np.testing.assert_allclose((x**2).numpy(), [1, 4, 16])
    np.testing.assert_allclose((np.float32(2) * x).numpy(), [2, 4, 8])
    assert (pl.tensor([1, 2]) / pl.tensor([2, 4])).dtype is pl.float32  # true division


def test_operator_with_unsupported_type_is_type_error() -> None:
    with pytest.raises(TypeError):
        pl.tensor([1.0]) + "a"
    with pytest.raises(TypeError, match="add: expected a Tensor, a NumPy array or a Python number"):
        pl.add(pl.tensor([1.0]), [1.0])


def test_sum_and_mean_axes(device: str) -> None:
    a = np.arange(24.0).reshape(2, 3, 4)
    x = pl.tensor(a, device=device)
    np.testing.assert_allclose(x.sum().numpy(), a.sum())
    np.testing.assert_allclose(x.sum(axis=1).numpy(), a.sum(axis=1))
    np.testing.assert_allclose(
        x.sum(dim=(0, 2), keepdim=True).numpy(), a.sum((0, 2), keepdims=True)
    )
    np.testing.assert_allclose(x.mean(axis=-1).numpy(), a.mean(axis=-1))
    assert pl.tensor([1, 2, 3], device=device).sum().dtype is pl.int64
    assert pl.tensor([1, 2], device=device).mean().dtype is pl.float32
