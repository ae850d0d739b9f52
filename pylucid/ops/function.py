"""Custom ops written by users: subclass :class:`Function` with a ``forward`` and a
``backward``, as ``torch.autograd.Function``.

A Function that declares ``schema_v1`` is registered in the op registry like the built-in
ops, so autocast applies its AMP policy, the op reference lists it and ``pl.ops.get_op``
finds it. Exposed as ``pylucid.graph.Function``.
"""

from __future__ import annotations

import functools
from contextlib import nullcontext
from typing import Any, ClassVar

import numpy as np

from pylucid.amp.autocast import autocast
from pylucid.dtypes import promote_types
from pylucid.graph.grad_mode import is_grad_enabled, no_grad
from pylucid.graph.node import Node, SavedValues
from pylucid.ops.schema import OpSchema, register_op, resolve_dtypes
from pylucid.tensor import Tensor

__all__ = ["Function", "FunctionCtx"]


class FunctionCtx(Node):
    """The node of one call of a :class:`Function`, passed to its ``forward`` and
    ``backward`` as ``ctx``.

    Attributes
    ----------
    needs_input_grad : tuple of bool
        For each argument of ``forward``, whether its gradient is needed.
    """

    def __init__(self, function: type[Function], args: tuple[Any, ...]) -> None:
        super().__init__()
        self.function = function
        self.needs_input_grad = tuple(isinstance(a, Tensor) and a.requires_grad for a in args)
        self._saved: SavedValues | None = None
        self._inputs = [
            (a.shape, a.dtype, a._backend) if isinstance(a, Tensor) else None for a in args
        ]

    @property
    def name(self) -> str:
        return f"{self.function.__name__}Backward"

    def save_for_backward(self, *tensors: Tensor) -> None:
        """Keep tensors for ``backward`` (read back as :attr:`saved_tensors`); an in-place
        change to one of them before backward raises there."""
        names = [str(i) for i in range(len(tensors))]
        self._saved_count = len(tensors)
        self._saved = SavedValues(
            self.name,
            tuple(names),
            tuple([e for t in tensors for e in SavedValues.entry(t._storage, t)]),
        )

    @property
    def saved_tensors(self) -> tuple[Tensor, ...]:
        """The tensors given to :meth:`save_for_backward`."""
        if self._saved is None:
            return ()
        return tuple(self._saved.tensor(str(i)) for i in range(self._saved_count))

    def _run(self, g: Tensor) -> tuple[Any, ...]:
        grads = self.function.backward(self, g)
        grads = grads if isinstance(grads, tuple) else (grads,)
        if len(grads) != len(self._inputs):
            raise RuntimeError(
                f"{self.function.__name__}.backward returned {len(grads)} gradients, but "
                f"forward took {len(self._inputs)} arguments"
            )
        results = []
        for index, (grad, meta, needed) in enumerate(
            zip(grads, self._inputs, self.needs_input_grad)
        ):
            if grad is None or not needed:
                results.append(None)
                continue
            shape, dtype, _ = meta
            if grad.shape != shape:
                raise RuntimeError(
                    f"{self.function.__name__}.backward: the gradient of argument {index} has "
                    f"shape {grad.shape}, but the argument has shape {shape}"
                )
            results.append(grad if grad.dtype is dtype else grad.to(dtype))
        return tuple(results)

    def backward(self, grad: Any) -> tuple[Any, ...]:
        with no_grad():
            grads = self._run(self.as_tensor(grad))
        return tuple(None if g is None else g._storage for g in grads)

    def backward_graph(self, grad: Tensor) -> tuple[Any, ...]:
        return self._run(grad)

    def as_tensor(self, grad: Any) -> Tensor:
        return Tensor._make(grad, self.output_backend, self.output_dtype)

    def all_finite(self, grad: Any) -> bool:
        storage = grad._storage if isinstance(grad, Tensor) else grad
        return bool(np.isfinite(self.output_backend.to_numpy(storage)).all())

    def release(self) -> None:
        if self._saved is not None:
            self._saved.release()


class Function:
    """Base of custom ops. Subclasses define two static methods::

        class Exp(pl.graph.Function):
            schema_v1 = pl.ops.OpSchema(name="my_exp", amp_policy=pl.ops.AmpPolicy.FORCE_FP32)

            @staticmethod
            def forward(ctx, x):
                y = pl.exp(x)
                ctx.save_for_backward(y)
                return y

            @staticmethod
            def backward(ctx, g):
                (y,) = ctx.saved_tensors
                return g * y

        y = Exp.apply(x)

    ``forward`` runs without recording a graph and returns one Tensor; ``backward`` gets the
    gradient of that output and returns one gradient (or None) per argument of ``forward``,
    shaped like it. ``ctx.needs_input_grad`` says which are needed. With
    ``create_graph=True``, ``backward`` runs with recording on, so it is differentiable if it
    is written with pylucid ops.
    """

    schema_v1: ClassVar[OpSchema]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "schema_v1" in cls.__dict__:
            register_op(cls)

    @staticmethod
    def forward(ctx: FunctionCtx, *args: Any) -> Tensor:
        """The op's output from its arguments."""
        raise NotImplementedError

    @staticmethod
    def backward(ctx: FunctionCtx, g: Tensor) -> Any:
        """The gradient of each argument from the gradient of the output."""
        raise NotImplementedError

    @classmethod
    def apply(cls, *args: Any) -> Tensor:
        """Run ``forward`` and, if an argument requires grad, record a node for ``backward``."""
        ctx = FunctionCtx(cls, args)
        schema = cls.__dict__.get("schema_v1")
        floats = [a.dtype for a in args if isinstance(a, Tensor) and a.dtype.is_floating_point]
        inputs = args
        if schema is not None and floats:
            natural = functools.reduce(promote_types, floats)
            compute, _ = resolve_dtypes(schema.amp_policy, natural)
            inputs = tuple(
                a.detach().to(compute)
                if isinstance(a, Tensor) and a.dtype.is_floating_point and a.dtype is not compute
                else a
                for a in args
            )
        # As torch.amp.custom_fwd(cast_inputs=...): a declared policy chose the dtype of the
        # inputs, so the ops inside forward run without autocast.
        with no_grad(), autocast(enabled=False) if schema is not None else nullcontext():
            out = cls.forward(ctx, *inputs)
        if not isinstance(out, Tensor):
            raise TypeError(
                f"{cls.__name__}.forward must return one Tensor, got {type(out).__name__}"
            )
        if not (is_grad_enabled() and any(ctx.needs_input_grad)):
            return out
        result = out.detach()
        ctx.next_edges = tuple(
            a._grad_edge() if isinstance(a, Tensor) and a.requires_grad else None for a in args
        )
        ctx.output_backend, ctx.output_dtype = result._backend, result.dtype
        result._set_grad_fn(ctx)
        return result
