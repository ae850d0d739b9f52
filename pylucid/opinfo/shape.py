"""Op records of the ``shape`` and ``indexing`` families (and of the embedding op, which
``x[int_tensor]`` along one dimension is too)."""

from __future__ import annotations

import numpy as np

import pylucid as pl
from pylucid.opinfo.records import OpInfo, torch_module, torch_op, uniform

_X = (uniform(-5, 5),)


def _setitem_reference(x: np.ndarray, v: np.ndarray) -> np.ndarray:
    out = x.copy()
    out[..., [2, 0, 2]] = v  # NumPy keeps the last of repeated writes
    return out


def _torch_getitem(x):
    """``x[[2, 0, 2, -1], ..., ::-2]`` with PyTorch, which has no negative steps: the last
    axis flipped then stepped by 2 picks the same elements in the same order (the index
    keeps its two parts, so that a 1-d ``x`` is refused as by pylucid)."""
    _check_bound(x, 0, 3)
    return torch_module().flip(x[[2, 0, 2, -1], ..., :], dims=(-1,))[..., ::2]


def _torch_concatenate(a, b, c):
    """``concatenate([a, b, c], axis=-1)`` with PyTorch, refusing tensors of different ranks
    as NumPy and pylucid do (PyTorch's ``cat`` skips 1-d empty tensors, a legacy rule)."""
    if len({a.dim(), b.dim(), c.dim()}) > 1:
        raise ValueError("concatenate: tensors of different ranks")
    return torch_module().cat([a, b, c], dim=-1)


def _check_bound(x, axis: int, size: int) -> None:
    """Refuse, as NumPy and pylucid do, an index ``size - 1`` beyond ``x``'s axis: PyTorch
    skips the bounds check where ``x`` has no elements."""
    if x.shape[axis] < size:
        raise IndexError(f"index {size - 1} is out of range for an axis of size {x.shape[axis]}")


def _torch_setitem(x, v):
    """``setitem(x, (..., [2, 0, 2]), v)`` with PyTorch: its writes to a repeated index are
    in no defined order, so the last write of each column, the one NumPy and pylucid keep,
    is written alone (column 0 from v's column 1, column 2 from v's column 2)."""
    _check_bound(x, -1, 3)
    selection = x[..., [2, 0, 2]]
    extra = v.dim() - selection.dim()  # NumPy accepts leading size-1 dimensions in v
    if any(n != 1 for n in v.shape[:extra]):
        raise ValueError(f"a value of shape {tuple(v.shape)} does not fit {tuple(x.shape)}")
    v = v.reshape(v.shape[extra:]) if extra > 0 else v
    v = v.broadcast_to(selection.shape)
    out = x.clone()
    out[..., [0, 2]] = v[..., [1, 2]]
    return out


#: The positions of the embedding record, modulo the weight's rows: repeated rows (their
#: gradients add up). (No ``padding_idx``: its row's gradient is 0 by definition, not the
#: finite differences' 1; ``tests/test_nn.py`` compares it with PyTorch.)
_EMBEDDING_INDEX = np.array([[0, 2, 4], [2, 1, 0]])


def _embedding_index(rows: int) -> np.ndarray:
    return _EMBEDDING_INDEX % rows


def _embedding(w: pl.Tensor) -> pl.Tensor:
    index = pl.tensor(_embedding_index(w.shape[0]), device=w.device)
    return pl.nn.functional.embedding(index, w)


def _torch_embedding(w):  # noqa: ANN001, ANN202  (a torch.Tensor)
    torch = torch_module()
    index = torch.tensor(_embedding_index(w.shape[0]))
    return torch.nn.functional.embedding(index, w)


RECORDS: tuple[OpInfo, ...] = (
    OpInfo(
        "transpose",
        lambda x: pl.transpose(x, 0, -1),
        lambda x: np.swapaxes(x, 0, -1),
        _X,
        (((3, 4),), ((2, 3, 4),)),
        torch=torch_op("transpose", 0, -1),
    ),
    OpInfo(
        "permute",
        lambda x: pl.permute(x, 2, 0, 1),
        lambda x: np.transpose(x, (2, 0, 1)),
        _X,
        (((2, 3, 4),), ((1, 3, 2),)),
        torch=torch_op("permute", (2, 0, 1)),
    ),
    OpInfo(
        "reshape",
        lambda x: pl.reshape(x, (-1, 2)),
        lambda x: np.reshape(x, (-1, 2)),
        _X,
        (((3, 4),), ((2, 3, 2),), ((6,),)),
        torch=torch_op("reshape", (-1, 2)),
    ),
    OpInfo(
        "expand",
        lambda x: pl.expand(x, 2, -1, 4),
        lambda x: np.broadcast_to(x, (2, 3, 4)),
        _X,
        (((3, 1),), ((1, 3, 4),), ((3, 4),)),
        torch=lambda x: x.expand(2, -1, 4),
    ),
    OpInfo(
        "concatenate",
        lambda a, b, c: pl.concatenate([a, b, c], axis=-1),
        lambda a, b, c: np.concatenate([a, b, c], axis=-1),
        _X * 3,
        (((2, 3), (2, 1), (2, 4)), ((3,), (1,), (2,)), ((2, 1, 2), (2, 1, 1), (2, 1, 3))),
        torch=_torch_concatenate,
    ),
    OpInfo(
        "stack",
        lambda a, b: pl.stack([a, b], axis=1),
        lambda a, b: np.stack([a, b], axis=1),
        _X * 2,
        (((3, 4), (3, 4)), ((3,), (3,)), ((2, 1, 2), (2, 1, 2))),
        torch=lambda a, b: torch_module().stack([a, b], dim=1),
    ),
    OpInfo(
        "getitem",
        # Repeated rows (gradients accumulate), an Ellipsis and a negative step.
        lambda x: x[[2, 0, 2, -1], ..., ::-2],
        lambda x: x[[2, 0, 2, -1], ..., ::-2],
        _X,
        (((3, 4),), ((3, 2, 5),)),
        torch=_torch_getitem,
    ),
    OpInfo(
        "setitem",
        # A repeated column (the last write wins) and a broadcast value, with leading size-1
        # dimensions beyond the selection's in the last case.
        lambda x, v: pl.setitem(x, (..., [2, 0, 2]), v),
        _setitem_reference,
        _X * 2,
        (((3, 4), (3,)), ((3, 4), (3, 1)), ((2, 3, 4), (1, 1, 3, 3))),
        torch=_torch_setitem,
    ),
    OpInfo(
        "embedding",
        # Rows of a weight at an index of shape (2, 3), with repeats.
        _embedding,
        lambda w: w[_embedding_index(w.shape[0])],
        _X,
        (((5, 3),), ((3, 2),)),
        torch=_torch_embedding,
    ),
)
