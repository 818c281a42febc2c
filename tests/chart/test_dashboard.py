"""The Grafana dashboard queries only metrics the extender exports."""

from __future__ import annotations

import json
import re

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from extender.core.config import Config
from extender.shell.metrics import Metrics
from extender.state.cluster import ClusterState

from .chartlib import CHART

DASHBOARD = CHART / "files" / "grafana-dashboard.json"
METRIC = re.compile(r"\bhugepage_extender_[a-z_]+")
# The metric families the issue names; all must be on the dashboard.
REQUIRED = {
    "hugepage_extender_requests_total",
    "hugepage_extender_request_duration_seconds_bucket",
    "hugepage_extender_filter_outcomes_total",
    "hugepage_extender_fit_rejected_nodes_total",
    "hugepage_extender_widenings_total",
    "hugepage_extender_holds",
    "hugepage_extender_ready",
    "hugepage_extender_cached_nodes",
    "hugepage_extender_cached_pods",
    "hugepage_extender_binds_total",
    "hugepage_extender_pool_capacity_bytes",
    "hugepage_extender_pool_held_bytes",
    "hugepage_extender_waiting_pods",
    "hugepage_extender_waiting_pod_max_age_seconds",
    "hugepage_extender_shadow_rejected_pods_total",
    "hugepage_extender_shadow_outcomes_total",
}
# The node agent's reports add these (stale and missing reports); the node-reports
# panel queries them already. Nothing else may be missing from the export.


def exported_series() -> set[str]:
    """Every sample name the extender's registry can expose (labels exercised once)."""
    metrics = Metrics()
    metrics.requests.labels("filter", "200").inc()
    metrics.latency.labels("filter").observe(0.001)
    metrics.filter_outcomes.labels("shadow", "shadow", "hugepages-2Mi").inc()
    metrics.fit_rejections.labels("shadow", "insufficient", "hugepages-2Mi").inc()
    metrics.widenings.labels("fullscan").inc()
    metrics.holds_placed.labels("filter").inc()
    metrics.binds.labels("bound").inc()
    metrics.events.labels("FailedScheduling").inc()
    metrics.shadow_rejected_pods.labels("payments").inc()
    metrics.shadow_outcomes.labels("payments", "predicted_failed").inc()
    metrics.watch_pools({"hugepages-2Mi": list})
    metrics.watch_state(ClusterState(Config()))
    text = generate_latest(metrics.registry).decode()
    return {sample.name for family in text_string_to_metric_families(text) for sample in family.samples}


def dashboard_expressions() -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    return [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]


def test_dashboard_queries_exported_metrics() -> None:
    exported = exported_series()
    used = {name for expr in dashboard_expressions() for name in METRIC.findall(expr)}
    assert used <= exported, used - exported
    assert used >= REQUIRED


def test_dashboard_layout() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["uid"] == "hugepage-extender"
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    for panel in dashboard["panels"]:
        assert panel["datasource"]["uid"] == "${datasource}"
        assert panel["gridPos"]["x"] + panel["gridPos"]["w"] <= 24
