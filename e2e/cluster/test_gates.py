"""Pods behind the extender's scheduling gate (extender/gates.py) on the real kube-apiserver and
kube-scheduler: they wait outside the scheduler's queue (no attempt, no filter call) while no node they
may use has room, and are lifted one slot at a time, oldest first, as room frees; another controller's
gate is never touched."""

from __future__ import annotations

import pytest

from e2e.cluster.placement_support import Cell, assert_stays_pending, metric_value, reserve_pages
from e2e.controlplane import wait_until
from extender.gates import GATE

pytestmark = pytest.mark.cluster

WITHIN = 10.0
OTHER_GATE = "example.com/quota"


def gates_of(cell: Cell, name: str) -> list[str]:
    pod = cell.core.read_namespaced_pod(name, cell.namespace)
    return [gate.name for gate in pod.spec.scheduling_gates or ()]


def filter_calls(extender: object) -> float:
    return metric_value(extender, "hugepage_extender_requests_total", {"verb": "filter"})  # type: ignore[arg-type]


def test_gated_pods_wait_outside_the_queue_and_are_lifted_as_room_frees(cell: Cell) -> None:
    node = cell.node("pool", hugepages="1026Mi", reserved="1026Mi")  # every page held outside pods: no room
    extender = cell.extender({"namespaces": {cell.namespace: {"mode": "enforce"}}})
    scheduler = cell.scheduler(extender)
    names = ["first", "second", "third"]
    for name in names:  # created in this order: lifted in it
        cell.pod(name, scheduler, hugepages_2mi="512Mi", scheduling_gates=[GATE])
    cell.pod("theirs", scheduler, hugepages_2mi="2Mi", scheduling_gates=[OTHER_GATE, GATE])
    assert_stays_pending(cell.core, cell.namespace, [*names, "theirs"], 5.0)
    # No room: none lifted, and the scheduler never asked about them.
    assert {name: gates_of(cell, name) for name in names} == {name: [GATE] for name in names}
    assert filter_calls(extender) == 0

    reserve_pages(cell.core, node, "512Mi")  # 514Mi free: the oldest gated pod gets a slot
    assert cell.plane.wait_for_pod_bound(cell.namespace, "first", timeout=WITHIN) == node
    # "theirs" fits the 2Mi left: our gate lifted, the other controller's kept (it stays Pending).
    wait_until("our gate lifted from 'theirs'", lambda: gates_of(cell, "theirs") == [OTHER_GATE], timeout=WITHIN)
    assert gates_of(cell, "second") == gates_of(cell, "third") == [GATE]
    assert_stays_pending(cell.core, cell.namespace, ["second", "third", "theirs"], 2.0)

    reserve_pages(cell.core, node, "0")  # 512Mi more: one more slot, the next in line
    assert cell.plane.wait_for_pod_bound(cell.namespace, "second", timeout=WITHIN) == node
    assert gates_of(cell, "third") == [GATE]
    assert cell.plane.pod_assignments(cell.namespace)["third"] is None
    written = metric_value(extender, "hugepage_extender_api_writes_total", {"kind": "gate", "result": "written"})
    assert written == 3  # first, theirs, second: each pod's gate once
    # The two pods placed were each filtered once: the scheduler never cycled the ones still gated.
    assert filter_calls(extender) <= 2
