"""Several replicas, one lifter (issue 30): each scheduler replica has its extender beside it, and only the
extender whose host's scheduler holds the leader Lease lifts scheduling gates (``serve --leader-lease``,
extender/leadership.py). On the real kube-apiserver and kube-scheduler: the scheduler's own leader
election names this machine's host in the Lease (``<hostname>_<uuid>``), so the extender with the default
``--hostname`` lifts and one on another host does not; the scheduler stops and releases the Lease, the
other replica's takes it, and from then on only the other extender lifts."""

from __future__ import annotations

import socket
import uuid
from datetime import UTC, datetime

import pytest
from kubernetes import client

from e2e.cluster.placement_support import (
    Cell,
    assert_stays_pending,
    metric_value,
    placement_scheduler_config,
    reserve_pages,
)
from e2e.controlplane import Service, wait_until
from extender.gates import GATE

pytestmark = pytest.mark.cluster

WITHIN = 60.0  # a lift is a watch event, a 0.25 s tick and a patch; a loaded 2-core CI machine
OTHER_HOST = "hugepage-scheduler-1"  # the host of the other replica (its pod's name, in the sidecar topology)


def lifter(extender: Service) -> float:
    return metric_value(extender, "hugepage_extender_gate_lifter")


def gates_written(extender: Service) -> float:
    return metric_value(extender, "hugepage_extender_api_writes_total", {"kind": "gate", "result": "written"})


def gates_failed(extender: Service) -> float:
    return metric_value(extender, "hugepage_extender_api_writes_total", {"kind": "gate", "result": "failed"})


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

    for pod in ("first", "second"):  # created in this order: lifted in it
        cell.pod(pod, name, hugepages_2mi="512Mi", scheduling_gates=[GATE])
    assert_stays_pending(cell.core, cell.namespace, ["first", "second"], 2.0)
    reserve_pages(cell.core, node, "512Mi")  # room for one: both extenders see it, one lifts
    assert cell.plane.wait_for_pod_bound(cell.namespace, "first", timeout=WITHIN) == node
    assert_stays_pending(cell.core, cell.namespace, ["second"], 2.0)
    assert (gates_written(here), gates_written(there), gates_failed(there)) == (1, 0, 0)

    # The leader stops (it releases the Lease); the other replica's scheduler takes it.
    leader.stop()
    wait_until("the extender of the stopped leader to stop lifting", lambda: lifter(here) == 0, timeout=WITHIN)
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    taken = {"holderIdentity": f"{OTHER_HOST}_{uuid.uuid4()}", "renewTime": now, "leaseDurationSeconds": 600}
    leases.patch_namespaced_lease(lease_name, cell.namespace, {"spec": taken})
    wait_until("the extender on the new leader's host to lift", lambda: lifters() == (0, 1), timeout=20)
    cell.start_scheduler(placement_scheduler_config(there.url, scheduler_name=name), name=f"{name}-1")

    reserve_pages(cell.core, node, "0")  # room for one more: now the other extender lifts
    assert cell.plane.wait_for_pod_bound(cell.namespace, "second", timeout=WITHIN) == node
    assert (gates_written(here), gates_written(there), gates_failed(there)) == (1, 1, 0)
