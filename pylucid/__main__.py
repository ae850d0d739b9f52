"""Command line: ``python -m pylucid demo`` (the main job)."""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    """Parse the command line and run the chosen job."""
    parser = argparse.ArgumentParser(prog="python -m pylucid", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("demo", help="fit a model with a loss in bits, then gradcheck every op")
    args = parser.parse_args(argv)
    if args.command == "demo":
        from pylucid import demo

        return demo.main()
    return 2


if __name__ == "__main__":
    sys.exit(main())
