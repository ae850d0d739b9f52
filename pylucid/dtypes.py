r"""The dtypes of pylucid and PyTorch's type-promotion rules.

A :class:`DType` is backend-neutral: backends map it to their own type (``np.float32``,
``mx.float32``); bfloat16 on the CPU is ``ml_dtypes.bfloat16``, the NumPy dtype JAX uses.
Promotion follows PyTorch, not NumPy: the category (bool < integer < floating) decides first
and the width only within a category, so ``int64 + float32`` is ``float32`` (NumPy would say
float64) and a Python scalar never widens a tensor. float16 and bfloat16 have the same width
and neither holds the other: together they promote to float32.

=========  ======  =====  =====  =====  =======  ========  =======
\          bool    int32  int64  f16    bf16     float32   float64
=========  ======  =====  =====  =====  =======  ========  =======
bool       bool    int32  int64  f16    bf16     float32   float64
int32              int32  int64  f16    bf16     float32   float64
int64                     int64  f16    bf16     float32   float64
f16                              f16    float32  float32   float64
bf16                                    bf16     float32   float64
float32                                          float32   float64
float64                                                    float64
=========  ======  =====  =====  =====  =======  ========  =======
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence

import numpy as np

__all__ = [
    "DType",
    "bool_",
    "int32",
    "int64",
    "float16",
    "bfloat16",
    "float32",
    "float64",
    "default_float",
    "get_default_dtype",
    "set_default_dtype",
    "on_default_change",
    "finfo",
    "iinfo",
    "as_dtype",
    "names_dtype",
    "promote_types",
    "promote_tiers",
    "result_type",
]

_BOOL, _INT, _FLOAT = 0, 1, 2


class DType:
    """A tensor element type (one instance per type: compare with ``is``).

    Attributes
    ----------
    name : str
        The public name (``"float32"``).
    numpy : numpy.dtype
        The NumPy dtype used for CPU storage.
    category : int
        0 bool, 1 integer, 2 floating: the first key of type promotion.
    itemsize : int
        Bytes per element.
    is_floating_point : bool
        Whether the type is a floating-point type (only these can require grad).
    is_half : bool
        Whether the type is a 16-bit float (float16 or bfloat16).
    """

    __slots__ = (
        "name",
        "numpy",
        "category",
        "itemsize",
        "is_floating_point",
        "is_half",
        "is_signed",
    )
    #: PyTorch's flag: pylucid has no complex dtypes.
    is_complex = False

    def __init__(self, name: str, numpy: np.dtype, category: int) -> None:
        # Plain attributes, not properties: ops read them on every call.
        self.name, self.numpy, self.category = name, numpy, category
        self.itemsize = numpy.itemsize
        self.is_floating_point = category == _FLOAT
        self.is_half = self.is_floating_point and self.itemsize == 2
        self.is_signed = category != _BOOL

    def __repr__(self) -> str:
        return f"pylucid.{self.name}"

    def __reduce__(self) -> str:
        return self.name


bool_ = DType("bool", np.dtype(np.bool_), _BOOL)
int32 = DType("int32", np.dtype(np.int32), _INT)
int64 = DType("int64", np.dtype(np.int64), _INT)
float16 = DType("float16", np.dtype(np.float16), _FLOAT)
class _LazyNumPyDType(DType):
    """A DType whose NumPy dtype comes from a package imported on first use: bfloat16's is
    ``ml_dtypes.bfloat16``, whose extension takes half a second to load, so a program that
    never touches bfloat16 never loads it."""

    __slots__ = ("_module", "_attribute")

    def __init__(self, name: str, itemsize: int, category: int, module: str, attribute: str):
        self._module, self._attribute = module, attribute
        self.name, self.category, self.itemsize = name, category, itemsize
        self.is_floating_point = category == _FLOAT
        self.is_half = self.is_floating_point and itemsize == 2
        self.is_signed = category != _BOOL

    @property
    def numpy(self) -> np.dtype:  # type: ignore[override]
        """The NumPy dtype, importing its package the first time."""
        try:
            return _SLOT_NUMPY.__get__(self)
        except AttributeError:
            found = np.dtype(getattr(importlib.import_module(self._module), self._attribute))
            _SLOT_NUMPY.__set__(self, found)
            _BY_NUMPY[found] = self
            return found


_SLOT_NUMPY = DType.__dict__["numpy"]
bfloat16 = _LazyNumPyDType("bfloat16", 2, _FLOAT, "ml_dtypes", "bfloat16")
float32 = DType("float32", np.dtype(np.float32), _FLOAT)
float64 = DType("float64", np.dtype(np.float64), _FLOAT)

#: The dtype of Python floats in new tensors and of real-valued results of integer inputs;
#: read at call time (``dtypes.default_float``), changed by :func:`set_default_dtype`.
default_float = float32
_ALL = (bool_, int32, int64, float16, bfloat16, float32, float64)
#: DTypes by NumPy dtype; bfloat16 joins when its NumPy dtype is first asked for (or when
#: :func:`as_dtype` meets an ml_dtypes dtype, which means ml_dtypes is loaded).
_BY_NUMPY = {d.numpy: d for d in _ALL if d is not bfloat16}
_BY_NAME = {d.name: d for d in _ALL}
#: What caches a default-dtype decision registers to be emptied when the default changes.
_DEFAULT_LISTENERS: list[Callable[[], None]] = []


def get_default_dtype() -> DType:
    """The default floating dtype (float32 unless :func:`set_default_dtype` changed it)."""
    return default_float


def set_default_dtype(dtype: object) -> None:
    """Make ``dtype`` the default floating dtype, process-wide, as ``torch.set_default_dtype``:
    the dtype of ``pl.tensor([1.0])``, ``pl.zeros(3)``, ``pl.rand``, ``arange`` with a float
    and of real-valued ops (``log2``, ``mean``) of integer tensors.

    Raises
    ------
    TypeError
        For a dtype that is not floating point (PyTorch's rule).
    """
    global default_float
    chosen = as_dtype(dtype)
    if not chosen.is_floating_point:
        raise TypeError(
            f"set_default_dtype: only floating-point dtypes can be the default, got {chosen.name}"
        )
    default_float = chosen
    for clear in _DEFAULT_LISTENERS:
        clear()


def on_default_change(clear: Callable[[], None]) -> None:
    """Register ``clear`` (a cache's ``clear``) to run whenever the default dtype changes."""
    _DEFAULT_LISTENERS.append(clear)


def finfo(dtype: object = None) -> np.finfo:
    """Machine limits of a floating dtype (``eps``, ``max``, ``min``, ``tiny``, ``bits``),
    NumPy's (ml_dtypes' for bfloat16); the default dtype's when ``dtype`` is None."""
    chosen = default_float if dtype is None else as_dtype(dtype)
    if not chosen.is_floating_point:
        raise TypeError(f"finfo: {chosen.name} is not a floating-point dtype; use iinfo")
    if chosen is bfloat16:  # (NumPy's finfo knows no bfloat16)
        return importlib.import_module("ml_dtypes").finfo(chosen.numpy)
    return np.finfo(chosen.numpy)


def iinfo(dtype: object) -> np.iinfo:
    """Machine limits of an integer dtype (``max``, ``min``, ``bits``), NumPy's."""
    chosen = as_dtype(dtype)
    if chosen.category != _INT:
        raise TypeError(f"iinfo: {chosen.name} is not an integer dtype; use finfo")
    return np.iinfo(chosen.numpy)


def as_dtype(spec: object) -> DType:
    """Return the :class:`DType` named by ``spec``.

    Parameters
    ----------
    spec : DType, str, numpy dtype or Python type
        ``pl.float32``, ``"float32"``, ``np.float32``, ``float`` (float64), ``int`` (int64)
        or ``bool``, as PyTorch maps the Python types.

    Raises
    ------
    TypeError
        If ``spec`` names no supported dtype; the message lists the supported ones.
    """
    if isinstance(spec, DType):
        return spec
    if spec is float:
        return float64
    if spec is int:
        return int64
    if spec is bool:
        return bool_
    if isinstance(spec, str) and spec in _BY_NAME:
        return _BY_NAME[spec]
    try:
        numpy_dtype = np.dtype(spec)
    except TypeError:
        found = None
    else:
        found = _BY_NUMPY.get(numpy_dtype)
        if found is None and numpy_dtype.name == "bfloat16":  # (ml_dtypes is loaded)
            found = bfloat16 if bfloat16.numpy == numpy_dtype else None
    if found is None:
        supported = ", ".join(d.name for d in _ALL)
        raise TypeError(f"unsupported dtype {spec!r}; pylucid supports {supported}")
    return found


def names_dtype(spec: object) -> bool:
    """Whether ``spec`` names a dtype :func:`as_dtype` accepts."""
    try:
        as_dtype(spec)
    except TypeError:
        return False
    return True


def promote_types(a: DType, b: DType) -> DType:
    """Return the dtype of a binary op between tensors of dtypes ``a`` and ``b``.

    The higher category wins (bool < integer < floating); within a category the wider type.
    """
    if a.category != b.category:
        return a if a.category > b.category else b
    if a.itemsize == b.itemsize and a is not b:  # float16 with bfloat16
        return float32
    return a if a.itemsize >= b.itemsize else b


def _combine(higher: DType, lower: DType) -> DType:
    """PyTorch's ``combine_categories``: the dtype of a ``higher`` tier (tensors with
    dimensions over 0-d tensors, those over Python numbers) wins unless ``lower``'s category
    is higher; then they promote (an int tensor with a 0-d float64 tensor is float64)."""
    if higher.is_floating_point:
        return higher
    if higher is bool_ or lower.is_floating_point:
        return promote_types(higher, lower)
    return higher


def promote_tiers(dtypes: Sequence[DType], tiers: Sequence[int]) -> DType:
    """The result dtype of an op over operands of ``dtypes`` in three tiers, PyTorch's rule:
    2 for tensors with dimensions, 1 for 0-d tensors, 0 for Python numbers (each with the
    dtype of its category a number is lifted to). Within a tier the dtypes promote; a lower
    tier counts only when its category is higher than every higher tier's, so
    ``float16 tensor * 2.5`` is float16 and ``float32 tensor * 0-d float64`` float32."""
    result: DType | None = None
    for tier in (0, 1, 2):
        group: DType | None = None
        for dtype, t in zip(dtypes, tiers):
            if t == tier:
                group = dtype if group is None else promote_types(group, dtype)
        if group is not None:
            result = group if result is None else _combine(group, result)
    if result is None:
        raise ValueError("promote_tiers: no operands")
    return result


def scalar_category(value: object) -> int:
    """The promotion category of a Python scalar (bool, int or float)."""
    if isinstance(value, (bool, np.bool_)):
        return _BOOL
    if isinstance(value, (int, np.integer)):
        return _INT
    return _FLOAT


def result_type(*operands: DType | bool | int | float) -> DType:
    """Return the result dtype of an op over tensor dtypes and Python scalars.

    Tensor dtypes promote with :func:`promote_types`; a Python scalar only matters when its
    category is higher than every tensor's: then it gives that category's default type
    (float32 for a float, int64 for an int), as in PyTorch.
    """
    tensor_types = [d for d in operands if isinstance(d, DType)]
    result = tensor_types[0]
    for d in tensor_types[1:]:
        result = promote_types(result, d)
    for value in operands:
        if not isinstance(value, DType) and scalar_category(value) > result.category:
            result = default_float if scalar_category(value) == _FLOAT else int64
    return result
