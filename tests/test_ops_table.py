"""Table-driven tests over the op database (pylucid.opinfo): every op, both backends.

- forward against the NumPy float64 reference, in float32 (the record's rtol/atol) and in
  float64 (rtol 1e-12: the kernels compute in float64 and differ from NumPy only by libm);
- gradients: the full Jacobian from backward against float64 central differences, on both
  backends (every upstream one-hot vector, so non-uniform upstream gradients are covered);
- second derivatives: the create_graph gradient (with a random cotangent) against finite
  differences of itself (gradgradcheck);
- numba and mlx agree; non-contiguous inputs give the same result as contiguous ones;
- completeness: every registered public op has a record.
"""

from __future__ import annotations

import numpy as np
import pytest

import pylucid as pl
from pylucid.opinfo import OPS, OpInfo
from tests.conftest import MLX_MISSING

CASES = [
    pytest.param(info, shapes, id=f"{info.name}-{'x'.join(map(str, shapes))}")
    for info in OPS
    for shapes in info.shapes
]


def _skip_unsupported(info: OpInfo, device: str) -> None:
    if "needs_mlx" in info.tags and MLX_MISSING:
        pytest.skip("needs both backends; mlx is not installed")


def _outputs(result: object) -> list:
    return list(result) if isinstance(result, (list, tuple)) else [result]


@pytest.mark.parametrize("dtype", [pl.float32, pl.float64], ids=["float32", "float64"])
@pytest.mark.parametrize(("info", "shapes"), CASES)
def test_forward_matches_numpy_float64(info, shapes, dtype, device, rng) -> None:
    _skip_unsupported(info, device)
    arrays = info.sample(rng, shapes)
    inputs = [pl.tensor(a, dtype=dtype, device=device) for a in arrays]
    # The reference sees exactly the rounded inputs the op sees.
    reference = _outputs(
        info.reference(*[a.astype(dtype.numpy).astype(np.float64) for a in arrays])
    )
    got = _outputs(info.call(*inputs))
    rtol, atol = (info.rtol, info.atol) if dtype is pl.float32 else (1e-12, 1e-12)
    assert len(got) == len(reference)
    for g, r in zip(got, reference):
        assert g.shape == np.shape(r)
        np.testing.assert_allclose(g.numpy().astype(np.float64), r, rtol=rtol, atol=atol)


@pytest.mark.parametrize(
    "check",
    [
        pytest.param(pl.graph.gradcheck, id="gradcheck"),
        # second derivatives: the create_graph gradient against finite differences of itself
        pytest.param(pl.graph.gradgradcheck, id="gradgradcheck"),
    ],
)
@pytest.mark.parametrize(("info", "shapes"), CASES)
def test_derivatives_float64(info, shapes, check, device, rng) -> None:
    _skip_unsupported(info, device)
    if not pl.ops.get_schema(info.name).differentiable:
        pytest.skip(f"{info.name} has no gradient by definition")
    inputs = [
        pl.tensor(a, dtype=pl.float64, device=device, requires_grad=True)
        for a in info.sample(rng, shapes)
    ]
    assert check(info.call, inputs, **info.gradcheck_kwargs)


@pytest.mark.skipif(MLX_MISSING, reason="needs both backends; mlx is not installed")
@pytest.mark.parametrize(("info", "shapes"), CASES)
def test_numba_and_mlx_agree(info, shapes, rng) -> None:
    arrays = info.sample(rng, shapes)
    results = []
    for device in ("cpu", "gpu"):
        inputs = [pl.tensor(a, dtype=pl.float32, device=device, requires_grad=True) for a in arrays]
        outputs = _outputs(info.call(*inputs))
        differentiable = [o for o in outputs if o.requires_grad]
        if differentiable:
            seeds = [np.linspace(-1, 1, o.numel()).reshape(o.shape) for o in differentiable]
            pl.graph.backward(differentiable, [pl.tensor(s, device=device) for s in seeds])
        grads = [x.grad.numpy() if x.grad is not None else None for x in inputs]
        results.append(([o.numpy() for o in outputs], grads))
    (out_cpu, grads_cpu), (out_gpu, grads_gpu) = results
    for a, b in zip(out_cpu, out_gpu):
        np.testing.assert_allclose(a, b, rtol=4 * info.rtol, atol=4 * info.atol)
    for a, b in zip(grads_cpu, grads_gpu):
        assert (a is None) == (b is None)
        if a is not None:
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(("info", "shapes"), CASES)
def test_non_contiguous_inputs(info, shapes, rng) -> None:
    """Transposed (Fortran-order) inputs give the result of contiguous copies (up to the
    summation order of reductions: rtol 1e-12 in float64)."""
    _skip_unsupported(info, "cpu")
    arrays = info.sample(rng, shapes)
    strided = [np.asfortranarray(a) for a in arrays]
    if not any(a.ndim >= 2 for a in arrays):
        pytest.skip("no input of 2 or more dimensions to transpose")
    expected = _outputs(info.call(*[pl.tensor(a) for a in arrays]))
    got = _outputs(info.call(*[pl.from_numpy(a) for a in strided]))
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g.numpy(), e.numpy(), rtol=1e-12, atol=1e-12)


def test_every_public_op_has_a_record() -> None:
    """Every public op of the library (not user Functions a test registers)."""
    recorded = {info.name for info in OPS}
    missing = [
        name
        for name in pl.ops.list_ops()
        if not pl.ops.get_schema(name).internal
        and pl.ops.get_op(name).__module__.startswith("pylucid.ops.")
        and name not in recorded
    ]
    assert not missing, f"ops without an opinfo record: {missing}"


def test_every_op_runs_on_every_backend() -> None:
    """Completeness: the table above runs each op forward and backward on each backend; here,
    that each backend class defines every primitive the numba backend defines."""
    numba_primitives = {n for n in dir(pl.backends.NumbaBackend) if not n.startswith("_")}
    mlx_primitives = {n for n in dir(pl.backends.MLXBackend) if not n.startswith("_")}
    assert numba_primitives - mlx_primitives == set()
    assert mlx_primitives - numba_primitives <= {"mx"}
