"""Keeps a ClusterState in step with the cluster: one reflector for Nodes, one for Pods,
and one for the node agents' HugepageNodeReports.

The state is ready once Nodes and Pods have listed once; until then the extender makes
no decision. The records are not waited for: without them (no agents, the CRD not
installed) every node is counted from pod requests, as before. Objects the extender
cannot read are logged and counted as holding nothing, so one odd object never
stalls the watch.
"""

from __future__ import annotations

import asyncio
import functools
import gc
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from kubernetes import client

from extender.core.gates import GatedPods, gated_pod
from extender.core.nodereport import GROUP, PLURAL, VERSION, ReportObject
from extender.core.objects import Node, Pod
from extender.core.quantity import QuantityError
from extender.shell.kube.reflector import Handlers, Reflector, Resource
from extender.state.cluster import ClusterState
from extender.state.nodeinputs import NodeCapacity
from extender.state.records import PodDetail, PodRecord, ReportRecords

log = logging.getLogger("extender.shell.kube.informer")


def freeze_cache() -> None:
    """Move the freshly listed cache out of the cyclic collector's sight.

    The cache is hundreds of thousands of small acyclic objects (freed by
    reference counting when replaced); walking them in every full collection
    is what set the full-Nodes p99 (98 ms -> 13 ms in the benchmark process, docs/performance.md).
    """
    gc.collect()
    gc.freeze()


# Terminal pods hold nothing; with this selector the watch reports a pod that
# finishes as DELETED, so the state never even sees it.
ACTIVE_PODS = "status.phase!=Succeeded,status.phase!=Failed"

# Pods that turned Failed or Succeeded, for shadow's scorecard: the watch of active pods shows such a pod
# leaving as DELETED with its status from before, and the kubelet's admission refusal is a Failed phase.
# Nothing is kept of them: each event passes to ``pod_seen``.
ENDED_PODS = "status.phase!=Pending,status.phase!=Running,status.phase!=Unknown"

NodeRecord = tuple[str, NodeCapacity]
REPORT_EXPIRY_SECONDS = 2.0

# Three bookmark intervals (the API server sends one about every minute on an idle watch).
DEFAULT_STALE_AFTER_SECONDS = 180.0


