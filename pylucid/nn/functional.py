"""Losses, activations and layers as functions, with PyTorch's names, signatures and
defaults (``torch.nn.functional``), built on pylucid's ops: each is differentiable
(including with ``create_graph``) and runs on every backend.

``cross_entropy`` with class indices, the convolutions (:mod:`pylucid.ops.convolution`),
the pools (:mod:`pylucid.ops.pooling`) and ``layer_norm`` are ops with their own kernels;
``batch_norm`` (:mod:`pylucid.ops.normalization`), ``instance_norm``, ``rms_norm``,
``normalize``, the other losses and activations are short compositions of ops, whose
gradients are those of the ops. The transposed and 3-d convolutions, the 1-d pools,
``interpolate``, ``pixel_shuffle`` and ``unfold`` / ``fold`` are compositions too
(:mod:`pylucid.nn.convolutions`, :mod:`pylucid.nn.resampling`).

Every function takes PyTorch's keyword names (``F.gelu(input=x)``). ``inplace=True``
(activations, dropouts) writes the result into the input, as PyTorch's (an in-place op:
:func:`pylucid.ops.inplace.in_place`), so a program that reads the input afterwards sees
what it sees in PyTorch.

Not supported (yet): ``weight=`` of the classification losses and the deprecated
``size_average=`` / ``reduce=``.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from pylucid.dtypes import DType, bool_, finfo, float32, float64, int32, int64
from pylucid.factories import arange, rand
from pylucid.graph.grad_mode import no_grad
from pylucid.nn.convolutions import conv3d, conv_transpose1d, conv_transpose2d
from pylucid.nn.resampling import (
    fold,
    interpolate,
    pad,
    pixel_shuffle,
    pixel_unshuffle,
    unfold,
)
from pylucid.ops import abs as _abs
from pylucid.ops import clamp, exp, log, log1p, where
from pylucid.ops import elu as _elu
from pylucid.ops import gelu as _gelu
from pylucid.ops import leaky_relu as _leaky_relu
from pylucid.ops import log_softmax as _log_softmax
from pylucid.ops import relu as _relu
from pylucid.ops import sigmoid as _sigmoid
from pylucid.ops import silu as _silu
from pylucid.ops import softmax as _softmax
from pylucid.ops import softplus as _softplus
from pylucid.ops import tanh as _tanh
from pylucid.ops.convolution import conv1d, conv2d
from pylucid.ops.embedding import EmbeddingBackward, take
from pylucid.ops.gathering import index_select
from pylucid.ops.inplace import in_place
from pylucid.ops.losses import check_options, checked_target_count
from pylucid.ops.losses import cross_entropy as _cross_entropy_indices
from pylucid.ops.normalization import batch_norm, layer_norm
from pylucid.ops.pooling import adaptive_avg_pool2d, avg_pool2d, max_pool2d
from pylucid.ops.random import dropout_with_draws
from pylucid.ops.wrapping import require_tensor
from pylucid.tensor import Tensor

__all__ = [
    "adaptive_avg_pool1d",
    "adaptive_avg_pool2d",
    "avg_pool1d",
    "avg_pool2d",
    "batch_norm",
    "binary_cross_entropy",
    "binary_cross_entropy_with_logits",
    "conv1d",
    "conv2d",
    "conv3d",
    "conv_transpose1d",
    "conv_transpose2d",
    "cross_entropy",
    "dropout",
    "dropout1d",
    "dropout2d",
    "dropout3d",
    "elu",
    "embedding",
    "fold",
    "gelu",
    "glu",
    "hardsigmoid",
    "hardswish",
    "hardtanh",
    "instance_norm",
    "interpolate",
    "l1_loss",
    "layer_norm",
    "leaky_relu",
    "linear",
    "log_softmax",
    "logsigmoid",
    "max_pool1d",
    "max_pool2d",
    "mish",
    "mse_loss",
    "nll_loss",
    "normalize",
    "one_hot",
    "pad",
    "pixel_shuffle",
    "pixel_unshuffle",
    "prelu",
    "relu",
    "relu6",
    "rms_norm",
    "scaled_dot_product_attention",
    "sigmoid",
    "silu",
    "smooth_l1_loss",
    "softmax",
    "softplus",
    "softsign",
    "tanh",
    "tanhshrink",
    "unfold",
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
    # (the targets are read by the ops below, not in Python: a compiled step captures them)
    labels = target.reshape(-1)
    keep = labels != ignore_index
    rows = arange(labels.numel(), dtype=int64, device=input.device) * input.shape[-1]
    picked = EmbeddingBackward.apply(
        input.reshape(-1), rows + where(keep, labels, 0), axis=0, padding_idx=None
    )
    loss = -where(keep, picked, 0.0)
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
    loss = -(q * log_softmax(input, dim=axis)).sum(axis=axis)
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
    the row ``padding_idx`` (negative: from the end) gets none, as in PyTorch. The indices
    are read by the op's kernels, not in Python (:class:`~pylucid.ops.embedding.
    EmbeddingBackward`): a compiled step captures them."""
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
    return take("embedding", weight, input, 0, "the embeddings (weight's dim 0)",
                padding_idx=padding_idx)  # fmt: skip


