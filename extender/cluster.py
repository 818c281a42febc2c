"""The cluster as the extender's decisions see it: one NodeAccount per node.

Fed by a snapshot file or by the list/watch of a live cluster (the same calls
either way), and by the extender's own placements in flight. Every change
rebuilds only the accounts of the nodes it touches, so a decision reads ready
values and never walks pods.
"""

from __future__ import annotations

import logging
import time
from collections import ChainMap, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence

import msgspec

from extender.capacity import NodeAccount, headroom_bytes, hugepages_for
from extender.columns import NodeColumns
from extender.config import Config
from extender.inflight import InFlightLedger, Reservation, nodes_of
from extender.objects import Node, Pod
from extender.podrequest import PodDemand, pod_demand
from extender.quantity import QuantityError, quote, to_millis, to_units

log = logging.getLogger("extender.cluster")

RESERVED_ANNOTATION_PREFIX = "hugepage-extender.io/reserved-"

# The records below hold only strings and integers, so they can form no reference
# cycle: gc=False keeps 100,000 pods' records out of every garbage collection.


def _fresh() -> str | None:
    return None


class NodeCapacity(msgspec.Struct, frozen=True, gc=False):
    total_pages: int
    reserved_pages: int
    cpu_millis: int


class PodUsage(msgspec.Struct, frozen=True, gc=False):
    node: str
    pages: int
    cpu_millis: int


class PodRecord(msgspec.Struct, frozen=True, gc=False):
    """What the state keeps of a pod: a few numbers, never the object itself."""

    uid: str
    usage: PodUsage | None  # None: not bound, or terminal
    terminal: bool
    owner: str = ""  # "namespace/name": who may hold pages under this UID while it waits


