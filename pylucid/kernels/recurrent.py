"""The per-step kernels of the fused recurrent layers (:mod:`pylucid.ops.recurrent`): the
gates of one time step of an LSTM, a GRU or an Elman RNN over the whole batch, forward and
backward, after the step's matrix product (which the backend makes through NumPy's BLAS).

Every operand is a ``(B, width)`` matrix of one time step (a slice of the whole sequence's
arrays, of any strides), ``width`` being ``H`` or a multiple of it, gates side by side in
PyTorch's order (LSTM ``i, f, g, o``; GRU ``r, z, n``). The projections arrive as ``gx``
(``x W_ih^T + b_ih``) and ``gh`` (``h W_hh^T``, without ``b_hh``, which the kernel adds as
``gx + (gh + b_hh)``, the composed step's order of the sums).

The activations are those of the elementwise ops (:mod:`pylucid.kernels.elementwise_math`:
``sigmoid``, ``tanh``, ``relu`` and their gradients), each rounded to the dtype when
stored, and the products and sums are of the dtype, so a float32 step rounds where the
composed step (one op per sum and product) rounds: the same formulas, the same roundings.
"""

from __future__ import annotations

from pylucid.kernels.elementwise_math import (
    relu,
    relu_grad,
    sigmoid,
    sigmoid_grad,
    tanh,
    tanh_grad,
)
from pylucid.kernels.jit import njit
from pylucid.kernels.reduction import _as_dtype

__all__ = [
    "gru_step",
    "gru_step_backward",
    "lstm_step",
    "lstm_step_backward",
    "rnn_step",
    "rnn_step_backward",
]

_JIT = {"cache": True, "error_model": "numpy", "nogil": True}


# Each gate's activations run in a loop of their own over the row's contiguous slice (no
# branch, no other store in the loop), which LLVM vectorises: 56 us instead of 407 for one
# float32 LSTM step of (32, 256) with the four gates in one loop (AMD EPYC, one thread).


@njit(**_JIT)
def lstm_step(gx, gh, b_hh, h_prev, c_prev, act, c, h, h_saved):  # noqa: ANN001, ANN201
    """One LSTM step: ``act = (sigmoid(i), sigmoid(f), tanh(g), sigmoid(o))`` of the gates
    ``gx + (gh + b_hh)``; ``c = f c_prev + i g``, ``h = o tanh(c)``; ``h_prev`` copied to
    ``h_saved`` (the weight gradient's rows)."""
    batch, size = c.shape
    for b in range(batch):
        for k in range(2 * size):
            act[b, k] = sigmoid(gx[b, k] + (gh[b, k] + b_hh[k]))
        for k in range(2 * size, 3 * size):
            act[b, k] = tanh(gx[b, k] + (gh[b, k] + b_hh[k]))
        for k in range(3 * size, 4 * size):
            act[b, k] = sigmoid(gx[b, k] + (gh[b, k] + b_hh[k]))
        for j in range(size):
            h_saved[b, j] = h_prev[b, j]
            cell = act[b, size + j] * c_prev[b, j] + act[b, j] * act[b, 2 * size + j]
            c[b, j] = cell
            h[b, j] = act[b, 3 * size + j] * _as_dtype(tanh(cell), c)


@njit(**_JIT)
def lstm_step_backward(act, c_prev, c, g, dh_next, dc, dgates):  # noqa: ANN001, ANN201
    """The gradient of one :func:`lstm_step`: ``dh = g + dh_next`` (the output's gradient
    and the next step's), ``dc`` the cell's (updated in place to ``c_prev``'s); writes the
    gates' pre-activation gradients ``dgates`` ``(B, 4H)`` (``tanh(c)`` first, in the
    ``o`` gate's place)."""
    batch, size = c.shape
    for b in range(batch):
        for j in range(size):
            dgates[b, 3 * size + j] = tanh(c[b, j])
        for j in range(size):
            dh = g[b, j] + dh_next[b, j]
            i, f = act[b, j], act[b, size + j]
            gate, o = act[b, 2 * size + j], act[b, 3 * size + j]
            tc = dgates[b, 3 * size + j]
            dgates[b, 3 * size + j] = sigmoid_grad(o, dh * tc)
            cell = dc[b, j] + tanh_grad(tc, dh * o)
            dgates[b, j] = sigmoid_grad(i, cell * gate)
            dgates[b, size + j] = sigmoid_grad(f, cell * c_prev[b, j])
            dgates[b, 2 * size + j] = tanh_grad(gate, cell * i)
            dc[b, j] = cell * f


