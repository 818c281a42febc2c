"""Bystanders on kind (issue 28): pods the chart's schedulers do not serve are placed exactly as
without the chart, installed, across ``helm upgrade`` and after ``helm uninstall``.

Per namespace and phase: a hugepage DaemonSet of the default scheduler (pinned to one worker),
a hugepage pod of a third scheduler name (no such scheduler runs: it stays Pending, as without
the chart) and a plain pod of the default scheduler. Each is checked for the markers it got and
where it went; the docs' one command for pods left Pending and marked after an uninstall
(docs/install.md, the block marked ``run: kind leftovers``) is run verbatim by ``run_block``."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from e2e.controlplane import wait_until
from e2e.kind.test_kind import HELM, KUBECONFIG, KUBECTL, PAUSE, RESOURCE, ROOT, get_json, kubectl

MARKER_PREFIX = "hugepage-extender.io/"
THIRD_SCHEDULER = "third-scheduler"
# <!-- run: kind STEP ... --> above a ```sh block: the kind suite runs it verbatim (bash, the
# cluster's kubeconfig, kubectl, helm and kubectl-hugepages on the PATH, in the repository's root).
KIND_MARKED = re.compile(r"<!-- run: kind (\w+)[^>]*-->\n```sh\n(.*?)```", re.DOTALL)


def markers(pod: dict[str, Any]) -> set[str]:
    """The hugepage-extender.io markers a pod carries, in any container's requests or limits."""
    found: set[str] = set()
    for container in pod["spec"].get("containers", []) + pod["spec"].get("initContainers", []):
        resources = container.get("resources", {})
        for section in ("requests", "limits"):
            found |= {k for k in resources.get(section, {}) if k.startswith(MARKER_PREFIX)}
    return found


def pod_container(hugepages: str | None) -> dict[str, Any]:
    requests = {"cpu": "5m", "memory": "8Mi"}
    limits = {"memory": "8Mi"}
    if hugepages:
        requests[RESOURCE] = limits[RESOURCE] = hugepages
    return {"name": "main", "image": PAUSE, "resources": {"requests": requests, "limits": limits}}


def _apply(objects: list[dict[str, Any]]) -> None:
    kubectl("apply", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}))


@dataclasses.dataclass
class Bystanders:
    """The bystanders made so far, on ``node`` (the DaemonSets' and plain pods' one node), and the
    markers each DaemonSet's pod is to have: none, but in own mode in a namespace its profile
    serves (there the default scheduler is the served one)."""

    node: str
    namespaces: tuple[str, ...]
    made: list[tuple[str, str, frozenset[str]]] = dataclasses.field(default_factory=list)

    def create(self, phase: str, daemon_markers: dict[str, set[str]] | None = None) -> None:
        objects: list[dict[str, Any]] = []
        pinned = {"kubernetes.io/hostname": self.node}
        for namespace in self.namespaces:
            labels = {"app": f"dpdk-{phase}"}
            template = {
                "metadata": {"labels": labels},
                "spec": {
                    "nodeSelector": pinned,
                    "terminationGracePeriodSeconds": 0,
                    "containers": [pod_container("2Mi")],
                },
            }
            objects.append({
                "apiVersion": "apps/v1", "kind": "DaemonSet",
                "metadata": {"name": f"dpdk-{phase}", "namespace": namespace, "labels": {"bystander": "yes"}},
                "spec": {"selector": {"matchLabels": labels}, "template": template},
            })  # fmt: skip
            third = {"schedulerName": THIRD_SCHEDULER, "terminationGracePeriodSeconds": 0}
            plain = {"nodeSelector": pinned, "terminationGracePeriodSeconds": 0}
            for name, spec, hugepages in ((f"third-{phase}", third, "2Mi"), (f"plain-{phase}", plain, None)):
                objects.append({
                    "apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": name, "namespace": namespace, "labels": {"bystander": "yes"}},
                    "spec": {**spec, "containers": [pod_container(hugepages)]},
                })  # fmt: skip
            self.made.append((phase, namespace, frozenset((daemon_markers or {}).get(namespace, set()))))
        _apply(objects)

    def check(self, when: str) -> None:
        """Every bystander made so far: the DaemonSet's pod and the plain pod running on the node
        with the markers expected, the third scheduler's pod unmarked and unplaced."""
        for phase, namespace, expected in self.made:
            where = f"{when}: {namespace}, made {phase}"

            def daemon_pod(phase: str = phase, namespace: str = namespace) -> dict[str, Any] | None:
                pods = get_json("pods", "-n", namespace, "-l", f"app=dpdk-{phase}")["items"]
                running = [p for p in pods if p["status"].get("phase") == "Running"]
                return running[0] if len(pods) == 1 and running else None

            pod = wait_until(f"{where}: the DaemonSet's pod running", daemon_pod, timeout=120, interval=1.0)
            assert pod["spec"]["nodeName"] == self.node, where
            assert markers(pod) == expected, (where, markers(pod))

            def plain_running(phase: str = phase, namespace: str = namespace) -> dict[str, Any] | None:
                pod = get_json("pod", f"plain-{phase}", "-n", namespace)
                return pod if pod["status"].get("phase") == "Running" else None

            plain = wait_until(f"{where}: the plain pod running", plain_running, timeout=120, interval=1.0)
            assert plain["spec"]["nodeName"] == self.node, where
            assert not markers(plain), where
            third = get_json("pod", f"third-{phase}", "-n", namespace)
            assert not third["spec"].get("nodeName"), (where, third["spec"])
            assert not markers(third), (where, third["spec"])
        print(f"\nbystanders {when}: {len(self.made)} sets placed as without the chart on {self.node}")

    def delete(self) -> None:
        for namespace in self.namespaces:
            kubectl("delete", "daemonsets,pods", "-n", namespace, "-l", "bystander=yes", "--wait=false", check=False)


