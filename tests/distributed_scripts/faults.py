"""One rank of a failing 2-rank job (tests/test_distributed.py, through ``mpiexec``, and
tests/test_distributed_launch.py, through the launcher).

    python faults.py MODE

The rank that makes the fault prints ``FAULT AT <time.time()>`` first. Rank 0 waits in an
all_reduce while rank 1:

- ``raise``: raises an exception;
- ``exit``: calls ``sys.exit(3)``;
- ``timeout``: never joins (sleeps 60 s); the group has ``timeout=2``, so rank 0 raises
  TimeoutError (and prints it);
- ``stall``: joins, then stops (SIGSTOP) before the data moves; the group has
  ``timeout=2``, so rank 0's watchdog ends the job.

The job must end, non-zero, soon after the fault. And, in a loop of 10 all_reduces:

- ``vanish``: rank 1 leaves by ``os._exit(0)`` at the third; the job must fail;
- ``extra``: rank 1 finishes its loop; rank 0, 0.5 s later, runs one all_reduce more, which
  raises RankLeftError at once (no timeout is set); the job must fail;
- ``early``: rank 1 finishes its loop; rank 0 works 1 s more without a collective and
  finishes; the job must succeed.

Each rank that finishes prints ``rank R finished``.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from typing import Any

import pylucid as pl
import pylucid.distributed as dist


def one_fault(mode: str, rank: int) -> None:
    if rank == 0:
        try:
            dist.all_reduce(pl.ones(3))
        except TimeoutError as exc:
            print(f"rank 0: TimeoutError: {exc}", flush=True)
            time.sleep(0.5)  # (time to forward the line before the job is aborted)
            raise
        print("rank 0: the all_reduce returned", flush=True)
        return
    if mode == "stall":

        def stop(*args: Any) -> None:
            os.kill(os.getpid(), signal.SIGSTOP)

        dist.default_group().all_reduce = stop  # (after the arrival: the data phase)
        print(f"FAULT AT {time.time()}", flush=True)
        dist.all_reduce(pl.ones(3))
        return
    print(f"FAULT AT {time.time()}", flush=True)
    if mode == "raise":
        raise RuntimeError("rank 1 fails on purpose")
    if mode == "exit":
        sys.exit(3)
    time.sleep(60)


def loop(mode: str, rank: int) -> None:
    for step in range(10):
        dist.all_reduce(pl.ones(3))
        if mode == "vanish" and rank == 1 and step == 2:
            print(f"FAULT AT {time.time()}", flush=True)
            os._exit(0)
    if rank == 0 and mode == "extra":
        time.sleep(0.5)
        print(f"FAULT AT {time.time()}", flush=True)
        dist.all_reduce(pl.ones(3))
    if rank == 0 and mode == "early":
        time.sleep(1.0)


def main() -> None:
    mode = sys.argv[1]
    dist.init(timeout=2 if mode in ("timeout", "stall") else None)
    rank = dist.get_rank()
    dist.barrier()
    if mode in ("vanish", "extra", "early"):
        loop(mode, rank)
    else:
        one_fault(mode, rank)
    print(f"rank {rank} finished", flush=True)


if __name__ == "__main__":
    main()
