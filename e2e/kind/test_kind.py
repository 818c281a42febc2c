"""Placement scenarios on a kind cluster, through the chart's secondary scheduler.

Run by e2e/kind/run.sh, which builds the image, creates the cluster, installs
the chart (HTTPS + client certificates) and points ``KIND_E2E_KUBECONFIG`` at
it. Without a Docker engine the whole module is skipped, by name and reason.

kind nodes have no hugepages: each worker gets a fake 1Gi hugepages-2Mi pool by
patching its Node status (the kubelet leaves it alone, see cluster.yaml). The
scenarios then use what only the extender knows, so that a pass proves the
extender decided, not kube-scheduler's own NodeResourcesFit:
  - pages held outside pods (the reserved annotation),
  - memory-backed need (needFromMemory) for pods that request no hugepages,
  - shadow versus enforce per namespace, and flipping one with `helm upgrade`.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from e2e.controlplane import wait_until

ROOT = Path(__file__).resolve().parents[2]
RELEASE = "hugepage-extender"
NAMESPACE = "hugepage-extender"
SCHEDULER_NAME = "hugepage-scheduler"
RESOURCE = "hugepages-2Mi"
RESERVED = f"hugepage-extender.io/reserved-{RESOURCE}"
POOL = "1Gi"
ENFORCE, SHADOW, MEMORY = "hp-enforce", "hp-shadow", "hp-memory"
PAUSE = "registry.k8s.io/pause:3.10"
# Node and pod changes reach the extender through its watch; a few seconds is
# far more than the watch needs and keeps the scenarios deterministic.
WATCH_SETTLE_SECONDS = 5.0
# The kubelet posts node status every 10 s (nodeStatusUpdateFrequency); after
# two rounds a patched pool that the kubelet would overwrite is gone.
KUBELET_ROUNDS_SECONDS = 25.0


def _cannot_run(reason: str) -> None:
    # run.sh sets KIND_E2E_REQUIRED: there, a suite that cannot run is a failure.
    if os.environ.get("KIND_E2E_REQUIRED") == "1":
        pytest.fail(reason, pytrace=False)
    pytest.skip(reason, allow_module_level=True)


def _docker_problem() -> str | None:
    docker = shutil.which("docker")
    if docker is None:
        return "no docker command on PATH"
    try:
        result = subprocess.run([docker, "info"], capture_output=True, text=True, timeout=30, check=False)
    except subprocess.TimeoutExpired:
        return "'docker info' timed out"
    if result.returncode != 0:
        detail = (result.stderr.strip().splitlines() or ["no output"])[-1]
        return f"'docker info' failed ({detail})"
    return None


if (problem := _docker_problem()) is not None:
    _cannot_run(f"kind e2e needs a Docker engine: {problem}")
if not os.environ.get("KIND_E2E_KUBECONFIG"):
    _cannot_run(
        "kind e2e needs the cluster e2e/kind/run.sh creates: KIND_E2E_KUBECONFIG is not set (run e2e/kind/run.sh)"
    )

KUBECONFIG = os.environ.get("KIND_E2E_KUBECONFIG", "")
KUBECTL = os.environ.get("KUBECTL", "kubectl")
HELM = os.environ.get("HELM", "helm")


# -- kubectl --------------------------------------------------------------------------


def kubectl(*args: str, stdin: str | None = None, check: bool = True) -> str:
    result = subprocess.run(
        [KUBECTL, "--kubeconfig", KUBECONFIG, *args], input=stdin, capture_output=True, text=True, check=False
    )
    if check and result.returncode != 0:
        raise AssertionError(f"kubectl {' '.join(args)} failed: {result.stderr.strip()}")
    return result.stdout


def get_json(*args: str) -> Any:
    return json.loads(kubectl("get", *args, "-o", "json"))


# -- cluster setup ------------------------------------------------------------------------


def worker_names() -> list[str]:
    nodes = get_json("nodes", "-l", "hugepage-e2e/worker")["items"]
    ordered = sorted(nodes, key=lambda n: n["metadata"]["labels"]["hugepage-e2e/worker"])
    return [n["metadata"]["name"] for n in ordered]


def set_pool(node: str, quantity: str) -> None:
    """A fake hugepage pool: capacity and allocatable, through the status subresource."""
    patch = {"status": {"capacity": {RESOURCE: quantity}, "allocatable": {RESOURCE: quantity}}}
    kubectl("patch", "node", node, "--subresource=status", "--type=merge", "-p", json.dumps(patch))


def pool_of(node: str) -> str | None:
    allocatable: dict[str, str] = get_json("node", node)["status"]["allocatable"]
    return allocatable.get(RESOURCE)


def set_reserved(reserved: dict[str, str | None]) -> None:
    """Pages each node holds outside pods (VMs, DPDK); None removes the annotation."""
    for node, quantity in reserved.items():
        value = f"{RESERVED}-" if quantity is None else f"{RESERVED}={quantity}"
        kubectl("annotate", "node", node, value, "--overwrite")
    time.sleep(WATCH_SETTLE_SECONDS)


@pytest.fixture(scope="module")
def workers() -> Iterator[list[str]]:
    names = worker_names()
    assert len(names) == 3, f"expected the three workers of e2e/kind/cluster.yaml, found {names}"
    for name in names:
        set_pool(name, POOL)
    time.sleep(KUBELET_ROUNDS_SECONDS)
    for name in names:
        assert pool_of(name) == POOL, (
            f"the kubelet on {name} reset its {RESOURCE} pool to {pool_of(name)!r}: the empty "
            "/sys/kernel/mm/hugepages mount of e2e/kind/cluster.yaml did not take effect"
        )
    for namespace in (ENFORCE, SHADOW, MEMORY):
        kubectl(
            "apply",
            "-f",
            "-",
            stdin=json.dumps({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}),
        )
    set_reserved(dict.fromkeys(names))
    yield names
    for namespace in (ENFORCE, SHADOW, MEMORY):
        kubectl("delete", "namespace", namespace, "--wait=false", check=False)
    set_reserved(dict.fromkeys(names))


@pytest.fixture
def pods() -> Iterator[list[tuple[str, str]]]:
    """Pods a test creates, deleted afterwards so the next test starts from empty pools."""
    created: list[tuple[str, str]] = []
    yield created
    for namespace, name in created:
        kubectl("delete", "pod", name, "-n", namespace, "--grace-period=0", "--force", "--wait=true", check=False)
    time.sleep(WATCH_SETTLE_SECONDS)


def create_pod(
    created: list[tuple[str, str]],
    namespace: str,
    name: str,
    *,
    hugepages: str | None = None,
    memory: str = "16Mi",
) -> None:
    requests = {"cpu": "10m", "memory": memory}
    limits = {"memory": memory}
    if hugepages is not None:
        # Hugepage requests must equal their limits.
        requests[RESOURCE] = hugepages
        limits[RESOURCE] = hugepages
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": {"app": "hugepage-e2e"}},
        "spec": {
            "schedulerName": SCHEDULER_NAME,
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "main", "image": PAUSE, "resources": {"requests": requests, "limits": limits}}],
        },
    }
    kubectl("apply", "-f", "-", stdin=json.dumps(pod))
    created.append((namespace, name))


def node_of(namespace: str, name: str, timeout: float = 90.0) -> str:
    def bound() -> str:
        return kubectl("get", "pod", name, "-n", namespace, "-o", "jsonpath={.spec.nodeName}").strip()

    node: str = wait_until(f"{namespace}/{name} to be scheduled", bound, timeout=timeout, interval=1.0)
    return node


def failed_scheduling(namespace: str, name: str) -> str:
    """The scheduler's FailedScheduling message for the pod, once there is one."""

    def message() -> str:
        events = get_json(
            "events", "-n", namespace, "--field-selector", f"involvedObject.name={name},reason=FailedScheduling"
        )["items"]
        return "\n".join(e.get("message", "") for e in events)

    text: str = wait_until(f"a FailedScheduling event for {namespace}/{name}", message, timeout=90, interval=1.0)
    return text


