"""Scenarios on a kind cluster with real kubelets and real hugepages.

Run by e2e/kind/run.sh, which builds the images offline, sizes the host's 2 MiB
hugepage pool, creates the cluster, installs the chart (the secondary scheduler,
each of its pods carrying its own extender on 127.0.0.1) and points
``KIND_E2E_KUBECONFIG`` at it. The topology's own scenarios (failover, the
verbs out of reach) are in test_topology.py. Where
Docker cannot run at all, the whole module is skipped, by name and reason.

kind nodes share the host's kernel: every kubelet reports the host's one pool
as its own ``hugepages-2Mi`` (``KIND_E2E_HUGEPAGES_2M`` pages). Pages taken on
one node are, seen from any other, pages held outside its pods. The placement
scenarios use what only the extender knows, so that a pass proves the extender
decided, not kube-scheduler's own NodeResourcesFit:
  - pages held outside pods (the reserved annotation),
  - memory-backed need (needFromMemory) for pods that request no hugepages,
  - shadow versus enforce per namespace, and flipping one with `helm upgrade`.
The A/B scenario then takes real pages: pods mmap files on an
``emptyDir: {medium: HugePages}`` (and VM-style pods anonymous hugepage memory)
and touch every page, beside pages a host process holds outside any pod; in
``off`` it counts the pods that fail on the node, in ``enforce`` there must be
none.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from e2e.controlplane import wait_until
from extender.core.quantity import to_units
from extender.shell.kube.events import REASON_WAITING_FOR_ROOM

ROOT = Path(__file__).resolve().parents[2]
RELEASE = "hugepage-extender"
NAMESPACE = "hugepage-extender"
SCHEDULER_NAME = "hugepage-scheduler"
RESOURCE = "hugepages-2Mi"
RESERVED = f"hugepage-extender.io/reserved-{RESOURCE}"
PAGE = 2 * 1024 * 1024
MI = 1024 * 1024
# The host's 2 MiB pool, sized by run.sh before the cluster started.
POOL_PAGES = int(os.environ.get("KIND_E2E_HUGEPAGES_2M", "512"))
POOL = f"{POOL_PAGES * 2}Mi"
HOST_POOL = Path("/sys/kernel/mm/hugepages/hugepages-2048kB")
ENFORCE, SHADOW, MEMORY = "hp-enforce", "hp-shadow", "hp-memory"
AB_OFF, AB_ENFORCE = "hp-ab-off", "hp-ab-enforce"
TEST_NAMESPACES = (ENFORCE, SHADOW, MEMORY, AB_OFF, AB_ENFORCE)
PAUSE = "registry.k8s.io/pause:3.10"
# The extender's image has Python: the pods that take real pages run it.
TOUCHER_IMAGE = "hugepage-extender:e2e"
INSUFFICIENT = f"Insufficient {RESOURCE} (pool in use or held by placements in flight)"
# The extender's reasons for a node without room for the pod: its pods and
# placements in flight use the pool, or (where pages held outside pods are
# committed, as with the node agent) what they leave of the pool is too small.
# A pod of an enforcing namespace waits behind the extender's scheduling gate (gates.enabled, the chart's
# default and values.yaml's): the scheduler never tries it, and the extender's WaitingForRoom Event says it
# (extender/shell/kube/events.py, waiting_message).
NO_ROOM = (
    INSUFFICIENT,
    f"Pod's {RESOURCE} request exceeds what pages held outside pods leave of the pool",
    "no node this pod may use",
)
# The events that say why a pod is Pending: the scheduler's, or the extender's for a pod behind its gate.
WAITING_REASONS = ("FailedScheduling", REASON_WAITING_FOR_ROOM)
# Node and pod changes reach the extender through its watch; a few seconds is
# far more than the watch needs and keeps the scenarios deterministic.
WATCH_SETTLE_SECONDS = 5.0


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


if reason := os.environ.get("KIND_E2E_SKIP_REASON"):
    # run.sh --if-possible, where Docker truly cannot run.
    _cannot_run(reason)
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


def pool_of(node: str) -> str | None:
    allocatable: dict[str, str] = get_json("node", node)["status"]["allocatable"]
    return allocatable.get(RESOURCE)


def host_pool() -> dict[str, int]:
    """The host's 2 MiB pool as the kernel counts it (the nodes share it)."""
    return {
        name: int((HOST_POOL / name).read_text())
        for name in ("nr_hugepages", "free_hugepages", "resv_hugepages", "surplus_hugepages")
    }


