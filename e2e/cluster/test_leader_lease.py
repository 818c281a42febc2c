"""Several replicas, one lifter (issue 30): each scheduler replica has its extender beside it, and only the
extender whose host's scheduler holds the leader Lease lifts scheduling gates (``serve --leader-lease``,
extender/core/leadership.py). On the real kube-apiserver and kube-scheduler: the scheduler's own leader
election names this machine's host in the Lease (``<hostname>_<uuid>``), so the extender with the default
``--hostname`` lifts and one on another host does not; the scheduler stops and releases the Lease, the
other replica's takes it, and from then on only the other extender lifts."""

from __future__ import annotations

import asyncio
import socket
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from e2e.cluster.placement_support import (
    Cell,
    assert_stays_pending,
    metric_value,
    placement_scheduler_config,
    reserve_pages,
)
from e2e.cluster.test_fail_closed import applied, helm_template, unique
from e2e.cluster.test_gates import gates_of
from e2e.cluster.test_node_agent import token_client
from e2e.controlplane import ControlPlane, Service, wait_until
from extender.core.gates import GATE
from extender.shell.kube.lease import LeaseWatch

pytestmark = pytest.mark.cluster

WITHIN = 60.0  # a lift is a watch event, a 0.25 s tick and a patch; a loaded 2-core CI machine
OTHER_HOST = "hugepage-scheduler-1"  # the host of the other replica (its pod's name, in the sidecar topology)
__all__ = ["applied"]  # the fixture, shared with test_fail_closed (objects deleted after each test)


def lifter(extender: Service) -> float:
    return metric_value(extender, "hugepage_extender_gate_lifter")


def gate_writes(*extenders: Service) -> list[float]:
    """Each extender's gate patches so far, written or failed (a lift of a pod another lifted first)."""
    name = "hugepage_extender_api_writes_total"
    return [metric_value(e, name, {"kind": "gate", "result": r}) for e in extenders for r in ("written", "failed")]


def since(before: list[float], now: list[float]) -> list[float]:
    # The extenders watch every namespace: earlier tests' gated pods left on the shared control plane
    # (no namespace controller deletes them) are lifted too, by whichever extender lifts when it starts.
    return [after - start for start, after in zip(before, now, strict=True)]


def test_only_the_extender_beside_the_lease_holder_lifts_and_the_lift_follows_the_lease(cell: Cell) -> None:
    node = cell.node("pool", hugepages="1026Mi", reserved="1026Mi")  # every page held outside pods: no room
    lease_name = f"hp-{cell.slug}"
    flags = ["--leader-lease", f"{cell.namespace}/{lease_name}"]
    config = {"namespaces": {cell.namespace: {"mode": "enforce"}}}
    here = cell.extender(config, suffix="-0", args=flags)  # --hostname: this machine's, the default
    there = cell.extender(config, suffix="-1", args=[*flags, "--hostname", OTHER_HOST])
    name = f"hp-{cell.slug}"
    election = [
        "--leader-elect=true",
        f"--leader-elect-resource-namespace={cell.namespace}",
        f"--leader-elect-resource-name={lease_name}",
    ]
    leader = cell.start_scheduler(
        placement_scheduler_config(here.url, scheduler_name=name), name=f"{name}-0", extra_args=election
    )
    leases = client.CoordinationV1Api(cell.plane.api_client)

    def holder() -> str:
        spec = leases.read_namespaced_lease(lease_name, cell.namespace).spec
        return (spec.holder_identity if spec is not None else None) or ""

    def lifters() -> tuple[float, float]:
        return lifter(here), lifter(there)

    this_host = f"{socket.gethostname()}_"  # kube-scheduler's identity: <hostname>_<uuid>
    wait_until("the scheduler to hold its Lease", lambda: holder().startswith(this_host), timeout=WITHIN)
    wait_until("only the extender on the leader's host to lift", lambda: lifters() == (1, 0), timeout=20)

    before = gate_writes(here, there)
    for pod in ("first", "second"):  # created in this order: lifted in it
        cell.pod(pod, name, hugepages_2mi="512Mi", scheduling_gates=[GATE])
    assert_stays_pending(cell.core, cell.namespace, ["first", "second"], 2.0)
    reserve_pages(cell.core, node, "512Mi")  # room for one: both extenders see it, one lifts
    assert cell.plane.wait_for_pod_bound(cell.namespace, "first", timeout=WITHIN) == node
    assert_stays_pending(cell.core, cell.namespace, ["second"], 2.0)
    assert gates_of(cell, "second") == [GATE]
    assert since(before, gate_writes(here, there)) == [1, 0, 0, 0]  # "first", by the leader's extender only

    # The leader stops (it releases the Lease); the other replica's scheduler takes it.
    leader.stop()
    wait_until("the extender of the stopped leader to stop lifting", lambda: lifter(here) == 0, timeout=WITHIN)
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    taken = {"holderIdentity": f"{OTHER_HOST}_{uuid.uuid4()}", "renewTime": now, "leaseDurationSeconds": 600}
    leases.patch_namespaced_lease(lease_name, cell.namespace, {"spec": taken})
    wait_until("the extender on the new leader's host to lift", lambda: lifters() == (0, 1), timeout=20)
    before = gate_writes(here, there)
    cell.start_scheduler(placement_scheduler_config(there.url, scheduler_name=name), name=f"{name}-1")

    reserve_pages(cell.core, node, "0")  # room for one more: now the other extender lifts
    assert cell.plane.wait_for_pod_bound(cell.namespace, "second", timeout=WITHIN) == node
    assert since(before, gate_writes(here, there)) == [0, 0, 1, 0]  # "second", by the other's only


