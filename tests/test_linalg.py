"""matmul: NumPy's semantics for every promotion and broadcast case, its gradients, errors.

Forward values are compared with NumPy's float64 ``matmul``; gradients with float64 central
differences (:func:`pylucid.graph.gradcheck`), second derivatives with
:func:`pylucid.graph.gradgradcheck`, on both backends.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import pylucid as pl
from pylucid.ops.base import Op
from pylucid.ops.linalg import MatmulBackward
from pylucid.ops.schema import AmpPolicy

# (a shape, b shape): every way the operands' dimensions combine.
SHAPES = [
    ((3,), (3,)),  # dot product -> 0-d
    ((2, 3), (3,)),  # matrix @ vector
    ((3,), (3, 4)),  # vector @ matrix
    ((2, 3), (3, 4)),
    ((1, 3), (3, 1)),  # size-1 matrix dims must not be mistaken for broadcast dims
    ((5, 2, 3), (3, 4)),  # batch @ matrix: dB folds the batch into one product
    ((3, 2), (2, 2, 4)),  # matrix @ batch: dA sums over the batch
    ((2, 1, 2, 3), (4, 3, 2)),  # both batched, each broadcasting the other
    ((1, 2, 3), (4, 3, 2)),
    ((3,), (2, 3, 4)),  # vector @ batch
    ((2, 3, 4), (4,)),  # batch @ vector
    ((2, 1, 3), (3, 1)),  # a batch of 1x1 products
]


def _operands(rng, a_shape, b_shape, dtype, device, requires_grad=False):
    return [
        pl.tensor(rng.uniform(-2, 2, s), dtype=dtype, device=device, requires_grad=requires_grad)
        for s in (a_shape, b_shape)
    ]


@pytest.mark.parametrize("a_shape, b_shape", SHAPES)
def test_forward_matches_numpy(device, rng, a_shape, b_shape):
    a, b = rng.uniform(-2, 2, a_shape), rng.uniform(-2, 2, b_shape)
    expected = np.matmul(a, b)
    for dtype, tol in ((pl.float64, 1e-13), (pl.float32, 1e-5)):
        # float32: k <= 4 products of magnitude <= 4 round to within 4 * 16 * 2**-24 ~ 4e-6.
        out = pl.tensor(a, dtype=dtype, device=device) @ pl.tensor(b, dtype=dtype, device=device)
        assert out.shape == expected.shape and out.dtype is dtype
        np.testing.assert_allclose(out.numpy(), expected, rtol=tol, atol=tol)


@pytest.mark.parametrize("a_shape, b_shape", SHAPES)
def test_gradcheck(device, rng, a_shape, b_shape):
    a, b = _operands(rng, a_shape, b_shape, pl.float64, device, requires_grad=True)
    assert pl.graph.gradcheck(pl.matmul, [a, b])


@pytest.mark.parametrize("a_shape, b_shape", SHAPES)
def test_create_graph_gradients_match_the_fused_ones(device, rng, a_shape, b_shape):
    """First derivatives from grad_graph (create_graph=True) equal the fused kernels' and
    stay differentiable; second derivatives match finite differences."""
    a, b = _operands(rng, a_shape, b_shape, pl.float64, device, requires_grad=True)
    out = a @ b
    v = pl.tensor(rng.standard_normal(out.shape), dtype=pl.float64, device=device)
    fused = pl.graph.grad(out, [a, b], v, retain_graph=True)
    graph = pl.graph.grad(out, [a, b], v, create_graph=True)
    for f, g in zip(fused, graph):
        assert g.requires_grad and g.shape == f.shape
        np.testing.assert_allclose(g.numpy(), f.numpy(), rtol=1e-12, atol=1e-12)
    assert pl.graph.gradgradcheck(pl.matmul, [a, b])


def test_create_graph_second_derivatives_match_the_formulas(device, rng):
    """d/dB of <dL/dA, W> with dL/dA = G B^T is W^T G (batched, summed over the batch)."""
    a, b = _operands(rng, (2, 3, 4), (4, 5), pl.float64, device, requires_grad=True)
    g = rng.standard_normal((2, 3, 5))
    w = rng.standard_normal((2, 3, 4))
    (grad_a,) = pl.graph.grad(a @ b, [a], pl.tensor(g, device=device), create_graph=True)
    (grad_b,) = pl.graph.grad(grad_a, [b], pl.tensor(w, device=device))
    expected = np.einsum("bnk,bnm->km", w, g)
    np.testing.assert_allclose(grad_b.numpy(), expected, rtol=1e-13, atol=1e-13)


def test_an_op_without_a_graph_formula_refuses_create_graph(monkeypatch, device, rng):
    assert MatmulBackward.grad_graph is not Op.grad_graph
    monkeypatch.setattr(MatmulBackward, "grad_graph", Op.grad_graph)
    a, b = _operands(rng, (2, 3), (3, 4), pl.float64, device, requires_grad=True)
    with pytest.raises(NotImplementedError, match="no differentiable gradient formula.*matmul"):
        (a @ b).sum().backward(create_graph=True)


@pytest.mark.parametrize("which", [0, 1])
def test_create_graph_gradient_of_one_operand(device, rng, which):
    a, b = _operands(rng, (2, 2, 3), (3, 4), pl.float64, device)
    (a, b)[which].requires_grad_()
    assert pl.graph.gradgradcheck(lambda x, y: (x @ y) * (x, y)[which].sum(), [a, b])


@pytest.mark.parametrize("which", [0, 1])
def test_gradient_of_one_operand(device, rng, which):
    """Only the operand that requires grad gets one (the other formula is skipped)."""
    a, b = _operands(rng, (2, 2, 3), (3, 4), pl.float64, device)
    (a, b)[which].requires_grad_()
    assert pl.graph.gradcheck(pl.matmul, [a, b])
    (a @ b).sum().backward()
    assert (a, b)[1 - which].grad is None


def test_gradients_match_the_formulas(device, rng):
    """dA = g B^T and dB = A^T g summed over the batch, with a non-uniform g."""
    a, b = _operands(rng, (5, 2, 3), (3, 4), pl.float64, device, requires_grad=True)
    g = rng.standard_normal((5, 2, 4))
    (a @ b).backward(pl.tensor(g, dtype=pl.float64, device=device))
    np.testing.assert_allclose(a.grad.numpy(), g @ b.numpy().T, rtol=1e-13, atol=1e-13)
    expected_b = np.einsum("bnk,bnm->km", a.numpy(), g)
    np.testing.assert_allclose(b.grad.numpy(), expected_b, rtol=1e-13, atol=1e-13)


def test_operator_and_reflected_operator(device, rng):
    a, b = _operands(rng, (2, 3), (3, 4), pl.float32, device)
    np.testing.assert_array_equal((a @ b).numpy(), pl.matmul(a, b).numpy())
    np.testing.assert_array_equal(b.__rmatmul__(a).numpy(), (a @ b).numpy())
    np.testing.assert_array_equal(a.matmul(b).numpy(), (a @ b).numpy())


def test_schema():
    schema = pl.ops.get_schema("matmul")
    assert schema.amp_policy is AmpPolicy.PROMOTE and schema.saved == ("a", "b")


def test_integer_matmul_is_exact_and_has_no_gradient(device):
    """Integers multiply exactly (NumPy and PyTorch allow it); 2**60 + 3 needs int64."""
    a = pl.tensor(np.array([[2**40, 3], [1, -2]]), device=device)
    b = pl.tensor(np.array([[2**20, 0], [1, 5]]), device=device)
    out = a @ b
    assert out.dtype is pl.int64 and not out.requires_grad
    np.testing.assert_array_equal(out.numpy(), [[2**60 + 3, 15], [2**20 - 2, -10]])
    v = pl.tensor([1, 2, 3], device=device)
    assert (v @ v).item() == 14 and (v @ v).shape == ()


def test_mixed_dtypes_promote(device):
    a = pl.tensor(np.arange(3), device=device)  # int64
    b = pl.tensor(np.ones((3, 2)), dtype=pl.float32, device=device)
    out = a @ b
    assert out.dtype is pl.float32
    np.testing.assert_array_equal(out.numpy(), [3.0, 3.0])
    out = pl.ones(3, device=device) @ pl.ones(3, dtype=pl.float64, device=device)
    assert out.dtype is pl.float64 and out.item() == 3.0


def test_empty_operands(device):
    """An empty inner dimension gives zeros; an empty batch gives empty gradients."""
    a = pl.zeros(2, 0, device=device, requires_grad=True)
    b = pl.zeros(0, 3, device=device, requires_grad=True)
    out = a @ b
    np.testing.assert_array_equal(out.numpy(), np.zeros((2, 3)))
    out.sum().backward()
    assert a.grad.shape == (2, 0) and b.grad.shape == (0, 3)
    a = pl.zeros(0, 2, 3, device=device, requires_grad=True)
    b = pl.ones(3, 4, device=device, requires_grad=True)
    (a @ b).sum().backward()
    assert a.grad.shape == (0, 2, 3)
    np.testing.assert_array_equal(b.grad.numpy(), np.zeros((3, 4)))


def test_non_contiguous_inputs():
    """Transposed and strided NumPy views (from_numpy shares them) multiply correctly."""
    base = np.arange(48.0).reshape(6, 8)
    a_view, b_view = base[::2, 1::2].T, base[1::2, ::2]  # (4, 3) and (3, 4), both strided
    out = pl.from_numpy(a_view) @ pl.from_numpy(b_view)
    np.testing.assert_allclose(out.numpy(), a_view @ b_view, rtol=1e-15)


def test_nan_and_inf_propagate_without_warnings(device):
    a = np.array([[np.inf, 1.0], [np.nan, 0.0], [1.0, 2.0]])
    b = np.array([[0.0, 1.0], [1.0, -np.inf]])
    with np.errstate(all="ignore"):
        expected = np.matmul(a, b)  # [[nan, -inf], [nan, nan], [2, -inf]]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = pl.tensor(a, dtype=pl.float64, device=device) @ pl.tensor(
            b, dtype=pl.float64, device=device
        )
        np.testing.assert_array_equal(out.numpy(), expected)


@pytest.mark.parametrize(
    "a_shape, b_shape, message",
    [
        ((3,), (4,), r"inner dimensions of shapes \(3,\) and \(4,\) differ"),
        ((2, 3), (2, 3), r"inner dimensions of shapes \(2, 3\) and \(2, 3\) differ"),
        ((2, 2, 3), (3, 3, 1), r"batch dimensions \(2,\) and \(3,\)"),
        ((), (3,), r"at least 1 dimension, got shapes \(\) and \(3,\)"),
        ((3, 3), (), r"at least 1 dimension, got shapes \(3, 3\) and \(\)"),
    ],
)
def test_shape_errors_name_the_op_and_both_shapes(device, a_shape, b_shape, message):
    a, b = pl.zeros(a_shape, device=device), pl.zeros(b_shape, device=device)
    with pytest.raises(ValueError, match="matmul: .*" + message):
        a @ b


def test_type_errors(device):
    a = pl.ones(2, 2, device=device)
    with pytest.raises(TypeError, match="matmul: expected a Tensor for b, got int"):
        a @ 2
    with pytest.raises(TypeError, match="matmul: expected a Tensor for a, got list"):
        pl.matmul([[1.0]], a)


def test_bool_operands_are_refused():
    """As in PyTorch (NumPy would compute a logical product); checked before dispatch, so
    one backend covers both."""
    flags = pl.tensor(np.ones((2, 2), bool))
    with pytest.raises(TypeError, match=r"matmul: bool operands are not supported \(bool and"):
        pl.matmul(flags, pl.ones(2, 2))


def test_device_mismatch_is_an_error():
    pytest.importorskip("mlx.core")
    with pytest.raises(RuntimeError, match="matmul: expected all tensors on one device"):
        pl.ones(2, 2, device="cpu") @ pl.ones(2, 2, device="gpu")
