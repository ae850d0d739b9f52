r"""Learning-rate schedulers with PyTorch's names, signatures, defaults and semantics.

A scheduler owns an optimizer's ``param_groups`` learning rates: it writes ``group["lr"]``
when it is built and at every :meth:`LRScheduler.step`. It relies only on the optimizer
interface PyTorch's schedulers use, so it drives any object with

* ``param_groups``: a list of dicts, each holding ``"lr"`` (and ``"momentum"`` or
  ``"betas"`` where :class:`OneCycleLR` cycles momentum);
* ``defaults``: a dict of the optimizer's default hyperparameters (read by
  :class:`OneCycleLR` only);
* ``step()``.

Most schedules are evaluated in PyTorch's *chainable* (recursive) form: the new rate is
computed from the current ``group["lr"]``, so several schedulers can act on one optimizer
(:class:`ChainedScheduler`) and changes made from outside a scheduler persist. The
floating-point operations are done in PyTorch's order, so the rates agree with PyTorch's to
the last bit, not merely to a tolerance. ``step(epoch)`` (deprecated in PyTorch) is
supported as PyTorch does it: it warns and uses the closed form where a schedule has one.

:meth:`LRScheduler.state_dict` holds every attribute except the optimizer, under PyTorch's
attribute names, so a scheduler state saved by PyTorch loads here and vice versa (apart
from lambdas, which are never saved, as in PyTorch).
"""

from __future__ import annotations

import math
import types
import warnings
import weakref
from bisect import bisect_right
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from functools import wraps
from typing import Any, Literal, Protocol, SupportsFloat

__all__ = [
    "LRScheduler",
    "LambdaLR",
    "MultiplicativeLR",
    "StepLR",
    "MultiStepLR",
    "ConstantLR",
    "LinearLR",
    "ExponentialLR",
    "SequentialLR",
    "CosineAnnealingLR",
    "ChainedScheduler",
    "ReduceLROnPlateau",
    "CosineAnnealingWarmRestarts",
    "OneCycleLR",
    "PolynomialLR",
]

# The opening words of PyTorch's warnings are kept, so warning filters written for PyTorch
# (``warnings.filterwarnings("ignore", message=...)`` matches from the start) still apply.
_EPOCH_DEPRECATED = (
    "The epoch parameter in `scheduler.step()` was not necessary and is being deprecated: "
    "call `scheduler.step()` without it. Given an epoch, the scheduler jumps to it and uses "
    "the schedule's closed form where it has one, the chainable form otherwise."
)
_STEP_ORDER = (
    "Detected call of `lr_scheduler.step()` before `optimizer.step()`. Step the optimizer "
    "first: stepping the scheduler first skips the schedule's first learning rate."
)


class _Optimizer(Protocol):
    """What a scheduler needs of an optimizer (PyTorch's optimizer interface)."""

    param_groups: list[dict[str, Any]]

    def step(self, *args: Any, **kwargs: Any) -> Any: ...


def _check_optimizer(scheduler: object, optimizer: object) -> None:
    """Raise TypeError unless ``optimizer`` has ``param_groups`` (dicts holding "lr") and step."""
    groups = getattr(optimizer, "param_groups", None)
    if (
        isinstance(groups, list)
        and all(isinstance(group, dict) and "lr" in group for group in groups)
        and callable(getattr(optimizer, "step", None))
    ):
        return
    raise TypeError(
        f"{type(scheduler).__name__}: optimizer must be an optimizer (an object with "
        f"param_groups, a list of dicts that each hold 'lr', and a step() method); "
        f"{type(optimizer).__name__} is not an Optimizer"
    )


def _per_group(scheduler: object, name: str, value: Any, optimizer: _Optimizer) -> list[Any]:
    """``value`` for each param group: a list or tuple of one per group, or one for all."""
    count = len(optimizer.param_groups)
    if isinstance(value, (list, tuple)):
        if len(value) != count:
            raise ValueError(
                f"{type(scheduler).__name__}: {name} needs one value per param group: the "
                f"optimizer has {count} param groups, {name} has {len(value)} values"
            )
        return list(value)
    return [value] * count


def _current_lrs(optimizer: _Optimizer) -> list[Any]:
    return [group["lr"] for group in optimizer.param_groups]


def _track_optimizer_steps(optimizer: _Optimizer) -> None:
    """Wrap ``optimizer.step`` so that it records, in ``optimizer._opt_called``, that it ran.

    The wrapper holds the optimizer weakly (no reference cycle) and carries
    ``_wrapped_by_lr_sched``, so a second scheduler on the same optimizer does not wrap again.
    """
    step = optimizer.step
    if getattr(step, "_wrapped_by_lr_sched", False):
        return
    # A method bound to the optimizer: call its function on the weak reference.
    function = step.__func__ if getattr(step, "__self__", None) is optimizer else None
    owner = weakref.ref(optimizer)

    @wraps(function if function is not None else step)
    def tracked_step(*args: Any, **kwargs: Any) -> Any:
        opt = owner()
        opt._opt_called = True  # type: ignore[union-attr]
        return function(opt, *args, **kwargs) if function is not None else step(*args, **kwargs)

    tracked_step._wrapped_by_lr_sched = True  # type: ignore[attr-defined]
    optimizer.step = tracked_step  # type: ignore[method-assign]


