"""The launcher (``python -m pylucid.distributed.launch``) and the distributed benchmark's
plumbing: command lines, exit statuses, the error without mpiexec, how the launcher judges
the ranks' ends (its monitor, and 2-rank jobs of ``distributed_scripts/faults.py`` where a
rank vanishes, finishes early or stalls), the worker's JSON and the step-time model.
Nothing here times anything but how soon a failure ends the job: speed is measured by
``python -m pylucid bench --distributed``, not by tests."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pylucid.__main__ import main as pylucid_main
from pylucid.bench import distributed as bench_distributed
from pylucid.distributed import launch, monitor

SCRIPTS = Path(__file__).parent / "distributed_scripts"
MPI_MISSING = "mpi4py/mpich not installed (pip install -e '.[distributed]')"


def _mpi_available() -> bool:
    try:
        launch.find_mpiexec()
    except launch.LauncherNotFoundError:
        return False
    return importlib.util.find_spec("mpi4py") is not None


def _mlx_available() -> bool:
    try:
        launch.find_mlx_launch()
    except launch.LauncherNotFoundError:
        return False
    return True


needs_mpi = pytest.mark.skipif(not _mpi_available(), reason=MPI_MISSING)
needs_mlx = pytest.mark.skipif(
    not _mlx_available(), reason="MLX not installed (pip install -e '.[mlx]')"
)

#: Prints its rank and exits with the status given for rank 1 (0 on the others). The rank
#: comes from mpi4py under MPI and from MLX_RANK under mlx.launch, so the script starts fast.
RANK_SCRIPT = """\
import os, sys
if "MLX_RANK" in os.environ:
    rank, size = int(os.environ["MLX_RANK"]), None
else:
    from mpi4py import MPI
    rank, size = MPI.COMM_WORLD.Get_rank(), MPI.COMM_WORLD.Get_size()