def pages_in_use() -> int:
    """Pages taken or promised (mapped but not yet touched): total - free + reserved."""
    pool = host_pool()
    return pool["nr_hugepages"] - pool["free_hugepages"] + pool["resv_hugepages"]


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
    # Every kubelet reports the host's one pool as its own.
    nodes = [n["metadata"]["name"] for n in get_json("nodes")["items"]]
    pools = {node: pool_of(node) for node in nodes}
    assert {to_units(p or 0) for p in pools.values()} == {POOL_PAGES * PAGE}, (
        f"expected every node to report the host's {POOL} pool, got {pools}"
    )
    assert host_pool()["nr_hugepages"] == POOL_PAGES, host_pool()
    for namespace in TEST_NAMESPACES:
        kubectl(
            "apply",
            "-f",
            "-",
            stdin=json.dumps({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}),
        )
    set_reserved(dict.fromkeys(names))
    yield names
    for namespace in TEST_NAMESPACES:
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
    """Why the pod is Pending, once an event says it: the scheduler's FailedScheduling message or, for a
    pod behind the extender's scheduling gate (never tried by the scheduler), the extender's WaitingForRoom."""

    def message() -> str:
        events = get_json("events", "-n", namespace, "--field-selector", f"involvedObject.name={name}")["items"]
        return "\n".join(e.get("message", "") for e in events if e.get("reason") in WAITING_REASONS)

    text: str = wait_until(
        f"a FailedScheduling or WaitingForRoom event for {namespace}/{name}", message, timeout=90, interval=1.0
    )
    return text


def assert_stays_pending(namespace: str, name: str, seconds: float = 15.0) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        node = kubectl("get", "pod", name, "-n", namespace, "-o", "jsonpath={.spec.nodeName}").strip()
        assert not node, f"{namespace}/{name} was placed on {node}"
        time.sleep(1.0)


# -- metrics --------------------------------------------------------------------------------


def extender_pods() -> list[str]:
    """The running pods that carry an extender: the secondary scheduler's (its sidecar)."""
    selector = f"app.kubernetes.io/instance={RELEASE},app.kubernetes.io/component=scheduler"
    items = get_json("pods", "-n", NAMESPACE, "-l", selector, "--field-selector=status.phase=Running")["items"]
    return [p["metadata"]["name"] for p in items if p["metadata"].get("deletionTimestamp") is None]


def leader() -> str:
    """The scheduler pod holding the lease (holderIdentity is "<pod name>_<uuid>")."""
    lease = get_json("lease", f"{RELEASE}-scheduler", "-n", NAMESPACE)
    holder: str = lease["spec"].get("holderIdentity") or ""
    return holder.split("_", 1)[0]


def metric(pod: str, name: str, **labels: str) -> float:
    """One extender's metric, read on its plain-HTTP probe port via the API server proxy."""
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


def shadow_rejections() -> float:
    """Nodes shadow mode would have rejected, for either reason (no room now, or never)."""
    name = "hugepage_extender_fit_rejected_nodes_total"
    return sum(metric_sum(name, mode="shadow", reason=reason) for reason in ("insufficient", "exceeds_pool"))


def says_no_room(message: str) -> bool:
    return any(reason in message for reason in NO_ROOM)


# -- scenarios ------------------------------------------------------------------------------


def test_every_schedulers_extender_is_synced() -> None:
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
    assert says_no_room(message), message
    assert_stays_pending(ENFORCE, "no-room")


def test_shadow_places_the_pod_and_counts_the_would_be_rejections(
    workers: list[str], pods: list[tuple[str, str]]
) -> None:
    set_reserved(dict.fromkeys(workers, POOL))
    before = shadow_rejections()
    create_pod(pods, SHADOW, "shadowed", hugepages="512Mi")
    assert node_of(SHADOW, "shadowed") in workers
    after = shadow_rejections()
    assert after - before == len(workers)