def dropout(
    input: Tensor,  # noqa: A002
    p: float = 0.5,
    training: bool = True,
    inplace: bool = False,
) -> Tensor:
    """Zero each element with probability ``p`` and scale the others by ``1 / (1 - p)``
    (the expectation is kept), drawing from the generator of :func:`pylucid.manual_seed`;
    the identity when not ``training`` or ``p = 0``, zeros for ``p = 1``. The gradient is
    the same mask times ``g``. With ``inplace`` the result is written into ``input``."""
    require_tensor("dropout", "input", input)
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout: p must be in [0, 1], got {p}")
    if not training or p == 0.0:
        return input
    if p == 1.0:
        return _maybe_in_place("dropout", input, inplace, lambda: input * 0.0)
    draws = rand(*input.shape, dtype=input.dtype, device=input.device)
    if input.dtype is float32 or input.dtype is float64:  # one pass each way
        return _maybe_in_place(
            "dropout", input, inplace, lambda: dropout_with_draws(input, draws, p)
        )
    keep = draws >= p  # (the half dtypes: their quotient's rounding, as the ops give it)
    return _maybe_in_place(
        "dropout", input, inplace, lambda: where(keep, input / (1.0 - p), 0.0)
    )


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


# -- activations -----------------------------------------------------------------------------
def _maybe_in_place(
    op: str,
    input: Tensor,  # noqa: A002
    inplace: bool,
    compute: Callable[[], Tensor],
) -> Tensor:
    """``compute()``, or, with PyTorch's ``inplace=True``, ``compute()`` written into
    ``input`` (which is returned): a program may ignore the result and read ``input``."""
    if not inplace:
        return compute()
    require_tensor(op, "input", input)
    return in_place(f"{op}_", input, compute)



# PyTorch's signatures over the ops (whose first parameter is ``x``), so that PyTorch's
# keywords (``input=``, ``dim=``, ``inplace=``) work; a positional call costs one more
# Python call.
def relu(input: Tensor, inplace: bool = False) -> Tensor:  # noqa: A002
    """``max(input, 0)`` (:func:`pylucid.relu`), into ``input`` itself with ``inplace``."""
    return _maybe_in_place("relu", input, inplace, lambda: _relu(input))


def sigmoid(input: Tensor) -> Tensor:  # noqa: A002
    """``1 / (1 + exp(-input))`` (:func:`pylucid.sigmoid`)."""
    return _sigmoid(input)


def tanh(input: Tensor) -> Tensor:  # noqa: A002
    """``tanh(input)`` (:func:`pylucid.tanh`)."""
    return _tanh(input)


def silu(input: Tensor, inplace: bool = False) -> Tensor:  # noqa: A002
    """``input * sigmoid(input)`` (:func:`pylucid.ops.silu`), into ``input`` with
    ``inplace``."""
    return _maybe_in_place("silu", input, inplace, lambda: _silu(input))


def gelu(input: Tensor, approximate: str = "none") -> Tensor:  # noqa: A002
    """GELU, exact or ``approximate="tanh"`` (:func:`pylucid.ops.gelu`)."""
    return _gelu(input, approximate)


def elu(input: Tensor, alpha: float = 1.0, inplace: bool = False) -> Tensor:  # noqa: A002
    """``input`` where positive, ``alpha (exp(input) - 1)`` elsewhere
    (:func:`pylucid.ops.elu`), into ``input`` with ``inplace``."""
    return _maybe_in_place("elu", input, inplace, lambda: _elu(input, alpha))


