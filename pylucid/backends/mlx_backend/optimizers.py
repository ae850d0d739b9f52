"""Fused optimizer updates on the ``mlx`` backend: PyTorch's single-tensor update as one
lazy ``mlx.core`` expression per parameter, in the order of operations of the numba kernels
(:mod:`pylucid.kernels.optimizers`). MLX arrays are immutable: each primitive returns the new
parameter and state arrays. Half dtypes are computed in float32 and rounded once.
"""

from __future__ import annotations

from typing import Any


class MLXOptimizers:
    """Primitives of the ``optimizers`` family on the mlx backend."""

    def _update_operands(self, p: Any, *arrays: Any) -> tuple[Any, list[Any]]:
        """The compute stream, and ``arrays`` (None kept) in the compute dtype."""
        dtype = self.dtype(p)
        compute = self.mx.float32 if dtype.is_half else p.dtype
        return self._stream(dtype), [None if a is None else a.astype(compute) for a in arrays]

    def _lerp(self, start: Any, end: Any, weight: Any, stream: Any) -> Any:
        mx = self.mx
        if abs(weight) < 0.5:
            return mx.add(start, mx.multiply(weight, mx.subtract(end, start, stream=stream),
                                             stream=stream), stream=stream)  # fmt: skip
        difference = mx.subtract(end, start, stream=stream)
        return mx.subtract(end, mx.multiply(difference, 1 - weight, stream=stream), stream=stream)

    def _decayed_grad(self, p: Any, g: Any, weight_decay: float, maximize: bool, s: Any) -> Any:
        mx = self.mx
        if maximize:
            g = mx.negative(g, stream=s)
        if weight_decay != 0:
            g = mx.add(g, mx.multiply(weight_decay, p, stream=s), stream=s)
        return g

    def _results(self, p: Any, *arrays: Any) -> tuple[Any, ...]:
        return tuple(None if a is None else a.astype(p.dtype) for a in arrays)

    def sgd_update(self, p, g, buf, lr, momentum, dampening, weight_decay, nesterov, maximize,
                   first):  # fmt: skip
        mx = self.mx
        s, (p32, g32, b32) = self._update_operands(p, p, g, buf)
        d = self._decayed_grad(p32, g32, weight_decay, maximize, s)
        new_buf = None
        if momentum != 0:
            if first:
                new_buf = d
            else:
                new_buf = mx.add(mx.multiply(b32, momentum, stream=s),
                                 mx.multiply(1 - dampening, d, stream=s), stream=s)  # fmt: skip
            if nesterov:
                d = mx.add(d, mx.multiply(momentum, new_buf, stream=s), stream=s)
            else:
                d = new_buf
        new_p = mx.add(p32, mx.multiply(-lr, d, stream=s), stream=s)
        return self._results(p, new_p, new_buf)

    def adam_update(self, p, g, exp_avg, exp_avg_sq, max_exp_avg_sq, beta1, beta2, step_size,
                    bias_correction2_sqrt, eps, weight_decay, decay, amsgrad,
                    maximize):  # fmt: skip
        mx = self.mx
        s, (p32, g32, m, v, vmax) = self._update_operands(
            p, p, g, exp_avg, exp_avg_sq, max_exp_avg_sq
        )
        g32 = mx.negative(g32, stream=s) if maximize else g32
        if weight_decay != 0:
            if decay is not None:
                p32 = mx.multiply(p32, decay, stream=s)
            else:
                g32 = mx.add(g32, mx.multiply(weight_decay, p32, stream=s), stream=s)
        m = self._lerp(m, g32, 1 - beta1, s)
        v = mx.add(mx.multiply(v, beta2, stream=s),
                   mx.multiply(mx.multiply(1 - beta2, g32, stream=s), g32, stream=s),
                   stream=s)  # fmt: skip
        used = v
        if amsgrad:
            vmax = mx.maximum(vmax, v, stream=s)
            used = vmax
        denom = mx.add(mx.divide(mx.sqrt(used, stream=s), bias_correction2_sqrt, stream=s), eps,
                       stream=s)  # fmt: skip
        step = mx.divide(mx.multiply(-step_size, m, stream=s), denom, stream=s)
        new_p = mx.add(p32, step, stream=s)
        return self._results(p, new_p, m, v, vmax if amsgrad else None)

    def rmsprop_update(self, p, g, square_avg, grad_avg, buf, lr, alpha, eps, weight_decay,
                       momentum, centered, maximize):  # fmt: skip
        mx = self.mx
        s, (p32, g32, sq, ga, b) = self._update_operands(p, p, g, square_avg, grad_avg, buf)
        g32 = self._decayed_grad(p32, g32, weight_decay, maximize, s)
        sq = mx.add(mx.multiply(sq, alpha, stream=s),
                    mx.multiply(mx.multiply(1 - alpha, g32, stream=s), g32, stream=s),
                    stream=s)  # fmt: skip
        if centered:
            ga = self._lerp(ga, g32, 1 - alpha, s)
            spread = mx.add(sq, mx.multiply(mx.negative(ga, stream=s), ga, stream=s), stream=s)
            avg = mx.add(mx.sqrt(spread, stream=s), eps, stream=s)
        else:
            avg = mx.add(mx.sqrt(sq, stream=s), eps, stream=s)
        if momentum > 0:
            b = mx.add(mx.multiply(b, momentum, stream=s), mx.divide(g32, avg, stream=s), stream=s)
            new_p = mx.add(p32, mx.multiply(-lr, b, stream=s), stream=s)
        else:
            step = mx.divide(mx.multiply(-lr, g32, stream=s), avg, stream=s)
            new_p = mx.add(p32, step, stream=s)
        return self._results(
            p, new_p, sq, ga if centered else None, b if momentum > 0 else None
        )

    def adagrad_update(self, p, g, state_sum, clr, eps, weight_decay, maximize):
        mx = self.mx
        s, (p32, g32, total) = self._update_operands(p, p, g, state_sum)
        g32 = self._decayed_grad(p32, g32, weight_decay, maximize, s)
        total = mx.add(total, mx.multiply(g32, g32, stream=s), stream=s)
        std = mx.add(mx.sqrt(total, stream=s), eps, stream=s)
        step = mx.divide(mx.multiply(-clr, g32, stream=s), std, stream=s)
        return self._results(p, mx.add(p32, step, stream=s), total)

    def adadelta_update(self, p, g, square_avg, acc_delta, lr, rho, eps, weight_decay, maximize):
        mx = self.mx
        s, (p32, g32, sq, acc) = self._update_operands(p, p, g, square_avg, acc_delta)
        g32 = self._decayed_grad(p32, g32, weight_decay, maximize, s)
        sq = mx.add(mx.multiply(sq, rho, stream=s),
                    mx.multiply(mx.multiply(1 - rho, g32, stream=s), g32, stream=s),
                    stream=s)  # fmt: skip
        ratio = mx.divide(mx.sqrt(mx.add(acc, eps, stream=s), stream=s),
                          mx.sqrt(mx.add(sq, eps, stream=s), stream=s), stream=s)  # fmt: skip
        delta = mx.multiply(ratio, g32, stream=s)
        acc = mx.add(mx.multiply(acc, rho, stream=s),
                     mx.multiply(mx.multiply(1 - rho, delta, stream=s), delta, stream=s),
                     stream=s)  # fmt: skip
        new_p = mx.add(p32, mx.multiply(-lr, delta, stream=s), stream=s)
        return self._results(p, new_p, sq, acc)

    def norms(self, arrays, order, dtype):
        mx, s = self.mx, self._stream(dtype)
        compute = mx.float32 if dtype.is_half else self._mx_dtype(dtype)
        values = [
            mx.linalg.norm(a.astype(compute).reshape(-1), order, stream=s) if a.size else
            mx.array(0, dtype=compute)
            for a in arrays
        ]  # fmt: skip
        return mx.stack(values, stream=s).astype(self._mx_dtype(dtype))

    def scale(self, arrays, factor, dtype):
        mx, s = self.mx, self._stream(dtype)
        compute = mx.float32 if dtype.is_half else self._mx_dtype(dtype)
        return [
            mx.multiply(a.astype(compute), mx.array(factor, dtype=compute), stream=s).astype(
                a.dtype
            )
            for a in arrays
        ]