def test_memory_backed_need_counts_against_the_pool(workers: list[str], pods: list[tuple[str, str]]) -> None:
    # A VM-style pod: 512Mi of memory, no hugepage request. kube-scheduler sees
    # no hugepage need at all; the hp-memory namespace's needFromMemory makes the
    # extender count the memory against the pool (w1 and w2 have 256Mi left).
    w1, w2, w3 = workers
    set_reserved({w1: "768Mi", w2: "768Mi", w3: None})
    create_pod(pods, MEMORY, "vm-guest", memory="512Mi")
    assert node_of(MEMORY, "vm-guest") == w3


def test_only_the_leaders_own_extender_is_called(workers: list[str], pods: list[tuple[str, str]]) -> None:
    set_reserved(dict.fromkeys(workers))
    create_pod(pods, ENFORCE, "leader-probe", hugepages="256Mi")
    node_of(ENFORCE, "leader-probe")
    calls = {pod: metric(pod, "hugepage_extender_requests_total", verb="filter", code="200") for pod in extender_pods()}
    # The scheduler holding the lease calls the extender in its own pod on 127.0.0.1;
    # the other replica's extender is synced but idle, so holds are never split.
    holder = leader()
    assert calls[holder] > 0.0, (holder, calls)
    assert all(count == 0.0 for pod, count in calls.items() if pod != holder), (holder, calls)
    # The bind verb (values.yaml, the chart's default with the secondary scheduler): the
    # extender that filtered the pods binds them, and none refused one it had not filtered.
    assert metric(holder, "hugepage_extender_binds_total", result="bound") > 0.0
    for pod in calls:
        assert metric(pod, "hugepage_extender_binds_total", result="refused") == 0.0, pod


def test_flip_shadow_namespace_to_enforce_with_one_value(workers: list[str], pods: list[tuple[str, str]]) -> None:
    def template_checksum(key: str) -> str:
        deployment = get_json("deployment", f"{RELEASE}-scheduler", "-n", NAMESPACE)
        annotations: dict[str, str] = deployment["spec"]["template"]["metadata"]["annotations"]
        return annotations[key]

    scheduler_checksum = template_checksum("checksum/config")
    extender_checksum = template_checksum("checksum/extender-config")
    before = set(extender_pods())
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
        stdout=subprocess.DEVNULL,  # the release notes; errors go to stderr
    )
    kubectl("rollout", "status", f"deployment/{RELEASE}-scheduler", "-n", NAMESPACE, "--timeout=180s")
    # The extender's config changed, the scheduler's did not. The extenders ride in the
    # scheduler's pods, so those roll (a new pod's scheduler starts once its extender is
    # synced; the lease moves to a new pod), one at a time.
    assert template_checksum("checksum/config") == scheduler_checksum
    assert template_checksum("checksum/extender-config") != extender_checksum
    wait_until(
        "two new scheduler pods, one holding the lease",
        lambda: len(after := set(extender_pods())) == 2 and not after & before and leader() in after,
        timeout=120,
        interval=1.0,
    )
    time.sleep(WATCH_SETTLE_SECONDS)
    set_reserved(dict.fromkeys(workers, POOL))
    create_pod(pods, SHADOW, "now-enforced", hugepages="512Mi")
    message = failed_scheduling(SHADOW, "now-enforced")
    assert says_no_room(message), message
    assert_stays_pending(SHADOW, "now-enforced")


# -- real pages ------------------------------------------------------------------------------

# Run in each A/B pod by the image's Python. "file": a file on the pod's
# HugePages emptyDir, mapped shared (`dd` into hugetlbfs fails: only mmap
# works); "anon": anonymous hugepage memory, as a VM's guest RAM. Every 2 MiB
# page is touched, so the kernel really hands them out; then the pod holds them.
TOUCHER = """
import mmap, os, sys, time
size, kind = int(sys.argv[1]), sys.argv[2]
if kind == "file":
    fd = os.open("/hugepages/guest", os.O_CREAT | os.O_RDWR, 0o600)
    os.ftruncate(fd, size)
    m = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
else:
    m = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | 0x40000)
for offset in range(0, size, 2 << 20):
    m[offset] = 1
open("/run/touched", "w").close()
print(f"touched {size >> 21} pages ({kind})", flush=True)
while True:
    time.sleep(3600)
"""

