"""The extender's Prometheus metrics, on a registry of its own."""

from __future__ import annotations

import platform
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Generic, NamedTuple, Protocol, TypeVar

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    GCCollector,
    Histogram,
    Info,
    PlatformCollector,
    ProcessCollector,
    disable_created_metrics,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.metrics import MetricWrapperBase
from prometheus_client.registry import Collector

from extender import __version__
from extender.core.capacity import NodeAccount
from extender.core.diagnostics import pool_totals
from extender.core.waiting import Waiting
from extender.core.writes import KINDS, RESULTS

M = TypeVar("M", bound=MetricWrapperBase)
T = TypeVar("T")

_LATENCY_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


# Counters expose no ``*_created`` series: one per label set doubles the
# scrape for a timestamp nobody alerts on.
disable_created_metrics()  # type: ignore[no-untyped-call]


class StateView(Protocol):
    """What the gauges read from the cluster cache at scrape time."""

    @property
    def ready(self) -> bool: ...
    @property
    def node_count(self) -> int: ...
    @property
    def pod_count(self) -> int: ...
    @property
    def hold_count(self) -> int: ...
    def unready_reason(self) -> str | None: ...
    @property
    def stale_reports(self) -> int: ...
    @property
    def ignored(self) -> Mapping[tuple[str, str], int]: ...
    def expire_reports(self) -> None: ...
    def report_counts(self) -> Mapping[str, int]: ...


class WatchProgress(Protocol):
    """What a reflector tells of its watch (extender.shell.kube.reflector.Reflector)."""

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


class _Reading(Generic[T]):
    """What a scrape reads from the cluster state. A render in a thread (``extender.shell.scrape``) reads
    it as taken on the event loop, the state's only thread, just before (``freeze``); any other
    render (on the loop) reads it afresh."""

    def __init__(self, read: Callable[[], T]) -> None:
        self._read = read
        self._frozen: tuple[T] | None = None

    def freeze(self) -> None:
        self._frozen = (self._read(),)

    def thaw(self) -> None:
        self._frozen = None

    def __call__(self) -> T:
        return self._read() if self._frozen is None else self._frozen[0]


class Metrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        # process_resident_memory_bytes, open fds, CPU seconds; python_info; GC
        # collections: memory is a headline concern of this server.
        ProcessCollector(registry=r)
        PlatformCollector(registry=r)
        GCCollector(registry=r)
        Info("hugepage_extender_build", "The running build.", registry=r).info(
            {"version": __version__, "python": platform.python_version()}
        )
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
            "Filter calls by mode, outcome (fit, no_hugepage_capacity, no_compatible_node, ...) and the page size"
            " the pod asks (a pod of several sizes counts under each).",
            ["mode", "outcome", "resource"],
            registry=r,
        )
        self.fit_rejections = Counter(
            "hugepage_extender_fit_rejected_nodes",
            "Nodes whose hugepage pool could not hold the pod, by mode, reason and the page size the verdict comes"
            " from (the first size no pod leaving could make room in, else the first without room); in shadow"
            " mode the would-be rejections.",
            ["mode", "reason", "resource"],
            registry=r,
        )
        self.widenings = Counter(
            "hugepage_extender_widenings",
            "Filter calls whose best-of-K sample held no fitting node, so the widening strategy acted.",
            ["widening"],
            registry=r,
        )
        self.holds_placed = Counter(
            "hugepage_extender_holds_placed",
            "Placements counted in flight, by the verb that learnt the node (filter or bind).",
            ["source"],
            registry=r,
        )
        self.hold_to_bound = Histogram(
            "hugepage_extender_hold_to_bound_seconds",
            "How long a pod's need stayed held in flight before the pod showed up bound: how long a "
            "placement locks capacity (on every node its filter admitted, until a bind narrows it).",
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0),
            registry=r,
        )
        self.holds_refused = Counter(
            "hugepage_extender_holds_refused",
            "Holds refused or dropped: a UID claimed by another pod, or a pod the watch never showed.",
            registry=r,
        )
        self.binds = Counter("hugepage_extender_binds", "Bind verb calls by result.", ["result"], registry=r)
        self.nudges = Counter(
            "hugepage_extender_nudges",
            "Nudges (the extender's own pod annotated so the scheduler looks again at pods it turned away), by result.",
            ["result"],
            registry=r,
        )
        self.gate_lifter = Gauge(
            "hugepage_extender_gate_lifter",
            "1 while this extender lifts scheduling gates: the scheduler beside it holds the leader Lease"
            " (--leader-lease), that Lease does not exist, or none is named; 0 while another replica's scheduler"
            " holds it, it expired or is not read yet, or with --no-lift-gates.",
            registry=r,
        )
        self.nudge_pod = Gauge(
            "hugepage_extender_nudge_pod",
            "1 when the extender has a pod to annotate when room frees (--nudge-pod); 0: pods it turned away wait"
            " for an API event or the scheduler's 5-minute flush.",
            registry=r,
        )
        self.window_retries = Counter(
            "hugepage_extender_window_retries",
            "Filter calls answered with an Error because every node the scheduler sent was turned away while"
            " nodes it did not send would hold the pod: the scheduler retries with its next nodes.",
            registry=r,
        )
        self.connections_cut = Counter(
            "hugepage_extender_connections_cut",
            "Connections closed to keep the memory budget: past maxConnections (connection_cap), a body or an"
            " answer past maxBufferedBytes (body_over_budget, answer_over_budget), an answer not taken in time"
            " (answer_not_taken).",
            ["reason"],
            registry=r,
        )
        self.events = Counter(
            "hugepage_extender_events",
            "Events posted on pods no node could take, and on gated pods no node has room for, by reason.",
            ["reason"],
            registry=r,
        )
        self.api_writes = Counter(
            "hugepage_extender_api_writes",
            "The extender's own API writes about waiting pods, by kind (event, nudge, gate) and result (written,"
            " failed, dropped: past the kind's budget per minute, extender/core/writes.py).",
            ["kind", "result"],
            registry=r,
        )
        for kind in KINDS:  # every series from 0: a rate reads its first write too
            for result in RESULTS:
                self.api_writes.labels(kind, result)
        self.ready = Gauge(
            "hugepage_extender_ready", "1 when the cluster state is loaded and its watches make progress.", registry=r
        )
        self.nodes = Gauge("hugepage_extender_cached_nodes", "Nodes in the extender's cache.", registry=r)
        self.pods = Gauge("hugepage_extender_cached_pods", "Bound, non-terminal pods in the cache.", registry=r)
        self.holds = Gauge("hugepage_extender_holds", "Placements in flight now.", registry=r)
        # Per namespace: which namespace is safe to switch to enforce. Bounded by the config: the
        # namespaces it names, the rest as one (server.OTHER_NAMESPACES). pod_namespace, not namespace:
        # Prometheus gives every series the namespace of the extender's own pod.
        self.shadow_rejected_pods = Counter(
            "hugepage_extender_shadow_rejected_pods",
            "Pods in shadow mode that enforce would have kept Pending (every candidate lacked room), by namespace"
            " (those the config names; the rest as _other).",
            ["pod_namespace"],
            registry=r,
        )
        self.shadow_outcomes = Counter(
            "hugepage_extender_shadow_outcomes",
            "Pods of shadow namespaces followed from shadow's verdict on their node to their outcome, by namespace"
            " (those the config names; the rest as _other) and cell: predicted_failed, predicted_ran,"
            " failed_unpredicted, ran_as_predicted (a false alarm and a miss on one node in one burst as"
            " predicted_failed and ran_as_predicted); or deleted, expired, dropped when no outcome came"
            " (docs/runbooks.md, the scorecard).",
            ["pod_namespace", "cell"],
            registry=r,
        )
        self.waiting_pods = Gauge(
            "hugepage_extender_waiting_pods",
            "Enforced pods the watch shows Pending whose latest filter call admitted no node (Pending for hugepages),"
            " asked about in the last 10 minutes, and pods behind the extender's scheduling gate.",
            registry=r,
        )
        self.waiting_oldest = Gauge(
            "hugepage_extender_waiting_pod_max_age_seconds",
            "How long the longest-waiting of those pods has waited since its first filter call that admitted no node"
            " (a gated pod: since the watch first showed it gated).",
            registry=r,
        )
        self._children: dict[tuple[MetricWrapperBase, tuple[str, ...]], MetricWrapperBase] = {}
        self._pools: _PoolCollector | None = None
        self._state_collector: _StateCollector | None = None
        self._readings: dict[str, _Reading[object]] = {}

    def freeze(self) -> None:
        """Read the state for a render in another thread: on the event loop, and cheap (copies
        of references; the walks over nodes happen in the render)."""
        for reading in self._readings.values():
            reading.freeze()

    def thaw(self) -> None:
        for reading in self._readings.values():
            reading.thaw()

    def _reading(self, name: str, read: Callable[[], T]) -> _Reading[T]:
        reading = _Reading(read)
        self._readings[name] = reading  # type: ignore[assignment]
        return reading

    def child(self, metric: M, *labels: str) -> M:
        """``metric.labels(*labels)``, kept: every request counts in a few of them, and
        ``labels`` validates and locks each time. Label values are bounded sets."""
        key = (metric, labels)
        found = self._children.get(key)
        if found is None:
            found = self._children[key] = metric.labels(*labels)
        return found  # type: ignore[return-value]

    def watch_state(self, state: StateView) -> None:
        """Gauges read the state at scrape time, so they are never stale."""
        if self._state_collector is None:
            self._state_collector = _StateCollector(self._reading("state", lambda: _state_figures(state)))
            self.registry.register(self._state_collector)
        self.ready.set_function(lambda: 1.0 if state.unready_reason() is None else 0.0)
        self.nodes.set_function(lambda: float(state.node_count))
        self.pods.set_function(lambda: float(state.pod_count))
        self.holds.set_function(lambda: float(state.hold_count))

    def watch_pools(self, pools: Mapping[str, Callable[[], Iterable[NodeAccount]]]) -> None:
        """The cluster's pools summed at scrape time (one pass over each size's node accounts), by size."""
        if self._pools is not None:  # a second app over the same metrics: the newest state wins
            self.registry.unregister(self._pools)
        # Each size's accounts as a list (the state replaces an account, never changes one).
        self._pools = _PoolCollector(self._reading("pools", lambda: {r: list(a()) for r, a in pools.items()}))
        self.registry.register(self._pools)

    def watch_waiting(self, summary: Callable[[], Waiting]) -> None:
        waiting = self._reading("waiting", summary)
        self.waiting_pods.set_function(lambda: float(waiting().count))
        self.waiting_oldest.set_function(lambda: waiting().oldest_seconds)

    def watch_reflectors(self, reflectors: Mapping[str, WatchProgress]) -> None:
        """Watch progress, relists and failures per resource, read at scrape time."""
        self.registry.register(_WatchCollector(reflectors, time.monotonic))


