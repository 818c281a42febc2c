"""The cluster as the extender's decisions see it: one NodeAccount per node.

Fed by a snapshot file or by the list/watch of a live cluster (the same calls
either way), by the node agents' records, and by the extender's own placements
in flight. Every change rebuilds only the accounts of the nodes it touches, so a
decision reads ready values and never walks pods.

What a node's record changes (docs/design.md, "The node's own count"): while it is
fresher than ``nodeReportMaxAgeSeconds``, the kernel's total caps the pool and its
pages held outside pods are committed; older, or absent, the node is counted from pod
requests alone (plus the manual annotation, which overrides the record where set).
The records and their freshness are kept by ``reports.NodeReports``.
A malformed or absurd record or annotation is ignored, counted and logged: it never
stops the state from loading.
"""

from __future__ import annotations

import logging
import sys
import time
from collections import ChainMap, Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import cast

import msgspec

from extender.capacity import NodeAccount, headroom_bytes, hugepages_for
from extender.columns import NodeColumns
from extender.config import Config
from extender.gates import GatedPod
from extender.holds import Hold, HoldLedger, nodes_of
from extender.nodeinputs import NodeCapacity, node_capacity
from extender.nodereport import PoolReport, ReportError, ReportRecord, report_record
from extender.objects import Node, Pod
from extender.podoutcome import PodSignal, signal_of
from extender.podrequest import PodDemand, pod_demand
from extender.policy import Mode, Policy
from extender.reach import NodeReach, node_reach
from extender.reports import NodeReports, ReportView

log = logging.getLogger("extender.cluster")


# The records below hold only strings and integers, so they can form no reference
# cycle: gc=False keeps 100,000 pods' records out of every garbage collection.


def _fresh() -> str | None:
    return None


class PodUsage(msgspec.Struct, frozen=True, gc=False):
    node: str
    pages: int
    cpu_millis: int


class PodRecord(msgspec.Struct, frozen=True, gc=False):
    """What the state keeps of a pod: a few numbers, never the object itself."""

    uid: str
    usage: PodUsage | None  # None: not bound, or terminal
    terminal: bool
    owner: str = ""  # "namespace/name": who may hold pages under this UID while it waits ("" once bound or over)
    demand: PodDemand | None = None  # what it needs, while it waits: holds and binds use this, not a caller's word
    more_pages: tuple[int, ...] = ()  # a bound pod's pages of each further size (Config.more_resource_names)
    # A shadow namespace's bound or ended pod: its status as the scorecard reads it (extender.scorecard).
    # Never kept: the state keeps the usage; the record passes through the watch's handlers.
    signal: PodSignal | None = None
    pod: str = ""  # namespace/name, with a signal
    gated: GatedPod | None = None  # behind the extender's scheduling gate (extender.gates); passes through, never kept

    def of_size(self, index: int) -> PodRecord:
        """The record as the accounts of the further size ``index`` (1, 2, ...) keep it: the pages of that
        size, the same CPU."""
        usage = self.usage
        if usage is not None:
            pages = self.more_pages[index - 1] if index <= len(self.more_pages) else 0
            usage = PodUsage(usage.node, pages, usage.cpu_millis)
        return PodRecord(self.uid, usage, self.terminal)


# A node agent's record read for every size guarded: the first size's, then each further size's.
SizedReportRecord = tuple[str, PoolReport | None, ReportError | None, tuple[ReportRecord, ...]]


