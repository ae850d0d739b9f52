"""L-BFGS, as ``torch.optim.LBFGS``: a limited-memory quasi-Newton method driven by a
closure, with an optional strong-Wolfe line search.

The optimizer treats all parameters as one flat vector. It runs a few dozen small vector
operations per iteration and reads a handful of scalars back to steer itself, so it is
written with plain pylucid ops under ``no_grad`` (they run on the parameters' device, either
backend) and Python floats for the scalars, for clarity rather than speed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from pylucid.factories import zeros
from pylucid.graph.grad_mode import enable_grad, no_grad
from pylucid.ops.conversion import clone
from pylucid.ops.shape import cat
from pylucid.optim.optimizer import Optimizer, ParamsT, check_nonnegative
from pylucid.tensor import Tensor

__all__ = ["LBFGS"]

#: The flat state tensors (one value per parameter element) and the lists of them.
_VECTORS = ("d", "prev_flat_grad")
_VECTOR_LISTS = ("old_dirs", "old_stps")
#: The scalar state (PyTorch keeps 0-d tensors; pylucid keeps Python floats; both load).
_SCALARS = ("t", "H_diag")
_SCALAR_LISTS = ("ro", "al")


class LBFGS(Optimizer):
    r"""L-BFGS (Nocedal & Wright, *Numerical Optimization*, Algorithms 7.4 and 7.5), with
    PyTorch's formulation, defaults, stopping rules and state (after minFunc).

    All parameters are one vector :math:`x`; :math:`g` is its gradient, gathered after the
    closure has run (zeros for a parameter without a gradient). One ``step(closure)`` is::

        f, g = closure(), gradient                      # first evaluation; its loss is returned
        if max|g| <= tolerance_grad: return
        repeat at most max_iter times:
            k += 1                                      # iterations over all steps (n_iter)
            if k == 1:
                d = -g; H = 1
            else:
                y = g - g_prev; s = t * d               # the last move and its gradient change
                if y.s > 1e-10:                         # (curvature condition, else skip)
                    remember (s, y, rho = 1 / y.s), forgetting the oldest beyond history_size
                    H = y.s / y.y                       # scale of the initial inverse Hessian
                q = -g                                  # two-loop recursion: d = -H_k g
                for (s_i, y_i, rho_i) newest to oldest:
                    a_i = rho_i s_i.q;  q = q - a_i y_i
                d = H q
                for (s_i, y_i, rho_i) oldest to newest:
                    b_i = rho_i y_i.d;  d = d + (a_i - b_i) s_i
            g_prev = g; f_prev = f
            t = lr * min(1, 1 / sum|g|) if k == 1 else lr
            if g.d > -tolerance_change: stop            # not a descent direction
            if line_search_fn == "strong_wolfe":
                t, f, g = strong_wolfe(x, d, t)         # evaluates closure at x + t d
                x = x + t d
            else:
                x = x + t d
                if not the last iteration: f, g = closure(), gradient
            stop if max_iter iterations or max_eval evaluations were made this step,
                if max|g| <= tolerance_grad, max|t d| <= tolerance_change
                or |f - f_prev| < tolerance_change

    The strong-Wolfe search (N&W Algorithms 3.5 and 3.6, :math:`c_1 = 10^{-4}`,
    :math:`c_2 = 0.9`) first brackets an interval, extrapolating with the minimiser of the
    cubic through the last two trials (kept within :math:`[t + 0.01 (t - t_{prev}), 10 t]`),
    then zooms into it with cubic interpolation, stepping 0.1 of the interval away from an
    end when interpolation stalls there. It stops when the bracket is narrower than 1e-9
    (in :math:`\max|d|` units; PyTorch's fixed value, whatever ``tolerance_change`` is) or
    when the step's evaluations run out, and returns the best trial.

    Parameters
    ----------
    params : iterable
        Parameters (a single group: L-BFGS has no per-parameter options).
    lr : float
        The step length (the initial trial of the line search).
    max_iter : int
        Iterations per ``step``.
    max_eval : int, optional
        Closure evaluations per ``step`` (default ``max_iter * 5 // 4``).
    tolerance_grad : float
        Stop when no gradient element exceeds it in magnitude.
    tolerance_change : float
        Stop when the loss, or every element of a move, changes by less.
    history_size : int
        How many ``(s, y)`` pairs the inverse Hessian approximation remembers.
    line_search_fn : {None, "strong_wolfe"}
        None moves by ``lr`` times the direction.

    Notes
    -----
    The state is PyTorch's, kept under the first parameter: ``func_evals`` and ``n_iter``
    (counts over all steps), ``d`` and ``prev_flat_grad`` (flat vectors of the parameters'
    dtype and device), ``old_dirs`` (the :math:`y`) and ``old_stps`` (the :math:`s`), ``ro``,
    ``al`` (the two-loop's :math:`a_i`), ``H_diag``, ``t`` and ``prev_loss``. Scalars are
    Python floats where PyTorch keeps 0-d tensors; PyTorch's state dict loads (its tensors
    as pylucid tensors, e.g. read by :func:`pylucid.load`). With float64 parameters the
    scalars are computed in PyTorch's precision and order (but for one division of the cubic
    interpolation, which PyTorch makes a reciprocal and a product when a step is a 0-d
    tensor); with float32 ones pylucid's scalars are float64, PyTorch's float32.
    """

    def __init__(
        self,
        params: ParamsT,
        lr: float = 1.0,
        max_iter: int = 20,
        max_eval: int | None = None,
        tolerance_grad: float = 1e-7,
        tolerance_change: float = 1e-9,
        history_size: int = 100,
        line_search_fn: str | None = None,
    ) -> None:
        check_nonnegative("LBFGS", lr=lr, tolerance_grad=tolerance_grad,
                          tolerance_change=tolerance_change)  # fmt: skip
        if max_eval is None:
            max_eval = max_iter * 5 // 4
        for name, value in (("max_iter", max_iter), ("max_eval", max_eval),
                            ("history_size", history_size)):  # fmt: skip
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                raise ValueError(f"LBFGS: {name} must be an int >= 1, got {value!r}")
        _check_line_search(line_search_fn)
        defaults = dict(lr=lr, max_iter=max_iter, max_eval=max_eval,
                        tolerance_grad=tolerance_grad, tolerance_change=tolerance_change,
                        history_size=history_size, line_search_fn=line_search_fn)  # fmt: skip
        super().__init__(params, defaults)

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        """Take the (only) parameter group; a second one is refused."""
        if self.param_groups:
            raise ValueError(
                "LBFGS: only one parameter group is supported (L-BFGS has no per-parameter "
                "options); put all the parameters in one group"
            )
        super().add_param_group(param_group)

    @property
    def _params(self) -> list[Tensor]:
        return self.param_groups[0]["params"]

    # -- the flat vector x ------------------------------------------------------------------
    def _flat_grad(self) -> Tensor:
        """Every parameter's gradient, flattened into one new vector (zeros where a
        parameter has none)."""
        pieces = [
            zeros(p.numel(), dtype=p.dtype, device=p.device)
            if p.grad is None
            else p.grad.detach().reshape(-1)
            for p in self._params
        ]
        return cat(pieces)

    def _move(self, t: float, d: Tensor) -> None:
        """x <- x + t d, parameter by parameter, in place."""
        offset = 0
        for p in self._params:
            n = p.numel()
            p.add_(d[offset : offset + n].view_as(p), alpha=t)
            offset += n

    def _evaluate(self, closure: Callable[[], Any]) -> tuple[Any, float, Tensor]:
        """Run the closure with grad enabled: its result, the loss as a float, the
        flat gradient."""
        with enable_grad():
            result = closure()
        return result, _loss_value(result), self._flat_grad()

    def _line_evaluator(self, closure: Callable[[], Any], d: Tensor) -> Callable[[float], _Trial]:
        """A function evaluating the loss and gradient at x + t d that leaves x as it was."""
        x = [clone(p) for p in self._params]

        def evaluate(t: float) -> _Trial:
            self._move(t, d)
            _, f, g = self._evaluate(closure)
            for p, saved in zip(self._params, x):
                p.copy_(saved)
            return _Trial(t, f, g, g.dot(d).item())

        return evaluate

    # -- the step ---------------------------------------------------------------------------
    def step(self, closure: Callable[[], Any]) -> Any:  # type: ignore[override]
        """Run up to ``max_iter`` L-BFGS iterations.

        Parameters
        ----------
        closure : callable
            Clears the gradients, computes the loss, calls ``backward`` and returns the loss
            (a one-element tensor or a number); called with grad enabled, several times.

        Returns
        -------
        Any
            The closure's result at the first evaluation (before any move).
        """
        if not callable(closure):
            raise TypeError(
                "LBFGS.step needs a closure that clears the gradients, computes the loss, "
                "calls backward() and returns the loss: optimizer.step(closure)"
            )
        group = self.param_groups[0]
        lr, max_iter, max_eval = group["lr"], group["max_iter"], group["max_eval"]
        tolerance_grad, tolerance_change = group["tolerance_grad"], group["tolerance_change"]
        history_size = group["history_size"]
        line_search = _check_line_search(group["line_search_fn"])
        state = self.state[self._params[0]]
        state.setdefault("func_evals", 0)
        state.setdefault("n_iter", 0)
        with no_grad():
            first, loss, flat_grad = self._evaluate(closure)
            evals = 1
            state["func_evals"] += 1
            if flat_grad.abs().max().item() <= tolerance_grad:
                return first
            d, t = state.get("d"), state.get("t")
            old_dirs, old_stps, ro = state.get("old_dirs"), state.get("old_stps"), state.get("ro")
            h_diag = state.get("H_diag")
            prev_flat_grad, prev_loss = state.get("prev_flat_grad"), state.get("prev_loss")
            for n_iter in range(1, max_iter + 1):
                state["n_iter"] += 1
                if state["n_iter"] == 1:
                    d = flat_grad.neg()
                    old_dirs, old_stps, ro, h_diag = [], [], [], 1.0
                else:
                    y = flat_grad.sub(prev_flat_grad)
                    s = d.mul(t)
                    ys = y.dot(s).item()
                    if ys > 1e-10:
                        if len(old_dirs) == history_size:
                            del old_dirs[0], old_stps[0], ro[0]
                        old_dirs.append(y)
                        old_stps.append(s)
                        ro.append(1.0 / ys)
                        h_diag = ys / y.dot(y).item()
                    al = state.setdefault("al", [None] * history_size)
                    d = _two_loop(flat_grad, old_dirs, old_stps, ro, h_diag, al)
                prev_flat_grad, prev_loss = flat_grad, loss
                if state["n_iter"] == 1:
                    t = min(1.0, 1.0 / flat_grad.abs().sum().item()) * lr
                else:
                    t = lr
                gtd = flat_grad.dot(d).item()
                if gtd > -tolerance_change:
                    break
                if line_search:
                    evaluate = self._line_evaluator(closure, d)
                    best, spent = _strong_wolfe(evaluate, d, t, loss, flat_grad, gtd,
                                                max_evals=max_eval - evals)  # fmt: skip
                    t, loss, flat_grad = best.t, best.f, best.g
                    self._move(t, d)
                else:
                    self._move(t, d)
                    spent = 0
                    if n_iter != max_iter:  # (the last move is not evaluated, as in PyTorch)
                        _, loss, flat_grad = self._evaluate(closure)
                        spent = 1
                evals += spent
                state["func_evals"] += spent
                if (
                    n_iter == max_iter
                    or evals >= max_eval
                    or flat_grad.abs().max().item() <= tolerance_grad
                    or d.mul(t).abs().max().item() <= tolerance_change
                    or abs(loss - prev_loss) < tolerance_change
                ):
                    break
            state.update(d=d, t=t, old_dirs=old_dirs, old_stps=old_stps, ro=ro, H_diag=h_diag,
                         prev_flat_grad=prev_flat_grad, prev_loss=prev_loss)  # fmt: skip
        return first

    # -- state dicts ------------------------------------------------------------------------
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Take the state of :meth:`state_dict`, pylucid's or PyTorch's: flat vectors are
        cast to the parameters' dtype and device (and copied), 0-d tensors become floats.
        Everything is checked before anything changes."""
        if not isinstance(state_dict, dict) or set(state_dict) < {"state", "param_groups"}:
            raise ValueError(f"LBFGS.load_state_dict: expected a dict with 'state' and "
                             f"'param_groups', got {type(state_dict).__name__}")  # fmt: skip
        saved_groups = state_dict["param_groups"]
        if len(saved_groups) != 1:
            raise ValueError(
                f"LBFGS.load_state_dict: the state dict has {len(saved_groups)} parameter "
                f"groups; LBFGS has one"
            )
        indices = saved_groups[0]["params"]
        if len(indices) != len(self._params):
            raise ValueError(
                f"LBFGS.load_state_dict: the state dict has {len(indices)} parameters, the "
                f"optimizer {len(self._params)}"
            )
        others = [key for key in state_dict["state"] if key != indices[0]]
        if others:
            raise ValueError(
                f"LBFGS.load_state_dict: state for parameters {others!r}; LBFGS keeps its "
                f"state under the first parameter ({indices[0]!r}) only"
            )
        saved = state_dict["state"].get(indices[0], {})
        loaded = {key: self._loaded_value(key, value) for key, value in saved.items()}
        super().load_state_dict({"state": {}, "param_groups": saved_groups})
        if loaded:
            self.state[self._params[0]] = loaded

    def _loaded_value(self, key: str, value: Any) -> Any:
        """One state entry, checked and converted to pylucid's form."""
        if key in _VECTORS:
            return self._loaded_vector(key, value)
        if key in _VECTOR_LISTS:
            return [self._loaded_vector(f"{key}[{i}]", v) for i, v in enumerate(value)]
        if key in _SCALARS:
            return _loaded_scalar(key, value)
        if key in _SCALAR_LISTS:
            return [None if v is None else _loaded_scalar(f"{key}[{i}]", v)
                    for i, v in enumerate(value)]  # fmt: skip
        if key in ("func_evals", "n_iter"):
            return int(value)
        if key == "prev_loss":
            return float(value)
        raise ValueError(f"LBFGS.load_state_dict: unknown state entry {key!r}")

    def _loaded_vector(self, key: str, value: Any) -> Tensor:
        first = self._params[0]
        numel = sum(p.numel() for p in self._params)
        if not isinstance(value, Tensor) or value.shape != (numel,):
            shape = value.shape if isinstance(value, Tensor) else type(value).__name__
            raise ValueError(
                f"LBFGS.load_state_dict: state {key!r} must be a flat tensor of the "
                f"parameters' {numel} elements, got {shape}"
            )
        value = value.detach()
        if value.device != first.device:
            value = value.to(first.device)
        if value.dtype is not first.dtype:
            value = value.to(first.dtype)
        return clone(value)


