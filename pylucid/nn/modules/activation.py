"""Activation modules, as in ``torch.nn``: each calls its function in
:mod:`pylucid.nn.functional` with the arguments it was made with; and
:class:`MultiheadAttention`, which PyTorch files here too."""

from __future__ import annotations

import math
from typing import Any

from pylucid.factories import empty, full, zeros
from pylucid.nn import functional as F  # noqa: N812  (PyTorch's idiom)
from pylucid.nn import init
from pylucid.nn.modules.linear import NonDynamicallyQuantizableLinear
from pylucid.nn.modules.module import Module
from pylucid.nn.parameter import Parameter
from pylucid.ops.shape import concatenate
from pylucid.tensor import Tensor

__all__ = [
    "ELU",
    "GELU",
    "GLU",
    "Hardsigmoid",
    "Hardswish",
    "Hardtanh",
    "LeakyReLU",
    "LogSigmoid",
    "LogSoftmax",
    "Mish",
    "MultiheadAttention",
    "NonDynamicallyQuantizableLinear",
    "PReLU",
    "ReLU",
    "ReLU6",
    "SiLU",
    "Sigmoid",
    "Softmax",
    "Softplus",
    "Softsign",
    "Tanh",
    "Tanhshrink",
]


class ReLU(Module):
    """``max(x, 0)``; with ``inplace`` written into the input, as PyTorch's."""

    def __init__(self, inplace: bool = False) -> None:
        super().__init__()
        self.inplace = inplace

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return F.relu(input, self.inplace)

    def extra_repr(self) -> str:
        return "inplace=True" if self.inplace else ""


class Tanh(Module):
    """``tanh(x)``."""

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return F.tanh(input)


class Sigmoid(Module):
    """``1 / (1 + exp(-x))``."""

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return F.sigmoid(input)


class SiLU(Module):
    """``x sigmoid(x)``."""

    def __init__(self, inplace: bool = False) -> None:
        super().__init__()
        self.inplace = inplace

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return F.silu(input, self.inplace)

    def extra_repr(self) -> str:
        return "inplace=True" if self.inplace else ""


class GELU(Module):
    """``x Phi(x)`` (``approximate="tanh"``: the tanh approximation)."""

    def __init__(self, approximate: str = "none") -> None:
        super().__init__()
        self.approximate = approximate

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return F.gelu(input, approximate=self.approximate)

    def extra_repr(self) -> str:
        return f"approximate={self.approximate!r}"


class LeakyReLU(Module):
    """``x`` where positive, ``negative_slope x`` elsewhere."""

    def __init__(self, negative_slope: float = 0.01, inplace: bool = False) -> None:
        super().__init__()
        self.negative_slope, self.inplace = negative_slope, inplace

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return F.leaky_relu(input, self.negative_slope, self.inplace)

    def extra_repr(self) -> str:
        return f"negative_slope={self.negative_slope}" + (", inplace=True" if self.inplace else "")


class ELU(Module):
    """``x`` where positive, ``alpha (exp(x) - 1)`` elsewhere."""

    def __init__(self, alpha: float = 1.0, inplace: bool = False) -> None:
        super().__init__()
        self.alpha, self.inplace = alpha, inplace

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return F.elu(input, self.alpha, self.inplace)

    def extra_repr(self) -> str:
        return f"alpha={self.alpha}" + (", inplace=True" if self.inplace else "")


class Softplus(Module):
    """``log(1 + exp(beta x)) / beta``, linear beyond ``threshold``."""

    def __init__(self, beta: float = 1.0, threshold: float = 20.0) -> None:
        super().__init__()
        self.beta, self.threshold = beta, threshold

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return F.softplus(input, self.beta, self.threshold)

    def extra_repr(self) -> str:
        return f"beta={self.beta}, threshold={self.threshold}"


class Softmax(Module):
    """``exp(x) / sum(exp(x))`` along ``dim``."""

    def __init__(self, dim: int | None = None) -> None:
        super().__init__()
        self.dim = dim

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return F.softmax(input, _dim("Softmax", self.dim, input))

    def extra_repr(self) -> str:
        return f"dim={self.dim}"


class LogSoftmax(Module):
    """``x - log(sum(exp(x)))`` along ``dim``."""

    def __init__(self, dim: int | None = None) -> None:
        super().__init__()
        self.dim = dim

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return F.log_softmax(input, _dim("LogSoftmax", self.dim, input))

    def extra_repr(self) -> str:
        return f"dim={self.dim}"


