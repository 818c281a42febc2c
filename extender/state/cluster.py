"""The cluster as the extender's decisions see it: one NodeAccount per node and page size.

Fed by a snapshot file or by the list/watch of a live cluster (the same calls
either way), by the node agents' records, and by the extender's own placements
in flight. Every change rebuilds only the accounts of the nodes it touches, so a
decision reads ready values and never walks pods.

What a node's record changes (docs/design.md, "The node's own count"): while it is
fresher than ``nodeReportMaxAgeSeconds``, the kernel's total caps the pool and its
pages held outside pods are committed; older, or absent, the node is counted from pod
requests alone (plus the manual annotation, which overrides the record where set).
Each size's records are kept by a ``reports.NodeReports``, its accounts by a ``book.SizeBook``.
A malformed or absurd record or annotation is ignored, counted and logged: it never
stops the state from loading.
"""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, KeysView, Mapping, Sequence

from extender.core.config import Config
from extender.core.holds import Hold, nodes_of
from extender.core.nodereport import PoolReport, ReportError
from extender.core.objects import Node, Pod
from extender.core.podrequest import PodDemand
from extender.core.policy import Policy
from extender.core.reach import NodeReach
from extender.state.book import SizeBook
from extender.state.nodeinputs import NodeCapacity
from extender.state.records import PodRecord, PodUsage, RecordReader, ReportRecords
from extender.state.reports import NodeReports


def _fresh() -> str | None:
    return None


