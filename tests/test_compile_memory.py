"""pl.compile's arenas reuse memory by liveness (issue 32) without changing a bit.

A replay's values live in one arena per dtype; a value's place is free for another once the
last step that uses it (or a view of it) has run, except for the values that escape the
replay (its outputs, the gradients it leaves), which keep places of their own. The tests
check that the arenas are far smaller than the values they hold, that no two values whose
lifetimes meet share memory, that escaping values keep eager's bits and that training
steps replay eager's bits.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import pylucid as pl
import pylucid.nn.functional as F  # noqa: N812  (PyTorch's spelling)
from pylucid import memory, nn
from pylucid.bench import models
from pylucid.compiler import api
from pylucid.compiler import plan as planning

MODES = ["tape", "fused"]


@pytest.fixture(autouse=True)
def _compile_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("PYLUCID_COMPILE_CACHE", str(tmp_path_factory.getbasetemp() / "compile"))


@pytest.fixture
def plans(monkeypatch: pytest.MonkeyPatch) -> list[planning.Plan]:
    """The plans pl.compile makes during the test, in order."""
    made: list[planning.Plan] = []

    def noted(trace, fuse=True):
        made.append(planning.plan(trace, fuse))
        return made[-1]

    monkeypatch.setattr(api, "plan", noted)
    return made


def _arena_bytes(p: planning.Plan) -> int:
    return sum(size * dtype.itemsize for dtype, size in p.arena_sizes.items())


def _stored_bytes(p: planning.Plan) -> int:
    """What the arenas would hold with a place of its own for every value (aligned)."""
    return sum(planning._place_size(p.array(v)) * p.array(v).dtype.itemsize for v in p.stored)


def _assert_places_apart(p: planning.Plan) -> None:
    """No two values whose lifetimes meet share memory; every place is aligned."""
    lifetimes = planning._lifetimes(p)
    spans = []
    for index, (dtype, offset, shape, _) in p.places.items():
        assert offset * dtype.itemsize % planning.ALIGNMENT == 0
        spans.append((dtype, offset, offset + max(1, math.prod(shape)), lifetimes[index], index))
    for i, (dtype, start, end, (first, last), index) in enumerate(spans):
        for other_dtype, other_start, other_end, (other_first, other_last), other in spans[i + 1 :]:
            shared = dtype == other_dtype and start < other_end and other_start < end
            meet = first <= other_last and other_first <= last
            assert not (shared and meet), f"values {index} and {other} overlap while both live"


def _chain_of_products(size: int, steps: int, scale: float):
    """A step of ``steps`` products by one ``size x size`` float32 weight (of standard
    deviation ``scale``), each scaled by 0.5, summed; and its input."""
    weight, start = (np.random.default_rng(seed).standard_normal((size, size)) for seed in (0, 1))
    w = pl.tensor(weight * scale, dtype=pl.float32)

    def chain(x):
        for _ in range(steps):
            x = (x @ w) * 0.5
        return x.sum()

    return chain, pl.tensor(start, dtype=pl.float32)


@pytest.mark.parametrize("mode", MODES)
def test_a_long_chain_reuses_its_temporaries_places(plans, mode):
    """Thirty products, each scaled (the products keep fused loops apart): 62 values of
    16 KiB, of which a replay needs about three at a time. Each value with a place of its
    own (before issue 32) made the arena the sum of them all."""
    chain, x = _chain_of_products(64, 30, scale=0.2)
    compiled = pl.compile(chain, mode=mode)
    for _ in range(3):  # (fused code sums in float64: within a few ULP of eager's)
        got, want = compiled(x).numpy(), chain(x).numpy()
        np.testing.assert_allclose(got, want, rtol=0 if mode == "tape" else 1e-6)
    (p,) = plans
    value = 64 * 64 * 4
    assert _stored_bytes(p) > 55 * value
    assert _arena_bytes(p) <= 4 * value
    _assert_places_apart(p)


def test_a_capture_gives_its_values_memory_back():
    """A capture keeps every value of the step alive until the plan is made; their buffers
    (over 1 MiB: pooled, :mod:`pylucid.memory`) go back to the system after it, not to the
    pool, whose idle buffers a replay would never take (the GPT-small step: 994 MiB
    resident after its capture, 244 MiB after the release)."""
    chain, x = _chain_of_products(600, 8, scale=0.05)
    compiled = pl.compile(chain)
    compiled(x)
    assert compiled.stats.traces == 1
    assert memory.stats().idle_bytes == 0


def _deep_step(opt_name: str):
    """A six-layer MLP whose activations, weights and gradients are all 16 x 16 (so that
    every temporary fits any escaping value's place) returning its loss, its first hidden
    activation and its logits; ``zero_grad()`` inside, so that backward assigns the
    gradients the replay leaves (the trace's own arrays)."""
    pl.manual_seed(0)
    layers = [nn.Linear(16, 16) for _ in range(6)]
    params = [p for layer in layers for p in layer.parameters()]
    opt = pl.optim.SGD(params, lr=0.1, momentum=0.9) if opt_name == "sgd" else (
        pl.optim.AdamW(params, lr=1e-2))  # fmt: skip

    def step(x, y):
        opt.zero_grad()
        h = first = pl.tanh(layers[0](x))
        for layer in layers[1:]:
            h = pl.tanh(layer(h))
        loss = F.cross_entropy(h, y)
        loss.backward()
        opt.step()
        return loss, first, h

    return step, params


@pytest.mark.parametrize("opt_name", ["sgd", "adamw"])
def test_escaping_values_keep_eagers_bits(plans, opt_name):
    """The outputs (the loss, an activation of the first layer, the logits), the gradients
    the replay leaves and the parameters (the optimizer's state read by identity) are
    eager's after every call; the outputs of one call are unchanged by the next (copies)
    and the gradients a replay leaves are its own arrays, in places no other value has."""
    rng = np.random.default_rng(2)
    batches = [
        (pl.tensor(rng.standard_normal((16, 16)), dtype=pl.float32),
         pl.tensor(rng.integers(0, 16, 16)))
        for _ in range(6)
    ]  # fmt: skip
    seen = []
    for compiled in (False, True):
        step, params = _deep_step(opt_name)
        run = pl.compile(step, mode="tape") if compiled else step
        calls, held = [], []
        for x, y in batches:
            outputs = run(x, y)
            held.append((outputs, [o.numpy().copy() for o in outputs]))
            calls.append([o.numpy().copy() for o in outputs]
                         + [t.numpy().copy() for p in params for t in (p, p.grad)])  # fmt: skip
        for outputs, values in held:  # (a later call changed none of them)
            for output, value in zip(outputs, values):
                np.testing.assert_array_equal(output.numpy(), value)
        seen.append(calls)
    for call, (eager, replayed) in enumerate(zip(*seen)):
        for want, got in zip(eager, replayed):
            np.testing.assert_array_equal(got, want, err_msg=f"call {call}")
    assert run.stats.replays >= 4
    p = plans[-1]
    escaping = [v for v in p.escaping if v in p.places]
    assert len(escaping) >= len(params)  # (the weights' and biases' gradients)
    _assert_places_apart(p)
    lifetimes = planning._lifetimes(p)
    assert all(lifetimes[v][1] == planning._FOREVER for v in escaping)


def _bench_losses(name: str, compiled: bool, mode: str, calls: int):
    """The losses of ``calls`` steps of a benchmark model's tiny configuration (the same
    code as the benchmark's GPT and CNN steps), and its parameters after them."""
    cfg = models.MODELS[name].tiny
    state, _ = models.initial_state(cfg)
    x, y = models.batch_data(cfg)
    model = models.build_module(pl, cfg)
    model.load_state_dict({key: pl.from_numpy(value.copy()) for key, value in state.items()})
    step = models._train_step(pl, cfg, model, model)
    run = pl.compile(step, mode=mode) if compiled else step
    xt, yt = pl.from_numpy(x), pl.from_numpy(y)
    losses = [run(xt, yt).item() for _ in range(calls)]
    return losses, [p.numpy().copy() for p in model.parameters()], run


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", ["gpt_small", "cnn"])
def test_benchmark_steps_replay_eagers_bits_in_smaller_arenas(plans, name, mode):
    """The GPT step (AdamW, clip_grad_norm_) and the CNN step (convolutions and batch norm
    as host calls, SGD with momentum) of the benchmark, tiny: every replay gives eager's
    bits (the tape; fused code sums in float64: within 1e-5), and the arenas hold much less
    than the values they place."""
    eager, eager_params, _ = _bench_losses(name, False, mode, 6)
    compiled, compiled_params, run = _bench_losses(name, True, mode, 6)
    assert run.stats.replays == 4
    if mode == "tape":
        assert compiled == eager
        for got, want in zip(compiled_params, eager_params):
            np.testing.assert_array_equal(got, want)
    else:
        np.testing.assert_allclose(compiled, eager, rtol=1e-5)
    p = plans[-1]
    assert _arena_bytes(p) < 0.6 * _stored_bytes(p)
    _assert_places_apart(p)
