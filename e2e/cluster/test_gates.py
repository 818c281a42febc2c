"""Pods behind the extender's scheduling gate (extender/core/gates.py) on the real kube-apiserver and
kube-scheduler: they wait outside the scheduler's queue (no attempt, no filter call) while no node they
may use has room, and are lifted one slot at a time, oldest first, as room frees; another controller's
gate is never touched. The chart's gate (gates.enabled) applied for real: which pods it gates, and
that the extender's identity may lift that gate and change nothing else."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from e2e.cluster.placement_support import (
    Cell,
    assert_stays_pending,
    metric_value,
    reserve_pages,
    wait_for_event,
)
from e2e.cluster.test_fail_closed import applied, helm_template, unique
from e2e.cluster.test_node_agent import token_client
from e2e.controlplane import ControlPlane, pod_events, pod_manifest, wait_until
from extender.core.config import DEFAULT_RESOURCE, build_config
from extender.core.gates import GATE, GatedPod
from extender.core.podrequest import PodDemand
from extender.core.reach import UNCONSTRAINED
from extender.shell.diagnose import live_explanation
from extender.shell.kube.events import REASON_WAITING_FOR_ROOM
from extender.shell.kube.gatelift import GateWriter
from extender.shell.metrics import Metrics

pytestmark = pytest.mark.cluster

WITHIN = 60.0  # generous: a lift is a watch event, a 0.25 s tick and a patch; a loaded 2-core CI machine
OTHER_GATE = "example.com/quota"
__all__ = ["applied"]  # the fixture, shared with test_fail_closed (policies deleted after each test)


def gate_names(pod: client.V1Pod) -> list[str]:
    assert pod.spec is not None
    return [gate.name for gate in pod.spec.scheduling_gates or ()]


def gates_of(cell: Cell, name: str) -> list[str]:
    return gate_names(cell.core.read_namespaced_pod(name, cell.namespace))


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
    # "Why is it Pending?": explain says the gate, and what the filter would say (no node has room).
    config = build_config({"namespaces": {cell.namespace: {"mode": "enforce"}}}, {})
    explained = live_explanation(cell.plane.api_client, cell.namespace, "first", config=config, nodes=[node])
    (table,) = explained.tables.values()
    assert GATE in table.sources["pod"]
    assert [row.free_pages for row in table.nodes] == [0]

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


def test_a_gated_pod_without_room_is_told_why_once_and_placed_when_room_frees(cell: Cell) -> None:
    """The scheduler never tries a gated pod, so no FailedScheduling event says why it is Pending: the
    extender posts one WaitingForRoom Event (the size, the amount, the gate), not again while it waits,
    and lifts the gate when room frees; the pod is bound."""
    node = cell.node("pool", hugepages="1026Mi", reserved="1026Mi")  # every page held outside pods: no room
    extender = cell.extender({"namespaces": {cell.namespace: {"mode": "enforce"}}})
    scheduler = cell.scheduler(extender)
    cell.pod("vm", scheduler, hugepages_2mi="512Mi", scheduling_gates=[GATE])
    told = wait_for_event(cell.core, cell.namespace, "vm", REASON_WAITING_FOR_ROOM, timeout=WITHIN)
    assert "512Mi of hugepages-2Mi" in told
    assert GATE in told
    # Another pod behind the gate runs another round: "vm" is not told again, "big" is told once.
    cell.pod("big", scheduler, hugepages_2mi="1Gi", scheduling_gates=[GATE])
    wait_for_event(cell.core, cell.namespace, "big", REASON_WAITING_FOR_ROOM, contains="1Gi of", timeout=WITHIN)
    assert_stays_pending(cell.core, cell.namespace, ["vm", "big"], 3.0)

    def waiting_events(name: str) -> list[str]:
        return [e for e in pod_events(cell.core, cell.namespace, name) if e.startswith(f"{REASON_WAITING_FOR_ROOM}:")]

    assert waiting_events("vm") == [told]
    reserve_pages(cell.core, node, "512Mi")  # 514Mi free: room for "vm", not for "big"
    assert cell.plane.wait_for_pod_bound(cell.namespace, "vm", timeout=WITHIN) == node
    assert waiting_events("vm") == [told]
    assert not [e for e in pod_events(cell.core, cell.namespace, "vm") if e.startswith("FailedScheduling:")]
    assert gates_of(cell, "big") == [GATE]
    assert len(waiting_events("big")) == 1
    events_written = {"kind": "event", "result": "written"}
    # One per gated pod that waited (counted once the API server answered: a moment after the Event shows).
    wait_until(
        "both Events counted",
        lambda: metric_value(extender, "hugepage_extender_api_writes_total", events_written) == 2,
        timeout=10,
    )
    assert metric_value(extender, "hugepage_extender_events_total", {"reason": REASON_WAITING_FOR_ROOM}) == 2


def test_the_chart_gates_enforced_pods_only_and_its_extender_may_lift_that_gate_and_nothing_else(
    control_plane: ControlPlane, applied: Callable[[list[dict[str, Any]]], None]
) -> None:
    """gates.enabled rendered and applied for real: the marker policy gates new pods of the chart's
    scheduler in enforcing namespaces that ask for pages (another controller's gate kept), none of shadow
    namespaces, none without pages, none of other schedulers; the extender's identity (RBAC patch of pods)
    lifts that gate with the extender's own patch, and the policy refuses it any other change: another
    gate, a label, a lift with a label."""
    release_namespace, enforced, shadowed = unique("hx"), unique("enforce"), unique("shadow")
    for namespace in (release_namespace, enforced, shadowed):
        control_plane.create_namespace(namespace)
    documents = helm_template(
        control_plane,
        unique("hx"),
        release_namespace,
        "gates.enabled=true",
        "topology=service",  # the extender its own ServiceAccount (the sidecar runs as the scheduler's)
        f"config.namespaces.{enforced}.mode=enforce",
        f"config.namespaces.{shadowed}.mode=shadow",
    )
    extender_objects = [
        d
        for d in documents
        if d["kind"] in {"ServiceAccount", "ClusterRole", "ClusterRoleBinding"}
        and not any(part in d["metadata"]["name"] for part in ("node-agent", "scheduler"))
    ]
    policies = [d for d in documents if "AdmissionPolicy" in d["kind"] and not d["metadata"]["name"].endswith("agent")]
    assert sorted(d["kind"] for d in policies) == [
        "MutatingAdmissionPolicy",
        "MutatingAdmissionPolicyBinding",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    ]
    applied([*extender_objects, *policies])
    (account,) = [d["metadata"]["name"] for d in extender_objects if d["kind"] == "ServiceAccount"]
    scheduler = "hugepage-scheduler"  # the chart's default profile: the policy touches only its pods
    core = control_plane.core

    def gates(namespace: str, name: str) -> list[str]:
        return gate_names(core.read_namespaced_pod(name, namespace))

    def create(namespace: str, name: str, **kwargs: Any) -> list[str]:
        kwargs.setdefault("scheduler_name", scheduler)
        body = pod_manifest(name, **kwargs)
        core.create_namespaced_pod(namespace, client.V1Pod.model_validate(body))
        return gates(namespace, name)

    probe = pod_manifest(unique("probe"), scheduler_name=scheduler, hugepages_2mi="2Mi")

    def policy_gates() -> bool:
        made = core.create_namespaced_pod(enforced, client.V1Pod.model_validate(probe), dry_run="All")
        return bool(gate_names(made))

    wait_until("the marker policy to gate pods", policy_gates, timeout=60)
    assert create(enforced, "gated", hugepages_2mi="2Mi") == [GATE]
    assert create(enforced, "theirs", hugepages_2mi="2Mi", scheduling_gates=[OTHER_GATE]) == [OTHER_GATE, GATE]
    assert create(enforced, "plain") == []
    assert create(shadowed, "shadowed", hugepages_2mi="2Mi") == []
    # Bystanders: a hugepage pod of another scheduler, in the enforcing namespace, gets no gate.
    assert create(enforced, "default-scheduler", hugepages_2mi="2Mi", scheduler_name="default-scheduler") == []
    assert create(enforced, "third-scheduler", hugepages_2mi="2Mi", scheduler_name="someone-elses") == []

    request = client.AuthenticationV1TokenRequest.model_validate({"spec": {"audiences": [], "expirationSeconds": 3600}})
    token = core.create_namespaced_service_account_token(account, release_namespace, request)
    assert token.status is not None
    as_extender = token_client(control_plane, str(token.status.token))
    metrics = Metrics()
    writer = GateWriter(as_extender, metrics)
    written = metrics.child(metrics.api_writes, "gate", "written")
    failed = metrics.child(metrics.api_writes, "gate", "failed")

    def lift(name: str, index: int) -> None:
        writer._patch(
            GatedPod(
                *(f"uid-{name}", enforced, name, index, 0, ""),
                PodDemand({DEFAULT_RESOURCE: 2 << 20}, 0),
                UNCONSTRAINED,
                b"",
            )
        )

    extender = client.CoreV1Api(as_extender)

    def patch(name: str, body: list[dict[str, Any]]) -> int:
        try:
            extender.patch_namespaced_pod(
                name, enforced, body, _content_type="application/json-patch+json", _preload_content=False
            )
        except ApiException as error:
            return int(error.status)
        return 200

    label: dict[str, Any] = {"op": "add", "path": "/metadata/labels", "value": {"evil": "yes"}}
    # The policy is in force a moment after it is created: until then RBAC alone lets the write through.
    wait_until("the policy to refuse a label", lambda: patch("plain", [label]) == 403, timeout=60)
    lift("gated", 0)
    assert gates(enforced, "gated") == []
    assert written._value.get() == 1
    lift("theirs", 0)  # the entry there is another controller's: the patch's test refuses it
    assert failed._value.get() == 1
    lift("theirs", 1)
    assert gates(enforced, "theirs") == [OTHER_GATE]
    assert written._value.get() == 2

    assert patch("theirs", [{"op": "remove", "path": "/spec/schedulingGates/0"}]) == 403  # not its gate
    assert create(enforced, "again", hugepages_2mi="2Mi") == [GATE]
    with_label = [{"op": "remove", "path": "/spec/schedulingGates/0"}, label]
    assert patch("again", with_label) == 403
    assert patch("again", with_label[:1]) == 200