print(f"rank {rank} of {size} args {sys.argv[1:]}", flush=True)
sys.exit(int(sys.argv[1]) if rank == 1 else 0)
"""


@pytest.fixture
def rank_script(tmp_path: Path) -> Path:
    path = tmp_path / "ranks.py"
    path.write_text(RANK_SCRIPT)
    return path


@pytest.fixture
def fake_launchers(monkeypatch: pytest.MonkeyPatch) -> None:
    """Launchers at fixed paths, so that the command lines do not depend on the machine."""
    monkeypatch.setattr(launch, "find_mpiexec", lambda: "/opt/mpich/bin/mpiexec")
    monkeypatch.setattr(launch, "find_mlx_launch", lambda: "/opt/venv/bin/mlx.launch")


def test_print_command_mpi(fake_launchers: None, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["-n", "8", "--hostfile", "hosts", "--print-command", "train.py", "--lr", "0.1"]
    assert launch.main(argv) == 0
    expected = [
        "/opt/mpich/bin/mpiexec",
        "-n",
        "8",
        "-f",
        "hosts",
        sys.executable,
        "-m",
        "pylucid.distributed.run",  # (reports how the rank ended; a failure aborts the job)
        "train.py",
        "--lr",
        "0.1",
    ]
    assert capsys.readouterr().out.strip() == shlex.join(expected)


def test_print_command_mlx(fake_launchers: None, capsys: pytest.CaptureFixture[str]) -> None:
    assert launch.main(["-n", "2", "--backend", "mlx", "--print-command", "train.py", "x"]) == 0
    expected = [
        "/opt/venv/bin/mlx.launch",
        "-n",
        "2",
        "--backend",
        "ring",
        sys.executable,
        "-m",
        "pylucid.distributed.run",
        "train.py",
        "x",
    ]
    assert capsys.readouterr().out.strip() == shlex.join(expected)


def test_print_command_of_a_module(
    fake_launchers: None, capsys: pytest.CaptureFixture[str]
) -> None:
    # Everything after -m MODULE is the module's, --print-command included (as python -m).
    assert launch.main(["--print-command", "-n", "2", "-m", "pkg.train", "--print-command"]) == 0
    expected = [
        "/opt/mpich/bin/mpiexec",
        "-n",
        "2",
        sys.executable,
        "-m",
        "pylucid.distributed.run",
        "-m",
        "pkg.train",
        "--print-command",
    ]
    assert capsys.readouterr().out.strip() == shlex.join(expected)


def test_usage_errors(fake_launchers: None, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        launch.main(["-n", "2"])  # no script
    assert "a script to run is required" in capsys.readouterr().err
    assert launch.main(["-n", "2", "no-such-script.py"]) == 2
    assert "no script 'no-such-script.py'" in capsys.readouterr().err
    with pytest.raises(ValueError, match="at least 1"):
        launch.command("train.py", n=0)
    with pytest.raises(ValueError, match="backend must be one of"):
        launch.command("train.py", backend="gloo")


def test_missing_mpiexec_says_how_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # An interpreter in an empty folder and nothing on PATH: the lookup finds no mpiexec.
    monkeypatch.setattr(sys, "executable", str(tmp_path / "python"))
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(launch.LauncherNotFoundError, match=r'pip install -e "\.\[distributed\]"'):
        launch.find_mpiexec()
    assert launch.main(["-n", "2", "--print-command", "train.py"]) == 2
    assert 'pip install -e ".[distributed]"' in capsys.readouterr().err


@needs_mpi
def test_two_ranks_run_through_the_command_line(rank_script: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pylucid.distributed.launch", "-n", "2", str(rank_script), "0"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    # (mpiexec forwards each rank's output as it comes: lines of two ranks may run together)
    found = sorted(re.findall(r"rank \d of \d args \['0'\]", done.stdout))
    assert found == ["rank 0 of 2 args ['0']", "rank 1 of 2 args ['0']"]


@needs_mpi
def test_a_failing_rank_fails_the_job(rank_script: Path) -> None:
    assert launch.launch(str(rank_script), ["3"], n=2) != 0


@needs_mpi
def test_timeout_ends_the_job(tmp_path: Path) -> None:
    script = tmp_path / "sleeps.py"
    script.write_text("import time\ntime.sleep(60)\n")
    started = time.monotonic()
    assert launch.launch(str(script), n=2, timeout=1.0) == launch.TIMEOUT_STATUS
    assert time.monotonic() - started < 20


@needs_mlx
def test_mlx_job_status_is_a_failed_ranks(rank_script: Path) -> None:
    # MLX's own launcher exits 0 whatever the ranks did; the launcher reads its log.
    assert launch.launch(str(rank_script), ["0"], n=2, backend="mlx") == 0
    assert launch.launch(str(rank_script), ["3"], n=2, backend="mlx") == 3


# -- how the launcher judges the ranks' ends ---------------------------------------------------
class FakeRank:
    """A rank's runner, as the monitor sees it: a connection and its reports."""

    def __init__(self, watched: monitor.Monitor, rank: int, token: str | None = None) -> None:
        host, port, real = watched.environment()[monitor.ENVIRONMENT].rsplit(":", 2)
        self.connection = socket.create_connection((host, int(port)))
        self.send(f"hello {token or real} {rank} {1000 + rank} node\n")

    def send(self, line: str) -> None:
        self.connection.sendall(line.encode())
        time.sleep(0.05)  # (each event seen on its own, in order)

    def exit(self, status: int, reason: str = "") -> None:
        self.send(f"exit {status} {time.time()} {reason}\n")

    def close(self) -> None:
        self.connection.close()
        time.sleep(0.05)


def _judged(
    events: list[tuple[int, str]], job_status: int, ranks: int = 2
) -> tuple[int, list[str]]:
    """The verdict of a monitor that saw ``events`` ((rank, "exit S REASON" | "left" |
    "close"), in order) from ``ranks`` ranks, each connected first, for a job of
    ``job_status``."""
    watched = monitor.Monitor(ranks)
    watched.start()
    connections = {rank: FakeRank(watched, rank) for rank in range(ranks)}
    for rank, event in events:
        connection = connections[rank]
        if event == "close":
            connection.close()
        elif event == "left":
            connection.send("left\n")
        else:
            _, status, reason = (event.split(" ", 2) + [""])[:3]
            connection.exit(int(status), reason)
    for connection in connections.values():
        connection.close()
    watched.stop()
    return watched.verdict(job_status)


def test_monitor_every_rank_finished_is_success() -> None:
    assert _judged([(0, "exit 0"), (1, "exit 0")], 0) == (0, [])
    # a rank that left its group, then ended without returning (os._exit after destroy())
    assert _judged([(0, "exit 0"), (1, "left"), (1, "close")], 0) == (0, [])


def test_monitor_a_rank_that_vanishes_fails_the_job() -> None:
    status, lines = _judged([(1, "close"), (0, "exit 0")], 0)
    assert status == 1
    assert lines == [
        "launch: rank 1 (pid 1001 on node) ended without returning from its script (os._exit, "
        "a signal or a crash; the job's exit status: 0), while rank 0 was still running",
        "launch: the job failed (exit status 1)",
    ]


