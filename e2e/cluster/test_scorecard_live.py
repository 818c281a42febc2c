"""Shadow's scorecard on the real kube-scheduler (issue 32): every pod counted once, in its cell.

A shadow namespace sized by memory (``needFromMemory``: VM pods whose pages kube-scheduler does not
count), one node whose pool holds two of its pods. Pods are created one at a time, so shadow's verdict
on the node is known before each: the first two fit, the rest would be turned away. There is no
kubelet: the test writes each pod's status through the API as a kubelet would (Ready, a container that
exits, the kubelet's admission refusal) and checks the scorecard pod by pod, through ``/debug/shadow``,
the metric and ``kubectl hugepages shadow``. Once with the bind verb (the verdict judged at bind time),
once without (at the first watch event showing the pod bound).
"""

from __future__ import annotations

import functools
import json
from typing import Any

import pytest
from kubernetes import client

from e2e.cluster.placement_support import Cell, metric_value, run
from e2e.controlplane import Service, wait_until

pytestmark = pytest.mark.cluster

SETTLE_SECONDS = 3
READY = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
CRASHED = {
    "phase": "Running",
    "containerStatuses": [
        {
            "name": "app",
            "image": "pause",
            "imageID": "",
            "ready": False,
            "restartCount": 0,
            "state": {"terminated": {"exitCode": 1, "reason": "Error", "message": "EAL: No free 2048 kB hugepages"}},
        }
    ],
}
REFUSED = {
    "phase": "Failed",
    "reason": "OutOfhugepages-2Mi",
    "message": "Pod was rejected: Node didn't have enough resource: hugepages-2Mi",
}
# Pod by pod, in order: shadow's verdict on the node (the pool holds the first two), the status the
# test then writes (None: the pod is deleted before any), and the cell it must land in.
PLAN: list[tuple[str, bool, dict[str, Any] | None, str]] = [
    ("ran", False, READY, "ran_as_predicted"),
    ("miss", False, CRASHED, "failed_unpredicted"),
    ("refused", True, REFUSED, "predicted_failed"),  # Failed: its pages are free again, the pool still full
    ("alarm", True, READY, "predicted_ran"),
    ("gone", True, None, "deleted"),
]
FAILURES = {
    "miss": "failed: container app exited with code 1: EAL: No free 2048 kB hugepages",
    "refused": "failed: OutOfhugepages-2Mi: Pod was rejected: Node didn't have enough resource: hugepages-2Mi",
}


def _shadow(extender: Service, namespace: str) -> dict[str, Any]:
    answer = extender.get(f"/debug/shadow?namespace={namespace}")
    assert answer is not None
    assert answer[0] == 200
    report: dict[str, Any] = json.loads(answer[1])
    return report


def _counted(extender: Service, namespace: str, pods: int) -> bool:
    """Whether ``pods`` pods of the namespace are counted, each in its cell or an end."""
    rows = _shadow(extender, namespace)["namespaces"]
    return namespace in rows and sum(rows[namespace]["total"].values()) == pods


def _bound(core: client.CoreV1Api, namespace: str, name: str) -> str | None:
    pod = core.read_namespaced_pod(name, namespace)
    return pod.spec.node_name if pod.spec is not None else None


@pytest.mark.parametrize("bind", [True, False], ids=["bind-verb", "watch"])
def test_each_pod_lands_in_its_cell_once_and_the_cli_tells_its_story(cell: Cell, bind: bool) -> None:
    namespace = cell.namespace
    node = cell.node("n0", hugepages="1Gi")
    config = {
        "shadowSettleSeconds": SETTLE_SECONDS,
        "namespaces": {namespace: {"mode": "shadow", "needFromMemory": True}},
    }
    extender = cell.extender(config, enable_bind=bind)
    scheduler = cell.scheduler(extender, bind=bind)
    judged_by = "bind" if bind else "watch"
    for counted, (name, _, status, _) in enumerate(PLAN, start=1):
        cell.pod(name, scheduler, memory="512Mi")
        wait_until(f"{name} bound", functools.partial(_bound, cell.core, namespace, name), timeout=30)
        if status is None:
            cell.core.delete_namespaced_pod(name, namespace, grace_period_seconds=0)
        else:
            cell.core.patch_namespaced_pod_status(name, namespace, {"status": status})
        # One pod's outcome before the next: the next verdict reads the pool this one left.
        wait_until(f"{name}'s outcome", functools.partial(_counted, extender, namespace, counted), timeout=30)

    row = _shadow(extender, namespace)["namespaces"][namespace]
    expected = dict.fromkeys(row["total"], 0)
    for _, _, _, end in PLAN:
        expected[end] += 1
    assert row["total"] == expected
    assert row["window"] == expected
    assert (row["precision"], row["recall"]) == (0.5, 0.5)
    stories = {story["pod"]: (end, story) for end, cell_stories in row["pods"].items() for story in cell_stories}
    assert set(stories) == {f"{namespace}/{name}" for name, _, _, end in PLAN if end != "deleted"}
    for name, would_reject, _, end in PLAN:
        if end == "deleted":
            continue
        got_cell, story = stories[f"{namespace}/{name}"]
        assert got_cell == end, name
        assert story["node"] == node
        assert story["judgedBy"] == judged_by
        assert story["verdict"].startswith("would reject: Insufficient" if would_reject else "would admit"), story
        assert story["outcome"] == FAILURES.get(name, "ran: Ready"), story
    for end, count in expected.items():
        labels = {"pod_namespace": namespace, "cell": end}
        assert metric_value(extender, "hugepage_extender_shadow_outcomes_total", labels) == count, end

    table = run("kubectl-hugepages", "shadow", namespace, "--extender", extender.url)
    header, values = table.splitlines()[2].split(), table.splitlines()[3].split()
    assert dict(zip(header, values, strict=False))["PREDICTED_FAILED"] == "1"
    assert values[:6] == [namespace, "1", "1", "1", "1", "1"]  # each cell, then deleted
    for name, _, _, end in PLAN:
        if end != "deleted":
            assert f"{namespace}/{name} on {node}: shadow said" in table, name
    assert FAILURES["refused"] in table
    as_json = json.loads(run("kubectl-hugepages", "shadow", namespace, "-o", "json", "--extender", extender.url))
    assert as_json["namespaces"][namespace]["total"] == expected