# Run on the host: pages held outside any pod (a VM or DPDK started by a node
# agent), anonymous and touched, until its stdin closes.
HOLDER = """
import mmap, sys
size = int(sys.argv[1])
m = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | 0x40000)
for offset in range(0, size, 2 << 20):
    m[offset] = 1
print("held", flush=True)
sys.stdin.read()
"""


@contextlib.contextmanager
def pages_held_on_the_host(pages: int) -> Iterator[None]:
    before = pages_in_use()
    with subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(pages * PAGE)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    ) as holder:
        assert holder.stdin is not None
        assert holder.stdout is not None
        try:
            assert holder.stdout.readline().strip() == "held", "the host process could not take its hugepages"
            assert pages_in_use() - before >= pages
            yield
        finally:
            holder.stdin.close()
            try:
                holder.wait(timeout=30)
            except subprocess.TimeoutExpired:
                holder.kill()
                holder.wait()


def toucher_pod(namespace: str, name: str, node: str, *, hugepage_bytes: int = 0, vm_bytes: int = 0) -> dict[str, Any]:
    """A pod that takes real pages: `hugepage_bytes` through its HugePages emptyDir
    (requested as hugepages-2Mi), or `vm_bytes` of anonymous hugepage memory
    requested only as memory (a VM-style pod: needFromMemory counts it)."""
    if hugepage_bytes:
        memory = 48 * MI
        resources = {
            "requests": {"cpu": "10m", "memory": str(memory), RESOURCE: str(hugepage_bytes)},
            "limits": {"memory": str(memory), RESOURCE: str(hugepage_bytes)},
        }
        args = [str(hugepage_bytes), "file"]
        volumes = [{"name": "hugepages", "emptyDir": {"medium": "HugePages"}}]
        mounts = [{"name": "hugepages", "mountPath": "/hugepages"}]
    else:
        resources = {"requests": {"cpu": "10m", "memory": str(vm_bytes)}, "limits": {"memory": str(vm_bytes)}}
        args, volumes, mounts = [str(vm_bytes), "anon"], [], []
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": {"app": "hugepage-e2e-ab"}},
        "spec": {
            "schedulerName": SCHEDULER_NAME,
            "nodeSelector": {"kubernetes.io/hostname": node},
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 0,
            "volumes": volumes,
            "containers": [
                {
                    "name": "guest",
                    "image": TOUCHER_IMAGE,
                    "imagePullPolicy": "Never",
                    "command": ["python", "-c", TOUCHER, *args],
                    "securityContext": {"runAsUser": 0},
                    "resources": resources,
                    "volumeMounts": mounts,
                    "readinessProbe": {"exec": {"command": ["test", "-e", "/run/touched"]}, "periodSeconds": 1},
                }
            ],
        },
    }


def failure_on_the_node(pod: dict[str, Any]) -> str | None:
    """Why a bound pod failed on its node (kubelet admission such as
    OutOfhugepages, a container that could not start or exited), or None."""
    status = pod.get("status", {})
    if status.get("phase") == "Failed":
        reason = status.get("reason") or ""
        for container in status.get("containerStatuses", []):
            terminated = container.get("state", {}).get("terminated") or {}
            if terminated:
                reason = reason or f"{terminated.get('reason')} (exit {terminated.get('exitCode')})"
        return reason or "Failed"
    for container in status.get("containerStatuses", []):
        state = container.get("state", {})
        waiting = str((state.get("waiting") or {}).get("reason", ""))
        if waiting and waiting not in ("ContainerCreating", "PodInitializing"):
            return waiting
        terminated = state.get("terminated") or {}
        if terminated and terminated.get("exitCode", 0) != 0:
            return f"{terminated.get('reason')} (exit {terminated.get('exitCode')})"
        if container.get("restartCount", 0):
            return "restarted"
    return None


def is_ready(pod: dict[str, Any]) -> bool:
    conditions = pod.get("status", {}).get("conditions", [])
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def scheduling_messages(namespace: str) -> dict[str, str]:
    """Why each Pending pod of the namespace waits, by name: FailedScheduling or WaitingForRoom messages."""
    events = [e for e in get_json("events", "-n", namespace)["items"] if e.get("reason") in WAITING_REASONS]
    messages: dict[str, str] = {}
    for event in events:
        name = event["involvedObject"]["name"]
        messages[name] = messages.get(name, "") + event.get("message", "")
    return messages


