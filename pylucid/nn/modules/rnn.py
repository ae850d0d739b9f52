"""Recurrent layers, as in ``torch.nn``: ``RNN``, ``LSTM``, ``GRU`` and their one-step cells
``RNNCell``, ``LSTMCell``, ``GRUCell``.

The parameters have PyTorch's names, shapes, gate orders and initialisation,
:math:`U(-1/\\sqrt{H}, 1/\\sqrt{H})`, so a PyTorch ``state_dict`` loads.

A layer runs each of its layers and directions as one op over the whole sequence
(:func:`pylucid.ops.recurrent.recurrent`: the time loop, forward and backward, inside the
backend), between layers the dropout op. The cells are compositions of ops
(:func:`~pylucid.ops.recurrent.lstm_cell` and the others: ``matmul``, ``sigmoid``,
``tanh``, ``split``), and so are the layers where the fused op does not apply: a
:class:`~pylucid.nn.utils.rnn.PackedSequence` (each sequence's state stops at its own last
step, and the output is packed too), an LSTM with a projection (``proj_size``), float16 and
bfloat16. Those run the time loop in Python, one cell after the other, each step reading
its input as a slice.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from typing import Any

from pylucid.factories import empty, zeros
from pylucid.nn import functional as F  # noqa: N812  (PyTorch's idiom)
from pylucid.nn import init
from pylucid.nn.modules.module import Module
from pylucid.nn.parameter import Parameter
from pylucid.nn.utils.rnn import PackedSequence, packed_steps
from pylucid.ops.gathering import index_select
from pylucid.ops.recurrent import gru_cell, lstm_cell, recurrent, rnn_cell
from pylucid.ops.shape import concatenate, stack
from pylucid.tensor import Tensor

__all__ = ["GRU", "LSTM", "RNN", "GRUCell", "LSTMCell", "RNNBase", "RNNCell", "RNNCellBase"]

#: Gates per recurrent kind, stacked in this order in the weights (PyTorch's).
_GATES = {"RNN_TANH": 1, "RNN_RELU": 1, "LSTM": 4, "GRU": 3}


def _kind(op: str, nonlinearity: str) -> str:
    if nonlinearity not in ("tanh", "relu"):
        raise ValueError(f"{op}: unknown nonlinearity {nonlinearity!r}; select 'tanh' or 'relu'")
    return "RNN_TANH" if nonlinearity == "tanh" else "RNN_RELU"


def _check_size(op: str, label: str, x: Tensor, expected: tuple[int, ...]) -> None:
    if not isinstance(x, Tensor):
        raise TypeError(f"{op}: {label} must be a Tensor, got {type(x).__name__}")
    if x.shape != expected:
        raise ValueError(f"{op}: expected {label} of shape {expected}, got {x.shape}")


class RNNBase(Module):
    """The layers of :class:`RNN`, :class:`LSTM` and :class:`GRU` (``mode`` is
    ``"RNN_TANH"``, ``"RNN_RELU"``, ``"LSTM"`` or ``"GRU"``): their parameters, checks and
    the loop over layers, directions and time steps.

    The parameters of layer ``k`` are ``weight_ih_l{k}`` ``(G H, in)``, ``weight_hh_l{k}``
    ``(G H, H_out)``, ``bias_ih_l{k}`` and ``bias_hh_l{k}`` ``(G H,)`` (``G`` gates;
    ``in`` is ``input_size`` for the first layer, ``D H_out`` after it), with the suffix
    ``_reverse`` for the backward direction, and ``weight_hr_l{k}`` ``(proj_size, H)`` for
    an LSTM with a projection (``H_out = proj_size``).
    """

    def __init__(
        self, mode: str, input_size: int, hidden_size: int, num_layers: int = 1,
        bias: bool = True, batch_first: bool = False, dropout: float = 0.0,
        bidirectional: bool = False, proj_size: int = 0, device: str | None = None,
        dtype: Any = None,
    ) -> None:  # fmt: skip
        super().__init__()
        name = "RNN" if mode.startswith("RNN") else mode
        if mode not in _GATES:
            raise ValueError(f"RNNBase: unknown mode {mode!r}; expected one of {list(_GATES)}")
        sizes = {"input_size": input_size, "hidden_size": hidden_size, "num_layers": num_layers}
        for label, value in sizes.items():
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"{name}: {label} must be an int, got {value!r}")
        if hidden_size <= 0 or num_layers <= 0:
            raise ValueError(
                f"{name}: hidden_size and num_layers must be greater than 0, got "
                f"hidden_size={hidden_size} and num_layers={num_layers}"
            )
        if isinstance(dropout, bool) or not 0.0 <= dropout <= 1.0:
            raise ValueError(f"{name}: dropout must be a number in [0, 1], got {dropout!r}")
        if dropout > 0 and num_layers == 1:
            warnings.warn(
                f"{name}: dropout acts between recurrent layers, after all but the last, so a "
                f"non-zero dropout expects num_layers greater than 1, but got dropout={dropout} "
                f"and num_layers={num_layers}",
                stacklevel=3,
            )
        if proj_size < 0 or (proj_size and proj_size >= hidden_size):
            raise ValueError(
                f"{name}: proj_size must be 0 (none) or a positive int smaller than "
                f"hidden_size={hidden_size}, got {proj_size}"
            )
        if proj_size and mode != "LSTM":
            raise ValueError(f"{name}: proj_size is only an LSTM's argument")
        self.mode, self.input_size, self.hidden_size = mode, input_size, hidden_size
        self.num_layers, self.bias, self.batch_first = num_layers, bias, batch_first
        self.dropout, self.bidirectional, self.proj_size = float(dropout), bidirectional, proj_size
        kind = {"device": device, **({"dtype": dtype} if dtype is not None else {})}
        gate_size = _GATES[mode] * hidden_size
        out_size = proj_size or hidden_size
        directions = 2 if bidirectional else 1
        self._flat_weights_names: list[str] = []
        self._all_weights: list[list[str]] = []
        for layer in range(num_layers):
            layer_input = input_size if layer == 0 else out_size * directions
            for direction in range(directions):
                suffix = f"_l{layer}" + ("_reverse" if direction else "")
                shapes = [
                    ("weight_ih", (gate_size, layer_input)),
                    ("weight_hh", (gate_size, out_size)),
                ]
                if bias:
                    shapes += [("bias_ih", (gate_size,)), ("bias_hh", (gate_size,))]
                if proj_size:
                    shapes.append(("weight_hr", (proj_size, hidden_size)))
                names = [label + suffix for label, _ in shapes]
                for param_name, (_, shape) in zip(names, shapes):
                    setattr(self, param_name, Parameter(empty(*shape, **kind)))
                self._flat_weights_names.extend(names)
                self._all_weights.append(names)
        self.reset_parameters()

    @property
    def all_weights(self) -> list[list[Parameter]]:
        """The parameters of each layer and direction, in PyTorch's order."""
        return [[getattr(self, name) for name in names] for names in self._all_weights]

    def reset_parameters(self) -> None:
        """Draw every parameter from U(-1/sqrt(hidden_size), 1/sqrt(hidden_size)), as
        PyTorch."""
        bound = 1.0 / math.sqrt(self.hidden_size)
        for weight in self.parameters():
            init.uniform_(weight, -bound, bound)

    def flatten_parameters(self) -> None:
        """Nothing to do: PyTorch packs the weights into one buffer for cuDNN; pylucid's
        parameters are used as they are."""

    def _layer_weights(self, layer: int, direction: int) -> tuple[Tensor | None, ...]:
        """``(w_ih, w_hh, b_ih, b_hh, w_hr)`` of one layer and direction (None where absent)."""
        suffix = f"_l{layer}" + ("_reverse" if direction else "")
        return tuple(
            getattr(self, label + suffix, None)
            for label in ("weight_ih", "weight_hh", "bias_ih", "bias_hh", "weight_hr")
        )

    def _check_input(self, input: Tensor | PackedSequence) -> bool:  # noqa: A002
        """Whether ``input`` is batched (a packed batch is); raise where its type, rank or
        width is wrong."""
        name = type(self).__name__
        packed = isinstance(input, PackedSequence)
        data = input.data if packed else input
        if not isinstance(data, Tensor):
            raise TypeError(
                f"{name}: input must be a Tensor or a PackedSequence, got {type(data).__name__}"
            )
        if data.ndim not in ((2,) if packed else (2, 3)):
            expected = "a packed batch's data to be 2-d" if packed else "input to be 2-d or 3-d"
            raise ValueError(f"{name}: expected {expected}, got {data.ndim}-d")
        if data.shape[-1] != self.input_size:
            raise ValueError(
                f"{name}: input.size(-1) must be equal to input_size. Expected "
                f"{self.input_size}, got {data.shape[-1]}"
            )
        if not data.shape[1 if self.batch_first and data.ndim == 3 else 0]:
            raise ValueError(f"{name}: the input sequence has no time steps (shape {data.shape})")
        return packed or data.ndim == 3

    def _initial(
        self, label: str, hx: Tensor | None, batched: bool, batch: int, size: int, like: Tensor
    ) -> Tensor:
        """An initial state ``(D num_layers, N, size)`` (zeros when ``hx`` is None)."""
        layers = self.num_layers * (2 if self.bidirectional else 1)
        if hx is None:
            return zeros(layers, batch, size, dtype=like.dtype, device=like.device)
        name = type(self).__name__
        if not isinstance(hx, Tensor):
            raise TypeError(f"{name}: {label} must be a Tensor, got {type(hx).__name__}")
        if hx.ndim != (3 if batched else 2):
            raise ValueError(
                f"{name}: for a {3 if batched else 2}-d input, {label} must be "
                f"{3 if batched else 2}-d, got shape {hx.shape}"
            )
        expected = (layers, batch, size) if batched else (layers, size)
        _check_size(name, label, hx, expected)
        return hx if batched else hx.unsqueeze(1)

    def _run(
        self, xs: list[Tensor], sizes: list[int], states: Sequence[Tensor]
    ) -> tuple[list[Tensor], list[Tensor]]:
        """The loop over layers, directions and steps: ``xs`` the input of each step, of
        ``sizes[t]`` rows (the first rows of the batch: fewer as packed sequences end),
        ``states`` each ``(D num_layers, N, size)``. A row's state changes only at the steps
        that have it, so it ends at its own last step (forwards) or starts at it
        (backwards). Returns the last layer's output at each step and the final states."""
        directions = 2 if self.bidirectional else 1
        batch, steps = states[0].shape[1], len(xs)
        finals: list[list[Tensor]] = [[] for _ in states]
        for layer in range(self.num_layers):
            if layer and self.training and self.dropout > 0:
                xs = [F.dropout(x, self.dropout) for x in xs]
            outputs = []
            for direction in range(directions):
                index = layer * directions + direction
                state = [s[index] for s in states]
                weights = self._layer_weights(layer, direction)
                ys = []
                for t in range(steps - 1, -1, -1) if direction else range(steps):
                    rows = sizes[t]
                    if rows == batch:
                        state = self._step(xs[t], state, weights)
                        ys.append(state[0])
                        continue
                    new = self._step(xs[t], [s[:rows] for s in state], weights)
                    state = [concatenate([n, s[rows:]]) for n, s in zip(new, state)]
                    ys.append(new[0])
                outputs.append(ys[::-1] if direction else ys)
                for kept, s in zip(finals, state):
                    kept.append(s)
            if directions == 1:
                xs = outputs[0]
            else:
                xs = [concatenate([f, b], axis=-1) for f, b in zip(*outputs)]
        return xs, [stack(kept) for kept in finals]

    def _step(
        self, x: Tensor, state: list[Tensor], weights: tuple[Tensor | None, ...]
    ) -> list[Tensor]:
        w_ih, w_hh, b_ih, b_hh, w_hr = weights
        if self.mode == "LSTM":
            return list(lstm_cell(x, state[0], state[1], w_ih, w_hh, b_ih, b_hh, w_hr))
        if self.mode == "GRU":
            return [gru_cell(x, state[0], w_ih, w_hh, b_ih, b_hh)]
        return [rnn_cell(x, state[0], w_ih, w_hh, b_ih, b_hh, self.mode[4:].lower())]

    def _fused(self, sequence: Tensor, states: Sequence[Tensor]) -> tuple[Tensor, list[Tensor]]:
        """The loop over layers and directions with one op per layer and direction over the
        whole ``sequence`` (:func:`~pylucid.ops.recurrent.recurrent`): the last layer's
        output and the final states (``h_n`` the output at the direction's last step, an
        LSTM's ``c_n`` the op's extra step)."""
        directions = 2 if self.bidirectional else 1
        steps = sequence.shape[1 if self.batch_first else 0]
        lstm = self.mode == "LSTM"
        finals: list[list[Tensor]] = [[] for _ in states]
        for layer in range(self.num_layers):
            if layer and self.training and self.dropout > 0:
                sequence = F.dropout(sequence, self.dropout)
            outputs = []
            for direction in range(directions):
                index = layer * directions + direction
                w_ih, w_hh, b_ih, b_hh, _ = self._layer_weights(layer, direction)
                if b_ih is None:
                    b_ih = b_hh = zeros(w_hh.shape[0], dtype=w_hh.dtype, device=w_hh.device)
                out = recurrent(
                    self.mode, sequence, states[0][index], states[1][index] if lstm else None,
                    w_ih, w_hh, b_ih, b_hh, reverse=bool(direction),
                    batch_first=self.batch_first,
                )  # fmt: skip
                last = 0 if direction else steps - 1
                if self.batch_first:
                    ys, h_n = (out[:, :steps], out[:, last]) if lstm else (out, out[:, last])
                else:
                    ys, h_n = (out[:steps], out[last]) if lstm else (out, out[last])
                finals[0].append(h_n)
                if lstm:
                    finals[1].append(out[:, steps] if self.batch_first else out[steps])
                outputs.append(ys)
            sequence = outputs[0] if directions == 1 else concatenate(outputs, axis=-1)
        return sequence, [stack(kept) for kept in finals]

    def _forward(
        self, sequence: Tensor | PackedSequence, hx: Tensor | None, cx: Tensor | None = None
    ) -> tuple[Tensor | PackedSequence, list[Tensor]]:
        """``(output, final states)`` for a batched, unbatched or packed ``sequence``: one
        op per layer and direction (:meth:`_fused`), or the loop over steps of the cells
        (:meth:`_run`) for a packed sequence, an LSTM's projection and half precision."""
        batched = self._check_input(sequence)
        packed = isinstance(sequence, PackedSequence)
        if packed:
            sizes = packed_steps(sequence)
            batch, like = sizes[0], sequence.data
        else:
            if not batched:  # (as PyTorch: a batch of one, batch_first or not)
                sequence = sequence.unsqueeze(0 if self.batch_first else 1)
            axis = 1 if self.batch_first else 0
            steps, batch = sequence.shape[axis], sequence.shape[1 - axis]
            like = sequence
        out_size = self.proj_size or self.hidden_size
        states = [self._initial("h0", hx, batched, batch, out_size, like)]
        if self.mode == "LSTM":
            states.append(self._initial("c0", cx, batched, batch, self.hidden_size, like))
        if packed and sequence.sorted_indices is not None:  # hx is in the original order
            states = [index_select(s, 1, sequence.sorted_indices) for s in states]
        if packed:
            ys, finals = self._run(list(sequence.data.split(sizes)), sizes, states)
            if sequence.unsorted_indices is not None:
                finals = [index_select(s, 1, sequence.unsorted_indices) for s in finals]
            return sequence._replace(data=concatenate(ys)), finals
        if self.proj_size or like.dtype.is_half:
            xs = [sequence[:, t] if self.batch_first else sequence[t] for t in range(steps)]
            ys, finals = self._run(xs, [batch] * steps, states)
            output = stack(ys, axis=axis)
        else:
            output, finals = self._fused(sequence, states)
        if not batched:
            return output.squeeze(axis ^ 1), [s.squeeze(1) for s in finals]
        return output, finals

    def extra_repr(self) -> str:
        text = f"{self.input_size}, {self.hidden_size}"
        if self.proj_size:
            text += f", proj_size={self.proj_size}"
        if self.num_layers != 1:
            text += f", num_layers={self.num_layers}"
        if not self.bias:
            text += ", bias=False"
        if self.batch_first:
            text += ", batch_first=True"
        if self.dropout:
            text += f", dropout={self.dropout}"
        if self.bidirectional:
            text += ", bidirectional=True"
        return text


