"""The cluster's own kube-scheduler through the extender DaemonSet on loopback (kubeadm's path).

run.sh created the cluster with the control plane's static kube-scheduler started
through kubeadm's scheduler ``extraArgs``/``extraVolumes`` with the chart's own-mode
configuration (e2e/kind/values-own.yaml rendered: ``urlPrefix:
http://127.0.0.1:8888``, ignorable), as docs/install.md tells kind and kubeadm
users. These scenarios run last, after the secondary-mode release is uninstalled
(conftest.py), install the chart with ``scheduler.mode=own`` (the extender as a
DaemonSet on the control-plane node, host network, 127.0.0.1) and show the
cluster's own scheduler placing pods through it.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pytest

from e2e.controlplane import wait_until
from e2e.kind.bystanders import (
    Bystanders,
    doc_blocks,
    make_namespaces,
    markers,
    nothing_stranded,
    pod_container,
    run_block,
    wait_nothing_stranded,
    wait_served_markers,
)
from e2e.kind.test_kind import (
    HELM,
    KUBECONFIG,
    NAMESPACE,
    PAUSE,
    POOL,
    RELEASE,
    REPORTS,
    RESOURCE,
    ROOT,
    TOUCHER_IMAGE,
    WATCH_SETTLE_SECONDS,
    assert_stays_pending,
    failed_scheduling,
    get_json,
    helm_upgrade,
    kubectl,
    metric,
    node_of,
    says_no_room,
    set_reserved,
    worker_names,
)
from e2e.kind.test_topology import PROBE_CLIENT, PROBE_PORT, VERBS_PORT
from extender.core.gates import GATE

OWN = "hp-own"  # enforced (values-own.yaml)
ENFORCE_MARKER, SHADOW_MARKER = "hugepage-extender.io/enforce", "hugepage-extender.io/shadow"


def own_pod(name: str, *, hugepages: str) -> None:
    """A pod for the cluster's own scheduler (no schedulerName)."""
    resources = {
        "requests": {"cpu": "10m", "memory": "16Mi", RESOURCE: hugepages},
        "limits": {"memory": "16Mi", RESOURCE: hugepages},
    }
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": OWN},
        "spec": {
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "main", "image": PAUSE, "resources": resources}],
        },
    }
    kubectl("apply", "-f", "-", stdin=json.dumps(pod))