def assert_stays_pending(namespace: str, name: str, seconds: float = 15.0) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        node = kubectl("get", "pod", name, "-n", namespace, "-o", "jsonpath={.spec.nodeName}").strip()
        assert not node, f"{namespace}/{name} was placed on {node}"
        time.sleep(1.0)


# -- metrics --------------------------------------------------------------------------------


def extender_pods() -> list[str]:
    selector = "app.kubernetes.io/instance=hugepage-extender,app.kubernetes.io/component=extender"
    items = get_json("pods", "-n", NAMESPACE, "-l", selector, "--field-selector=status.phase=Running")["items"]
    return [p["metadata"]["name"] for p in items]


def metric(pod: str, name: str, **labels: str) -> float:
    """One extender replica's metric, read on its plain-HTTP probe port via the API server proxy."""
    text = kubectl("get", "--raw", f"/api/v1/namespaces/{NAMESPACE}/pods/{pod}:8081/proxy/metrics")
    total = 0.0
    for line in text.splitlines():
        match = re.fullmatch(r"([a-z_]+)(?:\{(.*)\})? (\S+)", line)
        if match is None or match[1] != name:
            continue
        found = dict(re.findall(r'(\w+)="([^"]*)"', match[2] or ""))
        if all(found.get(k) == v for k, v in labels.items()):
            total += float(match[3])
    return total


def metric_sum(name: str, **labels: str) -> float:
    return sum(metric(pod, name, **labels) for pod in extender_pods())


# -- scenarios ------------------------------------------------------------------------------


def test_extender_replicas_are_synced() -> None:
    replicas = extender_pods()
    assert len(replicas) == 2
    nodes = len(get_json("nodes")["items"])
    for pod in replicas:
        assert metric(pod, "hugepage_extender_ready") == 1.0
        assert metric(pod, "hugepage_extender_cached_nodes") == nodes