class RNN(RNNBase):
    r"""Elman RNN: :math:`h_t = \phi(x_t W_{ih}^T + b_{ih} + h_{t-1} W_{hh}^T + b_{hh})` with
    :math:`\phi` = tanh or relu, layer on layer, as ``torch.nn.RNN``.

    Parameters
    ----------
    input_size, hidden_size : int
        The widths of the input and of the hidden state.
    num_layers : int
        Stacked layers, each reading the one before.
    nonlinearity : str
        ``"tanh"`` or ``"relu"``.
    bias : bool
        Whether the layers have ``bias_ih`` and ``bias_hh``.
    batch_first : bool
        Input and output are ``(N, L, *)`` instead of ``(L, N, *)`` (the states stay
        ``(D num_layers, N, H)``).
    dropout : float
        Dropout on each layer's output but the last, in training.
    bidirectional : bool
        A second direction reads the sequence backwards; outputs are concatenated.
    device, dtype
        Where the parameters live and their dtype (float32).

    ``forward(input, hx=None)`` takes ``(L, N, input_size)`` (or unbatched ``(L,
    input_size)``, or a :class:`~pylucid.nn.utils.rnn.PackedSequence`) and ``h0``
    ``(D num_layers, N, H)`` (zeros if None) and returns ``(output, h_n)``: the last layer's
    state at every step ``(L, N, D H)`` (packed for a packed input) and the final state of
    every layer and direction.
    """

    def __init__(
        self, input_size: int, hidden_size: int, num_layers: int = 1,
        nonlinearity: str = "tanh", bias: bool = True, batch_first: bool = False,
        dropout: float = 0.0, bidirectional: bool = False, device: str | None = None,
        dtype: Any = None,
    ) -> None:  # fmt: skip
        super().__init__(
            _kind("RNN", nonlinearity), input_size, hidden_size, num_layers, bias, batch_first,
            dropout, bidirectional, 0, device, dtype,
        )  # fmt: skip
        self.nonlinearity = nonlinearity

    def forward(
        self,
        input: Tensor | PackedSequence,  # noqa: A002
        hx: Tensor | None = None,
    ) -> tuple[Tensor | PackedSequence, Tensor]:
        output, (h,) = self._forward(input, hx)
        return output, h


