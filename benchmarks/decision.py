"""Decision cost in process: parse -> decide -> render, as the server does it, per verb and wire mode.

Floors measured in the same run: ``null`` parses the same request and answers
its input unchanged (so the figures read as ratios), and for full-Nodes
requests ``full parse`` decodes every field into Python dicts (what a naive
extender pays before deciding anything).
"""

from __future__ import annotations

import dataclasses
import functools
import random
from typing import Any

import msgspec

from benchmarks.cluster import SyntheticCluster, extender_args, synthetic_cluster
from benchmarks.stats import percentile, timed
from extender.decision import FilterDecision, Reasons, filter_nodes, prioritize_nodes
from extender.policy import Policy
from extender.wire import parse_extender_args, render_filter, render_priorities

COLUMNS = ["nodes", "mode", "verb", "K", "hugepages", "p50 ms", "p99 ms", "null p50 ms", "x null"]


class Verbs:
    """The server's verb bodies without the HTTP layer."""

    def __init__(self, cluster: SyntheticCluster, policy: Policy) -> None:
        self.state = cluster.state
        self.policy = policy
        self.reasons = Reasons.for_resource(cluster.config.resource_name)
        self.rng = random.Random(1)

    def filter(self, body: bytes) -> bytes:
        args = parse_extender_args(body)
        decision = filter_nodes(
            self.state.demand_of(args.pod),
            args.node_names,
            accounts=self.state.accounts,
            policy=self.policy,
            reasons=self.reasons,
            rng=self.rng,
            headroom=self.state.headroom,
        )
        return render_filter(args, decision)

    def prioritize(self, body: bytes) -> bytes:
        args = parse_extender_args(body)
        demand = self.state.demand_of(args.pod)
        return render_priorities(
            prioritize_nodes(
                demand, args.node_names, accounts=self.state.accounts, policy=self.policy, columns=self.state.columns
            )
        )


def null_filter(body: bytes) -> bytes:
    args = parse_extender_args(body)
    return render_filter(args, FilterDecision(passed=args.node_names))


def null_prioritize(body: bytes) -> bytes:
    args = parse_extender_args(body)
    return render_priorities((n, 0) for n in args.node_names)


def _row(
    nodes: int, full: bool, verb: str, k: object, hugepages: bool, *, ours: list[float], null: list[float] | None
) -> dict[str, Any]:
    row: dict[str, Any] = {
        "nodes": nodes,
        "mode": "Nodes" if full else "NodeNames",
        "verb": verb,
        "K": k,
        "hugepages": "yes" if hugepages else "no",
        "p50 ms": percentile(ours, 0.5) * 1e3,
        "p99 ms": percentile(ours, 0.99) * 1e3,
        "null p50 ms": None,
        "x null": None,
    }
    if null is not None:
        row["null p50 ms"] = percentile(null, 0.5) * 1e3
        row["x null"] = row["p50 ms"] / row["null p50 ms"]
    return row


def run(sizes: list[int], repeat: int, pods_per_node: int = 20) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for nodes in sizes:
        cluster = synthetic_cluster(nodes, min(nodes * pods_per_node, 100_000))
        base = cluster.config.policy_for("bench")
        for full in (False, True):
            n = max(5, repeat // (10 if full else 1))
            for hugepages in ("1Gi", None):
                body = extender_args(cluster, full_nodes=full, hugepages=hugepages)
                null_f = timed(functools.partial(null_filter, body), repeat=n)
                for k in (3, 0):
                    verbs = Verbs(cluster, dataclasses.replace(base, sample_size=k))
                    ours = timed(functools.partial(verbs.filter, body), repeat=n)
                    rows.append(_row(nodes, full, "filter", k, bool(hugepages), ours=ours, null=null_f))
                verbs = Verbs(cluster, base)
                ours = timed(functools.partial(verbs.prioritize, body), repeat=n)
                null_p = timed(functools.partial(null_prioritize, body), repeat=n)
                rows.append(_row(nodes, full, "prioritize", "-", bool(hugepages), ours=ours, null=null_p))
                if full and hugepages:
                    floor = timed(functools.partial(msgspec.json.decode, body), repeat=max(3, n // 2))
                    rows.append(_row(nodes, full, "full parse to dicts", "-", True, ours=floor, null=None))
    return rows
