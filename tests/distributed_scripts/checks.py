"""One rank of the 2-rank checks of tests/test_distributed.py (collectives, mismatches,
DistributedDataParallel, no_sync, DistributedSampler), launched by ``mpiexec`` or
``mlx.launch``.

    python checks.py OUT_DIR DEVICE      # DEVICE: "cpu" (numba) or "gpu" (mlx)

Each rank writes what it saw to ``OUT_DIR/rank<r>.json``; the test computes what it should
have seen and compares.
"""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

import pylucid as pl
import pylucid.distributed as dist
from pylucid import nn
from pylucid.nn.parallel import DistributedDataParallel
from pylucid.utils.data import DistributedSampler

DTYPES = ("bool", "int32", "int64", "float16", "bfloat16", "float32", "float64")


def rank_values(dtype: str, rank: int) -> list[Any]:
    """This rank's input for the collectives of ``dtype`` (exact in every dtype)."""
    if dtype == "bool":
        return [rank == 0, True, False, rank == 1]
    if dtype.startswith("int"):
        return [rank + 1, -2 * rank, 3, 5 * rank - 1]
    return [rank + 0.5, -1.25 * rank, 3.0, 2.0**rank]


def collectives(device: str, rank: int, size: int) -> dict[str, Any]:
    """Every collective on every dtype; the results as lists."""
    seen: dict[str, Any] = {}
    for name in DTYPES:
        dtype = getattr(pl, "bool_" if name == "bool" else name)

        def make(values: list[Any], dtype: Any = dtype) -> pl.Tensor:
            return pl.tensor(values, dtype=dtype, device=device)

        mine = rank_values(name, rank)
        ops = ["sum", "max", "min"] + (["mean"] if dtype.is_floating_point else [])
        for op in ops:
            t = make(mine)
            dist.all_reduce(t, op)
            seen[f"all_reduce/{name}/{op}"] = [t.tolist(), t.dtype.name, t.device]
        t = make(mine)
        dist.broadcast(t, src=1)
        seen[f"broadcast/{name}"] = t.tolist()
        seen[f"all_gather/{name}"] = [g.tolist() for g in dist.all_gather(None, make(mine))]
        into = [make(rank_values(name, 0)) for _ in range(size)]
        dist.all_gather(into, make(mine))
        seen[f"all_gather_into/{name}"] = [g.tolist() for g in into]
        pieces = [make(rank_values(name, rank * i % size)) for i in range(size)]
        out = make(mine)
        dist.reduce_scatter(out, pieces, "sum")
        seen[f"reduce_scatter/{name}"] = out.tolist()
    for name in ("float16", "bfloat16"):  # beyond float16's range summed, not averaged
        t = pl.tensor([60000.0, 60000.0], dtype=getattr(pl, name), device=device)
        dist.all_reduce(t, "mean")
        seen[f"half_mean/{name}"] = t.tolist()
    return seen


def mismatches(device: str, rank: int) -> dict[str, str]:
    """Collectives whose ranks disagree: the error each rank raised."""
    seen = {}
    cases = {
        "shape": lambda: dist.all_reduce(pl.zeros(rank + 2, device=device)),
        "dtype": lambda: dist.broadcast(
            pl.zeros(3, dtype=pl.float32 if rank == 0 else pl.float64, device=device)
        ),
        "op": lambda: dist.all_reduce(pl.zeros(3, device=device), "sum" if rank else "max"),
    }
    for case, call in cases.items():
        try:
            call()
            seen[case] = "no error"
        except ValueError as exc:
            seen[case] = f"ValueError: {exc}"
    return seen


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(6, 16)
        self.fc2 = nn.Linear(16, 8)
        self.fc3 = nn.Linear(8, 3)

    def forward(self, x: pl.Tensor) -> pl.Tensor:
        return self.fc3(pl.tanh(self.fc2(pl.tanh(self.fc1(x)))))


def model(device: str, seed: int) -> MLP:
    pl.manual_seed(seed)
    return MLP().to(device=device, dtype=pl.float64)


def batch(device: str) -> tuple[pl.Tensor, pl.Tensor]:
    source = np.random.default_rng(7)
    x = pl.tensor(source.normal(size=(16, 6)), dtype=pl.float64, device=device)
    y = pl.tensor(source.normal(size=(16, 3)), dtype=pl.float64, device=device)
    return x, y


