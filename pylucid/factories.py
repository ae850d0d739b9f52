"""Tensor factories: ``tensor``, ``zeros``, ``ones``, ``full``, ``arange``, ``rand``, ...

``device`` accepts ``"cpu"``, ``"gpu"`` or a backend name; without it the current backend
is used (see :func:`pylucid.backends.current`). Random factories draw on the host from a
:class:`pylucid.Generator` (``generator=``, else the default one that :func:`manual_seed`
seeds), so a seed gives the same numbers on every backend.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from pylucid import backends
from pylucid import dtypes as _dtypes
from pylucid.backends.base import Backend
from pylucid.compat import differs
from pylucid.dtypes import DType, as_dtype, bool_, int64
from pylucid.generator import Generator, default_generator, draw_source
from pylucid.tensor import Tensor

__all__ = [
    "tensor",
    "from_numpy",
    "zeros",
    "ones",
    "empty",
    "empty_like",
    "eye",
    "full",
    "full_like",
    "linspace",
    "zeros_like",
    "ones_like",
    "arange",
    "rand",
    "randn",
    "randint",
    "randperm",
    "rand_like",
    "randn_like",
    "randint_like",
    "manual_seed",
]


def _backend(device: str | None) -> Backend:
    return backends.current() if device is None else backends.resolve(device)


def _floating_default(dtype: Any) -> DType:
    """``dtype``, or the default floating dtype (:func:`pylucid.set_default_dtype`) for None."""
    return _dtypes.default_float if dtype is None else as_dtype(dtype)


def _shape(shape: tuple[Any, ...]) -> tuple[int, ...]:
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = tuple(shape[0])
    if not all(isinstance(n, (int, np.integer)) and n >= 0 for n in shape):
        raise ValueError(f"a shape is a tuple of non-negative integers, got {shape!r}")
    return tuple(int(n) for n in shape)


def _wrap(array: np.ndarray, dtype: DType, device: str | None, requires_grad: bool) -> Tensor:
    backend = _backend(device)
    return Tensor._make(backend.from_numpy(array, dtype), backend, dtype, requires_grad)


def _as_array(data: Any) -> np.ndarray:
    """``data`` (a number or nested sequence) as a NumPy array, refusing what NumPy would
    silently convert: tensors (stack them: a copy would drop their graph), objects, and
    Python integers beyond int64 (which NumPy turns into float64 in a list)."""
    if _holds_tensors(data):
        raise TypeError(
            "tensor: the data holds tensors; join them with pylucid.stack(tensors) (or "
            "pylucid.concatenate), which keeps their gradients"
        )
    try:
        array = np.asarray(data)
    except ValueError as exc:  # ragged nested sequences
        raise TypeError(f"tensor: cannot make a tensor from this data: {exc}") from None
    if array.dtype == object or array.dtype.kind == "u" or array.dtype.kind == "f":
        elements = np.asarray(data, dtype=object).reshape(-1) if array.dtype.kind != "f" else ()
        if array.dtype.kind == "f" and isinstance(data, (list, tuple)):
            elements = _integers_beyond_int64(data)
        if len(elements) and all(isinstance(e, int) for e in elements):
            big = max(elements, key=abs)
            raise OverflowError(
                f"tensor: the integer {big} does not fit int64, the widest integer dtype "
                f"(range -2**63..2**63 - 1)"
            )
        if array.dtype == object:
            kinds = sorted({type(e).__name__ for e in elements})
            raise TypeError(
                f"tensor: cannot make a tensor from data of dtype object (elements of type "
                f"{', '.join(kinds)}); pylucid holds bool, integer and floating numbers"
            )
    return array


def _holds_tensors(data: Any) -> bool:
    """Whether a nested sequence holds tensors: at its top level, or first along its first
    elements (a full walk would cost a Python step per number)."""
    while isinstance(data, (list, tuple)):
        if any(isinstance(e, Tensor) for e in data):
            return True
        data = data[0] if data else None
    return False


def _integers_beyond_int64(data: list | tuple) -> tuple[Any, ...]:
    """The elements of ``data`` when they are all Python integers, one of them beyond
    int64 (NumPy would store them as float64), else ()."""
    try:
        np.asarray(data, dtype=np.int64)
    except ValueError:  # nan or inf: floats
        return ()
    except OverflowError:
        elements = np.asarray(data, dtype=object).reshape(-1)
        if all(isinstance(e, int) and not isinstance(e, bool) for e in elements):
            return tuple(elements)
    return ()


def _converted(op: str, array: np.ndarray, dtype: DType) -> np.ndarray:
    """A copy of ``array`` as ``dtype``, refusing values an integer dtype cannot hold (NumPy
    would wrap them around); beyond a float dtype's range values become inf, as in
    PyTorch."""
    integer = not dtype.is_floating_point and dtype is not bool_
    if integer and array.size and array.dtype.kind in "iufb":
        limits = np.iinfo(dtype.numpy)
        if array.dtype.kind == "f" and not np.isfinite(array).all():
            raise ValueError(f"{op}: nan and inf cannot be converted to {dtype.name}")
        low, high = array.min(), array.max()
        if low < limits.min or high > limits.max:
            value = int(high) if high > limits.max else int(low)
            raise OverflowError(
                f"{op}: the value {value} does not fit {dtype.name} (range {limits.min}.."
                f"{limits.max})"
            )
    with np.errstate(over="ignore"):
        return np.array(array, dtype=dtype.numpy, copy=True)


def tensor(
    data: Any,
    dtype: DType | Any | None = None,
    device: str | None = None,
    requires_grad: bool = False,
) -> Tensor:
    """A new tensor holding a copy of ``data``.

    Parameters
    ----------
    data : number, nested sequence, NumPy array or Tensor
        The values. Python floats give float32, ints int64, bools bool; a NumPy array keeps
        its dtype.
    dtype : dtype, optional
        Convert to this dtype.
    device : str, optional
        ``"cpu"``, ``"gpu"`` or a backend name.
    requires_grad : bool
        Track gradients (floating dtypes only).

    Raises
    ------
    OverflowError
        For an integer value the dtype cannot hold (NumPy and PyTorch wrap some around).
    TypeError
        For data that holds tensors (use :func:`pylucid.stack`) or other objects.
    """
    if isinstance(data, Tensor):
        array = data._backend.to_numpy(data._storage)
    elif isinstance(data, (np.ndarray, np.generic)):
        array = np.asarray(data)
        if array.dtype == object:
            raise TypeError("tensor: cannot make a tensor from a NumPy array of dtype object")
    else:
        array = _as_array(data)
    if dtype is None:
        if isinstance(data, (Tensor, np.ndarray, np.generic)):
            dtype = as_dtype(array.dtype)
        elif array.dtype.kind == "f":
            dtype = _dtypes.default_float
        elif array.dtype.kind in "iu":
            dtype = int64
        else:
            dtype = as_dtype(array.dtype)
    dtype = as_dtype(dtype)
    return _wrap(_converted("tensor", array, dtype), dtype, device, requires_grad)


def from_numpy(array: np.ndarray) -> Tensor:
    """A CPU tensor sharing memory with ``array`` (no copy; writes show on both sides)."""
    if not isinstance(array, np.ndarray):
        raise TypeError(f"from_numpy: expected a numpy.ndarray, got {type(array).__name__}")
    dtype = as_dtype(array.dtype)
    backend = backends.resolve("cpu")
    return Tensor._make(array, backend, dtype)


def full(
    shape: Sequence[int] | int,
    fill_value: float,
    dtype: DType | Any | None = None,
    device: str | None = None,
    requires_grad: bool = False,
) -> Tensor:
    """A tensor of ``shape`` filled with ``fill_value`` (dtype inferred from it if None)."""
    dtype = as_dtype(dtype) if dtype is not None else tensor(fill_value).dtype
    backend = _backend(device)
    shape = _shape((shape,) if isinstance(shape, int) else tuple(shape))
    value = _converted("full", np.asarray(fill_value), dtype)[()]
    return Tensor._make(backend.full(shape, value, dtype), backend, dtype, requires_grad)


def zeros(
    *shape: Any,
    dtype: DType | Any | None = None,
    device: str | None = None,
    requires_grad: bool = False,
) -> Tensor:
    """A tensor of zeros (of the default dtype unless ``dtype`` says otherwise); ``zeros(2,
    3)`` and ``zeros((2, 3))`` are the same."""
    return full(_shape(shape), 0, _floating_default(dtype), device, requires_grad)


def ones(
    *shape: Any,
    dtype: DType | Any | None = None,
    device: str | None = None,
    requires_grad: bool = False,
) -> Tensor:
    """A tensor of ones (of the default dtype unless ``dtype`` says otherwise); ``ones(2,
    3)`` and ``ones((2, 3))`` are the same."""
    return full(_shape(shape), 1, _floating_default(dtype), device, requires_grad)


def _like(x: Tensor, value: float, dtype: Any, device: str | None, requires_grad: bool) -> Tensor:
    dtype = x.dtype if dtype is None else as_dtype(dtype)
    return full(x.shape, value, dtype, device or x._backend.name, requires_grad)


def zeros_like(
    x: Tensor,
    dtype: DType | Any | None = None,
    device: str | None = None,
    requires_grad: bool = False,
) -> Tensor:
    """Zeros with ``x``'s shape, and its dtype and device unless given."""
    return _like(x, 0, dtype, device, requires_grad)


