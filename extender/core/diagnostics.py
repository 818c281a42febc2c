"""What only the running extender knows, as a stable JSON document, and how a client reads it back.

The extender answers ``GET /debug/state`` with this document (server side:
``state_document``); ``explain --extender`` and ``kubectl hugepages`` read it
(``parse_state_document``) and lay its holds over the accounts they build from the
API (``with_holds``). Only figures leave the extender: per-node totals of
placements in flight, the namespace's effective policy, and node reports. Never
objects, pod names or UIDs, never anything from a Secret.

Pure: no I/O, no clock (ages are passed in).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import msgspec

from extender.core.capacity import NodeAccount
from extender.core.holds import Hold
from extender.core.policy import Policy, PolicyDocumentError, PolicyTable, policy_document, policy_from_document

STATE_VERSION = 1
MAX_STATE_NODES = 100  # nodes one state request may name: 100 names of 63 characters keep its URL under 8 KiB


class StateDocumentError(ValueError):
    """A state document this client cannot read (another version, or not a state document at all)."""


@dataclass(frozen=True, slots=True)
class NodeHolds:
    """Placements in flight to one node: their summed need, and how many pods."""

    hugepage_bytes: int = 0
    cpu_millis: int = 0
    pods: int = 0


@dataclass(frozen=True, slots=True)
class NodeReport:
    """A node's own record of pages held outside pods (the node agent's report), as the extender holds it.

    ``age_seconds`` is None when the extender has no report for the node."""

    outside_pods_bytes: int
    age_seconds: float | None
    stale: bool


@dataclass(frozen=True, slots=True)
class ExtenderState:
    """The state document, read back."""

    ready: bool
    namespace: str
    policy: Policy
    exempt: bool
    # Placements in flight per size guarded (every size the extender guards, in its config's order) and node.
    holds_by_size: dict[str, dict[str, NodeHolds]]
    placement: PolicyTable  # every namespace's policy: how the extender counts each namespace's pods
    # None: this extender publishes no node reports (the node agent's records are not wired in).
    node_reports: dict[str, NodeReport] | None

    @property
    def resource_names(self) -> tuple[str, ...]:
        return tuple(self.holds_by_size)

    def pods_held_on(self, nodes: Collection[str]) -> int:
        """Holds on ``nodes``: per node, the most pods any one size holds there (a pod holds on each size it asks)."""
        return sum(
            max((held[node].pods for held in self.holds_by_size.values() if node in held), default=0) for node in nodes
        )


def holds_per_node(
    holds: Mapping[str, Hold], nodes: Collection[str] | None = None, *, exclude_uid: str = ""
) -> dict[str, NodeHolds]:
    """Per node, the placements in flight to it. A hold holds its need on each of its nodes
    (the pod will land on one of them), so a pod counts once on every node it is held on.

    ``nodes``: only these (each named, zero when nothing is held); None: every node with a hold.
    ``exclude_uid``: leave this pod's own hold out, as the verbs do for the pod being placed."""
    totals: dict[str, list[int]] = {}
    wanted = None if nodes is None else set(nodes)
    for uid, hold in holds.items():
        if uid == exclude_uid:
            continue
        for node in hold.nodes:
            if wanted is not None and node not in wanted:
                continue
            entry = totals.setdefault(node, [0, 0, 0])
            entry[0] += hold.hugepage_bytes
            entry[1] += hold.cpu_millis
            entry[2] += 1
    held = {node: NodeHolds(*entry) for node, entry in totals.items()}
    if nodes is not None:
        return {node: held.get(node, NodeHolds()) for node in nodes}
    return dict(sorted(held.items()))


def state_document(
    *,
    ready: bool,
    namespace: str,
    policy: Policy,
    exempt: bool,
    holds_by_size: Mapping[str, Mapping[str, NodeHolds]],
    placement: PolicyTable,
    node_reports: Mapping[str, NodeReport] | None = None,
    gate_lifter: tuple[bool, str] | None = None,
) -> dict[str, Any]:
    """The ``/debug/state`` document (version 1) of ``holds_by_size`` (every size guarded, in the config's
    order). New keys may be added; none is renamed or removed: so ``resourceName`` and ``inFlight`` stay
    those of the first size, as version 1 has them, and ``sizes`` holds each other size's."""
    (resource_name, holds), *others = holds_by_size.items()
    return {
        "version": STATE_VERSION,
        "resourceName": resource_name,
        "ready": ready,
        "namespace": namespace,
        "policy": policy_document(policy),
        "exempt": exempt,
        "inFlight": _in_flight(holds),
        "placement": {
            "defaults": policy_document(placement.defaults),
            "namespaces": {ns: policy_document(p) for ns, p in sorted(placement.namespaces.items())},
            "exemptNamespaces": sorted(placement.exempt_namespaces),
        },
        "nodeReports": None
        if node_reports is None
        else {
            node: {"outsidePodsBytes": r.outside_pods_bytes, "ageSeconds": r.age_seconds, "stale": r.stale}
            for node, r in node_reports.items()
        },
        "resourceNames": list(holds_by_size),
        "sizes": {name: {"inFlight": _in_flight(held)} for name, held in others},
        # Whether this replica lifts scheduling gates now, and why (None: it lifts none, --no-lift-gates).
        "gateLifter": None if gate_lifter is None else {"lifts": gate_lifter[0], "why": gate_lifter[1]},
    }


