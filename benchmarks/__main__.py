"""python -m benchmarks [decision|memory|...] [--quick] [--json FILE]"""

from __future__ import annotations

import argparse
import json
import platform
import sys
from pathlib import Path

from benchmarks import decision, memory
from benchmarks.stats import table


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks")
    parser.add_argument("which", nargs="*", help="decision, memory (default: all)")
    parser.add_argument("--quick", action="store_true", help="CI-sized: fewer sizes and repetitions")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    known = ["decision", "memory"]
    args.which = args.which or known
    if unknown := set(args.which) - set(known):
        parser.error(f"unknown benchmark(s): {', '.join(sorted(unknown))}; choose from {', '.join(known)}")
    results: dict[str, object] = {"machine": {"python": platform.python_version(), "cpu": platform.processor()}}
    if "decision" in args.which:
        sizes = [1000, 5000] if args.quick else [1000, 5000, 15000]
        rows = decision.run(sizes, repeat=30 if args.quick else 200)
        print("\n## Decision cost in process (parse -> decide -> render)\n")
        print(table(rows, decision.COLUMNS))
        results["decision"] = rows
    if "memory" in args.which:
        rows = memory.run(quick=args.quick)
        print("\n## Memory\n")
        print(table(rows, memory.COLUMNS))
        results["memory"] = rows
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