def leaky_relu(
    input: Tensor,  # noqa: A002
    negative_slope: float = 0.01,
    inplace: bool = False,
) -> Tensor:
    """``input`` where positive, ``negative_slope * input`` elsewhere
    (:func:`pylucid.ops.leaky_relu`), into ``input`` with ``inplace``."""
    return _maybe_in_place(
        "leaky_relu", input, inplace, lambda: _leaky_relu(input, negative_slope)
    )


def softplus(input: Tensor, beta: float = 1.0, threshold: float = 20.0) -> Tensor:  # noqa: A002
    """``log(1 + exp(beta input)) / beta``, linear beyond ``threshold``
    (:func:`pylucid.ops.softplus`)."""
    return _softplus(input, beta, threshold)


def _softmax_dim(op: str, input: Tensor, dim: int | None) -> int:  # noqa: A002
    """``dim``, or PyTorch's legacy implicit choice (0 for 0-, 1- and 3-d inputs, else 1)
    with its deprecation warning."""
    if dim is not None:
        return dim
    warnings.warn(
        f"Implicit dimension choice for {op} has been deprecated. Change the call to include "
        f"dim=X as an argument.",
        UserWarning,
        stacklevel=3,
    )
    return 0 if input.ndim in (0, 1, 3) else 1


def softmax(
    input: Tensor,  # noqa: A002
    dim: int | None = None,
    _stacklevel: int = 3,
    dtype: DType | None = None,
) -> Tensor:
    """``exp(input) / sum(exp(input))`` along ``dim``, computed in ``dtype`` when given (the
    input is converted first), as ``torch.nn.functional.softmax``."""
    dim = _softmax_dim("softmax", input, dim)
    return _softmax(input if dtype is None else input.to(dtype), dim=dim)


def log_softmax(
    input: Tensor,  # noqa: A002
    dim: int | None = None,
    _stacklevel: int = 3,
    dtype: DType | None = None,
) -> Tensor:
    """``input - logsumexp(input)`` along ``dim``, computed in ``dtype`` when given, as
    ``torch.nn.functional.log_softmax``."""
    dim = _softmax_dim("log_softmax", input, dim)
    return _log_softmax(input if dtype is None else input.to(dtype), dim=dim)


def _bounded(input: Tensor, low: float, high: float, inner: Tensor) -> Tensor:  # noqa: A002
    """``inner`` strictly between ``low`` and ``high``; elsewhere ``inner`` of the input
    clamped to ``[low, high]``, a constant (no gradient there: PyTorch's hard activations
    pass none at or beyond their corners). NaN stays NaN."""
    inside = (input > low) & (input < high)
    return where(inside, inner, clamp(input.detach(), low, high))


def hardtanh(
    input: Tensor,  # noqa: A002
    min_val: float = -1.0,
    max_val: float = 1.0,
    inplace: bool = False,
) -> Tensor:
    """``input`` clamped to ``[min_val, max_val]``, with gradient only strictly inside (as
    ``torch.nn.functional.hardtanh``), into ``input`` with ``inplace``."""
    require_tensor("hardtanh", "input", input)
    if min_val > max_val:
        raise ValueError(f"hardtanh: min_val ({min_val}) cannot be greater than max_val "
                         f"({max_val})")  # fmt: skip
    return _maybe_in_place(
        "hardtanh", input, inplace, lambda: _bounded(input, min_val, max_val, input)
    )


def relu6(input: Tensor, inplace: bool = False) -> Tensor:  # noqa: A002
    """``min(max(input, 0), 6)``: :func:`hardtanh` from 0 to 6."""
    return hardtanh(input, 0.0, 6.0, inplace)


def hardsigmoid(input: Tensor, inplace: bool = False) -> Tensor:  # noqa: A002
    """``min(max(input + 3, 0), 6) / 6``, gradient ``1/6`` strictly between -3 and 3."""
    require_tensor("hardsigmoid", "input", input)

    def compute() -> Tensor:
        shifted = input + 3.0
        return _bounded(shifted, 0.0, 6.0, shifted) / 6.0

    return _maybe_in_place("hardsigmoid", input, inplace, compute)