@dataclass(frozen=True)
class _Trial:
    """A point of the line search: step ``t``, loss ``f``, flat gradient ``g`` and the
    directional derivative ``gtd`` (g . d)."""

    t: float
    f: float
    g: Tensor
    gtd: float


def _check_line_search(name: str | None) -> bool:
    """Whether ``name`` asks for the strong-Wolfe search; anything but it or None raises."""
    if name not in (None, "strong_wolfe"):
        raise ValueError(f"LBFGS: line_search_fn must be None or 'strong_wolfe', got {name!r}")
    return name == "strong_wolfe"


def _loss_value(result: Any) -> float:
    """The closure's loss as a float; anything but one number is refused."""
    if isinstance(result, Tensor):
        if result.numel() != 1:
            raise ValueError(
                f"LBFGS.step: the closure must return the loss as one number; it returned a "
                f"tensor of shape {tuple(result.shape)}"
            )
        return result.item()
    if isinstance(result, (int, float, np.number)) and not isinstance(result, bool):
        return float(result)
    raise TypeError(
        f"LBFGS.step: the closure must return the loss (a one-element tensor or a number), "
        f"it returned {type(result).__name__}"
    )


def _loaded_scalar(key: str, value: Any) -> float:
    if isinstance(value, Tensor):
        if value.numel() != 1:
            raise ValueError(f"LBFGS.load_state_dict: state {key!r} must be a number, got a "
                             f"tensor of shape {value.shape}")  # fmt: skip
        return value.item()
    if isinstance(value, (int, float)):
        return float(value)
    raise ValueError(f"LBFGS.load_state_dict: state {key!r} must be a number, got "
                     f"{type(value).__name__}")  # fmt: skip


