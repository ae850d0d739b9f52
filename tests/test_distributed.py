"""pylucid.distributed, nn.parallel.DistributedDataParallel and utils.data.DistributedSampler.

The multi-process tests launch 2 ranks of a script in ``tests/distributed_scripts/``: with
``mpiexec`` (MPI, numba tensors) and ``mlx.launch --backend ring`` (MLX's group, mlx
tensors). ``checks.py`` runs every collective and DDP check in one launch per backend (each
launch costs seconds of imports) and writes what each rank saw as JSON; the tests here
compute what it should have been. ``faults.py`` makes one rank fail while the other waits
in a collective. The sampler, the single-process fallback, the timeout's forms and what a
failed collective leaves (on a fake two-rank group) run in this process.
"""

from __future__ import annotations

import copy
import datetime
import importlib.util
import json
import math
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import pylucid as pl
import pylucid.distributed as dist
from pylucid import nn
from pylucid.distributed.launch import command as launch_command
from pylucid.nn.parallel import DistributedDataParallel
from pylucid.utils.data import DataLoader, DistributedSampler

SCRIPTS = Path(__file__).parent / "distributed_scripts"
BIN = Path(sys.executable).parent
MPIEXEC = BIN / "mpiexec"
MLX_LAUNCH = BIN / "mlx.launch"
MPI_MISSING = importlib.util.find_spec("mpi4py") is None or not MPIEXEC.exists()
MPI_REASON = "mpi4py/mpich not installed (pip install -e '.[distributed]')"
MLX_MISSING = "mlx" not in pl.backends.available() or not MLX_LAUNCH.exists()
MLX_REASON = 'mlx is not installed (pip install "pylucid[mlx]")'
#: One kernel thread per rank: the 2 ranks share the machine's cores.
ENV = {**os.environ, "NUMBA_NUM_THREADS": "1"}
FAULT_LIMIT_S = 30.0

_spec = importlib.util.spec_from_file_location("distributed_checks", SCRIPTS / "checks.py")
assert _spec is not None and _spec.loader is not None
checks = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(checks)


def _launch(launcher: str, script: str, *args: str, timeout: float) -> subprocess.CompletedProcess:
    """Run 2 ranks of ``script`` with ``launcher`` ("mpi" or "mlx")."""
    if launcher == "mpi":  # (pylucid's launcher: the ranks run under python -m mpi4py)
        command = launch_command(str(SCRIPTS / script), args, 2)
    else:
        command = [str(MLX_LAUNCH), "-n", "2", "--backend", "ring", sys.executable,
                   str(SCRIPTS / script), *args]  # fmt: skip
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          env=ENV, start_new_session=True) as job:  # fmt: skip
        try:
            stdout, stderr = job.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(job.pid, signal.SIGKILL)  # the launcher and every rank it started
            job.communicate()
            raise
    return subprocess.CompletedProcess(command, job.returncode, stdout, stderr)


LAUNCHERS = [
    pytest.param("mpi", id="mpi-numba", marks=pytest.mark.skipif(MPI_MISSING, reason=MPI_REASON)),
    pytest.param("mlx", id="mlx-ring", marks=pytest.mark.skipif(MLX_MISSING, reason=MLX_REASON)),
]