def hardswish(input: Tensor, inplace: bool = False) -> Tensor:  # noqa: A002
    """``input * min(max(input + 3, 0), 6) / 6``; the gradient is ``input / 3 + 1/2``
    strictly between -3 and 3, 0 at and below -3, 1 at and above 3, as PyTorch's."""
    require_tensor("hardswish", "input", input)

    def compute() -> Tensor:
        inside = (input > -3.0) & (input < 3.0)
        outer = clamp(input.detach() + 3.0, 0.0, 6.0)  # (0 or 6: a gradient of 0 or 1)
        return where(inside, input * (input + 3.0), input * outer) / 6.0

    return _maybe_in_place("hardswish", input, inplace, compute)


def mish(input: Tensor, inplace: bool = False) -> Tensor:  # noqa: A002
    """``input * tanh(softplus(input))``, into ``input`` with ``inplace``."""
    return _maybe_in_place("mish", input, inplace, lambda: input * _tanh(_softplus(input)))


def softsign(input: Tensor) -> Tensor:  # noqa: A002
    """``input / (1 + |input|)``."""
    return input / (_abs(input) + 1.0)


def tanhshrink(input: Tensor) -> Tensor:  # noqa: A002
    """``input - tanh(input)``."""
    return input - _tanh(input)


def logsigmoid(input: Tensor) -> Tensor:  # noqa: A002
    """``log(sigmoid(input)) = -softplus(-input)``, computed as PyTorch's
    ``min(x, 0) - log1p(exp(-|x|))`` (no overflow, no threshold)."""
    return -_softplus(-input, 1.0, math.inf)


def glu(input: Tensor, dim: int = -1) -> Tensor:  # noqa: A002
    """The gated linear unit ``a * sigmoid(b)``, ``a`` and ``b`` the halves of ``input``
    along ``dim``."""
    require_tensor("glu", "input", input)
    if input.ndim == 0:
        raise ValueError("glu: does not support scalars because halving size must be even")
    size = input.shape[dim]
    if size % 2:
        raise ValueError(f"glu: halving dimension must be even, but dimension {dim} of input "
                         f"of shape {input.shape} is size {size}")  # fmt: skip
    first, second = input.chunk(2, dim)
    return first * _sigmoid(second)


def prelu(input: Tensor, weight: Tensor) -> Tensor:  # noqa: A002
    """``input`` where positive, ``weight * input`` elsewhere, ``weight`` one slope or one
    per channel (dimension 1; dimension 0 of a 1-d input), as
    ``torch.nn.functional.prelu``. The gradient at 0 is the slope's, as PyTorch's."""
    require_tensor("prelu", "input", input)
    require_tensor("prelu", "weight", weight)
    if weight.numel() != 1:
        axis = 1 if input.ndim >= 2 else 0
        if weight.ndim != 1 or input.ndim == 0 or weight.shape[0] != input.shape[axis]:
            raise ValueError(
                f"prelu: weight of shape {weight.shape} must hold 1 slope or one per channel "
                f"(dimension {axis} of the input of shape {input.shape})"
            )
        weight = weight.reshape((-1,) + (1,) * (input.ndim - axis - 1))
    elif weight.ndim:
        weight = weight.reshape(())
    return where(input > 0, input, weight * input)


# -- normalisation ---------------------------------------------------------------------------
def _zero_safe_root(total: Tensor, root: float) -> Tensor:
    """``total ** root`` for ``total >= 0``, 0 with a zero gradient where ``total`` is 0
    (where the root's derivative is infinite: a norm's gradient there is 0, as PyTorch's)."""
    positive = total > 0
    safe = where(positive, total, 1.0)
    return where(positive, safe.sqrt() if root == 0.5 else safe**root, 0.0)


def _norm(input: Tensor, p: float, dim: Any) -> Tensor:  # noqa: A002
    """The ``p``-norm of ``input`` over ``dim`` (kept as size 1)."""
    if p == 2:
        return _zero_safe_root((input * input).sum(dim=dim, keepdim=True), 0.5)
    magnitude = _abs(input)
    if p == math.inf:
        return magnitude.amax(dim=dim, keepdim=True)
    if p == 1:
        return magnitude.sum(dim=dim, keepdim=True)
    return _zero_safe_root((magnitude**p).sum(dim=dim, keepdim=True), 1.0 / p)


