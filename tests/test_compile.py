"""pl.compile: compiled steps give eager's numbers; guards retrace; limits are refused.

Tolerances: elementwise loops are the eager kernels' scalar functions, rounded per op as
eager rounds, so they agree bit for bit; sums accumulate in float64 (eager: NumPy's pairwise
sum in the dtype) and a product may take another BLAS path, so a float32 step differs by a
few ULP of its terms - over 40 steps well within the issue's 1e-5 relative per step - and
a float64 one within 1e-12.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import pylucid as pl
import pylucid.nn.functional as F  # noqa: N812  (PyTorch's spelling)
from pylucid import nn
from pylucid.compiler import tape
from pylucid.compiler.program import Retrace
from tests.conftest import MLX_MISSING


@pytest.fixture(autouse=True)
def _compile_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch):
    """Generated modules in a directory of the test session (shared by its tests, so that
    a graph compiled by one test is a cache hit for the next)."""
    monkeypatch.setenv("PYLUCID_COMPILE_CACHE", str(tmp_path_factory.getbasetemp() / "compile"))


@pytest.fixture(autouse=True, params=["tape", "fused"])
def mode(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every test runs with each replay mode as pl.compile's default."""
    monkeypatch.setitem(pl.compile.__kwdefaults__, "mode", request.param)
    return request.param


def _model(dtype: pl.DType, seed: int = 0, dropout: float = 0.0) -> nn.Module:
    pl.manual_seed(seed)
    layers = [nn.Linear(12, 16), nn.Tanh()]
    if dropout:
        layers.append(nn.Dropout(dropout))
    layers.append(nn.Linear(16, 5))
    return nn.Sequential(*layers).to(dtype)


def _batches(dtype: pl.DType, steps: int, rows: int = 8, last_rows: int | None = None):
    rng = np.random.default_rng(1)
    out = []
    for i in range(steps):
        n = last_rows if (last_rows and i >= steps - 3) else rows
        x = pl.tensor(rng.standard_normal((n, 12)), dtype=dtype)
        y = pl.tensor(rng.integers(0, 5, n))
        out.append((x, y))
    return out


def _step(model: nn.Module, opt: pl.optim.Optimizer):
    def step(x: pl.Tensor, y: pl.Tensor) -> pl.Tensor:
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss

    return step


def _squares_step(model: nn.Module, opt: pl.optim.Optimizer, x: pl.Tensor):
    """A step without arguments: ``model(x)``'s sum of squares as the loss."""

    def step() -> pl.Tensor:
        opt.zero_grad()
        loss = model(x).pow(2).sum()
        loss.backward()
        opt.step()
        return loss

    return step


def _trajectories(dtype, make_opt, steps=40, dropout=0.0, last_rows=None):
    batches = _batches(dtype, steps, last_rows=last_rows)
    runs = []
    for compiled in (False, True):
        model = _model(dtype, dropout=dropout)
        opt = make_opt(model.parameters())
        step = _step(model, opt)
        if compiled:
            step = pl.compile(step)
        pl.manual_seed(7)
        losses = [step(x, y).item() for x, y in batches]
        runs.append((np.array(losses), [p.numpy().copy() for p in model.parameters()], step))
    return runs


def _sgd(params):
    return pl.optim.SGD(params, lr=0.1, momentum=0.9)


@pytest.mark.parametrize(("dtype", "rtol"), [(pl.float32, 1e-5), (pl.float64, 1e-12)])
def test_sgd_momentum_trajectory_matches_eager(dtype, rtol):
    (eager, eager_params, _), (compiled, compiled_params, step) = _trajectories(
        dtype, _sgd, last_rows=5
    )
    np.testing.assert_allclose(compiled, eager, rtol=rtol)
    for a, b in zip(compiled_params, eager_params):
        np.testing.assert_allclose(a, b, rtol=rtol * 10, atol=rtol)
    # a warm-up capture (the momentum buffers are made), one trace per batch shape
    assert step.stats.warmups == 1 and step.stats.traces == 2
    assert step.stats.replays == 40 - 1 - 2


def test_adam_step_counts_advance_in_replays():
    def adam(params):
        return pl.optim.Adam(params, lr=0.01)

    (eager, _, _), (compiled, _, step) = _trajectories(pl.float64, adam, steps=12)
    np.testing.assert_allclose(compiled, eager, rtol=1e-12)
    assert step.stats.replays == 10


def test_dropout_draws_advance_with_the_seed():
    (eager, _, _), (compiled, _, step) = _trajectories(pl.float64, _sgd, steps=8, dropout=0.3)
    np.testing.assert_allclose(compiled, eager, rtol=1e-12)
    assert step.stats.replays == 6


def test_chain_forward_backward_matches_eager():
    def chain(y: pl.Tensor) -> pl.Tensor:
        z = y
        for _ in range(10):
            z = pl.log2(z * 3 + 2)
        z.sum().backward()
        return z

    compiled = pl.compile(chain)
    for value in (0.5, 1.5, 3.0):
        x = pl.tensor([value, 2 * value], requires_grad=True)
        eager_out = chain(x).numpy().copy()
        eager_grad = x.grad.numpy().copy()
        x.grad = None
        out = compiled(x)
        np.testing.assert_array_equal(out.numpy(), eager_out)
        np.testing.assert_array_equal(x.grad.numpy(), eager_grad)
        x.grad = None
    assert compiled.stats.traces == 1 and compiled.stats.replays == 2


@pytest.mark.parametrize("mode", ["tape", "fused"])
def test_numbers_dropped_from_the_lift_cache_stay_constants(monkeypatch, mode):
    # A long program fills the cache of lifted numbers, which is cleared at its size: a
    # number lifted before the capture may lose its last tensor during it. Its array is
    # still a constant of the trace (CI met this in the bench's compiled chain).
    from pylucid.ops import wrapping

    monkeypatch.setattr(wrapping, "NUMBER_CACHE_SIZE", 1)  # each new number clears the cache

    def chain(y: pl.Tensor) -> pl.Tensor:
        z = pl.log2(y * 2.25 + 3.5) * 2.25
        z.sum().backward()
        return z

    x = pl.tensor([0.5, 1.5], requires_grad=True)
    chain(x)  # (eager: 2.25 is in the cache as the capture starts, and dropped in it)
    want = x.grad.numpy().copy()
    compiled = pl.compile(chain, mode=mode)
    for _ in range(3):
        x.grad = None
        compiled(x)
        np.testing.assert_array_equal(x.grad.numpy(), want)
    assert compiled.stats.traces == 1 and compiled.stats.replays == 2


