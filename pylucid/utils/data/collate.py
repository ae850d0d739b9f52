"""Collation, as ``torch.utils.data.default_collate`` and ``default_convert``: samples into
batches of pylucid tensors.

Tensors made from NumPy arrays and Python numbers are created on the current backend
(:func:`pylucid.backends.current`), as ``pylucid.tensor`` creates them; tensors in the
samples stay where they are.
"""

from __future__ import annotations

import collections.abc
import copy
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from pylucid.dtypes import as_dtype, float64
from pylucid.factories import tensor
from pylucid.ops.shape import stack
from pylucid.tensor import Tensor
from pylucid.utils.data.dataset import GatheredSamples

__all__ = ["collate", "default_collate", "default_collate_fn_map", "default_convert"]

CollateFnMap = dict[type | tuple[type, ...], Callable[..., Any]]

_ERROR = (
    "default_collate: batch must contain tensors, numpy arrays, numbers, dicts or lists; found {}"
)


def _is_text_array(array: np.ndarray) -> bool:
    """Whether ``array`` holds strings, bytes or objects (which make no tensor)."""
    return array.dtype.kind in "SaUO"


def _array_tensor(op: str, array: np.ndarray) -> Tensor:
    """``array`` as a tensor on the current backend, or a TypeError naming ``op`` for a dtype
    pylucid lacks."""
    try:
        as_dtype(array.dtype)
    except TypeError as exc:
        raise TypeError(
            f"{op}: cannot make a pylucid tensor from a NumPy array of dtype {array.dtype} "
            f"({exc}); convert it in the dataset, e.g. array.astype(np.float32)"
        ) from None
    return tensor(array)


def default_convert(data: Any) -> Any:
    """``data`` with each NumPy array and NumPy scalar in it made a pylucid tensor.

    Mappings, named tuples and sequences are converted element by element (a plain tuple
    becomes a list, as in PyTorch); tensors, arrays of strings or objects and everything
    else are returned as they are. The :class:`~pylucid.utils.data.DataLoader` applies it
    to each sample when it does not batch (``batch_size=None``).
    """
    if isinstance(data, Tensor):
        return data
    if isinstance(data, (np.ndarray, np.bool_, np.number)):
        if isinstance(data, np.ndarray) and _is_text_array(data):
            return data
        return _array_tensor("default_convert", np.asarray(data))
    if isinstance(data, collections.abc.Mapping):
        try:
            if isinstance(data, collections.abc.MutableMapping):
                clone = copy.copy(data)
                clone.update({key: default_convert(data[key]) for key in data})
                return clone
            return type(data)({key: default_convert(data[key]) for key in data})
        except TypeError:
            return {key: default_convert(data[key]) for key in data}
    if isinstance(data, tuple) and hasattr(data, "_fields"):  # a named tuple
        return type(data)(*(default_convert(d) for d in data))
    if isinstance(data, tuple):
        return [default_convert(d) for d in data]
    if isinstance(data, collections.abc.Sequence) and not isinstance(data, (str, bytes)):
        try:
            if isinstance(data, collections.abc.MutableSequence):
                clone = copy.copy(data)
                for i, d in enumerate(data):
                    clone[i] = default_convert(d)
                return clone
            return type(data)([default_convert(d) for d in data])
        except TypeError:
            return [default_convert(d) for d in data]
    return data


def collate(batch: Sequence[Any], *, collate_fn_map: CollateFnMap | None = None) -> Any:
    """Collate a batch (a sequence of samples of one structure) into one structure of
    batched leaves, as PyTorch's ``collate``.

    Each sample's leaves are found by walking mappings (a mapping of the collated values
    per key), named tuples (the same named tuple), and other sequences (a list for a tuple,
    else the same type when it can be built, else a list). A leaf type is collated by the
    function ``collate_fn_map`` gives for it (looked up by exact type, then by ``isinstance``
    in the map's order), called as ``fn(batch, collate_fn_map=collate_fn_map)``.

    Raises
    ------
    RuntimeError
        For sequence samples of different lengths.
    TypeError
        For a leaf whose type ``collate_fn_map`` does not handle.
    """
    if isinstance(batch, GatheredSamples):  # a TensorDataset's batch, already gathered
        return list(batch.columns)
    elem = batch[0]
    elem_type = type(elem)
    if collate_fn_map is not None:
        if elem_type in collate_fn_map:
            return collate_fn_map[elem_type](batch, collate_fn_map=collate_fn_map)
        for collate_type, fn in collate_fn_map.items():
            if isinstance(elem, collate_type):
                return fn(batch, collate_fn_map=collate_fn_map)
    if isinstance(elem, collections.abc.Mapping):
        collated = {
            key: collate([d[key] for d in batch], collate_fn_map=collate_fn_map) for key in elem
        }
        try:
            if isinstance(elem, collections.abc.MutableMapping):
                clone = copy.copy(elem)
                clone.update(collated)
                return clone
            return elem_type(collated)
        except TypeError:
            return collated
    if isinstance(elem, tuple) and hasattr(elem, "_fields"):  # a named tuple
        return elem_type(
            *(collate(samples, collate_fn_map=collate_fn_map) for samples in zip(*batch))
        )
    if isinstance(elem, collections.abc.Sequence) and not isinstance(elem, (str, bytes)):
        size = len(elem)
        for position, sample in enumerate(batch):
            if len(sample) != size:
                raise RuntimeError(
                    f"collate: each element in list of batch should be of equal size; "
                    f"batch[0] has {size} elements, batch[{position}] {len(sample)}"
                )
        columns = [collate(samples, collate_fn_map=collate_fn_map) for samples in zip(*batch)]
        if isinstance(elem, tuple):
            return columns
        try:
            if isinstance(elem, collections.abc.MutableSequence):
                clone = copy.copy(elem)
                for i, column in enumerate(columns):
                    clone[i] = column
                return clone
            return elem_type(columns)
        except TypeError:
            return columns
    raise TypeError(_ERROR.format(elem_type))


