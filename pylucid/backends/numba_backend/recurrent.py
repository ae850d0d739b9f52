"""Numba primitives of the ``recurrent`` op family: a whole sequence of one layer and
direction of an LSTM, a GRU or an Elman RNN, forward and backward (BPTT).

Forward: the input's projection for every step as one product ``x (T B, I) @ W_ih^T``
(plus ``b_ih``), then per step one product ``h_{t-1} @ W_hh^T`` and the step's gate kernel
(:mod:`pylucid.kernels.recurrent`). Backward: per step, from the last, the gate kernel's
gradient and one product ``dgates @ W_hh`` (the previous step's ``dh``); then the weights'
gradients as one product each over all steps (``dgates^T`` times the stacked inputs, and
the stacked ``h_{t-1}``), the input's as one product and the biases' as sums. Products are
the backend's ``matmul`` (NumPy's BLAS, called from compiled code where it takes the
operands, with :func:`pylucid.kernels.blas.product_threads`' thread count).

Arrays over the sequence are C-contiguous and time-major, ``(T, B, *)``, so that one step's
``a[t]`` is a C-contiguous ``(B, *)`` matrix, whose rows the gate kernels read and write
with unit strides (and vectorise); a ``batch_first`` input ``(B, T, *)``, its output and
the output's gradient are transposed into that layout (and the input's gradient out of it),
copies of ``T B`` rows each beside the products' ``T B G H`` work.
"""

from __future__ import annotations

import numpy as np

from pylucid import memory
from pylucid.backends.base import Shape
from pylucid.dtypes import DType
from pylucid.kernels import recurrent as kernels

#: The gates of each mode, side by side in the weights (PyTorch's order).
_GATES = {"LSTM": 4, "GRU": 3, "RNN_TANH": 1, "RNN_RELU": 1}


def _time_major(a: np.ndarray, batch_first: bool, dtype: np.dtype) -> np.ndarray:
    """``a`` as a C-contiguous ``(T, B, *)`` array of ``dtype`` (a copy of a ``(B, T, *)``
    one)."""
    return np.ascontiguousarray(a.transpose(1, 0, 2) if batch_first else a, dtype)


def _rows(a: np.ndarray) -> np.ndarray:
    """A C-contiguous ``(T, B, n)`` array as the ``(T B, n)`` matrix of its rows."""
    return a.reshape(a.shape[0] * a.shape[1], a.shape[2])


