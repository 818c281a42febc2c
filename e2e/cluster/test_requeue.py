"""The scheduler looks again within seconds when room frees without an API event it watches
(docs/design.md, "Requeue"), and an extender-only rejection never sends it into a preemption
error loop (docs/design.md, "Preemption"), on the real kube-scheduler.

- A node agent record holds a node's pool outside pods; the pod waits; the record gives the
  pages back (the scheduler does not watch these records): the pod is bound within 10 s.
- A hold that times out (its pod never bound) frees its pages on the extender's timer: the pod it
  kept out is bound within 10 s. Without the nudge it is still Pending well after.
- Run with no pod to annotate (outside a pod, no --nudge-pod), the extender says so at start in
  one WARNING line and in ``hugepage_extender_nudge_pod`` 0 (the requeue after room frees is lost).
- With priority classes: a higher-priority pod only the extender turns away stays Pending with its
  reason, and the scheduler logs no error about victims; one whose hugepage *request* exceeds what
  is left still preempts a lower-priority pod through the in-tree plugins.
"""

from __future__ import annotations

import json
import os
import time
import urllib.request
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from e2e.cluster.placement_support import (
    EXTENDER_REASON_HELD_OUTSIDE,
    EXTENDER_REASON_INSUFFICIENT,
    Cell,
    assert_stays_pending,
    bound_pod,
    metric_value,
    placement_scheduler_config,
    pool_usage,
    wait_for_event,
)
from e2e.cluster.test_node_agent import record
from e2e.controlplane import ControlPlane, Scheduler, wait_until
from e2e.controlplane.objects import delete_pods
from extender.shell.kube.nudge import NUDGE_ANNOTATION
from extender.shell.nodeagent.publish import ApiPublisher

pytestmark = pytest.mark.cluster

WITHIN = 10.0  # what the issue asks: bound within 10 s of the room freeing
VICTIM_ERROR = "expected at least one victim pod"


def nudged_extender(
    cell: Cell, config: dict[str, Any], *, nudge: bool = True, suffix: str = "", enable_bind: bool = False
) -> Any:
    """A live extender whose nudge annotates a pod of the test's own (``nudge``), or without one."""
    return cell.extender(config, suffix=suffix, enable_bind=enable_bind, nudge=nudge)


def scheduler_with(cell: Cell, extender: Any, *, suffix: str = "", bind: bool = False) -> str:
    """kube-scheduler's default backoff (1 s to 10 s) and its 5-minute unschedulable flush: nothing
    but a cluster event brings a rejected pod back within the test."""
    name = f"hp-{cell.slug}{suffix}"
    config = placement_scheduler_config(extender.url, scheduler_name=name, bind=bind)
    config.pop("podInitialBackoffSeconds")
    config.pop("podMaxBackoffSeconds")
    cell.start_scheduler(config, name=name)
    return name


def bound_within(cell: Cell, name: str, seconds: float) -> tuple[str, float]:
    started = time.monotonic()
    node = cell.plane.wait_for_pod_bound(cell.namespace, name, timeout=seconds)
    return node, time.monotonic() - started


def test_a_record_giving_pages_back_binds_the_waiting_pod_within_10_s(cell: Cell, report_crd: None) -> None:
    node = cell.node("held", hugepages="1Gi")
    publisher = ApiPublisher(cell.plane.api_client)
    publisher.publish(record(node, total=512, outside=512))  # the whole pool held outside pods
    extender = nudged_extender(cell, {"namespaces": {cell.namespace: {"mode": "enforce"}}})
    scheduler = scheduler_with(cell, extender)
    only = {**cell.selector, "kubernetes.io/hostname": node}

    cell.pod("waits", scheduler, hugepages_2mi="256Mi", node_selector=only)
    wait_for_event(cell.core, cell.namespace, "waits", "FailedScheduling", contains=EXTENDER_REASON_HELD_OUTSIDE)
    assert_stays_pending(cell.core, cell.namespace, ["waits"], 2)
    sent = metric_value(extender, "hugepage_extender_nudges_total", {"result": "sent"})

    publisher.publish(record(node, total=512, outside=0))  # given back: no event the scheduler watches
    bound, took = bound_within(cell, "waits", WITHIN)
    assert bound == node
    print(f"bound {took:.2f} s after the record gave the pages back")
    assert metric_value(extender, "hugepage_extender_nudges_total", {"result": "sent"}) >= sent + 1
    nudged = cell.core.read_namespaced_pod("extender", cell.namespace)
    assert nudged.metadata is not None
    assert NUDGE_ANNOTATION in (nudged.metadata.annotations or {})


def post_filter(url: str, pod: client.V1Pod, nodes: list[str]) -> dict[str, Any]:
    """The filter call a scheduler makes for ``pod`` (whose bind then never comes)."""
    assert pod.metadata is not None
    body = {
        "Pod": {
            "metadata": {"name": pod.metadata.name, "namespace": pod.metadata.namespace, "uid": pod.metadata.uid},
            "spec": client.ApiClient().sanitize_for_serialization(pod.spec),  # type: ignore[no-untyped-call]
        },
        "NodeNames": nodes,
    }
    request = urllib.request.Request(
        f"{url}/filter", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=10) as answer:
        result: dict[str, Any] = json.loads(answer.read())
    return result