def test_scheduler_stepped_inside_the_function():
    batches = _batches(pl.float64, 10)
    results = []
    for compiled in (False, True):
        model = _model(pl.float64)
        opt = pl.optim.SGD(model.parameters(), lr=0.2, momentum=0.5)
        sched = pl.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
        inner = _step(model, opt)

        def step(x, y, inner=inner, sched=sched):
            loss = inner(x, y)
            sched.step()
            return loss

        run = pl.compile(step) if compiled else step
        results.append([run(x, y).item() for x, y in batches])
    np.testing.assert_allclose(results[1], results[0], rtol=1e-12)


def _linear_step():
    w = pl.randn(4, 3, requires_grad=True)

    def step(x):
        loss = (x @ w).tanh().sum()
        loss.backward()
        return loss

    return w, pl.compile(step)


@pytest.mark.parametrize(
    "change",
    ["shape", "dtype", "requires_grad", "grad_mode", "autocast", "parameter", "grads_kept"],
)
def test_each_guard_retraces(change):
    w, step = _linear_step()
    x = pl.randn(5, 4)
    step(x)
    w.grad = None
    step(x)
    w.grad = None
    assert step.stats.traces == 1 and step.stats.replays == 1
    if change == "shape":
        step(pl.randn(6, 4))
    elif change == "dtype":
        step(pl.randn(5, 4, dtype=pl.float64))
    elif change == "requires_grad":
        step(pl.randn(5, 4).requires_grad_())
    elif change == "grad_mode":
        with pl.no_grad(), pytest.raises(RuntimeError):
            step(x)  # (eager too: nothing to differentiate)
        return
    elif change == "autocast":  # a new trace, which refuses half precision (a limit)
        with pl.autocast(dtype=pl.bfloat16), pytest.raises(pl.CaptureError, match="bfloat16"):
            step(x)
        return
    elif change == "parameter":
        w.data = pl.randn(4, 3)
        step(x)
    else:  # the gradient of the last call kept: the eager step accumulates into it
        before = w.grad
        assert before is None
        step(x)
        kept = w.grad.numpy().copy()
        step(x)
        np.testing.assert_allclose(w.grad.numpy(), 2 * kept, rtol=1e-6)
        assert step.stats.traces == 2
        return
    assert step.stats.traces == 2


def test_eviction_keeps_the_newest_traces():
    w, _ = _linear_step()

    def step(x):
        loss = (x @ w).sum()
        loss.backward()
        return loss

    compiled = pl.compile(step, max_traces=2)
    for rows in (2, 3, 4, 2):
        w.grad = None
        compiled(pl.randn(rows, 4))
    assert compiled.stats.traces == 4 and compiled.stats.evictions == 2
    assert len(compiled.programs) == 2


def test_item_inside_raises_naming_the_line():
    w, _ = _linear_step()

    def step(x):
        loss = (x @ w).sum()
        if loss.item() > 0:  # data-dependent Python
            loss = loss * 2
        return loss

    with pytest.raises(pl.CaptureError, match=r"test_compile.py:\d+.*item"):
        pl.compile(step)(pl.randn(2, 4))


def test_fallback_eager_warns_once_and_gives_eager_results():
    def step(x):
        y = (x * 2).sum()
        return y * 2 if y.item() > 0 else y

    compiled = pl.compile(step, fallback="eager")
    x = pl.tensor([1.0, 2.0])
    with pytest.warns(RuntimeWarning, match="runs eagerly"):
        assert compiled(x).item() == 12.0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert compiled(-x).item() == -6.0
    assert compiled.stats.eager_calls == 1 and compiled.stats.traces == 0


def test_ignored_target_count_is_read_at_each_replay():
    """A mean cross-entropy divides by the targets that are not ignore_index: the count the
    replay's check finds (a batch with every target ignored too: nan, as eagerly). A count
    of 1 at capture (where a sum's divisor would be the same number) stays fixed: another
    count abandons the replay and captures again."""
    batches = [[1, 2, 3, 4], [1, 2, 3, 4], [1, -100, 3, 4], [-100] * 4, [0, -100, -100, 2],
               [-100, -100, -100, 2], [1, 2, 3, 4]]  # fmt: skip
    x = pl.tensor(np.linspace(-1, 1, 48).reshape(4, 12))
    losses = []
    for compiled in (False, True):
        model = _model(pl.float64)
        step = _step(model, pl.optim.SGD(model.parameters(), lr=0.1))
        run = pl.compile(step) if compiled else step
        losses.append([run(x, pl.tensor(targets)).item() for targets in batches])
    np.testing.assert_array_equal(losses[1], losses[0])
    assert np.isnan(losses[1][3])
    assert run.stats.traces == 1 and run.stats.replays == 6 and run.stats.retraces == 0
    model = _model(pl.float64)
    run = pl.compile(_step(model, pl.optim.SGD(model.parameters(), lr=0.1)))
    for targets in ([-100, -100, -100, 2], [-100, -100, -100, 2], [1, 2, -100, 4]):
        run(x, pl.tensor(targets))
    assert run.stats.replays == 1 and run.stats.retraces == 1 and run.stats.traces == 2


def test_bad_targets_still_raise():
    model = _model(pl.float64)
    opt = pl.optim.SGD(model.parameters(), lr=0.1)
    step = pl.compile(_step(model, opt))
    x = pl.randn(4, 12, dtype=pl.float64)
    for _ in range(3):
        step(x, pl.tensor([1, 2, 3, 4]))
    before = [p.numpy().copy() for p in model.parameters()]
    with pytest.raises((IndexError, ValueError), match="cross_entropy"):
        step(x, pl.tensor([1, 2, 3, 9]))
    for a, b in zip(model.parameters(), before):
        np.testing.assert_array_equal(a.numpy(), b)  # nothing half-updated


def test_outputs_are_copies():
    w, step = _linear_step()
    x = pl.randn(5, 4)
    first = step(x)
    w.grad = None
    second = step(x)
    w.grad = None
    value = second.item()
    step(pl.randn(5, 4))
    assert second.item() == value
    assert first.shape == second.shape == ()


