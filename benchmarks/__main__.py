"""python -m benchmarks [PART ...] [--quick] [--json FILE]

PART: decision, http, full, previous, in_flight, concurrency, scheduler, backlog, hold, memory, scale,
node_reports (default: all). ``previous`` measures this checkout against ``--previous REV``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks import (
    backlog,
    concurrency,
    decision,
    full_cluster,
    hold_to_bound,
    http_decision,
    in_flight,
    memory,
    node_reports,
    previous,
    scale,
    scheduler,
    scheduler_window,
)
from benchmarks.stats import table

KNOWN = [
    "decision",
    "http",
    "full",
    "previous",
    "in_flight",
    "concurrency",
    "scheduler",
    "backlog",
    "hold",
    "memory",
    "scale",
    "node_reports",
]


def machine() -> dict[str, Any]:
    """What the figures were measured on: they are only comparable within one run."""
    model = ""
    with open("/proc/cpuinfo") as cpuinfo:
        for line in cpuinfo:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    memory_mib = 0
    with open("/proc/meminfo") as meminfo:
        for line in meminfo:
            if line.startswith("MemTotal:"):
                memory_mib = int(line.split()[1]) // 1024
                break
    return {
        "nproc": os.cpu_count(),
        "cpu": model or platform.processor(),
        "memory_mib": memory_mib,
        "python": platform.python_version(),
        "kernel": platform.release(),
        "loadavg_at_start": os.getloadavg(),
    }


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks")
    parser.add_argument("which", nargs="*", help=f"{', '.join(KNOWN)} (default: all)")
    parser.add_argument("--quick", action="store_true", help="CI-sized: fewer sizes, pods and repetitions")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument(
        "--previous", default="HEAD~1", metavar="REV", help="the commit 'previous' measures against (default: HEAD~1)"
    )
    parser.add_argument("--scheduler-workdir", type=Path, help="keep the control plane's logs and configs here")
    args = parser.parse_args()
    args.which = args.which or KNOWN
    if unknown := set(args.which) - set(KNOWN):
        parser.error(f"unknown benchmark(s): {', '.join(sorted(unknown))}; choose from {', '.join(KNOWN)}")
    return args


def main() -> int:
    args = _arguments()
    results: dict[str, Any] = {
        "command": shlex.join(["python", "-m", "benchmarks", *sys.argv[1:]]),
        "machine": machine(),
    }
    print(f"# {results['command']}\n# {json.dumps(results['machine'])}")
    began = time.monotonic()
    sizes = [1000, 5000] if args.quick else [1000, 5000, 15000]

    def section(
        key: str, title: str, columns: list[str], produce: Callable[[], list[dict[str, Any]]], part: str = ""
    ) -> None:
        if (part or key) not in args.which:
            return
        started = time.monotonic()
        rows = produce()
        print(f"\n## {title} ({time.monotonic() - started:.0f} s)\n")
        print(table(rows, columns))
        results[key] = rows
        if args.json:  # written after every section, so a long run leaves what it measured
            args.json.write_text(json.dumps(results, indent=2))

    section(
        "decision",
        "Decision cost in process (parse -> decide -> render)",
        decision.COLUMNS,
        lambda: decision.run(sizes, repeat=30 if args.quick else 100),
    )
    serving: list[dict[str, Any]] = []
    section(
        "http",
        "Decision cost over HTTP on loopback (server in its own process, keep-alive aiohttp clients)",
        http_decision.COLUMNS,
        lambda: http_decision.run(sizes, clients=(4,) if args.quick else (1, 4), quick=args.quick, memory=serving),
    )
    section(
        "serving_memory",
        "Memory of our extender after serving the HTTP benchmark",
        http_decision.MEMORY_COLUMNS,
        lambda: serving,
        part="http",
    )
    two_sizes: list[dict[str, Any]] = []
    section(
        "full",
        "Filter on full clusters over HTTP (one client, NodeNames, every node a candidate; base = 1)",
        full_cluster.COLUMNS,
        lambda: full_cluster.run(
            nodes=5000,
            rounds=3 if args.quick else 5,
            requests=10 if args.quick else 60,
            log=lambda line: print(line, file=sys.stderr),
            two_sizes=two_sizes,
        ),
    )
    section(
        "full_two_sizes",
        "Filter on full clusters, two page sizes guarded against one (the same rounds; one size = 1)",
        full_cluster.SIZES_COLUMNS,
        lambda: two_sizes,
        part="full",
    )
    section(
        "previous",
        f"Filter on full clusters, this checkout against {args.previous} (5,000 nodes, the same rounds; previous = 1)",
        previous.COLUMNS,
        lambda: previous.run(
            args.previous,
            nodes=5000,
            rounds=3 if args.quick else 5,
            requests=10 if args.quick else 40,
            log=lambda line: print(line, file=sys.stderr),
        ),
    )
    section(
        "in_flight",
        "Filter with 1,000 placements in flight (5,000 nodes, 90% full, a new pod each call; none and null = 1)",
        in_flight.COLUMNS,
        lambda: in_flight.run(
            nodes=5000,
            rounds=3 if args.quick else 5,
            requests=10 if args.quick else 40,
            log=lambda line: print(line, file=sys.stderr),
        ),
    )
    section(
        "concurrency",
        "Several schedulers on one extender (5,000 nodes, NodeNames, a new pod each filter + prioritize; null = 1)",
        concurrency.COLUMNS,
        lambda: concurrency.run(
            nodes=5000,
            seconds=1.5 if args.quick else 3.0,
            rounds=1 if args.quick else 3,
            log=lambda line: print(line, file=sys.stderr),
        ),
    )
    section(
        "scheduler",
        "Scheduler throughput (real kube-scheduler, percentageOfNodesToScore 100 or adaptive, client QPS/burst 5000)",
        scheduler.COLUMNS,
        lambda: scheduler.run(
            [(500, 500), (1000, 500)] if args.quick else [(1000, 2000), (5000, 1000)],
            workdir=args.scheduler_workdir,
            log=lambda line: print(line, file=sys.stderr),
        ),
    )
    section(
        "scheduler_window",
        "Time to bind when few pools have room (real kube-scheduler, 100% against adaptive, window retries)",
        scheduler_window.COLUMNS,
        lambda: scheduler_window.run(
            nodes=1000 if args.quick else 5000,
            pods=3 if args.quick else 10,
            workdir=args.scheduler_workdir,
            log=lambda line: print(line, file=sys.stderr),
        ),
        part="scheduler",
    )
    section(
        "backlog",
        "Pods that fit placed beside a backlog of waiting pods (real kube-scheduler; kube-scheduler alone = 1)",
        backlog.COLUMNS,
        lambda: backlog.run(
            nodes=400 if args.quick else 1000,
            waiting=600 if args.quick else 2000,
            fitting=200 if args.quick else 500,
            workdir=args.scheduler_workdir,
            log=lambda line: print(line, file=sys.stderr),
        ),
    )
    section(
        "hold",
        "Hold to bound on the real kube-scheduler (the replay's bindDelaySeconds)",
        hold_to_bound.COLUMNS,
        lambda: hold_to_bound.run(
            steady=(100, 10.0) if args.quick else (300, 10.0),
            burst=100 if args.quick else 300,
            log=lambda line: print(line, file=sys.stderr),
        ),
    )
    section("memory", "Memory (RSS of the cluster cache)", memory.COLUMNS, lambda: memory.run(quick=args.quick))
    scale_shapes = scale.QUICK_SHAPES if args.quick else scale.SHAPES
    scale_serving: dict[tuple[int, int], float] = {}
    section(
        "scale_decision",
        "Scale: decision cost, NodeNames, every node a candidate (in process and over HTTP, one client)",
        scale.DECISION_COLUMNS,
        lambda: scale.decisions(scale_shapes, quick=args.quick, serving=scale_serving),
        part="scale",
    )
    section(
        "scale_memory",
        "Scale: memory (the cache alone in a fresh process; the serving extender once loaded)",
        scale.MEMORY_COLUMNS,
        lambda: scale.memory_rows(scale_shapes, serving=scale_serving),
        part="scale",
    )
    section(
        "scale_watch",
        "Scale: one watch event (watch thread: decode + compact; event loop: the state changed)",
        scale.WATCH_COLUMNS,
        lambda: scale.watch_events(scale_shapes, events=500 if args.quick else 3000),
        part="scale",
    )
    section(
        "scale_sync",
        "Scale: time to first sync (the informer against a real kube-apiserver, and fed pages in process)",
        scale.SYNC_COLUMNS,
        lambda: scale.first_sync(
            scale.QUICK_SYNC if args.quick else scale_shapes,
            scale_shapes,
            workdir=args.scheduler_workdir,
            log=lambda line: print(line, file=sys.stderr),
        ),
        part="scale",
    )
    section(
        "node_report_writes",
        "API writes per second from the node agents (real publish policy, simulated time)",
        node_reports.WRITE_COLUMNS,
        lambda: node_reports.writes(quick=args.quick),
        part="node_reports",
    )
    section(
        "node_report_updates",
        "The extender's cost per node-agent record update",
        node_reports.UPDATE_COLUMNS,
        lambda: node_reports.updates(quick=args.quick),
        part="node_reports",
    )
    results["machine"]["loadavg_at_end"] = os.getloadavg()
    results["seconds"] = time.monotonic() - began
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    print(f"\n# {results['seconds']:.0f} s in all; load average at the end {results['machine']['loadavg_at_end']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
