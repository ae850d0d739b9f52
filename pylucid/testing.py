"""``pylucid.testing.assert_close``: PyTorch's tensor comparison for tests, with its default
tolerances per dtype (float16 1e-3/1e-5, bfloat16 1.6e-2/1e-5, float32 1.3e-6/1e-5, float64
1e-7/1e-7; integers and bool exactly)."""

from __future__ import annotations

from typing import Any

import numpy as np

from pylucid.tensor import Tensor

__all__ = ["assert_allclose", "assert_close"]

#: PyTorch's default (rtol, atol) by dtype name.
_DEFAULTS = {
    "float16": (1e-3, 1e-5),
    "bfloat16": (1.6e-2, 1e-5),
    "float32": (1.3e-6, 1e-5),
    "float64": (1e-7, 1e-7),
}


def _values(x: Any) -> np.ndarray:
    return x.numpy() if isinstance(x, Tensor) else np.asarray(x)


def assert_close(
    actual: Any,
    expected: Any,
    *,
    rtol: float | None = None,
    atol: float | None = None,
    equal_nan: bool = False,
    check_dtype: bool = True,
    msg: str | None = None,
) -> None:
    """Raise AssertionError unless ``actual`` and ``expected`` (tensors, arrays or numbers,
    or sequences of them) have one shape and ``|actual - expected| <= atol + rtol
    |expected|`` elementwise; the tolerances default by dtype, as PyTorch's."""
    if isinstance(expected, (list, tuple)) and not isinstance(actual, Tensor):
        if len(actual) != len(expected):
            raise AssertionError(msg or f"lengths differ: {len(actual)} != {len(expected)}")
        for a, e in zip(actual, expected):
            assert_close(a, e, rtol=rtol, atol=atol, equal_nan=equal_nan,
                         check_dtype=check_dtype, msg=msg)  # fmt: skip
        return
    if check_dtype and isinstance(actual, Tensor) and isinstance(expected, Tensor):
        assert actual.dtype is expected.dtype, msg or (
            f"dtypes differ: {actual.dtype.name} != {expected.dtype.name}"
        )
    a, e = _values(actual), _values(expected)
    name = actual.dtype.name if isinstance(actual, Tensor) else str(a.dtype)
    default = _DEFAULTS.get(name, (0.0, 0.0))
    np.testing.assert_allclose(
        a.astype(np.float64) if a.dtype.kind == "f" or a.dtype.name == "bfloat16" else a,
        e.astype(np.float64) if e.dtype.kind == "f" or e.dtype.name == "bfloat16" else e,
        rtol=default[0] if rtol is None else rtol,
        atol=default[1] if atol is None else atol,
        equal_nan=equal_nan,
        err_msg=msg or "",
    )


def assert_allclose(
    actual: Any,
    expected: Any,
    rtol: float | None = None,
    atol: float | None = None,
    equal_nan: bool = True,
    msg: str = "",
) -> None:
    """PyTorch's deprecated ``assert_allclose``: :func:`assert_close` without the dtype
    check, NaN equal to NaN."""
    assert_close(actual, expected, rtol=rtol, atol=atol, equal_nan=equal_nan,
                 check_dtype=False, msg=msg or None)  # fmt: skip
