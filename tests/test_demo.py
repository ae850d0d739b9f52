"""``python -m pylucid demo`` without running it: its help, what it gradchecks, how a failed
gradcheck reaches the exit status, and its console - the compile watch, the progress bars'
time estimates and the heartbeat - driven by a fake clock."""

from __future__ import annotations

import io
import re
import threading

import numba
import numpy as np
import pytest

import pylucid as pl
from pylucid import demo
from pylucid.__main__ import main as cli
from pylucid.opinfo import OPS, OpInfo, uniform


class FakeClock:
    """Seconds that pass only when told to."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def watch(clock: FakeClock) -> demo.CompileWatch:
    """A watch fed by hand (``on_start``/``on_end``), not registered with Numba."""
    return demo.CompileWatch(clock)


def _console(watch: demo.CompileWatch, clock: FakeClock) -> tuple[demo.Console, io.StringIO]:
    err = io.StringIO()
    return demo.Console(watch, quiet=0.75, clock=clock, out=io.StringIO(), err=err), err


def _remaining(bar: demo.Bar) -> str:
    """The time left that the bar shows: ``[elapsed<remaining, ...]``."""
    return re.search(r"<([^,]*),", str(bar))[1]


def test_help_says_what_it_does_how_long_and_where_it_writes(capsys) -> None:
    with pytest.raises(SystemExit) as exit_:
        cli(["demo", "--help"])
    assert exit_.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    for what in ("logistic regression", "MLP", "CNN", "float16", "gradcheck every op"):
        assert what in text
    assert re.search(r"First run: about \d+ s on an idle 2-core machine", text)
    assert re.search(r"later runs take about \d+ s", text)
    for path in ("demo-output/", "cnn-cpu.safetensors", "cnn-graph.svg", "cnn-graph.dot"):
        assert path in text
    assert "Exits 1 if a gradcheck fails" in text


def test_gradcheck_cases_check_every_op_at_its_first_shapes() -> None:
    gpu = demo.gradcheck_cases("gpu", ["numba", "mlx"])
    assert [info for info, _ in gpu] == list(OPS)
    assert all(shapes == info.shapes[0] for info, shapes in gpu)
    # the cpu: every op but the generated loops' families, of which the sample
    cpu = {info.name for info, _ in demo.gradcheck_cases("cpu", ["numba", "mlx"])}
    assert cpu == {info.name for info in OPS} - demo.LOOP_FAMILIES | set(demo.CPU_SAMPLE)
    assert set(demo.CPU_SAMPLE) <= demo.LOOP_FAMILIES
    assert {"log2", "add", "sum", "softmax", "cross_entropy", "conv2d", "matmul"} <= cpu
    # without MLX, every op that runs without it on the cpu
    alone = demo.gradcheck_cases("cpu", ["numba"])
    assert [info for info, _ in alone] == [i for i in OPS if "needs_mlx" not in i.tags]


def test_a_failed_gradcheck_is_reported_and_makes_the_exit_status_1(
    watch, clock, monkeypatch
) -> None:
    # The output is a new leaf: backward gives x no gradient, finite differences the identity.
    detached = OpInfo("detached", lambda x: x.detach().requires_grad_(), np.copy, (uniform(0, 1),))
    raising = OpInfo("raising", lambda x: pl.reshape(x, (5,)), np.copy, (uniform(0, 1),))
    console, _ = _console(watch, clock)
    cases = demo.gradcheck_cases("cpu", ["numba", "mlx"], (detached, raising))
    failures = demo.gradcheck_device(console, "cpu", cases)
    assert len(failures) == 2
    assert failures[0].startswith("detached ((3, 4),): GradcheckError: gradcheck: Jacobian")
    assert failures[1].startswith("raising ((3, 4),): ")

    for passed, status in ((False, 1), (True, 0)):
        monkeypatch.setattr(demo, "run", lambda console, passed=passed: passed)
        assert demo.main() == status


def test_compile_watch_counts_numba_compilations_once_with_their_callees() -> None:
    inner = numba.njit(lambda x: x + 1)
    outer = numba.njit(lambda x: inner(x) * 2)
    with demo.CompileWatch() as watch:
        assert outer(1) == 4
    assert watch.count == 1 and not watch.compiling and watch.seconds() > 0
    assert outer(2) == 6 and watch.count == 1  # unregistered, and nothing compiled anyway


def test_compile_watch_times_nested_events(watch, clock) -> None:
    watch.on_start(None)
    clock.advance(1.0)
    watch.on_start(None)  # a callee
    clock.advance(2.0)
    watch.on_end(None)
    assert watch.compiling and watch.count == 0 and watch.seconds() == 3.0
    watch.on_end(None)
    clock.advance(5.0)
    assert not watch.compiling and watch.count == 1 and watch.seconds() == 3.0


def test_a_compiling_first_step_is_not_extrapolated(clock) -> None:
    """The issue's bar: step 1 took 10.9 s (kernels compiling), the others milliseconds; it
    showed ``1/152 [00:10<27:32]``."""
    times = demo.StepTimes(clock)
    clock.advance(10.9)
    times.step()
    assert times.rate() == 0.0  # shown as "?"
    for _ in range(2):
        clock.advance(0.004)
        times.step()
    assert times.rate() == pytest.approx(250.0)  # the median step, not 10.9 s / 3


def test_steps_that_all_compile_are_estimated_from_themselves(clock) -> None:
    """A first run's gradchecks: every op compiles its kernels, so each takes ~0.3 s."""
    times = demo.StepTimes(clock)
    for seconds in (0.5, 0.3, 0.2, 0.3, 0.4):
        clock.advance(seconds)
        times.step()
    assert times.rate() == pytest.approx(1 / 0.3)


