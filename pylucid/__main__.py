"""Command line: ``python -m pylucid demo`` (the main job), ``bench`` (the benchmark suite)
and ``docs`` (regenerate the op reference from the registry and the PyTorch compatibility
census from the kept list of names and the code)."""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    """Parse the command line and run the chosen job."""
    parser = argparse.ArgumentParser(prog="python -m pylucid", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    from pylucid import demo

    commands.add_parser(
        "demo",
        help="train small models on every backend, then gradcheck every op (the main job)",
        description=demo.DESCRIPTION,
        epilog=demo.EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    from pylucid.bench import cli as bench_cli

    bench_parser = commands.add_parser(
        "bench",
        help="time pylucid's kernels and ops against NumPy, PyTorch and MLX",
        description=bench_cli.__doc__,
    )
    bench_cli.add_arguments(bench_parser)
    docs_parser = commands.add_parser(
        "docs", help="write docs/ops.md (op registry) and docs/torch-compat.md (census)"
    )
    docs_parser.add_argument("--check", action="store_true", help="fail if either is stale")
    args = parser.parse_args(argv)
    if args.command == "demo":
        return demo.main()
    if args.command == "bench":
        return bench_cli.main(args)
    if args.command == "docs":
        from pylucid import compat_census, opdocs

        pages = [
            (opdocs.DOCS_PATH, opdocs.render()),
            (compat_census.DOCS_PATH, compat_census.render()),
        ]
        stale_pages = 0
        for path, text in pages:
            if args.check:
                stale = not path.exists() or path.read_text() != text
                stale_pages += stale
                print(f"{path}: {'stale' if stale else 'up to date'}")
            else:
                path.parent.mkdir(exist_ok=True)
                path.write_text(text)
                print(f"wrote {path}")
        return int(stale_pages > 0)
    return 2


if __name__ == "__main__":
    sys.exit(main())