def normalize(
    input: Tensor,  # noqa: A002
    p: float = 2.0,
    dim: int | Sequence[int] = 1,
    eps: float = 1e-12,
    out: Tensor | None = None,
) -> Tensor:
    r"""``input / max(||input||_p, eps)`` with the norm over ``dim``, as
    ``torch.nn.functional.normalize``; ``p`` a positive number or ``inf``.

    A composition of ops; where a norm is 0 (a zero vector) the result is 0 with a zero
    gradient through the norm, as PyTorch's (a plain ``sqrt`` would give nan).
    """
    require_tensor("normalize", "input", input)
    if out is not None:
        raise NotImplementedError("normalize: out= is not supported by pylucid; use the result")
    if not (p > 0):
        raise ValueError(f"normalize: p must be a positive number or inf, got {p!r}")
    norm = _norm(input, float(p), dim)
    return input / clamp(norm, min=eps)


def rms_norm(
    input: Tensor,  # noqa: A002
    normalized_shape: int | Sequence[int],
    weight: Tensor | None = None,
    eps: float | None = None,
) -> Tensor:
    r"""Root-mean-square normalisation over the trailing ``normalized_shape``:
    :math:`x / \sqrt{\operatorname{mean}(x^2) + \epsilon} \cdot w`, as
    ``torch.nn.functional.rms_norm`` (``eps`` None: the dtype's machine epsilon; half
    inputs computed in float32, as PyTorch)."""
    require_tensor("rms_norm", "input", input)
    shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    count = len(shape)
    if not count or input.shape[input.ndim - count :] != shape or count > input.ndim:
        raise ValueError(
            f"rms_norm: normalized_shape {shape} must be the trailing dimensions of the "
            f"input of shape {input.shape}"
        )
    if weight is not None:
        require_tensor("rms_norm", "weight", weight)
        if weight.shape != shape:
            raise ValueError(f"rms_norm: weight of shape {weight.shape} must have "
                             f"normalized_shape {shape}")  # fmt: skip
    if eps is None:
        eps = float(finfo(input.dtype).eps)
    x = input.to(float32) if input.dtype.is_half else input
    axes = tuple(range(input.ndim - count, input.ndim))
    out = x * ((x * x).mean(dim=axes, keepdim=True) + eps).rsqrt()
    out = out.to(input.dtype) if input.dtype.is_half else out
    return out if weight is None else out * weight


def instance_norm(
    input: Tensor,  # noqa: A002
    running_mean: Tensor | None = None,
    running_var: Tensor | None = None,
    weight: Tensor | None = None,
    bias: Tensor | None = None,
    use_input_stats: bool = True,
    momentum: float = 0.1,
    eps: float = 1e-5,
) -> Tensor:
    r"""Instance normalisation of ``(N, C, *spatial)`` ``input``: each ``(n, c)`` plane by
    its own mean and biased variance, then ``* weight + bias`` per channel, as
    ``torch.nn.functional.instance_norm``.

    With ``use_input_stats`` the running statistics, where given, are updated in place
    without gradient by the instances' averages: ``running = (1 - momentum) running +
    momentum mean_n(stat)``, the variance unbiased there; otherwise the running statistics
    normalise (they must be given).

    .. math:: y = \frac{x - \mu_{n,c}}{\sqrt{\sigma^2_{n,c} + \varepsilon}}\, w_c + b_c
    """
    op = "instance_norm"
    require_tensor(op, "input", input)
    if input.ndim < 3:
        raise ValueError(f"{op}: expected an input (N, C, *spatial), got shape {input.shape}")
    channels = input.shape[1]
    for name, t in (("running_mean", running_mean), ("running_var", running_var),
                    ("weight", weight), ("bias", bias)):  # fmt: skip
        if t is not None:
            require_tensor(op, name, t)
            if t.shape != (channels,):
                raise ValueError(
                    f"{op}: {name} of shape {t.shape} does not fit {channels} channels of "
                    f"the input of shape {input.shape}: expected ({channels},)"
                )
    broadcast = (1, channels) + (1,) * (input.ndim - 2)
    if use_input_stats:
        axes = tuple(range(2, input.ndim))
        count = math.prod(input.shape[2:])
        if count <= 1:
            raise ValueError(
                f"{op}: expected more than 1 spatial element when training, got input of "
                f"shape {input.shape}"
            )
        mean = input.mean(dim=axes, keepdim=True)
        centred = input - mean
        var = (centred * centred).mean(dim=axes, keepdim=True)
        with no_grad():
            for running, stat, factor in ((running_mean, mean, 1.0),
                                          (running_var, var, count / (count - 1))):  # fmt: skip
                if running is not None:
                    batch = stat.detach().reshape(input.shape[:2]).mean(dim=0) * factor
                    running.mul_(1.0 - momentum).add_(batch.to(running.dtype) * momentum)
    else:
        if running_mean is None or running_var is None:
            raise ValueError(
                f"{op}: running_mean and running_var must be given when use_input_stats is "
                f"False (they normalise then)"
            )
        mean, var = running_mean.reshape(broadcast), running_var.reshape(broadcast)
        centred = input - mean
    out = centred * (var + eps).rsqrt()
    if weight is not None:
        out = out * weight.reshape(broadcast)
    if bias is not None:
        out = out + bias.reshape(broadcast)
    return out