class LRScheduler:
    r"""Base class of the learning-rate schedulers (PyTorch's ``torch.optim.lr_scheduler``).

    A subclass defines :meth:`get_lr` (the next rate of each param group, usually from the
    current ``group["lr"]``) and, optionally, ``_get_closed_form_lr`` (the rate at
    :attr:`last_epoch` from :attr:`base_lrs` alone, used by ``step(epoch)``).

    Building a scheduler with ``last_epoch=-1`` stores each group's ``"lr"`` as its
    ``"initial_lr"`` (unless the group already has one), then takes the schedule's step 0,
    which writes the rate of epoch 0 into ``group["lr"]``. Build the scheduler *before*
    loading an optimizer checkpoint, or the loaded rates are overwritten.

    Parameters
    ----------
    optimizer : Optimizer
        The optimizer whose ``param_groups`` rates are scheduled.
    last_epoch : int
        The index of the last epoch taken. ``-1`` (the default) starts the schedule; any
        other value resumes it and needs ``"initial_lr"`` in every param group.

    Attributes
    ----------
    base_lrs : list of float
        Each group's ``"initial_lr"``.
    last_epoch : int
        The number of :meth:`step` calls since epoch 0 (PyTorch's name: with one step per
        batch it counts batches).

    Raises
    ------
    TypeError
        If ``optimizer`` has no ``param_groups`` of dicts holding ``"lr"`` or no ``step``.
    KeyError
        If ``last_epoch != -1`` and a param group has no ``"initial_lr"``.
    """

    _get_lr_called_within_step: bool = False
    _is_initial: bool = False

    def __init__(self, optimizer: _Optimizer, last_epoch: int = -1) -> None:
        _check_optimizer(self, optimizer)
        self.optimizer = optimizer
        if last_epoch == -1:
            for group in optimizer.param_groups:
                group.setdefault("initial_lr", group["lr"])
        else:
            for i, group in enumerate(optimizer.param_groups):
                if "initial_lr" not in group:
                    raise KeyError(
                        f"{type(self).__name__}: param_groups[{i}] has no 'initial_lr', which "
                        f"resuming a schedule (last_epoch={last_epoch}) needs. A scheduler "
                        f"built with last_epoch=-1 sets it: load the optimizer's checkpoint "
                        f"before resuming, or start the schedule with last_epoch=-1"
                    )
        self.base_lrs: list[Any] = [group["initial_lr"] for group in optimizer.param_groups]
        self.last_epoch = last_epoch
        _track_optimizer_steps(optimizer)
        self._initial_step()

    def _initial_step(self) -> None:
        """Take the schedule's first step (epoch ``last_epoch + 1``) with ``_is_initial`` set."""
        self._step_count = 0
        self._is_initial = True
        try:
            self.step()
        finally:
            self._is_initial = False

    def state_dict(self) -> dict[str, Any]:
        """The scheduler's state: every attribute except the optimizer.

        Returns
        -------
        dict
            Attribute name to value; the values are the scheduler's own (not copies), as in
            PyTorch.
        """
        return {key: value for key, value in self.__dict__.items() if key != "optimizer"}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore the state returned by :meth:`state_dict` (PyTorch's or this module's).

        Parameters
        ----------
        state_dict : dict
            A scheduler state, from :meth:`state_dict`.
        """
        self.__dict__.update(state_dict)

    def get_last_lr(self) -> list[Any]:
        """The learning rate of each param group, as the last :meth:`step` set it.

        Returns
        -------
        list of float
            One rate per param group.
        """
        return list(self._last_lr)

    def get_lr(self) -> list[Any]:
        """The next learning rate of each param group; :meth:`step` calls it.

        To read the current rates, use :meth:`get_last_lr`.

        Returns
        -------
        list of float
            One rate per param group.
        """
        raise NotImplementedError(f"{type(self).__name__} does not define get_lr")

    def _warn_unless_in_step(self) -> None:
        """Warn when :meth:`get_lr` is called by hand: it computes the *next* rates."""
        if not self._get_lr_called_within_step:
            warnings.warn(
                f"{type(self).__name__}.get_lr() computes the next learning rates for step(); "
                f"to get the last learning rate computed by the scheduler, use get_last_lr()",
                UserWarning,
                stacklevel=3,
            )

    def step(self, epoch: int | None = None) -> None:
        """Advance the schedule one epoch and write the new rates into ``group["lr"]``.

        Call it after ``optimizer.step()``; the first call warns (UserWarning) if the
        optimizer has not stepped yet, as PyTorch does.

        Parameters
        ----------
        epoch : int, optional
            Deprecated, as in PyTorch (it warns): jump to this epoch, using the schedule's
            closed form where it has one.
        """
        if self._step_count == 1:
            if not getattr(self.optimizer.step, "_wrapped_by_lr_sched", False):
                warnings.warn(
                    f"{type(self).__name__}: optimizer.step was replaced after the scheduler "
                    f"was built, so the scheduler cannot tell whether optimizer.step() ran "
                    f"before scheduler.step(); call optimizer.step() first",
                    UserWarning,
                    stacklevel=2,
                )
            elif not getattr(self.optimizer, "_opt_called", False):
                warnings.warn(_STEP_ORDER, UserWarning, stacklevel=2)
        self._step_count += 1
        if epoch is not None:
            warnings.warn(_EPOCH_DEPRECATED, UserWarning, stacklevel=2)
        self._update_lr(epoch)

    def _update_lr(self, epoch: int | None = None) -> None:
        """Move to the next epoch (or to ``epoch``) and write its rates into the groups."""
        self._get_lr_called_within_step = True
        try:
            if epoch is None:
                self.last_epoch += 1
                values = self.get_lr()
            else:
                self.last_epoch = epoch
                closed_form = getattr(self, "_get_closed_form_lr", None)
                values = closed_form() if closed_form is not None else self.get_lr()
        finally:
            self._get_lr_called_within_step = False
        groups = self.optimizer.param_groups
        if len(values) != len(groups):
            raise ValueError(
                f"{type(self).__name__}: the schedule gave {len(values)} learning rates for "
                f"{len(groups)} param groups"
            )
        for group, lr in zip(groups, values):
            group["lr"] = lr
        self._last_lr: list[Any] = _current_lrs(self.optimizer)


class _LRScheduler(LRScheduler):
    """The old name of :class:`LRScheduler`, kept (as PyTorch keeps it) for subclasses."""


def _check_lambdas(scheduler: object, lambdas: list[Any]) -> None:
    for i, fn in enumerate(lambdas):
        if not callable(fn):
            raise TypeError(
                f"{type(scheduler).__name__}: lr_lambda must be a function of the epoch (or a "
                f"list of them, one per param group); entry {i} is a {type(fn).__name__}"
            )


class _LambdaScheduler(LRScheduler):
    """A schedule given by one function of the epoch per param group.

    The functions themselves are not saved by :meth:`state_dict` (as in PyTorch): an entry
    is ``None`` for a plain function or lambda, and the ``__dict__`` of a callable object.
    """

    def __init__(
        self,
        optimizer: _Optimizer,
        lr_lambda: Callable[[int], float] | list[Callable[[int], float]],
        last_epoch: int = -1,
    ) -> None:
        _check_optimizer(self, optimizer)
        self.optimizer = optimizer
        self.lr_lambdas: list[Callable[[int], float]] = _per_group(
            self, "lr_lambda", lr_lambda, optimizer
        )
        _check_lambdas(self, self.lr_lambdas)
        super().__init__(optimizer, last_epoch)

    def state_dict(self) -> dict[str, Any]:
        """The scheduler's state: every attribute except the optimizer and the functions.

        Returns
        -------
        dict
            Attribute name to value; ``"lr_lambdas"`` holds, per group, ``None`` for a
            function and a copy of ``__dict__`` for a callable object.
        """
        state = {
            key: value
            for key, value in self.__dict__.items()
            if key not in ("optimizer", "lr_lambdas")
        }
        state["lr_lambdas"] = [
            None
            if isinstance(fn, types.FunctionType) or not hasattr(fn, "__dict__")
            else dict(fn.__dict__)
            for fn in self.lr_lambdas
        ]
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore a state from :meth:`state_dict`; callable objects get their attributes back.

        Parameters
        ----------
        state_dict : dict
            A scheduler state, from :meth:`state_dict`; it is not modified.
        """
        self.__dict__.update({k: v for k, v in state_dict.items() if k != "lr_lambdas"})
        for fn, attributes in zip(self.lr_lambdas, state_dict["lr_lambdas"]):
            if attributes is not None:
                fn.__dict__.update(attributes)


