"""einsum: Einstein summation over labelled axes, as ``torch.einsum`` (and NumPy's).

Public: einsum (``pl.einsum("bij,bjk->bik", a, b)``; operands may also come as one list).

A composition of differentiable ops, so its gradients of every order are theirs. Each
operand first loses its repeated labels (the diagonal, by indexing) and the labels that
appear nowhere else (summed); then the operands are contracted two at a time, left to
right, as one batched matrix product each - the labels both keep are the batch, the labels
both share and no later operand or the output needs are summed by the product (BLAS on the
CPU), the others are the rows and columns - and the result is permuted into the output's
order. ``...`` stands for the broadcast dimensions, aligned from the right as in NumPy.
"""

from __future__ import annotations

import math
import string
from collections.abc import Sequence

import numpy as np

from pylucid.ops.linalg import matmul
from pylucid.ops.wrapping import require_tensor
from pylucid.tensor import Tensor

__all__ = ["einsum"]

#: Labels ``...`` expands to, from the end (never a letter a user can write).
_BROADCAST = "".join(chr(0x2460 + i) for i in range(32))


def _parse(equation: str, operands: Sequence[Tensor]) -> tuple[list[str], str]:
    """Each operand's labels and the output's, with ``...`` expanded (see the module)."""
    text = equation.replace(" ", "")
    inputs, arrow, output = text.partition("->")
    terms = inputs.split(",")
    if len(terms) != len(operands):
        raise ValueError(
            f"einsum: the equation {equation!r} has {len(terms)} operand(s), got "
            f"{len(operands)} tensor(s)"
        )
    broadcast = 0
    labelled = []
    for term, x in zip(terms, operands):
        if term.count("...") > 1 or not set(term.replace("...", "")) <= set(string.ascii_letters):
            raise ValueError(
                f"einsum: operand labels must be letters and at most one '...', got {term!r}"
            )
        letters = len(term.replace("...", ""))
        extra = x.ndim - letters
        if ("..." not in term and extra != 0) or extra < 0:
            raise ValueError(
                f"einsum: operand {term!r} has {letters} labels but a tensor of shape "
                f"{x.shape} ({x.ndim} dimensions)"
            )
        broadcast = max(broadcast, extra)
        labelled.append(term.replace("...", _BROADCAST[:extra][::-1]))
    dots = _BROADCAST[:broadcast][::-1]
    if arrow:
        if output.count("...") > 1 or not set(output.replace("...", "")) <= set(
            string.ascii_letters
        ):
            raise ValueError(f"einsum: output labels must be letters and '...', got {output!r}")
        result = output.replace("...", dots)
        unknown = set(result) - set("".join(labelled))
        if unknown or len(set(result)) != len(result):
            raise ValueError(
                f"einsum: output {output!r} repeats a label or names one no operand has"
            )
    else:  # implicit: the broadcast dimensions, then the labels seen once, sorted
        counts = {c: "".join(labelled).count(c) for c in set("".join(labelled))}
        result = dots + "".join(sorted(c for c, n in counts.items() if n == 1 and c not in dots))
    return labelled, result


def _check_sizes(labelled: list[str], operands: Sequence[Tensor]) -> None:
    """Refuse a label whose sizes differ between operands (other than 1: broadcast)."""
    sizes: dict[str, int] = {}
    for labels, x in zip(labelled, operands):
        for label, n in zip(labels, x.shape):
            known = sizes.get(label, 1)
            if n != known and 1 not in (n, known):
                raise ValueError(
                    f"einsum: label {label if label.isalpha() else '...'!r} has size {known} "
                    f"in one operand and {n} in another (operand of shape {x.shape})"
                )
            sizes[label] = max(known, n)


def _diagonal(x: Tensor, labels: str) -> tuple[Tensor, str]:
    """``x`` with each repeated label taken once (the diagonal over its axes)."""
    while len(set(labels)) != len(labels):
        label = next(c for c in labels if labels.count(c) > 1)
        first = labels.index(label)
        second = labels.index(label, first + 1)
        n = x.shape[first]
        index: list[object] = [slice(None)] * x.ndim
        index[first] = index[second] = np.arange(n)
        # advanced indices apart put the diagonal first; next to each other, in place
        x = x[tuple(index)]
        kept = labels[:second] + labels[second + 1 :]
        if second != first + 1:
            kept = label + kept.replace(label, "", 1)
        labels = kept
    return x, labels


