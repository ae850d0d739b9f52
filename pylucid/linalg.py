"""``pylucid.linalg``: the norms of PyTorch's ``torch.linalg`` that training programs use
(the decompositions are not here: they raise, saying so)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pylucid.compat import refuse_attributes
from pylucid.ops.blends import vector_norm
from pylucid.tensor import Tensor

__all__ = ["norm", "vector_norm"]


def norm(
    x: Tensor,
    ord: float | str | None = None,  # noqa: A002  (torch.linalg.norm's name)
    dim: int | Sequence[int] | None = None,
    keepdim: bool = False,
    *,
    dtype: Any = None,
) -> Tensor:
    """``torch.linalg.norm``: with ``ord`` None the 2-norm of the elements over ``dim``
    (Frobenius for a matrix); a number for a vector (or one ``dim``); ``"fro"`` for a
    matrix. Matrix norms of other orders raise NotImplementedError."""
    matrix = (dim is None and x.ndim == 2) or (isinstance(dim, (tuple, list)) and len(dim) == 2)
    if ord is None or ord == "fro":
        return vector_norm(x, 2, dim, keepdim, dtype=dtype)
    if matrix or isinstance(ord, str):
        raise NotImplementedError(
            f"linalg.norm: the matrix norm ord={ord!r} is not supported; pylucid has the "
            f"vector norms (give one dim) and 'fro'"
        )
    return vector_norm(x, ord, dim, keepdim, dtype=dtype)


_DECOMPOSITIONS = "pylucid has no matrix decompositions; use NumPy on x.numpy() (no gradient)"
refuse_attributes(
    globals(),
    {name: _DECOMPOSITIONS for name in ("eigh", "eig", "svd", "qr", "cholesky", "inv", "det",
                                        "solve", "lstsq", "eigvalsh", "pinv", "slogdet")},
)  # fmt: skip