# -- channel dropout -------------------------------------------------------------------------
def _feature_dropout(input: Tensor, p: float, training: bool) -> Tensor:  # noqa: A002
    """Zero whole channels (dimension 1 of ``(N, C, ...)``) with probability ``p``, the
    others scaled by ``1 / (1 - p)``."""
    if not training or p == 0.0:
        return input
    if p == 1.0:
        return input * 0.0
    mask = (*input.shape[:2], *(1,) * (input.ndim - 2))
    keep = rand(*mask, dtype=input.dtype, device=input.device) >= p
    return where(keep, input / (1.0 - p), 0.0)


def _channels(input: Tensor, p: float, training: bool, unbatched: int) -> Tensor:  # noqa: A002
    """:func:`_feature_dropout` of ``input``, taken as one batch when it has ``unbatched``
    dimensions."""
    if input.ndim == unbatched:
        return _feature_dropout(input.reshape(1, *input.shape), p, training).reshape(input.shape)
    return _feature_dropout(input, p, training)


def _check_p(op: str, input: Tensor, p: float) -> None:  # noqa: A002
    require_tensor(op, "input", input)
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"{op}: dropout probability has to be between 0 and 1, but got {p}")


def dropout1d(
    input: Tensor,  # noqa: A002
    p: float = 0.5,
    training: bool = True,
    inplace: bool = False,
) -> Tensor:
    """Zero whole channels of ``(N, C, L)`` (or ``(C, L)``) ``input`` with probability
    ``p``, scaling the others by ``1 / (1 - p)``, as ``torch.nn.functional.dropout1d``
    (drawn from :func:`pylucid.manual_seed`'s generator); into ``input`` with ``inplace``."""
    _check_p("dropout1d", input, p)
    if input.ndim not in (2, 3):
        raise ValueError(f"dropout1d: expected a 2-d or 3-d input, got shape {input.shape}")
    return _maybe_in_place("dropout1d", input, inplace, lambda: _channels(input, p, training, 2))


def dropout2d(
    input: Tensor,  # noqa: A002
    p: float = 0.5,
    training: bool = True,
    inplace: bool = False,
) -> Tensor:
    """Zero whole channels of ``(N, C, H, W)`` ``input`` with probability ``p``, scaling the
    others by ``1 / (1 - p)``, as ``torch.nn.functional.dropout2d``. As PyTorch's, a 3-d
    input is taken as ``(N, C, L)`` (channel-wise 1-d dropout) with a warning, and other
    ranks warn too; into ``input`` with ``inplace``."""
    _check_p("dropout2d", input, p)
    if input.ndim not in (3, 4):
        warnings.warn(
            f"dropout2d: received a {input.ndim}-D input, which is deprecated (dropout2d "
            f"expects 3-D or 4-D inputs); use dropout instead",
            UserWarning,
            stacklevel=2,
        )
    if input.ndim == 3:
        warnings.warn(
            "dropout2d: received a 3-D input and assuming that channel-wise 1-D dropout is "
            "meant - the input is taken as (N, C, L); use dropout1d for that",
            UserWarning,
            stacklevel=2,
        )
    return _maybe_in_place(
        "dropout2d", input, inplace, lambda: _feature_dropout(input, p, training)
    )


