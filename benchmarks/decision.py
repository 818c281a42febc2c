"""Decision cost in process: parse -> decide -> render, as the server does it, per verb and wire mode.

Floors measured in the same run, on the same request bytes: ``null`` is the
null extender's work (``benchmarks.null_extender``: every candidate passes,
its bytes echoed; prioritize names every node with score 0), and for
full-Nodes requests ``floor`` is the field-skipping decode (one pass that
decodes the pod and each node's name and skips every other field: the least
any extender that looks at each node must do) and ``full parse to dicts``
what decoding every field costs (what a naive extender pays before deciding
anything).
"""

from __future__ import annotations

import functools
import random
from typing import Any

import msgspec

from benchmarks.cluster import SyntheticCluster, request_body, synthetic_cluster
from benchmarks.extender_server import CONFIG
from benchmarks.null_extender import floor_filter, floor_prioritize, null_filter, null_prioritize
from benchmarks.stats import percentile, timed
from extender.shell.wire import parse_extender_args, render_filter, render_priorities
from extender.state.verbs import ExtenderVerbs

COLUMNS = [
    "nodes",
    "mode",
    "verb",
    "K",
    "hugepages",
    "p50 ms",
    "p99 ms",
    "null p50 ms",
    "x null",
    "floor p50 ms",
    "x floor",
]


class Verbs:
    """The server's verb bodies without the HTTP layer: parse, ``ExtenderVerbs``, render.

    As in the server, a filter for an enforced pod holds its need on the few nodes
    it admits (and the next filter for the same pod releases that hold first).
    """

    def __init__(self, cluster: SyntheticCluster) -> None:
        self.state = cluster.state
        self.verbs = ExtenderVerbs(cluster.config, cluster.state, rng=random.Random(1))

    def filter(self, body: bytes) -> bytes:
        args = parse_extender_args(body)
        pod = args.pod
        demand = self.state.demand_of(pod)
        decision = self.verbs.filter(pod.metadata.uid, pod.metadata.namespace, demand, args.node_names).decision
        return render_filter(args, decision)

    def prioritize(self, body: bytes) -> bytes:
        args = parse_extender_args(body)
        pod = args.pod
        demand = self.state.demand_of(pod)
        return render_priorities(
            self.verbs.prioritize(pod.metadata.uid, pod.metadata.namespace, demand, args.node_names)
        )


def _row(
    nodes: int,
    full: bool,
    verb: str,
    k: object,
    hugepages: bool,
    *,
    ours: list[float],
    null: list[float] | None = None,
    floor: list[float] | None = None,
) -> dict[str, Any]:
    row: dict[str, Any] = {
        "nodes": nodes,
        "mode": "Nodes" if full else "NodeNames",
        "verb": verb,
        "K": k,
        "hugepages": "yes" if hugepages else "no",
        "p50 ms": percentile(ours, 0.5) * 1e3,
        "p99 ms": percentile(ours, 0.99) * 1e3,
    }
    for name, samples in (("null", null), ("floor", floor)):
        if samples is not None:
            row[f"{name} p50 ms"] = percentile(samples, 0.5) * 1e3
            row[f"x {name}"] = row["p50 ms"] / row[f"{name} p50 ms"]
    return row


def _body(
    documents: list[dict[str, Any]], full: bool, hugepages: str | None, namespace: str, pod: str = "incoming"
) -> bytes:
    return request_body(documents, full_nodes=full, hugepages=hugepages, namespace=namespace, pod_name=pod)


def run(sizes: list[int], repeat: int, pods_per_node: int = 20) -> list[dict[str, Any]]:
    """Per size and wire mode: filter with K = 3 (namespace ``bench``) and K = 0 (``bench-k0``),
    prioritize of every candidate for a pod no filter has held nodes for (as after a K = 0
    filter: the scheduler sends prioritize only the nodes filter admitted), each with and
    without a hugepage request, and the floors on the same bytes."""
    rows: list[dict[str, Any]] = []
    for nodes in sizes:
        cluster = synthetic_cluster(nodes, min(nodes * pods_per_node, 100_000), CONFIG)
        verbs = Verbs(cluster)
        documents = cluster.node_documents
        for full in (False, True):
            n = max(3, repeat // (10 if full else 1))
            for hugepages in ("1Gi", None):
                body = functools.partial(_body, documents, full, hugepages)

                floor_body = body("bench")
                null_f = timed(functools.partial(null_filter, floor_body), repeat=n)
                null_p = timed(functools.partial(null_prioritize, floor_body), repeat=n)
                floor_f = timed(functools.partial(floor_filter, floor_body), repeat=n) if full else None
                floor_p = timed(functools.partial(floor_prioritize, floor_body), repeat=n) if full else None
                for k, namespace in ((3, "bench"), (0, "bench-k0")):
                    ours = timed(functools.partial(verbs.filter, body(namespace)), repeat=n)
                    rows.append(_row(nodes, full, "filter", k, bool(hugepages), ours=ours, null=null_f, floor=floor_f))
                ours = timed(functools.partial(verbs.prioritize, body("bench", "scored")), repeat=n)
                rows.append(
                    _row(nodes, full, "prioritize", "-", bool(hugepages), ours=ours, null=null_p, floor=floor_p)
                )
                if full and hugepages:
                    dicts = timed(functools.partial(msgspec.json.decode, floor_body), repeat=max(3, n // 2))
                    rows.append(_row(nodes, full, "full parse to dicts", "-", True, ours=dicts, floor=floor_f))
    return rows