def extender_daemon_pods(*, ready: bool = False) -> list[str]:
    selector = f"app.kubernetes.io/instance={RELEASE},app.kubernetes.io/component=extender"
    items = get_json("pods", "-n", NAMESPACE, "-l", selector, "--field-selector=status.phase=Running")["items"]
    if ready:
        items = [
            p
            for p in items
            if any(c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions", []))
        ]
    return [p["metadata"]["name"] for p in items]


def why_pending(namespace: str, name: str) -> str:
    """What the scheduler and the extender said about a pod, for a failure's message."""
    events = kubectl("get", "events", "-n", namespace, "--field-selector", f"involvedObject.name={name}", check=False)
    (daemon,) = extender_daemon_pods() or [""]
    explained = kubectl(
        "exec", "-n", NAMESPACE, daemon, "-c", "extender", "--", "hugepage-extender", "explain", "--in-cluster",
        "--pod", f"{namespace}/{name}", "--extender", "http://127.0.0.1:8888", check=False,
    ) if daemon else "(no extender pod)"  # fmt: skip
    records = kubectl("get", REPORTS, "-o", "yaml", check=False)
    return f"events:\n{events}\nexplain:\n{explained}\nnode agent records:\n{records}"


@pytest.fixture(scope="module")
def own_mode() -> Iterator[list[str]]:
    """The chart installed in own mode; the workers, every pool free to start with."""
    workers = worker_names()
    kubectl("apply", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": OWN}}))
    set_reserved(dict.fromkeys(workers))
    command = [HELM, "install", RELEASE, str(ROOT / "charts" / "hugepage-extender"), "--kubeconfig", KUBECONFIG]
    command += ["--namespace", NAMESPACE, "--create-namespace", "--values", str(ROOT / "e2e/kind/values-own.yaml")]
    started = time.monotonic()
    subprocess.run([*command, "--wait", "--timeout", "5m"], check=True, stdout=subprocess.DEVNULL)
    # helm's --wait passes a DaemonSet whose controller has not yet counted the nodes it wants
    # (0 desired, 0 ready): wait for the extender's own pod to run and be ready.
    deadline = time.monotonic() + 180
    while not extender_daemon_pods(ready=True):
        assert time.monotonic() < deadline, "the extender DaemonSet's pod never became ready"
        time.sleep(1)
    print(f"\nown mode: the extender DaemonSet ready {time.monotonic() - started:.1f} s after helm install")
    try:
        yield workers
    finally:
        kubectl("delete", "namespace", OWN, "--wait=false", check=False)
        set_reserved(dict.fromkeys(workers))
        # The last scenario uninstalls as the docs say; this is for a run that stopped before it.
        uninstall = [HELM, "uninstall", RELEASE, "--kubeconfig", KUBECONFIG, "--namespace", NAMESPACE, "--wait"]
        subprocess.run([*uninstall, "--ignore-not-found"], check=False, stdout=subprocess.DEVNULL)


def test_the_extender_runs_beside_the_static_scheduler_on_loopback(own_mode: list[str]) -> None:
    (pod,) = extender_daemon_pods()
    found = get_json("pod", pod, "-n", NAMESPACE)
    node = found["spec"]["nodeName"]
    labels = get_json("node", node)["metadata"]["labels"]
    assert "node-role.kubernetes.io/control-plane" in labels, (node, labels)
    assert found["spec"]["hostNetwork"] is True
    # The static scheduler on that node runs with the chart's configuration.
    (scheduler,) = get_json("pods", "-n", "kube-system", "-l", "component=kube-scheduler")["items"]
    assert scheduler["spec"]["nodeName"] == node
    command = scheduler["spec"]["containers"][0]["command"]
    assert "--config=/etc/kubernetes/hugepage-scheduler-config.yaml" in command, command
    # From a pod on a worker: nothing on the node's address answers on the verbs' port;
    # the probe port (host network) answers probes only.
    node_ip = found["status"]["hostIP"]
    client = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "outsider", "namespace": OWN},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": own_mode[0]},
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {"name": "main", "image": TOUCHER_IMAGE, "imagePullPolicy": "Never", "command": ["sleep", "3600"]}
            ],
        },
    }
    kubectl("apply", "-f", "-", stdin=json.dumps(client))
    try:
        kubectl("wait", "--for=condition=Ready", "pod/outsider", "-n", OWN, "--timeout=120s")
        printed = kubectl(
            "exec", "outsider", "-n", OWN, "--", "python", "-c", PROBE_CLIENT, json.dumps([node_ip]),
            str(VERBS_PORT), str(PROBE_PORT),
        )  # fmt: skip
    finally:
        kubectl("delete", "pod", "outsider", "-n", OWN, "--wait=false", check=False)
    seen = json.loads(printed)
    print(f"\nfrom a pod on {own_mode[0]} to the control-plane node {node_ip}: {seen}")
    assert seen[f"{node_ip}:{VERBS_PORT}"] == "ConnectionRefusedError", seen
    assert seen[f"{node_ip}:{PROBE_PORT} GET /readyz"] == 200, seen
    assert seen[f"{node_ip}:{PROBE_PORT} POST /filter"] in {404, 405}, seen
    assert seen[f"{node_ip}:{PROBE_PORT} GET /debug/state"] == 404, seen


def test_the_clusters_own_scheduler_places_through_the_extender(own_mode: list[str]) -> None:
    w1, w2, w3 = own_mode
    (daemon,) = extender_daemon_pods()
    calls_before = metric(daemon, "hugepage_extender_requests_total", verb="filter", code="200")
    # Every pool is the host's 1Gi; the annotation says w1's and w2's are held outside pods,
    # which only the extender knows: the cluster's own scheduler must place on w3.
    set_reserved({w1: POOL, w2: POOL, w3: None})
    own_pod("fits", hugepages="256Mi")
    try:
        node = node_of(OWN, "fits")
    except AssertionError as error:
        raise AssertionError(f"{error}\n{why_pending(OWN, 'fits')}") from None
    assert node == w3, why_pending(OWN, "fits")
    # Now w3 too: nothing has room, and the pod waits with the extender's reason.
    set_reserved({w3: POOL})
    own_pod("no-room", hugepages="256Mi")
    message = failed_scheduling(OWN, "no-room")
    assert says_no_room(message), message
    assert_stays_pending(OWN, "no-room", seconds=WATCH_SETTLE_SECONDS * 2)
    calls = metric(daemon, "hugepage_extender_requests_total", verb="filter", code="200") - calls_before
    # values-own.yaml states gates on: the pod with no room waits behind the gate the DaemonSet's
    # extender (beside the scheduler's Lease holder) would lift, never tried by the scheduler.
    assert gated(OWN, "no-room"), get_json("pod", "no-room", "-n", OWN)["spec"].get("schedulingGates")
    print(f"own mode: the cluster's kube-scheduler called the DaemonSet's extender {calls:.0f} times (filter)")
    assert calls >= 1  # the pod that fit


def gated(namespace: str, name: str) -> bool:
    """Whether the pod still waits behind the extender's scheduling gate."""
    gates = get_json("pod", name, "-n", namespace)["spec"].get("schedulingGates", [])
    return any(gate["name"] == GATE for gate in gates)