def test_generated_module_is_cached_on_disk(tmp_path, monkeypatch, mode):
    """fused: one generated module per graph, found again for the same graph; tape: no
    module per graph, one loop kernel per variant, shared by another graph using it."""
    monkeypatch.setenv("PYLUCID_COMPILE_CACHE", str(tmp_path))
    monkeypatch.setattr(tape, "_KERNELS", {})  # (this process's loaded kernels forgotten)
    w, step = _linear_step()
    step(pl.randn(5, 4))
    steps, loops = list(tmp_path.glob("step_*.py")), sorted(tmp_path.glob("loop_*.py"))
    if mode == "fused":
        assert len(steps) == 1 and not loops
    else:
        assert not steps and loops and step.programs[0].rows > 0
    w2, step2 = _linear_step()  # the same graph again: the same files
    step2(pl.randn(5, 4))
    assert list(tmp_path.glob("step_*.py")) == steps
    assert sorted(tmp_path.glob("loop_*.py")) == loops
    if mode == "tape":  # another graph of the same kinds of loops: nothing new either
        w3 = pl.randn(3, 2, requires_grad=True)
        pl.compile(lambda x: (x @ w3).sum().backward())(pl.randn(7, 3))
        assert sorted(tmp_path.glob("loop_*.py")) == loops


def test_masks_broadcasts_and_strided_operands_match_eager():
    """Loops over bools (comparisons, where), integer casts, broadcast rows and
    transposed operands: the strided kernels and the byte-wide bools."""
    w = pl.randn(4, 3, requires_grad=True)
    bias = pl.randn(3, requires_grad=True)

    def step(x):
        h = x @ w + bias
        mask = h > 0
        y = pl.where(mask, h, h * 0.1) + mask.to(pl.float32) + (x.T[:3, :2].sum() * 0)
        z = (y * y.T.T).sum() + (h.T * 2.0).sum()
        z.backward()
        return y, mask, z

    x = pl.randn(5, 4)
    eager = [t.numpy().copy() for t in step(x)] + [w.grad.numpy().copy(), bias.grad.numpy().copy()]
    compiled = pl.compile(step)
    for _ in range(3):
        w.grad = bias.grad = None
        got = [t.numpy().copy() for t in compiled(x)]
    got += [w.grad.numpy(), bias.grad.numpy()]
    assert compiled.stats.replays == 2
    for a, b in zip(got, eager):
        np.testing.assert_array_equal(a, b)


def test_empty_batch_and_large_loops_match_eager():
    """A batch of no rows (loops over no elements); loops large enough for eager's threaded
    kernels (the tape runs those kernels, into its arrays)."""
    w = pl.randn(4, 3, requires_grad=True)

    def step(x):
        loss = (pl.tanh(x @ w * 1.5) + 1).sum()
        loss.backward()
        return loss

    for rows in (0, 30_000):
        x = pl.randn(rows, 4)
        expected = step(x).item(), w.grad.numpy().copy()
        compiled = pl.compile(step)
        for _ in range(3):
            w.grad = None
            got = compiled(x).item(), w.grad.numpy().copy()
        assert compiled.stats.replays == 2
        assert got[0] == pytest.approx(expected[0], rel=1e-6)
        np.testing.assert_allclose(got[1], expected[1], rtol=1e-5, atol=1e-6)
        w.grad = None


def test_tape_and_fused_give_the_same_bits():
    def chain(y):
        z = y
        for _ in range(6):
            z = pl.tanh(pl.exp(z * 0.5) - 1.25) / (z * z + 1)
        z.sum().backward()
        return z

    results = []
    for mode in ("tape", "fused"):
        x = pl.tensor(np.linspace(-2, 2, 37), dtype=pl.float32, requires_grad=True)
        compiled = pl.compile(chain, mode=mode)
        for _ in range(3):
            x.grad = None
            out = compiled(x)
        results.append((out.numpy().copy(), x.grad.numpy().copy()))
    np.testing.assert_array_equal(results[0][0], results[1][0])
    np.testing.assert_array_equal(results[0][1], results[1][1])


def test_bad_arguments():
    with pytest.raises(ValueError, match="fallback"):
        pl.compile(lambda: None, fallback="maybe")
    with pytest.raises(ValueError, match="max_traces"):
        pl.compile(lambda: None, max_traces=0)
    with pytest.raises(ValueError, match="mode must be 'tape' or 'fused'"):
        pl.compile(lambda: None, mode="fast")


def test_training_flag_retraces():
    model = _model(pl.float64, dropout=0.5)
    opt = pl.optim.SGD(model.parameters(), lr=0.1)
    step = pl.compile(_step(model, opt))
    x, y = pl.randn(4, 12, dtype=pl.float64), pl.tensor([0, 1, 2, 3])
    for _ in range(3):
        step(x, y)
    traces = step.stats.traces
    model.eval()
    step(x, y)
    assert step.stats.traces == traces + 1


def test_compiled_trajectory_matches_torch():
    torch = pytest.importorskip("torch", reason="PyTorch is the oracle (pip install torch)")
    batches = _batches(pl.float64, 30)
    model = _model(pl.float64)
    reference = torch.nn.Sequential(
        torch.nn.Linear(12, 16), torch.nn.Tanh(), torch.nn.Linear(16, 5)
    ).double()
    with torch.no_grad():
        for p, q in zip(model.parameters(), reference.parameters()):
            q.copy_(torch.from_numpy(p.numpy().copy()))
    step = pl.compile(_step(model, pl.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)))
    opt = torch.optim.SGD(reference.parameters(), lr=0.1, momentum=0.9)
    for x, y in batches:
        loss = step(x, y).item()
        opt.zero_grad()
        expected = torch.nn.functional.cross_entropy(
            reference(torch.from_numpy(x.numpy())), torch.from_numpy(y.numpy())
        )
        expected.backward()
        opt.step()
        assert loss == pytest.approx(expected.item(), rel=1e-12)
    for p, q in zip(model.parameters(), reference.parameters()):
        np.testing.assert_allclose(p.numpy(), q.detach().numpy(), rtol=1e-11, atol=1e-13)


def test_training_script_step_matches_eager():
    """LayerNorm (its backend call returns the statistics too), dropout, clipping, AdamW
    and a cosine schedule stepped inside: float32, the same losses as eager."""
    batches = _batches(pl.float32, 12)
    runs = []
    for compiled in (False, True):
        pl.manual_seed(0)
        model = nn.Sequential(nn.Linear(12, 16), nn.LayerNorm(16), nn.Tanh(), nn.Dropout(0.1),
                              nn.Linear(16, 5))  # fmt: skip
        opt = pl.optim.AdamW(model.parameters(), lr=3e-3)
        sched = pl.optim.lr_scheduler.CosineAnnealingLR(opt, 20)

        def step(x, y, model=model, opt=opt, sched=sched):
            opt.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 0.5)
            opt.step()
            sched.step()
            return loss

        run = pl.compile(step) if compiled else step
        pl.manual_seed(3)
        runs.append(np.array([run(x, y).item() for x, y in batches]))
    np.testing.assert_allclose(runs[1], runs[0], rtol=1e-5)
    assert run.stats.replays == 10