def train(net: nn.Module, x: pl.Tensor, y: pl.Tensor, steps: int = 20) -> None:
    optimizer = pl.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    for _ in range(steps):
        optimizer.zero_grad()
        nn.functional.mse_loss(net(x), y).backward()
        optimizer.step()


def flat(values: list[pl.Tensor]) -> np.ndarray:
    return np.concatenate([np.asarray(v.detach().to("cpu").numpy()).ravel() for v in values])


def equivalence(device: str, rank: int, size: int) -> dict[str, Any]:
    """20 SGD steps: each rank on its half of the batch under DDP, against one process on
    the whole batch (on rank 0). Bucket caps of 25 MB (one bucket) and 100 bytes (4)."""
    x, y = batch(device)
    half = x.shape[0] // size
    mine = slice(rank * half, (rank + 1) * half)
    start = model(device, seed=0)  # rank 0's initial parameters
    reference = copy.deepcopy(start)
    train(reference, x, y)
    expected = flat(list(reference.parameters()))
    seen: dict[str, Any] = {}
    for label, cap_mb in (("one_bucket", 25), ("small_buckets", 100 / 2**20)):
        net = model(device, seed=rank)  # the ranks start apart: DDP broadcasts rank 0's
        params = list(net.parameters())
        ddp = DistributedDataParallel(net, bucket_cap_mb=cap_mb)
        assert all(a is b for a, b in zip(ddp.parameters(), params))
        train(ddp, x[mine], y[mine])
        final = flat(params)
        gathered = [g.numpy() for g in dist.all_gather(None, pl.tensor(final))]
        seen[label] = {
            "buckets": [len(b) for b in ddp._reducer.buckets],
            "ranks_differ_by": float(np.abs(gathered[0] - gathered[1]).max()),
            "max_abs_diff": float(np.abs(final - expected).max()),
            "moved_by": float(np.abs(expected - flat(list(start.parameters()))).max()),
        }
    return seen


def no_sync(device: str, rank: int) -> dict[str, Any]:
    """Accumulating microbatch 1 inside no_sync then microbatch 2 outside, against one
    synchronised backward of both losses; and the local gradients inside no_sync."""
    source = np.random.default_rng(100 + rank)
    batches = [(pl.tensor(source.normal(size=(4, 6)), dtype=pl.float64, device=device),
                pl.tensor(source.normal(size=(4, 3)), dtype=pl.float64, device=device))
               for _ in range(2)]  # fmt: skip
    net = model(device, seed=3)
    once, local = copy.deepcopy(net), copy.deepcopy(net)
    ddp = DistributedDataParallel(net)
    loss = nn.functional.mse_loss
    with ddp.no_sync():
        loss(ddp(batches[0][0]), batches[0][1]).backward()
    inside = flat([p.grad for p in net.parameters()])
    loss(local(batches[0][0]), batches[0][1]).backward()
    loss(ddp(batches[1][0]), batches[1][1]).backward()
    accumulated = flat([p.grad for p in net.parameters()])
    ddp_once = DistributedDataParallel(once)
    (loss(ddp_once(batches[0][0]), batches[0][1])
     + loss(ddp_once(batches[1][0]), batches[1][1])).backward()  # fmt: skip
    reduced_once = flat([p.grad for p in once.parameters()])
    inside_all = [g.numpy() for g in dist.all_gather(None, pl.tensor(inside))]
    return {
        "inside_equals_local": float(
            np.abs(inside - flat([p.grad for p in local.parameters()])).max()
        ),
        "inside_ranks_differ_by": float(np.abs(inside_all[0] - inside_all[1]).max()),
        "accumulated_vs_once": float(np.abs(accumulated - reduced_once).max()),
        "gradient_size": float(np.abs(reduced_once).max()),
    }


class WithBuffer(nn.Module):
    def __init__(self, rank: int) -> None:
        super().__init__()
        self.fc = nn.Linear(2, 2)
        self.register_buffer("stat", pl.full((3,), float(rank)))

    def forward(self, x: pl.Tensor) -> pl.Tensor:
        return self.fc(x) + self.stat[:2]


