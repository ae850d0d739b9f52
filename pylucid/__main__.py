"""Command line: ``python -m pylucid demo`` (the main job) and ``python -m pylucid bench``."""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    """Parse the command line and run the chosen job."""
    parser = argparse.ArgumentParser(prog="python -m pylucid", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("demo", help="fit a model with a loss in bits, then gradcheck every op")
    from pylucid.bench import cli as bench_cli

    bench_parser = commands.add_parser(
        "bench",
        help="time pylucid's kernels and ops against NumPy, PyTorch and MLX",
        description=bench_cli.__doc__,
    )
    bench_cli.add_arguments(bench_parser)
    args = parser.parse_args(argv)
    if args.command == "demo":
        from pylucid import demo

        return demo.main()
    if args.command == "bench":
        return bench_cli.main(args)
    return 2


if __name__ == "__main__":
    sys.exit(main())