def _in_flight(holds: Mapping[str, NodeHolds]) -> dict[str, Any]:
    return {
        node: {"hugepageBytes": h.hugepage_bytes, "cpuMillis": h.cpu_millis, "pods": h.pods}
        for node, h in holds.items()
    }


# A policy is read as a plain object: ``policy.policy_from_document`` knows its keys.
_PolicyDoc = dict[str, Any]


class _PlacementDoc(msgspec.Struct, rename="camel"):
    defaults: _PolicyDoc
    namespaces: dict[str, _PolicyDoc]
    exempt_namespaces: list[str]


class _HoldsDoc(msgspec.Struct, rename="camel"):
    hugepage_bytes: int
    cpu_millis: int
    pods: int


class _ReportDoc(msgspec.Struct, rename="camel"):
    outside_pods_bytes: int
    age_seconds: float | None
    stale: bool


class _SizeDoc(msgspec.Struct, rename="camel"):
    in_flight: dict[str, _HoldsDoc] = {}


class _StateDoc(msgspec.Struct, rename="camel"):
    version: int
    resource_name: str
    ready: bool
    namespace: str
    policy: _PolicyDoc
    exempt: bool
    in_flight: dict[str, _HoldsDoc]
    placement: _PlacementDoc
    node_reports: dict[str, _ReportDoc] | None = None
    resource_names: list[str] | None = None  # absent from an extender of one size
    sizes: dict[str, _SizeDoc] = {}


def _holds(doc: Mapping[str, _HoldsDoc]) -> dict[str, NodeHolds]:
    return {n: NodeHolds(h.hugepage_bytes, h.cpu_millis, h.pods) for n, h in doc.items()}


def _policy(document: _PolicyDoc) -> Policy:
    try:
        return policy_from_document(document)
    except PolicyDocumentError as error:
        raise StateDocumentError(f"not an extender state document: a policy: {error}") from None


def parse_state_document(body: bytes) -> ExtenderState:
    """Read a ``/debug/state`` answer. Unknown keys are ignored (a newer extender may add some)."""
    try:
        doc = msgspec.json.decode(body, type=_StateDoc)
    except (msgspec.ValidationError, msgspec.DecodeError) as error:
        raise StateDocumentError(f"not an extender state document: {error}") from None
    if doc.version != STATE_VERSION:
        raise StateDocumentError(f"state document version {doc.version}, this client reads {STATE_VERSION}")
    placement = PolicyTable(
        defaults=_policy(doc.placement.defaults),
        namespaces={ns: _policy(p) for ns, p in doc.placement.namespaces.items()},
        exempt_namespaces=frozenset(doc.placement.exempt_namespaces),
    )
    sizes = {name: size.in_flight for name, size in doc.sizes.items()}
    return ExtenderState(
        ready=doc.ready,
        namespace=doc.namespace,
        policy=_policy(doc.policy),
        exempt=doc.exempt,
        holds_by_size={
            name: _holds(doc.in_flight if name == doc.resource_name else sizes.get(name, {}))
            for name in doc.resource_names or (doc.resource_name,)
        },
        placement=placement,
        node_reports=None
        if doc.node_reports is None
        else {n: NodeReport(r.outside_pods_bytes, r.age_seconds, r.stale) for n, r in doc.node_reports.items()},
    )


def with_holds(accounts: Mapping[str, NodeAccount], holds: Mapping[str, NodeHolds]) -> dict[str, NodeAccount]:
    """The accounts as the extender decides on them: what the API shows, plus its placements in flight."""
    out = dict(accounts)
    for node, held in holds.items():
        account = out.get(node)
        if account is not None:
            out[node] = msgspec.structs.replace(
                account,
                held_bytes=account.held_bytes + held.hugepage_bytes,
                held_cpu_millis=account.held_cpu_millis + held.cpu_millis,
            )
    return out


# --------------------------------------------------------------------------- the per-node table