@pytest.fixture(scope="module", params=LAUNCHERS)
def ranks(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """What each of the 2 ranks of ``checks.py`` saw (one launch per launcher)."""
    launcher = request.param
    out = tmp_path_factory.mktemp(f"checks-{launcher}")
    device = "cpu" if launcher == "mpi" else "gpu"
    done = _launch(launcher, "checks.py", str(out), device, timeout=240)
    assert done.returncode == 0, f"{launcher} job failed:\n{done.stdout}\n{done.stderr}"
    seen = [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]
    assert [s["rank"] for s in seen] == [0, 1]
    assert {s["backend"] for s in seen} == {launcher}
    return device, seen


# -- (a) the equivalence target ---------------------------------------------------------------
def test_ddp_on_half_batches_equals_one_process_on_the_batch(ranks: Any) -> None:
    _, seen = ranks
    for label, buckets in (("one_bucket", [6]), ("small_buckets", [2, 2, 1, 1])):
        result = seen[0]["equivalence"][label]
        assert result["max_abs_diff"] <= 1e-10, (label, result)
        assert result["moved_by"] > 0.1, "20 SGD steps must move the parameters"
        for rank in seen:
            assert rank["equivalence"][label]["buckets"] == buckets
            assert rank["equivalence"][label]["ranks_differ_by"] == 0.0


# -- (b) collectives of every dtype -----------------------------------------------------------
def _reduce(values: list[np.ndarray], op: str, dtype: str) -> np.ndarray:
    stacked = np.stack(values)
    if dtype == "bool":
        return stacked.all(0) if op == "min" else stacked.any(0)
    if op == "mean":
        return stacked.sum(0) / len(values)
    return {"sum": stacked.sum, "max": stacked.max, "min": stacked.min}[op](0)


def test_collectives_of_every_dtype(ranks: Any) -> None:
    device, seen = ranks
    inputs = {name: [np.array(checks.rank_values(name, r), dtype=np.float64 if name != "bool"
                              else bool) for r in range(2)]  # fmt: skip
              for name in checks.DTYPES}  # fmt: skip
    count = 0
    for rank, result in enumerate(s["collectives"] for s in seen):
        for name, values in inputs.items():
            ops = ["sum", "max", "min"] + (["mean"] if name.startswith(("float", "bf")) else [])
            for op in ops:
                got, dtype, where = result[f"all_reduce/{name}/{op}"]
                assert (dtype, where) == (name, device)
                assert got == _reduce(values, op, name).tolist(), (rank, name, op)
                count += 1
            assert result[f"broadcast/{name}"] == values[1].tolist()
            gathered = [v.tolist() for v in values]
            assert result[f"all_gather/{name}"] == gathered
            assert result[f"all_gather_into/{name}"] == gathered
            pieces = [np.array(checks.rank_values(name, s * rank % 2), dtype=values[0].dtype)
                      for s in range(2)]  # fmt: skip
            assert result[f"reduce_scatter/{name}"] == _reduce(pieces, "sum", name).tolist()
            count += 4
        # 60000 + 60000 overflows float16: reduced in float32, rounded once
        assert result["half_mean/float16"] == [60000.0, 60000.0]
        assert result["half_mean/bfloat16"] == [59904.0, 59904.0]  # (60000 in bfloat16)
    assert count == 2 * (7 * 4 + 3 * 3 + 4 * 4)


# -- (c) no_sync ------------------------------------------------------------------------------
def test_no_sync_accumulation_equals_one_reduction(ranks: Any) -> None:
    _, seen = ranks
    for rank in seen:
        result = rank["no_sync"]
        assert result["inside_equals_local"] == 0.0  # inside: this rank's own gradients
        assert result["inside_ranks_differ_by"] > 1e-3  # ... not averaged with the other's
        assert result["accumulated_vs_once"] <= 1e-12
        assert result["gradient_size"] > 1e-3


# -- (d) mismatched collectives ---------------------------------------------------------------
def test_mismatched_collectives_raise_on_every_rank(ranks: Any) -> None:
    _, seen = ranks
    expected = {
        "shape": ("all_reduce", "rank 0: all_reduce(argument 0) of float32 (2,)",
                  "rank 1: all_reduce(argument 0) of float32 (3,)"),
        "dtype": ("broadcast", "rank 0: broadcast(argument 0) of float32 (3,)",
                  "rank 1: broadcast(argument 0) of float64 (3,)"),
        "op": ("all_reduce", "rank 0: all_reduce(argument 2)", "rank 1: all_reduce(argument 0)"),
    }  # fmt: skip
    for case, fragments in expected.items():
        messages = [rank["mismatches"][case] for rank in seen]
        assert messages[0] == messages[1], case
        assert messages[0].startswith(f"ValueError: {fragments[0]}: the ranks disagree")
        assert all(fragment in messages[0] for fragment in fragments[1:]), messages[0]


def test_ddp_wrapper_state_and_errors_across_ranks(ranks: Any) -> None:
    _, seen = ranks
    first, second = (rank["wrapper"] for rank in seen)
    assert first["weight_after_init"] == second["weight_after_init"]  # rank 0's
    assert first["buffer_after_init"] == second["buffer_after_init"] == [0.0] * 3
    assert first["buffer_after_forward"] == second["buffer_after_forward"] == [5.0] * 3
    assert (first["buffer_no_broadcast"], second["buffer_no_broadcast"]) == ([5.0] * 3, [6.0] * 3)
    for result in (first, second):
        assert result["replicas_differ"].startswith("ValueError: DistributedDataParallel: the "
                                                    "ranks' modules differ")  # fmt: skip
        assert "rank 1: 2 parameters and buffers, 9 parameter elements" in result["replicas_differ"]
        assert result["unused"].startswith("RuntimeError: DistributedDataParallel: the previous "
                                           "backward gave no gradient to parameter(s) "
                                           "['unused.weight', 'unused.bias']")  # fmt: skip
        assert result["second_gradient"].startswith(
            "RuntimeError: DistributedDataParallel: parameter 'used.bias' received a second "
            "gradient before the reduction of the step finished: the previous backward gave no "
            "gradient to ['unused.weight', 'unused.bias']"
        )
        assert result["find_unused"].startswith("NotImplementedError: DistributedDataParallel")


def test_ddp_buckets_by_dtype_and_skips_frozen_parameters(ranks: Any) -> None:
    _, seen = ranks
    for rank in seen:
        result = rank["mixed"]
        assert result["buckets"] == [["float32", "float32"], ["float64", "float64"]]
        assert result["own_differ_by"] > 1e-3
        assert result["vs_mean_of_own"] <= 1e-5  # (float32's rounding of the mean)
        assert result["frozen_grad_is_none"] and result["frozen_equal"]


def test_distributed_sampler_defaults_to_the_group(ranks: Any) -> None:
    torch_data = pytest.importorskip("torch.utils.data")
    _, seen = ranks
    for r, rank in enumerate(seen):
        oracle = torch_data.DistributedSampler(range(7), num_replicas=2, rank=r, shuffle=False)
        assert rank["sampler"] == list(oracle)


# -- (e) faults -------------------------------------------------------------------------------
def _fault(mode: str) -> tuple[subprocess.CompletedProcess, float]:
    """The finished job of ``faults.py MODE`` and the seconds from the fault to its end."""
    done = _launch("mpi", "faults.py", mode, timeout=FAULT_LIMIT_S + 30)
    ended = time.time()
    stamps = [line for line in done.stdout.splitlines() if line.startswith("FAULT AT ")]
    assert len(stamps) == 1, done.stdout + done.stderr
    return done, ended - float(stamps[0].split()[-1])


@pytest.mark.skipif(MPI_MISSING, reason=MPI_REASON)
def test_rank_raising_ends_the_job() -> None:
    done, elapsed = _fault("raise")
    # (rank 1's traceback is written before the abort, but the abort can cut mpiexec's
    # forwarding of it, so its text is not asserted)
    assert done.returncode != 0
    assert elapsed < FAULT_LIMIT_S, f"the job took {elapsed:.1f} s to end after the fault"
    assert "the all_reduce returned" not in done.stdout


@pytest.mark.skipif(MPI_MISSING, reason=MPI_REASON)
def test_rank_exiting_ends_the_job() -> None:
    """A rank leaving by sys.exit(3) while the other waits in all_reduce: the launcher's
    ``python -m mpi4py`` aborts the job."""
    done, elapsed = _fault("exit")
    assert done.returncode != 0
    assert elapsed < FAULT_LIMIT_S, f"the job ended {elapsed:.1f} s after the fault"


@pytest.mark.skipif(MPI_MISSING, reason=MPI_REASON)
def test_timeout_raises_on_the_waiting_rank() -> None:
    done, elapsed = _fault("timeout")
    assert done.returncode != 0
    assert 2.0 <= elapsed < FAULT_LIMIT_S, f"the job ended {elapsed:.1f} s after the fault"
    assert re.search(r"rank 0: TimeoutError: all_reduce: rank 0 waited 2 s \(the process group's "
                     r"timeout, init\(timeout=\.\.\.\)\) in collective 2 for rank 1, which had "
                     r"not entered it", done.stdout), done.stdout  # fmt: skip
    assert "the all_reduce returned" not in done.stdout


# -- (f) DistributedSampler against PyTorch's -------------------------------------------------
def test_distributed_sampler_split_and_padding_equal_torch() -> None:
    torch_data = pytest.importorskip("torch.utils.data")
    compared = 0
    for n in (0, 1, 2, 5, 7, 10, 13):
        for replicas in (1, 2, 3, 4, 8):
            for drop_last in (False, True):
                for rank in range(replicas):
                    ours = DistributedSampler(range(n), replicas, rank, shuffle=False,
                                              drop_last=drop_last)  # fmt: skip
                    theirs = torch_data.DistributedSampler(
                        range(n), replicas, rank, shuffle=False, drop_last=drop_last
                    )
                    assert list(ours) == list(theirs), (n, replicas, rank, drop_last)
                    assert len(ours) == len(theirs)
                    assert ours.total_size == theirs.total_size
                    compared += 1
    assert compared == 7 * 18 * 2


def test_distributed_sampler_shuffle_is_one_permutation_per_epoch() -> None:
    def shares(epoch: int, seed: int = 0) -> list[list[int]]:
        samplers = [DistributedSampler(range(10), 3, r, seed=seed) for r in range(3)]
        for sampler in samplers:
            sampler.set_epoch(epoch)
        return [list(s) for s in samplers]

    first = shares(0)
    assert [len(s) for s in first] == [4, 4, 4]
    everything = sorted(sum(first, []))
    assert sorted(set(everything)) == list(range(10))  # every index, 2 of them twice
    assert len(everything) == 12
    assert shares(0) == first  # the same order on every rank and every call
    assert shares(1) != first
    assert shares(0, seed=5) != first
    dropped = [list(DistributedSampler(range(10), 3, r, drop_last=True)) for r in range(3)]
    assert [len(s) for s in dropped] == [3, 3, 3]
    assert len(set(sum(dropped, []))) == 9
    loader = DataLoader(pl.arange(10), batch_size=2, sampler=DistributedSampler(range(10), 2, 1))
    assert sum(len(b) for b in loader) == 5


def test_distributed_sampler_errors() -> None:
    with pytest.raises(ValueError, match=r"DistributedSampler: invalid rank 2, rank should be "
                                         r"in the interval \[0, 1\]"):  # fmt: skip
        DistributedSampler(range(4), num_replicas=2, rank=2)
    with pytest.raises(ValueError, match="DistributedSampler: num_replicas should be a positive"):
        DistributedSampler(range(4), num_replicas=0, rank=0)
    with pytest.raises(ValueError, match="DistributedSampler: rank should be a non-negative"):
        DistributedSampler(range(4), num_replicas=2, rank=-1)


# -- (g) the single-process fallback ----------------------------------------------------------
@pytest.fixture
def single_process() -> Any:
    """``init()`` without a launcher; the group is left again afterwards."""
    assert not dist.is_initialized()
    group = dist.init()
    yield group
    dist.destroy()


def test_single_process_fallback_is_the_identity(single_process: Any, device: str) -> None:
    assert (dist.get_world_size(), dist.get_rank(), dist.get_backend()) == (1, 0, "single")
    pl.manual_seed(0)
    net = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2)).to(device)
    plain = copy.deepcopy(net)
    before = [p.numpy().copy() for p in net.parameters()]
    ddp = DistributedDataParallel(net)
    assert ddp.module is net
    assert all(a is b for a, b in zip(ddp.parameters(), net.parameters()))
    assert all(np.array_equal(p.numpy(), b) for p, b in zip(net.parameters(), before))
    x = pl.randn(5, 3, device=device)
    with ddp.no_sync():
        ddp(x).square().sum().backward()
    ddp(x).square().sum().backward()
    plain(x).square().sum().backward()
    plain(x).square().sum().backward()
    for ours, theirs in zip(net.parameters(), plain.parameters()):
        assert np.array_equal(ours.grad.numpy(), theirs.grad.numpy())
    keys = list(ddp.state_dict())
    assert keys == [f"module.{k}" for k in net.state_dict()]
    assert keys[0] == "module.0.weight"
    fresh = DistributedDataParallel(copy.deepcopy(plain))
    fresh.load_state_dict(ddp.state_dict())
    assert np.array_equal(fresh.module[0].weight.numpy(), net[0].weight.numpy())


