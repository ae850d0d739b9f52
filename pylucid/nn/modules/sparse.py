"""``Embedding``, as ``torch.nn.Embedding``."""

from __future__ import annotations

from typing import Any

from pylucid.factories import empty
from pylucid.graph.grad_mode import no_grad
from pylucid.nn import functional as F  # noqa: N812  (PyTorch's idiom)
from pylucid.nn import init
from pylucid.nn.modules.module import Module
from pylucid.nn.parameter import Parameter
from pylucid.tensor import Tensor

__all__ = ["Embedding"]


class Embedding(Module):
    """A lookup table: row ``i`` of ``weight`` ``(num_embeddings, embedding_dim)`` for each
    index ``i`` of the input; ``weight`` starts as N(0, 1), with the ``padding_idx`` row
    zero (and never trained).

    ``max_norm``, ``scale_grad_by_freq`` and ``sparse`` are not supported (they raise).
    """

    def __init__(
        self, num_embeddings: int, embedding_dim: int, padding_idx: int | None = None,
        max_norm: float | None = None, norm_type: float = 2.0, scale_grad_by_freq: bool = False,
        sparse: bool = False, _weight: Tensor | None = None, _freeze: bool = False,
        device: str | None = None, dtype: Any = None,
    ) -> None:  # fmt: skip
        super().__init__()
        if max_norm is not None or scale_grad_by_freq or sparse:
            raise NotImplementedError(
                "Embedding: max_norm, scale_grad_by_freq and sparse are not supported"
            )
        if padding_idx is not None:
            if not -num_embeddings <= padding_idx < num_embeddings:
                raise ValueError(
                    f"Embedding: padding_idx {padding_idx} is outside the {num_embeddings} "
                    f"embeddings"
                )
            padding_idx %= num_embeddings
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        self.padding_idx = padding_idx
        if _weight is None:
            kind = {"device": device, **({"dtype": dtype} if dtype is not None else {})}
            self.weight = Parameter(empty(num_embeddings, embedding_dim, **kind), not _freeze)
            self.reset_parameters()
        else:
            if _weight.shape != (num_embeddings, embedding_dim):
                raise ValueError(
                    f"Embedding: _weight has shape {_weight.shape}, expected "
                    f"({num_embeddings}, {embedding_dim})"
                )
            self.weight = Parameter(_weight, not _freeze)

    def reset_parameters(self) -> None:
        """Draw the weight from N(0, 1) again, the padding row zero."""
        init.normal_(self.weight)
        if self.padding_idx is not None:
            with no_grad():
                self.weight[self.padding_idx] = 0

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return F.embedding(input, self.weight, self.padding_idx)

    @classmethod
    def from_pretrained(
        cls, embeddings: Tensor, freeze: bool = True, padding_idx: int | None = None
    ) -> Embedding:
        """An embedding holding ``embeddings`` (2-d), trained unless ``freeze``."""
        if embeddings.ndim != 2:
            raise ValueError(f"Embedding.from_pretrained: expected 2-d embeddings, got shape "
                             f"{embeddings.shape}")  # fmt: skip
        rows, columns = embeddings.shape
        return cls(rows, columns, padding_idx, _weight=embeddings, _freeze=freeze)

    def extra_repr(self) -> str:
        text = f"{self.num_embeddings}, {self.embedding_dim}"
        return text if self.padding_idx is None else f"{text}, padding_idx={self.padding_idx}"
