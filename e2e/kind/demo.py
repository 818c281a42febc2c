"""``make demo``: the chart on a kind cluster with real hugepages, for a newcomer to look at.

run.sh --demo builds the cluster (its images, the host's hugepage pool, the node-local CNI) and
runs this module with the cluster's kubeconfig, then leaves the cluster up. It installs the chart
(e2e/kind/values-demo.yaml: the secondary scheduler, namespace ``demo`` enforced), places a VM
(QEMU, its guest RAM on the pod's HugePages emptyDir) and a DPDK application (dpdk-testpmd) on
the first worker (e2e/kind/consumers.py), both taking real pages, then a VM asking for the whole
pool as its memory (RuntimeClass ``vm``: needFromMemory counts it), which kube-scheduler alone
would place and the extender keeps waiting, and prints ``kubectl hugepages explain`` for it.
test_demo.py runs the same steps in the kind suite."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from e2e.controlplane import wait_until
from e2e.kind.consumers import RUNTIME_CLASS, RUNTIME_CLASS_OBJECT, consumer_pod
from e2e.kind.test_kind import (
    HELM,
    KUBECONFIG,
    KUBECTL,
    NAMESPACE,
    POOL,
    RELEASE,
    ROOT,
    SCHEDULER_NAME,
    failed_scheduling,
    kubectl,
    worker_names,
)

DEMO = "demo"  # enforced (values-demo.yaml)
WAITS = "waits"


def install() -> None:
    chart = str(ROOT / "charts" / "hugepage-extender")
    values = str(ROOT / "e2e" / "kind" / "values-demo.yaml")
    command = [HELM, "install", RELEASE, chart, "--kubeconfig", KUBECONFIG, "--namespace", NAMESPACE]
    command += ["--create-namespace", "--values", values, "--wait", "--timeout", "5m"]
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    kubectl("create", "namespace", DEMO)


def place(node: str) -> list[str]:
    """The VM and the DPDK pod on ``node``, once each is ready (the guest booted, testpmd
    forwarding); their names."""
    pods = [consumer_pod(DEMO, "vm", "vm-hugepages", node=node, app=DEMO)]
    pods.append(consumer_pod(DEMO, "dpdk", "dpdk", node=node, app=DEMO))
    kubectl("apply", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": pods}))
    names = [p["metadata"]["name"] for p in pods]
    kubectl("wait", "--for=condition=Ready", "-n", DEMO, *(f"pod/{n}" for n in names), "--timeout=300s")
    return names


def wait_for_room(node: str) -> str:
    """A VM asking for the node's whole pool as its memory, beside the VM and DPDK: kube-scheduler
    sees no hugepage request, the extender counts the memory (needFromMemory) and it waits, behind the
    extender's scheduling gate (the chart's default); why it waits (its WaitingForRoom message)."""
    kubectl("apply", "-f", "-", stdin=json.dumps(RUNTIME_CLASS_OBJECT))
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": WAITS, "namespace": DEMO},
        "spec": {
            "schedulerName": SCHEDULER_NAME,
            "runtimeClassName": RUNTIME_CLASS,
            "nodeSelector": {"kubernetes.io/hostname": node},
            "containers": [
                {
                    "name": "main",
                    "image": "registry.k8s.io/pause:3.10",
                    "resources": {
                        "requests": {"cpu": "10m", "memory": POOL},
                        "limits": {"memory": POOL},
                    },
                }
            ],
        },
    }
    kubectl("apply", "-f", "-", stdin=json.dumps(pod))
    return failed_scheduling(DEMO, WAITS)


def lease_holder() -> str:
    """The running scheduler pod holding the Lease ("" before one does; an earlier release's
    Lease may still name a pod that is gone)."""
    holder = kubectl(
        "get", "lease", f"{RELEASE}-scheduler", "-n", NAMESPACE, "-o", "jsonpath={.spec.holderIdentity}", check=False
    ).split("_", 1)[0]
    if not holder:
        return ""
    phase = kubectl("get", "pod", holder, "-n", NAMESPACE, "-o", "jsonpath={.status.phase}", check=False)
    return holder if phase == "Running" else ""


def explain() -> str:
    """``kubectl hugepages explain demo/waits`` against the extender beside the scheduler holding
    the Lease, through ``kubectl port-forward`` (a free local port); its output."""
    forward = [KUBECTL, "--kubeconfig", KUBECONFIG, "-n", NAMESPACE, "port-forward", f"pod/{lease_holder()}", ":8888"]
    with subprocess.Popen(forward, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True) as forwarding:
        try:
            assert forwarding.stdout is not None
            line = forwarding.stdout.readline()  # "Forwarding from 127.0.0.1:PORT -> 8888"
            port = line.split("127.0.0.1:", 1)[1].split()[0]
            # kubectl runs its plugin kubectl-hugepages from the PATH: the project's, beside this Python.
            path = f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"
            command = [KUBECTL, "hugepages", "explain", f"{DEMO}/{WAITS}", "--extender", f"http://127.0.0.1:{port}"]
            result = subprocess.run(
                command, env={**os.environ, "KUBECONFIG": KUBECONFIG, "PATH": path},
                capture_output=True, text=True, check=True,
            )  # fmt: skip
            return f"$ kubectl hugepages explain {DEMO}/{WAITS} --extender http://127.0.0.1:{port}\n{result.stdout}"
        finally:
            forwarding.terminate()


def run() -> str:
    """Every step; what the demo prints."""
    node = worker_names()[0]
    install()
    wait_until("the scheduler's Lease", lease_holder, timeout=120, interval=1.0)
    placed = place(node)
    message = wait_for_room(node)
    return "\n".join(
        [
            f"placed on {node}, on real hugepages: {', '.join(f'{DEMO}/{n}' for n in placed)}",
            f"{DEMO}/{WAITS} waits: {message.splitlines()[0]}",
            explain(),
        ]
    )


def remove() -> None:
    """What run() made: the demo namespace and the release."""
    kubectl("delete", "namespace", DEMO, "--wait=true", "--timeout=120s", check=False)
    uninstall = [HELM, "uninstall", RELEASE, "--kubeconfig", KUBECONFIG, "--namespace", NAMESPACE, "--wait"]
    subprocess.run(uninstall, check=False, stdout=subprocess.DEVNULL)


if __name__ == "__main__":
    print(run())
    print(
        f"\nThe cluster stays up: KUBECONFIG={KUBECONFIG} kubectl get pods -n {DEMO} -o wide\n"
        f"(kind delete cluster --name {os.environ.get('KIND_E2E_CLUSTER', 'hugepage-e2e')} removes it)"
    )
