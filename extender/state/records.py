"""What the cluster state keeps of each object, read from it by pure reads of the config.

A watch thread computes these records from a page of objects before handing them over
(``ClusterState`` takes them): a pod's need and usage of each size guarded, a Node's pool of each
size and its CPU, a node agent's record read for each size.
"""

from __future__ import annotations

import sys
from collections.abc import Hashable
from typing import Generic, TypeVar

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

SHARED_VALUES = 4096  # distinct page counts, and distinct CPU requests, shared between bound pods' usages

_V = TypeVar("_V", bound=Hashable)


class SharedValues(Generic[_V]):
    """One object per distinct value, for the first ``SHARED_VALUES`` values seen: most pods ask one of a
    few sizes and CPU requests, and an object each is what a bound pod's usage weighed most."""

    def __init__(self) -> None:
        self._values: dict[_V, _V] = {}

    def __call__(self, value: _V) -> _V:
        found = self._values.get(value)
        if found is not None:
            return found
        if len(self._values) < SHARED_VALUES:
            self._values[value] = value
        return value


# The records below hold only strings and integers, so they can form no reference
# cycle: gc=False keeps 100,000 pods' records out of every garbage collection.


class PodUsage(msgspec.Struct, frozen=True, gc=False):
    node: str
    cpu_millis: int
    pages: tuple[int, ...]  # of each size guarded, in the order of ``ClusterState.books`` (Config.resource_names)


class PodDetail(msgspec.Struct, frozen=True, gc=False):
    """What a record carries of the few pods that need more than their usage: a pod waiting for a
    node, a shadow namespace's bound or ended pod, a pod behind the gate."""

    owner: str = ""  # "namespace/name": who may hold pages under this UID while it waits ("" once bound or over)
    demand: PodDemand | None = None  # what it needs, while it waits: holds and binds use this, not a caller's word
    # A shadow namespace's bound or ended pod: its status as the scorecard reads it (extender.state.scorecard).
    # Never kept: the state keeps the usage; the record passes through the watch's handlers.
    signal: PodSignal | None = None
    pod: str = ""  # namespace/name, with a signal
    gated: GatedPod | None = None  # behind the extender's scheduling gate (extender.core.gates); passes through


_NO_DETAIL = PodDetail()


class PodRecord(msgspec.Struct, frozen=True, gc=False):
    """What the state keeps of a pod: a few numbers, never the object itself. A relist holds one per pod
    until it is applied, and what a bound pod's record weighs stays in the heap's high-water mark:
    the rarer fields sit in ``detail``, absent for a bound pod (benchmarks/memory.py: 2.4 MiB at 100,000)."""

    uid: str
    usage: PodUsage | None  # None: not bound, or terminal
    terminal: bool
    detail: PodDetail | None = None

    @property
    def owner(self) -> str:
        return (self.detail or _NO_DETAIL).owner

    @property
    def demand(self) -> PodDemand | None:
        return (self.detail or _NO_DETAIL).demand

    @property
    def signal(self) -> PodSignal | None:
        return (self.detail or _NO_DETAIL).signal

    @property
    def pod(self) -> str:
        return (self.detail or _NO_DETAIL).pod

    @property
    def gated(self) -> GatedPod | None:
        return (self.detail or _NO_DETAIL).gated

    def with_status(self, signal: PodSignal, pod: str) -> PodRecord:
        """The record with a shadow pod's status as the scorecard reads it."""
        detail = msgspec.structs.replace(self.detail or _NO_DETAIL, signal=signal, pod=pod)
        return msgspec.structs.replace(self, detail=detail)

    def with_gate(self, gated: GatedPod) -> PodRecord:
        """The record of a pod behind the gate."""
        return msgspec.structs.replace(self, detail=msgspec.structs.replace(self.detail or _NO_DETAIL, gated=gated))


# A node agent's record read for every size guarded: (node, resource name -> (figures, error)).
ReportRecords = tuple[str, dict[str, tuple[PoolReport | None, ReportError | None]]]


class RecordReader:
    """The records of objects as a config reads them (``ClusterState`` is one)."""

    def __init__(self, config: Config) -> None:
        self._config = config
        self._page_sizes = {name: page_size_of(name) for name in config.resource_names}  # in the config's order
        # Bound pods' pages and CPU, one object per distinct value (benchmarks/memory.py at 100,000 pods:
        # a tuple each was 5 MiB, an int each 2.9 MiB; CPython shares only the ints up to 256).
        self._shared_pages: SharedValues[tuple[int, ...]] = SharedValues()
        self._shared_cpu: SharedValues[int] = SharedValues()

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
            return record.with_status(signal_of(pod), f"{meta.namespace}/{meta.name}")
        return record

    def pod_record(self, pod: Pod) -> PodRecord:
        meta = pod.metadata
        node = pod.spec.node_name
        if node and not pod.is_terminal:
            demand = self.demand_of(pod)
            need = demand.bytes_by_size
            pages = self._shared_pages(
                tuple([hugepages_for(need.get(name, 0), page) for name, page in self._page_sizes.items()])
            )
            # Interned: the watch decodes a new copy of the node's name with every pod, and the pods
            # of a node then share one string (17 MiB less at 300,000 pods on 15,000 nodes).
            return PodRecord(meta.uid, PodUsage(sys.intern(node), self._shared_cpu(demand.cpu_millis), pages), False)
        # Only a pod waiting for a node is remembered with its owner (``_waiting``): a string for
        # each of 300,000 bound pods was 18 MiB a list left behind (docs/performance.md, Scale).
        if pod.is_terminal:
            return PodRecord(meta.uid, None, True)
        return PodRecord(meta.uid, None, False, PodDetail(f"{meta.namespace}/{meta.name}", self.demand_of(pod)))

    def report_record(self, name: str, raw: bytes | None) -> ReportRecords:
        """A node agent's record read for every size guarded (never raising): what ``apply_report`` takes."""
        return name, {size: report_record(name, raw, size, page)[1:] for size, page in self._page_sizes.items()}
