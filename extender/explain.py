"""``explain``: why a pod would or would not fit, node by node.

Uses the same ``fits`` and ``node_load`` as the verbs; only the presentation
is new. Per-node figures are for operators (this table, logs, metrics), never
for pod events.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field

import msgspec

from extender.capacity import NO_POOL_ACCOUNT, Fit, NodeAccount, fits, hugepages_for
from extender.podrequest import PodDemand
from extender.policy import Policy
from extender.scoring import node_load, priority


@dataclass(frozen=True, slots=True)
class NodeExplanation:
    node: str
    known: bool
    pool_pages: int
    used_pages: int
    reserved_pages: int
    inflight_pages: int
    free_pages: int
    need_pages: int
    verdict: str
    load: float
    score: int
    # Only placements in flight keep the pod off this node: it would fit without them.
    blocked_by_inflight: bool = False


@dataclass(frozen=True, slots=True)
class Explanation:
    pod: str
    resource_name: str
    need_bytes: int
    cpu_millis: int
    mode: str
    nodes: list[NodeExplanation]
    # Where the figures came from, one line each above the table, e.g. {"in flight": "the extender at https://..."}.
    sources: Mapping[str, str] = field(default_factory=dict)

    @property
    def summary(self) -> str:
        if not self.nodes:
            return "no candidate nodes"
        admitted = sum(1 for n in self.nodes if n.verdict in (Fit.FITS.value, Fit.NO_POOL.value))
        if admitted:
            return f"{admitted} of {len(self.nodes)} nodes can hold the pod"
        blocked = sum(1 for n in self.nodes if n.blocked_by_inflight)
        if blocked:
            return (
                f"no node can hold the pod now: {blocked} would, but placements in flight hold their room "
                "(until those pods show up bound, or reservationTimeoutSeconds)"
            )
        if any(n.verdict == Fit.INSUFFICIENT.value for n in self.nodes):
            return "no node with hugepage capacity: pools exist but are in use (add nodes or wait)"
        return "no compatible node: every pool is smaller than the pod's need"

    def as_dict(self) -> dict[str, object]:
        return {**asdict(self), "summary": self.summary}


def explain(
    pod: str,
    demand: PodDemand,
    names: Iterable[str],
    *,
    resource_name: str,
    accounts: Mapping[str, NodeAccount],
    policy: Policy,
    sources: Mapping[str, str] | None = None,
) -> Explanation:
    rows = []
    for name in names:
        account = accounts.get(name, NO_POOL_ACCOUNT)
        load = node_load(account, demand, policy)
        verdict = fits(account, demand.hugepage_bytes)
        blocked = (
            verdict is Fit.INSUFFICIENT
            and account.pending_bytes > 0
            and fits(msgspec.structs.replace(account, pending_bytes=0), demand.hugepage_bytes).admits
        )
        rows.append(
            NodeExplanation(
                node=name,
                known=name in accounts,
                pool_pages=account.total_pages,
                used_pages=account.used_pages,
                reserved_pages=account.reserved_pages,
                inflight_pages=account.pending_pages,
                free_pages=account.free_pages,
                need_pages=hugepages_for(demand.hugepage_bytes, account.page_size),
                verdict=verdict.value,
                load=load,
                score=priority(load),
                blocked_by_inflight=blocked,
            )
        )
    rows.sort(key=lambda r: (-r.score, r.node))
    return Explanation(
        pod, resource_name, demand.hugepage_bytes, demand.cpu_millis, policy.mode.value, rows, dict(sources or {})
    )


_COLUMNS = ("NODE", "POOL", "USED", "RESERVED", "IN FLIGHT", "FREE", "NEED", "VERDICT", "LOAD", "SCORE")


def render_table(explanation: Explanation) -> str:
    e = explanation
    lines = [
        f"pod {e.pod}: needs {e.need_bytes} bytes of {e.resource_name}, {e.cpu_millis}m CPU; mode {e.mode}",
        "(pool, used, reserved, in flight, free and need are in pages)",
    ]
    lines += [f"{what}: {source}" for what, source in e.sources.items()]
    lines.append("")
    cells = [_COLUMNS] + [
        (
            n.node if n.known else f"{n.node} (unknown)",
            str(n.pool_pages),
            str(n.used_pages),
            str(n.reserved_pages),
            str(n.inflight_pages),
            str(n.free_pages),
            str(n.need_pages),
            f"{n.verdict} (in flight)" if n.blocked_by_inflight else n.verdict,
            "inf" if n.load == float("inf") else f"{n.load:.3f}",
            str(n.score),
        )
        for n in e.nodes
    ]
    widths = [max(len(row[i]) for row in cells) for i in range(len(_COLUMNS))]
    for row in cells:
        lines.append("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())
    lines += ["", e.summary]
    return "\n".join(lines)
