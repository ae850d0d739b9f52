"""pylucid.optim.lr_scheduler against torch.optim.lr_scheduler, the oracle.

Each schedule runs side by side in both libraries, on an optimizer with two param groups of
different rates, and the rates (and momentum or betas, where OneCycleLR cycles them) must
agree at every step, bit for bit, as must the final state dicts, key for key. Round
trips through state dicts, resuming with ``last_epoch``, the deprecated ``step(epoch)``,
the warnings and the error messages are checked too; those need no torch.
"""

from __future__ import annotations

import copy
import inspect
import math
import warnings
from collections.abc import Callable
from typing import Any

import pytest

import pylucid as pl
from pylucid.optim import SGD, Adam
from pylucid.optim import lr_scheduler as ours
from tests.conftest import TORCH_REASON

LRS = (0.1, 0.03)  # two param groups with different rates
STEPS = 300


@pytest.fixture(scope="module")
def torch() -> Any:
    return pytest.importorskip("torch", reason=TORCH_REASON)


def pylucid_optimizer(kind: str = "sgd", lrs: tuple[float, ...] = LRS) -> Any:
    groups = [{"params": [pl.zeros(1, requires_grad=True)], "lr": lr} for lr in lrs]
    if kind == "adam":
        return Adam(groups, lr=lrs[0], betas=(0.9, 0.999))
    return SGD(groups, lr=lrs[0], momentum=0.9)


def torch_optimizer(torch: Any, kind: str = "sgd", lrs: tuple[float, ...] = LRS) -> Any:
    groups = [{"params": [torch.zeros(1, requires_grad=True)], "lr": lr} for lr in lrs]
    if kind == "adam":
        return torch.optim.Adam(groups, lr=lrs[0], betas=(0.9, 0.999))
    return torch.optim.SGD(groups, lr=lrs[0], momentum=0.9)


def assert_same(ours_value: Any, torch_value: Any, where: str = "") -> None:
    """Equal structures, and equal floats: not to a tolerance, to the last bit.

    The schedules do PyTorch's floating operations in PyTorch's order, so even after
    hundreds of chained steps nothing may differ (the closed forms, mathematically equal,
    already differ in the last bits).
    """
    if isinstance(torch_value, dict):
        assert isinstance(ours_value, dict), where
        assert set(ours_value) == set(torch_value), f"{where}: keys differ"
        for key in torch_value:
            assert_same(ours_value[key], torch_value[key], f"{where}[{key!r}]")
    elif isinstance(torch_value, (list, tuple)):
        assert isinstance(ours_value, (list, tuple)), where
        assert len(ours_value) == len(torch_value), where
        for i, (a, b) in enumerate(zip(ours_value, torch_value)):
            assert_same(a, b, f"{where}[{i}]")
    else:
        assert type(ours_value) is type(torch_value), f"{where}: {ours_value!r}, {torch_value!r}"
        assert ours_value == torch_value, f"{where}: {ours_value!r} != {torch_value!r}"


def snapshot(scheduler: Any, optimizer: Any) -> dict[str, Any]:
    """What a step leaves behind: the scheduler's last rates and the groups' hyperparameters."""
    groups = [
        {key: group[key] for key in ("lr", "momentum", "betas") if key in group}
        for group in optimizer.param_groups
    ]
    return {"last_lr": scheduler.get_last_lr(), "groups": groups}


def run(
    scheduler: Any,
    optimizer: Any,
    steps: int,
    metrics: Callable[[int], float] | None = None,
) -> list[dict[str, Any]]:
    """Step the optimizer, then the scheduler, ``steps`` times; the snapshot after each."""
    out = [snapshot(scheduler, optimizer)]
    for i in range(steps):
        optimizer.step()
        if metrics is None:
            scheduler.step()
        else:
            scheduler.step(metrics(i))
        out.append(snapshot(scheduler, optimizer))
    return out


class Decay:
    """A callable object: LambdaLR saves its attributes in the state dict."""

    def __init__(self, rate: float) -> None:
        self.rate = rate

    def __call__(self, epoch: int) -> float:
        return self.rate**epoch


