"""What the cluster state keeps of each object, read from it by pure reads of the config.

A watch thread computes these records from a page of objects before handing them over
(``ClusterState`` takes them): a pod's need and usage of each size guarded, a Node's pool of each
size and its CPU, a node agent's record read for each size.
"""

from __future__ import annotations

import sys

import msgspec

from extender.core.capacity import hugepages_for
from extender.core.config import Config, page_size_of
from extender.core.gates import GatedPod
from extender.core.nodereport import PoolReport, ReportError, report_record
from extender.core.objects import Node, Pod
from extender.core.podoutcome import PodSignal, signal_of
from extender.core.podrequest import PodDemand, pod_demand
from extender.core.policy import Mode, Policy
from extender.core.reach import node_reach
from extender.state.nodeinputs import NodeCapacity, node_capacity

SHARED_PAGES = 4096  # distinct page counts shared between bound pods' usages

# The records below hold only strings and integers, so they can form no reference
# cycle: gc=False keeps 100,000 pods' records out of every garbage collection.


class PodUsage(msgspec.Struct, frozen=True, gc=False):
    node: str
    cpu_millis: int
    pages: tuple[int, ...]  # of each size guarded, in the order of ``ClusterState.books`` (Config.resource_names)


class PodRecord(msgspec.Struct, frozen=True, gc=False):
    """What the state keeps of a pod: a few numbers, never the object itself."""

    uid: str
    usage: PodUsage | None  # None: not bound, or terminal
    terminal: bool
    owner: str = ""  # "namespace/name": who may hold pages under this UID while it waits ("" once bound or over)
    demand: PodDemand | None = None  # what it needs, while it waits: holds and binds use this, not a caller's word
    # A shadow namespace's bound or ended pod: its status as the scorecard reads it (extender.state.scorecard).
    # Never kept: the state keeps the usage; the record passes through the watch's handlers.
    signal: PodSignal | None = None
    pod: str = ""  # namespace/name, with a signal
    gated: GatedPod | None = (
        None  # behind the extender's scheduling gate (extender.core.gates); passes through, never kept
    )


# A node agent's record read for every size guarded: (node, resource name -> (figures, error)).
ReportRecords = tuple[str, dict[str, tuple[PoolReport | None, ReportError | None]]]


class RecordReader:
    """The records of objects as a config reads them (``ClusterState`` is one)."""

    def __init__(self, config: Config) -> None:
        self._config = config
        self._page_sizes = {name: page_size_of(name) for name in config.resource_names}  # in the config's order
        # Bound pods' pages, one tuple per distinct value: most pods ask one of a few sizes, and a tuple
        # each was 5 MiB at 100,000 pods (benchmarks/memory.py). At most SHARED_PAGES are kept.
        self._shared_pages: dict[tuple[int, ...], tuple[int, ...]] = {}

    @property
    def config(self) -> Config:
        return self._config

    def policy_for(self, namespace: str) -> Policy:
        return self._config.policy_for(namespace)

    def demand_of(self, pod: Pod, policy: Policy | None = None) -> PodDemand:
        """The pod's need, as its namespace's policy (``policy``, when already looked up) counts it."""
        if policy is None:
            policy = self.policy_for(pod.metadata.namespace)
        return pod_demand(
            pod,
            self._config.resource_names,
            need_from_memory=policy.need_from_memory,
            memory_runtime_class=policy.need_from_memory_runtime_class,
            with_qos=policy.numa_aligned,
            memory_resource=self._config.memory_resource(policy),
        )

    def node_record(self, node: Node) -> tuple[str, NodeCapacity]:
        return node.metadata.name, node_capacity(node, self._page_sizes, node_reach(node))

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
            need = demand.bytes_by_size
            pages = self._shared(
                tuple([hugepages_for(need.get(name, 0), page) for name, page in self._page_sizes.items()])
            )
            # Interned: the watch decodes a new copy of the node's name with every pod, and the pods
            # of a node then share one string (17 MiB less at 300,000 pods on 15,000 nodes).
            return PodRecord(meta.uid, PodUsage(sys.intern(node), demand.cpu_millis, pages), False)
        # Only a pod waiting for a node is remembered with its owner (``_waiting``): a string for
        # each of 300,000 bound pods was 18 MiB a list left behind (docs/performance.md, Scale).
        if pod.is_terminal:
            return PodRecord(meta.uid, None, True)
        return PodRecord(meta.uid, None, False, f"{meta.namespace}/{meta.name}", self.demand_of(pod))

    def _shared(self, pages: tuple[int, ...]) -> tuple[int, ...]:
        shared = self._shared_pages
        found = shared.get(pages)
        if found is not None:
            return found
        if len(shared) < SHARED_PAGES:
            shared[pages] = pages
        return pages

    def report_record(self, name: str, raw: bytes | None) -> ReportRecords:
        """A node agent's record read for every size guarded (never raising): what ``apply_report`` takes."""
        return name, {size: report_record(name, raw, size, page)[1:] for size, page in self._page_sizes.items()}