class ClusterState(RecordReader):
    """The nodes, the pods, the pods waiting for a node and whether the picture is ready, kept once;
    and one book of accounts per page size guarded (``books``, keyed by resource name), each fed
    with every change that touches its size."""

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
        super().__init__(config)
        self._on_hold_bound = on_hold_bound
        self._clock = clock
        self.ignored: Counter[tuple[str, str]] = Counter()  # (input kind, reason) -> times seen
        self._nodes: dict[str, NodeCapacity] = {}
        self._pods: dict[str, PodUsage] = {}
        self._used_cpu: defaultdict[str, int] = defaultdict(int)
        max_age = config.placement.defaults.node_report_max_age_seconds
        self.books: dict[str, SizeBook] = {
            name: SizeBook(name, page, self._nodes, self._used_cpu, NodeReports(max_age, wall_clock, self.ignored))
            for name, page in self._page_sizes.items()
        }
        # Pods waiting to be placed, by UID: what a filter's pod must match to hold pages.
        self._waiting: dict[str, str] = {}
        self._waiting_demands: dict[str, PodDemand] = {}  # the same pods' needs, as the watch shows them
        self.ready = False  # synced: a full listing is loaded
        # Why the picture may be stale (a watch making no progress), or None; set by the informer.
        self.staleness: Callable[[], str | None] = _fresh

    # -- what decisions and diagnostics read ---------------------------------

    def unready_reason(self) -> str | None:
        """None when decisions may be made from this state; else why not."""
        if not self.ready:
            return "cluster state not synced yet"
        return self.staleness()

    @property
    def node_count(self) -> int:
        return len(self._nodes)

    @property
    def pod_count(self) -> int:
        return len(self._pods)

    @property
    def hold_count(self) -> int:
        """Pods with a placement in flight, whatever sizes they hold."""
        return len(set().union(*(book.holds() for book in self.books.values())))

    def nodes(self) -> KeysView[str]:
        """The names of the nodes this state knows (every book has an account for each)."""
        return self._nodes.keys()

    def reach_of(self, name: str) -> NodeReach | None:
        """Which pods may use the node (its labels and taints); None for a node this state does not know."""
        capacity = self._nodes.get(name)
        return capacity.reach if capacity is not None else None

    def owner_of(self, uid: str) -> str | None:
        """``namespace/name`` of a pod the watch shows waiting for a node; None if none is."""
        return self._waiting.get(uid)

    def now(self) -> float:
        return self._clock()

    def is_bound(self, uid: str) -> bool:
        return uid in self._pods

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

    def replace_nodes(self, records: Iterable[tuple[str, NodeCapacity]]) -> None:
        """A relist of Nodes."""
        nodes = dict(records)
        for capacity in nodes.values():
            self._count_ignored(capacity)
        self._nodes.clear()
        self._nodes.update(nodes)
        for book in self.books.values():
            book.rebuild()

    def replace_pods(self, records: Iterable[PodRecord]) -> None:
        """A relist of Pods. Placements in flight survive it unless the pod now shows bound."""
        records = list(records)
        self._waiting = {r.uid: r.owner for r in records if r.usage is None and not r.terminal}
        self._waiting_demands = {r.uid: r.demand for r in records if r.uid in self._waiting and r.demand is not None}
        usages = {r.uid: r.usage for r in records if r.usage is not None}
        self._pods = usages
        self._used_cpu.clear()
        for usage in usages.values():
            self._used_cpu[usage.node] += usage.cpu_millis
        for index, book in enumerate(self.books.values()):
            book.replace_used(((usage.node, usage.pages[index]) for usage in usages.values()), bound=usages)

    def apply_node(self, node: Node) -> None:
        self.apply_node_record(*self.node_record(node))

    def apply_node_record(self, name: str, capacity: NodeCapacity) -> None:
        self._count_ignored(capacity)
        self._nodes[name] = capacity
        self._refresh({name})

    def _count_ignored(self, capacity: NodeCapacity) -> None:
        for pool in capacity.pools.values():
            if pool.ignored:
                self.ignored["annotation", pool.ignored] += 1

    def remove_node(self, name: str) -> None:
        self._nodes.pop(name, None)
        for book in self.books.values():
            book.remove_node(name)

    # -- the node agents' records ----------------------------------------------

    def apply_report(self, name: str, by_size: Mapping[str, tuple[PoolReport | None, ReportError | None]]) -> None:
        """A node's record, read (``report_record``) in the watch thread: for each size its figures,
        None when it has none, or the error that made it unusable. A size it does not name has none."""
        for size, book in self.books.items():
            book.apply_report(name, *by_size.get(size, (None, None)))

    def remove_report(self, name: str) -> None:
        for book in self.books.values():
            book.reports.forget(name)
            book.refresh({name})

    def replace_reports(self, records: Iterable[ReportRecords]) -> None:
        """A relist of records."""
        records = list(records)
        for size, book in self.books.items():
            read = ((name, *by_size.get(size, (None, None))) for name, by_size in records)
            book.refresh(book.reports.replace(read))

    def expire_reports(self) -> None:
        """Records that are now older than the max age stop counting: O(1) when none is due."""
        for book in self.books.values():
            book.refresh(book.reports.expire())

    @property
    def stale_reports(self) -> int:
        """Records that went stale while used, each size's counted."""
        return sum(book.reports.stale_reports for book in self.books.values())

    def reported_nodes(self) -> list[str]:
        """Nodes with an agent record the extender keeps (of any size)."""
        reported = dict.fromkeys(name for book in self.books.values() for name in book.reports.reported())
        return [name for name in reported if name in self._nodes]

    def report_counts(self) -> dict[str, int]:
        """Node pools by the state of their record (``SizeBook.report_counts``), every size's added."""
        counts: Counter[str] = Counter()
        for book in self.books.values():
            counts.update(book.report_counts())
        return dict(counts)

    # -- pods ------------------------------------------------------------------

    def apply_pod(self, pod: Pod) -> None:
        self.apply_pod_record(self.pod_record(pod))

    def apply_pod_record(self, record: PodRecord) -> None:
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
            self._used_cpu[usage.node] += usage.cpu_millis
            for index, book in enumerate(self.books.values()):
                book.used_pages[usage.node] += usage.pages[index]
            touched.add(usage.node)
            self._hold_bound(uid)
        if usage is not None or record.terminal:
            for book in self.books.values():
                touched |= book.ledger.release(uid)
        self._refresh(touched)

    def _hold_bound(self, uid: str) -> None:
        """Tell ``on_hold_bound`` how long the hold of a pod now seen bound lasted."""
        if self._on_hold_bound is None:
            return
        held = [hold.held_at for book in self.books.values() if (hold := book.ledger.hold_of(uid)) is not None]
        if held:
            self._on_hold_bound(self._clock() - min(held))

    def remove_pod(self, uid: str) -> None:
        self._waiting.pop(uid, None)
        self._waiting_demands.pop(uid, None)
        touched = self._forget_pod(uid)
        for book in self.books.values():
            touched |= book.ledger.release(uid)
        self._refresh(touched)

    # -- placements in flight --------------------------------------------------

    def hold(self, uid: str, nodes: str | Sequence[str], demand: PodDemand, timeout_seconds: float) -> bool:
        """Count a placement in flight on ``nodes`` until it is seen bound, gone, or times out.

        Several nodes: the pod will go to one of them, which one is not known
        yet, so its need is held on each. A pod already seen bound is counted
        by its usage, never twice. Each size the pod asks pages of holds them
        there, with its CPU; a size it asks none of holds nothing, as a pod asking no
        hugepages holds nothing (its CPU in flight is not counted in that size's scores).
        """
        if uid in self._pods or not uid or not nodes:
            return False
        now = self._clock()
        held_on = nodes_of(nodes)
        for size, book in self.books.items():
            need = demand.bytes_of(size)
            if need <= 0:
                book.release(uid)
                continue
            earlier = book.ledger.hold_of(uid)
            held_at = now if earlier is None else earlier.held_at
            book.hold(uid, Hold(held_on, need, demand.cpu_millis, now + timeout_seconds, held_at))
        return True

    def release(self, uid: str) -> None:
        """Stop counting a placement in flight (its bind failed)."""
        for book in self.books.values():
            book.release(uid)

    def expire_holds(self) -> None:
        now = self._clock()
        for book in self.books.values():
            book.expire_holds(now)

    def take_freed(self, waiting: Callable[[], Iterable[str]] = tuple) -> bool:
        """Whether some node has more room in some size than when last asked (a hold released, a
        record giving pages back, a pod gone), and now at least the least need of that size among the
        waiting pods ``waiting()`` (room no waiting pod fits in places none; asked only when some node's
        room rose), and start afresh. A rise undone since (a pod's new attempt releases its old hold and
        holds again) is no room freed. O(nodes raised since the last call)."""
        demands = self._waiting_demands
        freed = False
        for size, book in self.books.items():

            def least_need(size: str = size) -> int:
                needs = (demand.bytes_of(size) for uid in waiting() if (demand := demands.get(uid)) is not None)
                return min(needs, default=0)

            freed = book.take_freed(least_need) or freed  # every size asked, so each starts afresh
        return freed

    # -- internals -----------------------------------------------------------

    def _forget_pod(self, uid: str) -> set[str]:
        usage = self._pods.pop(uid, None)
        if usage is None:
            return set()
        self._used_cpu[usage.node] -= usage.cpu_millis
        for index, book in enumerate(self.books.values()):
            book.used_pages[usage.node] -= usage.pages[index]
        return {usage.node}

    def _refresh(self, names: set[str]) -> None:
        for book in self.books.values():
            book.refresh(names)