# (id, optimizer kind, build(module, optimizer) -> scheduler)
CASES: list[tuple[str, str, Callable[[Any, Any], Any]]] = [
    ("lambda", "sgd", lambda m, o: m.LambdaLR(o, lambda e: 0.97**e)),
    ("lambda-list", "sgd", lambda m, o: m.LambdaLR(o, [lambda e: 1 / (1 + e), Decay(0.99)])),
    ("multiplicative", "sgd", lambda m, o: m.MultiplicativeLR(o, lambda e: 1.01 if e % 3 else 0.9)),
    ("step", "sgd", lambda m, o: m.StepLR(o, step_size=7, gamma=0.5)),
    ("step-default", "sgd", lambda m, o: m.StepLR(o, 30)),
    ("multistep", "sgd", lambda m, o: m.MultiStepLR(o, [30, 80, 80, 200], gamma=0.5)),
    ("multistep-unsorted", "sgd", lambda m, o: m.MultiStepLR(o, [150, 20, 90])),
    ("constant", "sgd", lambda m, o: m.ConstantLR(o)),
    ("constant-long", "sgd", lambda m, o: m.ConstantLR(o, factor=0.5, total_iters=40)),
    ("linear", "sgd", lambda m, o: m.LinearLR(o)),
    ("linear-ramp", "sgd", lambda m, o: m.LinearLR(o, 0.1, 0.9, total_iters=100)),
    ("linear-to-zero", "sgd", lambda m, o: m.LinearLR(o, 1.0, 0.0, total_iters=250)),
    ("exponential", "sgd", lambda m, o: m.ExponentialLR(o, gamma=0.99)),
    ("cosine", "sgd", lambda m, o: m.CosineAnnealingLR(o, T_max=50, eta_min=1e-3)),
    ("cosine-full", "sgd", lambda m, o: m.CosineAnnealingLR(o, T_max=STEPS)),
    ("cosine-odd", "sgd", lambda m, o: m.CosineAnnealingLR(o, T_max=37)),
    ("polynomial", "sgd", lambda m, o: m.PolynomialLR(o, total_iters=100, power=2.0)),
    ("polynomial-default", "sgd", lambda m, o: m.PolynomialLR(o)),
    ("warm-restarts", "sgd", lambda m, o: m.CosineAnnealingWarmRestarts(o, 10, 2, 1e-4)),
    ("warm-restarts-fixed", "sgd", lambda m, o: m.CosineAnnealingWarmRestarts(o, T_0=7)),
    ("onecycle", "sgd", lambda m, o: m.OneCycleLR(o, max_lr=1.0, total_steps=STEPS)),
    (
        "onecycle-linear-adam",
        "adam",
        lambda m, o: m.OneCycleLR(
            o, [0.5, 0.2], epochs=30, steps_per_epoch=10, anneal_strategy="linear"
        ),
    ),
    (
        "onecycle-three-phase",
        "sgd",
        lambda m, o: m.OneCycleLR(
            o,
            0.4,
            total_steps=STEPS,
            pct_start=0.25,
            three_phase=True,
            div_factor=10.0,
            final_div_factor=100.0,
            base_momentum=[0.8, 0.7],
            max_momentum=(0.99, 0.9),
        ),
    ),
    (
        "onecycle-three-phase-adam",
        "adam",
        lambda m, o: m.OneCycleLR(o, 0.01, total_steps=STEPS, three_phase=True),
    ),
    (
        "onecycle-no-momentum",
        "sgd",
        lambda m, o: m.OneCycleLR(o, 0.3, total_steps=STEPS + 50, cycle_momentum=False),
    ),
    (
        "sequential",
        "sgd",
        lambda m, o: m.SequentialLR(
            o, [m.LinearLR(o, 0.01, total_iters=10), m.CosineAnnealingLR(o, T_max=90)], [10]
        ),
    ),
    (
        "sequential-three",
        "sgd",
        lambda m, o: m.SequentialLR(
            o,
            [m.ConstantLR(o, 0.1, 5), m.ExponentialLR(o, 0.98), m.StepLR(o, 20, 0.3)],
            milestones=[5, 60],
        ),
    ),
    (
        "sequential-no-closed-form",
        "sgd",
        lambda m, o: m.SequentialLR(
            o, [m.ExponentialLR(o, 0.9), m.LambdaLR(o, lambda e: 1 / (1 + e))], [40]
        ),
    ),
    (
        "chained",
        "sgd",
        lambda m, o: m.ChainedScheduler([m.ConstantLR(o, 0.1, 10), m.ExponentialLR(o, 0.99)]),
    ),
    (
        "chained-three",
        "sgd",
        lambda m, o: m.ChainedScheduler(
            [m.LinearLR(o, 0.2, total_iters=20), m.StepLR(o, 25), m.MultiStepLR(o, [100, 150])],
            optimizer=o,
        ),
    ),
    (
        "chained-cosine",
        "sgd",
        lambda m, o: m.ChainedScheduler(
            [m.CosineAnnealingLR(o, 40, 1e-4), m.MultiplicativeLR(o, lambda e: 0.999)]
        ),
    ),
]
CASE_IDS = [case[0] for case in CASES]


@pytest.mark.parametrize(("kind", "build"), [case[1:] for case in CASES], ids=CASE_IDS)
def test_trajectory_and_state_dict_match_torch(torch: Any, kind: str, build: Callable) -> None:
    t_opt = torch_optimizer(torch, kind)
    p_opt = pylucid_optimizer(kind)
    t_sched = build(torch.optim.lr_scheduler, t_opt)
    p_sched = build(ours, p_opt)
    assert_same(run(p_sched, p_opt, STEPS), run(t_sched, t_opt, STEPS))
    # The same state under the same names: checkpoints move between the two libraries.
    assert_same(p_sched.state_dict(), t_sched.state_dict())
    assert [g["initial_lr"] for g in p_opt.param_groups] == [
        g["initial_lr"] for g in t_opt.param_groups
    ]


