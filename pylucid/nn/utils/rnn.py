"""Batches of sequences of different lengths, as ``torch.nn.utils.rnn``: padded
(:func:`pad_sequence`, :func:`unpad_sequence`) and packed (:class:`PackedSequence`,
:func:`pack_padded_sequence`, :func:`pad_packed_sequence`, :func:`pack_sequence`,
:func:`unpack_sequence`).

A packed batch holds the sequences sorted by decreasing length and interleaved in time:
the first elements of every sequence, then the second elements of those at least two long,
and so on; ``batch_sizes[t]`` counts the sequences still running at step ``t``. The
recurrent layers (:class:`~pylucid.nn.LSTM`, ...) take it and return one. Everything here is
a composition of differentiable ops (slices, ``concatenate``, ``stack``, ``index_select``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from pylucid.dtypes import int64
from pylucid.factories import full, tensor
from pylucid.ops.gathering import index_select
from pylucid.ops.shape import concatenate, stack
from pylucid.tensor import Tensor

__all__ = [
    "PackedSequence",
    "pack_padded_sequence",
    "pack_sequence",
    "pad_packed_sequence",
    "pad_sequence",
    "unpack_sequence",
    "unpad_sequence",
]


class PackedSequence(NamedTuple):
    """A packed batch of sequences, as ``torch.nn.utils.rnn.PackedSequence``.

    Attributes
    ----------
    data : Tensor
        ``(sum of the lengths, *)``: the elements, step by step (see the module's note).
    batch_sizes : Tensor
        int64 on the cpu: the number of sequences at each step (non-increasing).
    sorted_indices : Tensor or None
        int64, on ``data``'s device: the original position of each sorted sequence (None:
        the batch was given sorted).
    unsorted_indices : Tensor or None
        The inverse permutation: the sorted position of each original sequence.
    """

    data: Tensor
    batch_sizes: Tensor
    sorted_indices: Tensor | None = None
    unsorted_indices: Tensor | None = None

    def to(self, *args: Any, **kwargs: Any) -> PackedSequence:
        """``data`` converted as by ``Tensor.to``; the indices follow it to its device."""
        data = self.data.to(*args, **kwargs)
        moved = [None if i is None else i.to(data.device) for i in self[2:]]
        return PackedSequence(data, self.batch_sizes, *moved)


def packed_steps(sequence: PackedSequence) -> list[int]:
    """The ``batch_sizes`` of a packed batch as Python ints."""
    return [int(b) for b in sequence.batch_sizes.numpy()]


def _int_tensor(values: np.ndarray, device: str) -> Tensor:
    return tensor(np.asarray(values, dtype=np.int64), dtype=int64, device=device)


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


def unpad_sequence(
    padded_sequences: Tensor, lengths: Tensor | Sequence[int], batch_first: bool = False
) -> list[Tensor]:
    """The sequences of a padded batch ``(L, B, *)`` (``(B, L, *)`` with ``batch_first``),
    each cut to its length: the inverse of :func:`pad_sequence`."""
    counts = _lengths("unpad_sequence", lengths)
    batch_axis = 0 if batch_first else 1
    if padded_sequences.ndim < 2 or padded_sequences.shape[batch_axis] != counts.size:
        raise ValueError(
            f"unpad_sequence: {counts.size} lengths for a padded batch of shape "
            f"{padded_sequences.shape} (batch on dimension {batch_axis})"
        )
    if counts.size and counts.max() > padded_sequences.shape[1 - batch_axis]:
        raise ValueError(
            f"unpad_sequence: a length of {counts.max()} is longer than the padded batch "
            f"{padded_sequences.shape}"
        )
    if batch_first:
        return [padded_sequences[i, :n] for i, n in enumerate(counts)]
    return [padded_sequences[:n, i] for i, n in enumerate(counts)]


def _lengths(op: str, lengths: Tensor | Sequence[int]) -> np.ndarray:
    values = lengths.numpy() if isinstance(lengths, Tensor) else np.asarray(lengths)
    if values.ndim != 1 or (values.size and not np.issubdtype(values.dtype, np.integer)):
        raise ValueError(f"{op}: lengths must be a 1-d sequence of ints, got {lengths!r}")
    return values.astype(np.int64)


def pack_padded_sequence(
    input: Tensor,  # noqa: A002
    lengths: Tensor | Sequence[int],
    batch_first: bool = False,
    enforce_sorted: bool = True,
) -> PackedSequence:
    """Pack a padded batch ``(T, B, *)`` (``(B, T, *)`` with ``batch_first``) of sequences
    of the given ``lengths`` (each between 1 and ``T``), as
    ``torch.nn.utils.rnn.pack_padded_sequence``. With ``enforce_sorted`` the lengths must
    be in decreasing order; otherwise the batch is sorted first (stably: equal lengths keep
    their order) and the permutation kept in the result."""
    op = "pack_padded_sequence"
    if not isinstance(input, Tensor) or input.ndim < 2:
        raise ValueError(f"{op}: expected a padded batch of at least 2 dimensions, got {input!r}")
    counts = _lengths(op, lengths)
    batch_axis = 0 if batch_first else 1
    steps = input.shape[1 - batch_axis]
    if counts.size != input.shape[batch_axis]:
        raise ValueError(
            f"{op}: {counts.size} lengths for a batch of {input.shape[batch_axis]} sequences "
            f"(input of shape {input.shape})"
        )
    if counts.size == 0 or counts.min() <= 0 or counts.max() > steps:
        raise ValueError(
            f"{op}: every length must be between 1 and the padded length {steps}, got "
            f"{counts.tolist()}"
        )
    sorted_indices = unsorted_indices = None
    if enforce_sorted:
        if (np.diff(counts) > 0).any():
            raise ValueError(
                f"{op}: lengths {counts.tolist()} must be in decreasing order when "
                f"enforce_sorted=True; pass enforce_sorted=False to have them sorted"
            )
    else:
        order = np.argsort(-counts, kind="stable")
        sorted_indices = _int_tensor(order, input.device)
        unsorted_indices = _int_tensor(np.argsort(order), input.device)
        input = index_select(input, batch_axis, sorted_indices)  # noqa: A001
        counts = counts[order]
    if batch_first:
        input = input.transpose(0, 1)  # noqa: A001
    sizes = [int((counts > t).sum()) for t in range(int(counts[0]))]
    data = concatenate([input[t, :b] for t, b in enumerate(sizes)])
    return PackedSequence(data, _int_tensor(sizes, "cpu"), sorted_indices, unsorted_indices)


def pad_packed_sequence(
    sequence: PackedSequence,
    batch_first: bool = False,
    padding_value: float = 0.0,
    total_length: int | None = None,
) -> tuple[Tensor, Tensor]:
    """The padded batch ``(T, B, *)`` (``(B, T, *)`` with ``batch_first``) of a packed one,
    in the original order, padded with ``padding_value`` to the longest length or to
    ``total_length``; and the lengths (int64, on the cpu). The inverse of
    :func:`pack_padded_sequence`."""
    op = "pad_packed_sequence"
    if not isinstance(sequence, PackedSequence):
        raise TypeError(f"{op}: expected a PackedSequence, got {type(sequence).__name__}")
    data, sizes = sequence.data, packed_steps(sequence)
    steps = len(sizes) if total_length is None else total_length
    if steps < len(sizes):
        raise ValueError(
            f"{op}: expected total_length to be at least the length of the longest sequence "
            f"in input, but got total_length={total_length} and max sequence length being "
            f"{len(sizes)}"
        )
    batch, trailing = sizes[0], data.shape[1:]
    rows = list(data.split(sizes))
    for t, b in enumerate(sizes):
        if b < batch:
            fill = full((batch - b, *trailing), padding_value, data.dtype, data.device)
            rows[t] = concatenate([rows[t], fill])
    if steps > len(sizes):
        shape = (batch, *trailing)
        rows += [full(shape, padding_value, data.dtype, data.device)] * (steps - len(sizes))
    padded = stack(rows)
    counts = (np.asarray(sizes)[None, :] > np.arange(batch)[:, None]).sum(axis=1)
    if sequence.unsorted_indices is not None:
        padded = index_select(padded, 1, sequence.unsorted_indices)
        counts = counts[sequence.unsorted_indices.numpy()]
    return (padded.transpose(0, 1) if batch_first else padded), _int_tensor(counts, "cpu")


def pack_sequence(sequences: Sequence[Tensor], enforce_sorted: bool = True) -> PackedSequence:
    """Pack a list of sequences ``(L_i, *)``: :func:`pad_sequence` then
    :func:`pack_padded_sequence`."""
    lengths = [seq.shape[0] for seq in sequences]
    return pack_padded_sequence(pad_sequence(sequences), lengths, enforce_sorted=enforce_sorted)


def unpack_sequence(packed_sequences: PackedSequence) -> list[Tensor]:
    """The sequences of a packed batch, in the original order: the inverse of
    :func:`pack_sequence`."""
    padded, lengths = pad_packed_sequence(packed_sequences, batch_first=True)
    return unpad_sequence(padded, lengths, batch_first=True)