async def test_the_charts_role_lets_the_extender_read_its_lease_and_no_other(
    control_plane: ControlPlane, applied: Callable[[list[dict[str, Any]]], None]
) -> None:
    """The chart's Role for the sidecar (the secondary scheduler's Lease, by name) applied for real: the
    extender's watch (extender/shell/kube/lease.py: list and watch with fieldSelector metadata.name) reads that
    Lease and follows it as it changes, as the pod's ServiceAccount; any other Lease, or the list of them
    all, is forbidden."""
    release, namespace = unique("hx"), unique("hx")
    control_plane.create_namespace(namespace)
    documents = helm_template(control_plane, release, namespace)
    (lease_flag,) = [
        arg
        for d in documents
        if d["kind"] == "Deployment"
        for c in d["spec"]["template"]["spec"].get("initContainers", [])
        for arg in c["args"]
        if arg.startswith("--leader-lease=")
    ]
    lease_namespace, lease_name = lease_flag.removeprefix("--leader-lease=").split("/")
    assert lease_namespace == namespace
    (account,) = [d for d in documents if d["kind"] == "ServiceAccount" and d["metadata"]["name"].endswith("scheduler")]
    reading = [
        d for d in documents if d["kind"] in {"Role", "RoleBinding"} and d["metadata"]["name"].endswith("-leader-lease")
    ]
    assert len(reading) == 2
    applied([account, *reading])  # the scheduler's own leader-election Role left out: the extender's alone

    leases = client.CoordinationV1Api(control_plane.api_client)
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")

    def lease(name: str, host: str) -> client.V1Lease:
        spec = {"holderIdentity": f"{host}_{uuid.uuid4()}", "renewTime": now, "leaseDurationSeconds": 600}
        return client.V1Lease.model_validate({"metadata": {"name": name}, "spec": spec})

    leases.create_namespaced_lease(namespace, lease(lease_name, "sched-0"))
    leases.create_namespaced_lease(namespace, lease("another", "sched-0"))
    request = client.AuthenticationV1TokenRequest.model_validate({"spec": {"audiences": [], "expirationSeconds": 3600}})
    token = control_plane.core.create_namespaced_service_account_token(account["metadata"]["name"], namespace, request)
    assert token.status is not None
    as_extender = token_client(control_plane, str(token.status.token))

    watch = LeaseWatch(as_extender, namespace, lease_name, hostname="sched-0")
    reflector = watch.start(asyncio.get_running_loop())
    try:
        await until(lambda: watch.turn().lifts, "the extender to read its Lease")
        # Moved to the other replica's host: the watch (not a new list) shows it.
        relists = reflector.relists
        moved = {"spec": {"holderIdentity": f"sched-1_{uuid.uuid4()}"}}
        await asyncio.to_thread(leases.patch_namespaced_lease, lease_name, namespace, moved)
        await until(lambda: "sched-1" in watch.turn().why, "the extender to see the Lease move")
        assert reflector.relists == relists
        assert reflector.failures == 0
    finally:
        watch.stop()
    mine = client.CoordinationV1Api(as_extender)
    for forbidden in (
        lambda: mine.read_namespaced_lease("another", namespace),
        lambda: mine.list_namespaced_lease(namespace),
        lambda: mine.list_namespaced_lease(namespace, field_selector="metadata.name=another"),
    ):
        with pytest.raises(ApiException) as refused:
            forbidden()
        assert refused.value.status == 403


async def until(check: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.1)
