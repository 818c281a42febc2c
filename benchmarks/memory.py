"""RSS of the extender's cluster cache: a fresh process loads N nodes and P pods and reports its growth."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Sequence
from typing import Any

_CHILD = """
import gc, json, resource, sys
import msgspec
from benchmarks.cluster import node_document, pod_document
from extender.state.cluster import ClusterState
from extender.core.config import build_config
from extender.core.objects import Node, Pod
import random

def rss_kib():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])

nodes, pods = int(sys.argv[1]), int(sys.argv[2])
config = build_config({"defaults": {"mode": "enforce"}}, {})
state = ClusterState(config)
gc.collect()
before = rss_kib()
rng = random.Random(1)
# Records are built page by page, as the reflector does, so whole objects never pile up.
node_records = [state.node_record(msgspec.convert(node_document(i, rng), Node)) for i in range(nodes)]
pod_records = []
for j in range(pods):
    pod = msgspec.convert(pod_document(f"p{j}", "512Mi", f"node-{j % nodes:05d}"), Pod)
    pod_records.append(state.pod_record(pod))
state.replace_nodes(node_records)
state.replace_pods(pod_records)
del node_records, pod_records
gc.collect()
after = rss_kib()
print(json.dumps({"rss_mib": after / 1024, "cache_mib": (after - before) / 1024, "baseline_mib": before / 1024}))
"""


def run(quick: bool, shapes: Sequence[tuple[int, int]] | None = None) -> list[dict[str, Any]]:
    """One row per (nodes, pods) of ``shapes`` (default: 1,000/20,000 and 5,000/100,000; quick: the latter)."""
    if shapes is None:
        shapes = [(1000, 20_000), (5000, 100_000)] if not quick else [(5000, 100_000)]
    rows = []
    for nodes, pods in shapes:
        out = subprocess.run(
            [sys.executable, "-c", _CHILD, str(nodes), str(pods)], capture_output=True, text=True, check=True
        )
        figures = json.loads(out.stdout)
        rows.append({"nodes": nodes, "pods": pods, **figures})
    return rows


COLUMNS = ["nodes", "pods", "rss_mib", "cache_mib", "baseline_mib"]