def test_init_timeout_is_seconds_or_a_timedelta() -> None:
    assert dist.default_pg_timeout == datetime.timedelta(minutes=30)
    cases = [(None, 1800.0), (5, 5.0), (0.25, 0.25), (datetime.timedelta(seconds=3), 3.0),
             (math.inf, math.inf)]  # fmt: skip
    for timeout, seconds in cases:
        assert dist.init("single", timeout=timeout).timeout == seconds
        dist.destroy()
    with pytest.raises(ValueError, match=r"init: timeout must be positive \(math.inf for none\)"):
        dist.init("single", timeout=0)
    with pytest.raises(TypeError, match="timeout must be seconds or a datetime.timedelta, got str"):
        dist.init_process_group("single", timeout="30")
    assert not dist.is_initialized()


class TwinGroup(dist.ProcessGroup):
    """Rank 0 of two in one process: the other rank holds ones, so a sum adds 1 (a mean is
    (x + 1) / 2); its arrival at collective ``fail_at`` times out."""

    name = "twin"

    def __init__(self, fail_at: int) -> None:
        super().__init__(timeout=2.0)
        self.rank, self.size, self.fail_at = 0, 2, fail_at

    def _exchange(self, code: np.ndarray, what: str) -> np.ndarray:
        if self.calls == self.fail_at:
            raise TimeoutError(f"{what}: rank 0 waited 2 s for rank 1")
        return np.stack([code, code])

    def all_reduce(self, array: np.ndarray, op: str) -> np.ndarray:
        np.add(array, 1, out=array)
        return array

    def broadcast(self, array: np.ndarray, src: int) -> np.ndarray:
        return array

    def all_gather(self, array: np.ndarray) -> np.ndarray:
        return np.stack([array, array])


