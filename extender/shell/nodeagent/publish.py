"""When to write the record (pure) and how (one merge patch of the node's own object).

Writes happen when a figure the extender reads changes (at most once per
``min_interval``), and otherwise as a heartbeat every ``heartbeat`` seconds less up
to ``jitter`` of it, so that agents started together drift apart and the API server
sees N / (heartbeat * (1 - jitter / 2)) heartbeat writes per second on average
(benchmarks/node_reports.py: ~6/s at 5,000 nodes with the defaults).
"""

from __future__ import annotations

import logging
import math
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from extender.core.nodeagent.record import NodeRecord
from extender.core.nodereport import GROUP, PLURAL, VERSION
from extender.shell.kube.backoff import Backoff

log = logging.getLogger("extender.nodeagent")

DEFAULT_HEARTBEAT_SECONDS = 900.0
DEFAULT_JITTER = 0.2
DEFAULT_MIN_INTERVAL_SECONDS = 10.0
DEFAULT_INTERVAL_SECONDS = 10.0


@dataclass(frozen=True, slots=True)
class PublishPolicy:
    heartbeat_seconds: float = DEFAULT_HEARTBEAT_SECONDS
    jitter: float = DEFAULT_JITTER  # heartbeats come every heartbeat * (1 - U(0, jitter))
    min_interval_seconds: float = DEFAULT_MIN_INTERVAL_SECONDS  # between writes for changes

    def next_heartbeat(self, written_at: float, rng: random.Random) -> float:
        return written_at + self.heartbeat_seconds * (1.0 - rng.uniform(0.0, self.jitter))

    def writes_per_second(self, nodes: int, changes_per_node_hour: float = 0.0) -> float:
        """Average API writes per second for ``nodes`` agents, heartbeats and changes together.

        A write (either kind) starts a new heartbeat period, so with changes arriving at
        rate c per node (capped by ``min_interval``) a node writes c / (1 - exp(-c h)) times
        a second, h the mean heartbeat period; 1 / h with no changes."""
        mean_heartbeat = self.heartbeat_seconds * (1.0 - self.jitter / 2)
        rate = min(changes_per_node_hour / 3600.0, 1.0 / self.min_interval_seconds)
        per_node = 1.0 / mean_heartbeat if rate == 0 else rate / (1.0 - math.exp(-rate * mean_heartbeat))
        return nodes * per_node


@dataclass(slots=True)
class PublishState:
    """What the agent remembers between reads: the last key written and when."""

    key: tuple[object, ...] | None = None
    written_at: float = float("-inf")
    heartbeat_at: float = float("-inf")

    def due(self, key: tuple[object, ...], now: float, policy: PublishPolicy) -> str | None:
        """Why a write is due now ("first", "change", "heartbeat"), or None."""
        if self.key is None:
            return "first"
        if key != self.key and now - self.written_at >= policy.min_interval_seconds:
            return "change"
        if now >= self.heartbeat_at:
            return "heartbeat"
        return None

    def written(self, key: tuple[object, ...], now: float, policy: PublishPolicy, rng: random.Random) -> None:
        self.key = key
        self.written_at = now
        self.heartbeat_at = policy.next_heartbeat(now, rng)


class Publisher(Protocol):
    def publish(self, record: NodeRecord) -> None: ...


class ApiPublisher:
    """Writes the node's own HugepageNodeReport: a merge patch, or a create the first time.
    Needs only ``create`` and ``patch`` on ``hugepagenodereports`` (and ``get`` on its owner policy);
    the ValidatingAdmissionPolicy lets it touch no record but its own node's.

    With ``owner_policy`` (the name of that ValidatingAdmissionPolicy; the chart passes it), the
    record is owned by the policy: when the agent is uninstalled or turned off, the policy goes and
    the garbage collector takes every record with it. Otherwise a record would outlive its agent
    and go on counting pages outside pods until it went stale (``nodeReportMaxAgeSeconds``, 30
    minutes by default), in the extender and in ``explain`` alike. The policy, not the agent's pod:
    a record must survive its agent's restart (the node's pages outside pods do), and a
    cluster-scoped object can only be owned by another cluster-scoped one."""

    def __init__(
        self, api: client.ApiClient, *, owner_policy: str | None = None, timeout_seconds: float = 10.0
    ) -> None:
        self._custom = client.CustomObjectsApi(api)
        self._admission = client.AdmissionregistrationV1Api(api)
        self._owner_policy = owner_policy
        self._owners: list[dict[str, str]] | None = None if owner_policy else []
        self._timeout = timeout_seconds

    def owner_references(self) -> list[dict[str, str]]:
        """The record's ``ownerReferences``: the policy's, read once (its uid is the owner's identity)."""
        if self._owners is None and self._owner_policy is not None:
            policy = self._admission.read_validating_admission_policy(
                self._owner_policy, _request_timeout=self._timeout
            )
            if policy.metadata is None or not policy.metadata.uid:
                raise ValueError(f"the ValidatingAdmissionPolicy {self._owner_policy!r} came back without a uid")
            self._owners = [
                {
                    "apiVersion": "admissionregistration.k8s.io/v1",
                    "kind": "ValidatingAdmissionPolicy",
                    "name": self._owner_policy,
                    "uid": policy.metadata.uid,
                }
            ]
        return self._owners or []

    def publish(self, record: NodeRecord) -> None:
        owners = self.owner_references()
        body: dict[str, object] = {"report": record.report_json()}
        if owners:
            body["metadata"] = {"ownerReferences": owners}
        try:
            self._custom.patch_cluster_custom_object(
                GROUP, VERSION, PLURAL, record.node, body, _request_timeout=self._timeout
            )
        except ApiException as error:
            if error.status != 404:
                raise
            if self._owner_policy is not None:
                # Gone: perhaps collected because the policy was replaced (a new uid). Read it again.
                self._owners = None
                owners = self.owner_references()
            created = record.api_object()
            if owners:
                created["metadata"] = {"name": record.node, "ownerReferences": owners}
            self._custom.create_cluster_custom_object(GROUP, VERSION, PLURAL, created, _request_timeout=self._timeout)


def run(
    read: Callable[[], NodeRecord],
    publisher: Publisher,
    *,
    policy: PublishPolicy,
    interval_seconds: float,
    stop: threading.Event,
    clock: Callable[[], float] = time.monotonic,
    rng: random.Random | None = None,
) -> None:
    """Read every ``interval_seconds``; write when due; retry failed writes with backoff."""
    rng = rng or random.Random()
    state = PublishState()
    backoff = Backoff()
    while not stop.is_set():
        delay = interval_seconds
        try:
            record = read()
            key = record.change_key()
            now = clock()
            why = state.due(key, now, policy)
            if why is not None:
                publisher.publish(record)
                state.written(key, now, policy, rng)
                backoff.reset()
                log.info("published %s (%s): %s", record.node, why, _summary(record))
        except Exception as error:  # the API or a file: log, back off, keep going
            delay = min(interval_seconds, backoff.next_delay())
            log.warning("publishing failed (%s: %s); retrying in %.1f s", type(error).__name__, error, delay)
        stop.wait(delay)


def _summary(record: NodeRecord) -> str:
    parts = [
        f"{name} total={s.figures.total_pages} outside={s.figures.outside_pages}"
        for name, s in sorted(record.size_reports.items())
    ]
    return f"source={record.source.value} " + (", ".join(parts) or "no pools")
