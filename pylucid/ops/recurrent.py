r"""Recurrent layers as ops: one node per layer and direction over the whole sequence of an
LSTM, a GRU or an Elman RNN (:class:`LSTMBackward`, :class:`GRUBackward`,
:class:`RNNTanhBackward`, :class:`RNNReluBackward`), and the one-step cells as compositions
of ops (:func:`lstm_cell`, :func:`gru_cell`, :func:`rnn_cell`), which ``nn.LSTMCell`` and
the others use, and which the layers use where the fused op does not apply (packed
sequences, an LSTM's projection, half precision).

A fused op runs the whole time loop in its backend (the input's projection as one product,
one product and one gate kernel per step; its backward the same per step, then each weight
gradient as one product over all steps): see
:mod:`pylucid.backends.numba_backend.recurrent`. Its output holds every step's ``h``, in
the input's layout, and for an LSTM the last cell state ``c_T`` after them (at time ``T``):
``nn.LSTM`` takes the output sequence, ``h_n`` and ``c_n`` as views of it, so gradients
from all three reach the one node.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from pylucid.backends.base import Backend, Shape
from pylucid.dtypes import DType
from pylucid.graph.engine import grad
from pylucid.ops.activations import relu, sigmoid
from pylucid.ops.base import Op
from pylucid.ops.elementwise_math import tanh
from pylucid.ops.schema import AmpPolicy, OpSchema
from pylucid.ops.shape import stack
from pylucid.tensor import Tensor

__all__ = [
    "GRUBackward",
    "LSTMBackward",
    "RNNReluBackward",
    "RNNTanhBackward",
    "Workspace",
    "gru_cell",
    "lstm_cell",
    "recurrent",
    "rnn_cell",
]


def _linear(x: Tensor, w: Tensor, b: Tensor | None) -> Tensor:
    out = x @ w.mT
    return out if b is None else out + b


def rnn_cell(
    x: Tensor, h: Tensor, w_ih: Tensor, w_hh: Tensor, b_ih: Tensor | None,
    b_hh: Tensor | None, nonlinearity: str = "tanh",
) -> Tensor:  # fmt: skip
    r"""One Elman step :math:`h' = \phi(W_{ih} x + b_{ih} + W_{hh} h + b_{hh})`,
    :math:`\phi` = tanh or relu (``nonlinearity``)."""
    gates = _linear(x, w_ih, b_ih) + _linear(h, w_hh, b_hh)
    return relu(gates) if nonlinearity == "relu" else tanh(gates)


def lstm_cell(
    x: Tensor, h: Tensor, c: Tensor, w_ih: Tensor, w_hh: Tensor, b_ih: Tensor | None,
    b_hh: Tensor | None, w_hr: Tensor | None = None,
) -> tuple[Tensor, Tensor]:  # fmt: skip
    r"""One LSTM step ``(h', c')``, gates in the order i, f, g, o:
    :math:`c' = \sigma(f) c + \sigma(i) \tanh(g)`, :math:`h' = \sigma(o) \tanh(c')`, then
    :math:`h' W_{hr}^T` with a projection."""
    gates = _linear(x, w_ih, b_ih) + _linear(h, w_hh, b_hh)
    i, f, g, o = gates.split(c.shape[-1], dim=-1)
    c = sigmoid(f) * c + sigmoid(i) * tanh(g)
    h = sigmoid(o) * tanh(c)
    return (h if w_hr is None else h @ w_hr.mT), c


def gru_cell(
    x: Tensor, h: Tensor, w_ih: Tensor, w_hh: Tensor, b_ih: Tensor | None, b_hh: Tensor | None
) -> Tensor:
    r"""One GRU step, gates in the order r, z, n: :math:`r = \sigma(W_{ir} x + b_{ir} +
    W_{hr} h + b_{hr})`, :math:`z` alike, :math:`n = \tanh(W_{in} x + b_{in} + r (W_{hn} h +
    b_{hn}))`, :math:`h' = (1 - z) n + z h`, computed as :math:`n + z (h - n)`."""
    size = h.shape[-1]
    x_r, x_z, x_n = _linear(x, w_ih, b_ih).split(size, dim=-1)
    h_r, h_z, h_n = _linear(h, w_hh, b_hh).split(size, dim=-1)
    r = sigmoid(x_r + h_r)
    z = sigmoid(x_z + h_z)
    n = tanh(x_n + r * h_n)
    return n + z * (h - n)


class Workspace:
    """What a fused recurrent op's forward hands to its backward beyond its inputs and its
    output: the backend's arrays over the sequence (the gate activations, each step's
    ``h_{t-1}``, an LSTM's cell states), in ``saved``. A parameter of the op, so that the
    recorded node keeps it (as the node's ``workspace``) until its backward has run."""

    __slots__ = ("saved",)

    def __init__(self) -> None:
        self.saved: tuple[Any, ...] | None = None


class _RecurrentOp(Op):
    r"""One layer and direction of a recurrent network over a whole sequence ``x``
    ``(T, B, I)`` (``(B, T, I)`` with ``batch_first``; read from the last step to the first
    with ``reverse``), from the initial state ``h0`` ``(B, H)`` (and an LSTM's ``c0``), with
    the weights ``w_ih`` ``(G H, I)``, ``w_hh`` ``(G H, H)`` and biases ``b_ih``, ``b_hh``
    ``(G H,)`` (``G`` gates). The output is every step's ``h`` in ``x``'s layout, an LSTM's
    with ``c_T`` after them. Saves its inputs (all of them for :meth:`grad_graph`), an Elman
    RNN its output too (its gates' gradient reads it), and the backend's
    :class:`Workspace`.

    With :math:`a_t = x_t W_{ih}^T + b_{ih} + h_{t-1} W_{hh}^T + b_{hh}` (the gates'
    pre-activations) and :math:`\delta_t = \partial L / \partial a_t`, back-propagation
    through time runs from the last step with
    :math:`\partial L / \partial h_t = g_t + \delta_{t+1} W_{hh}` (``g_t`` the output's
    gradient at step ``t``), the cell's rule giving :math:`\delta_t` (see each op), and
    ends with, over all steps at once,

    .. math::
        \frac{\partial L}{\partial x} = \delta W_{ih}, \quad
        \frac{\partial L}{\partial W_{ih}} = \delta^T x, \quad
        \frac{\partial L}{\partial W_{hh}} = \delta^T h_{-1}, \quad
        \frac{\partial L}{\partial b_{ih}} = \frac{\partial L}{\partial b_{hh}}
        = \textstyle\sum_{t, b} \delta,

    :math:`\partial L / \partial h_0` the last :math:`\delta W_{hh}` (``h_{-1}``: the
    stacked :math:`h_{t-1}`). With ``create_graph=True`` (:meth:`grad_graph`) the step is
    recomputed as a composition of ops (the cells above), whose gradient is taken as a
    graph.
    """

    mode: ClassVar[str]

    @classmethod
    def _parts(cls, values: Sequence[Any]) -> tuple[Any, ...]:
        """``(x, h0, c0, w_ih, w_hh, b_ih, b_hh)`` of the op's inputs (``c0`` None but for
        an LSTM)."""
        if cls.mode == "LSTM":
            return tuple(values)
        x, h0, *rest = values
        return (x, h0, None, *rest)

    @classmethod
    def output_shape(
        cls, shapes: Sequence[Shape], *, reverse: bool, batch_first: bool, workspace: Workspace
    ) -> Shape:
        x, h0, c0, w_ih, w_hh, b_ih, b_hh = cls._parts(shapes)
        name = cls.schema_v1.name
        if len(x) != 3 or len(w_hh) != 2 or not w_hh[1]:
            raise ValueError(f"{name}: expected a 3-d input and a 2-d w_hh, got {x} and {w_hh}")
        size = w_hh[1]
        gates = size * (4 if cls.mode == "LSTM" else 3 if cls.mode == "GRU" else 1)
        batch, steps = (x[0], x[1]) if batch_first else (x[1], x[0])
        expected = [(h0, (batch, size)), (w_ih, (gates, x[2])), (w_hh, (gates, size)),
                    (b_ih, (gates,)), (b_hh, (gates,))]  # fmt: skip
        if c0 is not None:
            expected.append((c0, (batch, size)))
        for got, want in expected:
            if tuple(got) != want:
                raise ValueError(
                    f"{name}: expected shapes x {x}, h0 {(batch, size)}, w_ih {(gates, x[2])}, "
                    f"w_hh {(gates, size)}, biases {(gates,)}: got {tuple(got)} for {want}"
                )
        if not steps:
            raise ValueError(f"{name}: the sequence has no time steps (input of shape {x})")
        steps += 1 if cls.mode == "LSTM" else 0
        return (batch, steps, size) if batch_first else (steps, batch, size)

    @classmethod
    def compute_dtype(cls, dtypes: Sequence[DType], **params: Any) -> DType:
        dtype = super().compute_dtype(dtypes)
        if not dtype.is_floating_point or dtype.is_half:
            raise TypeError(
                f"{cls.schema_v1.name}: computes in float32 or float64, got {dtype.name}"
            )
        return dtype

    @classmethod
    def dispatch(
        cls, be: Backend, *storages: Any, shape: Shape, dtype: DType, reverse: bool,
        batch_first: bool, workspace: Workspace,
    ) -> Any:  # fmt: skip
        out, workspace.saved = be.recurrent(
            cls.mode, *cls._parts(storages), reverse, batch_first, shape, dtype
        )
        return out

    def grad_formula(self, g: Any) -> tuple[Any, ...]:
        saved = self.saved
        x, w_ih, w_hh = saved["x"], saved["w_ih"], saved["w_hh"]
        c0 = saved["c0"] if self.mode == "LSTM" else None
        out = saved["result"] if self.mode.startswith("RNN") else None
        dx, dh0, dc0, *weights = self.backend.recurrent_backward(
            self.mode, x, c0, w_ih, w_hh, out, self.workspace.saved, g, self.reverse,
            self.batch_first, self.shape, self.dtype,
        )  # fmt: skip
        return (dx, dh0, dc0, *weights) if self.mode == "LSTM" else (dx, dh0, *weights)

    def grad_graph(self, g: Tensor) -> tuple[Tensor | None, ...]:
        """The gradients as a graph: the sequence recomputed from clones of the saved inputs
        with the cells (a composition of ops), and its gradient for ``g`` taken with
        ``create_graph=True`` at the clones, so that it is differentiable with respect to
        the inputs and ``g``."""
        inputs = [self.saved_tensor(name) for name in self.input_names]
        wanted = [i for i, need in enumerate(self.needs_input_grad) if need]
        for i in wanted:
            inputs[i] = inputs[i].clone()
        out = self._composed(*self._parts(inputs))
        found = grad(out, [inputs[i] for i in wanted], g, create_graph=True, allow_unused=True)
        grads: list[Tensor | None] = [None] * len(inputs)
        for i, value in zip(wanted, found):
            grads[i] = value
        return tuple(grads)

    def _composed(
        self, x: Tensor, h: Tensor, c: Tensor | None, w_ih: Tensor, w_hh: Tensor, b_ih: Tensor,
        b_hh: Tensor,
    ) -> Tensor:  # fmt: skip
        """The output of the forward as a composition of the cells."""
        axis = 1 if self.batch_first else 0
        steps = x.shape[axis]
        ys: list[Tensor] = [h] * steps
        for t in range(steps - 1, -1, -1) if self.reverse else range(steps):
            x_t = x[:, t] if self.batch_first else x[t]
            if self.mode == "LSTM":
                h, c = lstm_cell(x_t, h, c, w_ih, w_hh, b_ih, b_hh)
            elif self.mode == "GRU":
                h = gru_cell(x_t, h, w_ih, w_hh, b_ih, b_hh)
            else:
                h = rnn_cell(x_t, h, w_ih, w_hh, b_ih, b_hh, self.mode[4:].lower())
            ys[t] = h
        return stack(ys + ([c] if self.mode == "LSTM" else []), axis=axis)

    def release(self) -> None:
        super().release()
        self.workspace.saved = None


class LSTMBackward(_RecurrentOp):
    r"""Autograd node of an LSTM layer's direction over a sequence (see
    :class:`_RecurrentOp`); gates :math:`(i, f, g, o)` with activations
    :math:`(\sigma, \sigma, \tanh, \sigma)`, :math:`c_t = f c_{t-1} + i g`,
    :math:`h_t = o \tanh c_t`. Backward, with :math:`\bar h_t = g_t + \delta_{t+1} W_{hh}`
    and :math:`\bar c_t` carried from step :math:`t + 1` (the output's ``c_T`` gradient at
    the last step):

    .. math::
        \bar c = \bar c_t + \bar h_t\, o\, (1 - \tanh^2 c_t), \quad
        \delta = \big(\bar c\, g\, i (1 - i),\ \bar c\, c_{t-1} f (1 - f),\
        \bar c\, i\, (1 - g^2),\ \bar h_t \tanh c_t\, o (1 - o)\big), \quad
        \bar c_{t-1} = \bar c f.
    """

    schema_v1 = OpSchema(
        name="lstm",
        amp_policy=AmpPolicy.KEEP_INPUT,
        input_arity=7,
        saved=("x", "h0", "c0", "w_ih", "w_hh", "b_ih", "b_hh"),
        internal=True,
    )
    input_names = ("x", "h0", "c0", "w_ih", "w_hh", "b_ih", "b_hh")
    mode = "LSTM"


class GRUBackward(_RecurrentOp):
    r"""Autograd node of a GRU layer's direction over a sequence (see
    :class:`_RecurrentOp`); gates :math:`(r, z, n)`, :math:`\hat n = h_{t-1} W_{hn}^T +
    b_{hn}`, :math:`n = \tanh(x W_{in}^T + b_{in} + r \hat n)`,
    :math:`h_t = n + z (h_{t-1} - n)`. Backward, with
    :math:`\bar h = g_t + \delta^h_{t+1} W_{hh} + z_{t+1} \bar h_{t+1}`:

    .. math::
        \bar n = \bar h (1 - z)(1 - n^2), \quad
        \bar r = \bar n \hat n\, r (1 - r), \quad
        \bar z = \bar h (h_{t-1} - n)\, z (1 - z),

    :math:`\delta^x = (\bar r, \bar z, \bar n)` for the input's side (``dx``, ``W_ih``,
    ``b_ih``) and :math:`\delta^h = (\bar r, \bar z, r \bar n)` for the state's (``W_hh``,
    ``b_hh``, ``h_{t-1}``).
    """

    schema_v1 = OpSchema(
        name="gru",
        amp_policy=AmpPolicy.KEEP_INPUT,
        input_arity=6,
        saved=("x", "h0", "w_ih", "w_hh", "b_ih", "b_hh"),
        internal=True,
    )
    input_names = ("x", "h0", "w_ih", "w_hh", "b_ih", "b_hh")
    mode = "GRU"


class RNNTanhBackward(_RecurrentOp):
    r"""Autograd node of an Elman RNN layer's direction, :math:`h_t = \tanh a_t` (see
    :class:`_RecurrentOp`): :math:`\delta = \bar h_t (1 - h_t^2)`."""

    schema_v1 = OpSchema(
        name="rnn_tanh",
        amp_policy=AmpPolicy.KEEP_INPUT,
        input_arity=6,
        saved=("x", "h0", "w_ih", "w_hh", "b_ih", "b_hh", "result"),
        internal=True,
    )
    input_names = ("x", "h0", "w_ih", "w_hh", "b_ih", "b_hh")
    mode = "RNN_TANH"


class RNNReluBackward(_RecurrentOp):
    r"""Autograd node of an Elman RNN layer's direction, :math:`h_t = \max(a_t, 0)` (see
    :class:`_RecurrentOp`): :math:`\delta = \bar h_t` where :math:`h_t > 0`, else 0."""

    schema_v1 = OpSchema(
        name="rnn_relu",
        amp_policy=AmpPolicy.KEEP_INPUT,
        input_arity=6,
        saved=("x", "h0", "w_ih", "w_hh", "b_ih", "b_hh", "result"),
        internal=True,
    )
    input_names = ("x", "h0", "w_ih", "w_hh", "b_ih", "b_hh")
    mode = "RNN_RELU"


_OPS: dict[str, type[_RecurrentOp]] = {
    op.mode: op for op in (LSTMBackward, GRUBackward, RNNTanhBackward, RNNReluBackward)
}


def recurrent(
    mode: str, x: Tensor, h0: Tensor, c0: Tensor | None, w_ih: Tensor, w_hh: Tensor,
    b_ih: Tensor, b_hh: Tensor, reverse: bool = False, batch_first: bool = False,
) -> Tensor:  # fmt: skip
    """One layer and direction of ``mode`` (``"LSTM"``, ``"GRU"``, ``"RNN_TANH"``,
    ``"RNN_RELU"``) over the sequence ``x`` as one op (see :class:`_RecurrentOp`).

    Returns
    -------
    Tensor
        Every step's ``h``, ``(T, B, H)`` (``(B, T, H)`` with ``batch_first``); an LSTM's
        has ``c_T`` after them: ``(T + 1, B, H)`` (``(B, T + 1, H)``).
    """
    op = _OPS[mode]
    inputs = (
        (x, h0, c0, w_ih, w_hh, b_ih, b_hh) if mode == "LSTM" else (x, h0, w_ih, w_hh, b_ih, b_hh)
    )
    return op.apply(*inputs, reverse=reverse, batch_first=batch_first, workspace=Workspace())