def test_enforce_avoids_pools_held_outside_pods(workers: list[str], pods: list[tuple[str, str]]) -> None:
    # Every pool is 1Gi and no pod uses any, so kube-scheduler's NodeResourcesFit
    # admits all three workers. Only the extender knows the first two hold their
    # whole pool outside pods.
    w1, w2, w3 = workers
    set_reserved({w1: POOL, w2: POOL, w3: None})
    create_pod(pods, ENFORCE, "fits-only-w3", hugepages="512Mi")
    assert node_of(ENFORCE, "fits-only-w3") == w3


def test_enforce_leaves_the_pod_pending_when_no_pool_has_room(workers: list[str], pods: list[tuple[str, str]]) -> None:
    set_reserved(dict.fromkeys(workers, POOL))
    create_pod(pods, ENFORCE, "no-room", hugepages="512Mi")
    message = failed_scheduling(ENFORCE, "no-room")
    # The extender's constant reason, aggregated by the scheduler over the workers.
    assert f"Insufficient {RESOURCE} (pool in use or held by placements in flight)" in message
    assert_stays_pending(ENFORCE, "no-room")


def test_shadow_places_the_pod_and_counts_the_would_be_rejections(
    workers: list[str], pods: list[tuple[str, str]]
) -> None:
    set_reserved(dict.fromkeys(workers, POOL))
    before = metric_sum("hugepage_extender_fit_rejected_nodes_total", mode="shadow", reason="insufficient")
    create_pod(pods, SHADOW, "shadowed", hugepages="512Mi")
    assert node_of(SHADOW, "shadowed") in workers
    after = metric_sum("hugepage_extender_fit_rejected_nodes_total", mode="shadow", reason="insufficient")
    assert after - before == len(workers)


def test_memory_backed_need_counts_against_the_pool(workers: list[str], pods: list[tuple[str, str]]) -> None:
    # A VM-style pod: 512Mi of memory, no hugepage request. kube-scheduler sees
    # no hugepage need at all; the hp-memory namespace's needFromMemory makes the
    # extender count the memory against the pool (w1 and w2 have 256Mi left).
    w1, w2, w3 = workers
    set_reserved({w1: "768Mi", w2: "768Mi", w3: None})
    create_pod(pods, MEMORY, "vm-guest", memory="512Mi")
    assert node_of(MEMORY, "vm-guest") == w3


def test_one_scheduler_reaches_one_replica(workers: list[str], pods: list[tuple[str, str]]) -> None:
    set_reserved(dict.fromkeys(workers))
    create_pod(pods, ENFORCE, "affinity-probe", hugepages="256Mi")
    node_of(ENFORCE, "affinity-probe")
    calls = {pod: metric(pod, "hugepage_extender_requests_total", verb="filter", code="200") for pod in extender_pods()}
    # Service sessionAffinity ClientIP: the leader scheduler's calls all land on
    # one replica, so in-flight placements are never split between replicas.
    assert sorted(calls.values())[0] == 0.0, calls
    assert sorted(calls.values())[1] > 0.0, calls


def test_flip_shadow_namespace_to_enforce_with_one_value(workers: list[str], pods: list[tuple[str, str]]) -> None:
    def secret(name: str) -> str:
        data: dict[str, str] = get_json("secret", name, "-n", NAMESPACE)["data"]
        return data["tls.crt"]

    def scheduler_template_hash() -> str:
        deployment = get_json("deployment", f"{RELEASE}-scheduler", "-n", NAMESPACE)
        annotations: dict[str, str] = deployment["spec"]["template"]["metadata"]["annotations"]
        return annotations["checksum/config"]

    server_cert, client_cert = secret(f"{RELEASE}-tls"), secret(f"{RELEASE}-client-tls")
    scheduler_checksum = scheduler_template_hash()
    subprocess.run(
        [
            HELM,
            "upgrade",
            RELEASE,
            str(ROOT / "charts" / "hugepage-extender"),
            "--kubeconfig",
            KUBECONFIG,
            "--namespace",
            NAMESPACE,
            "--reuse-values",
            "--set",
            f"config.namespaces.{SHADOW}.mode=enforce",
            "--wait",
            "--timeout",
            "5m",
        ],
        check=True,
    )
    kubectl("rollout", "status", f"deployment/{RELEASE}", "-n", NAMESPACE, "--timeout=180s")
    # The generated certificates survive the upgrade (read back with lookup),
    # and the scheduler, whose config did not change, was not restarted.
    assert secret(f"{RELEASE}-tls") == server_cert
    assert secret(f"{RELEASE}-client-tls") == client_cert
    assert scheduler_template_hash() == scheduler_checksum
    wait_until("two ready extender replicas", lambda: len(extender_pods()) == 2, timeout=90, interval=1.0)
    time.sleep(WATCH_SETTLE_SECONDS)
    set_reserved(dict.fromkeys(workers, POOL))
    create_pod(pods, SHADOW, "now-enforced", hugepages="512Mi")
    assert f"Insufficient {RESOURCE}" in failed_scheduling(SHADOW, "now-enforced")
    assert_stays_pending(SHADOW, "now-enforced")
