"""The extender's Prometheus metrics, on a registry of its own."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from typing import Protocol, TypeVar

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics import MetricWrapperBase
from prometheus_client.registry import Collector

from extender.cluster import ClusterState

M = TypeVar("M", bound=MetricWrapperBase)

_LATENCY_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


class WatchProgress(Protocol):
    """What a reflector tells of its watch (extender.kube.reflector.Reflector)."""

    relists: int
    failures: int
    last_progress: float | None


class _WatchCollector(Collector):
    """Watch health read at scrape time from the reflectors (they run in threads)."""

    def __init__(self, reflectors: Mapping[str, WatchProgress], clock: Callable[[], float]) -> None:
        self._reflectors = reflectors
        self._clock = clock

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        age = GaugeMetricFamily(
            "hugepage_extender_watch_progress_age_seconds",
            "Seconds since the API server last answered this watch (a list, an event, a bookmark).",
            labels=["resource"],
        )
        relists = CounterMetricFamily(
            "hugepage_extender_watch_relists", "Full lists of a resource (the first one included).", labels=["resource"]
        )
        failures = CounterMetricFamily(
            "hugepage_extender_watch_failures", "Lists and watches that failed and were retried.", labels=["resource"]
        )
        now = self._clock()
        for name, reflector in self._reflectors.items():
            last = reflector.last_progress
            if last is not None:
                age.add_metric([name], now - last)
            relists.add_metric([name], reflector.relists)
            failures.add_metric([name], reflector.failures)
        yield from (age, relists, failures)


class Metrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "hugepage_extender_requests",
            "Extender HTTP requests by verb and status code.",
            ["verb", "code"],
            registry=r,
        )
        self.latency = Histogram(
            "hugepage_extender_request_duration_seconds",
            "Time to answer an extender verb, from body read to response built.",
            ["verb"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.filter_outcomes = Counter(
            "hugepage_extender_filter_outcomes",
            "Filter calls by mode and outcome (fit, no_hugepage_capacity, no_compatible_node, ...).",
            ["mode", "outcome"],
            registry=r,
        )
        self.fit_rejections = Counter(
            "hugepage_extender_fit_rejected_nodes",
            "Nodes whose hugepage pool could not hold the pod; in shadow mode the would-be rejections.",
            ["mode", "reason"],
            registry=r,
        )
        self.widenings = Counter(
            "hugepage_extender_widenings",
            "Filter calls whose best-of-K sample held no fitting node, so the widening strategy acted.",
            ["widening"],
            registry=r,
        )
        self.reservations = Counter(
            "hugepage_extender_inflight_reservations",
            "Placements counted in flight, by the verb that learnt the node (filter or bind).",
            ["source"],
            registry=r,
        )
        self.holds_refused = Counter(
            "hugepage_extender_holds_refused",
            "Holds refused or dropped: a UID claimed by another pod, or a pod the watch never showed.",
            registry=r,
        )
        self.binds = Counter("hugepage_extender_binds", "Bind verb calls by result.", ["result"], registry=r)
        self.events = Counter(
            "hugepage_extender_events", "Events posted on pods no node could take, by reason.", ["reason"], registry=r
        )
        self.ready = Gauge(
            "hugepage_extender_ready", "1 when the cluster state is loaded and its watches make progress.", registry=r
        )
        self.nodes = Gauge("hugepage_extender_cached_nodes", "Nodes in the extender's cache.", registry=r)
        self.pods = Gauge("hugepage_extender_cached_pods", "Bound, non-terminal pods in the cache.", registry=r)
        self.inflight = Gauge("hugepage_extender_inflight_placements", "Placements in flight now.", registry=r)
        self._children: dict[tuple[MetricWrapperBase, tuple[str, ...]], MetricWrapperBase] = {}

    def child(self, metric: M, *labels: str) -> M:
        """``metric.labels(*labels)``, kept: every request counts in a few of them, and
        ``labels`` validates and locks each time. Label values are bounded sets."""
        key = (metric, labels)
        found = self._children.get(key)
        if found is None:
            found = self._children[key] = metric.labels(*labels)
        return found  # type: ignore[return-value]

    def watch_state(self, state: ClusterState) -> None:
        """Gauges read the state at scrape time, so they are never stale."""
        self.ready.set_function(lambda: 1.0 if state.unready_reason() is None else 0.0)
        self.nodes.set_function(lambda: float(state.node_count))
        self.pods.set_function(lambda: float(state.pod_count))
        self.inflight.set_function(lambda: float(state.inflight_count))

    def watch_reflectors(self, reflectors: Mapping[str, WatchProgress]) -> None:
        """Watch progress, relists and failures per resource, read at scrape time."""
        self.registry.register(_WatchCollector(reflectors, time.monotonic))
