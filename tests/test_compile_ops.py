"""Every op of the op database through ``pl.compile`` (the tape): forward and backward of a
compiled step give eager's values.

Each op's first shape combination, float32 and float64: a step computes the op, weights
each floating output by a fixed random cotangent, sums and calls ``backward()``; its third
call (a replay) is compared with an eager run on the same inputs. Tolerance: loops are the
eager kernels' scalar functions and sums the backend's own, so most ops agree bit for bit;
products may take another BLAS entry point (``np.dot`` into a planned array against eager's
``matmul``), which changes the order of a float32 dot product's terms: rtol 1e-5 in float32
(a few ULP of a 4- to 12-term sum, with margin), 1e-12 in float64. A step the capture
refuses (an op that reads values in Python) is skipped with the capture's message.
"""

from __future__ import annotations

import numpy as np
import pytest

import pylucid as pl
from pylucid.opinfo import OPS

CASES = [pytest.param(info, id=info.name) for info in OPS if "needs_mlx" not in info.tags]


@pytest.fixture(autouse=True)
def _compile_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("PYLUCID_COMPILE_CACHE", str(tmp_path_factory.getbasetemp() / "compile"))


def _outputs(result: object) -> list:
    return list(result) if isinstance(result, (list, tuple)) else [result]


@pytest.mark.parametrize("dtype", [pl.float32, pl.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("info", CASES)
def test_compiled_op_matches_eager(info, dtype) -> None:
    rng = np.random.default_rng(0)
    arrays = info.sample(rng, info.shapes[0])
    differentiable = pl.ops.get_schema(info.name).differentiable
    inputs = [pl.tensor(a, dtype=dtype, requires_grad=differentiable) for a in arrays]
    floating = [o for o in _outputs(info.call(*inputs)) if o.dtype.is_floating_point]
    weights = [pl.tensor(rng.standard_normal(o.shape), dtype=o.dtype) for o in floating]

    def step(*xs: pl.Tensor) -> list:
        outs = _outputs(info.call(*xs))
        float_outs = [o for o in outs if o.dtype.is_floating_point]
        if differentiable and float_outs:
            sum((o * w).sum() for o, w in zip(float_outs, weights)).backward()
        return outs

    def run(fn) -> list[np.ndarray]:
        for x in inputs:
            x.grad = None
        outs = [o.numpy().copy() for o in fn(*inputs)]
        return outs + [x.grad.numpy().copy() for x in inputs if x.grad is not None]

    expected = run(step)
    compiled = pl.compile(step)
    try:
        for _ in range(3):
            got = run(compiled)
    except pl.CaptureError as error:
        pytest.skip(f"not capturable: {error}")
    assert compiled.stats.replays == 2
    assert len(got) == len(expected)
    rtol = 1e-5 if dtype is pl.float32 else 1e-12
    for g, e in zip(got, expected):
        assert g.shape == e.shape and g.dtype == e.dtype
        np.testing.assert_allclose(g, e, rtol=rtol, atol=rtol * 1e-1)