def test_monitor_names_the_rank_that_ended_first_and_the_failures() -> None:
    events = [(2, "exit 0"), (0, "exit 1 RankLeftError: all_reduce: rank 2 left"), (1, "close")]
    status, lines = _judged(events, 1, ranks=3)
    assert status == 1
    assert lines == [
        "launch: rank 2 (pid 1002 on node) finished its script (exit status 0), while ranks 0, "
        "1 were still running",
        "launch: rank 0 (pid 1000 on node) exited with status 1, while rank 1 was still "
        "running: RankLeftError: all_reduce: rank 2 left",
        "launch: rank 1 (pid 1001 on node) ended without returning from its script (ended with "
        "the job, or crashed)",
        "launch: the job failed (exit status 1)",
    ]


def test_monitor_ignores_strangers_and_names_silent_ranks() -> None:
    watched = monitor.Monitor(2)
    watched.start()
    stranger = FakeRank(watched, 1, token="wrong")
    rank0 = FakeRank(watched, 0)
    rank0.exit(3, "sys.exit(3)")
    rank0.close()
    stranger.close()
    watched.stop()
    assert watched.verdict(3) == (3, [
        "launch: rank 0 (pid 1000 on node) exited with status 3: sys.exit(3)",
        "launch: rank(s) 1 never reported to the launcher (not started under "
        "pylucid.distributed.run, or it could not connect); how they ended is not known",
        "launch: the job failed (exit status 3)",
    ])  # fmt: skip


def _launch_faults(mode: str) -> tuple[subprocess.CompletedProcess, float]:
    """The launcher's run of 2 ranks of ``faults.py MODE``, and the seconds from the fault
    (its ``FAULT AT`` stamp; NaN without one) to the launcher's exit."""
    done = subprocess.run(
        [sys.executable, "-m", "pylucid.distributed.launch", "-n", "2", "--timeout", "60",
         str(SCRIPTS / "faults.py"), mode],
        capture_output=True, text=True, timeout=90, check=False,
        env={**os.environ, "NUMBA_NUM_THREADS": "1"},
    )  # fmt: skip
    ended = time.time()
    stamps = re.findall(r"FAULT AT (\S+)", done.stdout)
    return done, ended - float(stamps[0]) if stamps else float("nan")


@needs_mpi
def test_a_rank_that_vanishes_with_status_0_fails_the_job() -> None:
    # rank 1 calls os._exit(0) in its loop: mpiexec ends rank 0 and exits 0
    done, elapsed = _launch_faults("vanish")
    assert done.returncode == 1, done.stderr
    assert re.search(
        r"launch: rank 1 \(pid \d+ on .+\) ended without returning from its script "
        r"\(os\._exit, a signal or a crash; the job's exit status: 0\), while rank 0 was "
        r"still running\n",
        done.stderr,
    ), done.stderr
    assert "launch: the job failed (exit status 1)" in done.stderr
    assert "rank 0 finished" not in done.stdout
    assert elapsed < 20, f"the job ended {elapsed:.1f} s after the fault"


@needs_mpi
def test_a_collective_after_a_rank_finished_raises_at_once() -> None:
    # no timeout is set: rank 1's notice that it left makes rank 0's extra all_reduce raise
    done, elapsed = _launch_faults("extra")
    assert done.returncode == 1, done.stderr
    assert "RankLeftError: all_reduce: rank 1 left the process group" in done.stderr
    assert re.search(
        r"launch: rank 1 \(pid \d+ on .+\) finished its script \(exit status 0\), while "
        r"rank 0 was still running\nlaunch: rank 0 \(pid \d+ on .+\) exited with status 1: "
        r"RankLeftError: all_reduce: rank 1 left the process group \(its script ended or it "
        r"called destroy\(\)\) after its collective 11; this is collective 12 on rank 0",
        done.stderr,
    ), done.stderr
    assert elapsed < 20, f"the job ended {elapsed:.1f} s after the extra collective"


@needs_mpi
def test_a_rank_that_finishes_early_is_not_a_failure() -> None:
    # rank 1 finishes while rank 0 works on without a collective, then finishes too
    done, _ = _launch_faults("early")
    assert done.returncode == 0, done.stderr
    assert sorted(re.findall(r"rank \d finished", done.stdout)) == [
        "rank 0 finished",
        "rank 1 finished",
    ]
    assert "launch:" not in done.stderr


@needs_mpi
def test_a_stalled_collective_ends_the_job_after_the_timeout() -> None:
    # rank 1 stops after the arrival, in the data phase: rank 0's watchdog ends the job
    done, elapsed = _launch_faults("stall")
    assert done.returncode == 1, done.stderr
    message = (
        "TimeoutError: all_reduce: rank 0 waited 2 s (the process group's timeout) in "
        "collective 2, which every rank had entered"
    )
    assert message in done.stderr
    assert re.search(r"launch: rank 0 \(pid \d+ on .+\) exited with status 1, while rank 1 was "
                     r"still running: " + re.escape(message), done.stderr), done.stderr  # fmt: skip
    assert 2.0 <= elapsed < 20, f"the job ended {elapsed:.1f} s after the fault"