def settled(namespace: str, names: list[str]) -> dict[str, dict[str, Any]] | None:
    """The pods, once each is bound and ready, bound and failed, or unbound with a
    FailedScheduling or WaitingForRoom event; None before."""
    pods = {p["metadata"]["name"]: p for p in get_json("pods", "-n", namespace)["items"]}
    messages = scheduling_messages(namespace)
    for name in names:
        pod = pods.get(name)
        if pod is None:
            return None
        if pod["spec"].get("nodeName"):
            if not is_ready(pod) and failure_on_the_node(pod) is None:
                return None
        elif name not in messages:
            return None
    return pods


def settle(namespace: str, names: list[str], timeout: float = 240.0) -> dict[str, dict[str, Any]]:
    """Wait until the pods have settled (``settled``); the pods then."""
    result: dict[str, dict[str, Any]] = wait_until(
        f"the pods in {namespace} to settle", lambda: settled(namespace, names), timeout=timeout
    )
    return result


def delete_pods(namespace: str, selector: str) -> None:
    kubectl("delete", "pods", "-n", namespace, "-l", selector, "--grace-period=0", "--force", "--wait=true")


def burst_on_one_node(namespace: str, node: str, unit_pages: int) -> dict[str, Any]:
    """The A/B burst on one worker: 12 hugepage pods and 6 VM-style pods, one
    unit of pages each (18 units, more than the 16-unit pool); the counts."""
    pods = []
    for i in range(18):
        if i % 3 == 2:
            pods.append(toucher_pod(namespace, f"vm-{i:02d}", node, vm_bytes=unit_pages * PAGE))
        else:
            pods.append(toucher_pod(namespace, f"hp-{i:02d}", node, hugepage_bytes=unit_pages * PAGE))
    names = [p["metadata"]["name"] for p in pods]
    kubectl("apply", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": pods}))
    result = settle(namespace, names)
    messages = scheduling_messages(namespace)
    placed = [n for n in names if result[n]["spec"].get("nodeName")]
    failed = {n: why for n in placed if (why := failure_on_the_node(result[n])) is not None}
    pending = {n: messages.get(n, "") for n in names if n not in placed}
    return {"pods": len(names), "placed": placed, "failed": failed, "pending": pending}


def pages_back_to(in_use: int) -> None:
    wait_until(
        "the deleted pods' pages to go back to the pool", lambda: pages_in_use() == in_use, timeout=120, interval=1.0
    )


def test_ab_pods_needing_hugepages_do_not_fail_on_the_node(workers: list[str]) -> None:
    # One worker, so that the reserved annotation read from the host's counters
    # is exact (with a shared pool, every other node's pods are outside pages
    # too: the node agent's job). Pool = 16 units; the host holds 4 outside
    # any pod; the burst asks for 18 (12 hugepage pods, 6 VM-style pods).
    w1 = workers[0]
    unit = POOL_PAGES // 16
    assert unit >= 1, f"the pool ({POOL_PAGES} pages) is too small for the A/B"
    assert pages_in_use() == 0, f"pages in use before the A/B: {host_pool()}"
    counts: dict[str, dict[str, Any]] = {}
    with pages_held_on_the_host(4 * unit):
        for namespace in (AB_OFF, AB_ENFORCE):
            outside = pages_in_use()
            set_reserved({w1: f"{outside * 2}Mi"})
            counts[namespace] = result = burst_on_one_node(namespace, w1, unit)
            in_use = pages_in_use()
            print(
                f"\nA/B {namespace}: {result['pods']} pods, {len(result['placed'])} placed on {w1}, "
                f"{len(result['failed'])} failed on the node, {len(result['pending'])} pending; "
                f"host pool {host_pool()}, {outside} pages held outside pods"
            )
            for name, why in sorted(result["failed"].items()):
                print(f"  failed  {namespace}/{name}: {why}")
            for name, why in sorted(result["pending"].items()):
                print(f"  pending {namespace}/{name}: {why.splitlines()[0] if why else ''}")
            assert in_use <= POOL_PAGES
            delete_pods(namespace, "app=hugepage-e2e-ab")
            pages_back_to(outside)
    set_reserved({w1: None})
    off, enforce = counts[AB_OFF], counts[AB_ENFORCE]
    summary = (
        f"A/B on real hugepages ({POOL_PAGES} x 2Mi pool, {4 * unit} pages held outside pods, "
        f"burst of {off['pods']} pods x {unit} pages): "
        f"off: {len(off['failed'])} of {off['pods']} pods failed on the node; "
        f"enforce: {len(enforce['failed'])} failed, {len(enforce['pending'])} pending with a reason"
    )
    print("\n" + summary)
    if artifacts := os.environ.get("KIND_E2E_ARTIFACTS"):
        Path(artifacts, "ab-counts.txt").write_text(summary + "\n")
    # off: kube-scheduler alone sees a whole pool on the node and places the lot;
    # the kernel has 12 units for 18.
    assert len(off["failed"]) > 0, off
    # enforce: nothing fails on the node; what does not fit waits, saying why.
    assert enforce["failed"] == {}, enforce
    assert len(enforce["placed"]) == 12, enforce
    assert enforce["pending"], enforce
    for name, message in enforce["pending"].items():
        assert says_no_room(message), (name, message)


# -- the node agent ----------------------------------------------------------------------------

REPORTS = "hugepagenodereports.hugepage-extender.io"


def helm_upgrade(*settings: str) -> None:
    chart = str(ROOT / "charts" / "hugepage-extender")
    sets = [f"--set={s}" for s in settings]
    command = [HELM, "upgrade", RELEASE, chart, "--kubeconfig", KUBECONFIG, "--namespace", NAMESPACE]
    subprocess.run(
        [*command, "--reuse-values", *sets, "--wait", "--timeout", "5m"],
        check=True,
        stdout=subprocess.DEVNULL,  # the release notes; errors go to stderr
    )


def outside_pages(node: str) -> int | None:
    """Pages held outside pods in the node agent's record of the node, once there is one."""
    record = json.loads(kubectl("get", REPORTS, node, "-o", "json", "--ignore-not-found") or "null")
    if not record:
        return None
    size = record["report"]["pageSizes"].get(RESOURCE, {})
    value = size.get("outsidePages")
    return int(value) if value is not None else None


def test_node_agent_reports_pages_held_outside_pods_and_enforce_holds(workers: list[str]) -> None:
    # The agent's DaemonSet on every node reads the kernel's counters and the
    # pods' HugePages emptyDirs. The nodes share the host's pool, so for each
    # node the pages outside its pods are the host process's and every other
    # node's pods'. No reserved annotation: the records alone tell the extender.
    w1, w2 = workers[0], workers[1]
    set_reserved(dict.fromkeys(workers))
    unit = POOL_PAGES // 16
    assert pages_in_use() == 0, f"pages in use before the scenario: {host_pool()}"
    helm_upgrade("nodeAgent.enabled=true")
    kubectl("rollout", "status", f"daemonset/{RELEASE}-node-agent", "-n", NAMESPACE, "--timeout=180s")
    try:
        with pages_held_on_the_host(4 * unit):
            other = toucher_pod(AB_ENFORCE, "on-w2", w2, hugepage_bytes=2 * unit * PAGE)
            other["metadata"]["labels"]["app"] = "hugepage-e2e-agent"
            kubectl("apply", "-f", "-", stdin=json.dumps(other))
            settle(AB_ENFORCE, ["on-w2"])

            def records() -> tuple[int | None, int | None] | None:
                seen = (outside_pages(w1), outside_pages(w2))
                return seen if seen == (6 * unit, 4 * unit) else None

            try:
                wait_until("the node agents' records", records, timeout=120, interval=1.0)
            finally:
                print(f"\nnode agent records, pages outside pods: {w1}: {outside_pages(w1)}, {w2}: {outside_pages(w2)}")
            # Enforce on the records: 16 units, 6 outside w1's pods, 12 pods of one unit.
            pods = [toucher_pod(AB_ENFORCE, f"agent-{i:02d}", w1, hugepage_bytes=unit * PAGE) for i in range(12)]
            for pod in pods:
                pod["metadata"]["labels"]["app"] = "hugepage-e2e-agent"
            names = [p["metadata"]["name"] for p in pods]
            kubectl("apply", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": pods}))

            def ten_placed_or_one_failed() -> dict[str, dict[str, Any]] | None:
                # A record read while a pod takes its pages may count them twice until the
                # next read (the agent errs high, never low): a pod turned away then waits
                # for the scheduler's next try, at the latest its 5-minute flush.
                pods = settled(AB_ENFORCE, names)
                if pods is None:
                    return None
                placed = [p for p in pods.values() if p["spec"].get("nodeName")]
                done = len(placed) >= 10 or any(failure_on_the_node(p) is not None for p in placed)
                return pods if done else None

            result = wait_until(
                "10 pods placed on the records, or one failed", ten_placed_or_one_failed, timeout=360, interval=1.0
            )
            messages = scheduling_messages(AB_ENFORCE)
            placed = [n for n in names if result[n]["spec"].get("nodeName")]
            failed = {n: why for n in placed if (why := failure_on_the_node(result[n])) is not None}
            pending = [n for n in names if n not in placed]
            print(
                f"node agent, enforce on {w1}: {len(names)} pods, {len(placed)} placed, "
                f"{len(failed)} failed on the node, {len(pending)} pending"
            )
            assert failed == {}, failed
            assert len(placed) == 10, placed
            for name in pending:
                assert says_no_room(messages.get(name, "")), (name, messages.get(name))
            delete_pods(AB_ENFORCE, "app=hugepage-e2e-agent")
            pages_back_to(4 * unit)
    finally:
        delete_pods(AB_ENFORCE, "app=hugepage-e2e-agent")
        helm_upgrade("nodeAgent.enabled=false")


# -- helm ------------------------------------------------------------------------------------


def test_helm_uninstall_leaves_nothing_behind() -> None:
    # Last: the release goes. What it created goes with it; what remains in
    # the namespace is what Kubernetes itself puts in every namespace, and the
    # Leases the scheduler took for leader election at run time.
    subprocess.run(
        [HELM, "uninstall", RELEASE, "--kubeconfig", KUBECONFIG, "--namespace", NAMESPACE, "--wait", "--timeout", "3m"],
        check=True,
    )
    resources = ",".join(kubectl("api-resources", "--verbs=list,delete", "-o", "name").split())
    selector = f"app.kubernetes.io/instance={RELEASE}"

    def labelled() -> list[str]:
        return kubectl("get", resources, "-A", "-l", selector, "-o", "name", "--ignore-not-found").split()

    # `helm uninstall --wait` waits for what it deleted; the pods those owned
    # go a little later (garbage collection, grace period).
    try:
        wait_until("nothing labelled with the release", lambda: not labelled(), timeout=120, interval=1.0)
    except AssertionError:
        raise AssertionError(f"left behind by helm uninstall: {labelled()}") from None
    namespaced = kubectl("api-resources", "--verbs=list,delete", "--namespaced=true", "-o", "name").split()
    left = kubectl("get", ",".join(namespaced), "-n", NAMESPACE, "-o", "name", "--ignore-not-found").split()
    expected = {"configmap/kube-root-ca.crt", "serviceaccount/default"}
    unexpected = [o for o in left if o not in expected and not o.startswith(("event", "lease"))]
    print(f"\nleft in {NAMESPACE} after helm uninstall, events aside: {[o for o in left if not o.startswith('event')]}")
    assert unexpected == [], f"left behind in {NAMESPACE} by helm uninstall: {unexpected}"

    # The node agents' records are owned by the agents' admission policy, which the release deleted:
    # the garbage collector takes them (the CRD stays: helm never deletes crds/). A record left
    # behind would go on counting pages outside pods, for a later install, until it went stale.
    def records() -> list[str]:
        return kubectl("get", REPORTS, "-o", "name", "--ignore-not-found", check=False).split()

    try:
        wait_until("the node agents' records to be collected", lambda: not records(), timeout=120, interval=1.0)
    except AssertionError:
        raise AssertionError(f"node agent records left after helm uninstall: {records()}") from None
    wait_until(
        "the extender and scheduler pods to be gone",
        lambda: not get_json("pods", "-n", NAMESPACE)["items"],
        timeout=120,
        interval=1.0,
    )
