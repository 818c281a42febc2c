"""``explain``: why a pod would or would not fit, node by node.

``explain_pod`` is the one entry: the snapshot path (``explain --snapshot``), the
live one (``explain --kubeconfig``, ``kubectl hugepages explain``, through
``diagnose``) feed it a ``ClusterState`` and it reads from it exactly what the
filter reads: the namespace's policy, the pod's demand with its QoS class, the
accounts as the namespace's ``nodeReportMaxAgeSeconds`` judges the node reports,
without the pod's own hold, plus the running extender's holds. Then the same
``fits`` and ``node_load`` as the verbs; only the presentation is new.
Per-node figures are for operators (this table, logs, metrics), never
for pod events. With the node agents' records it shows, per node, what the
node itself reported and how old that is, and whether the extender used it.

A pod asking pages of several sizes gets one table per size and, per node, the
verdict the filter gives over them all (``reference.size_verdict``, the filter's own).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field

import msgspec

from extender.core.answer import Reasons
from extender.core.capacity import UNKNOWN_ACCOUNT, Fit, NodeAccount, fits, hugepages_for
from extender.core.diagnostics import NodeHolds, with_holds
from extender.core.objects import Pod
from extender.core.podrequest import PodDemand
from extender.core.policy import Policy
from extender.core.reference import SizeView, size_verdict
from extender.core.scoring import node_load, priority
from extender.state.cluster import ClusterState
from extender.state.reports import ReportState, ReportView


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
    report: str = ReportState.NONE.value  # the agent's record: none, fresh (used), stale, ignored
    report_age_seconds: float | None = None
    report_source: str | None = None  # where the agent read the pods' pages
    report_total_pages: int | None = None  # the kernel's pool
    report_outside_pages: int | None = None  # held outside pods, as reported
    report_reason: str = ""  # why an ignored record was ignored


_ADMITTED = (Fit.FITS.value, Fit.UNKNOWN.value)
_UNRESOLVABLE = tuple(f.value for f in Fit if f.unresolvable)


@dataclass(frozen=True, slots=True)
class Explanation:
    """One size's table: every node's figures and verdict for the pod's need of that size."""

    pod: str
    resource_name: str
    need_bytes: int
    cpu_millis: int
    mode: str
    nodes: list[NodeExplanation]
    node_report_max_age_seconds: float | None = None
    # Where the figures came from, one line each above the table, e.g. {"in flight": "the extender at https://..."}.
    sources: Mapping[str, str] = field(default_factory=dict)

    @property
    def summary(self) -> str:
        if not self.nodes:
            return "no candidate nodes"
        admitted = sum(1 for n in self.nodes if n.verdict in _ADMITTED)
        if admitted:
            return f"{admitted} of {len(self.nodes)} nodes can hold the pod"
        blocked = sum(1 for n in self.nodes if n.blocked_by_inflight)
        if blocked:
            return (
                f"no node can hold the pod now: {blocked} would, but placements in flight hold their room "
                "(until those pods show up bound, or holdTimeoutSeconds)"
            )
        if any(n.verdict not in _UNRESOLVABLE for n in self.nodes):
            return "no node with hugepage capacity: pools exist but are in use (add nodes or wait)"
        return (
            "no compatible node: every node has no pool, or a pool (less pages held outside pods) "
            "smaller than the pod's need"
        )

    @property
    def fallback(self) -> str:
        """Nodes counted from pod requests only because their agent's record is stale or ignored."""
        stale = [n.node for n in self.nodes if n.report == ReportState.STALE.value]
        ignored = [n.node for n in self.nodes if n.report == ReportState.IGNORED.value]
        parts = []
        if stale:
            parts.append(
                f"{len(stale)} node(s) counted from pod requests only: agent record older than "
                f"nodeReportMaxAgeSeconds ({self.node_report_max_age_seconds:.0f} s): {', '.join(stale[:10])}"
            )
        if ignored:
            parts.append(f"{len(ignored)} node(s) with an agent record ignored: {', '.join(ignored[:10])}")
        return "\n".join(parts)

    def as_dict(self) -> dict[str, object]:
        """The JSON of a pod's explanation of this one size (``PodExplanation.as_dict``)."""
        return PodExplanation({self.resource_name: self}).as_dict()


