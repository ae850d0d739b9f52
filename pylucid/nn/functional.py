"""Losses, activations and layers as functions, with PyTorch's names, signatures and
defaults (``torch.nn.functional``), built on pylucid's ops: each is differentiable
(including with ``create_graph``) and runs on every backend.

``cross_entropy`` with class indices, the convolutions (:mod:`pylucid.ops.convolution`),
the pools (:mod:`pylucid.ops.pooling`) and ``layer_norm`` are ops with their own kernels;
``batch_norm`` (:mod:`pylucid.ops.normalization`) and the other losses are short
compositions of ops, whose gradients are those of the ops.

Not supported (yet): ``weight=`` of the classification losses and the deprecated
``size_average=`` / ``reduce=``.
"""

from __future__ import annotations

import numpy as np

from pylucid.dtypes import bool_, int32, int64
from pylucid.factories import full, rand
from pylucid.ops import abs as _abs
from pylucid.ops import (
    clamp,
    elu,
    exp,
    gelu,
    leaky_relu,
    log,
    log1p,
    log_softmax,
    relu,
    sigmoid,
    silu,
    softmax,
    softplus,
    tanh,
    where,
)
from pylucid.ops.convolution import conv1d, conv2d
from pylucid.ops.gathering import checked_indices, index_select
from pylucid.ops.losses import check_options, checked_target_count
from pylucid.ops.losses import cross_entropy as _cross_entropy_indices
from pylucid.ops.normalization import batch_norm, layer_norm
from pylucid.ops.pooling import adaptive_avg_pool2d, avg_pool2d, max_pool2d
from pylucid.ops.shape import concatenate
from pylucid.ops.wrapping import require_tensor
from pylucid.tensor import Tensor

__all__ = [
    "adaptive_avg_pool2d",
    "avg_pool2d",
    "batch_norm",
    "binary_cross_entropy",
    "binary_cross_entropy_with_logits",
    "conv1d",
    "conv2d",
    "cross_entropy",
    "dropout",
    "elu",
    "embedding",
    "gelu",
    "l1_loss",
    "layer_norm",
    "leaky_relu",
    "linear",
    "log_softmax",
    "max_pool2d",
    "mse_loss",
    "nll_loss",
    "one_hot",
    "pad",
    "relu",
    "scaled_dot_product_attention",
    "sigmoid",
    "silu",
    "smooth_l1_loss",
    "softmax",
    "softplus",
    "tanh",
]


def _reduced(op: str, loss: Tensor, reduction: str) -> Tensor:
    check_options(op, reduction)
    if reduction == "mean":
        return loss.mean()
    return loss.sum() if reduction == "sum" else loss


def _pair(op: str, input: Tensor, target: Tensor) -> None:  # noqa: A002
    require_tensor(op, "input", input)
    require_tensor(op, "target", target)
    if input.shape != target.shape:
        raise ValueError(
            f"{op}: input of shape {input.shape} and target of shape {target.shape} differ; "
            f"PyTorch broadcasts them with a warning, pylucid asks for equal shapes"
        )


