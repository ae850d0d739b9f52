"""Batching sequences of different lengths, as ``torch.nn.utils.rnn``."""

from __future__ import annotations

from collections.abc import Sequence

from pylucid.factories import full
from pylucid.ops.shape import concatenate, stack
from pylucid.tensor import Tensor

__all__ = ["pad_sequence"]


def pad_sequence(
    sequences: Tensor | Sequence[Tensor],
    batch_first: bool = False,
    padding_value: float = 0.0,
    padding_side: str = "right",
) -> Tensor:
    """Stack sequences of shapes ``(L_i, *)`` into one ``(L, B, *)`` tensor (``(B, L, *)``
    with ``batch_first``), ``L`` the longest length, each shorter one filled with
    ``padding_value`` after its end (``padding_side="left"``: before its start).

    Differentiable in every sequence (the padding gets no gradient); the result has the
    first sequence's dtype and device. A tensor stands for the sequences along its first
    dimension.
    """
    if padding_side not in ("left", "right"):
        raise ValueError(
            f"pad_sequence: padding_side must be 'left' or 'right', got {padding_side!r}"
        )
    if isinstance(sequences, Tensor):
        sequences = [sequences[i] for i in range(sequences.shape[0])] if sequences.ndim else []
    sequences = list(sequences)
    if not sequences:
        raise ValueError("pad_sequence: received an empty list of sequences")
    for i, seq in enumerate(sequences):
        if not isinstance(seq, Tensor):
            raise TypeError(f"pad_sequence: sequences[{i}] is a {type(seq).__name__}, not a Tensor")
        if seq.ndim == 0 or seq.shape[1:] != sequences[0].shape[1:]:
            raise ValueError(
                f"pad_sequence: every sequence must be (L_i, *) with the same trailing "
                f"dimensions; sequences[0] has shape {sequences[0].shape}, sequences[{i}] "
                f"{seq.shape}"
            )
    first = sequences[0]
    longest = max(seq.shape[0] for seq in sequences)
    padded = []
    for seq in sequences:
        seq = seq if seq.dtype is first.dtype else seq.to(first.dtype)
        missing = longest - seq.shape[0]
        if missing:
            fill = full((missing, *seq.shape[1:]), padding_value, first.dtype, first.device)
            seq = concatenate([seq, fill] if padding_side == "right" else [fill, seq])
        padded.append(seq)
    return stack(padded, axis=0 if batch_first else 1)