def dropout3d(
    input: Tensor,  # noqa: A002
    p: float = 0.5,
    training: bool = True,
    inplace: bool = False,
) -> Tensor:
    """Zero whole channels of ``(N, C, D, H, W)`` (or ``(C, D, H, W)``) ``input`` with
    probability ``p``, as ``torch.nn.functional.dropout3d`` (other ranks warn, as
    PyTorch's); into ``input`` with ``inplace``."""
    _check_p("dropout3d", input, p)
    if input.ndim not in (4, 5):
        warnings.warn(
            f"dropout3d: received a {input.ndim}-D input, which is deprecated (dropout3d "
            f"expects 4-D or 5-D inputs); use dropout instead",
            UserWarning,
            stacklevel=2,
        )
    return _maybe_in_place("dropout3d", input, inplace, lambda: _channels(input, p, training, 4))


# -- 1-d pools -------------------------------------------------------------------------------
def _one(op: str, name: str, value: Any) -> int:
    """An int or a 1-tuple as an int."""
    if not isinstance(value, int):
        values = tuple(value)
        if len(values) != 1:
            raise ValueError(f"{op}: {name} must be an int or 1 int, got {value!r}")
        value = values[0]
    return value


def _as_planes(op: str, input: Tensor) -> Tensor:  # noqa: A002
    """``(N, C, L)`` or ``(C, L)`` as planes of height 1."""
    require_tensor(op, "input", input)
    if input.ndim not in (2, 3):
        raise ValueError(f"{op}: expected a 2-d (C, L) or 3-d (N, C, L) input, got shape "
                         f"{input.shape}")  # fmt: skip
    return input.unsqueeze(-2)


def max_pool1d(
    input: Tensor,  # noqa: A002
    kernel_size: int | tuple[int],
    stride: int | tuple[int] | None = None,
    padding: int | tuple[int] = 0,
    dilation: int | tuple[int] = 1,
    ceil_mode: bool = False,
    return_indices: bool = False,
) -> Tensor | tuple[Tensor, Tensor]:
    """1-d max pooling of ``(N, C, L)`` (or ``(C, L)``) ``input``, as
    ``torch.nn.functional.max_pool1d``: :func:`max_pool2d` of height 1 (its indices are
    positions along ``L``)."""
    op = "max_pool1d"
    planes = _as_planes(op, input)
    kernel = _one(op, "kernel_size", kernel_size)
    step = kernel if stride is None or stride == () else _one(op, "stride", stride)
    out = max_pool2d(planes, (1, kernel), (1, step), (0, _one(op, "padding", padding)),
                     (1, _one(op, "dilation", dilation)), ceil_mode, return_indices)  # fmt: skip
    if return_indices:
        return out[0].squeeze(-2), out[1].squeeze(-2)
    return out.squeeze(-2)


def avg_pool1d(
    input: Tensor,  # noqa: A002
    kernel_size: int | tuple[int],
    stride: int | tuple[int] | None = None,
    padding: int | tuple[int] = 0,
    ceil_mode: bool = False,
    count_include_pad: bool = True,
) -> Tensor:
    """1-d average pooling of ``(N, C, L)`` (or ``(C, L)``) ``input``, as
    ``torch.nn.functional.avg_pool1d``: :func:`avg_pool2d` of height 1."""
    op = "avg_pool1d"
    planes = _as_planes(op, input)
    kernel = _one(op, "kernel_size", kernel_size)
    step = kernel if stride is None or stride == () else _one(op, "stride", stride)
    return avg_pool2d(planes, (1, kernel), (1, step), (0, _one(op, "padding", padding)),
                      ceil_mode, count_include_pad).squeeze(-2)  # fmt: skip


def adaptive_avg_pool1d(input: Tensor, output_size: int | tuple[int]) -> Tensor:  # noqa: A002
    """1-d adaptive average pooling of ``(N, C, L)`` (or ``(C, L)``) ``input`` to
    ``output_size``, as ``torch.nn.functional.adaptive_avg_pool1d``."""
    op = "adaptive_avg_pool1d"
    planes = _as_planes(op, input)
    return adaptive_avg_pool2d(planes, (1, _one(op, "output_size", output_size))).squeeze(-2)