@pytest.mark.parametrize("nudge", [True, False], ids=["nudged", "not-nudged"])
def test_a_hold_that_times_out_binds_the_pod_it_kept_out_within_10_s(cell: Cell, nudge: bool) -> None:
    timeout = 3.0
    node = cell.node("pool", hugepages="512Mi")
    config = {"namespaces": {cell.namespace: {"mode": "enforce", "holdTimeoutSeconds": timeout}}}
    extender = nudged_extender(cell, config, nudge=nudge)
    scheduler = scheduler_with(cell, extender)
    only = {**cell.selector, "kubernetes.io/hostname": node}

    # A pod of another scheduler that never binds it: its filter holds the whole pool, then nothing.
    ghost = cell.pod("ghost", f"absent-{uuid.uuid4().hex[:6]}", hugepages_2mi="512Mi", node_selector=only)
    ghost_pod = cell.core.read_namespaced_pod(ghost, cell.namespace)
    time.sleep(1)  # the extender's watch shows the ghost: its hold counts against pods the watch shows
    assert post_filter(extender.url, ghost_pod, [node])["NodeNames"] == [node]
    held_at = time.monotonic()
    cell.pod("kept-out", scheduler, hugepages_2mi="256Mi", node_selector=only)
    wait_for_event(cell.core, cell.namespace, "kept-out", "FailedScheduling", contains=EXTENDER_REASON_INSUFFICIENT)
    assert time.monotonic() - held_at < timeout, "turned away only after the hold ended: the test proves nothing"
    if nudge:
        bound, _ = bound_within(cell, "kept-out", timeout + WITHIN)
        took = time.monotonic() - held_at - timeout
        assert bound == node
        print(f"bound {took:.2f} s after the hold timed out")
        assert took < WITHIN
        assert metric_value(extender, "hugepage_extender_nudges_total", {"result": "sent"}) >= 1
    else:
        # Nothing the scheduler watches changes when the hold times out: the pod waits for the flush.
        assert_stays_pending(cell.core, cell.namespace, ["kept-out"], timeout + 5)
        assert metric_value(extender, "hugepage_extender_holds") == 0  # the timer did end the hold


# --------------------------------------------------------------------------- preemption


@pytest.fixture
def priorities(control_plane: ControlPlane) -> Iterator[tuple[str, str]]:
    """Two PriorityClasses (low, high), removed afterwards."""
    scheduling = client.SchedulingV1Api(control_plane.api_client)
    suffix = uuid.uuid4().hex[:6]
    names = (f"low-{suffix}", f"high-{suffix}")
    for name, value in zip(names, (100, 1000), strict=True):
        scheduling.create_priority_class(
            client.V1PriorityClass.model_validate({"metadata": {"name": name}, "value": value})
        )
    try:
        yield names
    finally:
        for name in names:
            scheduling.delete_priority_class(name)


def victim_errors(scheduler: Scheduler) -> int:
    return scheduler.process.log_path.read_text().count(VICTIM_ERROR)


def test_extender_only_rejections_never_loop_preemption_and_requests_still_preempt(
    cell: Cell, priorities: tuple[str, str]
) -> None:
    low, high = priorities
    # held: 768Mi of its 1Gi pool held outside pods (only the extender knows), 128Mi used by a
    # low-priority pod. The in-tree filters see 896Mi free; the extender 128Mi.
    held = cell.node("held", hugepages="1Gi", reserved="768Mi")
    # full: 768Mi of 1Gi requested by a low-priority pod; nothing outside.
    full = cell.node("full", hugepages="1Gi")
    bound_pod(cell.plane, cell.namespace, "low-held", held, hugepages_2mi="128Mi", priority_class_name=low)
    bound_pod(cell.plane, cell.namespace, "low-full", full, hugepages_2mi="768Mi", priority_class_name=low)
    extender = cell.extender({"namespaces": {cell.namespace: {"mode": "enforce"}}})
    scheduler_name = cell.scheduler(extender)
    scheduler = cell.plane.schedulers[scheduler_name]

    # Only the extender turns it away (what preemption cannot free: pages outside pods).
    cell.pod(
        "extender-only",
        scheduler_name,
        hugepages_2mi="256Mi",
        priority_class_name=high,
        node_selector={**cell.selector, "kubernetes.io/hostname": held},
    )
    event = wait_for_event(cell.core, cell.namespace, "extender-only", "FailedScheduling", contains="hugepages-2Mi")
    assert EXTENDER_REASON_INSUFFICIENT in event or EXTENDER_REASON_HELD_OUTSIDE in event
    assert_stays_pending(cell.core, cell.namespace, ["extender-only"], 6)  # several attempts (backoff 1-2 s)
    victim = cell.core.read_namespaced_pod("low-held", cell.namespace)
    assert victim.metadata is not None
    assert victim.metadata.deletion_timestamp is None

    # Its request exceeds what the in-tree filters see left: NodeResourcesFit turns it away, and
    # preemption evicts the low-priority pod; then the extender admits it.
    cell.pod(
        "request",
        scheduler_name,
        hugepages_2mi="512Mi",
        priority_class_name=high,
        node_selector={**cell.selector, "kubernetes.io/hostname": full},
    )
    assert cell.plane.wait_for_pod_bound(cell.namespace, "request", timeout=60) == full
    assert "low-full" not in cell.plane.pod_assignments(cell.namespace)
    errors = victim_errors(scheduler)
    print(f"scheduler error lines about victims: {errors}")
    assert errors == 0, scheduler.log_tail(20)