class GRU(RNNBase):
    r"""Gated recurrent unit layers, as ``torch.nn.GRU``: gates r, z, n (in that order in
    the weights), :math:`n_t = \tanh(W_{in} x_t + b_{in} + r_t (W_{hn} h_{t-1} + b_{hn}))`,
    :math:`h_t = (1 - z_t) n_t + z_t h_{t-1}`.

    Arguments, input and outputs as :class:`RNN` (without ``nonlinearity``):
    ``forward(input, hx=None)`` returns ``(output, h_n)``.
    """

    def __init__(
        self, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
        batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False,
        device: str | None = None, dtype: Any = None,
    ) -> None:  # fmt: skip
        super().__init__(
            "GRU", input_size, hidden_size, num_layers, bias, batch_first, dropout,
            bidirectional, 0, device, dtype,
        )  # fmt: skip

    def forward(
        self,
        input: Tensor | PackedSequence,  # noqa: A002
        hx: Tensor | None = None,
    ) -> tuple[Tensor | PackedSequence, Tensor]:
        output, (h,) = self._forward(input, hx)
        return output, h


class LSTM(RNNBase):
    r"""Long short-term memory layers, as ``torch.nn.LSTM``: gates i, f, g, o (in that order
    in the weights), :math:`c_t = \sigma(f_t) c_{t-1} + \sigma(i_t) \tanh(g_t)`,
    :math:`h_t = \sigma(o_t) \tanh(c_t)`, projected by ``weight_hr_l{k}`` when
    ``proj_size > 0`` (then ``h`` has ``proj_size`` features).

    Arguments, input and outputs as :class:`RNN` (without ``nonlinearity``, with
    ``proj_size``): ``forward(input, hx=None)`` takes ``hx = (h0, c0)`` and returns
    ``(output, (h_n, c_n))``.
    """

    def __init__(
        self, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
        batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False,
        proj_size: int = 0, device: str | None = None, dtype: Any = None,
    ) -> None:  # fmt: skip
        super().__init__(
            "LSTM", input_size, hidden_size, num_layers, bias, batch_first, dropout,
            bidirectional, proj_size, device, dtype,
        )  # fmt: skip

    def forward(
        self,
        input: Tensor | PackedSequence,  # noqa: A002
        hx: tuple[Tensor, Tensor] | None = None,
    ) -> tuple[Tensor | PackedSequence, tuple[Tensor, Tensor]]:
        if hx is not None and (not isinstance(hx, (tuple, list)) or len(hx) != 2):
            raise TypeError(f"LSTM: hx must be a tuple (h0, c0), got {type(hx).__name__}")
        h0, c0 = (None, None) if hx is None else hx
        output, (h, c) = self._forward(input, h0, c0)
        return output, (h, c)