@dataclass(frozen=True, slots=True)
class PodExplanation:
    """Why a pod fits, or not: one table per size it needs (by resource name, in the config's order)
    and, for a pod of several, per node the verdict over every size with the size it comes from:
    {node: {"verdict": ..., "resourceName": ...}}."""

    tables: Mapping[str, Explanation]
    verdicts: Mapping[str, Mapping[str, str]] = field(default_factory=dict)

    @property
    def summary(self) -> str:
        if len(self.tables) == 1:
            (table,) = self.tables.values()
            return table.summary
        sizes = " and ".join(self.tables)
        admitted = sum(1 for v in self.verdicts.values() if v["verdict"] in _ADMITTED)
        if admitted:
            return f"{admitted} of {len(self.verdicts)} nodes can hold the pod ({sizes})"
        if any(v["verdict"] not in _UNRESOLVABLE for v in self.verdicts.values()):
            return f"no node with room in every pool the pod needs ({sizes}): pools are in use (add nodes or wait)"
        return f"no compatible node: every node lacks a pool the pod needs ({sizes}), or it is too small"

    @property
    def fallback(self) -> str:
        return "\n".join(dict.fromkeys(f for table in self.tables.values() if (f := table.fallback)))

    def as_dict(self) -> dict[str, object]:
        """The JSON scripts read (new keys may be added, none renamed or removed): the first table's keys,
        the tables of the other sizes under ``more``, ``verdicts``, ``summary`` and ``fallback``."""
        first, *others = self.tables.values()
        return {
            **asdict(first),
            "more": [asdict(table) for table in others],
            "verdicts": dict(self.verdicts),
            "summary": self.summary,
            "fallback": self.fallback,
        }


def explain(
    pod: str,
    demand: PodDemand,
    names: Iterable[str],
    *,
    resource_name: str,
    accounts: Mapping[str, NodeAccount],
    policy: Policy,
    sources: Mapping[str, str] | None = None,
    reports: Callable[[str], ReportView] | None = None,
) -> Explanation:
    rows = []
    numa = policy.numa_aligned and demand.guaranteed
    need = demand.of_one(resource_name)
    for name in names:
        account = accounts.get(name, UNKNOWN_ACCOUNT)
        load = node_load(account, need, policy)
        verdict = fits(account, need.hugepage_bytes, numa_aligned=numa)
        blocked = (
            not verdict.admits
            and not verdict.unresolvable
            and account.held_bytes > 0
            and fits(msgspec.structs.replace(account, held_bytes=0), need.hugepage_bytes, numa_aligned=numa).admits
        )
        view = reports(name) if reports is not None else ReportView(ReportState.NONE)
        report = view.report
        rows.append(
            NodeExplanation(
                node=name,
                known=name in accounts,
                pool_pages=account.total_pages,
                used_pages=account.used_pages,
                reserved_pages=account.outside_pods_pages,
                inflight_pages=account.held_pages,
                free_pages=account.free_pages,
                need_pages=hugepages_for(need.hugepage_bytes, account.page_size),
                verdict=verdict.value,
                load=load,
                score=priority(load),
                blocked_by_inflight=blocked,
                report=view.state.value,
                report_age_seconds=None if view.age_seconds is None else round(view.age_seconds, 1),
                report_source=None if report is None else report.source,
                report_total_pages=None if report is None else report.total_pages,
                report_outside_pages=None if report is None else report.outside_pages,
                report_reason=view.reason,
            )
        )
    rows.sort(key=lambda r: (-r.score, r.node))
    return Explanation(
        pod,
        resource_name,
        need.hugepage_bytes,
        demand.cpu_millis,
        policy.mode.value,
        rows,
        policy.node_report_max_age_seconds,
        dict(sources or {}),
    )