# --------------------------------------------------------------------------- kube-apiserver restarted mid-burst


def test_a_burst_cut_by_an_apiserver_restart_strands_no_pod_that_fits(cell: Cell) -> None:
    """The reported stranding: kube-apiserver restarted mid-burst, binds failing while it was down.
    Every release of room the scheduler cannot see nudges it (a hold that timed out or was dropped,
    a watch event the scheduler saw first), and a failed bind releases its hold before the scheduler
    hears of the failure (it then requeues every waiting pod itself): every pod that fits is bound
    soon after the API server is back, and no pool is over-committed."""
    nodes = [cell.node(f"n{i:02d}", hugepages="1Gi") for i in range(16)]  # 4 slots of 256Mi each
    config = {"namespaces": {cell.namespace: {"mode": "enforce", "sampleSize": 3}}}
    extender = nudged_extender(cell, config, enable_bind=True)  # the chart's secondary scheduler binds through it
    scheduler = scheduler_with(cell, extender, bind=True)
    names: list[str] = []

    def bound() -> int:
        return sum(1 for name, node in cell.plane.pod_assignments(cell.namespace).items() if node and name in names)

    failed = 0.0
    for attempt in range(4):
        names = [f"b{attempt}-{i:02d}" for i in range(64)]  # exactly the 64 slots
        cell.pods(names, scheduler, hugepages_2mi="256Mi")
        wait_until("the burst to be under way", lambda: bound() >= 8, timeout=60, interval=0.02)
        for _ in range(5):
            # Killed: binds in flight fail. While it is down the extender's watch is stale and its filter
            # answers errors, so no new bind starts: a kill between two binds fails none. Again then.
            cell.plane.restart_apiserver(downtime=2.0, graceful=False)
            failed = metric_value(extender, "hugepage_extender_binds_total", {"result": "error"})
            if failed > 0 or bound() == len(names):
                break
        if failed > 0:
            break
        # The burst was over before a kill met a bind in flight: the same burst again, from nothing.
        delete_pods(cell.core, cell.namespace)
        wait_until("the burst's pods gone", lambda: not cell.plane.pod_assignments(cell.namespace), timeout=60)
        wait_until("no holds", lambda: metric_value(extender, "hugepage_extender_holds") == 0, timeout=60)
    back = time.monotonic()
    at_restart = bound()
    assert failed > 0, "no bind failed: the burst was over before the restart, the test proves nothing"
    wait_until("every pod of the burst to be bound", lambda: bound() == len(names), timeout=90, interval=0.5)
    took = time.monotonic() - back
    print(f"{at_restart} of 64 bound when kube-apiserver was back, {failed:.0f} binds failed; all in {took:.1f} s")
    assert took < 30
    for node, (used, pool) in pool_usage(cell.plane, nodes, {cell.namespace: False}).items():
        assert used <= pool, f"{node}: pods hold {used} bytes of hugepages, its pool offers {pool}"


def test_serve_with_no_pod_to_annotate_says_so_at_start_and_in_a_metric(
    control_plane: ControlPlane, start_extender: Any, namespace: str
) -> None:
    """Outside a pod (no $POD_NAMESPACE/$POD_NAME) and without --nudge-pod, the requeue after room
    frees is lost: one WARNING at start, and the metric 0; with a pod to annotate, neither."""
    env = {k: v for k, v in os.environ.items() if k not in ("POD_NAME", "POD_NAMESPACE")}
    kubeconfig = ["--kubeconfig", str(control_plane.kubeconfig)]
    alone = start_extender(kubeconfig, name=f"no-nudge-{uuid.uuid4().hex[:6]}", env=env, ready_path="/readyz")
    warned = [line for line in alone.process.log_path.read_text().splitlines() if "no pod to annotate" in line]
    assert len(warned) == 1, warned
    assert " WARNING " in warned[0]
    assert "5-minute flush" in warned[0]
    assert metric_value(alone, "hugepage_extender_nudge_pod") == 0
    nudging = start_extender(
        [*kubeconfig, "--nudge-pod", f"{namespace}/extender"],
        name=f"nudge-{uuid.uuid4().hex[:6]}",
        env=env,
        ready_path="/readyz",
    )
    assert "no pod to annotate" not in nudging.process.log_path.read_text()
    assert metric_value(nudging, "hugepage_extender_nudge_pod") == 1