class LambdaLR(_LambdaScheduler):
    r"""Set each group's rate to its initial rate times a function of the epoch.

    .. math:: \eta_t = \eta_0 \, \lambda(t)

    Parameters
    ----------
    optimizer : Optimizer
        The optimizer whose rates are scheduled.
    lr_lambda : callable or list of callable
        :math:`\lambda`, a function of the epoch ``t`` (an int) returning a factor; or a list
        of them, one per param group.
    last_epoch : int
        The last epoch taken; ``-1`` starts the schedule.
    """

    def get_lr(self) -> list[Any]:
        self._warn_unless_in_step()
        return [
            base_lr * fn(self.last_epoch) for fn, base_lr in zip(self.lr_lambdas, self.base_lrs)
        ]


class MultiplicativeLR(_LambdaScheduler):
    r"""Multiply each group's current rate by a function of the epoch, at every step.

    .. math:: \eta_t = \eta_{t-1} \, \lambda(t) \quad (t \ge 1)

    with :math:`\eta_0` the group's initial rate.

    Parameters
    ----------
    optimizer : Optimizer
        The optimizer whose rates are scheduled.
    lr_lambda : callable or list of callable
        :math:`\lambda`, a function of the epoch ``t`` (an int) returning a factor; or a list
        of them, one per param group.
    last_epoch : int
        The last epoch taken; ``-1`` starts the schedule.
    """

    def get_lr(self) -> list[Any]:
        self._warn_unless_in_step()
        if self._is_initial:
            return _current_lrs(self.optimizer)
        return [
            group["lr"] * fn(self.last_epoch)
            for fn, group in zip(self.lr_lambdas, self.optimizer.param_groups)
        ]


class StepLR(LRScheduler):
    r"""Multiply each group's rate by ``gamma`` every ``step_size`` epochs.

    .. math:: \eta_t = \eta_0 \, \gamma^{\lfloor t / s \rfloor}

    Evaluated in the chainable form :math:`\eta_t = \gamma\,\eta_{t-1}` when :math:`s`
    divides :math:`t > 0`, else :math:`\eta_t = \eta_{t-1}`.

    Parameters
    ----------
    optimizer : Optimizer
        The optimizer whose rates are scheduled.
    step_size : int
        :math:`s`, the period of the decay (positive).
    gamma : float
        :math:`\gamma`, the factor of each decay.
    last_epoch : int
        The last epoch taken; ``-1`` starts the schedule.
    """

    def __init__(
        self, optimizer: _Optimizer, step_size: int, gamma: float = 0.1, last_epoch: int = -1
    ) -> None:
        if not step_size > 0:
            raise ValueError(f"StepLR: step_size must be a positive period; got {step_size}")
        self.step_size = step_size
        self.gamma = gamma
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[Any]:
        self._warn_unless_in_step()
        if self.last_epoch == 0 or self.last_epoch % self.step_size != 0:
            return _current_lrs(self.optimizer)
        return [group["lr"] * self.gamma for group in self.optimizer.param_groups]

    def _get_closed_form_lr(self) -> list[Any]:
        decays = self.last_epoch // self.step_size
        return [base_lr * self.gamma**decays for base_lr in self.base_lrs]


class MultiStepLR(LRScheduler):
    r"""Multiply each group's rate by ``gamma`` at each milestone epoch.

    .. math:: \eta_t = \eta_0 \, \gamma^{\#\{m \in M \,:\, m \le t\}}

    A milestone listed :math:`k` times multiplies by :math:`\gamma^k`; the milestones may be
    in any order (as in PyTorch, which counts them).

    Parameters
    ----------
    optimizer : Optimizer
        The optimizer whose rates are scheduled.
    milestones : iterable of int
        :math:`M`, the epochs at which the rate decays.
    gamma : float
        :math:`\gamma`, the factor of each decay.
    last_epoch : int
        The last epoch taken; ``-1`` starts the schedule.
    """

    def __init__(
        self,
        optimizer: _Optimizer,
        milestones: Iterable[int],
        gamma: float = 0.1,
        last_epoch: int = -1,
    ) -> None:
        self.milestones = Counter(milestones)
        self.gamma = gamma
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[Any]:
        self._warn_unless_in_step()
        if self.last_epoch not in self.milestones:
            return _current_lrs(self.optimizer)
        factor = self.gamma ** self.milestones[self.last_epoch]
        return [group["lr"] * factor for group in self.optimizer.param_groups]

    def _get_closed_form_lr(self) -> list[Any]:
        passed = bisect_right(sorted(self.milestones.elements()), self.last_epoch)
        return [base_lr * self.gamma**passed for base_lr in self.base_lrs]


class ConstantLR(LRScheduler):
    r"""Scale each group's rate by ``factor`` for the first ``total_iters`` epochs.

    .. math:: \eta_t = \eta_0 \, f \ (t < T), \qquad \eta_t = \eta_0 \ (t \ge T)

    Evaluated in the chainable form: :math:`\times f` at epoch 0, :math:`\times 1/f` at
    epoch :math:`T`, unchanged otherwise.

    Parameters
    ----------
    optimizer : Optimizer
        The optimizer whose rates are scheduled.
    factor : float
        :math:`f`, in :math:`[0, 1]`.
    total_iters : int
        :math:`T`, the number of epochs scaled.
    last_epoch : int
        The last epoch taken; ``-1`` starts the schedule.
    """

    def __init__(
        self,
        optimizer: _Optimizer,
        factor: float = 1.0 / 3,
        total_iters: int = 5,
        last_epoch: int = -1,
    ) -> None:
        if not 0 <= factor <= 1:
            raise ValueError(f"ConstantLR: factor must be between 0 and 1; got {factor}")
        self.factor = factor
        self.total_iters = total_iters
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[Any]:
        self._warn_unless_in_step()
        groups = self.optimizer.param_groups
        if self.last_epoch == 0:
            return [group["lr"] * self.factor for group in groups]
        if self.last_epoch != self.total_iters:
            return _current_lrs(self.optimizer)
        return [group["lr"] * (1.0 / self.factor) for group in groups]

    def _get_closed_form_lr(self) -> list[Any]:
        scale = self.factor + (self.last_epoch >= self.total_iters) * (1 - self.factor)
        return [base_lr * scale for base_lr in self.base_lrs]