class ClusterState:
    """The accounts of the first size guarded (``Config.resource_name``), and beside them one
    ``ClusterState`` per further size (``sizes``), fed with every change this one is fed: each
    keeps its own pools, pages used, pages held outside pods, holds and columns, and the same CPU.
    A one-size cluster has none beside it and pays nothing for them."""

    def __init__(
        self,
        config: Config,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        *,
        on_hold_bound: Callable[[float], None] | None = None,
    ) -> None:
        """``on_hold_bound(seconds)`` hears, for each hold whose pod shows up bound,
        how long the hold lasted: how long capacity stays locked per placement."""
        self._config = config
        self._on_hold_bound = on_hold_bound
        self._page_size = config.page_size_bytes
        self._clock = clock
        self.ignored: Counter[tuple[str, str]] = Counter()  # (input kind, reason) -> times seen
        self.reports = NodeReports(config.placement.defaults.node_report_max_age_seconds, wall_clock, self.ignored)
        self.accounts: dict[str, NodeAccount] = {}
        self.headroom: dict[str, int] = {}  # capacity.headroom_bytes of every account
        # The accounts again, as numpy columns for decisions over many nodes.
        self._columns = NodeColumns(before_read=self._refresh_columns)
        self._stale_columns: set[str] = set()  # accounts changed since the columns last saw them
        self._stale_holds: set[str] = set()  # accounts whose holds alone changed since then
        # Nodes whose headroom rose since the last ``take_freed``, each with its headroom before
        # that first rise: room freed, which the scheduler may not know of (docs/design.md, "Requeue").
        self._raised: dict[str, int] = {}
        self._nodes: dict[str, NodeCapacity] = {}
        self._pods: dict[str, PodUsage] = {}
        self._used_pages: defaultdict[str, int] = defaultdict(int)
        self._used_cpu: defaultdict[str, int] = defaultdict(int)
        self._ledger = HoldLedger()
        # Pods waiting to be placed, by UID: what a filter's pod must match to hold pages.
        self._waiting: dict[str, str] = {}
        self._waiting_demands: dict[str, PodDemand] = {}  # the same pods' needs, as the watch shows them
        self.ready = False  # synced: a full listing is loaded
        # Why the picture may be stale (a watch making no progress), or None; set by the informer.
        self.staleness: Callable[[], str | None] = _fresh
        self._more = tuple(
            ClusterState(config.for_size(name), clock, wall_clock) for name in config.more_resource_names
        )

    @property
    def sizes(self) -> tuple[ClusterState, ...]:
        """One state per size guarded, in ``Config.resource_names``' order: this one first."""
        return (self, *self._more)

    # -- what decisions and diagnostics read ---------------------------------

    @property
    def columns(self) -> NodeColumns:
        """The accounts as numpy columns, brought up to date when a column is read: only
        decisions over many nodes read them, while every hold and every pod event changes
        accounts."""
        return self._columns

    def _refresh_columns(self) -> None:
        stale, holds = self._stale_columns, self._stale_holds
        if not (stale or holds):
            return
        accounts, columns = self.accounts, self._columns
        for name in stale:
            account = accounts.get(name)
            if account is not None:
                columns.put(name, account)
        if holds:
            headroom = self.headroom
            for name in holds:  # only what a hold changes is written (ClusterState._refresh_holds)
                account = accounts.get(name)
                if account is not None and name not in stale and not columns.put_held(name, account, headroom[name]):
                    columns.put(name, account)
            holds.clear()
        stale.clear()

    def unready_reason(self) -> str | None:
        """None when decisions may be made from this state; else why not."""
        if not self.ready:
            return "cluster state not synced yet"
        return self.staleness()

    @property
    def resource_name(self) -> str:
        return self._config.resource_name

    @property
    def page_size(self) -> int:
        return self._page_size

    @property
    def node_count(self) -> int:
        return len(self._nodes)

    @property
    def pod_count(self) -> int:
        return len(self._pods)

    @property
    def hold_count(self) -> int:
        return len(self._ledger)

    def reach_of(self, name: str) -> NodeReach | None:
        """Which pods may use the node (its labels and taints); None for a node this state does not know."""
        capacity = self._nodes.get(name)
        return capacity.reach if capacity is not None else None

    def least_waiting_need(self, uids: Iterable[str]) -> int:
        """The least need (bytes of the first size) of the pods ``uids`` the watch shows waiting; 0 when none."""
        demands = self._waiting_demands
        return min((demand.hugepage_bytes for uid in uids if (demand := demands.get(uid)) is not None), default=0)

    def owner_of(self, uid: str) -> str | None:
        """``namespace/name`` of a pod the watch shows waiting for a node; None if none is."""
        return self._waiting.get(uid)

    def now(self) -> float:
        return self._clock()

    def is_bound(self, uid: str) -> bool:
        return uid in self._pods

    @property
    def config(self) -> Config:
        return self._config

    def policy_for(self, namespace: str) -> Policy:
        return self._config.policy_for(namespace)

    def demand_for(self, pod: Pod, policy: Policy | None = None) -> PodDemand:
        """The pod's need as the watch shows it, when it shows this pod (UID, namespace and
        name) waiting; else as the caller's copy says (a pod the watch has not shown yet).
        Whoever reaches the verbs may name a real pod with a made-up need: holds, binds and
        answers about a pod the watch shows are computed from the watch's copy."""
        meta = pod.metadata
        shown = self._waiting_demands.get(meta.uid)
        if shown is not None and self._waiting.get(meta.uid) == f"{meta.namespace}/{meta.name}":
            return shown
        return self.demand_of(pod, policy)

    def demand_of(self, pod: Pod, policy: Policy | None = None) -> PodDemand:
        """The pod's need, as its namespace's policy (``policy``, when already looked up) counts it."""
        if policy is None:
            policy = self.policy_for(pod.metadata.namespace)
        if not self._more:
            return pod_demand(
                pod,
                self._config.resource_name,
                need_from_memory=policy.need_from_memory,
                memory_runtime_class=policy.need_from_memory_runtime_class,
                with_qos=policy.numa_aligned,
            )
        return pod_demand(
            pod,
            self._config.resource_name,
            need_from_memory=policy.need_from_memory,
            memory_runtime_class=policy.need_from_memory_runtime_class,
            with_qos=policy.numa_aligned,
            more_resources=self._config.more_resource_names,
            memory_index=self._config.memory_index(policy),
        )

    # -- feeding it ----------------------------------------------------------

    def replace(
        self, nodes: Iterable[Node], pods: Iterable[Pod], reports: Iterable[tuple[str, bytes | None]] = ()
    ) -> None:
        """Load a full listing (a snapshot); marks the state ready.

        Every object is read before anything changes, so a bad object leaves
        the previous state whole (a bad agent record is ignored, as in a live cluster).
        """
        capacities = [self.node_record(n) for n in nodes]
        records = [self.pod_record(p) for p in pods]
        read = [self.report_record(name, raw) for name, raw in reports]
        self.replace_nodes(capacities)
        self.replace_pods(records)
        self.replace_reports(read)
        self.ready = True

    # Records are computed from objects by pure reads of the config, so a
    # watch thread can compact a page of objects before handing it over.

    def node_record(self, node: Node) -> tuple[str, NodeCapacity]:
        capacity = node_capacity(node, self._config.resource_name, self._page_size)
        more = tuple(node_capacity(node, size.resource_name, size.page_size) for size in self._more)
        return node.metadata.name, msgspec.structs.replace(capacity, more=more, reach=node_reach(node))

    def with_signal(self, record: PodRecord, pod: Pod) -> PodRecord:
        """The record of a bound pod of a shadow namespace with its status as the scorecard reads it."""
        if pod.spec.node_name and self._config.policy_for(pod.metadata.namespace).mode is Mode.SHADOW:
            meta = pod.metadata
            return msgspec.structs.replace(record, signal=signal_of(pod), pod=f"{meta.namespace}/{meta.name}")
        return record

    def pod_record(self, pod: Pod) -> PodRecord:
        meta = pod.metadata
        node = pod.spec.node_name
        if node and not pod.is_terminal:
            demand = self.demand_of(pod)
            # Interned: the watch decodes a new copy of the node's name with every pod, and the pods
            # of a node then share one string (17 MiB less at 300,000 pods on 15,000 nodes).
            usage = PodUsage(sys.intern(node), hugepages_for(demand.hugepage_bytes, self._page_size), demand.cpu_millis)
            if not self._more:
                return PodRecord(meta.uid, usage, False)
            more = tuple(
                hugepages_for(need, size.page_size) for need, size in zip(demand.more_bytes, self._more, strict=False)
            )
            return PodRecord(meta.uid, usage, False, more_pages=more)
        # Only a pod waiting for a node is remembered with its owner (``_waiting``): a string for
        # each of 300,000 bound pods was 18 MiB a list left behind (docs/performance.md, Scale).
        if pod.is_terminal:
            return PodRecord(meta.uid, None, True)
        return PodRecord(meta.uid, None, False, f"{meta.namespace}/{meta.name}", self.demand_of(pod))

    def report_record(self, name: str, raw: bytes | None) -> SizedReportRecord:
        """A node agent's record read for every size guarded (never raising): what ``apply_report`` takes."""
        more = tuple(report_record(name, raw, size.resource_name, size.page_size) for size in self._more)
        return (*report_record(name, raw, self.resource_name, self._page_size), more)

    def replace_nodes(self, records: Iterable[tuple[str, NodeCapacity]]) -> None:
        """A relist of Nodes."""
        nodes = dict(records)
        for name, capacity in nodes.items():
            self._count_ignored(name, capacity)
        self._install_nodes(nodes)
        for index, size in enumerate(self._more, start=1):
            size.replace_nodes((name, _more_capacity(capacity, index)) for name, capacity in nodes.items())

    def replace_pods(self, records: Iterable[PodRecord]) -> None:
        """A relist of Pods. Placements in flight survive it unless the pod now shows bound."""
        records = list(records)
        for index, size in enumerate(self._more, start=1):
            size.replace_pods(record.of_size(index) for record in records)
        self._waiting = {r.uid: r.owner for r in records if r.usage is None and not r.terminal}
        self._waiting_demands = {r.uid: r.demand for r in records if r.uid in self._waiting and r.demand is not None}
        self._install_pods({r.uid: r.usage for r in records if r.usage is not None})

    def _install_nodes(self, capacities: dict[str, NodeCapacity]) -> None:
        self._nodes = capacities
        self._rebuild_accounts()

    def _rebuild_accounts(self) -> None:
        before = self.headroom
        self.accounts = {name: self._account(name) for name in self._nodes}
        self.headroom = {name: headroom_bytes(account) for name, account in self.accounts.items()}
        for name, room in self.headroom.items():
            if room > (old := before.get(name, -1)):
                self._raised.setdefault(name, old)
        self._stale_columns.clear()
        self._stale_holds.clear()
        self._columns.clear()
        for name, account in self.accounts.items():
            self._columns.put(name, account)

    def _install_pods(self, usages: dict[str, PodUsage]) -> None:
        self._pods = usages
        self._used_pages.clear()
        self._used_cpu.clear()
        for usage in usages.values():
            self._used_pages[usage.node] += usage.pages
            self._used_cpu[usage.node] += usage.cpu_millis
        for uid in [uid for uid in self._ledger.holds() if uid in usages]:
            self._ledger.release(uid)
        self._rebuild_accounts()

    def apply_node(self, node: Node) -> None:
        self.apply_node_record(*self.node_record(node))

    def apply_node_record(self, name: str, capacity: NodeCapacity) -> None:
        self._count_ignored(name, capacity)
        self._nodes[name] = capacity
        self._refresh({name})
        for index, size in enumerate(self._more, start=1):
            size.apply_node_record(name, _more_capacity(capacity, index))

    def _count_ignored(self, name: str, capacity: NodeCapacity) -> None:
        if capacity.ignored:
            self.ignored["annotation", capacity.ignored] += 1

    # -- the node agents' records ----------------------------------------------

    def apply_report(
        self,
        name: str,
        report: PoolReport | None,
        error: ReportError | None = None,
        more: tuple[ReportRecord, ...] = (),
    ) -> None:
        """A node's record, read (``report_record``) in the watch thread: its figures for the first
        page size, None when it has none, or the error that made it unusable; ``more``, the same for
        each further size."""
        self._refresh(self.reports.apply(name, report, error))
        for index, size in enumerate(self._more, start=1):
            size.apply_report(*(more[index - 1] if index <= len(more) else (name, None, error)))

    def remove_report(self, name: str) -> None:
        self.reports.forget(name)
        self._refresh({name})
        for size in self._more:
            size.remove_report(name)

    def replace_reports(self, records: Iterable[ReportRecord | SizedReportRecord]) -> None:
        """A relist of records."""
        records = list(records)
        self._refresh(self.reports.replace(record[:3] for record in records))
        for index, size in enumerate(self._more, start=1):
            size.replace_reports(_more_report(record, index) for record in records)

    def expire_reports(self) -> None:
        """Records that are now older than the max age stop counting: O(1) when none is due."""
        self._refresh(self.reports.expire())
        for size in self._more:
            size.expire_reports()

    @property
    def stale_reports(self) -> int:
        return self.reports.stale_reports

    def reported_nodes(self) -> list[str]:
        """Nodes with an agent record the extender keeps."""
        return [name for name in self.reports.reported() if name in self._nodes]

    def report_view(self, name: str, max_age: float | None = None) -> ReportView:
        return self.reports.view(name, max_age)

    def report_counts(self) -> dict[str, int]:
        """Nodes by the state of their record, under the defaults' max age. ``none`` counts only the
        nodes whose pages held outside pods nobody states: a pool, no record, no annotation (a node
        without a pool has nothing to hold; an annotated one is stated by hand). O(nodes), per scrape."""
        unstated = sum(
            1
            for name, capacity in self._nodes.items()
            if capacity.total_pages > 0 and not capacity.annotated and not self.reports.stated(name)
        )
        return self.reports.counts(self._nodes, unstated)

    def view_for(self, policy: Policy) -> tuple[Mapping[str, NodeAccount], Mapping[str, int], bool]:
        """The accounts (and headroom) as a namespace whose ``nodeReportMaxAgeSeconds`` differs from
        the defaults' sees them, and whether they differ. O(records) for such namespaces only."""
        if not self.reports:
            return self.accounts, self.headroom, False
        overlay = {
            name: self._account(name, fresh=fresh)
            for name, fresh in self.reports.differing(policy.node_report_max_age_seconds)
            if name in self._nodes
        }
        if not overlay:
            return self.accounts, self.headroom, False
        room = {name: headroom_bytes(account) for name, account in overlay.items()}
        return ChainMap(overlay, self.accounts), ChainMap(room, self.headroom), True

    def remove_node(self, name: str) -> None:
        self._nodes.pop(name, None)
        self.accounts.pop(name, None)
        self.headroom.pop(name, None)
        self._columns.drop(name)
        for size in self._more:
            size.remove_node(name)

    def apply_pod(self, pod: Pod) -> None:
        self.apply_pod_record(self.pod_record(pod))

    def apply_pod_record(self, record: PodRecord) -> None:
        for index, size in enumerate(self._more, start=1):
            size.apply_pod_record(record.of_size(index))
        uid, usage = record.uid, record.usage
        touched = self._forget_pod(uid)
        self._waiting_demands.pop(uid, None)
        if usage is None and not record.terminal:
            self._waiting[uid] = record.owner
            if record.demand is not None:
                self._waiting_demands[uid] = record.demand
        else:
            self._waiting.pop(uid, None)
        if usage is not None:
            self._pods[uid] = usage
            self._used_pages[usage.node] += usage.pages
            self._used_cpu[usage.node] += usage.cpu_millis
            touched.add(usage.node)
            held = self._ledger.hold_of(uid)
            if held is not None and self._on_hold_bound is not None:
                self._on_hold_bound(self._clock() - held.held_at)
            touched |= self._ledger.release(uid)
        elif record.terminal:
            touched |= self._ledger.release(uid)
        self._refresh(touched)

    def remove_pod(self, uid: str) -> None:
        for size in self._more:
            size.remove_pod(uid)
        self._waiting.pop(uid, None)
        self._waiting_demands.pop(uid, None)
        touched = self._forget_pod(uid) | self._ledger.release(uid)
        self._refresh(touched)

    def hold(self, uid: str, nodes: str | Sequence[str], demand: PodDemand, timeout_seconds: float) -> bool:
        """Count a placement in flight on ``nodes`` until it is seen bound, gone, or times out.

        Several nodes: the pod will go to one of them, which one is not known
        yet, so its need is held on each. A pod already seen bound is counted
        by its usage, never twice. Each further size the pod asks pages of holds them
        there, with its CPU; a size it asks none of holds nothing, as a pod asking no
        hugepages holds nothing (its CPU in flight is not counted in that size's scores).
        """
        if uid in self._pods or not uid or not nodes:
            return False
        for index, size in enumerate(self._more, start=1):
            need = demand.of_size(index)
            if need.wants_hugepages:
                size.hold(uid, nodes, need, timeout_seconds)
            else:
                size.release(uid)
        now = self._clock()
        earlier = self._ledger.hold_of(uid)
        held_at = now if earlier is None else earlier.held_at
        hold = Hold(nodes_of(nodes), demand.hugepage_bytes, demand.cpu_millis, now + timeout_seconds, held_at)
        self._refresh_holds(self._ledger.hold(uid, hold))
        return True

    def accounts_without(
        self, uid: str, accounts: Mapping[str, NodeAccount] | None = None
    ) -> Mapping[str, NodeAccount]:
        """The accounts (default: the state's) as the pod ``uid`` should see them: without its own hold."""
        return self.accounts_without_holds((uid,), accounts)

    def accounts_without_holds(
        self, uids: Iterable[str], accounts: Mapping[str, NodeAccount] | None = None
    ) -> Mapping[str, NodeAccount]:
        """The accounts (default: the state's) without the holds of ``uids`` (``accounts`` itself when none holds)."""
        base = self.accounts if accounts is None else accounts
        own: dict[str, NodeAccount] = {}
        for uid in uids:
            hold = self._ledger.hold_of(uid)
            if hold is None:
                continue
            for node in hold.nodes:
                account = own.get(node) or base.get(node)
                if account is not None:
                    own[node] = msgspec.structs.replace(
                        account,
                        held_bytes=account.held_bytes - hold.hugepage_bytes,
                        held_cpu_millis=account.held_cpu_millis - hold.cpu_millis,
                    )
        return ChainMap(own, cast("dict[str, NodeAccount]", base)) if own else base  # read, never written

    def release(self, uid: str) -> None:
        """Stop counting a placement in flight (its bind failed)."""
        self._refresh_holds(self._ledger.release(uid))
        for size in self._more:
            size.release(uid)

    def expire_holds(self) -> None:
        self._refresh_holds(self._ledger.expire(self._clock()))
        for size in self._more:
            size.expire_holds()

    def take_freed(self, least_need: Callable[[], int] = lambda: 0) -> bool:
        """Whether some node has more room than when last asked (a hold released, a record giving
        pages back, a pod gone), and now at least ``least_need()`` bytes (the least a waiting pod asks
        of this size: room no waiting pod fits in places none; asked only when some node's room rose),
        and start afresh. A rise undone since (a pod's new attempt releases its old hold and holds again)
        is no room freed. O(nodes raised since the last call). A further size's rise counts whatever its
        room (the pods' needs of it are not asked)."""
        raised, self._raised = self._raised, {}
        headroom = self.headroom
        rose = [room for name, before in raised.items() if (room := headroom.get(name, -1)) > before]
        freed = bool(rose) and max(rose) >= least_need()
        for size in self._more:
            freed = size.take_freed() or freed  # every size asked, so each starts afresh
        return freed

    def holds(self) -> dict[str, Hold]:
        return self._ledger.holds()

    # -- internals -----------------------------------------------------------

    def _forget_pod(self, uid: str) -> set[str]:
        usage = self._pods.pop(uid, None)
        if usage is None:
            return set()
        self._used_pages[usage.node] -= usage.pages
        self._used_cpu[usage.node] -= usage.cpu_millis
        return {usage.node}

    def _account(self, name: str, *, fresh: bool | None = None) -> NodeAccount:
        capacity = self._nodes[name]
        held_bytes, held_cpu = self._ledger.held_on(name)
        used = self._used_pages.get(name, 0)
        total, reserved, numa_free = capacity.total_pages, capacity.reserved_pages, -1
        report = self.reports.used(name, fresh=fresh)
        if report is not None:
            total, reserved, numa_free = _with_report(capacity, report, used)
        return NodeAccount(
            page_size=self._page_size,
            total_pages=total,
            used_pages=used,
            reserved_pages=reserved,
            numa_free_pages=numa_free,
            held_bytes=held_bytes,
            cpu_millis=capacity.cpu_millis,
            cpu_requested_millis=self._used_cpu.get(name, 0),
            held_cpu_millis=held_cpu,
        )

    def _refresh(self, names: Iterable[str]) -> None:
        headroom = self.headroom
        for name in names:
            if name in self._nodes:
                account = self._account(name)
                self.accounts[name] = account
                room = headroom_bytes(account)
                if room > (old := headroom.get(name, -1)):
                    self._raised.setdefault(name, old)
                headroom[name] = room
                self._stale_columns.add(name)

    def _refresh_holds(self, names: Iterable[str]) -> None:
        """``_refresh`` after a change of holds alone (a hold placed, released or expired), which is most
        of a filter's own work on the state: only the accounts' held bytes and CPU change. Every other
        change to a node rebuilds its account (``_refresh``), so every other field is already what
        ``_account`` would give: the account is the same with its held figures replaced, and the
        columns rewrite only what holds change (``NodeColumns.put_held``). O(nodes touched), a few
        attribute reads each. ``tests/test_properties.py`` holds the state to a rebuild of every account
        and a fresh table after any sequence of changes."""
        accounts, headroom, held_on, raised = self.accounts, self.headroom, self._ledger.held_on, self._raised
        stale = self._stale_holds
        for name in names:
            account = accounts.get(name)  # the accounts' names are the nodes'
            if account is None:
                continue
            held_bytes, held_cpu = held_on(name)
            account = msgspec.structs.replace(account, held_bytes=held_bytes, held_cpu_millis=held_cpu)
            accounts[name] = account
            room = headroom_bytes(account)
            if room > (old := headroom.get(name, -1)):
                raised.setdefault(name, old)
            headroom[name] = room
            stale.add(name)