def _two_loop(
    g: Tensor, dirs: list[Tensor], steps: list[Tensor], rho: list[float], h_diag: float,
    alpha: list[float | None],
) -> Tensor:  # fmt: skip
    """The L-BFGS direction -H g by the two-loop recursion over the remembered pairs
    (``dirs``: the gradient changes y, ``steps``: the moves s); ``alpha`` receives the
    first loop's coefficients."""
    q = g.neg()
    for i in reversed(range(len(dirs))):
        alpha[i] = steps[i].dot(q).item() * rho[i]
        q.add_(dirs[i], alpha=-alpha[i])
    r = q.mul(h_diag)
    for i in range(len(dirs)):
        beta = dirs[i].dot(r).item() * rho[i]
        r.add_(steps[i], alpha=alpha[i] - beta)
    return r


def _cubic_minimum(a: _Trial, b: _Trial, bounds: tuple[float, float] | None = None) -> float:
    """The minimiser of the cubic matching two trials' losses and slopes (N&W eq. 3.59),
    clamped to ``bounds`` (default: between the two); the middle of the bounds when the
    cubic has no minimum.

    Evaluated in NumPy float64, whose division by zero gives inf or nan (then clamped) as
    PyTorch's 0-d tensors do, where a Python float would raise.
    """
    low, high = bounds if bounds is not None else (min(a.t, b.t), max(a.t, b.t))
    near, far = (a, b) if a.t <= b.t else (b, a)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        t1, f1, g1 = np.float64(near.t), np.float64(near.f), np.float64(near.gtd)
        t2, f2, g2 = np.float64(far.t), np.float64(far.f), np.float64(far.gtd)
        d1 = g1 + g2 - 3 * (f1 - f2) / (t1 - t2)
        square = d1 * d1 - g1 * g2
        if not square >= 0:
            return (low + high) / 2.0
        d2 = np.sqrt(square)
        minimum = float(t2 - (t2 - t1) * ((g2 + d2 - d1) / (g2 - g1 + 2 * d2)))
    return min(max(minimum, low), high)


