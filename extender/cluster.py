"""The cluster as the extender's decisions see it: one NodeAccount per node.

Fed by a snapshot file or by the list/watch of a live cluster (the same calls
either way), and by the extender's own placements in flight. Every change
rebuilds only the accounts of the nodes it touches, so a decision reads ready
values and never walks pods.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from extender.capacity import NodeAccount, hugepages_for
from extender.config import Config
from extender.inflight import InFlightLedger, Reservation
from extender.objects import Node, Pod
from extender.podrequest import PodDemand, pod_demand
from extender.quantity import to_millis, to_units

RESERVED_ANNOTATION_PREFIX = "hugepage-extender.io/reserved-"


@dataclass(frozen=True, slots=True)
class NodeCapacity:
    total_pages: int
    reserved_pages: int
    cpu_millis: int


@dataclass(frozen=True, slots=True)
class PodUsage:
    node: str
    pages: int
    cpu_millis: int


class ClusterState:
    def __init__(self, config: Config, clock: Callable[[], float] = time.monotonic) -> None:
        self._config = config
        self._page_size = config.page_size_bytes
        self._reserved_annotation = RESERVED_ANNOTATION_PREFIX + config.resource_name
        self._clock = clock
        self.accounts: dict[str, NodeAccount] = {}
        self._nodes: dict[str, NodeCapacity] = {}
        self._pods: dict[str, PodUsage] = {}
        self._used_pages: defaultdict[str, int] = defaultdict(int)
        self._used_cpu: defaultdict[str, int] = defaultdict(int)
        self._inflight = InFlightLedger()
        self.ready = False

    # -- what decisions and diagnostics read ---------------------------------

    @property
    def node_count(self) -> int:
        return len(self._nodes)

    @property
    def pod_count(self) -> int:
        return len(self._pods)

    @property
    def inflight_count(self) -> int:
        return len(self._inflight)

    def demand_of(self, pod: Pod) -> PodDemand:
        policy = self._config.policy_for(pod.metadata.namespace)
        return pod_demand(pod, self._config.resource_name, need_from_memory=policy.need_from_memory)

    # -- feeding it ----------------------------------------------------------

    def replace(self, nodes: Iterable[Node], pods: Iterable[Pod]) -> None:
        """Load a full listing (a snapshot, or a relist); marks the state ready.

        Every object is read before anything changes, so a bad object leaves
        the previous state whole. Placements in flight survive a relist.
        """
        capacities = {n.metadata.name: self._capacity(n) for n in nodes}
        usages = {p.metadata.uid: u for p in pods if (u := self._usage(p)) is not None}
        self._nodes = capacities
        self._pods = usages
        self._used_pages.clear()
        self._used_cpu.clear()
        for usage in usages.values():
            self._used_pages[usage.node] += usage.pages
            self._used_cpu[usage.node] += usage.cpu_millis
        for uid in [uid for uid in self._inflight.reservations() if uid in usages]:
            self._inflight.release(uid)
        self.accounts = {name: self._account(name) for name in capacities}
        self.ready = True

    def apply_node(self, node: Node) -> None:
        name = node.metadata.name
        self._nodes[name] = self._capacity(node)
        self._refresh({name})

    def remove_node(self, name: str) -> None:
        self._nodes.pop(name, None)
        self.accounts.pop(name, None)

    def apply_pod(self, pod: Pod) -> None:
        uid = pod.metadata.uid
        usage = self._usage(pod)
        touched = self._forget_pod(uid)
        if usage is not None:
            self._pods[uid] = usage
            self._used_pages[usage.node] += usage.pages
            self._used_cpu[usage.node] += usage.cpu_millis
            touched.add(usage.node)
            touched |= self._inflight.release(uid)
        elif pod.is_terminal:
            touched |= self._inflight.release(uid)
        self._refresh(touched)

    def remove_pod(self, uid: str) -> None:
        touched = self._forget_pod(uid) | self._inflight.release(uid)
        self._refresh(touched)

    def reserve(self, uid: str, node: str, demand: PodDemand, timeout_seconds: float) -> bool:
        """Count a placement in flight until it is seen bound, gone, or times out.

        A pod already seen bound is counted by its usage, never twice.
        """
        if uid in self._pods or not uid:
            return False
        deadline = self._clock() + timeout_seconds
        reservation = Reservation(node, demand.hugepage_bytes, demand.cpu_millis, deadline)
        self._refresh(self._inflight.hold(uid, reservation))
        return True

    def expire_reservations(self) -> None:
        self._refresh(self._inflight.expire(self._clock()))

    def reservations(self) -> dict[str, Reservation]:
        return self._inflight.reservations()

    # -- internals -----------------------------------------------------------

    def _capacity(self, node: Node) -> NodeCapacity:
        allocatable = node.status.allocatable or {}
        pool_bytes = to_units(allocatable.get(self._config.resource_name, 0))
        annotations = node.metadata.annotations or {}
        reserved_bytes = to_units(annotations.get(self._reserved_annotation, 0))
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
                self.accounts[name] = self._account(name)