def test_a_failed_collective_leaves_its_tensor_and_the_group_refuses_more() -> None:
    group = TwinGroup(fail_at=2)
    t = pl.tensor([1.0, 2.0])
    dist.all_reduce(t, group=group)
    assert t.tolist() == [2.0, 3.0]
    with pytest.raises(TimeoutError, match="all_reduce: rank 0 waited 2 s for rank 1"):
        dist.all_reduce(t, group=group)
    assert t.tolist() == [2.0, 3.0]  # (the wait comes before the data moves)
    message = (r"barrier: the process group cannot be used after an earlier collective failed "
               r"\(TimeoutError: all_reduce: rank 0 waited 2 s for rank 1\)")  # fmt: skip
    with pytest.raises(RuntimeError, match=message):
        dist.barrier(group)
    assert group.calls == 2


def test_ddp_after_a_failed_gradient_reduction() -> None:
    """The backward raises the collective's error; the parameters are untouched, the
    buckets reduced before hold the average, the failed one this rank's own gradients; the
    next forward works and the next backward raises the group's refusal."""
    pl.manual_seed(0)
    net = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2)).double()
    local = copy.deepcopy(net)
    group = TwinGroup(fail_at=0)
    ddp = DistributedDataParallel(net, process_group=group, bucket_cap_mb=1e-6)  # a bucket each
    assert [len(b) for b in ddp._reducer.buckets] == [1, 1, 1, 1]
    group.fail_at = group.calls + 2  # (the second bucket: "2.weight", after "2.bias")
    before = [p.numpy().copy() for p in net.parameters()]
    x = pl.randn(5, 3, dtype=pl.float64)
    with pytest.raises(TimeoutError, match="all_reduce: rank 0 waited 2 s for rank 1"):
        ddp(x).square().sum().backward()
    local(x).square().sum().backward()
    assert all(np.array_equal(p.numpy(), b) for p, b in zip(net.parameters(), before))
    own = {name: p.grad.numpy() for name, p in local.named_parameters()}
    assert np.allclose(net[2].bias.grad.numpy(), (own["2.bias"] + 1) / 2)  # reduced
    assert np.array_equal(net[2].weight.grad.numpy(), own["2.weight"])  # the failed bucket
    out = ddp(x)  # (not "the previous backward gave no gradient to ...")
    with pytest.raises(RuntimeError, match="cannot be used after an earlier collective failed"):
        out.square().sum().backward()


