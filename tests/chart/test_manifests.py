"""manifests/ is exactly what the chart renders (charts/render-manifests)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import yaml

from .chartlib import ROOT, Helm

GENERATED = (
    "hugepage-extender.yaml",
    "scheduler/secondary-scheduler-config.yaml",
    "scheduler/kubeadm-scheduler-config.yaml",
)


def test_manifests_are_in_sync_with_the_chart(helm: Helm, tmp_path: Path) -> None:
    env = {**os.environ, "HELM": str(helm.binary)}
    subprocess.run([str(ROOT / "charts" / "render-manifests"), str(tmp_path)], check=True, env=env)
    stale = [name for name in GENERATED if (tmp_path / name).read_text() != (ROOT / "manifests" / name).read_text()]
    assert not stale, f"manifests/ is stale ({', '.join(stale)}): run charts/render-manifests and commit the result"


def test_default_manifest_is_the_default_install() -> None:
    docs = [d for d in yaml.safe_load_all((ROOT / "manifests" / "hugepage-extender.yaml").read_text()) if d]
    kinds = sorted({d["kind"] for d in docs})
    assert kinds == [
        "ClusterRole",
        "ClusterRoleBinding",
        "ConfigMap",
        "CustomResourceDefinition",  # the node agent's records
        "DaemonSet",  # the node agent
        "Deployment",  # the secondary scheduler, the extender its sidecar
        "MutatingAdmissionPolicy",  # marks pods by their namespace's mode (decision 0005)
        "MutatingAdmissionPolicyBinding",
        "PodDisruptionBudget",
        "Role",
        "RoleBinding",
        "Service",
        "ServiceAccount",
        "ValidatingAdmissionPolicy",  # each agent writes its own node's record; the extender only its nudge
        "ValidatingAdmissionPolicyBinding",
    ]
    cluster_scoped = (
        "ClusterRole",
        "ClusterRoleBinding",
        "CustomResourceDefinition",
        "MutatingAdmissionPolicy",
        "MutatingAdmissionPolicyBinding",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    )
    assert {d["metadata"].get("namespace") for d in docs if d["kind"] not in cluster_scoped} == {
        "hugepage-extender",
        "kube-system",
    }
    assert not [d for d in docs if d["kind"] == "Secret"]  # deterministic: no generated certificates
    (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
    sidecars = deployment["spec"]["template"]["spec"]["initContainers"]
    assert [c["name"] for c in sidecars] == ["extender"]


def test_scheduler_examples_are_scheduler_configurations() -> None:
    for name in GENERATED[1:]:
        config = yaml.safe_load((ROOT / "manifests" / name).read_text())
        assert config["kind"] == "KubeSchedulerConfiguration"
        enforce, shadow = config["extenders"]
        assert enforce["nodeCacheCapable"] is shadow["nodeCacheCapable"] is True
        # Decision 0005: enforcing namespaces fail closed, shadow ones fail open, in every install mode.
        assert (enforce["ignorable"], shadow["ignorable"]) == (False, True)
        assert [r["name"] for r in enforce["managedResources"] + shadow["managedResources"]] == [
            "hugepage-extender.io/enforce",
            "hugepage-extender.io/shadow",
        ]
    own = yaml.safe_load((ROOT / "manifests" / GENERATED[2]).read_text())
    assert own["percentageOfNodesToScore"] == 0
    assert own["clientConnection"]["kubeconfig"] == "/etc/kubernetes/scheduler.conf"
    assert own["extenders"][0]["urlPrefix"] == "http://127.0.0.1:8888"  # the DaemonSet on its node