@njit(**_JIT)
def gru_step(gx, gh, b_hh, h_prev, act, h, h_saved):  # noqa: ANN001, ANN201
    """One GRU step: ``r = sigmoid(x_r + (h_r + b_hr))``, ``z`` alike, ``hn = h_n + b_hn``,
    ``n = tanh(x_n + r hn)``, ``h = n + z (h_prev - n)``; ``act = (r, z, n, hn)``."""
    batch, size = h.shape
    for b in range(batch):
        for k in range(2 * size):
            act[b, k] = sigmoid(gx[b, k] + (gh[b, k] + b_hh[k]))
        for j in range(size):
            hn = gh[b, 2 * size + j] + b_hh[2 * size + j]
            act[b, 3 * size + j] = hn
            h[b, j] = gx[b, 2 * size + j] + act[b, j] * hn  # (n's pre-activation)
        for j in range(size):
            act[b, 2 * size + j] = tanh(h[b, j])
        for j in range(size):
            h_saved[b, j] = h_prev[b, j]
            n = act[b, 2 * size + j]
            h[b, j] = n + act[b, size + j] * (h_prev[b, j] - n)


@njit(**_JIT)
def gru_step_backward(act, h_prev, g, dh_next, dh_direct, dx_gates, dh_gates):  # noqa: ANN001, ANN201
    """The gradient of one :func:`gru_step`: ``dh = g + (dh_next + dh_direct)``, where
    ``dh_next`` is the next step's ``dh_gates W_hh`` and ``dh_direct`` its ``z dh`` (updated
    in place to this step's); writes the gradients of ``gx`` (``dx_gates``) and of
    ``gh + b_hh`` (``dh_gates``: ``r``'s, ``z``'s and ``r dn`` for ``hn``)."""
    batch, size = h_prev.shape
    for b in range(batch):
        for j in range(size):
            dh = g[b, j] + (dh_next[b, j] + dh_direct[b, j])
            r, z = act[b, j], act[b, size + j]
            n, hn = act[b, 2 * size + j], act[b, 3 * size + j]
            dn = tanh_grad(n, dh - dh * z)
            dr = sigmoid_grad(r, dn * hn)
            dz = sigmoid_grad(z, dh * (h_prev[b, j] - n))
            dx_gates[b, j], dx_gates[b, size + j], dx_gates[b, 2 * size + j] = dr, dz, dn
            dh_gates[b, j], dh_gates[b, size + j], dh_gates[b, 2 * size + j] = dr, dz, dn * r
            dh_direct[b, j] = dh * z


@njit(**_JIT)
def rnn_step(gx, gh, b_hh, h_prev, h, h_saved, use_relu):  # noqa: ANN001, ANN201
    """One Elman step: ``h = tanh(gx + (gh + b_hh))`` (``relu`` where ``use_relu``)."""
    batch, size = h.shape
    for b in range(batch):
        for j in range(size):
            h_saved[b, j] = h_prev[b, j]
        if use_relu:
            for j in range(size):
                h[b, j] = relu(gx[b, j] + (gh[b, j] + b_hh[j]))
        else:
            for j in range(size):
                h[b, j] = tanh(gx[b, j] + (gh[b, j] + b_hh[j]))


@njit(**_JIT)
def rnn_step_backward(h, g, dh_next, dgates, use_relu):  # noqa: ANN001, ANN201
    """The gradient of one :func:`rnn_step` from its output ``h``: ``dh = g + dh_next``;
    ``dgates = dh`` where ``h > 0``, else 0 (relu), ``dh (1 - h^2)`` (tanh)."""
    batch, size = h.shape
    for b in range(batch):
        for j in range(size):
            dh = g[b, j] + dh_next[b, j]
            dgates[b, j] = relu_grad(h[b, j], dh) if use_relu else tanh_grad(h[b, j], dh)