class Hardtanh(Module):
    """``input`` clamped to ``[min_val, max_val]`` (:func:`pylucid.nn.functional.hardtanh`);
    with ``inplace`` written into the input, as PyTorch's."""

    def __init__(self, min_val: float = -1.0, max_val: float = 1.0, inplace: bool = False) -> None:
        super().__init__()
        if min_val > max_val:
            raise ValueError(f"Hardtanh: min_val ({min_val}) cannot be greater than max_val "
                             f"({max_val})")  # fmt: skip
        self.min_val, self.max_val, self.inplace = min_val, max_val, inplace

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return F.hardtanh(input, self.min_val, self.max_val, self.inplace)

    def extra_repr(self) -> str:
        inplace = ", inplace=True" if self.inplace else ""
        return f"min_val={self.min_val}, max_val={self.max_val}{inplace}"


class ReLU6(Hardtanh):
    """``min(max(input, 0), 6)``."""

    def __init__(self, inplace: bool = False) -> None:
        super().__init__(0.0, 6.0, inplace)

    def extra_repr(self) -> str:
        return "inplace=True" if self.inplace else ""


class _Elementwise(Module):
    """An activation without hyperparameters: ``function`` of the input."""

    function: Any

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return type(self).function(input)


class _InPlaceElementwise(_Elementwise):
    """An activation without hyperparameters that PyTorch can run in place: with
    ``inplace`` the result is written into the input."""

    def __init__(self, inplace: bool = False) -> None:
        super().__init__()
        self.inplace = inplace

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return type(self).function(input, self.inplace)


class Hardsigmoid(_InPlaceElementwise):
    """``min(max(input + 3, 0), 6) / 6`` (:func:`pylucid.nn.functional.hardsigmoid`)."""

    function = staticmethod(F.hardsigmoid)


class Hardswish(_InPlaceElementwise):
    """``input * min(max(input + 3, 0), 6) / 6``
    (:func:`pylucid.nn.functional.hardswish`)."""

    function = staticmethod(F.hardswish)


class Mish(_InPlaceElementwise):
    """``input * tanh(softplus(input))``."""

    function = staticmethod(F.mish)


class Softsign(_Elementwise):
    """``input / (1 + |input|)``."""

    function = staticmethod(F.softsign)


class Tanhshrink(_Elementwise):
    """``input - tanh(input)``."""

    function = staticmethod(F.tanhshrink)


class LogSigmoid(_Elementwise):
    """``log(sigmoid(input))``, without overflow."""

    function = staticmethod(F.logsigmoid)


class GLU(Module):
    """The gated linear unit ``a * sigmoid(b)`` of the halves of the input along ``dim``."""

    def __init__(self, dim: int = -1) -> None:
        super().__init__()
        self.dim = dim

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return F.glu(input, self.dim)

    def extra_repr(self) -> str:
        return f"dim={self.dim}"


