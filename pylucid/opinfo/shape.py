"""Op records of the ``shape`` and ``indexing`` families."""

from __future__ import annotations

import numpy as np

import pylucid as pl
from pylucid.opinfo.records import OpInfo, uniform

_X = (uniform(-5, 5),)


def _setitem_reference(x: np.ndarray, v: np.ndarray) -> np.ndarray:
    out = x.copy()
    out[..., [2, 0, 2]] = v  # NumPy keeps the last of repeated writes
    return out


RECORDS: tuple[OpInfo, ...] = (
    OpInfo(
        "transpose",
        lambda x: pl.transpose(x, 0, -1),
        lambda x: np.swapaxes(x, 0, -1),
        _X,
        (((3, 4),), ((2, 3, 4),)),
    ),
    OpInfo(
        "permute",
        lambda x: pl.permute(x, 2, 0, 1),
        lambda x: np.transpose(x, (2, 0, 1)),
        _X,
        (((2, 3, 4),), ((1, 3, 2),)),
    ),
    OpInfo(
        "reshape",
        lambda x: pl.reshape(x, (-1, 2)),
        lambda x: np.reshape(x, (-1, 2)),
        _X,
        (((3, 4),), ((2, 3, 2),), ((6,),)),
    ),
    OpInfo(
        "expand",
        lambda x: pl.expand(x, 2, -1, 4),
        lambda x: np.broadcast_to(x, (2, 3, 4)),
        _X,
        (((3, 1),), ((1, 3, 4),), ((3, 4),)),
    ),
    OpInfo(
        "concatenate",
        lambda a, b, c: pl.concatenate([a, b, c], axis=-1),
        lambda a, b, c: np.concatenate([a, b, c], axis=-1),
        _X * 3,
        (((2, 3), (2, 1), (2, 4)), ((3,), (1,), (2,)), ((2, 1, 2), (2, 1, 1), (2, 1, 3))),
    ),
    OpInfo(
        "stack",
        lambda a, b: pl.stack([a, b], axis=1),
        lambda a, b: np.stack([a, b], axis=1),
        _X * 2,
        (((3, 4), (3, 4)), ((3,), (3,)), ((2, 1, 2), (2, 1, 2))),
    ),
    OpInfo(
        "getitem",
        # Repeated rows (gradients accumulate), an Ellipsis and a negative step.
        lambda x: x[[2, 0, 2, -1], ..., ::-2],
        lambda x: x[[2, 0, 2, -1], ..., ::-2],
        _X,
        (((3, 4),), ((3, 2, 5),)),
    ),
    OpInfo(
        "setitem",
        # A repeated column (the last write wins) and a broadcast value, with leading size-1
        # dimensions beyond the selection's in the last case.
        lambda x, v: pl.setitem(x, (..., [2, 0, 2]), v),
        _setitem_reference,
        _X * 2,
        (((3, 4), (3,)), ((3, 4), (3, 1)), ((2, 3, 4), (1, 1, 3, 3))),
    ),
)