def test_tensor_made_from_python_data_inside_is_refused():
    w, _ = _linear_step()

    def step(x):
        mask = pl.tensor([1.0, 0.0, 1.0])  # Python data: a constant a replay would keep
        return ((x @ w) * mask).sum()

    with pytest.raises(pl.CaptureError, match="Python data"):
        pl.compile(step)(pl.randn(2, 4))


def test_array_made_outside_the_backend_is_refused():
    """An array no recorded primitive made and no tensor holds after the step (here made
    through the private Tensor._make) would be a stale constant of the trace."""
    backend = pl.randn(1)._backend

    def step(x):
        ones = pl.Tensor._make(np.ones(3, np.float32), backend, pl.float32)
        return (x * ones).sum()  # (no graph keeps the tensor alive after the step)

    with pytest.raises(pl.CaptureError, match="no recorded primitive made"):
        pl.compile(step)(pl.randn(2, 3))


def test_index_lists_are_constants_index_tensors_are_inputs():
    w = pl.randn(5, 3, requires_grad=True)

    def step(x):
        loss = (x @ w)[[3, 0, 3], ::-1].sum()
        loss.backward()
        return loss

    def pick(x, rows):  # one index tensor along one dimension: the embedding op
        loss = ((x @ w)[rows] ** 2).sum()
        loss.backward()
        return loss

    for function, rows in ((step, None), (pick, [3, 0, 3]), (pick, [1, -1, 2])):
        compiled = pl.compile(function)
        for call in range(3):
            x = pl.randn(4, 5)
            args = (x,) if rows is None else (x, pl.tensor([(r + call) % 4 for r in rows]))
            w.grad = None
            got = compiled(*args).item(), w.grad.numpy().copy()
            w.grad = None
            expected = function(*args).item(), w.grad.numpy().copy()
            assert got[0] == pytest.approx(expected[0], rel=1e-6)
            np.testing.assert_allclose(got[1], expected[1], rtol=1e-6)
        assert compiled.stats.traces == 1 and compiled.stats.replays == 2
    before = w.numpy().copy()
    with pytest.raises(IndexError, match="getitem: index 7 is out of range for dimension 0 "):
        compiled(pl.randn(4, 5), pl.tensor([0, 7]))
    np.testing.assert_array_equal(w.numpy(), before)
    rows = pl.tensor([3, 0])
    with pytest.raises(pl.CaptureError, match="reads a tensor's values"):
        pl.compile(lambda x: x[rows, rows].sum())(pl.randn(4, 5))


def test_edited_kernels_get_new_generated_modules(tmp_path, monkeypatch, mode):
    """Generated modules carry a fingerprint of pylucid's kernel sources: after an edit or
    an upgrade the same graph writes new modules, not reusing Numba's cache of old code."""
    from pylucid.compiler import codegen

    monkeypatch.setenv("PYLUCID_COMPILE_CACHE", str(tmp_path))
    monkeypatch.setattr(tape, "_KERNELS", {})
    _, step = _linear_step()
    step(pl.randn(5, 4))
    before = set(tmp_path.glob("*.py"))
    assert before and all(codegen.kernels_fingerprint() in p.read_text() for p in before)
    monkeypatch.setattr(codegen, "kernels_fingerprint", lambda: "edited-kernels")
    monkeypatch.setattr(tape, "_KERNELS", {})
    _, step = _linear_step()
    step(pl.randn(5, 4))
    after = set(tmp_path.glob("*.py")) - before
    assert after and all("edited-kernels" in p.read_text() for p in after)


@pytest.mark.skipif(MLX_MISSING, reason="the mlx backend is not installed")
def test_mlx_computation_runs_through_mx_compile():
    """A step that only computes: mx.compile replays it, reading the current arrays of the
    tensors it reads besides its arguments (a weight updated in place is seen)."""
    x = pl.randn(8, 4, device="gpu")
    w, b = pl.randn(4, 3, device="gpu"), pl.randn(3, device="gpu")

    def forward(a, scale):
        h = pl.tanh(a @ w + b) * scale
        return h.sum(), h

    compiled = pl.compile(forward)
    for _ in range(3):
        total, h = compiled(x, 2.0)
        expected_total, expected_h = forward(x, 2.0)
        assert total.device == "gpu"
        np.testing.assert_allclose(h.numpy(), expected_h.numpy(), rtol=1e-6, atol=1e-7)
        assert total.item() == pytest.approx(expected_total.item(), rel=1e-6)
    with pl.no_grad():
        w.mul_(0.5)
    total, _ = compiled(x, 2.0)
    assert total.item() == pytest.approx(forward(x, 2.0)[0].item(), rel=1e-6)
    assert compiled.stats.traces == 1 and compiled.stats.replays == 3