class ClusterInformer:
    def __init__(
        self,
        api: client.ApiClient,
        state: ClusterState,
        *,
        read_timeout_seconds: float = 90.0,
        watch_timeout_seconds: int = 300,
        node_reports: bool = True,
        stale_after_seconds: float = DEFAULT_STALE_AFTER_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        # Told of every pod event before the state applies it (``pod_seen(record, deleted)``): the scorecard
        # judges a shadow pod first shown bound against the accounts without it.
        self.pod_seen: Callable[[PodRecord, bool], None] | None = None
        # The pods behind the extender's scheduling gate (extender.core.gates), when it lifts gates.
        self.gated: GatedPods | None = None
        self._core = client.CoreV1Api(api)
        self._custom = client.CustomObjectsApi(api)
        self._node_reports = node_reports
        self._state = state
        self._stop = threading.Event()
        self._synced: set[str] = set()
        self._threads: list[threading.Thread] = []
        self._timeouts = {"read_timeout_seconds": read_timeout_seconds, "watch_timeout_seconds": watch_timeout_seconds}
        self.reflectors: dict[str, Reflector[Any, Any]] = {}
        self._stale_after = stale_after_seconds
        self._clock = clock
        state.staleness = self.stale_reason

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        def post(callback: Callable[[], None]) -> None:
            loop.call_soon_threadsafe(self._guarded, callback)

        nodes: Reflector[Node, NodeRecord] = Reflector(
            Resource("nodes", self._core.list_node, Node, self._node_record),
            Handlers(self._nodes_listed, self._node_upserted, self._node_deleted),
            post,
            stop=self._stop,
            **self._timeouts,  # type: ignore[arg-type]
        )
        pods: Reflector[Pod, PodRecord] = Reflector(
            Resource(
                "pods", self._core.list_pod_for_all_namespaces, Pod, self._pod_record, ACTIVE_PODS, self._pod_event
            ),
            Handlers(self._pods_listed, self._pod_upserted, self._pod_deleted),
            post,
            stop=self._stop,
            **self._timeouts,  # type: ignore[arg-type]
        )
        self.reflectors = {"nodes": nodes, "pods": pods}
        if self.pod_seen is not None:
            ended: Reflector[Pod, PodRecord] = Reflector(
                Resource(
                    "ended pods",
                    self._core.list_pod_for_all_namespaces,
                    Pod,
                    self._pod_record,
                    ENDED_PODS,
                    self._pod_event,
                ),
                Handlers(lambda records: None, lambda record: self._tell(record, False), lambda record: None),
                post,
                stop=self._stop,
                **self._timeouts,  # type: ignore[arg-type]
            )
            self.reflectors["ended-pods"] = ended
        if self._node_reports:
            self._expire_reports_every(loop, REPORT_EXPIRY_SECONDS)
            list_reports = functools.partial(self._custom.list_cluster_custom_object, GROUP, VERSION, PLURAL)
            reports: Reflector[ReportObject, ReportRecords] = Reflector(
                Resource(PLURAL, list_reports, ReportObject, self._report_record, optional=True),
                Handlers(self._reports_listed, self._report_upserted, self._report_deleted),
                post,
                stop=self._stop,
                **self._timeouts,  # type: ignore[arg-type]
            )
            self.reflectors[PLURAL] = reports
        for name, reflector in self.reflectors.items():
            thread = threading.Thread(target=reflector.run, name=f"watch-{name}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def _expire_reports_every(self, loop: asyncio.AbstractEventLoop, seconds: float) -> None:
        """Records age while nothing happens: look every few seconds (O(1) when none is due), so a
        stopped agent's node falls back (log, metric) even when no pod is being scheduled."""

        def tick() -> None:
            if self._stop.is_set():
                return
            self._guarded(self._state.expire_reports)
            loop.call_later(seconds, tick)

        loop.call_later(seconds, tick)

    def stale_reason(self) -> str | None:
        """Why the cached picture cannot be trusted now, or None.

        A healthy watch makes progress at least every bookmark interval (about a
        minute) and whenever its server-side timeout ends it; no progress for
        ``stale_after_seconds`` means the API server is gone or refuses us, and pods
        bound meanwhile are invisible: deciding from that picture over-commits."""
        now = self._clock()
        # Nodes and pods only: decisions need them; without fresh node reports the
        # extender already counts those nodes from pod requests.
        for name in ("nodes", "pods"):
            reflector = self.reflectors.get(name)
            if reflector is not None and reflector.missed:
                return f"watch of {name} missed events (410 Gone: resourceVersion expired): listing again"
            last = reflector.last_progress if reflector is not None else None
            if last is not None and now - last > self._stale_after:
                why = f"last failure: {reflector.last_failure}" if reflector and reflector.last_failure else ""
                return f"watch of {name} made no progress for {now - last:.0f} s ({why or 'API server unreachable?'})"
        return None

    def stop(self) -> None:
        """Ask the watch threads to end; they are daemons, so exit never waits on a socket."""
        self._stop.set()

    # -- run in the watch threads: pure reads of the config ----------------------

    def _node_record(self, node: Node) -> NodeRecord:
        try:
            return self._state.node_record(node)
        except QuantityError as error:
            log.warning("node %s: %s; counting it as a node without a pool", node.metadata.name, error)
            return node.metadata.name, NodeCapacity({}, 0)

    def _pod_event(self, pod: Pod) -> PodRecord:
        """A watch event's pod: with its status as the scorecard reads it, when its namespace is in shadow
        (a list's pods are not read so: 7 us a pod, and nothing follows them)."""
        record = self._pod_record(pod)
        return self._state.with_signal(record, pod) if self.pod_seen is not None else record

    def _pod_record(self, pod: Pod) -> PodRecord:
        try:
            record = self._state.pod_record(pod)
            if self.gated is not None and pod.spec.scheduling_gates:
                gated = gated_pod(pod, record.demand or self._state.demand_of(pod))
                if gated is not None:  # another's gate only: the record stays without one
                    record = record.with_gate(gated)
            return record
        except QuantityError as error:
            meta = pod.metadata
            log.warning("pod %s/%s: %s; counting it as holding nothing", meta.namespace, meta.name, error)
            return PodRecord(meta.uid, None, pod.is_terminal, PodDetail(f"{meta.namespace}/{meta.name}"))

    def _report_record(self, obj: ReportObject) -> ReportRecords:
        return self._state.report_record(obj.metadata.name, obj.report_bytes)

    # -- run on the event loop ---------------------------------------------------

    def _reports_listed(self, records: list[ReportRecords]) -> None:
        self._state.replace_reports(records)
        self._mark_synced(PLURAL)

    def _report_upserted(self, record: ReportRecords) -> None:
        self._state.apply_report(*record)

    def _report_deleted(self, record: ReportRecords) -> None:
        self._state.remove_report(record[0])

    @staticmethod
    def _guarded(callback: Callable[[], None]) -> None:
        try:
            callback()
        except Exception:
            log.exception("applying a watch event failed")

    def _mark_synced(self, resource: str) -> None:
        self._synced.add(resource)
        # The node agents' records too, when read: until they are listed, a node's pages held outside pods
        # are unknown, and a filter would admit pods onto them (a restart or a failover mid-burst).
        needed = {"nodes", "pods", PLURAL} if self._node_reports else {"nodes", "pods"}
        if not self._state.ready and self._synced >= needed:
            self._state.ready = True
            freeze_cache()
            log.info(
                "cluster state synced: %d nodes, %d bound pods; ready", self._state.node_count, self._state.pod_count
            )

    def _nodes_listed(self, records: list[NodeRecord]) -> None:
        self._state.replace_nodes(records)
        self._mark_synced("nodes")

    def _node_upserted(self, record: NodeRecord) -> None:
        self._state.apply_node_record(*record)

    def _node_deleted(self, record: NodeRecord) -> None:
        self._state.remove_node(record[0])

    def _pods_listed(self, records: list[PodRecord]) -> None:
        if self.gated is not None:
            self.gated.replace((record.gated for record in records if record.gated is not None), self._clock())
        self._state.replace_pods(records)
        self._mark_synced("pods")

    def _pod_upserted(self, record: PodRecord) -> None:
        if self.gated is not None:
            self.gated.seen(record.uid, record.gated, self._clock())
        self._tell(record, False)
        self._state.apply_pod_record(record)

    def _pod_deleted(self, record: PodRecord) -> None:
        if self.gated is not None:
            self.gated.seen(record.uid, None, self._clock())
        self._tell(record, True)
        self._state.remove_pod(record.uid)

    def _tell(self, record: PodRecord, deleted: bool) -> None:
        if self.pod_seen is None or record.signal is None:
            return
        try:
            self.pod_seen(record, deleted)
        except Exception:
            # The state applies the event all the same: the scorecard never costs the cache an event.
            log.exception("shadow's scorecard failed on a pod event")
