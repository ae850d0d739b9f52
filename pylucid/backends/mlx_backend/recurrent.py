"""MLX primitives of the ``recurrent`` op family: a whole sequence of one layer and direction
of an LSTM, a GRU or an Elman RNN, forward and backward (BPTT), as compositions of
``mlx.core`` ops with the structure of the numba backend's
(:mod:`pylucid.backends.numba_backend.recurrent`): the input's projection as one product,
one product and the gates per step, and the weights' gradients as one product each over
all steps. Sequences are handled time-major (a ``batch_first`` input is swapped first), and
what the forward saves for the backward is time-major too.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pylucid.backends.base import Shape
from pylucid.dtypes import DType

#: The gates of each mode, side by side in the weights (PyTorch's order).
_GATES = {"LSTM": 4, "GRU": 3, "RNN_TANH": 1, "RNN_RELU": 1}


class MLXRecurrent:
    """Primitives of the ``recurrent`` family on the mlx backend."""

    def _activations(self, dtype: DType) -> tuple[Callable[[Any], Any], Callable[[Any], Any]]:
        """The backend's ``sigmoid`` and ``tanh`` primitives for ``dtype`` (float64-accurate
        where MLX's own functions are not)."""
        return (lambda a: self.sigmoid(a, a.shape, dtype)), (lambda a: self.tanh(a, a.shape, dtype))

    def recurrent(
        self, mode: str, x: Any, h0: Any, c0: Any, w_ih: Any, w_hh: Any, b_ih: Any, b_hh: Any,
        reverse: bool, batch_first: bool, shape: Shape, dtype: DType,
    ) -> tuple[Any, tuple[Any, ...]]:  # fmt: skip
        mx, s = self.mx, self._stream(dtype)
        x, h, w_ih, w_hh, b_ih, b_hh = self._operands(dtype, x, h0, w_ih, w_hh, b_ih, b_hh)
        if batch_first:
            x = mx.swapaxes(x, 0, 1, stream=s)
        steps = x.shape[0]
        gx = mx.add(mx.matmul(x, mx.transpose(w_ih, stream=s), stream=s), b_ih, stream=s)
        w_t = mx.transpose(w_hh, stream=s)
        c = self._operands(dtype, c0)[0] if mode == "LSTM" else None
        sigmoid, tanh = self._activations(dtype)
        hs, prevs, acts, cells = [None] * steps, [None] * steps, [None] * steps, [None] * steps
        for t in range(steps - 1, -1, -1) if reverse else range(steps):
            prevs[t] = h
            gh = mx.add(mx.matmul(h, w_t, stream=s), b_hh, stream=s)
            if mode == "LSTM":
                i, f, g, o = mx.split(mx.add(gx[t], gh, stream=s), 4, axis=-1, stream=s)
                i, f, g, o = sigmoid(i), sigmoid(f), tanh(g), sigmoid(o)
                c = mx.add(mx.multiply(f, c, stream=s), mx.multiply(i, g, stream=s), stream=s)
                h = mx.multiply(o, tanh(c), stream=s)
                acts[t], cells[t] = mx.concatenate([i, f, g, o], axis=-1, stream=s), c
            elif mode == "GRU":
                x_r, x_z, x_n = mx.split(gx[t], 3, axis=-1, stream=s)
                h_r, h_z, h_n = mx.split(gh, 3, axis=-1, stream=s)
                r = sigmoid(mx.add(x_r, h_r, stream=s))
                z = sigmoid(mx.add(x_z, h_z, stream=s))
                n = tanh(mx.add(x_n, mx.multiply(r, h_n, stream=s), stream=s))
                h = mx.add(n, mx.multiply(z, mx.subtract(h, n, stream=s), stream=s), stream=s)
                acts[t] = mx.concatenate([r, z, n, h_n], axis=-1, stream=s)
            else:
                pre = mx.add(gx[t], gh, stream=s)
                h = self.relu(pre, pre.shape, dtype) if mode == "RNN_RELU" else tanh(pre)
            hs[t] = h
        out = mx.stack(hs + ([c] if mode == "LSTM" else []), axis=0, stream=s)
        if batch_first:
            out = mx.swapaxes(out, 0, 1, stream=s)
        saved = (mx.stack(prevs, axis=0, stream=s),)
        if mode != "LSTM" and mode != "GRU":
            return out, saved
        saved += (mx.stack(acts, axis=0, stream=s),)
        return out, saved + ((mx.stack(cells, axis=0, stream=s),) if mode == "LSTM" else ())

    def recurrent_backward(
        self, mode: str, x: Any, c0: Any, w_ih: Any, w_hh: Any, out: Any,
        saved: tuple[Any, ...], g: Any, reverse: bool, batch_first: bool, shape: Shape,
        dtype: DType,
    ) -> tuple[Any, ...]:  # fmt: skip
        mx, s = self.mx, self._stream(dtype)
        x, w_ih, w_hh, g = self._operands(dtype, x, w_ih, w_hh, g)
        out = None if out is None else self._operands(dtype, out)[0]
        if batch_first:
            x, g = mx.swapaxes(x, 0, 1, stream=s), mx.swapaxes(g, 0, 1, stream=s)
            out = None if out is None else mx.swapaxes(out, 0, 1, stream=s)
        steps, size = x.shape[0], w_hh.shape[1]
        h_prev = saved[0]
        dh_next = mx.zeros(h_prev.shape[1:], dtype=h_prev.dtype, stream=s)
        dx_gates, dh_gates = [None] * steps, [None] * steps
        if mode == "LSTM":
            dc, c0 = g[steps], self._operands(dtype, c0)[0]
        direct, tanh = dh_next, self._activations(dtype)[1]
        for t in range(steps) if reverse else range(steps - 1, -1, -1):
            dh = mx.add(g[t], mx.add(dh_next, direct, stream=s), stream=s)
            if mode == "LSTM":
                i, f, gate, o = mx.split(saved[1][t], 4, axis=-1, stream=s)
                first = t == (steps - 1 if reverse else 0)
                c_prev = c0 if first else saved[2][t + 1 if reverse else t - 1]
                tc = tanh(saved[2][t])
                d_o = _sigmoid_grad(mx, s, o, mx.multiply(dh, tc, stream=s))
                dc = mx.add(dc, _tanh_grad(mx, s, tc, mx.multiply(dh, o, stream=s)), stream=s)
                d_i = _sigmoid_grad(mx, s, i, mx.multiply(dc, gate, stream=s))
                d_f = _sigmoid_grad(mx, s, f, mx.multiply(dc, c_prev, stream=s))
                d_g = _tanh_grad(mx, s, gate, mx.multiply(dc, i, stream=s))
                dc = mx.multiply(dc, f, stream=s)
                dx_gates[t] = dh_gates[t] = mx.concatenate([d_i, d_f, d_g, d_o], -1, stream=s)
            elif mode == "GRU":
                r, z, n, hn = mx.split(saved[1][t], 4, axis=-1, stream=s)
                dn = _tanh_grad(mx, s, n, mx.subtract(dh, mx.multiply(dh, z, stream=s), stream=s))
                dr = _sigmoid_grad(mx, s, r, mx.multiply(dn, hn, stream=s))
                dz = mx.multiply(dh, mx.subtract(h_prev[t], n, stream=s), stream=s)
                dz = _sigmoid_grad(mx, s, z, dz)
                dx_gates[t] = mx.concatenate([dr, dz, dn], axis=-1, stream=s)
                dh_gates[t] = mx.concatenate([dr, dz, mx.multiply(dn, r, stream=s)], -1, stream=s)
                direct = mx.multiply(dh, z, stream=s)
            elif mode == "RNN_RELU":
                dx_gates[t] = dh_gates[t] = mx.where(
                    mx.greater(out[t], 0, stream=s), dh, 0, stream=s
                )
            else:
                dx_gates[t] = dh_gates[t] = _tanh_grad(mx, s, out[t], dh)
            dh_next = mx.matmul(dh_gates[t], w_hh, stream=s)
        width = _GATES[mode] * size
        rows_x = mx.reshape(mx.stack(dx_gates, axis=0, stream=s), (-1, width), stream=s)
        rows_h = mx.reshape(mx.stack(dh_gates, axis=0, stream=s), (-1, width), stream=s)
        dx = mx.reshape(mx.matmul(rows_x, w_ih, stream=s), x.shape, stream=s)
        if batch_first:
            dx = mx.swapaxes(dx, 0, 1, stream=s)
        flat_x = mx.reshape(x, (-1, x.shape[-1]), stream=s)
        flat_h = mx.reshape(h_prev, (-1, size), stream=s)
        return (
            dx,
            mx.add(dh_next, direct, stream=s),
            dc if mode == "LSTM" else None,
            mx.matmul(mx.transpose(rows_x, stream=s), flat_x, stream=s),
            mx.matmul(mx.transpose(rows_h, stream=s), flat_h, stream=s),
            mx.sum(rows_x, axis=0, stream=s),
            mx.sum(rows_h, axis=0, stream=s),
        )


def _sigmoid_grad(mx: Any, s: Any, y: Any, g: Any) -> Any:
    """``g y (1 - y)`` for ``y = sigmoid(x)``."""
    return mx.multiply(g, mx.multiply(y, mx.subtract(1, y, stream=s), stream=s), stream=s)


def _tanh_grad(mx: Any, s: Any, y: Any, g: Any) -> Any:
    """``g (1 - y)(1 + y)`` for ``y = tanh(x)``."""
    factor = mx.multiply(mx.subtract(1, y, stream=s), mx.add(1, y, stream=s), stream=s)
    return mx.multiply(g, factor, stream=s)