class LinearLR(LRScheduler):
    r"""Scale each group's rate by a factor going linearly from ``start_factor`` to
    ``end_factor`` over ``total_iters`` epochs, then constant.

    .. math:: \eta_t = \eta_0 \left(s + (e - s)\,\frac{\min(t, T)}{T}\right)

    Evaluated in the chainable form :math:`\eta_t = \eta_{t-1}\left(1 +
    \frac{e - s}{T s + (t - 1)(e - s)}\right)` for :math:`1 \le t \le T`.

    Parameters
    ----------
    optimizer : Optimizer
        The optimizer whose rates are scheduled.
    start_factor : float
        :math:`s`, in :math:`(0, 1]`.
    end_factor : float
        :math:`e`, in :math:`[0, 1]`.
    total_iters : int
        :math:`T`, the number of epochs of the ramp.
    last_epoch : int
        The last epoch taken; ``-1`` starts the schedule.
    """

    def __init__(
        self,
        optimizer: _Optimizer,
        start_factor: float = 1.0 / 3,
        end_factor: float = 1.0,
        total_iters: int = 5,
        last_epoch: int = -1,
    ) -> None:
        if not 0 < start_factor <= 1:
            raise ValueError(
                f"LinearLR: start_factor must be greater than 0 and at most 1; got {start_factor}"
            )
        if not 0 <= end_factor <= 1:
            raise ValueError(f"LinearLR: end_factor must be between 0 and 1; got {end_factor}")
        self.start_factor = start_factor
        self.end_factor = end_factor
        self.total_iters = total_iters
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[Any]:
        self._warn_unless_in_step()
        groups = self.optimizer.param_groups
        if self.last_epoch == 0:
            return [group["lr"] * self.start_factor for group in groups]
        if self._is_initial or self.last_epoch > self.total_iters:
            return _current_lrs(self.optimizer)
        rise = self.end_factor - self.start_factor
        previous = self.total_iters * self.start_factor + (self.last_epoch - 1) * rise
        return [group["lr"] * (1.0 + rise / previous) for group in groups]

    def _get_closed_form_lr(self) -> list[Any]:
        return [
            base_lr
            * (
                self.start_factor
                + (self.end_factor - self.start_factor)
                * min(self.total_iters, self.last_epoch)
                / self.total_iters
            )
            for base_lr in self.base_lrs
        ]


class ExponentialLR(LRScheduler):
    r"""Multiply each group's rate by ``gamma`` every epoch.

    .. math:: \eta_t = \eta_0 \, \gamma^t

    Evaluated in the chainable form :math:`\eta_t = \gamma\,\eta_{t-1}`.

    Parameters
    ----------
    optimizer : Optimizer
        The optimizer whose rates are scheduled.
    gamma : float
        :math:`\gamma`.
    last_epoch : int
        The last epoch taken; ``-1`` starts the schedule.
    """

    def __init__(self, optimizer: _Optimizer, gamma: float, last_epoch: int = -1) -> None:
        self.gamma = gamma
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[Any]:
        self._warn_unless_in_step()
        # The first step of a resumed schedule keeps the rates it resumes from.
        if self._is_initial:
            return _current_lrs(self.optimizer)
        return [group["lr"] * self.gamma for group in self.optimizer.param_groups]

    def _get_closed_form_lr(self) -> list[Any]:
        return [base_lr * self.gamma**self.last_epoch for base_lr in self.base_lrs]


class PolynomialLR(LRScheduler):
    r"""Decay each group's rate polynomially to zero over ``total_iters`` epochs.

    .. math:: \eta_t = \eta_0 \left(1 - \frac{\min(t, T)}{T}\right)^p

    Evaluated in the chainable form :math:`\eta_t = \eta_{t-1} \left(\frac{1 - t/T}{1 - (t
    - 1)/T}\right)^p` for :math:`1 \le t \le T`.

    Parameters
    ----------
    optimizer : Optimizer
        The optimizer whose rates are scheduled.
    total_iters : int
        :math:`T`, the number of epochs of the decay.
    power : float
        :math:`p`.
    last_epoch : int
        The last epoch taken; ``-1`` starts the schedule.
    """

    def __init__(
        self,
        optimizer: _Optimizer,
        total_iters: int = 5,
        power: float = 1.0,
        last_epoch: int = -1,
    ) -> None:
        self.total_iters = total_iters
        self.power = power
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[Any]:
        self._warn_unless_in_step()
        if self._is_initial or self.last_epoch > self.total_iters:
            return _current_lrs(self.optimizer)
        decay = (
            (1.0 - self.last_epoch / self.total_iters)
            / (1.0 - (self.last_epoch - 1) / self.total_iters)
        ) ** self.power
        return [group["lr"] * decay for group in self.optimizer.param_groups]

    def _get_closed_form_lr(self) -> list[Any]:
        remaining = 1.0 - min(self.total_iters, self.last_epoch) / self.total_iters
        return [base_lr * remaining**self.power for base_lr in self.base_lrs]