class RNNCellBase(Module):
    """One step of a recurrent layer: ``weight_ih`` ``(G H, input_size)``, ``weight_hh``
    ``(G H, H)``, ``bias_ih`` and ``bias_hh`` ``(G H,)``, drawn from U(-1/sqrt(H),
    1/sqrt(H)) as PyTorch's."""

    def __init__(
        self, input_size: int, hidden_size: int, bias: bool, num_chunks: int,
        device: str | None = None, dtype: Any = None,
    ) -> None:  # fmt: skip
        super().__init__()
        name = type(self).__name__
        if input_size < 0 or hidden_size <= 0:
            raise ValueError(
                f"{name}: expected input_size >= 0 and hidden_size > 0, got "
                f"{input_size} and {hidden_size}"
            )
        self.input_size, self.hidden_size, self.bias = input_size, hidden_size, bias
        kind = {"device": device, **({"dtype": dtype} if dtype is not None else {})}
        self.weight_ih = Parameter(empty(num_chunks * hidden_size, input_size, **kind))
        self.weight_hh = Parameter(empty(num_chunks * hidden_size, hidden_size, **kind))
        if bias:
            self.bias_ih = Parameter(empty(num_chunks * hidden_size, **kind))
            self.bias_hh = Parameter(empty(num_chunks * hidden_size, **kind))
        else:
            self.register_parameter("bias_ih", None)
            self.register_parameter("bias_hh", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Draw every parameter from U(-1/sqrt(hidden_size), 1/sqrt(hidden_size))."""
        bound = 1.0 / math.sqrt(self.hidden_size)
        for weight in self.parameters():
            init.uniform_(weight, -bound, bound)

    def _batched(self, input: Tensor) -> bool:  # noqa: A002
        name = type(self).__name__
        if not isinstance(input, Tensor):
            raise TypeError(f"{name}: input must be a Tensor, got {type(input).__name__}")
        if input.ndim not in (1, 2):
            raise ValueError(f"{name}: expected input to be 1-d or 2-d, got {input.ndim}-d")
        if input.shape[-1] != self.input_size:
            raise ValueError(
                f"{name}: input has {input.shape[-1]} features, expected "
                f"input_size={self.input_size}"
            )
        return input.ndim == 2

    def _state(self, label: str, hx: Tensor | None, input: Tensor) -> Tensor:  # noqa: A002
        """The state ``(N, H)`` for a batched input (zeros if None), ``(1, H)`` unbatched."""
        batch = input.shape[0] if input.ndim == 2 else 1
        if hx is None:
            return zeros(batch, self.hidden_size, dtype=input.dtype, device=input.device)
        expected = input.shape[:-1] + (self.hidden_size,)
        _check_size(type(self).__name__, label, hx, expected)
        return hx if input.ndim == 2 else hx.unsqueeze(0)

    def _weights(self) -> tuple[Tensor, Tensor, Tensor | None, Tensor | None]:
        return self.weight_ih, self.weight_hh, self.bias_ih, self.bias_hh

    def extra_repr(self) -> str:
        return f"{self.input_size}, {self.hidden_size}" + ("" if self.bias else ", bias=False")


class RNNCell(RNNCellBase):
    r"""One Elman step, :math:`h' = \phi(W_{ih} x + b_{ih} + W_{hh} h + b_{hh})`, as
    ``torch.nn.RNNCell``; ``forward(input, hx=None)`` takes ``(N, input_size)`` (or
    ``(input_size,)``) and ``h`` ``(N, H)`` (zeros if None) and returns ``h'``."""

    def __init__(
        self, input_size: int, hidden_size: int, bias: bool = True, nonlinearity: str = "tanh",
        device: str | None = None, dtype: Any = None,
    ) -> None:  # fmt: skip
        _kind("RNNCell", nonlinearity)  # (refuses an unknown one before the parameters)
        super().__init__(input_size, hidden_size, bias, 1, device, dtype)
        self.nonlinearity = nonlinearity

    def forward(self, input: Tensor, hx: Tensor | None = None) -> Tensor:  # noqa: A002
        batched = self._batched(input)
        x = input if batched else input.unsqueeze(0)
        h = rnn_cell(x, self._state("hx", hx, input), *self._weights(), self.nonlinearity)
        return h if batched else h.squeeze(0)

    def extra_repr(self) -> str:
        text = super().extra_repr()
        return text if self.nonlinearity == "tanh" else f"{text}, nonlinearity={self.nonlinearity}"


class GRUCell(RNNCellBase):
    """One GRU step (see :class:`GRU`), as ``torch.nn.GRUCell``; ``forward(input,
    hx=None)`` returns ``h'``."""

    def __init__(
        self, input_size: int, hidden_size: int, bias: bool = True, device: str | None = None,
        dtype: Any = None,
    ) -> None:  # fmt: skip
        super().__init__(input_size, hidden_size, bias, 3, device, dtype)

    def forward(self, input: Tensor, hx: Tensor | None = None) -> Tensor:  # noqa: A002
        batched = self._batched(input)
        x = input if batched else input.unsqueeze(0)
        h = gru_cell(x, self._state("hx", hx, input), *self._weights())
        return h if batched else h.squeeze(0)


class LSTMCell(RNNCellBase):
    """One LSTM step (see :class:`LSTM`), as ``torch.nn.LSTMCell``; ``forward(input,
    hx=None)`` takes ``hx = (h, c)`` and returns ``(h', c')``."""

    def __init__(
        self, input_size: int, hidden_size: int, bias: bool = True, device: str | None = None,
        dtype: Any = None,
    ) -> None:  # fmt: skip
        super().__init__(input_size, hidden_size, bias, 4, device, dtype)

    def forward(
        self,
        input: Tensor,  # noqa: A002
        hx: tuple[Tensor, Tensor] | None = None,
    ) -> tuple[Tensor, Tensor]:
        batched = self._batched(input)
        if hx is not None and (not isinstance(hx, (tuple, list)) or len(hx) != 2):
            raise TypeError(f"LSTMCell: hx must be a tuple (h, c), got {type(hx).__name__}")
        h, c = (None, None) if hx is None else hx
        x = input if batched else input.unsqueeze(0)
        h, c = lstm_cell(
            x, self._state("h", h, input), self._state("c", c, input), *self._weights()
        )
        return (h, c) if batched else (h.squeeze(0), c.squeeze(0))
