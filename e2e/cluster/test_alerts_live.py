"""Each alert of the chart fires on what a real extender exported during a scenario on the real control plane.

Every test runs a scenario (real kube-apiserver, etcd, kube-scheduler, ``hugepage-extender serve``
in live mode), scrapes the extender's ``/metrics`` once a second as Prometheus would (with the
labels a ServiceMonitor adds: job, namespace, pod), and hands the samples to ``promtool test rules``
against the chart's rendered PrometheusRule (``e2e.promrules``). After the scenario its state is
held ("if this goes on"): gauges keep their last value, counters keep their observed rate, ages keep
growing; each alert must fire once its ``for`` has passed, and the others must stay quiet.

Node report alerts (stale, missing) read metrics the node agent's reports add; they are covered
by promtool unit tests (tests/chart/test_alerts.py) until those metrics exist.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml

from e2e.cluster.placement_support import (
    EXTENDER_REASON_HELD_OUTSIDE,
    Cell,
    wait_for_event,
)
from e2e.controlplane import Service
from e2e.promrules import Expected, PromtoolUnavailable, Scrapes, alert_test, promtool
from tests.chart.chartlib import CHART, Helm, HelmError, helm_path

pytestmark = pytest.mark.cluster

RELEASE = {"job": "hugepage-extender", "namespace": "hugepage-extender"}
ALL_ALERTS = (
    "HugepageExtenderDown",
    "HugepageExtenderNotReady",
    "HugepageExtenderFilterErrors",
    "HugepageExtenderFilterSlow",
    "HugepageShadowNamespaceWouldRejectPods",
    "HugepagePodsPendingTooLong",
    "HugepagePoolsNearlyFull",
)


@pytest.fixture(scope="module")
def rules(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The chart's alert rules with the monitoring values, as a rules file."""
    try:
        promtool()
    except PromtoolUnavailable as error:
        pytest.fail(f"promtool could not be built: {error}", pytrace=False)
    try:
        rendered = Helm(helm_path()).template(values=[CHART / "ci" / "monitoring-values.yaml"])
    except (HelmError, OSError) as error:
        pytest.fail(f"cannot render the chart: {error}", pytrace=False)
    (rule,) = rendered.all("PrometheusRule")
    path = tmp_path_factory.mktemp("rules") / "rules.yaml"
    path.write_text(yaml.safe_dump(rule["spec"], sort_keys=False))
    return path


def metrics_of(service: Service) -> Callable[[], str | None]:
    def fetch() -> str | None:
        answer = service.get("/metrics")
        return answer[1].decode() if answer is not None and answer[0] == 200 else None

    return fetch


def scrape_for(scrapes: Scrapes, fetch: Callable[[], str | None], seconds: float) -> None:
    """Scrape once a second for ``seconds``."""
    deadline = time.monotonic() + seconds
    while True:
        scrapes.scrape(fetch)
        if time.monotonic() >= deadline:
            return
        time.sleep(1.0)


def target(pod: str) -> dict[str, str]:
    return {**RELEASE, "pod": pod, "instance": f"{pod}:8081"}


# --------------------------------------------------------------------------- availability


def test_down_and_not_ready_fire(cell: Cell, rules: Path, tmp_path: Path) -> None:
    plane = cell.plane
    # An extender whose identity may not list nodes or pods (its RBAC went missing): it
    # serves, but never syncs.
    no_rbac = plane.kubeconfig_for(f"no-rbac-{cell.slug}")
    stuck = cell.start_extender(["--kubeconfig", str(no_rbac)], name=f"extender-norbac-{cell.slug}")
    scrapes = Scrapes(target("stuck"))
    scrape_for(scrapes, metrics_of(stuck), 5)
    assert "hugepage_extender_ready 0.0" in (metrics_of(stuck)() or "")
    alert_test(
        tmp_path,
        rules,
        scrapes,
        hold_seconds=12 * 60,  # for: 10m
        fires=[
            Expected(
                "HugepageExtenderNotReady", {"severity": "warning", "namespace": "hugepage-extender", "pod": "stuck"}
            )
        ],
        quiet=["HugepageExtenderDown", "HugepageExtenderFilterErrors", "HugepagePoolsNearlyFull"],
    )

    # A healthy extender, scraped, then gone: every scrape after that fails (up 0).
    cell.node("n0")
    healthy = cell.extender({"namespaces": {cell.namespace: {"mode": "enforce"}}}, suffix="-down")
    down = Scrapes(target("healthy"))
    fetch = metrics_of(healthy)
    scrape_for(down, fetch, 3)
    healthy.stop()
    scrape_for(down, fetch, 3)
    assert down.up[down.last_step] == 0
    alert_test(
        tmp_path,
        rules,
        down,
        hold_seconds=6 * 60,  # for: 5m
        fires=[Expected("HugepageExtenderDown", {"severity": "critical"})],
        quiet=["HugepageExtenderNotReady"],
    )


# --------------------------------------------------------------------------- filter


def test_filter_errors_fire_when_full_node_bodies_exceed_the_limit(cell: Cell, rules: Path, tmp_path: Path) -> None:
    # A common misconfiguration: the scheduler sends whole Node objects (nodeCacheCapable:
    # false) and the extender's maxRequestBytes is smaller than them: every filter call is a 413.
    for i in range(3):
        cell.node(f"n{i}")
    extender = cell.extender({"maxRequestBytes": 2048, "namespaces": {cell.namespace: {"mode": "enforce"}}})
    scheduler = cell.scheduler(extender, node_cache_capable=False)
    scrapes = Scrapes(target("a"))
    fetch = metrics_of(extender)
    scrapes.scrape(fetch)
    for i in range(3):
        cell.pod(f"p{i}", scheduler, hugepages_2mi="128Mi")
    wait_for_event(cell.core, cell.namespace, "p0", "FailedScheduling", contains="413")
    scrape_for(scrapes, fetch, 10)
    alert_test(
        tmp_path,
        rules,
        scrapes,
        hold_seconds=16 * 60,  # rate over 5m, for: 10m
        fires=[Expected("HugepageExtenderFilterErrors", {"severity": "warning", "namespace": "hugepage-extender"})],
        quiet=["HugepageExtenderFilterSlow", "HugepageExtenderNotReady"],
    )


