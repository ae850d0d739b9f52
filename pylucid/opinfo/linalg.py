"""Op records of the ``linalg`` family: matmul over every promotion and broadcast case."""

from __future__ import annotations

import numpy as np

import pylucid as pl
from pylucid.opinfo.records import OpInfo, torch_op, uniform

RECORDS: tuple[OpInfo, ...] = (
    OpInfo(
        "matmul",
        pl.matmul,
        np.matmul,
        (uniform(-2, 2), uniform(-2, 2)),
        (
            ((3,), (3,)),  # dot product -> 0-d
            ((2, 3), (3,)),  # matrix @ vector
            ((3,), (3, 4)),  # vector @ matrix
            ((2, 3), (3, 4)),
            ((5, 2, 3), (3, 4)),  # batch @ matrix (the folded dB path)
            ((3, 2), (2, 2, 4)),  # matrix @ batch
            ((2, 1, 2, 3), (4, 3, 2)),  # both batched, broadcast both ways
            ((3,), (2, 3, 4)),  # vector @ batch
            ((2, 3, 4), (4,)),  # batch @ vector
        ),
        # float32 sums of k <= 4 products of magnitude <= 4: absolute error below
        # 4 * 16 * 2**-24 ~ 4e-6, relative to results that can cancel to near 0.
        rtol=1e-5,
        atol=1e-5,
        torch=torch_op("matmul"),
    ),
)