class CosineAnnealingLR(LRScheduler):
    r"""Anneal each group's rate along a cosine from its initial rate to ``eta_min``.

    .. math:: \eta_t = \eta_{min} + \frac{\eta_0 - \eta_{min}}{2}
              \left(1 + \cos\frac{\pi t}{T}\right)

    Evaluated, as in PyTorch, in the chainable form

    .. math:: \eta_t = \eta_{min} + (\eta_{t-1} - \eta_{min})
              \frac{1 + \cos(\pi t / T)}{1 + \cos(\pi (t - 1) / T)}

    except at the epochs just past each minimum (:math:`t - 1 - T` a multiple of
    :math:`2T`), where :math:`\eta_t = \eta_{t-1} + (\eta_0 - \eta_{min})(1 - \cos(\pi /
    T))/2`. Past :math:`T` the rate therefore rises again (a period of :math:`2T`), with no
    restart; see :class:`CosineAnnealingWarmRestarts` for restarts.

    Parameters
    ----------
    optimizer : Optimizer
        The optimizer whose rates are scheduled.
    T_max : int
        :math:`T`, the number of epochs from the initial rate to ``eta_min`` (positive).
    eta_min : float
        :math:`\eta_{min}`, the lowest rate.
    last_epoch : int
        The last epoch taken; ``-1`` starts the schedule.
    """

    def __init__(
        self,
        optimizer: _Optimizer,
        T_max: int,  # noqa: N803 (PyTorch's name)
        eta_min: float = 0.0,
        last_epoch: int = -1,
    ) -> None:
        if not T_max > 0:
            raise ValueError(f"CosineAnnealingLR: T_max must be a positive period; got {T_max}")
        self.T_max = T_max
        self.eta_min = eta_min
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[Any]:
        self._warn_unless_in_step()
        groups = self.optimizer.param_groups
        if self._is_initial:
            return _current_lrs(self.optimizer)
        if self._step_count == 1 and self.last_epoch > 0:
            # Reached only by calling get_lr() by hand on a just-resumed scheduler, which has
            # no previous rate to chain from: the closed form at last_epoch, as PyTorch gives.
            return self._get_closed_form_lr()
        if (self.last_epoch - 1 - self.T_max) % (2 * self.T_max) == 0:
            rise = (1 - math.cos(math.pi / self.T_max)) / 2
            return [
                group["lr"] + (base_lr - self.eta_min) * rise
                for base_lr, group in zip(self.base_lrs, groups)
            ]
        ratio = (1 + math.cos(math.pi * self.last_epoch / self.T_max)) / (
            1 + math.cos(math.pi * (self.last_epoch - 1) / self.T_max)
        )
        return [ratio * (group["lr"] - self.eta_min) + self.eta_min for group in groups]

    def _get_closed_form_lr(self) -> list[Any]:
        return [
            self.eta_min
            + (base_lr - self.eta_min) * (1 + math.cos(math.pi * self.last_epoch / self.T_max)) / 2
            for base_lr in self.base_lrs
        ]


class CosineAnnealingWarmRestarts(LRScheduler):
    r"""Cosine annealing from each group's initial rate to ``eta_min``, restarting every
    :math:`T_i` epochs, with :math:`T_{i+1} = T_{mult}\,T_i`.

    .. math:: \eta_t = \eta_{min} + \frac{\eta_0 - \eta_{min}}{2}
              \left(1 + \cos\frac{\pi T_{cur}}{T_i}\right)

    :math:`T_{cur}` counts the epochs since the last restart. This schedule has no
    chainable form; ``step(epoch)`` takes fractional epochs (e.g. ``epoch + i / iters``
    within an epoch) and does not warn, as in PyTorch.

    Parameters
    ----------
    optimizer : Optimizer
        The optimizer whose rates are scheduled.
    T_0 : int
        :math:`T_0`, the length of the first period (a positive int).
    T_mult : int
        :math:`T_{mult}`, the growth of the period at each restart (an int, at least 1).
    eta_min : float
        :math:`\eta_{min}`, the lowest rate.
    last_epoch : int
        The last epoch taken; ``-1`` starts the schedule.
    """

    def __init__(
        self,
        optimizer: _Optimizer,
        T_0: int,  # noqa: N803 (PyTorch's name)
        T_mult: int = 1,  # noqa: N803 (PyTorch's name)
        eta_min: float = 0.0,
        last_epoch: int = -1,
    ) -> None:
        name = "CosineAnnealingWarmRestarts"
        if not isinstance(T_0, int) or T_0 <= 0:
            raise ValueError(f"{name}: T_0 must be a positive int; got {T_0!r}")
        if not isinstance(T_mult, int) or T_mult < 1:
            raise ValueError(f"{name}: T_mult must be an int of at least 1; got {T_mult!r}")
        if not isinstance(eta_min, (float, int)):
            raise ValueError(
                f"{name}: eta_min must be a float or an int; got {type(eta_min).__name__}"
            )
        self.T_0 = T_0
        self.T_i = T_0
        self.T_mult = T_mult
        self.eta_min = eta_min
        self.T_cur = last_epoch
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[Any]:
        self._warn_unless_in_step()
        return [
            self.eta_min
            + (base_lr - self.eta_min) * (1 + math.cos(math.pi * self.T_cur / self.T_i)) / 2
            for base_lr in self.base_lrs
        ]

    def step(self, epoch: float | None = None) -> None:
        """Advance one epoch, or move to ``epoch`` (which may be fractional).

        Parameters
        ----------
        epoch : float, optional
            The epoch to move to (non-negative); ``None`` advances by one.
        """
        if epoch is None and self.last_epoch < 0:
            epoch = 0
        if epoch is None:
            epoch = self.last_epoch + 1
            self.T_cur = self.T_cur + 1
            if self.T_cur >= self.T_i:
                self.T_cur = self.T_cur % self.T_i
                self.T_i = self.T_i * self.T_mult
        elif epoch < 0:
            raise ValueError(
                f"CosineAnnealingWarmRestarts: epoch must be non-negative; got {epoch}"
            )
        elif epoch < self.T_0:
            self.T_i = self.T_0
            self.T_cur = epoch
        elif self.T_mult == 1:
            self.T_cur = epoch % self.T_0
        else:
            # The number of restarts before epoch: T_0 (T_mult^n - 1) / (T_mult - 1) <= epoch.
            n = int(math.log(epoch / self.T_0 * (self.T_mult - 1) + 1, self.T_mult))
            self.T_cur = epoch - self.T_0 * (self.T_mult**n - 1) / (self.T_mult - 1)
            self.T_i = self.T_0 * self.T_mult**n
        self.last_epoch = math.floor(epoch)
        self._get_lr_called_within_step = True
        try:
            values = self.get_lr()
        finally:
            self._get_lr_called_within_step = False
        for group, lr in zip(self.optimizer.param_groups, values):
            group["lr"] = lr
        self._last_lr = _current_lrs(self.optimizer)


