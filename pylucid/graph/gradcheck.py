"""gradcheck: compare backward's Jacobian with central finite differences in float64."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from pylucid.graph.engine import backward, grad
from pylucid.graph.grad_mode import enable_grad, set_grad_enabled

__all__ = ["GradcheckError", "gradcheck", "gradgradcheck"]


class GradcheckError(AssertionError):
    """The analytical and numerical Jacobians differ beyond the tolerance."""


def _as_outputs(result: Any) -> list[Any]:
    return list(result) if isinstance(result, (list, tuple)) else [result]


def _with_values(template: Any, values: np.ndarray) -> Any:
    from pylucid.tensor import Tensor  # graph sits below tensor: import at call time

    backend = template._backend
    return Tensor._make(backend.from_numpy(values, template.dtype), backend, template.dtype)


def _numerical_jacobians(
    fn: Callable[..., Any], inputs: list[Any], index: int, eps: float, record: bool = False
) -> list[np.ndarray]:
    """d(each output)/d(inputs[index]) by central differences: one (out.size, in.size) each."""
    base = inputs[index].numpy().astype(np.float64)
    columns: list[list[np.ndarray]] = []
    for k in range(base.size):
        evaluated = []
        for step in (eps, -eps):
            shifted = base.copy()
            shifted.reshape(-1)[k] += step
            args = list(inputs)
            args[index] = _with_values(inputs[index], shifted)
            if record:  # the function differentiates inside: keep its input differentiable
                args[index].requires_grad_(inputs[index].requires_grad)
            with set_grad_enabled(record):
                evaluated.append([o.numpy().astype(np.float64) for o in _as_outputs(fn(*args))])
        columns.append([((p - m) / (2 * eps)).reshape(-1) for p, m in zip(*evaluated)])
    if not columns:  # an empty input: every Jacobian has zero columns
        with set_grad_enabled(record):
            return [np.zeros((o.numel(), 0)) for o in _as_outputs(fn(*inputs))]
    return [np.stack([c[o] for c in columns], axis=1) for o in range(len(columns[0]))]


def gradcheck(
    fn: Callable[..., Any],
    inputs: Sequence[Any],
    *,
    eps: float = 1e-6,
    atol: float = 1e-5,
    rtol: float = 1e-3,
    raise_exception: bool = True,
    _record: bool = False,
) -> bool:
    """Check the gradients of ``fn`` at ``inputs`` against finite differences.

    Every Jacobian entry d output_i / d input_k computed by backward (one backward per output
    element, with a one-hot upstream gradient) must match the central difference
    ``(f(x + eps) - f(x - eps)) / (2 eps)`` within ``atol + rtol * |numerical|``. Use float64
    inputs: in float32 the difference quotient itself has an error near ``1e-7 / eps``.

    Parameters
    ----------
    fn : callable
        Maps the input tensors to a tensor or a tuple of tensors.
    inputs : sequence of Tensor
        The point; gradients are checked for those with ``requires_grad``.
    eps, atol, rtol : float
        Step and tolerances.
    raise_exception : bool
        Raise :class:`GradcheckError` on a mismatch instead of returning False.

    Returns
    -------
    bool
        True if every checked entry matches.
    """
    inputs = list(inputs)
    checked = [i for i, x in enumerate(inputs) if x.requires_grad]
    if not checked:
        raise ValueError("gradcheck: no input requires grad; nothing to check")
    for i in checked:
        if inputs[i].dtype.name != "float64":
            raise TypeError(
                f"gradcheck: inputs[{i}] is {inputs[i].dtype.name}; use float64 inputs, "
                f"finite differences in lower precision are too noisy to check against"
            )
    leaves = [x.detach().requires_grad_(x.requires_grad) for x in inputs]
    with enable_grad():
        outputs = _as_outputs(fn(*leaves))
    for i in checked:
        numerical = _numerical_jacobians(fn, inputs, i, eps, _record)
        for o, output in enumerate(outputs):
            analytical = np.zeros_like(numerical[o])
            if output.requires_grad:
                for j in range(output.numel()):
                    seed = np.zeros(output.shape, dtype=output.dtype.numpy)
                    seed.reshape(-1)[j] = 1.0
                    leaves[i].grad = None
                    backward([output], [_with_values(output, seed)], retain_graph=True)
                    grad = leaves[i].grad
                    if grad is not None:
                        analytical[j] = grad.numpy().reshape(-1)
            bad = ~np.isclose(analytical, numerical[o], atol=atol, rtol=rtol, equal_nan=True)
            if bad.any():
                j, k = np.argwhere(bad)[0]
                message = (
                    f"gradcheck: Jacobian mismatch for output {o} w.r.t. inputs[{i}] at "
                    f"(output element {j}, input element {k}): backward gave "
                    f"{analytical[j, k]!r}, finite differences {numerical[o][j, k]!r} "
                    f"({int(bad.sum())} of {bad.size} entries differ; atol={atol}, rtol={rtol})"
                )
                if raise_exception:
                    raise GradcheckError(message)
                return False
    return True


def gradgradcheck(
    fn: Callable[..., Any],
    inputs: Sequence[Any],
    *,
    seed: int = 0,
    eps: float = 1e-6,
    atol: float = 1e-5,
    rtol: float = 1e-3,
    raise_exception: bool = True,
) -> bool:
    """Check second derivatives: the gradient of ``fn`` (a vector-Jacobian product with a
    fixed random cotangent ``v``), computed with ``create_graph=True``, is itself checked by
    :func:`gradcheck` against finite differences of it.

    Parameters are those of :func:`gradcheck`; ``seed`` draws ``v`` (non-uniform, so every
    output element weighs differently).
    """
    inputs = list(inputs)
    checked = [i for i, x in enumerate(inputs) if x.requires_grad]
    with enable_grad():
        outputs = _as_outputs(fn(*inputs))
    rng = np.random.default_rng(seed)
    cotangents = [
        _with_values(o, rng.uniform(0.5, 1.5, size=o.shape) * rng.choice([-1, 1], size=o.shape))
        for o in outputs
    ]

    def first_derivative(*xs: Any) -> tuple[Any, ...]:
        with enable_grad():
            grads = grad(
                _as_outputs(fn(*xs)),
                [xs[i] for i in checked],
                cotangents,
                create_graph=True,
                allow_unused=True,
            )
        return tuple(g if g is not None else xs[i] * 0.0 for g, i in zip(grads, checked))

    return gradcheck(
        first_derivative,
        inputs,
        eps=eps,
        atol=atol,
        rtol=rtol,
        raise_exception=raise_exception,
        _record=True,
    )