def test_bar_says_compiling_and_estimates_from_steady_steps(watch, clock) -> None:
    console, err = _console(watch, clock)
    with console.bar(152, "  MLP on cpu", "step") as bar:
        watch.on_start(None)
        clock.advance(10.9)
        assert "compiling kernels, first run only (0 done)" in str(bar)
        watch.on_end(None)
        bar.step(loss="1.4866")
        assert "compiling" not in str(bar) and _remaining(bar) == "?"
        for _ in range(2):
            clock.advance(0.004)
            bar.step(loss="1.2")
        assert _remaining(bar) == "00:00"  # 149 steps of 4 ms, not 149 of 3.6 s
    assert "10.9 s of it compiling 1 kernel (first run only)" in err.getvalue()


def test_heartbeat_redraws_a_still_bar(watch, clock) -> None:
    console, err = _console(watch, clock)
    with console.bar(10, "  gradcheck on cpu", "op") as bar:
        drawn = len(err.getvalue())
        clock.advance(0.5)
        console.beat()
        assert len(err.getvalue()) == drawn
        clock.advance(0.5)
        watch.on_start(None)
        console.beat()
        assert err.getvalue()[drawn:].endswith("compiling kernels, first run only (0 done)]")
        assert bar.drawn == clock()
        watch.on_end(None)


def test_heartbeat_between_bars_shows_a_status_line_the_next_line_replaces(watch, clock) -> None:
    console, err = _console(watch, clock)
    clock.advance(0.5)
    console.beat()
    assert err.getvalue() == ""  # not still for long enough yet
    watch.on_start(None)
    clock.advance(0.7)
    console.beat()
    status = "  ... compiling kernels, first run only (0 done) [1 s]"
    assert err.getvalue() == "\r" + status
    clock.advance(0.1)
    console.beat()
    assert err.getvalue() == "\r" + status  # nothing new to say: nothing written
    watch.on_end(None)
    console.line("  step   0  loss 1.0000 bits")
    assert err.getvalue().endswith("\r" + " " * len(status) + "\r")
    clock.advance(0.8)
    console.beat()
    assert err.getvalue().endswith("\r  ... working [1 s]")


def test_running_starts_and_stops_the_heartbeat(watch) -> None:
    console = demo.Console(watch, quiet=0.03, out=io.StringIO(), err=io.StringIO())
    with console.running():
        pass
    assert not [t for t in threading.enumerate() if t.name.endswith("heartbeat")]