class NumbaRecurrent:
    """Primitives of the ``recurrent`` family on the numba backend."""

    def _product(self, a: np.ndarray, b: np.ndarray, dtype: DType) -> np.ndarray:
        return self.matmul(a, b, (a.shape[0], b.shape[1]), dtype)

    def recurrent(
        self, mode: str, x: np.ndarray, h0: np.ndarray, c0: np.ndarray | None,
        w_ih: np.ndarray, w_hh: np.ndarray, b_ih: np.ndarray, b_hh: np.ndarray,
        reverse: bool, batch_first: bool, shape: Shape, dtype: DType,
    ) -> tuple[np.ndarray, tuple[np.ndarray, ...]]:  # fmt: skip
        """One layer and direction over the whole sequence ``x`` ``(T, B, I)`` (``(B, T,
        I)`` if ``batch_first``) from ``h0`` (and, for an LSTM, ``c0``) ``(B, H)``: the
        output ``shape``, every step's ``h`` (an LSTM's ``c_T`` after them, at time ``T``),
        and what :meth:`recurrent_backward` reads: ``(h_prev, act[, c])`` over the
        sequence, ``act`` the gate activations of each step."""
        numpy_dtype = dtype.numpy
        h0, w_ih, w_hh, b_ih, b_hh = (
            np.ascontiguousarray(a, numpy_dtype) for a in (h0, w_ih, w_hh, b_ih, b_hh)
        )
        x = _time_major(x, batch_first, numpy_dtype)
        steps, batch, size = x.shape[0], x.shape[1], w_hh.shape[1]
        gx = self._product(_rows(x), w_ih.T, dtype)
        gx += b_ih
        gx = gx.reshape(steps, batch, w_ih.shape[0])
        lstm = mode == "LSTM"
        out = memory.empty((steps + lstm, batch, size), numpy_dtype)
        h_prev = memory.empty((steps, batch, size), numpy_dtype)
        w_t = w_hh.T
        h = h0
        if lstm:
            act = memory.empty((steps, batch, 4 * size), numpy_dtype)
            cells = memory.empty((steps, batch, size), numpy_dtype)
            c = np.ascontiguousarray(c0, numpy_dtype)
        elif mode == "GRU":
            act = memory.empty((steps, batch, 4 * size), numpy_dtype)
        for t in range(steps - 1, -1, -1) if reverse else range(steps):
            gh = self._product(h, w_t, dtype)
            if lstm:
                kernels.lstm_step(gx[t], gh, b_hh, h, c, act[t], cells[t], out[t], h_prev[t])
                c = cells[t]
            elif mode == "GRU":
                kernels.gru_step(gx[t], gh, b_hh, h, act[t], out[t], h_prev[t])
            else:
                kernels.rnn_step(gx[t], gh, b_hh, h, out[t], h_prev[t], mode == "RNN_RELU")
            h = out[t]
        if lstm:
            out[steps] = c
        saved = (h_prev, act, cells) if lstm else (h_prev, act) if mode == "GRU" else (h_prev,)
        return (_time_major(out, True, numpy_dtype) if batch_first else out), saved

    def recurrent_backward(
        self, mode: str, x: np.ndarray, c0: np.ndarray | None, w_ih: np.ndarray,
        w_hh: np.ndarray, out: np.ndarray, saved: tuple[np.ndarray, ...], g: np.ndarray,
        reverse: bool, batch_first: bool, shape: Shape, dtype: DType,
    ) -> tuple[np.ndarray | None, ...]:  # fmt: skip
        """The gradients ``(dx, dh0, dc0, dw_ih, dw_hh, db_ih, db_hh)`` of
        :meth:`recurrent` (``dc0`` None but for an LSTM) from ``g``, the gradient of its
        output of ``shape``, and ``saved``, what it returned beside the output ``out`` (which
        an Elman RNN's gradient reads: None for the others)."""
        numpy_dtype = dtype.numpy
        w_ih, w_hh = (np.ascontiguousarray(a, numpy_dtype) for a in (w_ih, w_hh))
        x, g = (_time_major(a, batch_first, numpy_dtype) for a in (x, g))
        if mode == "RNN_RELU" or mode == "RNN_TANH":
            out = _time_major(out, batch_first, numpy_dtype)
        steps, batch, size = x.shape[0], x.shape[1], w_hh.shape[1]
        width = _GATES[mode] * size
        dgates = memory.empty((steps, batch, width), numpy_dtype)
        dh_next = np.zeros((batch, size), numpy_dtype)
        if mode == "LSTM":
            h_prev, act, cells = saved
            dc = np.array(g[steps], numpy_dtype)
            c0 = np.ascontiguousarray(c0, numpy_dtype)
        elif mode == "GRU":
            h_prev, act = saved
            dh_gates = memory.empty((steps, batch, width), numpy_dtype)
            dh_direct = np.zeros((batch, size), numpy_dtype)
        else:
            (h_prev,) = saved
        relu = mode == "RNN_RELU"
        for t in range(steps) if reverse else range(steps - 1, -1, -1):
            if mode == "LSTM":
                first = t == (steps - 1 if reverse else 0)
                c_prev = c0 if first else cells[t + 1 if reverse else t - 1]
                kernels.lstm_step_backward(act[t], c_prev, cells[t], g[t], dh_next, dc, dgates[t])
                recurrent_gates = dgates[t]
            elif mode == "GRU":
                kernels.gru_step_backward(act[t], h_prev[t], g[t], dh_next, dh_direct, dgates[t],
                                          dh_gates[t])  # fmt: skip
                recurrent_gates = dh_gates[t]
            else:
                kernels.rnn_step_backward(out[t], g[t], dh_next, dgates[t], relu)
                recurrent_gates = dgates[t]
            dh_next = self._product(recurrent_gates, w_hh, dtype)
        rows = _rows(dgates)
        dx = self._product(rows, w_ih, dtype).reshape(x.shape)
        dw_ih = self._product(rows.T, _rows(x), dtype)
        db_ih = self.sum(rows, (0,), False, dtype)
        if mode == "GRU":
            dh0 = dh_next + dh_direct
            rows = _rows(dh_gates)
            db_hh = self.sum(rows, (0,), False, dtype)
        else:
            dh0 = dh_next
            db_hh = db_ih.copy()
        dw_hh = self._product(rows.T, _rows(h_prev), dtype)
        dx = _time_major(dx, True, numpy_dtype) if batch_first else dx
        return dx, dh0, dc if mode == "LSTM" else None, dw_ih, dw_hh, db_ih, db_hh
