"""Random draws that take a tensor: ``multinomial``, ``bernoulli``, ``normal`` and the
in-place fills ``normal_``, ``uniform_``, ``bernoulli_``, ``exponential_`` and ``random_``.

Every draw comes from a :class:`pylucid.Generator` (``generator=``, or
:data:`pylucid.default_generator`), NumPy's PCG64 underneath: a seed gives the same numbers on
every backend, not PyTorch's numbers. Draws are not differentiable; the in-place fills are
in-place ops (:mod:`pylucid.ops.inplace`): on a leaf that requires grad they raise outside
``no_grad``, as in PyTorch.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from pylucid import dtypes
from pylucid.backends.base import Backend, Shape
from pylucid.compat import differs
from pylucid.dtypes import DType, bool_, float64, int64
from pylucid.factories import rand, randn
from pylucid.generator import Generator, draw_source
from pylucid.ops.base import Op
from pylucid.ops.inplace import copy_
from pylucid.ops.schema import AmpPolicy, OpSchema
from pylucid.ops.wrapping import require_tensor, tensor_method
from pylucid.tensor import Tensor

__all__ = [
    "DropoutBackward",
    "bernoulli",
    "bernoulli_",
    "exponential_",
    "multinomial",
    "normal",
    "normal_",
    "random_",
    "uniform_",
]


class DropoutBackward(Op):
    r"""Autograd node of dropout with its uniform draws ``u`` (of ``input``'s shape and
    dtype, from :func:`pylucid.rand`): :math:`y = x / (1 - p)` where :math:`u \ge p`, else 0;
    saves ``u``. Internal (``nn.functional.dropout`` makes it).

    .. math:: \frac{\partial L}{\partial x} = g / (1 - p) \text{ where } u \ge p
        \text{, else } 0

    Forward and backward are one pass each (the backend's ``dropout``), bit for bit
    ``where(u >= p, x / (1 - p), 0)`` and its gradient through ``where`` and the quotient
    (``p`` and ``1 - p`` rounded to the dtype, as the comparison and the quotient of a
    Python number take them). It saves the draws (the dtype's width a value) where the
    composition saved a bool mask. ``u`` gets no gradient.
    """

    schema_v1 = OpSchema(
        name="dropout",
        amp_policy=AmpPolicy.KEEP_INPUT,
        input_arity=2,
        saved=("u",),
        internal=True,
    )
    input_names = ("input", "u")

    @classmethod
    def output_shape(cls, shapes: Sequence[Shape], **params: Any) -> Shape:
        x, u = shapes
        if tuple(x) != tuple(u):
            raise ValueError(f"dropout: draws of shape {tuple(u)} for an input of shape {tuple(x)}")
        return tuple(x)

    @staticmethod
    def dispatch(be: Backend, x: Any, u: Any, shape: Shape, dtype: DType, p: float) -> Any:
        return be.dropout(x, u, p, shape, dtype)

    def grad_formula(self, g: Any) -> tuple[Any, None]:
        return self.backend.dropout(g, self.saved["u"], self.p, self.shape, self.dtype), None

    def grad_graph(self, g: Tensor) -> tuple[Tensor, None]:
        return DropoutBackward.apply(g, self.saved_tensor("u"), p=self.p), None


def dropout_with_draws(x: Tensor, u: Tensor, p: float) -> Tensor:
    """``x / (1 - p)`` where ``u >= p``, else 0, for ``0 < p < 1`` and draws ``u`` of ``x``'s
    shape and (float32 or float64) dtype; see :class:`DropoutBackward`."""
    return DropoutBackward.apply(x, u, p=float(p))


def _like(values: np.ndarray, like: Tensor, dtype: Any = None) -> Tensor:
    kind = like.dtype if dtype is None else dtype
    return Tensor._make(like._backend.from_numpy(values, kind), like._backend, kind)


@differs(
    "draws from NumPy's PCG64 (pylucid.Generator): the same seed does not give PyTorch's "
    "numbers; load PyTorch's weights to start from them"
)
@tensor_method
def multinomial(
    input: Tensor,  # noqa: A002  (torch.multinomial's name)
    num_samples: int,
    replacement: bool = False,
    *,
    generator: Generator | None = None,
) -> Tensor:
    """``num_samples`` category indices (int64) per row of ``input`` (1-d or 2-d; weights
    that need not sum to one), drawn in proportion to the weights, with or without
    ``replacement``, as ``torch.multinomial``.

    Raises
    ------
    ValueError
        For a negative, infinite or NaN weight, a row summing to zero, or, without
        replacement, more samples than the row has categories of non-zero weight.
    """
    require_tensor("multinomial", "input", input)
    if input.ndim not in (1, 2) or not input.dtype.is_floating_point:
        raise ValueError(
            f"multinomial: input must be a 1-d or 2-d floating tensor of weights, got "
            f"{input.dtype.name} of shape {input.shape}"
        )
    if isinstance(num_samples, bool) or not isinstance(num_samples, (int, np.integer)):
        raise TypeError(f"multinomial: num_samples must be an int, got {num_samples!r}")
    weights = np.atleast_2d(input.numpy().astype(np.float64))
    rows, categories = weights.shape
    if num_samples <= 0:
        raise ValueError(f"multinomial: num_samples must be positive, got {num_samples}")
    if not np.isfinite(weights).all() or (weights < 0).any():
        raise ValueError("multinomial: weights must be finite and non-negative")
    totals = weights.sum(axis=1)
    if (totals <= 0).any():
        raise ValueError("multinomial: a row of weights sums to zero (no category can be drawn)")
    if not replacement and num_samples > int((weights > 0).sum(axis=1).min()):
        raise ValueError(
            f"multinomial: cannot draw {num_samples} samples without replacement from a row "
            f"with only {int((weights > 0).sum(axis=1).min())} categories of non-zero weight "
            f"(of {categories})"
        )
    source = draw_source(generator, "multinomial")
    if replacement:
        cumulative = np.cumsum(weights, axis=1)
        points = source.random((rows, num_samples)) * cumulative[:, -1:]
        drawn = np.stack([np.searchsorted(c, p, side="right") for c, p in zip(cumulative, points)])
        drawn = np.minimum(drawn, categories - 1)  # (a draw at the very top of the last bin)
    else:  # each category's key u^(1/w): the largest keys are a draw without replacement
        with np.errstate(divide="ignore"):
            keys = np.log(source.random((rows, categories))) / weights
        drawn = np.argsort(-keys, axis=1, kind="stable")[:, :num_samples]
    drawn = drawn.astype(np.int64)
    return _like(drawn if input.ndim == 2 else drawn[0], input, int64)


@tensor_method
def bernoulli(
    input: Tensor,  # noqa: A002  (torch.bernoulli's name)
    p: float | None = None,
    *,
    generator: Generator | None = None,
) -> Tensor:
    """Draws of 1 with probability ``input`` (or ``p``), else 0, in ``input``'s dtype."""
    require_tensor("bernoulli", "input", input)
    probability = input.numpy() if p is None else p
    draws = draw_source(generator, "bernoulli").random(input.shape) < probability
    return _like(draws.astype(input.dtype.numpy), input)


def normal(
    mean: Tensor | float,
    std: Tensor | float = 1.0,
    size: tuple[int, ...] | None = None,
    *,
    generator: Generator | None = None,
    dtype: Any = None,
    device: str | None = None,
) -> Tensor:
    """Normal draws with ``mean`` and ``std`` (tensors broadcast against each other, or
    numbers with ``size``), as ``torch.normal``."""
    if isinstance(mean, Tensor) or isinstance(std, Tensor):
        like = mean if isinstance(mean, Tensor) else std
        shape = np.broadcast_shapes(
            *(t.shape for t in (mean, std) if isinstance(t, Tensor))
        )
        draws = randn(*shape, generator=generator, dtype=float64, device=like._backend.name)
        return (draws * std + mean).to(like.dtype).detach()  # (no gradient: a draw)
    if size is None:
        raise TypeError("normal: with a number mean and std, give size=")
    draws = randn(*size, generator=generator, dtype=float64, device=device)
    return (draws * std + mean).to(dtypes.default_float if dtype is None else dtype)


def _fill(op: str, x: Tensor, draws: Tensor) -> Tensor:
    require_tensor(op, "x", x)
    if not x.dtype.is_floating_point:
        raise TypeError(f"{op}: expected a floating tensor, got {x.dtype.name}")
    return copy_(x, draws.to(x.dtype))


@tensor_method
def normal_(
    x: Tensor, mean: float = 0.0, std: float = 1.0, *, generator: Generator | None = None
) -> Tensor:
    """Fill ``x`` in place with draws from N(mean, std²)."""
    if std < 0:
        raise ValueError(f"normal_: std must be >= 0, got {std}")
    draws = randn(*x.shape, generator=generator, dtype=float64, device=x._backend.name)
    return _fill("normal_", x, draws * std + mean)


@tensor_method
def uniform_(
    x: Tensor, a: float = 0.0, b: float = 1.0, *, generator: Generator | None = None
) -> Tensor:
    """Fill ``x`` in place with draws from U(a, b)."""
    if not a <= b:
        raise ValueError(f"uniform_: need a <= b, got a={a}, b={b}")
    draws = rand(*x.shape, generator=generator, dtype=float64, device=x._backend.name)
    return _fill("uniform_", x, draws * (b - a) + a)


@tensor_method
def bernoulli_(x: Tensor, p: float = 0.5, *, generator: Generator | None = None) -> Tensor:
    """Fill ``x`` in place with 1 (probability ``p``) or 0."""
    draws = draw_source(generator, "bernoulli_").random(x.shape) < p
    return copy_(x, _like(draws.astype(np.bool_), x, bool_).to(x.dtype))


@tensor_method
def exponential_(x: Tensor, lambd: float = 1.0, *, generator: Generator | None = None) -> Tensor:
    """Fill ``x`` in place with draws from the exponential distribution of rate ``lambd``."""
    if lambd <= 0:
        raise ValueError(f"exponential_: lambd must be positive, got {lambd}")
    draws = draw_source(generator, "exponential_").exponential(1.0 / lambd, x.shape)
    return _fill("exponential_", x, _like(draws, x, float64))


@tensor_method
def random_(
    x: Tensor, low: int = 0, high: int | None = None, *, generator: Generator | None = None
) -> Tensor:
    """Fill ``x`` in place with integers uniform in ``[low, high)`` (``random_(high)``:
    ``[0, high)``; no bound: up to 2^mantissa for floats, the dtype's maximum for
    integers), as ``Tensor.random_``."""
    require_tensor("random_", "x", x)
    if high is None and low != 0:
        low, high = 0, low
    if high is None:
        dtype = x.dtype
        if dtype.is_floating_point:  # (every integer up to 2^digits is exact)
            high = 2 ** (dtypes.finfo(dtype).nmant + 1) + 1
        else:
            high = 2 if dtype is bool_ else int(np.iinfo(dtype.numpy).max)
    if low >= high:
        raise ValueError(f"random_: expected low < high, got low={low}, high={high}")
    draws = draw_source(generator, "random_").integers(low, high, size=x.shape)
    return copy_(x, _like(draws.astype(np.int64), x, int64).to(x.dtype))