def explain_pod(
    state: ClusterState,
    pod: Pod,
    names: Iterable[str] | None = None,
    *,
    holds: Mapping[str, Mapping[str, NodeHolds]] | None = None,
    sources: Mapping[str, str] | None = None,
) -> PodExplanation:
    """Why ``pod`` fits, or not, on each of ``names`` (None: every node the state knows), judged
    from ``state`` as the filter judges it (``verbs.ExtenderVerbs.filter``): one table per size
    the pod needs (the first size guarded when it needs none). ``holds``: the running extender's
    placements in flight per size and node, the pod's own left out, when the state is a reading
    of the API and not the extender's own."""
    state.expire_reports()
    policy = state.policy_for(pod.metadata.namespace)
    demand = state.demand_of(pod)
    nodes = sorted(state.nodes()) if names is None else list(names)
    max_age = policy.node_report_max_age_seconds
    tables: list[Explanation] = []
    views: list[SizeView] = []
    for resource_name in demand.sizes_needed or state.config.resource_names[:1]:
        size = state.books[resource_name]
        view, _, _ = size.view_for(policy)
        accounts = size.accounts_without(pod.metadata.uid, view)
        if holds and holds.get(size.resource_name):
            accounts = with_holds(accounts, holds[size.resource_name])
        tables.append(
            explain(
                f"{pod.metadata.namespace}/{pod.metadata.name}",
                demand,
                nodes,
                resource_name=size.resource_name,
                accounts=accounts,
                policy=policy,
                sources=sources,
                reports=lambda name, size=size: size.report_view(name, max_age),  # type: ignore[misc]
            )
        )
        views.append(SizeView(demand.bytes_of(resource_name), accounts, Reasons.for_resource(resource_name)))
    by_size = {table.resource_name: table for table in tables}
    if len(tables) == 1:
        return PodExplanation(by_size)
    numa = policy.numa_aligned and demand.guaranteed
    verdicts = {}
    for name in nodes:
        verdict, size_view = size_verdict(views, name, numa=numa)
        verdicts[name] = {"verdict": verdict.value, "resourceName": tables[views.index(size_view)].resource_name}
    return PodExplanation(by_size, verdicts)


_COLUMNS = ("NODE", "POOL", "USED", "RESERVED", "IN FLIGHT", "FREE", "NEED", "VERDICT", "LOAD", "SCORE", "AGENT RECORD")


def _record_cell(n: NodeExplanation) -> str:
    if n.report == ReportState.NONE.value:
        return "none"
    if n.report == ReportState.IGNORED.value:
        return f"ignored ({n.report_reason})"
    outside = "?" if n.report_outside_pages is None else str(n.report_outside_pages)
    return f"{n.report} {n.report_age_seconds:.0f}s: kernel {n.report_total_pages}, outside {outside}"


def render_table(explanation: PodExplanation | Explanation) -> str:
    """The table of each size the pod needs, then the verdict over every size and the summary."""
    if isinstance(explanation, Explanation):
        return _render_size(explanation)
    if len(explanation.tables) == 1:
        (table,) = explanation.tables.values()
        return _render_size(table)
    e = explanation
    lines = [_render_size(table, with_summary=False) + "\n" for table in e.tables.values()]
    lines.append("every size the pod needs, per node:")
    lines += [f"  {node}: {v['verdict']} ({v['resourceName']})" for node, v in e.verdicts.items()]
    lines += ["", e.summary]
    return "\n".join(lines)


def _render_size(explanation: Explanation, *, with_summary: bool = True) -> str:
    e = explanation
    lines = [
        f"pod {e.pod}: needs {e.need_bytes} bytes of {e.resource_name}, {e.cpu_millis}m CPU; mode {e.mode}",
        "(pool, used, reserved, in flight, free and need are in pages; reserved = held outside pods)",
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
            _record_cell(n),
        )
        for n in e.nodes
    ]
    widths = [max(len(row[i]) for row in cells) for i in range(len(_COLUMNS))]
    for row in cells:
        lines.append("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())
    if with_summary:
        lines += ["", e.summary]
    if e.fallback:
        lines.append(e.fallback)
    return "\n".join(lines)