POOL_CAPACITY = "hugepage_extender_pool_capacity_bytes"
POOL_HELD = "hugepage_extender_pool_held_bytes"


class _PoolCollector(Collector):
    def __init__(self, pools: Callable[[], Mapping[str, list[NodeAccount]]]) -> None:
        self._pools = pools

    def collect(self) -> Iterable[Metric]:
        capacity = GaugeMetricFamily(
            POOL_CAPACITY, "Hugepage pool of every node summed (allocatable).", labels=["resource"]
        )
        held = GaugeMetricFamily(
            POOL_HELD,
            "Hugepage pool held, summed over nodes: by pods' requests, outside pods (node reports), "
            "by placements in flight.",
            labels=["resource", "holder"],
        )
        for resource, accounts in self._pools().items():
            totals = pool_totals(accounts)
            capacity.add_metric([resource], float(totals.capacity_bytes))
            held.add_metric([resource, "pods"], float(totals.pods_bytes))
            held.add_metric([resource, "outside_pods"], float(totals.outside_pods_bytes))
            held.add_metric([resource, "in_flight"], float(totals.in_flight_bytes))
        return [capacity, held]

    def describe(self) -> Iterable[Metric]:
        # Named without reading the state: registering must not walk the accounts.
        return [
            GaugeMetricFamily(POOL_CAPACITY, "", labels=["resource"]),
            GaugeMetricFamily(POOL_HELD, "", labels=["resource", "holder"]),
        ]


class _StateFigures(NamedTuple):
    report_counts: Mapping[str, int]
    stale_reports: int
    ignored: list[tuple[tuple[str, str], int]]


def _state_figures(state: StateView) -> _StateFigures:
    # Records age while nothing happens; decisions expire them as they go, a scrape does too
    # (both on the event loop, the state's only thread), so the gauge is right when nobody schedules.
    state.expire_reports()
    return _StateFigures(state.report_counts(), state.stale_reports, sorted(state.ignored.items()))


class _StateCollector(Collector):
    """The node agents' records and the inputs the state ignored, read from the state at scrape time."""

    def __init__(self, figures: Callable[[], _StateFigures]) -> None:
        self._figures = figures

    def collect(self) -> Iterator[Metric]:
        figures = self._figures()
        reports = GaugeMetricFamily(
            "hugepage_extender_node_reports",
            "Nodes by the state of their agent record: fresh (used), stale (older than nodeReportMaxAgeSeconds: "
            "requests-only accounting), ignored (malformed or absurd), none (a node with a pool, no record and no "
            "reserved annotation: pages held outside pods unseen).",
            labels=["state"],
        )
        for state, count in figures.report_counts.items():
            reports.add_metric([state], float(count))
        yield reports
        stale = CounterMetricFamily(
            "hugepage_extender_node_reports_gone_stale",
            "Agent records that went stale while in use, so their node fell back to requests-only accounting.",
        )
        stale.add_metric([], float(figures.stale_reports))
        yield stale
        ignored = CounterMetricFamily(
            "hugepage_extender_ignored_node_inputs",
            "Node annotations and agent records the extender ignored, by kind and reason (malformed, absurd, huge, "
            "future); each also logged.",
            labels=["kind", "reason"],
        )
        for (kind, reason), count in figures.ignored:
            ignored.add_metric([kind, reason], float(count))
        yield ignored