class ClusterState:
    def __init__(self, config: Config, clock: Callable[[], float] = time.monotonic) -> None:
        self._config = config
        self._page_size = config.page_size_bytes
        self._reserved_annotation = RESERVED_ANNOTATION_PREFIX + config.resource_name
        self._clock = clock
        self.accounts: dict[str, NodeAccount] = {}
        self.headroom: dict[str, int] = {}  # capacity.headroom_bytes of every account
        self._columns = NodeColumns()  # the accounts again, as numpy columns for scoring
        self._stale_columns: set[str] = set()  # accounts changed since the columns last saw them
        self._nodes: dict[str, NodeCapacity] = {}
        self._pods: dict[str, PodUsage] = {}
        self._used_pages: defaultdict[str, int] = defaultdict(int)
        self._used_cpu: defaultdict[str, int] = defaultdict(int)
        self._inflight = InFlightLedger()
        # Pods waiting to be placed, by UID: what a filter's pod must match to hold pages.
        self._waiting: dict[str, str] = {}
        self.ready = False  # synced: a full listing is loaded
        # Why the picture may be stale (a watch making no progress), or None; set by the informer.
        self.staleness: Callable[[], str | None] = _fresh

    # -- what decisions and diagnostics read ---------------------------------

    @property
    def columns(self) -> NodeColumns:
        """The accounts as numpy columns, brought up to date when read: only a
        prioritize over many nodes reads them, while every hold and every pod
        event changes accounts."""
        if self._stale_columns:
            accounts = self.accounts
            for name in self._stale_columns:
                account = accounts.get(name)
                if account is not None:
                    self._columns.put(name, account)
            self._stale_columns.clear()
        return self._columns

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
    def inflight_count(self) -> int:
        return len(self._inflight)

    def owner_of(self, uid: str) -> str | None:
        """``namespace/name`` of a pod the watch shows waiting for a node; None if none is."""
        return self._waiting.get(uid)

    def now(self) -> float:
        return self._clock()

    def is_bound(self, uid: str) -> bool:
        return uid in self._pods

    def demand_of(self, pod: Pod) -> PodDemand:
        policy = self._config.policy_for(pod.metadata.namespace)
        return pod_demand(pod, self._config.resource_name, need_from_memory=policy.need_from_memory)

    # -- feeding it ----------------------------------------------------------

    def replace(self, nodes: Iterable[Node], pods: Iterable[Pod]) -> None:
        """Load a full listing (a snapshot); marks the state ready.

        Every object is read before anything changes, so a bad object leaves
        the previous state whole.
        """
        capacities = [self.node_record(n) for n in nodes]
        records = [self.pod_record(p) for p in pods]
        self.replace_nodes(capacities)
        self.replace_pods(records)
        self.ready = True

    # Records are computed from objects by pure reads of the config, so a
    # watch thread can compact a page of objects before handing it over.

    def node_record(self, node: Node) -> tuple[str, NodeCapacity]:
        return node.metadata.name, self._capacity(node)

    def pod_record(self, pod: Pod) -> PodRecord:
        meta = pod.metadata
        return PodRecord(meta.uid, self._usage(pod), pod.is_terminal, f"{meta.namespace}/{meta.name}")

    def replace_nodes(self, records: Iterable[tuple[str, NodeCapacity]]) -> None:
        """A relist of Nodes."""
        self._install_nodes(dict(records))

    def replace_pods(self, records: Iterable[PodRecord]) -> None:
        """A relist of Pods. Placements in flight survive it unless the pod now shows bound."""
        records = list(records)
        self._waiting = {r.uid: r.owner for r in records if r.usage is None and not r.terminal}
        self._install_pods({r.uid: r.usage for r in records if r.usage is not None})

    def _install_nodes(self, capacities: dict[str, NodeCapacity]) -> None:
        self._nodes = capacities
        self._rebuild_accounts()

    def _rebuild_accounts(self) -> None:
        self.accounts = {name: self._account(name) for name in self._nodes}
        self.headroom = {name: headroom_bytes(account) for name, account in self.accounts.items()}
        self._stale_columns.clear()
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
        for uid in [uid for uid in self._inflight.reservations() if uid in usages]:
            self._inflight.release(uid)
        self._rebuild_accounts()

    def apply_node(self, node: Node) -> None:
        self.apply_node_record(*self.node_record(node))

    def apply_node_record(self, name: str, capacity: NodeCapacity) -> None:
        self._nodes[name] = capacity
        self._refresh({name})

    def remove_node(self, name: str) -> None:
        self._nodes.pop(name, None)
        self.accounts.pop(name, None)
        self.headroom.pop(name, None)
        self._columns.drop(name)

    def apply_pod(self, pod: Pod) -> None:
        self.apply_pod_record(self.pod_record(pod))

    def apply_pod_record(self, record: PodRecord) -> None:
        uid, usage = record.uid, record.usage
        touched = self._forget_pod(uid)
        if usage is None and not record.terminal:
            self._waiting[uid] = record.owner
        else:
            self._waiting.pop(uid, None)
        if usage is not None:
            self._pods[uid] = usage
            self._used_pages[usage.node] += usage.pages
            self._used_cpu[usage.node] += usage.cpu_millis
            touched.add(usage.node)
            touched |= self._inflight.release(uid)
        elif record.terminal:
            touched |= self._inflight.release(uid)
        self._refresh(touched)

    def remove_pod(self, uid: str) -> None:
        self._waiting.pop(uid, None)
        touched = self._forget_pod(uid) | self._inflight.release(uid)
        self._refresh(touched)

    def reserve(self, uid: str, nodes: str | Sequence[str], demand: PodDemand, timeout_seconds: float) -> bool:
        """Count a placement in flight on ``nodes`` until it is seen bound, gone, or times out.

        Several nodes: the pod will go to one of them, which one is not known
        yet, so its need is held on each. A pod already seen bound is counted
        by its usage, never twice.
        """
        if uid in self._pods or not uid or not nodes:
            return False
        deadline = self._clock() + timeout_seconds
        reservation = Reservation(nodes_of(nodes), demand.hugepage_bytes, demand.cpu_millis, deadline)
        self._refresh(self._inflight.hold(uid, reservation))
        return True

    def accounts_without(self, uid: str) -> Mapping[str, NodeAccount]:
        """The accounts as the pod ``uid`` should see them: without its own hold."""
        return self.accounts_without_holds((uid,))

    def accounts_without_holds(self, uids: Iterable[str]) -> Mapping[str, NodeAccount]:
        """The accounts without the holds of ``uids`` (the accounts themselves when none holds)."""
        own: dict[str, NodeAccount] = {}
        for uid in uids:
            reservation = self._inflight.reservations_of(uid)
            if reservation is None:
                continue
            for node in reservation.nodes:
                account = own.get(node) or self.accounts.get(node)
                if account is not None:
                    own[node] = msgspec.structs.replace(
                        account,
                        pending_bytes=account.pending_bytes - reservation.hugepage_bytes,
                        pending_cpu_millis=account.pending_cpu_millis - reservation.cpu_millis,
                    )
        return ChainMap(own, self.accounts) if own else self.accounts

    def release(self, uid: str) -> None:
        """Stop counting a placement in flight (its bind failed)."""
        self._refresh(self._inflight.release(uid))

    def expire_reservations(self) -> None:
        self._refresh(self._inflight.expire(self._clock()))

    def reservations(self) -> dict[str, Reservation]:
        return self._inflight.reservations()

    # -- internals -----------------------------------------------------------

    def _capacity(self, node: Node) -> NodeCapacity:
        allocatable = node.status.allocatable or {}
        pool_bytes = to_units(allocatable.get(self._config.resource_name, 0))
        annotations = node.metadata.annotations or {}
        try:
            reserved_bytes = to_units(annotations.get(self._reserved_annotation, 0))
        except QuantityError as error:
            # Written by hand or by a node agent: one bad value must neither fail the node
            # list (the informer would list again without end) nor hide the node's pool.
            name = quote(node.metadata.name)
            log.warning("node %s: annotation %s ignored: %s", name, self._reserved_annotation, error)
            reserved_bytes = 0
        return NodeCapacity(
            total_pages=pool_bytes // self._page_size,
            reserved_pages=hugepages_for(reserved_bytes, self._page_size),
            cpu_millis=to_millis(allocatable.get("cpu", 0)),
        )

    def _usage(self, pod: Pod) -> PodUsage | None:
        node = pod.spec.node_name
        if not node or pod.is_terminal:
            return None
        demand = self.demand_of(pod)
        return PodUsage(node, hugepages_for(demand.hugepage_bytes, self._page_size), demand.cpu_millis)

    def _forget_pod(self, uid: str) -> set[str]:
        usage = self._pods.pop(uid, None)
        if usage is None:
            return set()
        self._used_pages[usage.node] -= usage.pages
        self._used_cpu[usage.node] -= usage.cpu_millis
        return {usage.node}

    def _account(self, name: str) -> NodeAccount:
        capacity = self._nodes[name]
        pending_bytes, pending_cpu = self._inflight.pending(name)
        return NodeAccount(
            page_size=self._page_size if capacity.total_pages else 0,
            total_pages=capacity.total_pages,
            used_pages=self._used_pages.get(name, 0),
            reserved_pages=capacity.reserved_pages,
            pending_bytes=pending_bytes,
            cpu_millis=capacity.cpu_millis,
            cpu_requested_millis=self._used_cpu.get(name, 0),
            pending_cpu_millis=pending_cpu,
        )

    def _refresh(self, names: Iterable[str]) -> None:
        for name in names:
            if name in self._nodes:
                account = self._account(name)
                self.accounts[name] = account
                self.headroom[name] = headroom_bytes(account)
                self._stale_columns.add(name)