def linear(input: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:  # noqa: A002
    """``input @ weight.mT + bias``: ``weight`` is ``(out_features, in_features)``."""
    require_tensor("linear", "input", input)
    require_tensor("linear", "weight", weight)
    out = input @ weight.mT
    return out if bias is None else out + bias


def mse_loss(input: Tensor, target: Tensor, reduction: str = "mean") -> Tensor:  # noqa: A002
    """The squared error ``(input - target)^2``, reduced."""
    _pair("mse_loss", input, target)
    return _reduced("mse_loss", (input - target).square(), reduction)


def l1_loss(input: Tensor, target: Tensor, reduction: str = "mean") -> Tensor:  # noqa: A002
    """The absolute error ``|input - target|``, reduced."""
    _pair("l1_loss", input, target)
    return _reduced("l1_loss", _abs(input - target), reduction)


def smooth_l1_loss(
    input: Tensor,  # noqa: A002
    target: Tensor,
    reduction: str = "mean",
    beta: float = 1.0,
) -> Tensor:
    """Huber-like: ``0.5 d^2 / beta`` where ``d = |input - target| < beta``, else
    ``d - 0.5 beta`` (``beta = 0``: the L1 loss)."""
    _pair("smooth_l1_loss", input, target)
    if beta < 0:
        raise ValueError(f"smooth_l1_loss: beta must be >= 0, got {beta}")
    d = _abs(input - target)
    if beta == 0:
        return _reduced("smooth_l1_loss", d, reduction)
    return _reduced(
        "smooth_l1_loss", where(d < beta, 0.5 * d.square() / beta, d - 0.5 * beta), reduction
    )


def binary_cross_entropy(
    input: Tensor,  # noqa: A002
    target: Tensor,
    reduction: str = "mean",
) -> Tensor:
    """``-(t log x + (1 - t) log(1 - x))`` for probabilities ``x``; each log is clamped at
    -100, as PyTorch's, so that ``x = 0`` or ``1`` gives a finite loss."""
    _pair("binary_cross_entropy", input, target)
    log_x = clamp(log(input), min=-100.0)
    log_rest = clamp(log(1.0 - input), min=-100.0)
    return _reduced(
        "binary_cross_entropy", -(target * log_x + (1.0 - target) * log_rest), reduction
    )


def binary_cross_entropy_with_logits(
    input: Tensor,  # noqa: A002
    target: Tensor,
    reduction: str = "mean",
    pos_weight: Tensor | None = None,
) -> Tensor:
    """Binary cross entropy of ``sigmoid(input)``, in the stable form
    ``(1 - t) x + w (log(1 + e^{-|x|}) + max(-x, 0))`` with ``w = 1 + (pos_weight - 1) t``
    (``w = 1`` without ``pos_weight``)."""
    _pair("binary_cross_entropy_with_logits", input, target)
    softplus_neg = log1p(exp(-_abs(input))) + relu(-input)  # log(1 + e^{-x}), stably
    weight = 1.0 if pos_weight is None else 1.0 + (pos_weight - 1.0) * target
    loss = (1.0 - target) * input + weight * softplus_neg
    return _reduced("binary_cross_entropy_with_logits", loss, reduction)


def nll_loss(
    input: Tensor,  # noqa: A002
    target: Tensor,
    ignore_index: int = -100,
    reduction: str = "mean",
) -> Tensor:
    """``-input[n, target[n]]`` for log-probabilities ``input`` of shape ``(N, C)`` (or
    ``(C,)`` with a 0-d target); rows whose target is ``ignore_index`` count for nothing
    (``"mean"`` divides by the rows that count)."""
    require_tensor("nll_loss", "input", input)
    require_tensor("nll_loss", "target", target)
    if input.ndim not in (1, 2) or target.shape != input.shape[:-1]:
        raise ValueError(
            f"nll_loss: expected input (N, C) with target (N,), or (C,) with a 0-d target; "
            f"got input {input.shape} and target {target.shape}"
        )
    if target.dtype not in (int32, int64):
        raise TypeError(f"nll_loss: expected an int64 (or int32) target, got {target.dtype.name}")
    check_options("nll_loss", reduction)
    be = input._backend
    count = checked_target_count("nll_loss", be, target._storage, input.shape, ignore_index)
    classes = input.shape[-1]
    labels = target.numpy().astype(np.int64).reshape(-1)
    keep = labels != ignore_index
    rows = input.reshape(-1, classes)
    picked = rows[np.arange(labels.size), np.where(keep, labels, 0)]
    mask = Tensor._make(be.from_numpy(keep.astype(np.float64), input.dtype), be, input.dtype)
    loss = -(picked * mask)
    if reduction == "none":
        return loss.reshape(target.shape)
    return loss.sum() if reduction == "sum" else loss.sum() / float(count)


def cross_entropy(
    input: Tensor,  # noqa: A002
    target: Tensor,
    ignore_index: int = -100,
    reduction: str = "mean",
    label_smoothing: float = 0.0,
) -> Tensor:
    """Cross entropy of logits ``input`` (classes on axis 1, or axis 0 of a ``(C,)``
    input) against class indices (an integer ``target`` without the class axis; see
    :class:`pylucid.ops.losses.CrossEntropyBackward`) or class probabilities (a floating
    ``target`` of the input's shape: ``-sum_j q_j log softmax(x)_j`` with
    ``q = (1 - e) target + e / C``, ``"mean"`` dividing by the number of examples)."""
    require_tensor("cross_entropy", "input", input)
    require_tensor("cross_entropy", "target", target)
    if not target.dtype.is_floating_point:
        return _cross_entropy_indices(input, target, ignore_index, reduction, label_smoothing)
    if target.shape != input.shape:
        raise ValueError(
            f"cross_entropy: a floating target holds class probabilities and must have the "
            f"input's shape {input.shape}, got {target.shape} (class indices are integers)"
        )
    check_options("cross_entropy", reduction, label_smoothing)
    axis = 0 if input.ndim == 1 else 1
    classes = input.shape[axis]
    q = (
        target
        if label_smoothing == 0
        else (1.0 - label_smoothing) * target + label_smoothing / classes
    )
    loss = -(q * log_softmax(input, axis=axis)).sum(axis=axis)
    if reduction == "mean":  # (no examples: 0 / 0 = nan, as PyTorch)
        return loss.sum() / float(input.numel() // classes if classes else 0)
    return loss.sum() if reduction == "sum" else loss


def one_hot(tensor: Tensor, num_classes: int = -1) -> Tensor:
    """int64 one-hot encoding of the class indices ``tensor`` along a new last axis of
    ``num_classes`` (-1: one more than the largest index); no gradient."""
    require_tensor("one_hot", "tensor", tensor)
    if tensor.dtype not in (int32, int64):
        raise TypeError(
            f"one_hot: expected class indices of an integer dtype, got {tensor.dtype.name}"
        )
    labels = tensor.numpy().astype(np.int64)
    if num_classes == -1:
        num_classes = int(labels.max()) + 1 if labels.size else 0
    if labels.size and (labels.min() < 0 or labels.max() >= num_classes):
        raise IndexError(
            f"one_hot: class indices must be in 0..{num_classes - 1}, got values from "
            f"{int(labels.min())} to {int(labels.max())}"
        )
    hot = np.eye(num_classes, dtype=np.int64)[labels]
    return Tensor._make(tensor._backend.from_numpy(hot, int64), tensor._backend, int64)


def embedding(input: Tensor, weight: Tensor, padding_idx: int | None = None) -> Tensor:  # noqa: A002
    """The rows of ``weight`` (``(num_embeddings, dim)``) at the integer indices ``input``
    (any shape): ``(*input.shape, dim)``. The gradient of a row is the sum over its uses;
    the row ``padding_idx`` (negative: from the end) gets none, as in PyTorch."""
    require_tensor("embedding", "input", input)
    require_tensor("embedding", "weight", weight)
    if weight.ndim != 2:
        raise ValueError(
            f"embedding: weight must be (num_embeddings, dim), got shape {weight.shape}"
        )
    rows = weight.shape[0]
    if padding_idx is not None:
        if not -rows <= padding_idx < rows:
            raise ValueError(
                f"embedding: padding_idx {padding_idx} is outside the {rows} embeddings"
            )
        padding_idx %= rows
    positions = checked_indices("embedding", input, rows, "the embeddings (weight's dim 0)")
    out = weight[positions]
    if padding_idx is None or not (positions == padding_idx).any():
        return out
    padded = np.expand_dims(positions == padding_idx, -1)
    mask = Tensor._make(weight._backend.from_numpy(padded, bool_), weight._backend, bool_)
    return where(mask, out.detach(), out)


def dropout(
    input: Tensor,  # noqa: A002
    p: float = 0.5,
    training: bool = True,
    inplace: bool = False,
) -> Tensor:
    """Zero each element with probability ``p`` and scale the others by ``1 / (1 - p)``
    (the expectation is kept), drawing from the generator of :func:`pylucid.manual_seed`;
    the identity when not ``training`` or ``p = 0``, zeros for ``p = 1``. The gradient is
    the same mask times ``g``. ``inplace`` is accepted for PyTorch's signature; the result
    is always a new tensor (an in-place change would need the mask saved anyway)."""
    require_tensor("dropout", "input", input)
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout: p must be in [0, 1], got {p}")
    if not training or p == 0.0:
        return input
    if p == 1.0:
        return input * 0.0
    keep = rand(*input.shape, dtype=input.dtype, device=input.device) >= p
    return where(keep, input / (1.0 - p), 0.0)


PAD_MODES = ("constant", "reflect", "replicate", "circular")


def _pad_indices(size: int, before: int, after: int, mode: str) -> np.ndarray:
    """The source position of each padded position along one dimension."""
    positions = np.arange(-before, size + after)
    if mode == "replicate":
        return np.clip(positions, 0, size - 1)
    if mode == "circular":
        return positions % size
    period = 2 * (size - 1)  # reflect: mirror at the end elements, which are not repeated
    folded = np.abs(positions) % period if period else np.zeros_like(positions)
    return np.where(folded >= size, period - folded, folded)


def pad(
    input: Tensor,  # noqa: A002
    pad: tuple[int, ...],
    mode: str = "constant",
    value: float = 0.0,
) -> Tensor:
    """Pad the last ``len(pad) // 2`` dimensions: ``pad = (left, right)`` for the last,
    then ``(top, bottom)`` for the one before, and so on, as PyTorch. ``"constant"`` fills
    with ``value`` (negative amounts crop); ``"reflect"`` mirrors without repeating the edge,
    ``"replicate"`` repeats it, ``"circular"`` wraps around."""
    require_tensor("pad", "input", input)
    if mode not in PAD_MODES:
        raise ValueError(f"pad: mode must be one of {', '.join(PAD_MODES)}, got {mode!r}")
    amounts = tuple(int(v) for v in pad)
    if len(amounts) % 2 or len(amounts) // 2 > input.ndim:
        raise ValueError(
            f"pad: expected an even number of amounts, two per padded dimension (at most "
            f"{input.ndim}), got {len(amounts)}"
        )
    out = input
    for k in range(len(amounts) // 2):
        axis, (before, after) = input.ndim - 1 - k, amounts[2 * k : 2 * k + 2]
        size = out.shape[axis]
        if mode == "constant":
            out = _pad_constant(out, axis, before, after, value)
            continue
        if before < 0 or after < 0:
            raise ValueError(f"pad: {mode} padding takes no negative amounts, got {amounts}")
        limit = size - 1 if mode == "reflect" else size
        if max(before, after) > limit or size == 0:
            raise ValueError(
                f"pad: {mode} padding of ({before}, {after}) is too large for dimension "
                f"{axis} of size {size} (at most {limit})"
            )
        index = _pad_indices(size, before, after, mode)
        positions = Tensor._make(out._backend.from_numpy(index, int64), out._backend, int64)
        out = index_select(out, axis, positions)
    return out


def _pad_constant(x: Tensor, axis: int, before: int, after: int, value: float) -> Tensor:
    lead = (slice(None),) * axis
    size = x.shape[axis]
    if before < 0 or after < 0:  # crop first
        x = x[(*lead, slice(max(-before, 0), size - max(-after, 0)))]
        before, after = max(before, 0), max(after, 0)
    parts = []
    for amount in (before, after):
        shape = (*x.shape[:axis], amount, *x.shape[axis + 1 :])
        parts.append(full(shape, value, dtype=x.dtype, device=x.device))
    if not before and not after:
        return x
    return concatenate([parts[0], x, parts[1]], axis=axis)


def _constant_mask(like: Tensor, values: np.ndarray) -> Tensor:
    """A bool tensor of ``values`` on ``like``'s backend."""
    be = like._backend
    return Tensor._make(be.from_numpy(values, bool_), be, bool_)


def _attention_mask(op: str, attn_mask: Tensor, scores: Tensor) -> Tensor:
    """``scores`` with ``attn_mask`` applied: a bool mask keeps the positions that are True
    and sets the others to -inf, a float mask is added (cast to the scores' dtype)."""
    require_tensor(op, "attn_mask", attn_mask)
    try:
        shape = np.broadcast_shapes(attn_mask.shape, scores.shape)
    except ValueError:
        shape = None
    if shape != scores.shape:
        raise ValueError(
            f"{op}: attn_mask of shape {attn_mask.shape} does not broadcast to the attention "
            f"weights' shape {scores.shape} (..., L, S)"
        )
    if attn_mask.dtype is bool_:
        return where(attn_mask, scores, float("-inf"))
    if not attn_mask.dtype.is_floating_point:
        raise TypeError(
            f"{op}: attn_mask must be a bool mask (True: take part) or a float mask (added to "
            f"the scores), got {attn_mask.dtype.name}"
        )
    return scores + (attn_mask if attn_mask.dtype is scores.dtype else attn_mask.to(scores.dtype))


def _safe_softmax(scores: Tensor) -> Tensor:
    """``softmax`` over the last axis, with zeros (and a zero gradient) for rows whose
    scores are all -inf, where softmax would give nan: PyTorch's ``scaled_dot_product_attention``
    rule for a query that may attend to nothing."""
    empty = (scores == float("-inf")).all(dim=-1, keepdim=True)
    return where(empty, 0.0, softmax(where(empty, 0.0, scores), -1))


def scaled_dot_product_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attn_mask: Tensor | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
) -> Tensor:
    r"""Attention :math:`\operatorname{softmax}(s\, Q K^T + M)\, V`, as
    ``torch.nn.functional.scaled_dot_product_attention``.

    A composition of differentiable ops (``matmul``, ``where``, ``softmax``, ``dropout``), so
    its gradients of every order are theirs and it runs on every backend.

    Parameters
    ----------
    query : Tensor
        ``(..., L, E)``.
    key : Tensor
        ``(..., S, E)``; its leading dimensions broadcast with the query's.
    value : Tensor
        ``(..., S, Ev)``.
    attn_mask : Tensor, optional
        Broadcastable to ``(..., L, S)``: bool (True: the key takes part; False: its score is
        -inf) or floating (added to the scores; float32 or the query's dtype).
    dropout_p : float
        Probability of zeroing each attention weight (the others scaled by
        ``1 / (1 - dropout_p)``), drawn from the generator of :func:`pylucid.manual_seed`.
        Applied whenever it is above 0, as in PyTorch: pass 0 in evaluation.
    is_causal : bool
        Query ``i`` attends to keys ``j <= i`` (the lower triangle of ``(L, S)``, aligned at
        the top left); excludes ``attn_mask``.
    scale : float, optional
        :math:`s`; ``1 / sqrt(E)`` by default.
    enable_gqa : bool
        Grouped-query attention: the query's heads (dimension -3) share the key's and
        value's fewer heads, each key head serving ``Hq / Hk`` consecutive query heads.

    Returns
    -------
    Tensor
        ``(..., L, Ev)``. A query whose every score is -inf (all its keys masked) gets
        zeros, as in PyTorch, not nan.
    """
    op = "scaled_dot_product_attention"
    for name, t in (("query", query), ("key", key), ("value", value)):
        require_tensor(op, name, t)
    if min(query.ndim, key.ndim, value.ndim) < 2:
        raise ValueError(
            f"{op}: expected query, key and value of at least 2 dimensions, got shapes "
            f"{query.shape}, {key.shape} and {value.shape}"
        )
    same = query.dtype is key.dtype and key.dtype is value.dtype
    if not same or not query.dtype.is_floating_point:
        raise TypeError(
            f"{op}: query, key and value must have one floating dtype, got "
            f"{query.dtype.name}, {key.dtype.name} and {value.dtype.name}"
        )
    if key.shape[-1] != query.shape[-1] or key.shape[-2] != value.shape[-2]:
        raise ValueError(
            f"{op}: expected query (..., L, E), key (..., S, E) and value (..., S, Ev), got "
            f"{query.shape}, {key.shape} and {value.shape}"
        )
    if attn_mask is not None and is_causal:
        raise RuntimeError(
            f"{op}: attn_mask should not be set when is_causal=True (is_causal is the lower "
            f"triangular mask; give one or the other)"
        )
    if not 0.0 <= dropout_p <= 1.0:
        raise ValueError(f"{op}: dropout_p must be in [0, 1], got {dropout_p}")
    if enable_gqa:
        key, value = _grouped_heads(op, query, key), _grouped_heads(op, query, value)
    if scale is None:
        scale = 1.0 / float(np.sqrt(query.shape[-1])) if query.shape[-1] else 1.0
    scores = (query * scale) @ key.mT
    if is_causal:
        rows, columns = scores.shape[-2:]
        lower = np.tril(np.ones((rows, columns), dtype=bool))
        scores = where(_constant_mask(scores, lower), scores, float("-inf"))
        weights = softmax(scores, -1)  # row i keeps key 0: no row is empty
    elif attn_mask is not None:
        weights = _safe_softmax(_attention_mask(op, attn_mask, scores))
    else:
        weights = softmax(scores, -1)
    if dropout_p > 0.0:
        weights = dropout(weights, dropout_p)
    return weights @ value


def _grouped_heads(op: str, query: Tensor, x: Tensor) -> Tensor:
    """``x``'s heads (dimension -3) repeated to the query's count, each ``Hq / Hk`` times in
    a row (grouped-query attention)."""
    if min(query.ndim, x.ndim) < 3:
        raise ValueError(
            f"{op}: enable_gqa needs heads at dimension -3, got shapes {query.shape} and {x.shape}"
        )
    heads, groups = query.shape[-3], x.shape[-3]
    if groups == 0 or heads % groups:
        raise ValueError(
            f"{op}: with enable_gqa the key's and value's number of heads ({groups}) must "
            f"divide the query's ({heads})"
        )
    if heads == groups:
        return x
    be = x._backend
    positions = np.repeat(np.arange(groups), heads // groups)
    return index_select(x, x.ndim - 3, Tensor._make(be.from_numpy(positions, int64), be, int64))