def scheduler_without_the_config() -> None:
    """The static kube-scheduler back to kubeadm's own configuration (its --config line removed
    from the manifest on the control-plane node; the kubelet restarts it), once it runs."""
    node = f"{os.environ.get('KIND_E2E_CLUSTER', 'hugepage-e2e')}-control-plane"
    manifest = "/etc/kubernetes/manifests/kube-scheduler.yaml"
    subprocess.run(["docker", "exec", node, "sed", "-i", "/--config=/d", manifest], check=True)

    def restarted() -> bool:
        pods = get_json("pods", "-n", "kube-system", "-l", "component=kube-scheduler")["items"]
        return any(
            not any(arg.startswith("--config=") for arg in p["spec"]["containers"][0]["command"])
            and any(c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions", []))
            for p in pods
        )

    wait_until("the cluster's scheduler without the chart's configuration", restarted, timeout=180, interval=2.0)


def test_bystanders_through_a_flip_and_the_uninstall(own_mode: list[str]) -> None:
    """Own mode serves the cluster scheduler's profile (default-scheduler): its hugepage pods are
    marked in hp-own (enforce) and hp-own-shadow (shadow), and placed where the extender finds
    room, as without the chart; in hp-own-off, and a third scheduler's and plain pods anywhere,
    nothing is marked. The same after ``helm upgrade`` flips hp-own-shadow to off, and after
    the uninstall docs/install.md gives for own mode (scheduler.own.active=false,
    the scheduler's --config removed, then helm uninstall): a pod marked while installed and still
    Pending then waits for good (behind the extender's scheduling gate, with no extender left to lift
    it), and is dealt with by the docs' one command (run verbatim), its Deployment's new pod unmarked
    and placed."""
    w1, w2, w3 = own_mode
    shadowed, off = "hp-own-shadow", "hp-own-off"
    make_namespaces(shadowed, off)
    # The bystanders on w2 (room); the waiting pod on w3 (its pool held outside pods).
    set_reserved({w1: None, w2: None, w3: POOL})
    waits = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "waits", "namespace": OWN},
        "spec": {
            "selector": {"matchLabels": {"app": "waits"}},
            "template": {
                "metadata": {"labels": {"app": "waits"}},
                "spec": {
                    "nodeSelector": {"kubernetes.io/hostname": w3},
                    "terminationGracePeriodSeconds": 0,
                    "containers": [pod_container("64Mi")],
                },
            },
        },
    }
    kubectl("apply", "-f", "-", stdin=json.dumps(waits))
    bystanders = Bystanders(node=w2, namespaces=(OWN, shadowed, off))
    try:
        (first,) = wait_until(
            "the waiting pod", lambda: get_json("pods", "-n", OWN, "-l", "app=waits")["items"], timeout=60
        )
        assert markers(first) == {ENFORCE_MARKER}
        assert says_no_room(failed_scheduling(OWN, first["metadata"]["name"]))
        bystanders.create("installed", {OWN: {ENFORCE_MARKER}, shadowed: {SHADOW_MARKER}})
        bystanders.check("installed")

        helm_upgrade(f"config.namespaces.{shadowed}.mode=off")
        wait_served_markers(shadowed, "default-scheduler", set())
        wait_until("the extender ready again", lambda: extender_daemon_pods(ready=True), timeout=180)
        bystanders.create("upgraded", {OWN: {ENFORCE_MARKER}})
        bystanders.check("upgraded")

        # docs/install.md, uninstall in own mode: no new pod marked, the cluster's scheduler back
        # to its own configuration, then the release goes.
        helm_upgrade("scheduler.own.active=false")
        wait_served_markers(OWN, "default-scheduler", set())
        scheduler_without_the_config()
        uninstall = [HELM, "uninstall", RELEASE, "--kubeconfig", KUBECONFIG, "--namespace", NAMESPACE, "--wait"]
        subprocess.run(uninstall, check=True, stdout=subprocess.DEVNULL)
        bystanders.create("uninstalled")
        bystanders.check("uninstalled")
        # The marked pod now waits for good, as the docs say, until their one command: behind the
        # extender's gate with no extender left to lift it (gates on, values-own.yaml).
        stranded = first["metadata"]["name"]
        assert f"{OWN}/{stranded}" in nothing_stranded()
        assert gated(OWN, stranded)
        assert_stays_pending(OWN, stranded, seconds=WATCH_SETTLE_SECONDS)
        (leftovers,) = doc_blocks("docs/install.md", "leftovers")
        run_block(leftovers)
        wait_nothing_stranded()

        def replaced() -> dict[str, Any] | None:
            pods = get_json("pods", "-n", OWN, "-l", "app=waits")["items"]
            running = [p for p in pods if p["status"].get("phase") == "Running"]
            return running[0] if running else None

        again = wait_until("the Deployment's new pod running", replaced, timeout=120, interval=1.0)
        assert again["spec"]["nodeName"] == w3, again["spec"]
        assert not markers(again), again["spec"]
    finally:
        bystanders.delete()
        kubectl("delete", "deployment", "waits", "-n", OWN, "--wait=false", check=False)
        kubectl("delete", "namespace", shadowed, off, "--wait=false", check=False)
