"""One rank of a failing 2-rank job (tests/test_distributed.py), launched by ``mpiexec``.

    python faults.py MODE

Rank 0 waits in an all_reduce while rank 1, after printing ``FAULT AT <time.time()>``:

- ``raise``: raises an exception;
- ``exit``: calls ``sys.exit(3)``;
- ``timeout``: never joins (sleeps 60 s); the group has ``timeout=2``, so rank 0 raises
  TimeoutError (and prints it).

The job must end, non-zero, soon after the fault.
"""

from __future__ import annotations

import sys
import time

import pylucid as pl
import pylucid.distributed as dist


def main() -> None:
    mode = sys.argv[1]
    dist.init(timeout=2 if mode == "timeout" else None)
    dist.barrier()
    if dist.get_rank() == 0:
        try:
            dist.all_reduce(pl.ones(3))
        except TimeoutError as exc:
            print(f"rank 0: TimeoutError: {exc}", flush=True)
            time.sleep(0.5)  # (time to forward the line before the job is aborted)
            raise
        print("rank 0: the all_reduce returned", flush=True)
        return
    print(f"FAULT AT {time.time()}", flush=True)
    if mode == "raise":
        raise RuntimeError("rank 1 fails on purpose")
    if mode == "exit":
        sys.exit(3)
    time.sleep(60)


if __name__ == "__main__":
    main()