class OneCycleLR(LRScheduler):
    r"""The 1cycle policy: each group's rate rises from ``max_lr / div_factor`` to ``max_lr``,
    then falls to ``max_lr / (div_factor * final_div_factor)``; momentum moves the other way.

    The schedule is set per batch: step it once per batch, ``total_steps`` times at most.
    With :math:`N` the total steps and :math:`p` = ``pct_start``, the phases end at steps

    * two phases: :math:`pN - 1` (initial to max), :math:`N - 1` (max to min);
    * ``three_phase``: :math:`pN - 1` (initial to max), :math:`2pN - 2` (max to initial),
      :math:`N - 1` (initial to min),

    and within a phase from step :math:`a` to :math:`b`, with :math:`x = (t - a) / (b - a)`,
    the rate goes from :math:`u` to :math:`v` as

    .. math:: \text{cos:}\ v + \frac{u - v}{2}\,(1 + \cos \pi x), \qquad
              \text{linear:}\ (v - u)\,x + u.

    With ``cycle_momentum``, the group's ``"momentum"`` (or the first of its ``"betas"``,
    for Adam-like optimizers) goes from ``max_momentum`` to ``base_momentum`` and back in
    the same phases. Building the scheduler (with ``last_epoch=-1``) stores
    ``"initial_lr"``, ``"max_lr"``, ``"min_lr"``, ``"max_momentum"`` and
    ``"base_momentum"`` in every param group.

    Parameters
    ----------
    optimizer : Optimizer
        The optimizer whose rates are scheduled.
    max_lr : float or list of float
        The peak rate, or one per param group.
    total_steps : int, optional
        :math:`N`, the number of steps in the cycle; without it,
        ``epochs * steps_per_epoch``.
    epochs : int, optional
        The number of epochs, with ``steps_per_epoch``.
    steps_per_epoch : int, optional
        The number of steps per epoch, with ``epochs``.
    pct_start : float
        :math:`p`, the fraction of the cycle spent rising, in :math:`[0, 1]`.
    anneal_strategy : {"cos", "linear"}
        The shape of each phase.
    cycle_momentum : bool
        Whether to cycle momentum (the optimizer's defaults must hold ``"momentum"`` or
        ``"betas"``).
    base_momentum : float or list of float
        The lowest momentum (reached with the peak rate), or one per param group.
    max_momentum : float or list of float
        The highest momentum (at the start and end), or one per param group.
    div_factor : float
        The initial rate is ``max_lr / div_factor``.
    final_div_factor : float
        The final rate is ``initial_lr / final_div_factor``.
    three_phase : bool
        Whether to come back down to the initial rate before annealing to the final one.
    last_epoch : int
        The number of batches taken; ``-1`` starts the schedule.

    Raises
    ------
    ValueError
        Given neither ``total_steps`` nor both ``epochs`` and ``steps_per_epoch``, on a bad
        argument, and when stepped past ``total_steps``.
    """

    def __init__(
        self,
        optimizer: _Optimizer,
        max_lr: float | list[float],
        total_steps: int | None = None,
        epochs: int | None = None,
        steps_per_epoch: int | None = None,
        pct_start: float = 0.3,
        anneal_strategy: Literal["cos", "linear"] = "cos",
        cycle_momentum: bool = True,
        base_momentum: float | list[float] = 0.85,
        max_momentum: float | list[float] = 0.95,
        div_factor: float = 25.0,
        final_div_factor: float = 1e4,
        three_phase: bool = False,
        last_epoch: int = -1,
    ) -> None:
        _check_optimizer(self, optimizer)
        self.optimizer = optimizer
        self.total_steps = self._cycle_length(total_steps, epochs, steps_per_epoch)
        if (
            isinstance(pct_start, bool)
            or not isinstance(pct_start, (int, float))
            or not (0 <= pct_start <= 1)
        ):
            raise ValueError(f"OneCycleLR: pct_start must be a number in [0, 1]; got {pct_start!r}")
        if anneal_strategy not in ("cos", "linear"):
            raise ValueError(
                f"OneCycleLR: anneal_strategy must be 'cos' or 'linear'; got {anneal_strategy!r}"
            )
        self._anneal_func_type = anneal_strategy
        rise_end = float(pct_start * self.total_steps) - 1
        last = self.total_steps - 1
        if three_phase:
            self._schedule_phases = [
                self._phase(rise_end, "initial_lr", "max_lr", "max_momentum", "base_momentum"),
                self._phase(
                    float(2 * pct_start * self.total_steps) - 2,
                    "max_lr",
                    "initial_lr",
                    "base_momentum",
                    "max_momentum",
                ),
                self._phase(last, "initial_lr", "min_lr", "max_momentum", "max_momentum"),
            ]
        else:
            self._schedule_phases = [
                self._phase(rise_end, "initial_lr", "max_lr", "max_momentum", "base_momentum"),
                self._phase(last, "max_lr", "min_lr", "base_momentum", "max_momentum"),
            ]

        max_lrs = _per_group(self, "max_lr", max_lr, optimizer)
        if last_epoch == -1:
            for peak, group in zip(max_lrs, optimizer.param_groups):
                group["initial_lr"] = peak / div_factor
                group["max_lr"] = peak
                group["min_lr"] = group["initial_lr"] / final_div_factor

        self.cycle_momentum = cycle_momentum
        if cycle_momentum:
            defaults = getattr(optimizer, "defaults", {})
            if "momentum" not in defaults and "betas" not in defaults:
                raise ValueError(
                    f"OneCycleLR: cycle_momentum=True needs an optimizer with momentum or "
                    f"betas (in optimizer.defaults); {type(optimizer).__name__} has neither "
                    f"(pass cycle_momentum=False)"
                )
            self.use_beta1 = "betas" in defaults
            highs = _per_group(self, "max_momentum", max_momentum, optimizer)
            lows = _per_group(self, "base_momentum", base_momentum, optimizer)
            if last_epoch == -1:
                for high, low, group in zip(highs, lows, optimizer.param_groups):
                    self._set_momentum(group, high)
                    group["max_momentum"] = high
                    group["base_momentum"] = low
        super().__init__(optimizer, last_epoch)

    @staticmethod
    def _cycle_length(
        total_steps: int | None, epochs: int | None, steps_per_epoch: int | None
    ) -> int:
        def check(name: str, value: object) -> None:
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"OneCycleLR: {name} must be a positive int; got {value!r}")

        if total_steps is not None:
            check("total_steps", total_steps)
            return total_steps
        if epochs is not None and steps_per_epoch is not None:
            check("epochs", epochs)
            check("steps_per_epoch", steps_per_epoch)
            return epochs * steps_per_epoch
        raise ValueError(
            f"OneCycleLR: give total_steps, or both epochs and steps_per_epoch; got "
            f"total_steps=None, epochs={epochs!r}, steps_per_epoch={steps_per_epoch!r}"
        )

    @staticmethod
    def _phase(
        end_step: float, start_lr: str, end_lr: str, start_momentum: str, end_momentum: str
    ) -> dict[str, Any]:
        """A phase: its last step and the group keys of the values it goes between."""
        return {
            "end_step": end_step,
            "start_lr": start_lr,
            "end_lr": end_lr,
            "start_momentum": start_momentum,
            "end_momentum": end_momentum,
        }

    def _set_momentum(self, group: dict[str, Any], momentum: float) -> None:
        if self.use_beta1:
            group["betas"] = (momentum, *group["betas"][1:])
        else:
            group["momentum"] = momentum

    def _anneal(self, start: float, end: float, pct: float) -> float:
        if self._anneal_func_type == "cos":
            return end + (start - end) / 2.0 * (math.cos(math.pi * pct) + 1)
        return (end - start) * pct + start

    def get_lr(self) -> list[Any]:
        self._warn_unless_in_step()
        step = self.last_epoch
        if step > self.total_steps:
            raise ValueError(
                f"OneCycleLR: Tried to step {step} times. The specified number of total steps "
                f"is {self.total_steps}"
            )
        lrs = []
        final = len(self._schedule_phases) - 1
        for group in self.optimizer.param_groups:
            start_step = 0.0
            for i, phase in enumerate(self._schedule_phases):
                end_step = phase["end_step"]
                if step <= end_step or i == final:
                    pct = (step - start_step) / (end_step - start_step)
                    lrs.append(self._anneal(group[phase["start_lr"]], group[phase["end_lr"]], pct))
                    if self.cycle_momentum:
                        momentum = self._anneal(
                            group[phase["start_momentum"]], group[phase["end_momentum"]], pct
                        )
                        self._set_momentum(group, momentum)
                    break
                start_step = end_step
        return lrs