def nothing_stranded() -> list[str]:
    """Pending pods no scheduler will ever place because of the chart: marked ones (the
    scheduler that ignored the marker is gone or no longer routes them). Empty once dealt with."""
    pending = get_json("pods", "-A", "--field-selector", "status.phase=Pending")["items"]
    return [f"{p['metadata']['namespace']}/{p['metadata']['name']}" for p in pending if markers(p)]


def wait_nothing_stranded() -> None:
    try:
        wait_until("no marked pod Pending", lambda: not nothing_stranded(), timeout=90, interval=1.0)
    except AssertionError:
        raise AssertionError(f"marked pods still Pending: {nothing_stranded()}") from None


# -- the docs' blocks, verbatim ------------------------------------------------------------------


def doc_blocks(doc: str, step: str) -> list[str]:
    """The ``run: kind STEP`` blocks of a doc (docs/install.md, docs/runbooks.md), in order."""
    text = (ROOT / doc).read_text()
    return [match[2] for match in KIND_MARKED.finditer(text) if match[1] == step]


def tools_path() -> str:
    """kubectl, helm and kubectl-hugepages (beside this Python) first on the PATH, as an operator has them."""
    directories = {str(Path(KUBECTL).parent), str(Path(HELM).parent), str(Path(sys.executable).parent)}
    return ":".join([*(d for d in sorted(directories) if d != "."), os.environ.get("PATH", "")])


def run_block(block: str, *, timeout: float = 300) -> str:
    """One doc block, verbatim, in bash -euo pipefail; its output. A command it leaves in the
    background (``kubectl port-forward ... &``) is ended with the block's process group once
    bash exits (the output goes to a file: a pipe would stay open while that command runs)."""
    env = {**os.environ, "KUBECONFIG": KUBECONFIG, "PATH": tools_path()}
    with tempfile.TemporaryFile("w+") as out:
        process = subprocess.Popen(
            ["bash", "-euo", "pipefail", "-c", block], cwd=ROOT, env=env, text=True,
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        try:
            code = process.wait(timeout=timeout)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        out.seek(0)
        output = out.read()
    print(f"\n$ {block.strip()}\n{output}")
    assert code == 0, f"the doc block failed (exit {code}):\n{block}\n{output}"
    return output


def served_markers(namespace: str, scheduler_name: str) -> set[str]:
    """The markers a new hugepage pod of ``scheduler_name`` in ``namespace`` gets now (server dry run)."""
    probe = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "marker-probe", "namespace": namespace},
        "spec": {"schedulerName": scheduler_name, "containers": [pod_container("2Mi")]},
    }
    made = kubectl("create", "--dry-run=server", "-o", "json", "-f", "-", stdin=json.dumps(probe))
    return markers(json.loads(made))


def wait_served_markers(namespace: str, scheduler_name: str, expected: set[str]) -> None:
    wait_until(
        f"a new pod of {scheduler_name} in {namespace} marked {sorted(expected)}",
        lambda: served_markers(namespace, scheduler_name) == expected,
        timeout=60,
        interval=1.0,
    )


def make_namespaces(*names: str) -> None:
    _apply([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}} for name in names])