class Partial(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.used = nn.Linear(2, 2)
        self.unused = nn.Linear(2, 2)

    def forward(self, x: pl.Tensor) -> pl.Tensor:
        return self.used(x)


class Mixed(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.double_fc = nn.Linear(3, 2).double()
        self.single_fc = nn.Linear(3, 2)
        self.frozen = nn.Linear(3, 2).requires_grad_(False)

    def forward(self, x: pl.Tensor) -> pl.Tensor:
        double = self.double_fc(x.double()).square().sum()
        return double + self.single_fc(x).square().sum() + self.frozen(x).sum()


def mixed(device: str, rank: int) -> dict[str, Any]:
    """A float64 and a float32 layer (a bucket each) and a frozen one: the gradients are the
    mean of the ranks' own; the frozen layer is rank 0's and gets none."""
    pl.manual_seed(rank)
    net = Mixed().to(device)
    ddp = DistributedDataParallel(net)
    local = copy.deepcopy(net)
    x = pl.tensor(np.random.default_rng(rank).normal(size=(4, 3)), dtype=pl.float32, device=device)
    ddp(x).backward()
    local(x).backward()
    trained = [p for p in net.parameters() if p.requires_grad]
    own = flat([p.grad for p in local.parameters() if p.requires_grad])
    everyone = [g.numpy() for g in dist.all_gather(None, pl.tensor(own))]
    frozen = [g.tolist() for g in dist.all_gather(None, net.frozen.weight.detach().to("cpu"))]
    return {
        "buckets": [[ddp._reducer.params[i].dtype.name for i in b] for b in ddp._reducer.buckets],
        "vs_mean_of_own": float(np.abs(flat([p.grad for p in trained]) - sum(everyone) / 2).max()),
        "own_differ_by": float(np.abs(everyone[0] - everyone[1]).max()),
        "frozen_grad_is_none": net.frozen.weight.grad is None,
        "frozen_equal": frozen[0] == frozen[1],
    }


def wrapper(device: str, rank: int) -> dict[str, Any]:
    """Buffers broadcast at construction and in forward, differing replicas, unused
    parameters, find_unused_parameters."""
    seen: dict[str, Any] = {}
    pl.manual_seed(rank)
    net = WithBuffer(rank).to(device)
    ddp = DistributedDataParallel(net)
    seen["weight_after_init"] = net.fc.weight.tolist()
    seen["buffer_after_init"] = net.stat.tolist()
    net.stat.copy_(pl.full((3,), rank + 5.0, device=device))
    ddp(pl.ones(1, 2, device=device))
    seen["buffer_after_forward"] = net.stat.tolist()
    quiet = DistributedDataParallel(net, broadcast_buffers=False)
    net.stat.copy_(pl.full((3,), rank + 5.0, device=device))
    quiet(pl.ones(1, 2, device=device))
    seen["buffer_no_broadcast"] = net.stat.tolist()
    try:
        DistributedDataParallel(nn.Linear(2, 2 + rank).to(device))
        seen["replicas_differ"] = "no error"
    except ValueError as exc:
        seen["replicas_differ"] = f"ValueError: {exc}"
    partial = DistributedDataParallel(Partial().to(device))
    x = pl.ones(1, 2, device=device)
    partial(x).sum().backward()
    try:
        partial(x)
        seen["unused"] = "no error"
    except RuntimeError as exc:
        seen["unused"] = f"RuntimeError: {exc}"
    out = partial(x)  # (the error abandoned that step: a new one starts)
    out.sum().backward(retain_graph=True)
    try:
        out.sum().backward()
        seen["second_gradient"] = "no error"
    except RuntimeError as exc:
        seen["second_gradient"] = f"RuntimeError: {exc}"
    try:
        DistributedDataParallel(nn.Linear(2, 2), find_unused_parameters=True)
        seen["find_unused"] = "no error"
    except NotImplementedError as exc:
        seen["find_unused"] = f"NotImplementedError: {exc}"
    return seen


def main() -> None:
    out, device = Path(sys.argv[1]), sys.argv[2]
    dist.init()
    rank, size = dist.get_rank(), dist.get_world_size()
    assert size == 2, size
    seen = {
        "rank": rank,
        "backend": dist.get_backend(),
        "collectives": collectives(device, rank, size),
        "mismatches": mismatches(device, rank),
        "equivalence": equivalence(device, rank, size),
        "no_sync": no_sync(device, rank),
        "wrapper": wrapper(device, rank),
        "mixed": mixed(device, rank),
        "sampler": list(DistributedSampler(range(7), shuffle=False)),
    }
    dist.barrier()
    (out / f"rank{rank}.json").write_text(json.dumps(seen))


if __name__ == "__main__":
    main()