class ReduceLROnPlateau(LRScheduler):
    r"""Multiply each group's rate by ``factor`` when a metric has stopped improving.

    At each :meth:`step`, the metric :math:`x` improves on the best so far, :math:`b`, when

    ============  ==========================  ========================
    mode          ``threshold_mode="rel"``    ``threshold_mode="abs"``
    ============  ==========================  ========================
    ``"min"``     :math:`x < b\,(1 - \tau)`   :math:`x < b - \tau`
    ``"max"``     :math:`x > b\,(1 + \tau)`   :math:`x > b + \tau`
    ============  ==========================  ========================

    After more than ``patience`` steps without improvement (steps in cooldown do not
    count), each rate becomes :math:`\max(\eta f, \eta_{min})`, unless that changes it by
    ``eps`` or less; then ``cooldown`` steps pass before bad steps count again.

    Parameters
    ----------
    optimizer : Optimizer
        The optimizer whose rates are scheduled.
    mode : {"min", "max"}
        Whether the metric should go down (a loss) or up (an accuracy).
    factor : float
        :math:`f < 1`, the factor of each reduction.
    patience : int
        The number of steps without improvement tolerated.
    threshold : float
        :math:`\tau`, the least improvement that counts.
    threshold_mode : {"rel", "abs"}
        Whether :math:`\tau` is relative to the best value or absolute.
    cooldown : int
        The number of steps after a reduction during which bad steps are not counted.
    min_lr : float or list of float
        :math:`\eta_{min}`, the lowest rate, or one per param group.
    eps : float
        The least change of a rate that is applied.
    """

    def __init__(
        self,
        optimizer: _Optimizer,
        mode: Literal["min", "max"] = "min",
        factor: float = 0.1,
        patience: int = 10,
        threshold: float = 1e-4,
        threshold_mode: Literal["rel", "abs"] = "rel",
        cooldown: int = 0,
        min_lr: list[float] | float = 0,
        eps: float = 1e-8,
    ) -> None:
        if factor >= 1.0:
            raise ValueError(f"ReduceLROnPlateau: factor must be < 1.0; got {factor}")
        self.factor = factor
        _check_optimizer(self, optimizer)
        self.optimizer = optimizer
        if isinstance(min_lr, (list, tuple)):
            self.default_min_lr = None
            self.min_lrs = _per_group(self, "min_lr", min_lr, optimizer)
        else:
            self.default_min_lr = min_lr
            self.min_lrs = [min_lr] * len(optimizer.param_groups)
        self.patience = patience
        self.cooldown = cooldown
        self.eps = eps
        self.last_epoch = 0
        self._last_lr = _current_lrs(optimizer)
        self._init_is_better(mode=mode, threshold=threshold, threshold_mode=threshold_mode)
        self._reset()

    def _reset(self) -> None:
        self.best = self.mode_worse
        self.cooldown_counter = 0
        self.num_bad_epochs = 0

    def step(self, metrics: SupportsFloat, epoch: int | None = None) -> None:  # type: ignore[override]
        """Record the metric of this epoch and reduce the rates if it has plateaued.

        Parameters
        ----------
        metrics : float
            The metric (anything ``float()`` accepts, such as a one-element tensor).
        epoch : int, optional
            Deprecated, as in PyTorch (it warns): the index of this epoch.
        """
        current = float(metrics)
        if epoch is None:
            epoch = self.last_epoch + 1
        else:
            warnings.warn(_EPOCH_DEPRECATED, UserWarning, stacklevel=2)
        self.last_epoch = epoch
        if self._is_better(current, self.best):
            self.best = current
            self.num_bad_epochs = 0
        else:
            self.num_bad_epochs += 1
        if self.in_cooldown:
            self.cooldown_counter -= 1
            self.num_bad_epochs = 0
        if self.num_bad_epochs > self.patience:
            self._reduce_lr()
            self.cooldown_counter = self.cooldown
            self.num_bad_epochs = 0
        self._last_lr = _current_lrs(self.optimizer)

    def _reduce_lr(self) -> None:
        groups = self.optimizer.param_groups
        if len(groups) != len(self.min_lrs):  # a param group was added since construction
            if self.default_min_lr is None:
                raise RuntimeError(
                    f"ReduceLROnPlateau: the optimizer has {len(groups)} param groups but "
                    f"min_lr was given for {len(self.min_lrs)}; a param group was added after "
                    f"the scheduler was built: set min_lrs to one value per param group"
                )
            self.min_lrs = [self.default_min_lr] * len(groups)
        for group, floor in zip(groups, self.min_lrs):
            old_lr = float(group["lr"])
            new_lr = max(old_lr * self.factor, floor)
            if old_lr - new_lr > self.eps:
                group["lr"] = new_lr

    @property
    def in_cooldown(self) -> bool:
        """Whether the scheduler is in its cooldown after a reduction."""
        return self.cooldown_counter > 0

    def _is_better(self, a: float, best: float) -> bool:
        if self.mode == "min" and self.threshold_mode == "rel":
            return a < best * (1.0 - self.threshold)
        if self.mode == "min":
            return a < best - self.threshold
        if self.threshold_mode == "rel":
            return a > best * (self.threshold + 1.0)
        return a > best + self.threshold

    def _init_is_better(self, mode: str, threshold: float, threshold_mode: str) -> None:
        if mode not in ("min", "max"):
            raise ValueError(f"ReduceLROnPlateau: mode must be 'min' or 'max'; got {mode!r}")
        if threshold_mode not in ("rel", "abs"):
            raise ValueError(
                f"ReduceLROnPlateau: threshold_mode must be 'rel' or 'abs'; got {threshold_mode!r}"
            )
        self.mode_worse = math.inf if mode == "min" else -math.inf
        self.mode = mode
        self.threshold = threshold
        self.threshold_mode = threshold_mode

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore the state returned by :meth:`state_dict`.

        Parameters
        ----------
        state_dict : dict
            A scheduler state, from :meth:`state_dict`.
        """
        self.__dict__.update(state_dict)
        self._init_is_better(
            mode=self.mode, threshold=self.threshold, threshold_mode=self.threshold_mode
        )


def _check_schedulers(name: str, schedulers: Sequence[LRScheduler], optimizer: _Optimizer) -> None:
    """The checks SequentialLR and ChainedScheduler make of the schedulers they combine."""
    if len(schedulers) < 1:
        raise ValueError(f"{name}: schedulers must hold at least one scheduler; got none")
    for i, scheduler in enumerate(schedulers):
        if not hasattr(scheduler, "optimizer"):
            raise TypeError(
                f"{name}: schedulers[{i}] must be a scheduler (with an optimizer attribute); "
                f"got {type(scheduler).__name__}"
            )
        if isinstance(scheduler, ReduceLROnPlateau):
            raise ValueError(
                f"{name}: schedulers[{i}] is a ReduceLROnPlateau, which cannot be combined: "
                f"its step needs the metric"
            )
        if scheduler.optimizer is not optimizer:
            raise ValueError(
                f"{name}: every scheduler must drive the same optimizer; schedulers[{i}] "
                f"({type(scheduler).__name__}) drives another one"
            )


class _CombinedScheduler(LRScheduler):
    """A scheduler made of schedulers (:class:`SequentialLR`, :class:`ChainedScheduler`)."""

    _schedulers: Sequence[LRScheduler]

    def state_dict(self) -> dict[str, Any]:
        """The state: every attribute except the optimizer, with each scheduler's state.

        Returns
        -------
        dict
            Attribute name to value; ``"_schedulers"`` holds the schedulers' state dicts.
        """
        state = {
            key: value
            for key, value in self.__dict__.items()
            if key not in ("optimizer", "_schedulers")
        }
        state["_schedulers"] = [scheduler.state_dict() for scheduler in self._schedulers]
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore a state from :meth:`state_dict`, each scheduler's included.

        Parameters
        ----------
        state_dict : dict
            A state from :meth:`state_dict`; it is not modified.
        """
        self.__dict__.update({k: v for k, v in state_dict.items() if k != "_schedulers"})
        for scheduler, state in zip(self._schedulers, state_dict["_schedulers"]):
            scheduler.load_state_dict(state)


