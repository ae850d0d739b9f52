"""Instructions per step of a program, counted by valgrind: repeatable where wall-clock
timings on a shared machine are not (the same statement can take 1.5x longer a minute
later; instruction counts agree to about 2%).

    python benchmarks/instruction_counts.py mlp      # the MLP step of the bench programs
    python benchmarks/instruction_counts.py chain    # 150-op chain, forward + backward

Runs this file under ``valgrind --tool=cachegrind`` twice (no steps, then ``--steps`` of
them, both after the same warm-up) and prints the difference per step, so imports and JIT
loading cancel. The first run after a change of CPU also recompiles Numba's cache under
valgrind's CPU model; it is repeated until two baselines agree.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys


def _program(name: str):  # noqa: ANN202  (a step function)
    import numpy as np

    import pylucid as pl
    from pylucid.bench import programs

    if name == "chain":

        def chain() -> None:
            x = pl.tensor([0.5], requires_grad=True)
            y = x
            for _ in range(50):
                y = pl.log2(y * 3.0 + 2.0)
            y.sum().backward()

        return chain
    problem = programs.mlp_problem()
    x, onehot = pl.tensor(problem.x), pl.tensor(problem.onehot)
    w1, b1, w2, b2 = [pl.tensor(np.copy(p), requires_grad=True) for p in problem.params]

    def mlp() -> None:
        logits = pl.tanh(x @ w1 + b1) @ w2 + b2
        loss = (-(onehot * pl.log_softmax(logits, axis=1)).sum(axis=1)).mean()
        loss.backward()
        with pl.no_grad():
            for p in (w1, b1, w2, b2):
                p -= 0.1 * p.grad
                p.grad = None

    return mlp


def _count(name: str, steps: int) -> int:
    command = [
        "valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null",
        sys.executable, __file__, name, "--run", str(steps),
    ]  # fmt: skip
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=True)
    found = re.search(r"I\s+refs:\s+([\d,]+)", done.stderr)
    if found is None:
        raise RuntimeError(f"no instruction count in valgrind's output:\n{done.stderr[-2000:]}")
    return int(found.group(1).replace(",", ""))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("program", choices=["mlp", "chain"])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--run", type=int, help=argparse.SUPPRESS)  # (the valgrind child)
    args = parser.parse_args()
    if args.run is not None:
        step = _program(args.program)
        for _ in range(5 + args.run):
            step()
        return
    baseline = _count(args.program, 0)
    while True:  # a first run may compile Numba's cache for valgrind's CPU model
        again = _count(args.program, 0)
        if abs(again - baseline) < 0.01 * baseline:
            break
        baseline = again
    total = _count(args.program, args.steps)
    print(f"{args.program}: {(total - baseline) / args.steps / 1e6:.2f} M instructions per step")


if __name__ == "__main__":
    main()
