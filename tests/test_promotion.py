"""Type promotion with Python numbers and 0-d tensors: PyTorch's three tiers.

The class of defect: a number or a 0-d tensor rounded to (or widening) the other operand's
dtype. PyTorch's rule: tensors with dimensions decide the dtype; 0-d tensors and numbers
only contribute a higher category (``promote_tiers``), and a half result computes with the
number at float32 precision, rounded once. Every combination of the operand kinds is
checked against a table (and against torch where it is installed).
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import pylucid as pl
from pylucid.dtypes import promote_tiers
from tests.conftest import TORCH_REASON

try:
    import torch
except ImportError:  # the oracle is optional: pip install -e ".[peers]"
    torch = None

DTYPES = ["bool", "int32", "int64", "float16", "bfloat16", "float32", "float64"]


def test_half_precision_with_a_python_number_computes_it_at_float32(device) -> None:
    """PyTorch's values: the number is not rounded to the half dtype first."""
    f16 = pl.tensor([0.853], dtype=pl.float16, device=device)
    bf16 = pl.tensor([0.828125], dtype=pl.bfloat16, device=device)
    assert (f16 * 70000.0).item() == 59712.0
    assert (f16 / 70000.0).item() == pytest.approx(1.2159e-05, rel=1e-3)
    assert (bf16 * 1.3).item() == 1.078125
    big = pl.tensor(70000.0, dtype=pl.float64, device=device)
    assert (f16 * big).item() == 59712.0 and (f16 * big).dtype is pl.float16


def test_zero_d_tensors_decide_the_category_not_the_width(device) -> None:
    x32 = pl.ones(2, device=device)
    s64 = pl.tensor(2.0, dtype=pl.float64, device=device)
    assert (x32 * s64).dtype is pl.float32
    ints = pl.tensor([1, 2], device=device)
    assert (ints + pl.tensor(1.5, dtype=pl.float64, device=device)).tolist() == [2.5, 3.5]
    assert (pl.tensor(1.0, dtype=pl.float16, device=device) * s64).dtype is pl.float64
    x32.add_(s64)
    assert x32.tolist() == [3.0, 3.0]


def test_gradients_flow_to_a_zero_d_tensor_of_another_dtype(device) -> None:
    x = pl.tensor([1.0, 2.0], device=device, requires_grad=True)
    s = pl.tensor(3.0, dtype=pl.float64, device=device, requires_grad=True)
    (x * s).sum().backward()
    assert s.grad.dtype is pl.float64 and s.grad.item() == 3.0
    assert x.grad.tolist() == [3.0, 3.0]


@pytest.mark.parametrize(("a", "b"), list(itertools.product(DTYPES, repeat=2)))
def test_the_tier_table(a, b) -> None:
    """Tensor with dimensions against a 0-d tensor, and 0-d against 0-d."""
    da, db = getattr(pl, a), getattr(pl, b)
    assert promote_tiers([da, db], [2, 1]) is (
        da if da.category >= db.category else pl.ops.base.promote_types(da, db)
    )
    assert promote_tiers([da, db], [1, 1]) is pl.ops.base.promote_types(da, db)


@pytest.mark.skipif(torch is None, reason=TORCH_REASON)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("other", DTYPES + ["bool number", "int number", "float number"])
@pytest.mark.parametrize("kind", ["0-d", "dims"])
def test_result_dtypes_match_torch(dtype, other, kind) -> None:
    def make(lib, name, shape):
        if lib is pl:
            return pl.ones(shape, dtype=getattr(pl, name))
        return torch.ones(shape, dtype=getattr(torch, name))

    numbers = {"bool number": True, "int number": 3, "float number": 2.5}
    results = []
    for lib in (pl, torch):
        x = make(lib, dtype, (2,))
        y = numbers[other] if other in numbers else make(lib, other, () if kind == "0-d" else (2,))
        results.append(str((x * y).dtype).rsplit(".", 1)[-1])
    assert results[0] == results[1]


def test_a_python_integer_that_does_not_fit_raises(device) -> None:
    x = pl.tensor([1], dtype=pl.int32, device=device)
    with pytest.raises(OverflowError, match=r"2147483648 for b does not fit int32"):
        x + 2**31
    assert (x * (2**31 - 1)).item() == 2**31 - 1
    assert (x * 2.0**40).dtype is pl.float32  # a float number: float32, as PyTorch


def test_numpy_operands_are_tensors_of_their_dtype(device) -> None:
    x = pl.ones(2, device=device)
    for result in (x + np.ones(2), np.ones(2) + x):
        assert isinstance(result, pl.Tensor) and result.dtype is pl.float64
        assert result.device == device
    assert (x * np.float64(2.0)).dtype is pl.float32  # a NumPy scalar is a number
    with pytest.raises(TypeError, match="unsupported dtype"):
        x + np.ones(2, dtype=np.complex64)