def ones_like(
    x: Tensor,
    dtype: DType | Any | None = None,
    device: str | None = None,
    requires_grad: bool = False,
) -> Tensor:
    """Ones with ``x``'s shape, and its dtype and device unless given."""
    return _like(x, 1, dtype, device, requires_grad)


def full_like(
    x: Tensor,
    fill_value: float,
    dtype: DType | Any | None = None,
    device: str | None = None,
    requires_grad: bool = False,
) -> Tensor:
    """``fill_value`` with ``x``'s shape, and its dtype and device unless given."""
    return _like(x, fill_value, dtype, device, requires_grad)


@differs(
    "holds zeros, where PyTorch leaves the memory uninitialised"
)
def empty(
    *shape: Any,
    dtype: DType | Any | None = None,
    device: str | None = None,
    requires_grad: bool = False,
) -> Tensor:
    """A tensor to be overwritten: PyTorch leaves its values undefined; here they are zeros
    (MLX arrays cannot be allocated uninitialised, and NumPy's garbage would make runs
    differ), so reading one is deterministic, not an error."""
    return zeros(*shape, dtype=dtype, device=device, requires_grad=requires_grad)


def empty_like(
    x: Tensor,
    dtype: DType | Any | None = None,
    device: str | None = None,
    requires_grad: bool = False,
) -> Tensor:
    """:func:`empty` with ``x``'s shape, and its dtype and device unless given."""
    return _like(x, 0, dtype, device, requires_grad)