@pytest.mark.skipif(MLX_MISSING, reason="the mlx backend is not installed")
@pytest.mark.parametrize(
    ("make", "reason"),
    [
        (lambda v: lambda a: (a @ v).sum().backward(), "runs backward"),
        (lambda v: lambda a: F.dropout(a, 0.5).sum(), "draws random numbers"),
        (lambda v: lambda a: a.sum().item(), "reads a tensor's values"),
        (lambda v: lambda a: a.add_(1.0), "changes its arguments in place"),
    ],
    ids=["backward", "dropout", "item", "in-place"],
)
def test_mlx_steps_that_do_not_fit_run_eagerly_with_one_warning(make, reason):
    v = pl.randn(4, 3, device="gpu", requires_grad=True)
    compiled = pl.compile(make(v))
    with pytest.warns(RuntimeWarning, match=reason):
        compiled(pl.randn(8, 4, device="gpu"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        compiled(pl.randn(8, 4, device="gpu"))
    assert compiled.stats.eager_calls == 1 and compiled.stats.traces == 0


def test_unwritable_cache_directory_falls_back_with_one_warning(tmp_path, monkeypatch, mode):
    from pylucid.compiler import codegen
    from pylucid.kernels.jit import NumbaCacheWarning

    blocker = tmp_path / "a-file"
    blocker.touch()  # (a directory under a regular file cannot be made, even by root)
    monkeypatch.setenv("PYLUCID_COMPILE_CACHE", str(blocker / "cache"))
    monkeypatch.setattr(codegen, "_FALLBACKS", {})
    monkeypatch.setattr(tape, "_KERNELS", {})
    with pytest.warns(NumbaCacheWarning, match="cannot write generated code"):
        w, step = _linear_step()
        for _ in range(3):
            step(pl.randn(5, 4))
            w.grad = None
    assert step.stats.replays == 2
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # (once per process and directory)
        _, again = _linear_step()
        again(pl.randn(5, 4))


def test_compiling_a_module_gives_torchs_wrapper_running_eagerly() -> None:
    """torch.compile(model) (nanoGPT's line): the wrapper forwards attributes, registers the
    model as _orig_mod (state_dict keys with that prefix, as PyTorch's), and computes what
    the model computes; it warns once that a module's forward alone runs eagerly."""
    import warnings

    import pylucid.compiler.module as compiled_module

    model = pl.nn.Sequential(pl.nn.Linear(3, 2), pl.nn.Tanh())
    compiled_module._warned = False
    with pytest.warns(UserWarning, match="runs eagerly"):
        wrapped = pl.compile(model)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        pl.compile(model)  # (once per process)
    x = pl.randn(4, 3)
    assert (wrapped(x).numpy() == model(x).numpy()).all()
    assert list(wrapped.state_dict()) == [f"_orig_mod.{k}" for k in model.state_dict()]
    assert wrapped.eval() is wrapped and not model.training
    assert wrapped._orig_mod is model and list(wrapped.parameters()) == list(model.parameters())
    assert pl.compile(model, disable=True) is model
    assert pl.compile(model.forward, backend="eager") == model.forward
    assert pl.compile(lambda t: t * 2, mode="reduce-overhead")(x).shape == (4, 3)


# -- issue 31: what a step reads is guarded or read afresh; gradients replay as eager's --------
def _runs(make, calls, mode=None, between=None):
    """``make()`` -> (step, tensors to watch); the watched values after each call, eagerly
    and compiled (``between(i)`` runs before call ``i``), and the compiled step."""
    results = []
    for compiled in (False, True):
        step, watched = make()
        run = pl.compile(step, mode=mode) if compiled else step
        values = []
        for i in range(calls):
            if between is not None:
                between(i, watched)
            out = run()
            values.append([None if t is None else t.numpy().copy()
                           for t in (out, *watched())])  # fmt: skip
        results.append(values)
    return results[0], results[1], run


def _assert_bitwise(eager, compiled):
    for i, (a_values, b_values) in enumerate(zip(eager, compiled)):
        for a, b in zip(a_values, b_values):
            assert (a is None) == (b is None), f"call {i}: a gradient's presence differs"
            if a is not None:
                np.testing.assert_array_equal(b, a, err_msg=f"call {i}")


@pytest.mark.parametrize("fortran", [False, True], ids=["c-grad", "fortran-grad"])
def test_zero_grad_keeping_storage_replays_eagers_gradients(fortran):
    """Case 1: zero_grad(set_to_none=False) in the step - the update uses this call's
    gradient (also one kept in Fortran order, a Linear weight's layout, read as a copy)."""

    def make():
        w = pl.tensor(np.arange(6.0).reshape(2, 3) / 10, requires_grad=True)
        if fortran:
            w.grad = pl.from_numpy(np.asfortranarray(np.zeros((2, 3))))
        opt = pl.optim.SGD([w], lr=0.1)
        x = pl.ones(4, 3, dtype=pl.float64)

        def step():
            opt.zero_grad(set_to_none=False)
            loss = ((x @ w.T) ** 2).sum()
            loss.backward()
            opt.step()
            return loss

        return step, lambda: (w, w.grad)

    eager, compiled, step = _runs(make, 6)
    assert [v[1][0, 0] for v in eager[:4]] == pytest.approx([-0.24, 0.096, -0.3744, 0.28416])
    _assert_bitwise(eager, compiled)
    assert step.stats.replays >= 3


@pytest.mark.parametrize("where", ["after", "before", "end_of_step", "scheduler_outside"])
def test_zero_grad_outside_or_at_the_end_replays(where):
    """Case 2: zero_grad() outside the step (after or before each call, with a scheduler
    stepped outside between), or set_to_none at the step's end (a GPT trainer's)."""

    def make():
        pl.manual_seed(0)
        model = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2)).to(pl.float64)
        opt = pl.optim.SGD(model.parameters(), lr=0.1)
        sched = pl.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
        x = pl.tensor(np.linspace(-1, 1, 15).reshape(5, 3))

        def step():
            loss = (model(x) ** 2).mean()
            loss.backward()
            opt.step()
            if where == "end_of_step":
                opt.zero_grad(set_to_none=True)
            return loss

        make.state = opt, sched
        return step, lambda: [t for p in model.parameters() for t in (p, p.grad)]

    def between(i, watched):
        opt, sched = make.state
        if where in ("after", "scheduler_outside") and i:
            opt.zero_grad()
        if where == "before":
            opt.zero_grad()
        if where == "scheduler_outside" and i:
            sched.step()

    eager, compiled, step = _runs(make, 7, between=between)
    _assert_bitwise(eager, compiled)
    assert step.stats.replays >= 5


def test_accumulation_over_calls_without_zeroing_replays():
    """Gradients accumulated over several calls, zeroed every third (set_to_none both
    ways): the replays add into the gradient the step found, as eager does."""
    for set_to_none in (True, False):

        def make(set_to_none=set_to_none):
            pl.manual_seed(1)
            model = nn.Linear(3, 2).to(pl.float64)
            opt = pl.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
            x = pl.tensor(np.linspace(-1, 1, 12).reshape(4, 3))
            make.opt = opt

            def accumulate():
                loss = model(x).pow(2).sum()
                loss.backward()
                opt.step()
                return loss

            return accumulate, lambda: [t for p in model.parameters() for t in (p, p.grad)]

        def between(i, watched, set_to_none=set_to_none):
            if i % 3 == 0:
                make.opt.zero_grad(set_to_none=set_to_none)

        eager, compiled, step = _runs(make, 10, between=between)
        _assert_bitwise(eager, compiled)
        assert step.stats.replays >= 5