@dataclass(frozen=True, slots=True)
class NodeRow:
    """One line of ``kubectl hugepages nodes``, in bytes."""

    node: str
    pool_bytes: int
    pods_bytes: int  # requested by pods bound to the node
    outside_pods_bytes: int  # held outside pod requests (VMs, DPDK), as the node reports it
    in_flight_bytes: int  # placements in flight (only known with the extender's state)
    in_flight_pods: int
    free_bytes: int
    report_age_seconds: float | None  # None: no report (or the extender was not asked)
    resource: str = ""  # the pool's size (hugepages-2Mi, hugepages-1Gi), when the extender guards several

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def node_rows(
    accounts: Mapping[str, NodeAccount],
    holds: Mapping[str, NodeHolds],
    reports: Mapping[str, NodeReport] | None = None,
    resource: str = "",
) -> list[NodeRow]:
    """The per-node table of one size's pools (``resource``), nodes with a pool first (by name), then those without."""
    rows = []
    for name, account in with_holds(accounts, holds).items():
        page_size = account.page_size
        report = (reports or {}).get(name)
        rows.append(
            NodeRow(
                node=name,
                pool_bytes=account.total_pages * page_size,
                pods_bytes=account.used_pages * page_size,
                outside_pods_bytes=account.outside_pods_pages * page_size,
                in_flight_bytes=account.held_pages * page_size,
                in_flight_pods=holds[name].pods if name in holds else 0,
                free_bytes=account.free_pages * page_size,
                report_age_seconds=report.age_seconds if report is not None else None,
                resource=resource,
            )
        )
    rows.sort(key=lambda r: (r.pool_bytes == 0, r.node))
    return rows


_UNITS = (("Ti", 1 << 40), ("Gi", 1 << 30), ("Mi", 1 << 20), ("Ki", 1 << 10))


def format_bytes(nbytes: int) -> str:
    """A Kubernetes-style quantity: exact when it divides (``1Gi``, ``768Mi``), else one decimal of the largest unit."""
    if nbytes == 0:
        return "0"
    for unit, size in _UNITS:
        if nbytes % size == 0:
            return f"{nbytes // size}{unit}"
    for unit, size in _UNITS:
        if nbytes >= size:
            return f"{nbytes / size:.1f}{unit}"
    return str(nbytes)


def format_age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m"
    return f"{seconds / 3600:.0f}h"


_NODE_COLUMNS = ("NODE", "POOL", "PODS", "OUTSIDE PODS", "IN FLIGHT", "FREE", "REPORT AGE")


def render_node_rows(rows: Iterable[NodeRow], *, with_extender: bool) -> str:
    """The table; a SIZE column after NODE when the rows are of several sizes."""
    rows = list(rows)
    sized = len({r.resource for r in rows}) > 1
    cells: list[tuple[str, ...]] = [("NODE", "SIZE", *_NODE_COLUMNS[1:]) if sized else _NODE_COLUMNS]
    for r in rows:
        inflight = f"{format_bytes(r.in_flight_bytes)} ({r.in_flight_pods})" if with_extender else "?"
        cells.append(
            (
                r.node,
                *((r.resource,) if sized else ()),
                format_bytes(r.pool_bytes),
                format_bytes(r.pods_bytes),
                format_bytes(r.outside_pods_bytes),
                inflight,
                format_bytes(r.free_bytes),
                format_age(r.report_age_seconds),
            )
        )
    widths = [max(len(row[i]) for row in cells) for i in range(len(cells[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells]
    if not with_extender:
        lines += ["", "IN FLIGHT: ask the extender (--extender URL) for the placements it holds in flight"]
    return "\n".join(lines)


# --------------------------------------------------------------------------- the cluster's pools, summed


@dataclass(frozen=True, slots=True)
class PoolTotals:
    """Every node's pool summed, in bytes: capacity planning across the cluster."""

    capacity_bytes: int = 0
    pods_bytes: int = 0
    outside_pods_bytes: int = 0
    in_flight_bytes: int = 0


def pool_totals(accounts: Iterable[NodeAccount]) -> PoolTotals:
    """In-flight bytes are counted once per node they are held on (what the filter sees), and
    never beyond what a node's pool has left, so the held total never exceeds the capacity."""
    capacity = pods = outside = inflight = 0
    for a in accounts:
        if not a.has_pool:
            continue
        page_size = a.page_size
        capacity += a.total_pages * page_size
        pods += a.used_pages * page_size
        outside += a.outside_pods_pages * page_size
        inflight += min(a.held_pages, max(0, a.total_pages - a.committed_pages)) * page_size
    return PoolTotals(capacity, pods, outside, inflight)