def _slow_filter_call(port: int, body: bytes, delay: float) -> bytes:
    """A filter call whose body arrives ``delay`` seconds after its headers, as over a congested
    link: the extender's timer runs from the request's arrival to its answer."""
    with socket.create_connection(("127.0.0.1", port), timeout=delay + 10) as conn:
        head = (
            f"POST /filter HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
        )
        conn.sendall(head.encode())
        time.sleep(delay)
        conn.sendall(body)
        chunks = []
        while chunk := conn.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def test_filter_slow_fires_when_calls_take_near_the_http_timeout(cell: Cell, rules: Path, tmp_path: Path) -> None:
    node = cell.node("n0", hugepages="4Gi")
    extender = cell.extender({"namespaces": {cell.namespace: {"mode": "enforce"}}})
    scheduler = cell.scheduler(extender)
    scrapes = Scrapes(target("a"))
    fetch = metrics_of(extender)
    scrapes.scrape(fetch)
    # A few ordinary placements, answered in milliseconds...
    for i in range(3):
        cell.pod(f"fast-{i}", scheduler, hugepages_2mi="128Mi")
    for i in range(3):
        assert cell.plane.wait_for_pod_bound(cell.namespace, f"fast-{i}") == node
    # ...and calls that take 3 s of the scheduler's 5 s: the p99 is now theirs.
    body = (
        b'{"Pod": {"metadata": {"name": "slow", "namespace": "%s", "uid": "uid-slow"}, "spec": {"containers": []}},'
        b' "NodeNames": ["%s"]}' % (cell.namespace.encode(), node.encode())
    )
    for _ in range(2):
        answer = _slow_filter_call(extender.port, body, delay=3.0)
        assert answer.startswith(b"HTTP/1.1 200"), answer[:200]
        scrapes.scrape(fetch)
    scrape_for(scrapes, fetch, 3)
    alert_test(
        tmp_path,
        rules,
        scrapes,
        hold_seconds=16 * 60,  # rate over 5m, for: 10m
        fires=[Expected("HugepageExtenderFilterSlow", {"severity": "warning", "namespace": "hugepage-extender"})],
        quiet=["HugepageExtenderFilterErrors", "HugepageExtenderDown"],
    )


# --------------------------------------------------------------------------- placement


@pytest.fixture
def big_pool_node(cell: Cell) -> Iterator[str]:
    """A node whose 10000Gi pool is 99.9 % held outside pods: whatever other tests' nodes hold,
    the cluster's pools summed are over 90 % held while it exists. Deleted afterwards."""
    name = cell.node("big", hugepages="10000Gi", reserved="9990Gi")
    try:
        yield name
    finally:
        cell.core.delete_node(name)


def test_shadow_pending_and_full_pools_fire(cell: Cell, rules: Path, tmp_path: Path, big_pool_node: str) -> None:
    only_full = {**cell.selector, "e2e.hugepage-extender.io/pool": "full"}
    full = [cell.node(f"full-{i}", hugepages="1Gi", reserved="1Gi", labels=only_full) for i in range(2)]
    shadow = cell.new_namespace("shadow")
    extender = cell.extender({"namespaces": {cell.namespace: {"mode": "enforce"}, shadow: {"mode": "shadow"}}})
    scheduler = cell.scheduler(extender)
    scrapes = Scrapes(target("a"))
    fetch = metrics_of(extender)
    scrapes.scrape(fetch)

    # Enforce: no pool has room, the pod waits (and is retried with backoff).
    cell.pod("waits", scheduler, hugepages_2mi="256Mi", node_selector=only_full)
    # Pages held outside pods fill both pools: no node can hold it (unresolvable).
    wait_for_event(cell.core, cell.namespace, "waits", "FailedScheduling", contains=EXTENDER_REASON_HELD_OUTSIDE)
    # Shadow: the same pods are placed, on pools that cannot hold them; enforce would have kept them Pending.
    for i in range(3):
        cell.pod(f"s-{i}", scheduler, namespace=shadow, hugepages_2mi="256Mi", node_selector=only_full)
    for i in range(3):
        assert cell.plane.wait_for_pod_bound(shadow, f"s-{i}") in full
    scrape_for(scrapes, fetch, 8)
    assert cell.plane.pod_assignments(cell.namespace)["waits"] is None

    alert_test(
        tmp_path,
        rules,
        scrapes,
        hold_seconds=32 * 60,  # pools: for 30m; pending: 15 minutes + for 1m
        fires=[
            Expected(
                "HugepageShadowNamespaceWouldRejectPods",
                {"severity": "info", "namespace": "hugepage-extender", "pod_namespace": shadow},
            ),
            Expected("HugepagePodsPendingTooLong", {"severity": "warning", "namespace": "hugepage-extender"}),
            Expected(
                "HugepagePoolsNearlyFull",
                {"severity": "warning", "namespace": "hugepage-extender", "resource": "hugepages-2Mi"},
            ),
        ],
        quiet=["HugepageExtenderDown", "HugepageExtenderNotReady", "HugepageExtenderFilterErrors"],
    )