@pytest.mark.parametrize("change", ["parameter", "submodule", "negative_slope", "dropout_p"])
def test_what_a_forward_reads_is_guarded(change):
    """Case 3: a parameter replaced by a new nn.Parameter, a submodule replaced, a Python
    number a module's forward reads (LeakyReLU's slope, Dropout's p) changed between calls:
    the step captures again and gives eager's values."""

    def make():
        pl.manual_seed(2)
        model = nn.Sequential(nn.Linear(3, 4), nn.LeakyReLU(0.1), nn.Linear(4, 2),
                              nn.Dropout(0.25)).to(pl.float64)  # fmt: skip
        opt = pl.optim.SGD(model.parameters(), lr=0.1)
        x = pl.tensor(np.linspace(-1, 1, 15).reshape(5, 3))
        make.model = model

        return _squares_step(model, opt, x), lambda: [*model.parameters()]

    def between(i, watched):
        model = make.model
        if i == 3:
            if change == "parameter":
                with pl.no_grad():
                    model[2].weight = nn.Parameter(model[2].weight * 0.5)
            elif change == "submodule":
                pl.manual_seed(5)
                model[2] = nn.Linear(4, 2).to(pl.float64)
            elif change == "negative_slope":
                model[1].negative_slope = 0.3
            else:
                model[3].p = 0.5
        pl.manual_seed(100 + i)

    eager, compiled, step = _runs(make, 6, between=between)
    _assert_bitwise(eager, compiled)
    # (a new parameter is not the optimizer's: its zero_grad leaves the gradient, which the
    # next call adds to - a second capture)
    assert step.stats.recaptures == (2 if change in ("parameter", "submodule") else 1)
    assert step.stats.replays >= 1


@pytest.mark.parametrize("change", ["betas", "betas_form", "nesterov", "amsgrad", "weight_decay"])
def test_hyperparameters_changed_between_calls_train_as_eager(change):
    """Case 4: Adam's betas are read at every replay; a hyperparameter that selects the
    update's form (nesterov, amsgrad, weight decay turned on, a beta1 below 0.5: another
    interpolation of the moments) abandons the replay before anything changed and captures
    again."""

    def make():
        pl.manual_seed(3)
        model = nn.Linear(3, 2).to(pl.float64)
        if change == "nesterov":
            opt = pl.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        else:
            opt = pl.optim.Adam(model.parameters(), lr=0.01)
        x = pl.tensor(np.linspace(-1, 1, 12).reshape(4, 3))
        make.opt = opt

        return _squares_step(model, opt, x), lambda: [
            *model.parameters(),
            *[v for s in opt.state.values() for v in s.values() if isinstance(v, pl.Tensor)],
        ]

    def between(i, watched):
        if i == 4:
            group = make.opt.param_groups[0]
            value = {"betas": (0.8, 0.99), "betas_form": (0.4, 0.99), "nesterov": True,
                     "amsgrad": True, "weight_decay": 0.1}[change]  # fmt: skip
            group["betas" if change == "betas_form" else change] = value

    eager, compiled, step = _runs(make, 8, between=between)
    _assert_bitwise(eager, compiled)
    # (amsgrad turned on after the first step: eager's Adam has no max_exp_avg_sq state and
    # keeps its form)
    assert step.stats.recaptures == (0 if change in ("betas", "amsgrad") else 1)


def test_an_abandoned_replay_leaves_everything_as_it_was():
    """The replay a changed update form abandons has run the optimizer's Python (step
    counts) and copied its inputs: all of it is put back before the capture runs."""
    model = nn.Linear(3, 2).to(pl.float64)
    opt = pl.optim.Adam(model.parameters(), lr=0.01)
    x = pl.tensor(np.linspace(-1, 1, 12).reshape(4, 3))

    def step():
        opt.zero_grad()
        model(x).pow(2).sum().backward()
        opt.step()

    compiled = pl.compile(step)
    for _ in range(3):
        compiled()
    program = compiled.programs[-1]
    before = ([p.numpy().copy() for p in model.parameters()],
              [s["step"] for s in opt.state.values()])  # fmt: skip
    opt.param_groups[0]["betas"] = (0.4, 0.999)  # (beta1 < 0.5: another form of the update)
    with pytest.raises(Retrace, match="Adam's update took another form"):
        program([])
    after = ([p.numpy().copy() for p in model.parameters()],
             [s["step"] for s in opt.state.values()])  # fmt: skip
    for a, b in zip(before[0], after[0]):
        np.testing.assert_array_equal(a, b)
    assert before[1] == after[1]


def test_a_step_that_keeps_capturing_again_warns_once_and_runs_eagerly():
    """A module attribute changed before every call: after RECAPTURE_LIMIT captures the
    function runs eagerly, with one warning naming the guard that failed."""
    from pylucid.compiler.api import RECAPTURE_LIMIT

    model = nn.Sequential(nn.Linear(3, 2), nn.LeakyReLU(0.1)).to(pl.float64)
    x = pl.tensor(np.linspace(-1, 1, 12).reshape(4, 3))

    def step():
        return model(x).sum()

    compiled = pl.compile(step)
    with pytest.warns(RuntimeWarning, match=r"captured again \d+ times.*negative_slope"):
        for i in range(RECAPTURE_LIMIT + 4):
            model[1].negative_slope = 0.1 + i / 100
            assert compiled().item() == step().item()
    assert compiled.stats.eager_calls >= 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        compiled()


def test_closure_and_global_numbers_are_guarded():
    """A Python number the step function reads from its closure or globals is a guard."""
    scale = [2.0]
    w = pl.tensor([1.0, 2.0], requires_grad=True)

    def make_step(factor):
        def step(x):
            return (x * w * factor * _GLOBAL_FACTOR).sum()

        return step

    global _GLOBAL_FACTOR
    _GLOBAL_FACTOR = 1.0
    step = make_step(scale[0])
    compiled = pl.compile(step)
    x = pl.tensor([1.0, 1.0])
    for _ in range(3):
        assert compiled(x).item() == 6.0
    _GLOBAL_FACTOR = 3.0
    assert compiled(x).item() == 18.0
    assert compiled.stats.recaptures == 1


_GLOBAL_FACTOR = 1.0