def _more_capacity(capacity: NodeCapacity, index: int) -> NodeCapacity:
    """A Node's inputs for the further size ``index`` (1, 2, ...: an index into ``Config.resource_names``):
    no pool when a record was read without it."""
    if index <= len(capacity.more):
        return capacity.more[index - 1]
    return NodeCapacity(0, 0, capacity.cpu_millis)


def _more_report(record: ReportRecord | SizedReportRecord, index: int) -> ReportRecord:
    """A record's figures for the further size ``index`` (1, 2, ...: an index into ``Config.resource_names``)."""
    if len(record) > 3:
        more = record[3]
        if index <= len(more):
            found: ReportRecord = more[index - 1]
            return found
    return record[0], None, record[2]


def _with_report(capacity: NodeCapacity, report: PoolReport, used_pages: int) -> tuple[int, int, int]:
    """(pool, pages held outside pods, best NUMA node's free pages) from a fresh record.

    Pods can use at most min(allocatable, kernel total - outside) pages: the kubelet admits up to
    allocatable, the kernel has what is not held outside pods. As an account, pool = min(allocatable,
    kernel total) and outside = what the kubelet does not already keep out of allocatable (its
    reserved hugepages are where system daemons belong): outside - (kernel total - pool), floored.
    A NUMA node's free pages lose the kernel's unfaulted holds (it does not say whose) and the
    pages pods requested but do not hold yet (just bound, not started)."""
    total = min(capacity.total_pages, report.total_pages)
    if capacity.annotated:
        reserved = capacity.reserved_pages
    elif report.outside_pages is not None:
        reserved = max(0, report.outside_pages - (report.total_pages - total))
    else:
        reserved = 0
    numa_free = -1
    if report.numa_free_pages:
        not_yet_held = max(0, used_pages - report.pod_pages) if report.pod_pages is not None else used_pages
        numa_free = max(0, max(report.numa_free_pages) - report.reserved_pages - not_yet_held)
    return total, reserved, numa_free
