"""python -m benchmarks.sizes [--nodes N] [--repeat R] [--rounds N]: the decision with two page sizes
guarded against one (issue 24, item 4: within 1.2 x).

The same nodes (a 64 GiB 2 MiB pool and a 16 GiB 1 GiB pool each, 90 % of the 2 MiB pools full by
pod requests, as in ``benchmarks.full_cluster``) and the same bound pods, under two configs: one
guarding ``hugepages-2Mi`` alone, one guarding ``hugepages-2Mi`` and ``hugepages-1Gi``. Per case,
in process (parse -> decide -> render, ``benchmarks.decision.Verbs``), NodeNames, every node a
candidate: the p50 of each config, interleaved round by round, and their ratio; the spread is the
ratios' range over the rounds. A pod asking both sizes is measured beside them (two-size only).
"""

from __future__ import annotations

import argparse
import functools
import statistics
from typing import Any

import msgspec

from benchmarks.cluster import SyntheticCluster, node_documents, pod_document
from benchmarks.decision import Verbs
from benchmarks.extender_server import CONFIG
from benchmarks.stats import percentile, table, timed
from extender.core.config import build_config
from extender.core.objects import Node, Pod
from extender.state.cluster import ClusterState

COLUMNS = ["case", "one size p50 ms", "two sizes p50 ms", "x one size", "spread", "both sizes p50 ms"]
SIZES = {"resourceNames": ["hugepages-2Mi", "hugepages-1Gi"]}
FULL_PERCENT = 90


def _cluster(documents: list[dict[str, Any]], config_document: dict[str, Any], pods: int) -> SyntheticCluster:
    config = build_config(config_document, {})
    state = ClusterState(config)
    names = [d["metadata"]["name"] for d in documents]
    bound = [pod_document(f"p{j}", "512Mi", names[j % len(names)]) for j in range(pods)]
    for i, name in enumerate(names):
        if i % 100 < FULL_PERCENT:  # the rest of the 2 MiB pool: full by pod requests
            bound.append(pod_document(f"fill-{i}", f"{64 * 1024 - 512 * (pods // len(names))}Mi", name))
    state.replace((msgspec.convert(d, Node) for d in documents), (msgspec.convert(p, Pod) for p in bound))
    return SyntheticCluster(config, state, documents)


def _body(
    names: list[str], namespace: str, small: str | None, large: str | None = None, pod: str = "incoming"
) -> bytes:
    document = pod_document(pod, small, namespace=namespace)
    if large:
        document["spec"]["containers"][0]["resources"]["requests"]["hugepages-1Gi"] = large
    return msgspec.json.encode({"Pod": document, "Nodes": None, "NodeNames": names})


CASES = [  # (case, namespace, 2 MiB request, 1 GiB request, verb)
    ("filter K=3", "bench", "1Gi", None, "filter"),
    ("filter K=0", "bench-k0", "1Gi", None, "filter"),
    ("filter shadow", "bench-shadow", "1Gi", None, "filter"),
    ("filter, no pool can take it", "bench", "128Gi", None, "filter"),
    ("prioritize", "bench", "1Gi", None, "prioritize"),
]


def run(nodes: int = 5000, repeat: int = 200, rounds: int = 5) -> list[dict[str, Any]]:
    documents = node_documents(nodes)
    for document in documents:
        for key in ("capacity", "allocatable"):
            document["status"][key]["hugepages-1Gi"] = "16Gi"
    pods = min(nodes * 4, 100_000)
    one = Verbs(_cluster(documents, CONFIG, pods))
    two = Verbs(_cluster(documents, {**CONFIG, **SIZES}, pods))
    names = [d["metadata"]["name"] for d in documents]
    rows = []
    for case, namespace, small, large, verb in CASES:
        pod = "scored" if verb == "prioritize" else "incoming"
        body = _body(names, namespace, small, large, pod)
        both = _body(names, namespace, small, "2Gi", pod)
        ratios, p50_one, p50_two, p50_both = [], [], [], []
        for _ in range(rounds):
            a = percentile(timed(functools.partial(getattr(one, verb), body), repeat=repeat), 0.5)
            b = percentile(timed(functools.partial(getattr(two, verb), body), repeat=repeat), 0.5)
            c = percentile(timed(functools.partial(getattr(two, verb), both), repeat=repeat), 0.5)
            p50_one.append(a)
            p50_two.append(b)
            p50_both.append(c)
            ratios.append(b / a)
        rows.append({
            "case": case,
            "one size p50 ms": statistics.median(p50_one) * 1e3,
            "two sizes p50 ms": statistics.median(p50_two) * 1e3,
            "x one size": statistics.median(ratios),
            "spread": f"{min(ratios):.2f}-{max(ratios):.2f}",
            "both sizes p50 ms": statistics.median(p50_both) * 1e3,
        })  # fmt: skip
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.sizes")
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--repeat", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    print(f"# {args.nodes} nodes, {FULL_PERCENT}% of the 2 MiB pools full, NodeNames, in process; {args.rounds} rounds")
    print(table(run(args.nodes, args.repeat, args.rounds), COLUMNS))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
