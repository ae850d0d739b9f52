"""Transformer layers, as in ``torch.nn``: ``TransformerEncoderLayer``,
``TransformerEncoder``, ``TransformerDecoderLayer``, ``TransformerDecoder`` and
``Transformer``, built from :class:`~pylucid.nn.MultiheadAttention`, ``Linear``,
``LayerNorm`` and ``Dropout`` under PyTorch's attribute names, so their state dicts have
PyTorch's keys and PyTorch's weights load.

PyTorch's inference fast paths (fused kernels, nested tensors) compute the same values,
except where noted on :class:`TransformerEncoder`; pylucid always runs the plain path.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import numpy as np

from pylucid.compat import differs
from pylucid.dtypes import float32
from pylucid.factories import tensor
from pylucid.nn import functional as F  # noqa: N812  (PyTorch's idiom)
from pylucid.nn import init
from pylucid.nn.modules.activation import MultiheadAttention
from pylucid.nn.modules.container import ModuleList
from pylucid.nn.modules.dropout import Dropout
from pylucid.nn.modules.linear import Linear
from pylucid.nn.modules.module import Module
from pylucid.nn.modules.normalization import LayerNorm
from pylucid.tensor import Tensor

__all__ = [
    "Transformer",
    "TransformerDecoder",
    "TransformerDecoderLayer",
    "TransformerEncoder",
    "TransformerEncoderLayer",
]

Activation = str | Callable[[Tensor], Tensor]


def _activation(module: str, activation: Activation) -> Callable[[Tensor], Tensor]:
    """``"relu"`` / ``"gelu"`` as functions; a callable (a function or a module) as it is."""
    if activation == "relu":
        return F.relu
    if activation == "gelu":
        return F.gelu
    if isinstance(activation, str) or not callable(activation):
        raise ValueError(
            f"{module}: activation should be 'relu', 'gelu' or a callable, not {activation!r}"
        )
    return activation


def _clones(module: Module, count: int) -> ModuleList:
    return ModuleList([copy.deepcopy(module) for _ in range(count)])


def _kind(device: str | None, dtype: Any) -> dict[str, Any]:
    return {"device": device, **({"dtype": dtype} if dtype is not None else {})}


class TransformerEncoderLayer(Module):
    """Self-attention then a feed-forward block, each with a residual connection and layer
    normalisation, as ``torch.nn.TransformerEncoderLayer``:
    ``x = norm1(x + sa(x)); x = norm2(x + ff(x))``, or with ``norm_first``
    ``x = x + sa(norm1(x)); x = x + ff(norm2(x))``, where
    ``ff(x) = dropout2(linear2(dropout(activation(linear1(x)))))`` and ``sa`` is
    ``dropout1`` of ``self_attn`` (:class:`~pylucid.nn.MultiheadAttention`).

    Parameters
    ----------
    d_model : int
        The width of the input and output.
    nhead : int
        Attention heads.
    dim_feedforward : int
        The feed-forward block's inner width.
    dropout : float
        Dropout probability of the attention weights and after each block.
    activation : str or callable
        ``"relu"``, ``"gelu"`` or a function or module of one tensor.
    layer_norm_eps : float
        The layer norms' epsilon.
    batch_first : bool
        ``(N, L, E)`` instead of ``(L, N, E)``.
    norm_first : bool
        Normalise before each block instead of after.
    bias : bool
        Whether the linear layers and layer norms have biases.
    device, dtype
        Where the parameters live and their dtype (float32).
    """

    def __init__(
        self, d_model: int, nhead: int, dim_feedforward: int = 2048, dropout: float = 0.1,
        activation: Activation = F.relu, layer_norm_eps: float = 1e-5,
        batch_first: bool = False, norm_first: bool = False, bias: bool = True,
        device: str | None = None, dtype: Any = None,
    ) -> None:  # fmt: skip
        super().__init__()
        kind = _kind(device, dtype)
        self.self_attn = MultiheadAttention(
            d_model, nhead, dropout=dropout, bias=bias, batch_first=batch_first, **kind
        )
        self.linear1 = Linear(d_model, dim_feedforward, bias=bias, **kind)
        self.dropout = Dropout(dropout)
        self.linear2 = Linear(dim_feedforward, d_model, bias=bias, **kind)
        self.norm_first = norm_first
        self.norm1 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **kind)
        self.norm2 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **kind)
        self.dropout1 = Dropout(dropout)
        self.dropout2 = Dropout(dropout)
        self.activation = _activation("TransformerEncoderLayer", activation)

    def forward(
        self, src: Tensor, src_mask: Tensor | None = None,
        src_key_padding_mask: Tensor | None = None, is_causal: bool = False,
    ) -> Tensor:  # fmt: skip
        """Encode ``src`` (``(L, N, E)``, ``(N, L, E)`` with ``batch_first``, or ``(L, E)``);
        ``src_mask`` and ``src_key_padding_mask`` as ``attn_mask`` and ``key_padding_mask`` of
        :meth:`MultiheadAttention.forward` (bool: True is *not* attended), ``is_causal`` a hint
        that ``src_mask`` is the causal mask."""
        x = src
        if self.norm_first:
            x = x + self._sa_block(self.norm1(x), src_mask, src_key_padding_mask, is_causal)
            return x + self._ff_block(self.norm2(x))
        x = self.norm1(x + self._sa_block(x, src_mask, src_key_padding_mask, is_causal))
        return self.norm2(x + self._ff_block(x))

    def _sa_block(
        self, x: Tensor, mask: Tensor | None, padding: Tensor | None, is_causal: bool
    ) -> Tensor:
        out = self.self_attn(
            x, x, x, attn_mask=mask, key_padding_mask=padding, need_weights=False,
            is_causal=is_causal,
        )[0]  # fmt: skip
        return self.dropout1(out)

    def _ff_block(self, x: Tensor) -> Tensor:
        return self.dropout2(self.linear2(self.dropout(self.activation(self.linear1(x)))))


class TransformerDecoderLayer(Module):
    """Self-attention, attention to the encoder's output (``memory``), then a feed-forward
    block, each with a residual connection and layer normalisation, as
    ``torch.nn.TransformerDecoderLayer``: ``x = norm1(x + sa(x)); x = norm2(x + mha(x,
    memory)); x = norm3(x + ff(x))`` (with ``norm_first``, each block reads ``norm_i(x)``
    and the sum is not normalised). Arguments as :class:`TransformerEncoderLayer`."""

    def __init__(
        self, d_model: int, nhead: int, dim_feedforward: int = 2048, dropout: float = 0.1,
        activation: Activation = F.relu, layer_norm_eps: float = 1e-5,
        batch_first: bool = False, norm_first: bool = False, bias: bool = True,
        device: str | None = None, dtype: Any = None,
    ) -> None:  # fmt: skip
        super().__init__()
        kind = _kind(device, dtype)
        self.self_attn = MultiheadAttention(
            d_model, nhead, dropout=dropout, bias=bias, batch_first=batch_first, **kind
        )
        self.multihead_attn = MultiheadAttention(
            d_model, nhead, dropout=dropout, bias=bias, batch_first=batch_first, **kind
        )
        self.linear1 = Linear(d_model, dim_feedforward, bias=bias, **kind)
        self.dropout = Dropout(dropout)
        self.linear2 = Linear(dim_feedforward, d_model, bias=bias, **kind)
        self.norm_first = norm_first
        self.norm1 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **kind)
        self.norm2 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **kind)
        self.norm3 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **kind)
        self.dropout1 = Dropout(dropout)
        self.dropout2 = Dropout(dropout)
        self.dropout3 = Dropout(dropout)
        self.activation = _activation("TransformerDecoderLayer", activation)

    def forward(
        self, tgt: Tensor, memory: Tensor, tgt_mask: Tensor | None = None,
        memory_mask: Tensor | None = None, tgt_key_padding_mask: Tensor | None = None,
        memory_key_padding_mask: Tensor | None = None, tgt_is_causal: bool = False,
        memory_is_causal: bool = False,
    ) -> Tensor:  # fmt: skip
        """Decode ``tgt`` attending to ``memory``; the masks as in
        :meth:`TransformerEncoderLayer.forward` (``tgt_*`` for the self-attention,
        ``memory_*`` for the attention to ``memory``)."""
        x = tgt
        if self.norm_first:
            x = x + self._sa_block(self.norm1(x), tgt_mask, tgt_key_padding_mask, tgt_is_causal)
            x = x + self._mha_block(
                self.norm2(x), memory, memory_mask, memory_key_padding_mask, memory_is_causal
            )
            return x + self._ff_block(self.norm3(x))
        x = self.norm1(x + self._sa_block(x, tgt_mask, tgt_key_padding_mask, tgt_is_causal))
        x = self.norm2(
            x + self._mha_block(x, memory, memory_mask, memory_key_padding_mask, memory_is_causal)
        )
        return self.norm3(x + self._ff_block(x))

    def _sa_block(
        self, x: Tensor, mask: Tensor | None, padding: Tensor | None, is_causal: bool
    ) -> Tensor:
        out = self.self_attn(
            x, x, x, attn_mask=mask, key_padding_mask=padding, need_weights=False,
            is_causal=is_causal,
        )[0]  # fmt: skip
        return self.dropout1(out)

    def _mha_block(
        self, x: Tensor, memory: Tensor, mask: Tensor | None, padding: Tensor | None,
        is_causal: bool,
    ) -> Tensor:  # fmt: skip
        out = self.multihead_attn(
            x, memory, memory, attn_mask=mask, key_padding_mask=padding, need_weights=False,
            is_causal=is_causal,
        )[0]  # fmt: skip
        return self.dropout2(out)

    def _ff_block(self, x: Tensor) -> Tensor:
        return self.dropout3(self.linear2(self.dropout(self.activation(self.linear1(x)))))


@differs(
    "enable_nested_tensor is accepted and has no effect: positions masked by "
    "src_key_padding_mask hold computed values, where torch's nested-tensor fast path "
    "(evaluation without grad) returns zeros there"
)
class TransformerEncoder(Module):
    """``num_layers`` copies (deep copies) of ``encoder_layer`` applied in turn, then
    ``norm`` if given, as ``torch.nn.TransformerEncoder``; the layers are ``layers.0``,
    ``layers.1``, ...

    ``enable_nested_tensor`` and ``mask_check`` are accepted for PyTorch's signature; the
    plain path always runs (see the module's note on the padded positions).
    """

    def __init__(
        self, encoder_layer: Module, num_layers: int, norm: Module | None = None,
        enable_nested_tensor: bool = True, mask_check: bool = True,
    ) -> None:  # fmt: skip
        super().__init__()
        self.layers = _clones(encoder_layer, num_layers)
        self.num_layers, self.norm = num_layers, norm
        self.enable_nested_tensor, self.mask_check = enable_nested_tensor, mask_check

    def forward(
        self, src: Tensor, mask: Tensor | None = None, src_key_padding_mask: Tensor | None = None,
        is_causal: bool | None = None,
    ) -> Tensor:  # fmt: skip
        """Pass ``src`` through every layer with the same ``mask`` and
        ``src_key_padding_mask`` (see :meth:`TransformerEncoderLayer.forward`); ``is_causal``
        (None: not hinted) is handed on."""
        output = src
        for layer in self.layers:
            output = layer(
                output, src_mask=mask, src_key_padding_mask=src_key_padding_mask,
                is_causal=bool(is_causal),
            )  # fmt: skip
        return output if self.norm is None else self.norm(output)


class TransformerDecoder(Module):
    """``num_layers`` deep copies of ``decoder_layer`` applied in turn, then ``norm`` if
    given, as ``torch.nn.TransformerDecoder``."""

    def __init__(self, decoder_layer: Module, num_layers: int, norm: Module | None = None) -> None:
        super().__init__()
        self.layers = _clones(decoder_layer, num_layers)
        self.num_layers, self.norm = num_layers, norm

    def forward(
        self, tgt: Tensor, memory: Tensor, tgt_mask: Tensor | None = None,
        memory_mask: Tensor | None = None, tgt_key_padding_mask: Tensor | None = None,
        memory_key_padding_mask: Tensor | None = None, tgt_is_causal: bool | None = None,
        memory_is_causal: bool = False,
    ) -> Tensor:  # fmt: skip
        """Pass ``tgt`` through every layer, each attending to ``memory``; the masks as in
        :meth:`TransformerDecoderLayer.forward`."""
        output = tgt
        for layer in self.layers:
            output = layer(
                output, memory, tgt_mask=tgt_mask, memory_mask=memory_mask,
                tgt_key_padding_mask=tgt_key_padding_mask,
                memory_key_padding_mask=memory_key_padding_mask,
                tgt_is_causal=bool(tgt_is_causal), memory_is_causal=memory_is_causal,
            )  # fmt: skip
        return output if self.norm is None else self.norm(output)


class Transformer(Module):
    """An encoder-decoder transformer, as ``torch.nn.Transformer``: ``encoder`` (a
    :class:`TransformerEncoder` of ``num_encoder_layers`` layers and a final LayerNorm)
    and ``decoder`` (likewise), or the ``custom_encoder`` / ``custom_decoder`` given. Every
    parameter of two or more dimensions starts Xavier-uniform, as PyTorch's.

    Arguments as :class:`TransformerEncoderLayer`, and ``num_encoder_layers``,
    ``num_decoder_layers``.
    """

    def __init__(
        self, d_model: int = 512, nhead: int = 8, num_encoder_layers: int = 6,
        num_decoder_layers: int = 6, dim_feedforward: int = 2048, dropout: float = 0.1,
        activation: Activation = F.relu, custom_encoder: Module | None = None,
        custom_decoder: Module | None = None, layer_norm_eps: float = 1e-5,
        batch_first: bool = False, norm_first: bool = False, bias: bool = True,
        device: str | None = None, dtype: Any = None,
    ) -> None:  # fmt: skip
        super().__init__()
        kind = _kind(device, dtype)
        layer_args = (d_model, nhead, dim_feedforward, dropout, activation, layer_norm_eps,
                      batch_first, norm_first, bias)  # fmt: skip
        if custom_encoder is not None:
            self.encoder = custom_encoder
        else:
            self.encoder = TransformerEncoder(
                TransformerEncoderLayer(*layer_args, **kind), num_encoder_layers,
                LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **kind),
            )  # fmt: skip
        if custom_decoder is not None:
            self.decoder = custom_decoder
        else:
            self.decoder = TransformerDecoder(
                TransformerDecoderLayer(*layer_args, **kind), num_decoder_layers,
                LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **kind),
            )  # fmt: skip
        self._reset_parameters()
        self.d_model, self.nhead, self.batch_first = d_model, nhead, batch_first

    def _reset_parameters(self) -> None:
        for param in self.parameters():
            if param.ndim > 1:
                init.xavier_uniform_(param)

    def forward(
        self, src: Tensor, tgt: Tensor, src_mask: Tensor | None = None,
        tgt_mask: Tensor | None = None, memory_mask: Tensor | None = None,
        src_key_padding_mask: Tensor | None = None, tgt_key_padding_mask: Tensor | None = None,
        memory_key_padding_mask: Tensor | None = None, src_is_causal: bool | None = None,
        tgt_is_causal: bool | None = None, memory_is_causal: bool = False,
    ) -> Tensor:  # fmt: skip
        """Encode ``src``, then decode ``tgt`` attending to the encoding; the output has
        ``tgt``'s shape. ``src``/``tgt`` are ``(S, N, E)``/``(T, N, E)`` (batch first:
        ``(N, S, E)``/``(N, T, E)``; unbatched ``(S, E)``/``(T, E)``)."""
        batched = src.ndim == 3
        if src.ndim != tgt.ndim or src.ndim not in (2, 3):
            raise ValueError(
                f"Transformer: src and tgt must both be batched 3-d or unbatched 2-d, got "
                f"shapes {src.shape} and {tgt.shape}"
            )
        axis = 0 if self.batch_first else 1
        if batched and src.shape[axis] != tgt.shape[axis]:
            raise ValueError(
                f"Transformer: the batch sizes of src {src.shape} and tgt {tgt.shape} must be equal"
            )
        if src.shape[-1] != self.d_model or tgt.shape[-1] != self.d_model:
            raise ValueError(
                f"Transformer: the feature sizes of src {src.shape} and tgt {tgt.shape} must "
                f"be d_model={self.d_model}"
            )
        memory = self.encoder(
            src, mask=src_mask, src_key_padding_mask=src_key_padding_mask,
            is_causal=src_is_causal,
        )  # fmt: skip
        return self.decoder(
            tgt, memory, tgt_mask=tgt_mask, memory_mask=memory_mask,
            tgt_key_padding_mask=tgt_key_padding_mask,
            memory_key_padding_mask=memory_key_padding_mask, tgt_is_causal=tgt_is_causal,
            memory_is_causal=memory_is_causal,
        )  # fmt: skip

    @staticmethod
    def generate_square_subsequent_mask(
        sz: int, device: str | None = None, dtype: Any = None
    ) -> Tensor:
        """The causal mask ``(sz, sz)`` as a float mask: -inf above the diagonal (a later
        position, not attended), 0 on and below it (float32 unless ``dtype``)."""
        values = np.triu(np.full((sz, sz), -np.inf), k=1)
        return tensor(values, dtype=float32 if dtype is None else dtype, device=device)
