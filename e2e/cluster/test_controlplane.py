"""Smoke tests of the real control plane: apiserver, fake Nodes, kube-scheduler with and without the extender."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from e2e.controlplane import (
    REPO_ROOT,
    ControlPlane,
    ControlPlaneError,
    Scheduler,
    Service,
    extender_scheduler_config,
    pod_events,
    port_is_open,
)

pytestmark = pytest.mark.cluster

StartScheduler = Callable[..., Scheduler]
StartExtender = Callable[..., Service]


def _pinned_kubernetes_version() -> str:
    go_mod = (REPO_ROOT / "e2e" / "tools" / "kubernetes" / "go.mod").read_text()
    match = re.search(r"^\s*(?:require\s+)?k8s\.io/kubernetes\s+(v\S+)", go_mod, re.MULTILINE)
    assert match, "e2e/tools/kubernetes/go.mod does not require k8s.io/kubernetes"
    return match.group(1)


def _wait_for_event(plane: ControlPlane, namespace: str, pod: str, reason: str, timeout: float = 30.0) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for event in pod_events(plane.core, namespace, pod):
            if event.startswith(f"{reason}:"):
                return event
        time.sleep(0.2)
    raise AssertionError(f"no {reason} event for {namespace}/{pod}: {pod_events(plane.core, namespace, pod)}")


def test_apiserver_serves_the_pinned_version(control_plane: ControlPlane) -> None:
    version = control_plane.version()
    assert version == _pinned_kubernetes_version()
    assert re.fullmatch(r"v1\.3\d+\.\d+", version)
    assert control_plane.apiserver_ready()
    assert control_plane.kubeconfig.is_file()
    names = {ns.metadata.name for ns in control_plane.core.list_namespace().items if ns.metadata}
    assert {"default", "kube-system"} <= names


def test_kubeconfigs_work_with_the_official_loader_and_rbac_applies(control_plane: ControlPlane) -> None:
    admin = config.new_client_from_config(config_file=str(control_plane.kubeconfig))  # type: ignore[no-untyped-call]
    nobody = config.new_client_from_config(  # type: ignore[no-untyped-call]
        config_file=str(control_plane.kubeconfig_for("e2e-nobody", ["e2e-group"]))
    )
    try:
        client.CoreV1Api(admin).list_node()
        with pytest.raises(ApiException) as raised:
            client.CoreV1Api(nobody).list_node()
        assert raised.value.status == 403
        assert "e2e-nobody" in str(raised.value.body)
    finally:
        admin.close()
        nobody.close()


def test_fake_node_with_hugepages_reads_back(control_plane: ControlPlane, test_label: tuple[str, str]) -> None:
    name = f"node-{test_label[1]}"
    control_plane.create_node(name, hugepages_2mi="1Gi", cpu="8", labels=dict([test_label]))

    node = control_plane.core.read_node(name)
    assert node.status is not None
    assert node.status.allocatable is not None
    assert node.status.allocatable["hugepages-2Mi"] == "1Gi"
    assert node.status.allocatable["cpu"] == "8"
    assert node.status.capacity is not None
    assert node.status.capacity["hugepages-2Mi"] == "1Gi"
    ready = [c for c in node.status.conditions or [] if c.type == "Ready"]
    assert [c.status for c in ready] == ["True"]
    # TaintNodesByCondition's not-ready taint was lifted, or no scheduler would use the node.
    assert node.spec is not None
    assert not node.spec.taints


def test_default_scheduler_binds_a_hugepage_pod(
    control_plane: ControlPlane, default_scheduler: Scheduler, namespace: str, test_label: tuple[str, str]
) -> None:
    node = f"node-{test_label[1]}"
    control_plane.create_node(node, hugepages_2mi="1Gi", labels=dict([test_label]))
    control_plane.create_pod(namespace, "fits", hugepages_2mi="128Mi", node_selector=dict([test_label]))

    assert control_plane.wait_for_pod_bound(namespace, "fits") == node
    assert control_plane.pod_assignments(namespace) == {"fits": node}
    _wait_for_event(control_plane, namespace, "fits", "Scheduled")


def test_default_scheduler_leaves_an_oversized_hugepage_pod_pending(
    control_plane: ControlPlane, default_scheduler: Scheduler, namespace: str, test_label: tuple[str, str]
) -> None:
    control_plane.create_node(f"node-{test_label[1]}", hugepages_2mi="1Gi", labels=dict([test_label]))
    control_plane.create_pod(namespace, "too-big", hugepages_2mi="2Gi", node_selector=dict([test_label]))

    event = _wait_for_event(control_plane, namespace, "too-big", "FailedScheduling")
    assert "Insufficient hugepages-2Mi" in event
    assert control_plane.pod_assignments(namespace) == {"too-big": None}


def test_scheduler_with_an_extender_entry_starts_and_consults_it(
    control_plane: ControlPlane,
    start_extender: StartExtender,
    start_scheduler: StartScheduler,
    namespace: str,
    tmp_path: Path,
) -> None:
    # Natively the roomy node wins (far more free CPU and memory). The extender's snapshot
    # says its hugepage pool is nearly gone, so in enforce mode the pod must go to the other.
    roomy, small = f"roomy-{namespace}", f"small-{namespace}"
    labels = {"e2e.hugepage-extender.io/test": namespace}
    control_plane.create_node(roomy, hugepages_2mi="1Gi", cpu="64", memory="256Gi", labels=labels)
    control_plane.create_node(small, hugepages_2mi="1Gi", cpu="4", memory="8Gi", labels=labels)
    items = []
    for name in (roomy, small):
        node = control_plane.core.read_node(name).model_dump(by_alias=True, mode="json", exclude_none=True)
        if name == roomy:
            node["status"]["allocatable"]["hugepages-2Mi"] = "64Mi"
        items.append(node)
    snapshot = tmp_path / "snapshot.json"
    snapshot.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
    config = tmp_path / "extender.yaml"
    config.write_text(yaml.safe_dump({"defaults": {"mode": "enforce"}}))

    extender = start_extender(["--snapshot", str(snapshot), "--config", str(config)])
    scheduler = start_scheduler(
        extender_scheduler_config(extender.url, scheduler_name="hugepage-scheduler"), name="hugepage-scheduler"
    )
    assert scheduler.healthy()
    assert scheduler.ready()
    assert scheduler.profiles == ["hugepage-scheduler"]
    written = yaml.safe_load((control_plane.workdir / "configs" / "hugepage-scheduler.yaml").read_text())
    assert written["extenders"][0]["urlPrefix"] == extender.url
    assert written["leaderElection"] == {"leaderElect": False}

    for i in range(3):
        control_plane.create_pod(
            namespace, f"hp-{i}", scheduler_name="hugepage-scheduler", hugepages_2mi="256Mi", node_selector=labels
        )
    bound = control_plane.wait_for_pods_bound(namespace, [f"hp-{i}" for i in range(3)])
    assert set(bound.values()) == {small}, bound

    answer = extender.get("/metrics")
    assert answer is not None
    assert answer[0] == 200
    metrics = answer[1].decode()
    assert re.search(r'hugepage_extender_requests_total\{code="200",verb="filter"\} [1-9]', metrics), metrics


def test_a_bad_scheduler_config_fails_fast_with_the_log(control_plane: ControlPlane) -> None:
    # prioritizeVerb with weight 0 is invalid: kube-scheduler exits; the error carries its log.
    config = extender_scheduler_config("http://127.0.0.1:9", weight=0)
    started = time.monotonic()
    with pytest.raises(ControlPlaneError, match="exited") as raised:
        control_plane.start_scheduler(config, name="bad-scheduler", timeout=60)
    assert time.monotonic() - started < 30
    assert "weight" in str(raised.value)


@pytest.mark.parametrize("graceful", [True, False], ids=["sigterm", "sigkill"])
def test_apiserver_restart_keeps_data_and_the_scheduler_recovers(
    control_plane: ControlPlane,
    default_scheduler: Scheduler,
    namespace: str,
    test_label: tuple[str, str],
    graceful: bool,
) -> None:
    node = f"node-{test_label[1]}"
    labels = dict([test_label])
    control_plane.create_node(node, hugepages_2mi="1Gi", labels=labels)
    control_plane.create_pod(namespace, "before", hugepages_2mi="128Mi", node_selector=labels)
    assert control_plane.wait_for_pod_bound(namespace, "before") == node
    port = control_plane.apiserver_port

    started = time.monotonic()
    control_plane.restart_apiserver(graceful=graceful)
    assert time.monotonic() - started < 20, "kube-apiserver took long to stop or start"

    assert control_plane.apiserver_port == port
    assert control_plane.core.read_node(node).metadata is not None
    assert control_plane.pod_assignments(namespace) == {"before": node}
    control_plane.create_pod(namespace, "after", hugepages_2mi="128Mi", node_selector=labels)
    assert control_plane.wait_for_pod_bound(namespace, "after", timeout=180) == node
    assert default_scheduler.running


def test_teardown_leaves_no_processes_or_ports(tools_bin: Path, tmp_path: Path) -> None:
    plane = ControlPlane(tmp_path / "plane", bin_dir=tools_bin)
    try:
        plane.start()
        plane.start_scheduler()
        plane.start_extender(["--example"])
        pids = plane.pids()
        ports = plane.ports
        assert set(pids) == {"etcd", "kube-apiserver", "kube-scheduler", "hugepage-extender"}
        assert all(port_is_open(port) for name, port in ports.items() if name != "etcd-peer")
    finally:
        plane.stop()
    left = subprocess.run(["pgrep", "-af", str(plane.workdir)], capture_output=True, text=True, check=False)
    assert left.stdout == ""
    for pid in pids.values():
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    assert not [name for name, port in ports.items() if port_is_open(port)]