def _summed(x: Tensor, labels: str, keep: set[str]) -> tuple[Tensor, str]:
    """``x`` summed over the labels not in ``keep``."""
    axes = tuple(i for i, c in enumerate(labels) if c not in keep)
    if not axes:
        return x, labels
    return x.sum(axis=axes), "".join(c for c in labels if c in keep)


def _arranged(x: Tensor, labels: str, order: str) -> Tensor:
    """``x`` (holding exactly the labels of ``order``) permuted to ``order``."""
    if labels == order:
        return x
    return x.permute(tuple(labels.index(c) for c in order))


def _broadcast_sums(
    a: Tensor, a_labels: str, b: Tensor, b_labels: str, contracted: list[str]
) -> tuple[Tensor, Tensor]:
    """Where a summed label has size 1 in one operand and n in the other, the other summed
    over it first (``sum_k a_0 b_k = a_0 sum_k b_k``), keeping the axis."""
    for c in contracted:
        i, j = a_labels.index(c), b_labels.index(c)
        if a.shape[i] != b.shape[j]:
            if a.shape[i] == 1:
                b = b.sum(axis=j, keepdims=True)
            else:
                a = a.sum(axis=i, keepdims=True)
    return a, b


def _contract(
    a: Tensor, a_labels: str, b: Tensor, b_labels: str, keep: set[str]
) -> tuple[Tensor, str]:
    """The product of two operands summed over their shared labels that ``keep`` lacks, as
    one batched matmul: ``(batch, rows, summed) @ (batch, summed, columns)`` (batch sizes of
    1 broadcast, as matmul's)."""
    shared = [c for c in a_labels if c in b_labels]
    batch = [c for c in shared if c in keep]
    contracted = [c for c in shared if c not in keep]
    rows = [c for c in a_labels if c not in shared]
    columns = [c for c in b_labels if c not in shared]
    a, b = _broadcast_sums(a, a_labels, b, b_labels, contracted)
    a_mat = _arranged(a, a_labels, "".join(batch + rows + contracted))
    b_mat = _arranged(b, b_labels, "".join(batch + contracted + columns))
    nb, nr, nc = len(batch), len(rows), len(contracted)
    row_sizes, column_sizes = a_mat.shape[nb : nb + nr], b_mat.shape[nb + nc :]
    summed = math.prod(a_mat.shape[nb + nr :])
    a_mat = a_mat.reshape(a_mat.shape[:nb] + (math.prod(row_sizes), summed))
    b_mat = b_mat.reshape(b_mat.shape[:nb] + (summed, math.prod(column_sizes)))
    product = matmul(a_mat, b_mat)
    shape = product.shape[:nb] + row_sizes + column_sizes
    return product.reshape(shape), "".join(batch + rows + columns)


def einsum(equation: str, *operands: Tensor | Sequence[Tensor]) -> Tensor:
    """Einstein summation: ``einsum("ij,jk->ik", a, b)`` is ``a @ b``; see the module.

    Parameters
    ----------
    equation : str
        Letters label each operand's axes (``...`` the broadcast ones); ``->`` and the
        output's labels, or, without it, the labels seen once, sorted.
    *operands : Tensor
        The tensors (or one list or tuple of them).
    """
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    if not isinstance(equation, str):
        raise TypeError(f"einsum: the equation must be a str, got {type(equation).__name__}")
    if not operands:
        raise ValueError("einsum: expected at least one operand")
    for i, x in enumerate(operands):
        require_tensor("einsum", f"operands[{i}]", x)
    labelled, output = _parse(equation, operands)
    _check_sizes(labelled, operands)
    prepared = []
    for i, (x, labels) in enumerate(zip(operands, labelled)):
        x, labels = _diagonal(x, labels)
        elsewhere = set(output).union(*(set(s) for j, s in enumerate(labelled) if j != i))
        prepared.append(_summed(x, labels, elsewhere))
    x, labels = prepared[0]
    for k in range(1, len(prepared)):
        later = set(output).union(*(set(s) for _, s in prepared[k + 1 :]))
        b, b_labels = prepared[k]
        x, labels = _contract(x, labels, b, b_labels, later)
    x, labels = _summed(x, labels, set(output))
    if labels == output:
        return x
    return x.permute(tuple(labels.index(c) for c in output))
