"""Command line: ``python -m pylucid demo`` (the main job), ``bench`` (the benchmark suite)
and ``docs`` (regenerate the op reference from the registry)."""

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
    docs_parser = commands.add_parser("docs", help="write docs/ops.md from the op registry")
    docs_parser.add_argument("--check", action="store_true", help="fail if it is stale")
    args = parser.parse_args(argv)
    if args.command == "demo":
        from pylucid import demo

        return demo.main()
    if args.command == "bench":
        return bench_cli.main(args)
    if args.command == "docs":
        from pylucid import opdocs

        text = opdocs.render()
        if args.check:
            stale = not opdocs.DOCS_PATH.exists() or opdocs.DOCS_PATH.read_text() != text
            print(f"{opdocs.DOCS_PATH}: {'stale' if stale else 'up to date'}")
            return int(stale)
        opdocs.DOCS_PATH.parent.mkdir(exist_ok=True)
        opdocs.DOCS_PATH.write_text(text)
        print(f"wrote {opdocs.DOCS_PATH}")
        return 0
    return 2


if __name__ == "__main__":
    sys.exit(main())
