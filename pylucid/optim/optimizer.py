"""The optimizer base class: parameter groups, per-parameter state, ``zero_grad`` and state
dicts, with PyTorch's names and semantics (``torch.optim.Optimizer``).

What differs from PyTorch: ``state[p]["step"]`` is a Python int (PyTorch keeps a float32 0-d
tensor; a loaded state dict may hold either), and there are no ``foreach``/``fused``
variants to choose - every update is one fused pass per parameter
(:mod:`pylucid.ops.updates`); the arguments are accepted and ignored.
"""

from __future__ import annotations

import warnings
from collections import defaultdict
from collections.abc import Callable, Iterable
from copy import deepcopy
from typing import Any

from pylucid.graph.grad_mode import enable_grad, no_grad
from pylucid.ops.conversion import clone
from pylucid.ops.inplace import zero_
from pylucid.tensor import Tensor

__all__ = ["Optimizer", "ParamsT", "check_nonnegative", "refuse_differentiable", "required"]

#: What an optimizer takes: tensors, ``(name, tensor)`` pairs, or dicts of parameter groups.
ParamsT = Iterable[Tensor] | Iterable[tuple[str, Tensor]] | Iterable[dict[str, Any]]


class _Required:
    """The default of a hyperparameter every group must give."""

    def __repr__(self) -> str:
        return "<required parameter>"


required = _Required()


class Optimizer:
    """Updates parameters (leaf tensors) from their ``.grad``.

    Parameters
    ----------
    params : iterable
        Tensors, ``(name, tensor)`` pairs (``model.named_parameters()``), or dicts each
        holding a group's ``"params"`` and the hyperparameters it overrides.
    defaults : dict
        The hyperparameters of groups that do not give them.

    Attributes
    ----------
    param_groups : list of dict
        Each group's ``"params"`` and hyperparameters (a scheduler changes ``"lr"`` here).
    state : dict
        Per parameter, the optimizer's state (``"step"``, moments, buffers).
    """

    def __init__(self, params: ParamsT, defaults: dict[str, Any]) -> None:
        if isinstance(params, Tensor):
            raise TypeError(
                f"{type(self).__name__}: params must be an iterable of Tensors or dicts, got a "
                f"Tensor (shape {params.shape}); pass [tensor] or model.parameters()"
            )
        if isinstance(params, set):
            raise TypeError(
                f"{type(self).__name__}: parameters must come in an ordered collection (a "
                f"list), not a set, whose order changes between runs"
            )
        self.defaults = dict(defaults)
        self.state: defaultdict[Tensor, dict[str, Any]] = defaultdict(dict)
        self.param_groups: list[dict[str, Any]] = []
        groups = list(params)
        if not groups:
            raise ValueError(f"{type(self).__name__}: got an empty parameter list")
        if not isinstance(groups[0], dict):
            groups = [{"params": groups}]
        for group in groups:
            self.add_param_group(group)

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        """Add a group of parameters (``{"params": [...], "lr": ...}``), filling in the
        defaults; a parameter may belong to one group only."""
        name = type(self).__name__
        if not isinstance(param_group, dict):
            raise TypeError(f"{name}: a param group must be a dict, got {type(param_group)}")
        params = param_group["params"]
        if isinstance(params, Tensor):
            params = [params]
        elif isinstance(params, set):
            raise TypeError(
                f"{name}: parameters must come in an ordered collection (a list), not a set, "
                f"whose order changes between runs"
            )
        entries = list(params)
        named = [isinstance(p, tuple) for p in entries]
        if any(named) and not all(named):
            raise ValueError(f"{name}: give every parameter with a name, or none")
        tensors = [p[1] for p in entries] if any(named) else entries
        group = dict(param_group, params=tensors)
        if any(named):
            group["param_names"] = [p[0] for p in entries]
        for i, p in enumerate(tensors):
            if not isinstance(p, Tensor):
                raise TypeError(f"{name}: params[{i}] is a {type(p).__name__}, not a Tensor")
            if not p.is_leaf:
                raise ValueError(
                    f"{name}: params[{i}] (shape {p.shape}) was computed by {p.grad_fn.name}; "
                    f"only leaf tensors can be optimized"
                )
            if not p.dtype.is_floating_point:
                raise TypeError(f"{name}: params[{i}] is {p.dtype.name}; it must be floating")
        for key, default in self.defaults.items():
            if default is required and key not in group:
                raise ValueError(f"{name}: the parameter group does not give {key!r}")
            group.setdefault(key, default)
        if len({id(p) for p in tensors}) != len(tensors):
            warnings.warn(
                f"{name}: a parameter group holds a parameter twice", UserWarning, stacklevel=3
            )
        present = {id(p) for g in self.param_groups for p in g["params"]}
        if any(id(p) in present for p in tensors):
            raise ValueError(f"{name}: some parameters appear in more than one parameter group")
        self.param_groups.append(group)

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Forget every parameter's gradient: set it to None (the default), or fill it with
        zeros in place."""
        with no_grad():
            for group in self.param_groups:
                for p in group["params"]:
                    if p.grad is None:
                        continue
                    if set_to_none:
                        p.grad = None
                    else:
                        p.grad = p.grad.detach() if p.grad.grad_fn is not None else p.grad
                        zero_(p.grad)

    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """Update every parameter that has a gradient; ``closure`` re-evaluates the loss
        first (with grad enabled) and its value is returned."""
        return self._run_step(closure)

    def _run_step(self, closure: Callable[[], Any] | None) -> Any:
        """:meth:`step`'s body (a scheduler wraps ``step`` itself; :mod:`pylucid.compiler`
        observes this)."""
        loss = None
        if closure is not None:
            with enable_grad():
                loss = closure()
        with no_grad():
            for group in self.param_groups:
                for p in group["params"]:
                    if p.grad is not None:
                        self._update(p, p.grad, group, self.state[p])
        return loss

    def _update(self, p: Tensor, grad: Tensor, group: dict[str, Any], state: dict) -> None:
        """One parameter's update, with its group's hyperparameters and its state."""
        raise NotImplementedError(f"{type(self).__name__} does not define an update")

    @staticmethod
    def _checked_grad(name: str, p: Tensor, grad: Tensor) -> Tensor:
        if grad.shape != p.shape or grad.dtype is not p.dtype or grad.device != p.device:
            raise ValueError(
                f"{name}.step: a gradient (shape {grad.shape}, {grad.dtype.name} on "
                f"'{grad.device}') does not match its parameter (shape {p.shape}, "
                f"{p.dtype.name} on '{p.device}')"
            )
        return grad.detach() if grad.requires_grad else grad

    # -- state dicts ------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """``{"state": {index: {...}}, "param_groups": [{..., "params": [indices]}]}``:
        parameters are numbered in group order, as in PyTorch; the tensors are references
        (save or copy them)."""
        index: dict[int, int] = {}
        groups = []
        for group in self.param_groups:
            for p in group["params"]:
                index.setdefault(id(p), len(index))
            packed = {k: v for k, v in group.items() if k != "params"}
            packed["params"] = [index[id(p)] for p in group["params"]]
            groups.append(packed)
        state = {index[id(p)]: dict(s) for p, s in self.state.items() if id(p) in index}
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Take the state and hyperparameters of :meth:`state_dict`. Everything is checked
        first (group count, group sizes, state shapes); a refused state dict changes
        nothing. Floating state tensors are cast to their parameter's dtype and device,
        except ``"step"``."""
        name = type(self).__name__
        if not isinstance(state_dict, dict) or set(state_dict) < {"state", "param_groups"}:
            raise ValueError(f"{name}.load_state_dict: expected a dict with 'state' and "
                             f"'param_groups', got {type(state_dict).__name__}")  # fmt: skip
        saved_groups = state_dict["param_groups"]
        if len(saved_groups) != len(self.param_groups):
            raise ValueError(
                f"{name}.load_state_dict: the state dict has {len(saved_groups)} parameter "
                f"groups, the optimizer {len(self.param_groups)}"
            )
        by_index: dict[Any, Tensor] = {}
        for i, (mine, saved) in enumerate(zip(self.param_groups, saved_groups)):
            if len(mine["params"]) != len(saved["params"]):
                raise ValueError(
                    f"{name}.load_state_dict: parameter group {i} has {len(saved['params'])} "
                    f"parameters in the state dict, {len(mine['params'])} in the optimizer"
                )
            by_index.update(zip(saved["params"], mine["params"]))
        state: defaultdict[Tensor, dict[str, Any]] = defaultdict(dict)
        for key, values in state_dict["state"].items():
            if key not in by_index:
                raise ValueError(f"{name}.load_state_dict: state for unknown parameter {key!r}")
            p = by_index[key]
            state[p] = {k: _cast_state(name, key, k, v, p) for k, v in values.items()}
        groups = []
        for mine, saved in zip(self.param_groups, saved_groups):
            hyperparameters = deepcopy({k: v for k, v in saved.items() if k != "params"})
            groups.append({**hyperparameters, "params": mine["params"]})
        self.state, self.param_groups = state, groups

    def __repr__(self) -> str:
        lines = [f"{type(self).__name__} ("]
        for i, group in enumerate(self.param_groups):
            lines.append(f"Parameter Group {i}")
            lines.extend(f"    {k}: {group[k]}" for k in sorted(group) if k != "params")
        lines.append(")")
        return "\n".join(lines)