def test_ddp_argument_errors() -> None:
    net = nn.Linear(2, 2)
    with pytest.raises(NotImplementedError, match="find_unused_parameters=True is not supported"):
        DistributedDataParallel(net, find_unused_parameters=True)
    with pytest.raises(ValueError, match="bucket_cap_mb must be positive, got 0"):
        DistributedDataParallel(net, bucket_cap_mb=0)
    with pytest.raises(ValueError, match="one device per process"):
        DistributedDataParallel(net, device_ids=[0, 1])
    with pytest.raises(TypeError, match="expected a pylucid.nn.Module, got Tensor"):
        DistributedDataParallel(pl.zeros(2))
    with pytest.raises(TypeError, match="process_group must be a pylucid.distributed"):
        DistributedDataParallel(net, process_group="world")


def test_pytorchs_launcher_variables_and_backend_names(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each rank sees RANK/WORLD_SIZE/LOCAL_RANK/LOCAL_WORLD_SIZE as under torchrun (nanoGPT
    decides whether it is distributed by RANK); 'gloo' is the automatic choice; 'nccl' and
    a job torchrun started (no MPI: each rank would silently train alone) raise."""
    from pylucid.distributed.run import torch_launcher_variables

    mpich = {"PMI_RANK": "1", "PMI_SIZE": "2", "MPI_LOCALRANKID": "1", "MPI_LOCALNRANKS": "2"}
    assert torch_launcher_variables(mpich) == {
        "RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"
    }  # fmt: skip
    assert torch_launcher_variables({**mpich, "RANK": "0"}).get("RANK") is None
    for name in ("PMI_RANK", "PMI_SIZE", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "MPI_LOCALRANKID",
                 "MLX_RANK", "WORLD_SIZE"):  # fmt: skip
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(ValueError, match="'nccl' is PyTorch's CUDA backend.*'gloo'"):
        dist.init_process_group("nccl")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    with pytest.raises(RuntimeError, match="torchrun.*pylucid.distributed.launch -n 2"):
        dist.init_process_group("gloo")
    assert not dist.is_initialized()
    monkeypatch.delenv("WORLD_SIZE")
    try:
        assert dist.init_process_group(backend="gloo").size == 1
    finally:
        dist.destroy()
