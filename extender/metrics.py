"""The extender's Prometheus metrics, on a registry of its own."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TypeVar

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.metrics import MetricWrapperBase
from prometheus_client.registry import Collector

from extender.cluster import ClusterState

M = TypeVar("M", bound=MetricWrapperBase)

_LATENCY_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


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
        self.binds = Counter("hugepage_extender_binds", "Bind verb calls by result.", ["result"], registry=r)
        self.events = Counter(
            "hugepage_extender_events", "Events posted on pods no node could take, by reason.", ["reason"], registry=r
        )
        self.ready = Gauge("hugepage_extender_ready", "1 once the cluster state is loaded.", registry=r)
        self.nodes = Gauge("hugepage_extender_cached_nodes", "Nodes in the extender's cache.", registry=r)
        self.pods = Gauge("hugepage_extender_cached_pods", "Bound, non-terminal pods in the cache.", registry=r)
        self.inflight = Gauge("hugepage_extender_inflight_placements", "Placements in flight now.", registry=r)
        self._children: dict[tuple[MetricWrapperBase, tuple[str, ...]], MetricWrapperBase] = {}
        self._state_collector: _StateCollector | None = None

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
        if self._state_collector is None:
            self._state_collector = _StateCollector(state)
            self.registry.register(self._state_collector)
        self.ready.set_function(lambda: 1.0 if state.ready else 0.0)
        self.nodes.set_function(lambda: float(state.node_count))
        self.pods.set_function(lambda: float(state.pod_count))
        self.inflight.set_function(lambda: float(state.inflight_count))


class _StateCollector(Collector):
    """The node agents' records and the inputs the state ignored, read from the state at scrape time."""

    def __init__(self, state: ClusterState) -> None:
        self._state = state

    def collect(self) -> Iterator[Metric]:
        # Records age while nothing happens; decisions expire them as they go, a scrape does too
        # (both on the event loop, the state's only thread), so the gauge is right when nobody schedules.
        self._state.expire_reports()
        reports = GaugeMetricFamily(
            "hugepage_extender_node_reports",
            "Nodes by the state of their agent record: fresh (used), stale (older than nodeReportMaxAgeSeconds: "
            "requests-only accounting), ignored (malformed or absurd), none (no agent).",
            labels=["state"],
        )
        for state, count in self._state.report_counts().items():
            reports.add_metric([state.value], float(count))
        yield reports
        stale = CounterMetricFamily(
            "hugepage_extender_node_reports_gone_stale",
            "Agent records that went stale while in use, so their node fell back to requests-only accounting.",
        )
        stale.add_metric([], float(self._state.stale_reports))
        yield stale
        ignored = CounterMetricFamily(
            "hugepage_extender_ignored_node_inputs",
            "Node annotations and agent records the extender ignored, by kind and reason (malformed, absurd, huge, "
            "future); each also logged.",
            labels=["kind", "reason"],
        )
        for (kind, reason), count in sorted(self._state.ignored.items()):
            ignored.add_metric([kind, reason], float(count))
        yield ignored