def refuse_differentiable(optimizer: str, differentiable: bool) -> None:
    """Refuse ``differentiable=True``: the updates are kernels outside the graph."""
    if differentiable:
        raise ValueError(
            f"{optimizer}: differentiable=True is not supported: pylucid's updates are fused "
            f"in-place kernels outside the graph"
        )


def check_nonnegative(optimizer: str, **values: float) -> None:
    """Refuse a negative hyperparameter, naming it."""
    for name, value in values.items():
        if value < 0:
            raise ValueError(f"{optimizer}: {name} must be >= 0, got {value}")


def _cast_state(optimizer: str, index: Any, key: str, value: Any, p: Tensor) -> Any:
    """A loaded state value for parameter ``p``: PyTorch's rule (tensors go to ``p``'s
    device, floating ones to its dtype; ``step`` stays as it is, as a number here)."""
    if key == "step":
        return int(value.item()) if isinstance(value, Tensor) else int(value)
    if not isinstance(value, Tensor):
        return value
    if value.shape != p.shape:
        raise ValueError(
            f"{optimizer}.load_state_dict: state[{index!r}][{key!r}] has shape {value.shape}, "
            f"its parameter {p.shape}"
        )
    value = value.detach().to(p.device) if value.device != p.device else value.detach()
    if value.dtype.is_floating_point and value.dtype is not p.dtype:
        value = value.to(p.dtype)
    return clone(value)  # the optimizer updates it in place: not the caller's tensor