def _strong_wolfe(
    evaluate: Callable[[float], _Trial], d: Tensor, t: float, f: float, g: Tensor,
    gtd: float, max_evals: int, c1: float = 1e-4, c2: float = 0.9,
    tolerance_change: float = 1e-9,
) -> tuple[_Trial, int]:  # fmt: skip
    """A step along ``d`` satisfying the strong Wolfe conditions (or the best found within
    ``max_evals`` further evaluations after the first): the chosen trial and the number of
    evaluations made. ``f``, ``g``, ``gtd`` describe the start (t = 0)."""
    start = _Trial(0.0, f, g, gtd)
    d_norm = d.abs().max().item()

    def too_high(trial: _Trial) -> bool:  # (the sufficient-decrease condition fails)
        return trial.f > f + c1 * trial.t * gtd

    def curvature(trial: _Trial) -> bool:
        return abs(trial.gtd) <= -c2 * gtd

    # bracketing: grow the step until an interval must contain an acceptable one
    previous, trial = start, evaluate(t)
    tries = 0  # (evaluations after the first)
    bracket: list[_Trial] | None = None
    done = False
    while tries < max_evals:
        if too_high(trial) or (tries > 1 and trial.f >= previous.f):
            bracket = [previous, trial]
            break
        if curvature(trial):
            bracket, done = [trial], True
            break
        if trial.gtd >= 0:
            bracket = [previous, trial]
            break
        bounds = (trial.t + 0.01 * (trial.t - previous.t), trial.t * 10)
        previous, trial = trial, evaluate(_cubic_minimum(previous, trial, bounds))
        tries += 1
    if bracket is None:  # the evaluations ran out while growing
        bracket = [start, trial]

    # zoom: shrink the bracket [low, high] around a point satisfying both conditions
    low, high = (0, 1) if bracket[0].f <= bracket[-1].f else (1, 0)
    stalled = False
    while not done and tries < max_evals:
        left, right = min(bracket[0].t, bracket[1].t), max(bracket[0].t, bracket[1].t)
        if (right - left) * d_norm < tolerance_change:
            break
        t = _cubic_minimum(bracket[0], bracket[1])
        margin = 0.1 * (right - left)
        if min(right - t, t - left) < margin:  # close to an end: progress may stall
            if stalled or t >= right or t <= left:
                t = right - margin if abs(t - right) < abs(t - left) else left + margin
                stalled = False
            else:
                stalled = True
        else:
            stalled = False
        trial = evaluate(t)
        tries += 1
        if too_high(trial) or trial.f >= bracket[low].f:
            bracket[high] = trial
            low, high = (0, 1) if bracket[0].f <= bracket[1].f else (1, 0)
        else:
            if curvature(trial):
                done = True
            elif trial.gtd * (bracket[high].t - bracket[low].t) >= 0:
                bracket[high] = bracket[low]
            bracket[low] = trial
    return bracket[low], tries + 1
