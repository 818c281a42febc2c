"""``hugepage-extender node-agent``: read this node's counters; print the record, or publish it."""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import threading
from pathlib import Path
from typing import Any

from extender.core.config import ConfigError
from extender.shell.kube.client import api_client
from extender.shell.nodeagent.probe import KUBEPODS, Roots, read_record
from extender.shell.nodeagent.publish import (
    DEFAULT_HEARTBEAT_SECONDS,
    DEFAULT_INTERVAL_SECONDS,
    DEFAULT_JITTER,
    DEFAULT_MIN_INTERVAL_SECONDS,
    ApiPublisher,
    PublishPolicy,
    run,
)

log = logging.getLogger("extender.nodeagent")


def _node_agent(args: argparse.Namespace) -> int:
    if not args.node_name:
        raise ConfigError("node-agent: --node-name (or $NODE_NAME) is required")
    kubepods = (args.kubepods_cgroup.strip("/"),) if args.kubepods_cgroup else KUBEPODS
    roots = Roots(args.sysfs_root, args.cgroup_root, args.kubelet_root, args.mountinfo, kubepods, args.proc_root)
    if args.once:
        record = read_record(args.node_name, roots)
        print(json.dumps(record.as_json(), indent=2) if args.output == "json" else _text(record.as_json()))
        return 0
    if not (args.in_cluster or args.kubeconfig):
        raise ConfigError("node-agent: publishing needs --kubeconfig or --in-cluster (or --once to print)")
    policy = PublishPolicy(args.heartbeat_seconds, args.jitter, args.min_interval_seconds)
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    api = api_client(args.kubeconfig, in_cluster=args.in_cluster)
    log.info(
        "node-agent for %s: reading every %.0f s, heartbeat %.0f s (-%.0f%%), sources under %s and %s",
        args.node_name,
        args.interval_seconds,
        policy.heartbeat_seconds,
        policy.jitter * 100,
        roots.sysfs,
        roots.cgroup,
    )
    try:
        run(
            lambda: read_record(args.node_name, roots),
            ApiPublisher(api, owner_policy=args.owner_policy or None),
            policy=policy,
            interval_seconds=args.interval_seconds,
            stop=stop,
        )
    finally:
        api.close()  # type: ignore[no-untyped-call]
    return 0


def _text(document: dict[str, Any]) -> str:
    lines = [f"node {document['node']} at {document['observedAt']}, pods' pages from {document['source']}"]
    for name, size in document["pageSizes"].items():
        lines.append(
            f"{name}: total {size['totalPages']} free {size['freePages']} reserved {size['reservedPages']} "
            f"surplus {size['surplusPages']} pods {size['podPages']} outside {size['outsidePages']}"
        )
        for node, numa in size["numa"].items():
            lines.append(
                f"  numa {node}: total {numa['totalPages']} free {numa['freePages']} "
                f"pods {numa['podPages']} outside {numa['outsidePages']}"
            )
    return "\n".join(lines)


def _positive(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return value


def _fraction(text: str) -> float:
    value = float(text)
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"must be in [0, 1), got {text}")
    return value


def add_parser(commands: Any) -> None:
    agent = commands.add_parser(
        "node-agent", help="report this node's hugepages: kernel pool, pods' pages, pages held outside pods"
    )
    agent.add_argument("--node-name", default=os.environ.get("NODE_NAME", ""), help="default: $NODE_NAME")
    agent.add_argument("--once", action="store_true", help="print the record it would publish; publish nothing")
    agent.add_argument("--output", choices=("json", "text"), default="json", help="with --once (default json)")
    agent.add_argument("--sysfs-root", type=Path, default=Path("/sys"), help="default /sys")
    agent.add_argument("--cgroup-root", type=Path, default=Path("/sys/fs/cgroup"), help="default /sys/fs/cgroup")
    agent.add_argument(
        "--kubelet-root",
        type=Path,
        default=Path("/var/lib/kubelet"),
        help="the kubelet's root dir, for HugePages emptyDirs when the hugetlb controller is off",
    )
    agent.add_argument(
        "--kubepods-cgroup",
        help="the kubelet's pods cgroup below each hierarchy's root (default: kubepods.slice, else kubepods)",
    )
    agent.add_argument(
        "--mountinfo", type=Path, default=Path("/proc/self/mountinfo"), help="where to find hugetlbfs mounts"
    )
    agent.add_argument(
        "--proc-root",
        type=Path,
        default=Path("/proc"),
        help="the host's processes (hostPID), for the pods' own hugetlb mappings when the controller is off",
    )
    agent.add_argument("--kubeconfig", type=Path, help="publish to this cluster")
    agent.add_argument("--in-cluster", action="store_true", help="publish with the pod's service account")
    agent.add_argument(
        "--owner-policy",
        default="",
        help="the ValidatingAdmissionPolicy that scopes this agent's writes (the chart's): its records are "
        "owned by it and deleted with it, so no record outlives the agents (needs get on that policy)",
    )
    agent.add_argument("--interval-seconds", type=_positive, default=DEFAULT_INTERVAL_SECONDS, help="read period")
    agent.add_argument(
        "--heartbeat-seconds",
        type=_positive,
        default=DEFAULT_HEARTBEAT_SECONDS,
        help="write at least this often (less up to --jitter of it); keep nodeReportMaxAgeSeconds above twice it",
    )
    agent.add_argument("--jitter", type=_fraction, default=DEFAULT_JITTER)
    agent.add_argument(
        "--min-interval-seconds",
        type=_positive,
        default=DEFAULT_MIN_INTERVAL_SECONDS,
        help="at most one write per this many seconds for changes",
    )
    agent.set_defaults(run=_node_agent)