def test_rates_move_in_the_schedule() -> None:
    # The trajectories compared above are not constant: e.g. StepLR halves every 7 epochs.
    p_opt = pylucid_optimizer()
    rates = [step["last_lr"] for step in run(ours.StepLR(p_opt, 7, 0.5), p_opt, 21)]
    assert rates[0] == list(LRS) and rates[6] == list(LRS)
    assert rates[7] == [0.05, 0.015] and rates[21] == [0.1 / 8, 0.03 / 8]


PLATEAU_METRICS: list[tuple[str, Callable[[int], float]]] = [
    ("noisy-decline", lambda i: 1.0 / (1 + 0.05 * i) + 0.1 * math.sin(i)),
    ("plateaus", lambda i: float(5 - min(i // 40, 4)) + 0.001 * (i % 3)),
    ("rising", lambda i: 0.5 + 0.01 * i - 0.2 * (i % 7 == 0)),
]
PLATEAU_SETTINGS: list[dict[str, Any]] = [
    {},
    {"patience": 3, "factor": 0.5},
    {"mode": "max", "threshold_mode": "abs", "threshold": 0.01, "patience": 2},
    {"mode": "max", "patience": 0, "cooldown": 5, "factor": 0.7, "min_lr": [0.01, 0.0]},
    {"patience": 1, "cooldown": 2, "threshold_mode": "abs", "min_lr": 0.002, "eps": 0.003},
]


@pytest.mark.parametrize(
    "settings", PLATEAU_SETTINGS, ids=lambda s: "-".join(sorted(s)) or "default"
)
@pytest.mark.parametrize(
    "metrics", [m for _, m in PLATEAU_METRICS], ids=[n for n, _ in PLATEAU_METRICS]
)
def test_reduce_on_plateau_matches_torch(
    torch: Any, settings: dict[str, Any], metrics: Callable[[int], float]
) -> None:
    t_opt, p_opt = torch_optimizer(torch), pylucid_optimizer()
    t_sched = torch.optim.lr_scheduler.ReduceLROnPlateau(t_opt, **settings)
    p_sched = ours.ReduceLROnPlateau(p_opt, **settings)
    assert_same(run(p_sched, p_opt, STEPS, metrics), run(t_sched, t_opt, STEPS, metrics))
    assert_same(p_sched.state_dict(), t_sched.state_dict())


def test_reduce_on_plateau_reduces_after_patience() -> None:
    opt = pylucid_optimizer()
    sched = ours.ReduceLROnPlateau(opt, patience=2, factor=0.5, cooldown=1)
    rates = [step["last_lr"][0] for step in run(sched, opt, 8, lambda i: 1.0)]
    # Epoch 1 sets the best; epochs 2-4 are bad, and the third bad one reduces; epoch 5 is
    # in cooldown; epochs 6-8 are bad again, and the third reduces once more.
    assert rates == [0.1, 0.1, 0.1, 0.1, 0.05, 0.05, 0.05, 0.05, 0.025]
    assert sched.num_bad_epochs == 0 and sched.in_cooldown and sched.best == 1.0


def test_reduce_on_plateau_takes_a_tensor_metric_and_new_groups() -> None:
    opt = pylucid_optimizer()
    sched = ours.ReduceLROnPlateau(opt, patience=0, min_lr=0.02)
    sched.step(pl.tensor(1.0))
    sched.step(pl.tensor([2.0]))  # float() of a one-element tensor
    assert sched.best == 1.0 and sched.get_last_lr() == [0.02, 0.02]
    opt.add_param_group({"params": [pl.zeros(1, requires_grad=True)], "lr": 0.5})
    sched.step(3.0)
    assert sched.get_last_lr() == [0.02, 0.02, 0.05]  # the new group gets the default min_lr

    listed = ours.ReduceLROnPlateau(pylucid_optimizer(), patience=0, min_lr=[0.0, 0.0])
    listed.optimizer.add_param_group({"params": [pl.zeros(1, requires_grad=True)], "lr": 0.5})
    listed.step(1.0)
    with pytest.raises(RuntimeError, match="ReduceLROnPlateau: the optimizer has 3 param groups"):
        listed.step(2.0)


# -- resuming, state dicts ------------------------------------------------------------------
# (id, optimizer kind, build(module, optimizer, last_epoch) -> scheduler)
RESUME_CASES: list[tuple[str, str, Callable[[Any, Any, int], Any]]] = [
    ("lambda", "sgd", lambda m, o, e: m.LambdaLR(o, lambda t: 0.97**t, last_epoch=e)),
    ("multiplicative", "sgd", lambda m, o, e: m.MultiplicativeLR(o, lambda t: 0.98, e)),
    ("step", "sgd", lambda m, o, e: m.StepLR(o, 7, 0.5, last_epoch=e)),
    ("multistep", "sgd", lambda m, o, e: m.MultiStepLR(o, [20, 40, 41, 70], last_epoch=e)),
    ("constant", "sgd", lambda m, o, e: m.ConstantLR(o, 0.5, 60, last_epoch=e)),
    ("linear", "sgd", lambda m, o, e: m.LinearLR(o, 0.1, 0.9, 70, last_epoch=e)),
    ("exponential", "sgd", lambda m, o, e: m.ExponentialLR(o, 0.97, last_epoch=e)),
    ("cosine", "sgd", lambda m, o, e: m.CosineAnnealingLR(o, 30, 1e-3, last_epoch=e)),
    ("polynomial", "sgd", lambda m, o, e: m.PolynomialLR(o, 80, 2.0, last_epoch=e)),
    ("warm-restarts", "sgd", lambda m, o, e: m.CosineAnnealingWarmRestarts(o, 10, 2, 0.0, e)),
    ("onecycle", "sgd", lambda m, o, e: m.OneCycleLR(o, 1.0, total_steps=120, last_epoch=e)),
    (
        "onecycle-adam",
        "adam",
        lambda m, o, e: m.OneCycleLR(o, 0.5, total_steps=120, three_phase=True, last_epoch=e),
    ),
]


@pytest.mark.parametrize(
    ("kind", "build"), [c[1:] for c in RESUME_CASES], ids=[c[0] for c in RESUME_CASES]
)
def test_resume_with_last_epoch_matches_torch(torch: Any, kind: str, build: Callable) -> None:
    """Run 40 steps, then build a second scheduler with ``last_epoch=40`` and go on."""

    def resumed(module: Any, optimizer: Any) -> list[dict[str, Any]]:
        run(build(module, optimizer, -1), optimizer, 40)
        return run(build(module, optimizer, 40), optimizer, 60)

    assert_same(
        resumed(ours, pylucid_optimizer(kind)),
        resumed(torch.optim.lr_scheduler, torch_optimizer(torch, kind)),
    )


def test_resume_without_initial_lr_is_a_key_error() -> None:
    with pytest.raises(KeyError, match=r"StepLR: param_groups\[0\] has no 'initial_lr'"):
        ours.StepLR(pylucid_optimizer(), 5, last_epoch=10)


@pytest.mark.parametrize(("kind", "build"), [case[1:] for case in CASES], ids=CASE_IDS)
def test_state_dict_round_trip(kind: str, build: Callable) -> None:
    """Save optimizer and scheduler mid-run, load both into fresh ones: the same run follows."""
    optimizer = pylucid_optimizer(kind)
    scheduler = build(ours, optimizer)
    run(scheduler, optimizer, 100)
    saved = copy.deepcopy((optimizer.state_dict(), scheduler.state_dict()))
    assert "optimizer" not in saved[1]
    expected = run(scheduler, optimizer, 200)

    fresh_optimizer = pylucid_optimizer(kind)
    fresh = build(ours, fresh_optimizer)  # built first: building it writes the rates
    fresh_optimizer.load_state_dict(saved[0])
    fresh.load_state_dict(saved[1])
    assert run(fresh, fresh_optimizer, 200) == expected


SCHEDULER_KEYS = {"lr", "momentum", "betas", "initial_lr", "max_lr", "min_lr"}
SCHEDULER_KEYS |= {"max_momentum", "base_momentum"}


@pytest.mark.parametrize(("kind", "build"), [case[1:] for case in CASES], ids=CASE_IDS)
def test_torch_state_dict_loads_and_continues(torch: Any, kind: str, build: Callable) -> None:
    t_opt = torch_optimizer(torch, kind)
    t_sched = build(torch.optim.lr_scheduler, t_opt)
    run(t_sched, t_opt, 100)
    p_opt = pylucid_optimizer(kind)
    p_sched = build(ours, p_opt)
    for mine, theirs in zip(p_opt.param_groups, t_opt.param_groups):
        mine.update({k: v for k, v in theirs.items() if k in SCHEDULER_KEYS})
    p_sched.load_state_dict(copy.deepcopy(t_sched.state_dict()))
    assert_same(run(p_sched, p_opt, 100), run(t_sched, t_opt, 100))


def test_lambda_state_dict_keeps_callable_objects_attributes(torch: Any) -> None:
    def build(module: Any, optimizer: Any, rate: float) -> Any:
        return module.LambdaLR(optimizer, [lambda e: 1.0, Decay(rate)])

    p_sched = build(ours, pylucid_optimizer(), 0.9)
    t_sched = build(torch.optim.lr_scheduler, torch_optimizer(torch), 0.9)
    state = p_sched.state_dict()
    assert state["lr_lambdas"] == [None, {"rate": 0.9}]
    assert_same(state, t_sched.state_dict())
    other = build(ours, pylucid_optimizer(), 0.5)
    other.load_state_dict(state)
    assert other.lr_lambdas[1].rate == 0.9 and state["lr_lambdas"] == [None, {"rate": 0.9}]


def test_plateau_state_dict_round_trip() -> None:
    def metrics(i: int) -> float:
        return float(i % 9)

    optimizer = pylucid_optimizer()
    scheduler = ours.ReduceLROnPlateau(optimizer, mode="max", patience=2, cooldown=1)
    run(scheduler, optimizer, 50, metrics)
    saved = copy.deepcopy((optimizer.state_dict(), scheduler.state_dict()))
    expected = run(scheduler, optimizer, 100, metrics)
    fresh_optimizer = pylucid_optimizer()
    fresh = ours.ReduceLROnPlateau(fresh_optimizer)
    fresh_optimizer.load_state_dict(saved[0])
    fresh.load_state_dict(saved[1])
    assert fresh.mode == "max" and fresh.mode_worse == -math.inf
    assert run(fresh, fresh_optimizer, 100, metrics) == expected


# -- the deprecated step(epoch) ---------------------------------------------------------------
EPOCH_CASES: list[tuple[str, Callable[[Any, Any], Any]]] = [
    ("step", lambda m, o: m.StepLR(o, 7, 0.5)),
    ("multistep", lambda m, o: m.MultiStepLR(o, [30, 5, 30])),
    ("constant", lambda m, o: m.ConstantLR(o, 0.25, 8)),
    ("linear", lambda m, o: m.LinearLR(o, 0.2, 0.7, 20)),
    ("exponential", lambda m, o: m.ExponentialLR(o, 0.95)),
    ("cosine", lambda m, o: m.CosineAnnealingLR(o, 25, 1e-3)),
    ("polynomial", lambda m, o: m.PolynomialLR(o, 40, 0.5)),
    ("lambda", lambda m, o: m.LambdaLR(o, lambda e: 1 / (1 + e))),  # no closed form: get_lr
]
EPOCHS = [1, 2, 5, 3, 10, 8, 31, 30, 50, 24, 25, 26, 100, 7]


@pytest.mark.parametrize("build", [c[1] for c in EPOCH_CASES], ids=[c[0] for c in EPOCH_CASES])
def test_step_with_epoch_warns_and_matches_torch(torch: Any, build: Callable) -> None:
    def trajectory(module: Any, optimizer: Any) -> list[dict[str, Any]]:
        scheduler = build(module, optimizer)
        out = []
        for epoch in EPOCHS:
            optimizer.step()
            with pytest.warns(UserWarning, match=r"The epoch parameter in `scheduler.step\(\)`"):
                scheduler.step(epoch)
            out.append(snapshot(scheduler, optimizer))
        return out

    assert_same(
        trajectory(ours, pylucid_optimizer()),
        trajectory(torch.optim.lr_scheduler, torch_optimizer(torch)),
    )


def test_warm_restarts_fractional_epochs_match_torch(torch: Any) -> None:
    def trajectory(module: Any, optimizer: Any) -> list[dict[str, Any]]:
        scheduler = module.CosineAnnealingWarmRestarts(optimizer, T_0=4, T_mult=3, eta_min=0.01)
        out = []
        for epoch in [0.5, 1.25, 3.0, 3.99, 4, 9.5, 15.9, 16.0, 40.2, 2, 7.75]:
            with warnings.catch_warnings():
                warnings.simplefilter("error")  # fractional epochs are its intended use
                scheduler.step(epoch)
            out.append((snapshot(scheduler, optimizer), scheduler.T_cur, scheduler.T_i))
        return out

    assert_same(
        trajectory(ours, pylucid_optimizer()),
        trajectory(torch.optim.lr_scheduler, torch_optimizer(torch)),
    )


def test_plateau_step_with_epoch_warns() -> None:
    scheduler = ours.ReduceLROnPlateau(pylucid_optimizer())
    with pytest.warns(UserWarning, match="The epoch parameter"):
        scheduler.step(1.0, epoch=7)
    assert scheduler.last_epoch == 7


# -- warnings ---------------------------------------------------------------------------------
def test_warns_when_the_scheduler_steps_before_the_optimizer() -> None:
    optimizer = pylucid_optimizer()
    scheduler = ours.ExponentialLR(optimizer, 0.5)
    message = r"Detected call of `lr_scheduler.step\(\)` before `optimizer.step\(\)`"
    with pytest.warns(UserWarning, match=message):
        scheduler.step()
    assert scheduler.get_last_lr() == [0.05, 0.015]


def test_no_warning_in_the_right_order() -> None:
    optimizer = pylucid_optimizer()
    first = ours.StepLR(optimizer, 2)
    wrapped = optimizer.step
    second = ours.ExponentialLR(optimizer, 0.5)
    assert optimizer.step is wrapped and wrapped._wrapped_by_lr_sched  # wrapped once
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for _ in range(3):
            assert optimizer.step(lambda: 3.0) == 3.0  # the wrapper returns the step's value
            first.step()
            second.step()
    # Both act on the same rates: StepLR's decay at epoch 2, and three halvings.
    assert second.get_last_lr() == pytest.approx([0.1 * 0.1 / 8, 0.03 * 0.1 / 8], rel=1e-12)
    assert first.get_last_lr() == pytest.approx([0.1 * 0.1 / 4, 0.03 * 0.1 / 4], rel=1e-12)


def test_warns_when_optimizer_step_is_replaced() -> None:
    optimizer = pylucid_optimizer()
    scheduler = ours.StepLR(optimizer, 2)
    optimizer.step = lambda: None
    with pytest.warns(UserWarning, match="StepLR: optimizer.step was replaced"):
        scheduler.step()


def test_get_lr_outside_step_warns() -> None:
    scheduler = ours.ExponentialLR(pylucid_optimizer(), 0.5)
    with pytest.warns(UserWarning, match="use get_last_lr"):
        assert scheduler.get_lr() == [0.05, 0.015]  # the next rates, not the current ones
    assert scheduler.get_last_lr() == list(LRS)


@pytest.mark.parametrize(
    ("kind", "build"), [c[1:] for c in RESUME_CASES], ids=[c[0] for c in RESUME_CASES]
)
def test_get_lr_by_hand_matches_torch(torch: Any, kind: str, build: Callable) -> None:
    """get_lr() outside step, on a fresh and on a just-resumed scheduler, gives torch's values."""

    def by_hand(module: Any, optimizer: Any) -> list[Any]:
        fresh = build(module, optimizer, -1)
        run(fresh, optimizer, 40)
        resumed = build(module, optimizer, 40)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            values = [fresh.get_lr(), resumed.get_lr()]
        assert len(caught) == 2 and all("get_last_lr()" in str(w.message) for w in caught)
        return values

    assert_same(
        by_hand(ours, pylucid_optimizer(kind)),
        by_hand(torch.optim.lr_scheduler, torch_optimizer(torch, kind)),
    )


# -- errors -----------------------------------------------------------------------------------
NOT_AN_OPTIMIZER: list[tuple[str, Callable[[Any], Any]]] = [
    ("LambdaLR", lambda o: ours.LambdaLR(o, lambda e: 1.0)),
    ("MultiplicativeLR", lambda o: ours.MultiplicativeLR(o, lambda e: 1.0)),
    ("StepLR", lambda o: ours.StepLR(o, 3)),
    ("MultiStepLR", lambda o: ours.MultiStepLR(o, [3])),
    ("ConstantLR", lambda o: ours.ConstantLR(o)),
    ("LinearLR", lambda o: ours.LinearLR(o)),
    ("ExponentialLR", lambda o: ours.ExponentialLR(o, 0.9)),
    ("CosineAnnealingLR", lambda o: ours.CosineAnnealingLR(o, 10)),
    ("PolynomialLR", lambda o: ours.PolynomialLR(o)),
    ("CosineAnnealingWarmRestarts", lambda o: ours.CosineAnnealingWarmRestarts(o, 10)),
    ("OneCycleLR", lambda o: ours.OneCycleLR(o, 0.1, total_steps=10)),
    ("ReduceLROnPlateau", lambda o: ours.ReduceLROnPlateau(o)),
    ("SequentialLR", lambda o: ours.SequentialLR(o, [], [])),
    ("ChainedScheduler", lambda o: ours.ChainedScheduler([], optimizer=o)),
]


@pytest.mark.parametrize(("name", "build"), NOT_AN_OPTIMIZER, ids=[c[0] for c in NOT_AN_OPTIMIZER])
@pytest.mark.parametrize("bad", [object(), [0.1], {"lr": 0.1}], ids=["object", "list", "dict"])
def test_not_an_optimizer_is_a_type_error(name: str, build: Callable, bad: Any) -> None:
    with pytest.raises(TypeError, match=rf"^{name}: optimizer must be an optimizer .* is not"):
        build(bad)


def _sequential(optimizer: Any, milestones: list[int]) -> Any:
    parts = [ours.ConstantLR(optimizer), ours.ExponentialLR(optimizer, 0.9)]
    return ours.SequentialLR(optimizer, parts + [ours.StepLR(optimizer, 3)], milestones)


ERRORS: list[tuple[str, Callable[[Any], Any], type[Exception], str]] = [
    (
        "onecycle-no-length",
        lambda o: ours.OneCycleLR(o, 0.1, epochs=3),
        ValueError,
        "OneCycleLR: give total_steps, or both epochs and steps_per_epoch",
    ),
    (
        "onecycle-total-steps",
        lambda o: ours.OneCycleLR(o, 0.1, total_steps=0),
        ValueError,
        "OneCycleLR: total_steps must be a positive int; got 0",
    ),
    (
        "onecycle-epochs",
        lambda o: ours.OneCycleLR(o, 0.1, epochs=2.5, steps_per_epoch=3),
        ValueError,
        "OneCycleLR: epochs must be a positive int; got 2.5",
    ),
    (
        "onecycle-pct-start",
        lambda o: ours.OneCycleLR(o, 0.1, total_steps=9, pct_start=1.5),
        ValueError,
        r"OneCycleLR: pct_start must be a number in \[0, 1\]; got 1.5",
    ),
    (
        "onecycle-anneal",
        lambda o: ours.OneCycleLR(o, 0.1, total_steps=9, anneal_strategy="exp"),
        ValueError,
        "OneCycleLR: anneal_strategy must be 'cos' or 'linear'; got 'exp'",
    ),
    (
        "onecycle-max-lr-count",
        lambda o: ours.OneCycleLR(o, [0.1, 0.2, 0.3], total_steps=9),
        ValueError,
        "OneCycleLR: max_lr needs one value per param group: the optimizer has 2 param groups",
    ),
    (
        "onecycle-momentum-count",
        lambda o: ours.OneCycleLR(o, 0.1, total_steps=9, base_momentum=[0.8]),
        ValueError,
        "OneCycleLR: base_momentum needs one value per param group",
    ),
    (
        "sequential-unsorted",
        lambda o: _sequential(o, [20, 10]),
        ValueError,
        r"SequentialLR: milestones must be in increasing order; got \[20, 10\]",
    ),
    (
        "sequential-count",
        lambda o: _sequential(o, [10]),
        ValueError,
        "SequentialLR: milestones must hold one fewer entry than schedulers; got 3 schedulers",
    ),
    (
        "sequential-empty",
        lambda o: ours.SequentialLR(o, [], []),
        ValueError,
        "SequentialLR: schedulers must hold at least one scheduler",
    ),
    (
        "sequential-plateau",
        lambda o: ours.SequentialLR(o, [ours.StepLR(o, 2), ours.ReduceLROnPlateau(o)], [5]),
        ValueError,
        "SequentialLR: schedulers\\[1\\] is a ReduceLROnPlateau",
    ),
    (
        "sequential-other-optimizer",
        lambda o: ours.SequentialLR(o, [ours.StepLR(pylucid_optimizer(), 2)], []),
        ValueError,
        r"SequentialLR: every scheduler must drive the same optimizer; schedulers\[0\] \(StepLR",
    ),
    (
        "sequential-not-a-scheduler",
        lambda o: ours.SequentialLR(o, [ours.StepLR(o, 2), 3], [4]),
        TypeError,
        r"SequentialLR: schedulers\[1\] must be a scheduler .*; got int",
    ),
    (
        "chained-empty",
        lambda o: ours.ChainedScheduler([]),
        ValueError,
        "ChainedScheduler: schedulers must hold at least one scheduler",
    ),
    (
        "chained-plateau",
        lambda o: ours.ChainedScheduler([ours.ReduceLROnPlateau(o)]),
        ValueError,
        r"ChainedScheduler: schedulers\[0\] is a ReduceLROnPlateau",
    ),
    (
        "step-size",
        lambda o: ours.StepLR(o, 0),
        ValueError,
        "StepLR: step_size must be a positive period; got 0",
    ),
    (
        "cosine-t-max",
        lambda o: ours.CosineAnnealingLR(o, 0),
        ValueError,
        "CosineAnnealingLR: T_max must be a positive period; got 0",
    ),
    (
        "constant-factor",
        lambda o: ours.ConstantLR(o, factor=2.0),
        ValueError,
        "ConstantLR: factor must be between 0 and 1; got 2.0",
    ),
    (
        "linear-start",
        lambda o: ours.LinearLR(o, start_factor=0.0),
        ValueError,
        "LinearLR: start_factor must be greater than 0 and at most 1; got 0.0",
    ),
    (
        "linear-end",
        lambda o: ours.LinearLR(o, end_factor=1.5),
        ValueError,
        "LinearLR: end_factor must be between 0 and 1; got 1.5",
    ),
    (
        "restarts-t0",
        lambda o: ours.CosineAnnealingWarmRestarts(o, T_0=1.5),
        ValueError,
        "CosineAnnealingWarmRestarts: T_0 must be a positive int; got 1.5",
    ),
    (
        "restarts-t-mult",
        lambda o: ours.CosineAnnealingWarmRestarts(o, 5, T_mult=0),
        ValueError,
        "CosineAnnealingWarmRestarts: T_mult must be an int of at least 1; got 0",
    ),
    (
        "restarts-eta-min",
        lambda o: ours.CosineAnnealingWarmRestarts(o, 5, eta_min="0"),
        ValueError,
        "CosineAnnealingWarmRestarts: eta_min must be a float or an int; got str",
    ),
    (
        "restarts-negative-epoch",
        lambda o: ours.CosineAnnealingWarmRestarts(o, 5).step(-1),
        ValueError,
        "CosineAnnealingWarmRestarts: epoch must be non-negative; got -1",
    ),
    (
        "plateau-factor",
        lambda o: ours.ReduceLROnPlateau(o, factor=1.0),
        ValueError,
        "ReduceLROnPlateau: factor must be < 1.0; got 1.0",
    ),
    (
        "plateau-mode",
        lambda o: ours.ReduceLROnPlateau(o, mode="avg"),
        ValueError,
        "ReduceLROnPlateau: mode must be 'min' or 'max'; got 'avg'",
    ),
    (
        "plateau-threshold-mode",
        lambda o: ours.ReduceLROnPlateau(o, threshold_mode="log"),
        ValueError,
        "ReduceLROnPlateau: threshold_mode must be 'rel' or 'abs'; got 'log'",
    ),
    (
        "plateau-min-lr-count",
        lambda o: ours.ReduceLROnPlateau(o, min_lr=[0.0]),
        ValueError,
        "ReduceLROnPlateau: min_lr needs one value per param group: the optimizer has 2",
    ),
    (
        "lambda-count",
        lambda o: ours.LambdaLR(o, [lambda e: 1.0]),
        ValueError,
        "LambdaLR: lr_lambda needs one value per param group: the optimizer has 2 param groups",
    ),
    (
        "lambda-not-callable",
        lambda o: ours.MultiplicativeLR(o, [lambda e: 1.0, 0.5]),
        TypeError,
        "MultiplicativeLR: lr_lambda must be a function of the epoch .*; entry 1 is a float",
    ),
    (
        "get-lr-count",
        lambda o: _returning(o, [0.1]),
        ValueError,
        "Broken: the schedule gave 1 learning rates for 2 param groups",
    ),
]


class Broken(ours.LRScheduler):
    def get_lr(self) -> list[float]:
        return self.returned


def _returning(optimizer: Any, returned: list[float]) -> Any:
    Broken.returned = returned
    return Broken(optimizer)


@pytest.mark.parametrize(
    ("build", "error", "match"), [c[1:] for c in ERRORS], ids=[c[0] for c in ERRORS]
)
def test_bad_arguments_are_clear_errors(build: Callable, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        build(pylucid_optimizer())


def test_onecycle_past_total_steps_is_torch_s_value_error() -> None:
    optimizer = pylucid_optimizer()
    scheduler = ours.OneCycleLR(optimizer, 0.1, total_steps=10)
    run(scheduler, optimizer, 10)  # total_steps steps after construction are allowed
    assert scheduler.last_epoch == 10
    with pytest.raises(
        ValueError, match="Tried to step 11 times. The specified number of total steps is 10"
    ):
        scheduler.step()


def test_onecycle_needs_momentum_to_cycle_it() -> None:
    class Plain:
        """An optimizer with no momentum: only lr in its groups and defaults."""

        def __init__(self) -> None:
            self.param_groups = [{"params": [], "lr": 0.1}]
            self.defaults = {"lr": 0.1}

        def step(self) -> None:
            pass

    with pytest.raises(ValueError, match="OneCycleLR: cycle_momentum=True needs an optimizer"):
        ours.OneCycleLR(Plain(), 0.1, total_steps=10)
    optimizer = Plain()
    scheduler = ours.OneCycleLR(optimizer, 1.0, total_steps=10, cycle_momentum=False)
    assert scheduler.get_last_lr() == [pytest.approx(1.0 / 25, rel=1e-12)]
    assert "momentum" not in optimizer.param_groups[0]


# -- the API ----------------------------------------------------------------------------------
def test_public_names_match_torch(torch: Any) -> None:
    assert set(ours.__all__) == set(torch.optim.lr_scheduler.__all__) - {"CyclicLR"}
    assert issubclass(ours._LRScheduler, ours.LRScheduler)
    assert ours._LRScheduler.__name__ == "_LRScheduler"
    for name in ours.__all__:
        assert issubclass(getattr(ours, name), ours.LRScheduler) == issubclass(
            getattr(torch.optim.lr_scheduler, name), torch.optim.lr_scheduler.LRScheduler
        ), name


def _parameters(function: Callable) -> list[tuple[str, Any, Any]]:
    return [(p.name, p.kind, p.default) for p in inspect.signature(function).parameters.values()]


@pytest.mark.parametrize("name", ours.__all__)
def test_signatures_match_torch(torch: Any, name: str) -> None:
    mine, theirs = getattr(ours, name), getattr(torch.optim.lr_scheduler, name)
    for method in ("__init__", "step", "get_lr", "get_last_lr", "state_dict", "load_state_dict"):
        assert _parameters(getattr(mine, method)) == _parameters(getattr(theirs, method)), method
    assert hasattr(mine, "recursive_undo") == hasattr(theirs, "recursive_undo")


def test_a_user_subclass_behaves_as_in_torch(torch: Any) -> None:
    def halving(base: type) -> type:
        class Halving(base):
            def get_lr(self) -> list[float]:
                lrs = [group["lr"] for group in self.optimizer.param_groups]
                return lrs if self.last_epoch == 0 else [lr * 0.5 for lr in lrs]

        return Halving

    mine = halving(ours._LRScheduler)(pylucid_optimizer())
    theirs = halving(torch.optim.lr_scheduler._LRScheduler)(torch_optimizer(torch))
    assert_same(run(mine, mine.optimizer, 12), run(theirs, theirs.optimizer, 12))
    assert mine.get_last_lr() == pytest.approx([0.1 / 4096, 0.03 / 4096])


def test_any_object_with_param_groups_is_an_optimizer() -> None:
    class Minimal:
        def __init__(self) -> None:
            self.param_groups = [{"lr": 1.0}, {"lr": 2.0}]

        def step(self) -> None:
            pass

    optimizer = Minimal()
    scheduler = ours.MultiStepLR(optimizer, [2, 4], gamma=0.5)
    assert [step["last_lr"] for step in run(scheduler, optimizer, 5)][1:] == [
        [1.0, 2.0],
        [0.5, 1.0],
        [0.5, 1.0],
        [0.25, 0.5],
        [0.25, 0.5],
    ]
    assert optimizer.param_groups[0]["initial_lr"] == 1.0
