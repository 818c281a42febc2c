"""Events on pods that no node could take, and on pods waiting behind the extender's scheduling gate, in
words a pod owner can act on.

Per-node capacity figures never go into an event (anyone who can read events
in the namespace would see them): those go to logs, metrics and ``explain``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any, cast

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError as TransportError

from extender.core.answer import FilterDecision, Outcome
from extender.core.gates import GATE, GatedPod
from extender.core.objects import ObjectMeta, Pod
from extender.core.writes import PER_MINUTE, WriteBudget
from extender.shell.metrics import Metrics

log = logging.getLogger("extender.shell.kube.events")

COMPONENT = "hugepage-extender"
REASON_NO_CAPACITY = "NoHugepageCapacity"
REASON_NO_COMPATIBLE = "NoCompatibleNode"
# A gated pod is never tried by the scheduler: no FailedScheduling event says why it is Pending; this one does.
REASON_WAITING_FOR_ROOM = "WaitingForRoom"


def event_for(outcome: Outcome, needs: Mapping[str, int]) -> tuple[str, str]:
    """The reason and message for a filter outcome that left no node; ``needs``: the bytes of each
    size the pod needs, by resource name."""
    need = " and ".join(f"{_human_bytes(n)} of {r}" for r, n in needs.items())
    pools, lacks = "those pools", "lacks one of those pools"
    if len(needs) == 1:
        (resource_name,) = needs
        pools, lacks = f"{resource_name} pools", f"has no {resource_name} pool"
    if outcome is Outcome.NO_COMPATIBLE_NODE:
        return REASON_NO_COMPATIBLE, (
            f"No candidate node can ever hold this pod's {need}: every node {lacks}, or a "
            "pool (less pages held outside pods) smaller than the request, or no node passed the scheduler's other "
            "checks. Lower the request, or add nodes with larger pools."
        )
    return REASON_NO_CAPACITY, (
        f"No node has {need} free right now: {pools} are in use or held by placements in "
        "flight. The scheduler retries; add capacity or free hugepages to place it sooner."
    )


def waiting_message(needs: Mapping[str, int]) -> str:
    """The message of a pod behind the gate that no node it may use has room for; ``needs`` as for ``event_for``."""
    need = " and ".join(f"{_human_bytes(n)} of {r}" for r, n in needs.items())
    return (
        f"Waiting behind the scheduling gate {GATE}: no node this pod may use (its node selector, affinity and "
        f"tolerations) has {need} free right now. The extender lifts the gate as soon as one has; the scheduler "
        "does not try the pod before. Add capacity or free hugepages to place it sooner."
    )


def _needs(pod: GatedPod) -> dict[str, int]:
    return {name: need for name, need in pod.demand.bytes_by_size.items() if need > 0}


def _human_bytes(nbytes: int) -> str:
    for unit, size in (("Gi", 1 << 30), ("Mi", 1 << 20), ("Ki", 1 << 10)):
        if nbytes >= size and nbytes % size == 0:
            return f"{nbytes // size}{unit}"
    return f"{nbytes} bytes"


class PodEvents:
    """Posts at most one Event per pod and reason per ``min_interval_seconds``, and at most ``per_minute``
    across every pod (``writes.WriteBudget``), off the request path."""

    def __init__(
        self,
        api: client.ApiClient,
        metrics: Metrics,
        *,
        instance: str,
        min_interval_seconds: float = 60.0,
        max_tracked_pods: int = 10_000,
        per_minute: int = PER_MINUTE["event"],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._core = client.CoreV1Api(api)
        self._metrics = metrics
        self._instance = instance
        self._min_interval = min_interval_seconds
        self._max_tracked = max_tracked_pods
        self._last_posted: OrderedDict[tuple[str, str], float] = OrderedDict()
        self._pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="events")
        self._budget = WriteBudget(per_minute)
        self._clock = clock

    def no_fit(self, pod: Pod, decision: FilterDecision, needs: Mapping[str, int]) -> None:
        """``needs``: the bytes of each size the pod asks for, by resource name."""
        reason, message = event_for(decision.outcome, needs)
        key = (pod.metadata.uid, reason)
        now = self._clock()
        if now - self._last_posted.get(key, -self._min_interval) < self._min_interval:
            return
        if not self._budget.take(now):  # thousands of pods waiting: the pod's own FailedScheduling says it
            self._metrics.child(self._metrics.api_writes, "event", "dropped").inc()
            return
        self._last_posted[key] = now
        self._last_posted.move_to_end(key)
        while len(self._last_posted) > self._max_tracked:
            self._last_posted.popitem(last=False)
        body = self._event(pod, reason, message)
        asyncio.get_running_loop().run_in_executor(self._pool, self._post, pod, reason, body)

    def waiting_for_room(self, pod: GatedPod) -> bool:
        """Post the WaitingForRoom Event of a pod behind the gate; False, posting nothing, while the budget
        across every pod is spent (the caller keeps the pod and asks again later)."""
        if not self._budget.take(self._clock()):
            return False
        names = Pod(metadata=ObjectMeta(name=pod.name, namespace=pod.namespace, uid=pod.uid))
        body = self._event(names, REASON_WAITING_FOR_ROOM, waiting_message(_needs(pod)))
        asyncio.get_running_loop().run_in_executor(self._pool, self._post, names, REASON_WAITING_FOR_ROOM, body)
        return True

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _event(self, pod: Pod, reason: str, message: str) -> dict[str, Any]:
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        meta = pod.metadata
        return {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{meta.name}.", "namespace": meta.namespace},
            "involvedObject": {
                "apiVersion": "v1",
                "kind": "Pod",
                "name": meta.name,
                "namespace": meta.namespace,
                "uid": meta.uid,
            },
            "reason": reason,
            "message": message,
            "type": "Warning",
            "source": {"component": COMPONENT},
            "reportingComponent": COMPONENT,
            "reportingInstance": self._instance,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }

    def _post(self, pod: Pod, reason: str, body: dict[str, Any]) -> None:
        try:
            self._core.create_namespaced_event(pod.metadata.namespace, cast(Any, body), _request_timeout=(5, 10))
            self._metrics.events.labels(reason).inc()
            self._metrics.child(self._metrics.api_writes, "event", "written").inc()
        except (ApiException, OSError, TransportError) as error:  # urllib3's errors are not OSErrors
            self._metrics.child(self._metrics.api_writes, "event", "failed").inc()
            log.warning(
                "could not post %s event on pod %s/%s: %s", reason, pod.metadata.namespace, pod.metadata.name, error
            )