class PReLU(Module):
    """``input`` where positive, ``weight * input`` elsewhere, with a learned ``weight`` of
    ``num_parameters`` slopes (1, or one per channel), all ``init`` at first, as
    ``torch.nn.PReLU`` (:func:`pylucid.nn.functional.prelu`)."""

    def __init__(
        self, num_parameters: int = 1, init: float = 0.25, device: str | None = None,
        dtype: Any = None,
    ) -> None:  # fmt: skip
        super().__init__()
        self.num_parameters, self.init = num_parameters, init
        kind = {"device": device, **({"dtype": dtype} if dtype is not None else {})}
        self.weight = Parameter(empty(num_parameters, **kind))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Every slope back to ``init``."""
        init.constant_(self.weight, self.init)

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return F.prelu(input, self.weight)

    def extra_repr(self) -> str:
        return f"num_parameters={self.num_parameters}"


def _dim(module: str, dim: int | None, input: Tensor) -> int:  # noqa: A002
    """``dim``, or PyTorch's legacy choice when None (0 for 0-, 1- and 3-d inputs, else
    1)."""
    if dim is not None:
        return dim
    return 0 if input.ndim in (0, 1, 3) else 1


_CAUSAL_HINT = (
    "Need attn_mask if specifying the is_causal hint. You may use the Transformer module "
    "method `generate_square_subsequent_mask` to create this mask."
)


class MultiheadAttention(Module):
    r"""Multi-head attention, as ``torch.nn.MultiheadAttention``:
    :math:`\operatorname{Concat}(h_1, \dots, h_H) W_O + b_O` with
    :math:`h_i = \operatorname{softmax}(Q W_i^Q (K W_i^K)^T / \sqrt{d} + M) V W_i^V`,
    :math:`d` = ``embed_dim // num_heads``.

    The parameters, their names and their initialisation are PyTorch's, so its
    ``state_dict`` loads: ``in_proj_weight`` ``(3 E, E)`` (the query's, key's and value's
    projections stacked) or, when ``kdim`` or ``vdim`` differ from ``embed_dim``,
    ``q_proj_weight`` ``(E, E)``, ``k_proj_weight`` ``(E, kdim)``, ``v_proj_weight``
    ``(E, vdim)``, all Xavier-uniform; ``in_proj_bias`` ``(3 E,)`` zeros; ``out_proj`` a
    Linear with a zero bias; with ``add_bias_kv``, ``bias_k`` and ``bias_v`` ``(1, 1, E)``,
    Xavier-normal, appended to the keys and values of every sequence.

    Parameters
    ----------
    embed_dim : int
        The model's width ``E`` (a multiple of ``num_heads``).
    num_heads : int
        The number of heads.
    dropout : float
        Dropout probability of the attention weights in training.
    bias : bool
        Whether the projections have biases.
    add_bias_kv : bool
        Append the learned ``bias_k`` / ``bias_v`` to the keys and values.
    add_zero_attn : bool
        Append a zero key and value (after the projections).
    kdim, vdim : int, optional
        The key's and value's widths (``embed_dim`` by default).
    batch_first : bool
        Inputs and outputs are ``(N, L, E)`` instead of ``(L, N, E)``.
    device : str, optional
        ``"cpu"`` or ``"gpu"``.
    dtype : dtype, optional
        The parameters' dtype (float32).
    """

    def __init__(
        self, embed_dim: int, num_heads: int, dropout: float = 0.0, bias: bool = True,
        add_bias_kv: bool = False, add_zero_attn: bool = False, kdim: int | None = None,
        vdim: int | None = None, batch_first: bool = False, device: str | None = None,
        dtype: Any = None,
    ) -> None:  # fmt: skip
        super().__init__()
        if embed_dim <= 0 or num_heads <= 0:
            raise ValueError(
                f"MultiheadAttention: embed_dim and num_heads must be greater than 0, got "
                f"embed_dim={embed_dim} and num_heads={num_heads}"
            )
        if embed_dim % num_heads:
            raise ValueError(
                f"MultiheadAttention: embed_dim ({embed_dim}) must be divisible by num_heads "
                f"({num_heads})"
            )
        if not 0.0 <= dropout <= 1.0:
            raise ValueError(f"MultiheadAttention: dropout must be in [0, 1], got {dropout}")
        self.embed_dim, self.num_heads, self.head_dim = embed_dim, num_heads, embed_dim // num_heads
        self.kdim = embed_dim if kdim is None else kdim
        self.vdim = embed_dim if vdim is None else vdim
        self._qkv_same_embed_dim = self.kdim == embed_dim and self.vdim == embed_dim
        self.dropout, self.batch_first, self.add_zero_attn = dropout, batch_first, add_zero_attn
        kind = {"device": device, **({"dtype": dtype} if dtype is not None else {})}
        if self._qkv_same_embed_dim:
            self.in_proj_weight = Parameter(empty(3 * embed_dim, embed_dim, **kind))
            for name in ("q_proj_weight", "k_proj_weight", "v_proj_weight"):
                self.register_parameter(name, None)
        else:
            self.q_proj_weight = Parameter(empty(embed_dim, embed_dim, **kind))
            self.k_proj_weight = Parameter(empty(embed_dim, self.kdim, **kind))
            self.v_proj_weight = Parameter(empty(embed_dim, self.vdim, **kind))
            self.register_parameter("in_proj_weight", None)
        if bias:
            self.in_proj_bias = Parameter(empty(3 * embed_dim, **kind))
        else:
            self.register_parameter("in_proj_bias", None)
        self.out_proj = NonDynamicallyQuantizableLinear(embed_dim, embed_dim, bias, **kind)
        if add_bias_kv:
            self.bias_k = Parameter(empty(1, 1, embed_dim, **kind))
            self.bias_v = Parameter(empty(1, 1, embed_dim, **kind))
        else:
            self.bias_k = self.bias_v = None
        self._reset_parameters()

    def _reset_parameters(self) -> None:
        """PyTorch's initialisation: Xavier-uniform projections, zero biases, Xavier-normal
        ``bias_k`` / ``bias_v`` (``out_proj.weight`` keeps Linear's)."""
        if self._qkv_same_embed_dim:
            init.xavier_uniform_(self.in_proj_weight)
        else:
            for weight in (self.q_proj_weight, self.k_proj_weight, self.v_proj_weight):
                init.xavier_uniform_(weight)
        if self.in_proj_bias is not None:
            init.constant_(self.in_proj_bias, 0.0)
            init.constant_(self.out_proj.bias, 0.0)
        if self.bias_k is not None:
            init.xavier_normal_(self.bias_k)
            init.xavier_normal_(self.bias_v)

    def _projections(self) -> tuple[tuple[Tensor, Tensor | None], ...]:
        """The (weight, bias) of the query's, key's and value's projections."""
        e = self.embed_dim
        if self._qkv_same_embed_dim:
            weights = tuple(self.in_proj_weight[i * e : (i + 1) * e] for i in range(3))
        else:
            weights = (self.q_proj_weight, self.k_proj_weight, self.v_proj_weight)
        b = self.in_proj_bias
        biases = (None,) * 3 if b is None else tuple(b[i * e : (i + 1) * e] for i in range(3))
        return tuple(zip(weights, biases))

    def forward(
        self, query: Tensor, key: Tensor, value: Tensor, key_padding_mask: Tensor | None = None,
        need_weights: bool = True, attn_mask: Tensor | None = None,
        average_attn_weights: bool = True, is_causal: bool = False,
    ) -> tuple[Tensor, Tensor | None]:  # fmt: skip
        """Attend from ``query`` to ``key`` / ``value``.

        Parameters
        ----------
        query : Tensor
            ``(L, N, E)`` (``(N, L, E)`` with ``batch_first``) or unbatched ``(L, E)``.
        key, value : Tensor
            ``(S, N, kdim)`` and ``(S, N, vdim)`` (or batch first, or unbatched).
        key_padding_mask : Tensor, optional
            ``(N, S)`` (unbatched ``(S,)``): bool, True where the key is *ignored* (the
            opposite of :func:`~pylucid.nn.functional.scaled_dot_product_attention`'s
            convention, as in PyTorch), or float, added to the scores.
        need_weights : bool
            Also return the attention weights. Without, the attention runs through
            ``scaled_dot_product_attention``, which gives zeros for a query whose keys are
            all masked; with, plain softmax gives nan there (both as PyTorch).
        attn_mask : Tensor, optional
            ``(L, S)`` or ``(N * num_heads, L, S)`` (unbatched ``(num_heads, L, S)``): bool,
            True where attending is *not* allowed, or float, added to the scores.
        average_attn_weights : bool
            Average the returned weights over the heads.
        is_causal : bool
            A hint that ``attn_mask`` is the causal mask; it needs ``attn_mask``, which is
            what is applied.

        Returns
        -------
        tuple
            The output ``(L, N, E)`` (as the query's layout) and the weights after dropout:
            ``(N, L, S)``, or ``(N, num_heads, L, S)`` without averaging (no ``N``
            unbatched), or None without ``need_weights``. ``S`` counts the appended
            ``bias_k`` and zero keys.
        """
        name = "MultiheadAttention"
        batched = self._check_shapes(query, key, value, key_padding_mask, attn_mask)
        if is_causal and attn_mask is None:
            raise RuntimeError(f"{name}: {_CAUSAL_HINT}")
        if batched and self.batch_first:
            query, key, value = (x.transpose(0, 1) for x in (query, key, value))
        elif not batched:
            query, key, value = (x.unsqueeze(1) for x in (query, key, value))
            if key_padding_mask is not None:
                key_padding_mask = key_padding_mask.unsqueeze(0)
        length, batch, _ = query.shape
        source = key.shape[0]
        if attn_mask is not None:
            expected = [(length, source), (batch * self.num_heads, length, source)]
            if attn_mask.shape not in expected:
                raise ValueError(
                    f"{name}: attn_mask of shape {attn_mask.shape}, expected "
                    f"{' or '.join(map(str, expected))} (L, S) or (N * num_heads, L, S)"
                )
        if key_padding_mask is not None and key_padding_mask.shape != (batch, source):
            raise ValueError(
                f"{name}: key_padding_mask of shape {key_padding_mask.shape}, expected "
                f"{(batch, source)} (N, S)"
            )
        attn_mask = _additive_mask(name, "attn_mask", attn_mask, query)
        key_padding_mask = _additive_mask(name, "key_padding_mask", key_padding_mask, query)
        (wq, bq), (wk, bk), (wv, bv) = self._projections()
        q, k, v = F.linear(query, wq, bq), F.linear(key, wk, bk), F.linear(value, wv, bv)
        if self.bias_k is not None:
            k = concatenate([k, self.bias_k.expand(1, batch, self.embed_dim)])
            v = concatenate([v, self.bias_v.expand(1, batch, self.embed_dim)])
            attn_mask, key_padding_mask = _one_more_key(attn_mask), _one_more_key(key_padding_mask)
        heads, width = self.num_heads, self.head_dim
        q, k, v = (
            x.reshape(x.shape[0], batch, heads, width).permute(1, 2, 0, 3) for x in (q, k, v)
        )
        if self.add_zero_attn:
            nothing = zeros(batch, heads, 1, width, dtype=k.dtype, device=k.device)
            k, v = concatenate([k, nothing], axis=2), concatenate([v, nothing], axis=2)
            attn_mask, key_padding_mask = _one_more_key(attn_mask), _one_more_key(key_padding_mask)
        mask = attn_mask
        if mask is not None and mask.ndim == 3:  # (N * heads, L, S)
            mask = mask.reshape(batch, heads, length, mask.shape[-1])
        if key_padding_mask is not None:
            padding = key_padding_mask.reshape(batch, 1, 1, key_padding_mask.shape[-1])
            mask = padding if mask is None else mask + padding
        p = self.dropout if self.training else 0.0
        weights = None
        if need_weights:
            scores = (q * math.sqrt(1.0 / width)) @ k.mT
            weights = F.softmax(scores if mask is None else scores + mask, -1)
            if p > 0.0:
                weights = F.dropout(weights, p)
            out = weights @ v
            if average_attn_weights:
                weights = weights.mean(dim=1)
        else:
            out = F.scaled_dot_product_attention(q, k, v, mask, p)
        out = self.out_proj(out.permute(2, 0, 1, 3).reshape(length, batch, self.embed_dim))
        if not batched:
            return out.squeeze(1), None if weights is None else weights.squeeze(0)
        return (out.transpose(0, 1) if self.batch_first else out), weights

    def _check_shapes(
        self, query: Tensor, key: Tensor, value: Tensor, key_padding_mask: Tensor | None,
        attn_mask: Tensor | None,
    ) -> bool:  # fmt: skip
        """Whether the inputs are batched; raise where their ranks or widths are wrong."""
        name = "MultiheadAttention"
        for label, x in (("query", query), ("key", key), ("value", value)):
            if not isinstance(x, Tensor):
                raise TypeError(f"{name}: {label} must be a Tensor, got {type(x).__name__}")
        if query.ndim not in (2, 3) or key.ndim != query.ndim or value.ndim != query.ndim:
            raise ValueError(
                f"{name}: expected batched 3-d (or unbatched 2-d) query, key and value, got "
                f"shapes {query.shape}, {key.shape} and {value.shape}"
            )
        batched = query.ndim == 3
        if key_padding_mask is not None and key_padding_mask.ndim != query.ndim - 1:
            raise ValueError(
                f"{name}: key_padding_mask must be {query.ndim - 1}-d for a {query.ndim}-d "
                f"query, got shape {key_padding_mask.shape}"
            )
        if attn_mask is not None and attn_mask.ndim not in (2, 3):
            raise ValueError(f"{name}: attn_mask must be 2-d or 3-d, got shape {attn_mask.shape}")
        widths = (self.embed_dim, self.kdim, self.vdim)
        if tuple(x.shape[-1] for x in (query, key, value)) != widths:
            raise ValueError(
                f"{name}: expected query, key and value of widths (embed_dim, kdim, vdim) = "
                f"{widths}, got shapes {query.shape}, {key.shape} and {value.shape}"
            )
        if key.shape[:-1] != value.shape[:-1] or (
            batched and key.shape[1 - self.batch_first] != query.shape[1 - self.batch_first]
        ):
            raise ValueError(
                f"{name}: key {key.shape} and value {value.shape} must have the same length "
                f"and, with query {query.shape}, the same batch size"
            )
        return batched


def _additive_mask(module: str, label: str, mask: Tensor | None, like: Tensor) -> Tensor | None:
    """A mask as values added to the scores, in ``like``'s dtype: a bool mask becomes -inf
    where True (the position is ignored) and 0 elsewhere."""
    if mask is None:
        return None
    if not isinstance(mask, Tensor):
        raise TypeError(f"{module}: {label} must be a Tensor, got {type(mask).__name__}")
    if mask.dtype.name == "bool":
        fill = full(mask.shape, 0.0, dtype=like.dtype, device=like.device)
        return fill.masked_fill(mask, float("-inf"))
    if not mask.dtype.is_floating_point:
        raise TypeError(
            f"{module}: {label} must be bool (True: ignore) or floating (added to the "
            f"scores), got {mask.dtype.name}"
        )
    return mask if mask.dtype is like.dtype else mask.to(like.dtype)


def _one_more_key(mask: Tensor | None) -> Tensor | None:
    """``mask`` with a zero column appended for one more key (None stays None)."""
    return None if mask is None else F.pad(mask, (0, 1))