def eye(
    n: int,
    m: int | None = None,
    dtype: DType | Any | None = None,
    device: str | None = None,
    requires_grad: bool = False,
) -> Tensor:
    """The ``n x m`` identity (``m = n`` if None): ones on the diagonal."""
    for name, size in (("n", n), ("m", n if m is None else m)):
        if not isinstance(size, (int, np.integer)) or isinstance(size, bool) or size < 0:
            raise ValueError(f"eye: {name} must be a non-negative integer, got {size!r}")
    dtype = _floating_default(dtype)
    return _wrap(np.eye(n, m, dtype=dtype.numpy), dtype, device, requires_grad)


def linspace(
    start: float,
    end: float,
    steps: int,
    dtype: DType | Any | None = None,
    device: str | None = None,
    requires_grad: bool = False,
) -> Tensor:
    """``steps`` values evenly spaced from ``start`` to ``end``, both included (float32
    unless ``dtype`` says otherwise), as PyTorch computes them: in the dtype (float32 for
    the half dtypes, float64 for integers, truncated), the first half as ``start + i step``
    and the second as ``end - (steps - 1 - i) step``, so that both ends are exact."""
    if not isinstance(steps, (int, np.integer)) or isinstance(steps, bool) or steps < 0:
        raise ValueError(f"linspace: steps must be a non-negative integer, got {steps!r}")
    dtype = _dtypes.default_float if dtype is None else as_dtype(dtype)
    floating = dtype.is_floating_point
    work = np.float32 if dtype.is_half else dtype.numpy.type if floating else np.float64
    first, last, count = work(start), work(end), int(steps)
    step = (last - first) / work(count - 1) if count > 1 else work(0)
    index = np.arange(count)
    with np.errstate(over="ignore", invalid="ignore"):
        values = np.where(
            (index < count // 2) | (count == 1),  # (one step: start, as PyTorch)
            first + step * index.astype(work),
            last - step * (count - 1 - index).astype(work),
        )
    return _wrap(_converted("linspace", values, dtype), dtype, device, requires_grad)


def arange(
    start: float,
    stop: float | None = None,
    step: float = 1,
    dtype: DType | Any | None = None,
    device: str | None = None,
    requires_grad: bool = False,
) -> Tensor:
    """Values from ``start`` to ``stop`` (excluded) by ``step``; ``arange(n)`` is 0..n-1.

    Integer arguments give int64, any float argument float32.
    """
    if stop is None:
        start, stop = 0, start
    if step == 0:
        raise ValueError("arange: step must not be zero")
    if dtype is None:
        integral = all(isinstance(v, (int, np.integer)) for v in (start, stop, step))
        dtype = int64 if integral else _dtypes.default_float
    dtype = as_dtype(dtype)
    return _wrap(np.arange(start, stop, step, dtype=dtype.numpy), dtype, device, requires_grad)


@differs(
    "draws from NumPy's PCG64 (pylucid.Generator): the same seed does not give PyTorch's "
    "numbers; load PyTorch's weights to start from them"
)
def manual_seed(seed: int) -> Generator:
    """Seed :data:`pylucid.default_generator`, behind the random factories and the samplers
    of :mod:`pylucid.utils.data` when they are given no ``generator``; return it.

    Raises
    ------
    TypeError
        For a seed that is not an integer.
    ValueError
        For a seed outside ``-2**63..2**64 - 1``.
    """
    return default_generator.manual_seed(seed)


def _random(
    kind: str,
    shape: tuple[Any, ...],
    dtype: Any,
    device: str | None,
    rg: bool,
    generator: Generator | None,
) -> Tensor:
    source = draw_source(generator, kind)
    dtype = _floating_default(dtype)
    if not dtype.is_floating_point:
        raise TypeError(f"{kind}: dtype must be floating, got {dtype.name}")
    shape = _shape(shape)
    if not dtype.is_half:
        draw = source.random if kind == "rand" else source.standard_normal
        return _wrap(draw(shape, dtype=dtype.numpy), dtype, device, rg)
    # NumPy draws float32 and float64 only. A half rand takes the multiples of 2**-p below 1
    # (p: the dtype's significand bits), each exact, so rounding never gives 1; a half randn
    # rounds float32 draws.
    if kind == "rand":
        bits = _dtypes.finfo(dtype).nmant + 1  # NumPy's finfo knows no bfloat16
        drawn = source.integers(0, 1 << bits, size=shape) * 2.0**-bits
    else:
        drawn = source.standard_normal(shape, dtype=np.float32)
    return _wrap(drawn.astype(dtype.numpy), dtype, device, rg)


@differs(
    "draws from NumPy's PCG64 (pylucid.Generator): the same seed does not give PyTorch's "
    "numbers; load PyTorch's weights to start from them"
)
def rand(
    *shape: Any,
    generator: Generator | None = None,
    dtype: DType | Any | None = None,
    device: str | None = None,
    requires_grad: bool = False,
) -> Tensor:
    """Uniform samples in [0, 1), drawn from ``generator`` (default:
    :data:`pylucid.default_generator`)."""
    return _random("rand", shape, dtype, device, requires_grad, generator)


@differs(
    "draws from NumPy's PCG64 (pylucid.Generator): the same seed does not give PyTorch's "
    "numbers; load PyTorch's weights to start from them"
)
def randn(
    *shape: Any,
    generator: Generator | None = None,
    dtype: DType | Any | None = None,
    device: str | None = None,
    requires_grad: bool = False,
) -> Tensor:
    """Standard normal samples, drawn from ``generator`` (default:
    :data:`pylucid.default_generator`)."""
    return _random("randn", shape, dtype, device, requires_grad, generator)


def _integer_dtype(op: str, dtype: Any, largest: int, smallest: int = 0) -> DType:
    """``dtype`` checked to be integer or floating and, if integer, to hold
    ``smallest..largest``."""
    dtype = as_dtype(dtype)
    if dtype is bool_:
        raise TypeError(f"{op}: dtype must be an integer or floating dtype, got bool")
    if not dtype.is_floating_point:
        limits = np.iinfo(dtype.numpy)
        if smallest < limits.min or largest > limits.max:
            raise ValueError(
                f"{op}: the values {smallest}..{largest} do not fit {dtype.name} (range "
                f"{limits.min}..{limits.max})"
            )
    return dtype


def _require_int(op: str, name: str, value: Any) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{op}: {name} must be an integer, got {type(value).__name__} {value!r}")
    return int(value)


@differs(
    "draws from NumPy's PCG64 (pylucid.Generator): the same seed does not give PyTorch's "
    "numbers; load PyTorch's weights to start from them"
)
def randint(
    low: int,
    high: int | Sequence[int] | None = None,
    size: Sequence[int] | int | None = None,
    *,
    generator: Generator | None = None,
    dtype: DType | Any = int64,
    device: str | None = None,
    requires_grad: bool = False,
) -> Tensor:
    """Integers drawn uniformly from ``low..high - 1``, as ``torch.randint``.

    Called as ``randint(low, high, size)``, ``randint(high, size)`` or
    ``randint(high, size=size)`` (``low`` is then 0).

    Parameters
    ----------
    low, high : int
        The range: ``low`` included, ``high`` excluded.
    size : sequence of int
        The shape.
    generator : Generator, optional
        Draw from it instead of :data:`pylucid.default_generator`.
    dtype : dtype
        int64 by default; a floating dtype holds the drawn integers as floats.

    Raises
    ------
    ValueError
        Unless ``low < high``, or when ``dtype`` cannot hold the range.
    TypeError
        For bounds that are not integers, or a missing ``size``.
    """
    if size is None and isinstance(high, (tuple, list)):  # randint(high, size)
        low, high, size = 0, low, high
    elif high is None:  # randint(high, size=size)
        low, high = 0, low
    if size is None:
        raise TypeError("randint: missing the size argument, e.g. randint(0, 10, (3,))")
    low, high = _require_int("randint", "low", low), _require_int("randint", "high", high)
    if low >= high:
        raise ValueError(f"randint: expected low < high, got low={low} and high={high}")
    dtype = _integer_dtype("randint", dtype, high - 1, low)
    shape = _shape((size,) if isinstance(size, (int, np.integer)) else (tuple(size),))
    drawn = draw_source(generator, "randint").integers(low, high, size=shape, dtype=np.int64)
    return _wrap(drawn.astype(dtype.numpy), dtype, device, requires_grad)


def _random_like(
    draw: Callable[..., Tensor], x: Tensor, generator: Generator | None, dtype: Any,
    device: str | None, requires_grad: bool,
) -> Tensor:  # fmt: skip
    return draw(*x.shape, generator=generator, dtype=dtype or x.dtype,
                device=device or x._backend.name, requires_grad=requires_grad)  # fmt: skip


def rand_like(
    x: Tensor,
    *,
    generator: Generator | None = None,
    dtype: DType | Any | None = None,
    device: str | None = None,
    requires_grad: bool = False,
) -> Tensor:
    """:func:`rand` with ``x``'s shape, and its dtype and device unless given."""
    return _random_like(rand, x, generator, dtype, device, requires_grad)


def randn_like(
    x: Tensor,
    *,
    generator: Generator | None = None,
    dtype: DType | Any | None = None,
    device: str | None = None,
    requires_grad: bool = False,
) -> Tensor:
    """:func:`randn` with ``x``'s shape, and its dtype and device unless given."""
    return _random_like(randn, x, generator, dtype, device, requires_grad)


def randint_like(
    x: Tensor,
    low: int,
    high: int | None = None,
    *,
    generator: Generator | None = None,
    dtype: DType | Any | None = None,
    device: str | None = None,
    requires_grad: bool = False,
) -> Tensor:
    """:func:`randint` with ``x``'s shape (``randint_like(x, high)`` or ``(x, low, high)``),
    and its dtype and device unless given."""
    if high is None:
        low, high = 0, low
    return randint(low, high, x.shape, generator=generator, dtype=dtype or x.dtype,
                   device=device or x._backend.name, requires_grad=requires_grad)  # fmt: skip


@differs(
    "draws from NumPy's PCG64 (pylucid.Generator): the same seed does not give PyTorch's "
    "numbers; load PyTorch's weights to start from them"
)
def randperm(
    n: int,
    *,
    generator: Generator | None = None,
    dtype: DType | Any = int64,
    device: str | None = None,
    requires_grad: bool = False,
) -> Tensor:
    """A random permutation of ``0..n - 1``, as ``torch.randperm``.

    Parameters
    ----------
    n : int
        How many integers (non-negative).
    generator : Generator, optional
        Draw from it instead of :data:`pylucid.default_generator`.
    dtype : dtype
        int64 by default.

    Raises
    ------
    ValueError
        For a negative ``n``, or when ``dtype`` cannot hold ``n - 1``.
    """
    n = _require_int("randperm", "n", n)
    if n < 0:
        raise ValueError(f"randperm: n must be non-negative, got {n}")
    dtype = _integer_dtype("randperm", dtype, max(n - 1, 0))
    drawn = draw_source(generator, "randperm").permutation(n)
    return _wrap(drawn.astype(dtype.numpy), dtype, device, requires_grad)