def test_parse_worker_output() -> None:
    result = {"engine": "mpi", "rows": []}
    stdout = f"a warning\nno newline{bench_distributed.MARKER}{json.dumps(result)}\nbye\n"
    assert bench_distributed.parse_worker_output(stdout) == result
    with pytest.raises(ValueError, match="no line with"):
        bench_distributed.parse_worker_output("rank 0 crashed\n")


def test_summarize_bandwidths_and_ratios() -> None:
    result = {
        "engine": "mpi",
        "ranks": 4,
        "rows": [
            {"impl": "mpi4py", "size": 250_000, "number": 3, "samples_s": [1e-3, 3e-3, 2e-3]},
            {"impl": "pylucid", "size": 250_000, "number": 3, "samples_s": [4e-3, 2.5e-3, 2.5e-3]},
        ],
    }
    rows, ratios = bench_distributed.summarize(result)
    raw = rows[0]
    assert raw["bytes"] == 1_000_000 and raw["median_s"] == 2e-3 and raw["min_s"] == 1e-3
    assert raw["algbw_gbps"] == pytest.approx(0.5)
    assert raw["busbw_gbps"] == pytest.approx(0.5 * 2 * 3 / 4)
    assert ratios == [
        {
            "engine": "mpi",
            "size": 250_000,
            "bytes": 1_000_000,
            "ratio": pytest.approx(0.8),
            "ratio_min": pytest.approx(0.4),
        }
    ]


def test_step_time_model() -> None:
    link = {"wire": {"bandwidth_bytes_per_s": 1e9, "latency_s": 1e-4}}
    rows = bench_distributed.predict(0.1, 10**8, link, machines=(2, 4))
    two, four = rows
    assert two["allreduce_s"] == pytest.approx(0.1 + 2e-4)  # 2(N-1)/N = 1, 2(N-1) hops
    assert four["allreduce_s"] == pytest.approx(1.5 * 0.1 + 6e-4)
    assert four["step_s"] == pytest.approx(0.1 + four["allreduce_s"])
    assert four["efficiency"] == pytest.approx(0.1 / four["step_s"])
    assert four["speedup"] == pytest.approx(4 * four["efficiency"])


@needs_mpi
def test_tiny_distributed_bench_has_the_documented_structure() -> None:
    section = bench_distributed.run(
        engines=("mpi",), sizes=(1, 1000), repeats=2, target_s=0.002, compute=False
    )
    assert section["errors"] == [] and section["skipped"] == {}
    assert section["engines"]["mpi"]["zero_copy"] is True
    assert "mpiexec -n 2" in section["engines"]["mpi"]["command"]
    got = {(r["impl"], r["size"]) for r in section["results"]}
    assert got == {(impl, size) for impl in ("mpi4py", "pylucid") for size in (1, 1000)}
    for row in section["results"]:
        assert row["repeats"] == 2 and row["number"] >= 1
        assert 0 < row["min_s"] <= row["median_s"] and row["algbw_gbps"] > 0
    assert [r["size"] for r in section["ratios"]] == [1, 1000]
    assert section["ratio_met"] is None  # no message of 1 MB or more
    assert section["predictions"] is None
    assert json.loads(json.dumps(section, allow_nan=False)) == section
    compute = {"model": "MLP", "gradient_bytes": 4 << 20, "median_s": 0.1, "min_s": 0.09}
    section.update(compute=compute, predictions=bench_distributed.predict(0.1, 4 << 20))
    rendered = bench_distributed.markdown(section)
    assert "| 4 B |" in rendered and "pylucid / raw" in rendered
    assert "| 64 |" in rendered and "Predicted step time" in rendered
    assert "Distributed" in bench_distributed.text(section, "min")


def test_compute_step_is_timed() -> None:
    step = bench_distributed.measure_compute(threads=1, repeats=1)
    assert step["parameters"] == 784 * 1024 + 1024 + 1024 * 256 + 256 + 256 * 10 + 10
    assert step["gradient_bytes"] == 4 * step["parameters"]
    assert step["median_s"] > 0 and len(step["samples_s"]) == 1


def test_distributed_flag_excludes_the_program_modes(capsys: pytest.CaptureFixture[str]) -> None:
    assert pylucid_main(["bench", "--distributed", "--isolated"]) == 2
    assert "--distributed" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        pylucid_main(["bench", "--distributed", "--programs"])