def test_captures_in_two_threads_with_a_cold_cache(tmp_path, monkeypatch, mode):
    """Case 5: two compiled steps captured at once in two threads, with an empty compile
    cache (a generated module loaded by one thread while the other wants it), and a capture
    beside a thread running eager ops: each gives eager's values, none records the other."""
    import threading

    monkeypatch.setenv("PYLUCID_COMPILE_CACHE", str(tmp_path))
    monkeypatch.setattr(tape, "_KERNELS", {})

    def world():
        pl.manual_seed(0)
        model = nn.Sequential(nn.Linear(4, 5), nn.Tanh(), nn.Linear(5, 3))
        opt = pl.optim.SGD(model.parameters(), lr=0.1)
        x = pl.tensor(np.linspace(-1, 1, 24).reshape(6, 4), dtype=pl.float32)

        def step():
            opt.zero_grad()
            loss = (model(x) ** 2).mean()
            loss.backward()
            opt.step()
            return loss

        return step

    steps = {"a": pl.compile(world()), "b": pl.compile(world()), "eager": world()}
    results, errors = {}, []
    barrier = threading.Barrier(3)

    def train(name):
        try:
            barrier.wait()
            results[name] = [steps[name]().item() for _ in range(5)]
        except BaseException as error:  # noqa: BLE001  (reported by the main thread)
            errors.append((name, error))

    def eager_ops():
        barrier.wait()
        a = pl.randn(50, 50)
        for _ in range(200):
            (a.tanh() * 2 + 1).sum()

    threads = [threading.Thread(target=train, args=(name,)) for name in "ab"]
    threads.append(threading.Thread(target=eager_ops))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    expected = [steps["eager"]().item() for _ in range(5)]
    rtol = 0 if mode == "tape" else 1e-6  # (fused sums a float32 mean in float64)
    np.testing.assert_allclose(results["a"], expected, rtol=rtol)
    np.testing.assert_allclose(results["b"], expected, rtol=rtol)
    assert steps["a"].stats.replays == steps["b"].stats.replays == 4


def test_factories_of_numbers_inside_the_step_are_constants():
    """arange, linspace, eye and the masks of tril/triu (a causal attention's) made inside
    the step depend on Python numbers alone (here a shape, in the key): constants of the
    trace, where pl.tensor(data) is still refused."""
    w = pl.tensor(np.linspace(-1, 1, 16).reshape(4, 4), requires_grad=True)

    def step(x):
        n = x.shape[1]
        scores = (x @ w) * pl.arange(n) + pl.linspace(0, 1, n) + pl.eye(n)
        causal = scores.masked_fill(pl.tril(pl.ones(n, n)) == 0, float("-inf"))
        loss = (causal.softmax(-1) * pl.triu(x)).sum()
        loss.backward()
        return loss

    compiled = pl.compile(step)
    for i in range(4):
        x = pl.tensor(np.linspace(-2, 2, 16).reshape(4, 4) * (i + 1), dtype=pl.float32)
        w.grad = None
        expected = step(x).numpy().copy(), w.grad.numpy().copy()
        w.grad = None
        got = compiled(x).numpy().copy(), w.grad.numpy().copy()
        np.testing.assert_allclose(got[0], expected[0], rtol=1e-6)
        np.testing.assert_allclose(got[1], expected[1], rtol=1e-6, atol=1e-7)
    assert compiled.stats.traces == 1 and compiled.stats.replays == 3


@pytest.mark.skipif(MLX_MISSING, reason="the mlx backend is not installed")
def test_mlx_compiled_step_guards_the_python_values_it_froze():
    """mx.compile freezes the Python numbers its trace read: a module attribute changed
    between calls (LeakyReLU's slope) captures again instead of replaying the old one."""
    model = nn.Sequential(nn.Linear(3, 2), nn.LeakyReLU(0.1)).to("gpu")
    x = pl.randn(4, 3, device="gpu")

    def forward(a):
        return model(a).sum()

    with pl.no_grad():
        compiled = pl.compile(forward)
        for i in range(4):
            if i == 2:
                model[1].negative_slope = 0.5
            assert compiled(x).item() == forward(x).item()
    assert compiled.stats.recaptures == 1 and compiled.stats.replays == 2


def test_an_optimizer_error_at_replay_raises_as_eagerly():
    """An optimizer whose step raises (RMSprop's momentum turned on after its state was
    made without a buffer): the replay puts its Python state back and captures again, so
    the error comes from an eager run - after the forward and backward, as eagerly."""

    def make():
        pl.manual_seed(4)
        model = nn.Linear(3, 2).to(pl.float64)
        opt = pl.optim.RMSprop(model.parameters(), lr=0.01)
        x = pl.tensor(np.linspace(-1, 1, 12).reshape(4, 3))

        def step():
            opt.zero_grad()
            model(x).pow(2).sum().backward()
            opt.step()

        return step, model, opt

    states = []
    for compiled in (False, True):
        step, model, opt = make()
        run = pl.compile(step) if compiled else step
        for _ in range(3):
            run()
        opt.param_groups[0]["momentum"] = 0.5
        with pytest.raises(ValueError, match="momentum buffer"):
            run()
        states.append([t.numpy().copy() for p in model.parameters() for t in (p, p.grad)])
    for a, b in zip(*states):
        np.testing.assert_array_equal(b, a)


_PROCESS_STEP = """
import sys
import numpy as np
import pylucid as pl
w = pl.tensor(np.linspace(-1, 1, 12).reshape(4, 3), requires_grad=True)
def step(x):
    loss = (pl.tanh(x @ w) * 1.5 + pl.exp(x @ w * 0.25)).sum()
    loss.backward()
    return loss
compiled = pl.compile(step, mode=sys.argv[1])
values = []
for i in range(3):
    w.grad = None
    values.append(compiled(pl.tensor(np.linspace(0, 1, 20).reshape(5, 4) * i)).item())
print(values, compiled.stats.replays)
"""


