"""``python -m replay [options]``, from the source tree: the replay is a tool for choosing the
defaults (docs/decisions/), not part of the extender that runs in production."""

from __future__ import annotations

import argparse
import sys

from replay.cli import add_parser


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m")
    add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["replay", *(sys.argv[1:] if argv is None else argv)])
    return int(args.run(args))


if __name__ == "__main__":
    sys.exit(main())
