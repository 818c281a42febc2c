"""``python -m replay``: the argparse command over ``run_replay``."""

from __future__ import annotations

import argparse
import dataclasses
import shlex
import sys
from pathlib import Path
from typing import Any

from replay.model import Blind, Ladder, ReplayError, ReplaySettings, ScaleSettings, VariantGroup, parse_variant
from replay.report import REPORT_FILE
from replay.run import full_settings, quick_settings, run_replay
from replay.scenario import load_scenario, load_trace

DEFAULT_OUT = Path("replay-out")


def _levels(text: str) -> tuple[int, ...]:
    try:
        levels = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not levels or min(levels) < 0:
        raise argparse.ArgumentTypeError("levels must be >= 0")
    return levels


def _integer(text: str, minimum: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if value < minimum:
        raise argparse.ArgumentTypeError(f"must be >= {minimum}")
    return value


def _non_negative_int(text: str) -> int:
    return _integer(text, 0)


def _positive_int(text: str) -> int:
    return _integer(text, 1)


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError("must be > 0")
    return value


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``replay`` on an ``add_subparsers()`` object; the handler is ``args.run(args)``."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "replay",
        help="compare fit-filter configurations on a simulated cluster, with the extender's real decision code",
        description=(
            "Drive the extender's filter, prioritize and in-flight accounting through a simulated cluster"
            " (scheduler blind to hugepages, nodes that fail pods their real pool cannot hold), for a matrix"
            " of modes, widenings, K and in-flight settings; write report.md, summary.json and PNG plots."
        ),
    )
    parser.add_argument("--quick", action="store_true", help="small cluster and short steps (under a minute)")
    parser.add_argument("--seed", type=int, default=1, help="the same seed gives the same summary.json (default 1)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"report directory (default {DEFAULT_OUT})")
    parser.add_argument("--scenario", type=Path, help="scenario YAML: nodes, mix, ladder, timing")
    parser.add_argument("--trace", type=Path, help="arrivals (CSV or JSON) instead of the ladder")
    parser.add_argument("--windows", type=_positive_int, default=5, help="report a trace in this many windows")
    parser.add_argument("--ladder", type=_levels, help="pods in flight per step, e.g. 10,20,40,80,160")
    parser.add_argument("--step-seconds", type=_positive_float, help="simulated seconds per ladder step")
    parser.add_argument(
        "--variants",
        help="comma-separated variants instead of the default matrix, e.g. off,enforce:fullscan:k3:inflight=bind"
        " (grammar: mode[:widening][:kN][:inflight=none|filter|bind][:ns=NAME][:R=x])",
    )
    parser.add_argument("--blind", choices=[b.value for b in Blind], default=Blind.LEAST_CPU.value)
    parser.add_argument(
        "--scale-nodes",
        type=_non_negative_int,
        help="nodes for the widening cost measurement (0 skips it; default 5000)",
    )
    parser.add_argument("--scale-repetitions", type=_positive_int, help="decisions per row of that measurement")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    parser.set_defaults(run=run_from_args)
    return parser


def command_line(args: argparse.Namespace) -> str:
    """The options that decide the results, as a command (``--out`` and ``--no-progress`` do not)."""
    words = ["python", "-m", "replay"]
    if args.quick:
        words.append("--quick")
    words += ["--seed", str(args.seed)]
    for option in ("scenario", "trace", "step_seconds", "variants", "scale_nodes", "scale_repetitions"):
        value = getattr(args, option)
        if value is not None:
            words += [f"--{option.replace('_', '-')}", str(value)]
    if args.trace is not None:
        words += ["--windows", str(args.windows)]
    if args.ladder is not None:
        words += ["--ladder", ",".join(map(str, args.ladder))]
    if args.blind != Blind.LEAST_CPU.value:
        words += ["--blind", args.blind]
    return shlex.join(words)


def settings_from_args(args: argparse.Namespace) -> ReplaySettings:
    settings = quick_settings(args.seed) if args.quick else full_settings(args.seed)
    scenario = load_scenario(args.scenario) if args.scenario else settings.scenario
    if args.trace is not None:
        scenario = dataclasses.replace(scenario, workload=load_trace(args.trace, args.windows))
    elif args.ladder is not None or args.step_seconds is not None:
        ladder = scenario.workload
        if not isinstance(ladder, Ladder):  # pragma: no cover - scenarios always carry a ladder
            raise ReplayError("--ladder and --step-seconds need a ladder workload")
        scenario = dataclasses.replace(
            scenario,
            workload=Ladder(args.ladder or ladder.levels, args.step_seconds or ladder.step_seconds),
        )
    groups = settings.groups
    if args.variants:
        chosen = tuple(parse_variant(spec) for spec in args.variants.split(",") if spec.strip())
        if not chosen:
            raise ReplayError("--variants names no variant")
        groups = (VariantGroup("Selected variants", chosen, plot_utilisation=True),)
    scale = settings.scale or ScaleSettings()
    if args.scale_nodes is not None:
        scale = dataclasses.replace(scale, node_count=args.scale_nodes)
    if args.scale_repetitions is not None:
        scale = dataclasses.replace(scale, repetitions=args.scale_repetitions)
    return dataclasses.replace(
        settings,
        scenario=scenario,
        groups=groups,
        blind=Blind(args.blind),
        scale=scale if scale.node_count > 0 else None,
        command=command_line(args),
    )


def run_from_args(args: argparse.Namespace) -> int:
    try:
        settings = settings_from_args(args)
        summary = run_replay(settings, out=args.out, progress_stream=None if args.no_progress else sys.stderr)
    except ReplayError as error:
        print(f"python -m replay: {error}", file=sys.stderr)
        return 2
    print(f"wrote {args.out / REPORT_FILE} ({len(summary.variants)} variants, {summary.timing.wall_seconds:.0f} s)")
    return 0