def collate_tensor_fn(
    batch: Sequence[Tensor], *, collate_fn_map: CollateFnMap | None = None
) -> Tensor:
    """Tensors stacked along a new first dimension (:func:`pylucid.stack`)."""
    return stack(batch, 0)


def collate_numpy_array_fn(
    batch: Sequence[np.ndarray], *, collate_fn_map: CollateFnMap | None = None
) -> Tensor:
    """NumPy arrays stacked into one tensor (one conversion for the whole batch)."""
    elem = batch[0]
    if _is_text_array(elem):
        raise TypeError(_ERROR.format(elem.dtype))
    for position, array in enumerate(batch):
        if array.shape != elem.shape:
            raise ValueError(
                f"default_collate: batch[{position}] is an array of shape {array.shape} but "
                f"batch[0] has {elem.shape}; stacked arrays must have one shape"
            )
    return _array_tensor("default_collate", np.stack(batch))


def collate_numpy_scalar_fn(
    batch: Sequence[Any], *, collate_fn_map: CollateFnMap | None = None
) -> Tensor:
    """NumPy scalars as a 1-d tensor of their (promoted) dtype."""
    return _array_tensor("default_collate", np.asarray(batch))


def collate_float_fn(
    batch: Sequence[float], *, collate_fn_map: CollateFnMap | None = None
) -> Tensor:
    """Python floats as a float64 tensor (as PyTorch)."""
    return tensor(batch, dtype=float64)


def collate_int_fn(batch: Sequence[int], *, collate_fn_map: CollateFnMap | None = None) -> Tensor:
    """Python ints as an int64 tensor (bools as a bool tensor)."""
    return tensor(batch)


def collate_str_fn(
    batch: Sequence[Any], *, collate_fn_map: CollateFnMap | None = None
) -> Sequence[Any]:
    """Strings and bytes as they are (the batch, a list)."""
    return batch


#: The leaf collate functions of :func:`default_collate`, in lookup order (NumPy scalars come
#: before ``float``, which ``numpy.float64`` subclasses). Add a type to extend it.
default_collate_fn_map: CollateFnMap = {
    Tensor: collate_tensor_fn,
    np.ndarray: collate_numpy_array_fn,
    (np.bool_, np.number, np.object_): collate_numpy_scalar_fn,
    float: collate_float_fn,
    int: collate_int_fn,
    str: collate_str_fn,
    bytes: collate_str_fn,
}


def default_collate(batch: Sequence[Any]) -> Any:
    """Collate a list of samples into a batch, as ``torch.utils.data.default_collate``.

    ============================  ==================================================
    samples of                    batch
    ============================  ==================================================
    Tensor                        the tensors stacked along a new first dimension
    NumPy array                   the arrays stacked, as a tensor of their dtype
    NumPy scalar                  a 1-d tensor of their dtype
    float                         a float64 tensor
    int (bool)                    an int64 (bool) tensor
    str, bytes                    the list unchanged
    Mapping                       the mapping of each key's collated values
    named tuple                   the named tuple of each field's collated values
    tuple, list, other sequence   a list (a tuple), else the type, of the columns
    ============================  ==================================================

    The samples of a :class:`~pylucid.utils.data.TensorDataset` come gathered (one index
    op per tensor), and collate to the list of the gathered tensors without a stack.

    Raises
    ------
    TypeError
        For samples of another type, such as None, or arrays of strings or objects.
    RuntimeError
        For sequence samples of different lengths.
    ValueError
        For tensors or arrays of different shapes.
    """
    return collate(batch, collate_fn_map=default_collate_fn_map)
