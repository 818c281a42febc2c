"""``python -m extender.replay [options]``: the replay before (or without) the main CLI."""

from __future__ import annotations

import argparse
import sys

from extender.replay.cli import add_parser


def main(argv: list[str] | None = None) -> int:
    # Named as the command it becomes once extender/cli.py registers it.
    parser = argparse.ArgumentParser(prog="hugepage-extender")
    add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["replay", *(sys.argv[1:] if argv is None else argv)])
    return int(args.run(args))


if __name__ == "__main__":
    sys.exit(main())
