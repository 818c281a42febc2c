"""The scheduler's window on the real kube-scheduler (docs/design.md, "The scheduler's window").

160 nodes, ``percentageOfNodesToScore: 5`` (a window of 100 feasible nodes, kube-scheduler's
minimum), every pool held outside pods (the extender's annotation, which the in-tree filters do
not see) but one node's, added after the schedulers listed the others: last in their lists, so no
first window reaches it. A pod through the enforce entry (its marker, the entry not ignorable) is
bound within seconds: the extender answers an Error while nodes it was not sent would hold the
pod, the scheduler backs off (1 s, doubling) and tries its next window; each retry is one error
line of the scheduler. Without the window retries (the same pod sent through an entry it carries
no marker for), the pod is turned away by its first window.

A scan that was whole gets no retry: 300 nodes, 120 of them picked by the pod's node selector and
all held outside pods, 180 free; the adaptive scheduler stops only at 144 feasible nodes, so it
filters every node and sends the 120, and the extender turns the pod away at once (0 retries),
although the 180 others have room (room the pod may not use).
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from e2e.cluster.placement_support import (
    EXTENDER_REASON_HELD_OUTSIDE,
    Cell,
    metric_value,
    reserve_pages,
    wait_for_event,
)
from e2e.controlplane import Scheduler, extender_scheduler_config, wait_until
from extender.core.window import ENFORCE_MARKER
from extender.shell.handlers import WINDOW_RETRY_MESSAGE

pytestmark = pytest.mark.cluster

NODES = 160
WITHIN = 15.0  # a retry or two: backoff 1 s, then 2 s, and the scheduling itself


def full_nodes(cell: Cell) -> list[str]:
    """NODES - 1 nodes, every pool held outside pods."""

    def make(suffix: str) -> str:
        name = cell.node(suffix, hugepages="2Gi")
        reserve_pages(cell.core, name, "2Gi")
        return name

    with ThreadPoolExecutor(max_workers=8) as pool:
        return list(pool.map(make, [f"w{i:03d}" for i in range(NODES - 1)]))


def scheduler(cell: Cell, url: str, name: str, *, marker: bool, percentage: int = 5) -> Scheduler:
    """A window of 100 nodes (``percentage`` 5; 0: the adaptive default, as the chart renders it),
    kube-scheduler's default backoff (1 s doubling to 10 s) and flush (5 min). With ``marker``, the
    chart's enforce entry (only pods with the marker); without, every pod is sent."""
    extender = {"managedResources": [{"name": ENFORCE_MARKER, "ignoredByScheduler": True}]} if marker else None
    config = extender_scheduler_config(
        url, scheduler_name=name, percentage_of_nodes_to_score=percentage, http_timeout="5s", extender=extender
    )
    return cell.start_scheduler(config, name=name)


def test_a_pod_whose_window_holds_no_room_is_bound_from_the_next_windows(cell: Cell) -> None:
    full_nodes(cell)
    extender = cell.extender({"namespaces": {cell.namespace: {"mode": "enforce"}}, "percentageOfNodesToScore": 5})
    plain = scheduler(cell, extender.url, f"plain-{cell.slug}", marker=False)
    marked = scheduler(cell, extender.url, f"window-{cell.slug}", marker=True)
    # Added after the schedulers listed the nodes: last in their lists (a node joins the end of
    # its zone's list, backend/cache/node_tree.go:51-67), so no first window holds it.
    known = metric_value(extender, "hugepage_extender_cached_nodes")
    roomy = cell.node("roomy", hugepages="2Gi")
    wait_until(
        "the extender knows the node",
        lambda: metric_value(extender, "hugepage_extender_cached_nodes") > known,
        timeout=10,
    )
    time.sleep(2)  # the schedulers have the node too, and no event is left to requeue a pod

    # Without window retries (no marker: every pod is sent, through an entry that selects none):
    # turned away by its window, it would wait for a cluster event or the 5-minute flush (how soon
    # an event comes is up to the other tests sharing this control plane, so the test stops here).
    cell.pod("waits", plain.name, hugepages_2mi="256Mi")
    wait_for_event(cell.core, cell.namespace, "waits", "FailedScheduling", contains=EXTENDER_REASON_HELD_OUTSIDE)
    assert metric_value(extender, "hugepage_extender_window_retries_total") == 0
    cell.core.delete_namespaced_pod("waits", cell.namespace, grace_period_seconds=0)

    started = time.monotonic()
    cell.pod("retried", marked.name, hugepages_2mi="256Mi", extended={ENFORCE_MARKER: "1"})
    bound = cell.plane.wait_for_pod_bound(cell.namespace, "retried", timeout=WITHIN)
    took = time.monotonic() - started
    assert bound == roomy
    retries = metric_value(extender, "hugepage_extender_window_retries_total")
    errors = sum(
        1
        for line in marked.process.log_path.read_text().splitlines()
        if "Error scheduling pod; retrying" in line and WINDOW_RETRY_MESSAGE.split(":")[0] in line
    )
    print(f"bound {took:.2f} s after creation, {retries:.0f} window retries, {errors} scheduler error lines")
    assert retries >= 1
    assert errors == retries  # each retry is one error line of the scheduler (and one event)


WHOLE_SCAN_NODES = 300
SELECTED = 120  # the pod's node selector picks these, every pool held outside pods


def test_a_pod_whose_whole_scan_is_turned_away_gets_no_window_retry(cell: Cell) -> None:
    def make(index: int) -> str:
        selected = index < SELECTED
        name = cell.node(f"s{index:03d}", hugepages="2Gi", labels={"pool": "vm"} if selected else None)
        if selected:
            reserve_pages(cell.core, name, "2Gi")
        return name

    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(make, range(WHOLE_SCAN_NODES)))
    extender = cell.extender({"namespaces": {cell.namespace: {"mode": "enforce"}}})  # adaptive, as the chart's 0
    marked = scheduler(cell, extender.url, f"whole-{cell.slug}", marker=True, percentage=0)
    wait_until(
        "the extender knows every node",
        lambda: metric_value(extender, "hugepage_extender_cached_nodes") >= WHOLE_SCAN_NODES,
        timeout=30,
    )
    cell.pod(
        "selected",
        marked.name,
        hugepages_2mi="256Mi",
        extended={ENFORCE_MARKER: "1"},
        node_selector={**cell.selector, "pool": "vm"},
    )
    wait_for_event(cell.core, cell.namespace, "selected", "FailedScheduling", contains=EXTENDER_REASON_HELD_OUTSIDE)
    filtered = metric_value(extender, "hugepage_extender_filter_outcomes_total")
    time.sleep(3)  # a retry would come back after the scheduler's 1 s backoff
    assert metric_value(extender, "hugepage_extender_window_retries_total") == 0
    errors = [line for line in marked.process.log_path.read_text().splitlines() if "Error scheduling pod" in line]
    assert errors == []
    assert cell.plane.pod_assignments(cell.namespace).get("selected") is None
    print(f"turned away with 0 window retries, {filtered:.0f} filter calls")