class SequentialLR(_CombinedScheduler):
    r"""Run schedulers one after another, switching at the milestone epochs.

    Scheduler :math:`k` runs from milestone :math:`k - 1` (epoch 0 for the first) until
    milestone :math:`k`; at its milestone it starts at its own epoch 0 (in closed form,
    where it has one), from the rates at that time.

    Parameters
    ----------
    optimizer : Optimizer
        The optimizer that all of ``schedulers`` drive.
    schedulers : list of LRScheduler
        The schedulers, in the order they run (not :class:`ReduceLROnPlateau`).
    milestones : list of int
        The epochs at which the next scheduler takes over: one fewer than the schedulers,
        in increasing order.
    last_epoch : int
        The last epoch taken; ``-1`` starts the schedule.
    """

    def __init__(
        self,
        optimizer: _Optimizer,
        schedulers: list[LRScheduler],
        milestones: list[int],
        last_epoch: int = -1,
    ) -> None:
        _check_optimizer(self, optimizer)
        _check_schedulers("SequentialLR", schedulers, optimizer)
        if len(milestones) != len(schedulers) - 1:
            raise ValueError(
                f"SequentialLR: milestones must hold one fewer entry than schedulers; got "
                f"{len(schedulers)} schedulers and {len(milestones)} milestones"
            )
        if any(later < earlier for earlier, later in zip(milestones, milestones[1:])):
            raise ValueError(
                f"SequentialLR: milestones must be in increasing order; got {list(milestones)}"
            )
        self._schedulers = schedulers
        self._milestones = milestones
        self.last_epoch = last_epoch + 1
        self.optimizer = optimizer
        # Building the schedulers stepped each of them once: undo that, then start the first.
        for group in optimizer.param_groups:
            group["lr"] = group["initial_lr"]
        self.recursive_undo()
        first = self._schedulers[bisect_right(self._milestones, 0)]
        first._initial_step()
        self._last_lr = first.get_last_lr()

    def recursive_undo(self, sched: object = None) -> None:
        """Take one epoch back from every scheduler in ``sched`` (nested ones too).

        Parameters
        ----------
        sched : LRScheduler, optional
            The scheduler to rewind; ``None`` rewinds this one's schedulers.
        """
        target = self if sched is None else sched
        if hasattr(target, "_schedulers"):
            for inner in target._schedulers:
                self.recursive_undo(inner)
        elif hasattr(target, "last_epoch"):
            target.last_epoch -= 1

    def step(self) -> None:  # type: ignore[override]
        """Advance one epoch, with the scheduler whose turn it is."""
        self.last_epoch += 1
        index = bisect_right(self._milestones, self.last_epoch)
        scheduler = self._schedulers[index]
        if index > 0 and self._milestones[index - 1] == self.last_epoch:
            scheduler._update_lr(0)
        else:
            scheduler.step()
        self._last_lr = scheduler.get_last_lr()


class ChainedScheduler(_CombinedScheduler):
    r"""Step several schedulers together: each :meth:`step` steps all of them, in order.

    The chainable schedules compose multiplicatively: e.g. a :class:`ConstantLR` warmup with
    an :class:`ExponentialLR` decay gives :math:`\eta_t = \eta_0 \, \gamma^t f` for
    :math:`t < T` and :math:`\eta_0 \gamma^t` after.

    Parameters
    ----------
    schedulers : sequence of LRScheduler
        The schedulers (not :class:`ReduceLROnPlateau`), all on one optimizer.
    optimizer : Optimizer, optional
        Their optimizer; by default the first scheduler's.
    """

    def __init__(
        self, schedulers: Sequence[LRScheduler], optimizer: _Optimizer | None = None
    ) -> None:
        if optimizer is not None:
            _check_optimizer(self, optimizer)
        elif len(schedulers) > 0:
            optimizer = getattr(schedulers[0], "optimizer", None)
        _check_schedulers("ChainedScheduler", schedulers, optimizer)
        self._schedulers = schedulers
        self.optimizer = optimizer
        self._last_lr = _current_lrs(optimizer)

    def step(self) -> None:  # type: ignore[override]
        """Step every scheduler, in order."""
        for scheduler in self._schedulers:
            scheduler.step()
        self._last_lr = _current_lrs(self.optimizer)