def test_processes_sharing_a_cold_cache_compile_and_load_whole_modules(tmp_path, mode):
    """Two processes capturing the same graph at once into one empty cache directory: each
    writes its generated modules under a name of its own and renames them into place, so
    neither loads a half-written file."""
    import os
    import subprocess
    import sys

    env = dict(os.environ, PYLUCID_COMPILE_CACHE=str(tmp_path))
    runs = [subprocess.Popen([sys.executable, "-c", _PROCESS_STEP, mode], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for _ in range(2)]  # fmt: skip
    outputs = [run.communicate(timeout=300) for run in runs]
    for run, (_, err) in zip(runs, outputs):
        assert run.returncode == 0, err
    assert outputs[0][0] == outputs[1][0] and outputs[0][0].strip().endswith(" 2")
    assert not list(tmp_path.glob("*.tmp"))


def test_causal_attention_replays():
    """scaled_dot_product_attention(is_causal=True) builds its mask from the scores' shape:
    a constant of the trace."""
    w = pl.tensor(np.linspace(-1, 1, 16).reshape(4, 4), requires_grad=True)

    def step(x):
        q = x @ w
        loss = F.scaled_dot_product_attention(q, q, x, is_causal=True).pow(2).sum()
        loss.backward()
        return loss

    compiled = pl.compile(step)
    for i in range(4):
        x = pl.tensor(np.linspace(-1, 2, 24).reshape(2, 3, 4) * (i + 1))
        w.grad = None
        expected = step(x).item(), w.grad.numpy().copy()
        w.grad = None
        got = compiled(x).item(), w.grad.numpy().copy()
        assert got[0] == pytest.approx(expected[0], rel=1e-12)
        np.testing.assert_allclose(got[1], expected[1], rtol=1e-12)
    assert compiled.stats.traces == 1 and compiled.stats.replays == 3


class _TinyGPT(nn.Module):
    """A char-level GPT as public trainers write it (token and position embeddings, the
    positions from ``arange`` inside forward, a causal mask buffer sliced and applied with
    ``masked_fill``, pre-norm blocks, logits read at every position)."""

    def __init__(self, vocab: int = 11, width: int = 16, block: int = 8) -> None:
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, width), nn.Embedding(block, width)
        self.norm, self.qkv = nn.LayerNorm(width), nn.Linear(width, 3 * width)
        self.mlp = nn.Sequential(
            nn.Linear(width, 2 * width), nn.GELU(), nn.Linear(2 * width, width)
        )
        self.head = nn.Linear(width, vocab)
        self.register_buffer("bias", pl.tril(pl.ones(block, block)).view(1, block, block))

    def forward(self, idx: pl.Tensor, targets: pl.Tensor) -> pl.Tensor:
        b, t = idx.shape
        x = self.tok(idx) + self.pos(pl.arange(0, t, dtype=pl.long))
        q, k, v = self.qkv(self.norm(x)).split(x.shape[-1], dim=2)
        att = (q @ k.transpose(-2, -1)) * k.shape[-1] ** -0.5
        att = att.masked_fill(self.bias[:, :t, :t] == 0, float("-inf")).softmax(-1)
        x = x + att @ v
        x = x + self.mlp(self.norm(x))
        logits = self.head(x)
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)


def test_char_gpt_step_captures_once_and_replays_eager_bits():
    """Embedding lookups (the index is an input of the embedding op), positions from
    ``arange``, a causal mask buffer, targets padded with -1 in varying numbers (the count
    read at each replay) and ``zero_grad(set_to_none=True)`` after the step: one capture,
    every replay bitwise equal to eager (issue 31, point 6)."""
    rng = np.random.default_rng(0)
    batches = []
    for call in range(6):
        idx = rng.integers(0, 11, (4, 8))
        targets = rng.integers(0, 11, (4, 8))
        targets[:, 8 - call :] = -1  # (none ignored in the first batch, more in each next)
        batches.append((pl.tensor(idx), pl.tensor(targets)))
    losses = []
    for compiled in (False, True):
        pl.manual_seed(0)
        model = _TinyGPT()
        opt = pl.optim.AdamW(model.parameters(), lr=1e-2)

        def step(idx, targets, model=model, opt=opt):
            loss = model(idx, targets)
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            opt.zero_grad(set_to_none=True)
            return loss

        run = pl.compile(step) if compiled else step
        losses.append([run(*batch).item() for batch in batches])
    assert losses[0] == losses[1]
    # (the first call is eager: AdamW's state is made by its first step)
    assert (run.stats.warmups, run.stats.traces, run.stats.replays) == (1, 1, 4)


def test_gradients_keep_eager_layout(monkeypatch):
    """A weight used at several time steps (``x_t @ W.T``) gets the sum of transposed
    products, which eager adds up as Fortran-ordered matrices: the replay's places for those
    sums are Fortran-ordered too (the sums then run in memory order; in C order each read
    strided across rows, and an LSTM step's replay took 1.3x eager's time). The replays
    give eager's bits. (The leaf's .grad itself may be a C-ordered copy, eagerly: whether
    backward hands it the sum or a copy depends on who else holds the sum.)"""
    w = pl.randn(64, 16, requires_grad=True)

    def step(xs):
        h = pl.zeros(8, 64)
        for t in range(xs.shape[1]):
            h = pl.tanh(xs[:, t] @ w.T + h)
        h.sum().backward()
        grad = w.grad
        w.grad = None
        return grad

    from pylucid.compiler import plan

    fortran_places = []  # (the places the plan made Fortran-ordered, as eager's arrays were)
    decide = plan.fortran_place

    def noted(array: np.ndarray) -> bool:
        if decide(array):
            fortran_places.append(array.shape)
            return True
        return False

    monkeypatch.setattr(plan, "fortran_place", noted)
    xs = pl.randn(8, 5, 16)
    want = step(xs)
    compiled = pl.compile(step)
    for _ in range(3):
        got = compiled(xs)
        np.testing.assert_array_equal(got.numpy(), want.numpy())
    assert compiled.stats.replays == 2
    assert fortran_places, "the plan gave no value a Fortran-ordered place"


class _Sliced(nn.Module):
    """Runs ``self.layers[1:]``: a new ModuleList at every call, as many public models do."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(8, 8) for _ in range(3)])

    def forward(self, x: pl.Tensor) -> pl.Tensor:
        x = self.layers[0](x)
        for layer in self.layers[1:]:
            x = layer(x).relu()
        return x


def test_modules_made_by_the_step_are_not_guarded(mode):
    """A ModuleList sliced in the step is made again at every call; guarding its registries
    (read while its __init__ filled them) made the step capture at every call and never
    replay. It is captured once and replays eager's results (bits, in tape mode), with a
    fresh Linear made each call too (its initial weights are draws, replayed)."""
    pl.manual_seed(0)
    twins = [_Sliced() for _ in range(2)]
    twins[1].load_state_dict(twins[0].state_dict())
    x = pl.tensor(np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32))
    losses = []
    for net, wrap in zip(twins, (lambda f: f, pl.compile)):
        opt = pl.optim.SGD(net.parameters(), lr=0.1)

        def step(x, net=net, opt=opt):  # noqa: ANN001, ANN202
            opt.zero_grad()
            loss = (net(x) + nn.Linear(8, 8)(x)).sum()
            loss.backward()
            opt.step()
            return loss

        run = wrap(step)
        pl.manual_seed(1)
        losses.append([run(x).item() for _ in range(6)])
        if run is not step:
            assert run.stats.traces == 1 and run.stats.replays == 5
    rtol = 0 if mode == "tape" else 1e-6  # (fused loops may contract to FMAs)
    np.testing.assert_allclose(losses[1], losses[0], rtol=rtol)
    for a, b in zip(*(net.parameters() for net in twins)):
        np.testing.assert_allclose(b.numpy(), a.numpy(), rtol=rtol, atol=rtol)
