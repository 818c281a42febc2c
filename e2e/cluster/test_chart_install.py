"""The Helm chart against the real API server and the real kube-scheduler.

- ``helm install`` succeeds and the API server accepts every object.
- The extender's ServiceAccount can do what the extender needs and no more.
- The chart's KubeSchedulerConfiguration is loaded by the real kube-scheduler,
  which then calls a running extender.
- The extender runs with the chart's ConfigMap as its config file, and the
  per-namespace flags take effect.
"""

from __future__ import annotations

import re
import subprocess
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from e2e.controlplane import ControlPlane, Scheduler, Service

pytestmark = pytest.mark.cluster

CHART = Path(__file__).resolve().parents[2] / "charts" / "hugepage-extender"
StartScheduler = Callable[..., Scheduler]
StartExtender = Callable[..., Service]


def helm(plane: ControlPlane, *args: str) -> str:
    result = subprocess.run(
        [str(plane.bin_dir / "helm"), *args, "--kubeconfig", str(plane.kubeconfig)],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert result.returncode == 0, f"helm {' '.join(args)} failed:\n{result.stderr}"
    return result.stdout


def render(plane: ControlPlane, *values: str) -> list[dict[str, Any]]:
    sets = [arg for value in values for arg in ("--set", value)]
    out = helm(plane, "template", "hx", str(CHART), "--namespace", "hx", *sets)
    return [doc for doc in yaml.safe_load_all(out) if doc]


def rendered(documents: Sequence[dict[str, Any]], kind: str, name_part: str) -> dict[str, Any]:
    return next(d for d in documents if d["kind"] == kind and name_part in d["metadata"]["name"])


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def allowed(
    plane: ControlPlane,
    user: str,
    verb: str,
    resource: str,
    *,
    group: str = "",
    sub: str = "",
    namespace: str = "default",
) -> bool:
    review = client.V1SubjectAccessReview(
        spec=client.V1SubjectAccessReviewSpec(
            user=user,
            groups=["system:serviceaccounts", "system:authenticated"],
            resource_attributes=client.V1ResourceAttributes(
                verb=verb, resource=resource, group=group, subresource=sub or None, namespace=namespace
            ),
        )
    )
    answer = client.AuthorizationV1Api(plane.api_client).create_subject_access_review(review)
    assert answer.status is not None
    return bool(answer.status.allowed)


@pytest.mark.parametrize(
    ("settings", "bind"),
    [
        # Decision 0004: the bind verb is on by default with the secondary scheduler.
        pytest.param([], True, id="default-binds"),
        pytest.param(["--set", "bind.enabled=false"], False, id="bind-off"),
    ],
)
def test_helm_install_is_accepted_and_rbac_is_least_privilege(
    control_plane: ControlPlane, settings: list[str], bind: bool
) -> None:
    namespace = unique("hx-install")
    release = unique("hx")  # ClusterRoles are cluster-wide: one release name per install
    helm(control_plane, "install", release, str(CHART), "--namespace", namespace, "--create-namespace", *settings)
    try:
        check_install(control_plane, release, namespace, bind)
    finally:
        # The chart's MutatingAdmissionPolicy marks new pods cluster-wide (shadow by default): gone
        # with the release, so the other tests' pods stay unmarked.
        helm(control_plane, "uninstall", release, "--namespace", namespace)


def check_install(control_plane: ControlPlane, release: str, namespace: str, bind: bool) -> None:
    status = helm(control_plane, "status", release, "--namespace", namespace)
    assert "STATUS: deployed" in status
    apps = client.AppsV1Api(control_plane.api_client)
    deployments = {str(d.metadata.name) for d in apps.list_namespaced_deployment(namespace).items if d.metadata}
    assert any("scheduler" in name for name in deployments)
    assert any("scheduler" not in name for name in deployments)

    accounts = [
        sa.metadata.name
        for sa in control_plane.core.list_namespaced_service_account(namespace).items
        if sa.metadata
        and sa.metadata.name
        and "scheduler" not in sa.metadata.name
        and "node-agent" not in sa.metadata.name
        and sa.metadata.name != "default"
    ]
    assert len(accounts) == 1
    user = f"system:serviceaccount:{namespace}:{accounts[0]}"
    needs = [
        ("get", "nodes", ""),
        ("list", "nodes", ""),
        ("watch", "nodes", ""),
        ("list", "pods", ""),
        ("watch", "pods", ""),
    ]
    needs.append(("create", "events", ""))
    for verb, resource, group in needs:
        assert allowed(control_plane, user, verb, resource, group=group), f"cannot {verb} {resource}"
    for verb, resource, group in [
        ("get", "secrets", ""),
        ("list", "secrets", ""),
        ("delete", "pods", ""),
        ("update", "nodes", ""),
        ("patch", "pods", ""),
        ("create", "pods", ""),
        ("list", "configmaps", ""),
        ("create", "deployments", "apps"),
    ]:
        assert not allowed(control_plane, user, verb, resource, group=group), f"may {verb} {resource}"
    assert allowed(control_plane, user, "create", "pods", sub="binding") == bind
    # The nudge: patch pods in its own namespace only (a ValidatingAdmissionPolicy narrows it to its
    # own pod's one annotation: e2e/cluster/test_fail_closed.py).
    assert allowed(control_plane, user, "patch", "pods", namespace=namespace)
    assert not allowed(control_plane, user, "update", "pods", namespace=namespace)


def test_rendered_scheduler_config_runs_in_the_real_scheduler_and_calls_the_extender(
    control_plane: ControlPlane,
    start_extender: StartExtender,
    start_scheduler: StartScheduler,
    test_label: tuple[str, str],
) -> None:
    # The chart's default: the extender serves the bind verb (its Deployment's args, checked below).
    extender = start_extender(["--kubeconfig", str(control_plane.kubeconfig), "--enable-bind"], ready_path="/readyz")
    # Plain HTTP here: the rendered client certificate paths exist only in the scheduler pod
    # (tests/chart/test_tls.py handshakes with the chart's generated certificates).
    documents = render(
        control_plane,
        f"scheduler.extender.urlPrefix={extender.url}",
        "config.defaults.mode=enforce",
        "tls.enabled=false",
        "tls.clientAuth.enabled=false",
    )
    config_map = rendered(documents, "ConfigMap", "scheduler")
    scheduler_config = yaml.safe_load(config_map["data"]["scheduler-config.yaml"])
    entry, shadow = scheduler_config["extenders"]
    assert entry["nodeCacheCapable"] is True
    assert entry["bindVerb"] == "bind"
    assert (entry["ignorable"], shadow["ignorable"]) == (False, True)  # decision 0005
    (deployment,) = [
        d for d in documents if d["kind"] == "Deployment" and d["metadata"]["name"] == "hx-hugepage-extender"
    ]
    assert "--enable-bind" in deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    assert scheduler_config["profiles"][0]["percentageOfNodesToScore"] == 100
    scheduler = start_scheduler(scheduler_config, name=unique("chart-scheduler"))
    assert "hugepage-scheduler" in scheduler.profiles

    key, value = test_label
    node = unique("chart-node")
    control_plane.create_node(node, hugepages_2mi="2Gi", labels={key: value})
    namespace = unique("chart-ns")
    control_plane.create_namespace(namespace)
    # With the enforce marker the chart's admission policy gives pods of enforcing namespaces (applied
    # for real in test_fail_closed.py); the scheduler ignores it in its own resource check.
    control_plane.create_pod(
        namespace,
        "p",
        scheduler_name="hugepage-scheduler",
        hugepages_2mi="1Gi",
        node_selector={key: value},
        extended={"hugepage-extender.io/enforce": "1"},
    )
    assert control_plane.wait_for_pod_bound(namespace, "p", timeout=180) == node
    answer = extender.get("/metrics")
    assert answer is not None
    assert re.search(r'hugepage_extender_requests_total\{code="200",verb="filter"\} [1-9]', answer[1].decode())
    # The extender bound the pod, not the scheduler's default binder.
    assert re.search(r'hugepage_extender_binds_total\{result="bound"\} [1-9]', answer[1].decode())


def test_extender_runs_with_the_charts_config_and_namespace_flags_take_effect(
    control_plane: ControlPlane,
    start_extender: StartExtender,
    start_scheduler: StartScheduler,
    test_label: tuple[str, str],
    tmp_path: Path,
) -> None:
    enforced, shadowed = unique("enforced"), unique("shadowed")
    documents = render(
        control_plane,
        "config.defaults.mode=off",
        f"config.namespaces.{enforced}.mode=enforce",
        f"config.namespaces.{shadowed}.mode=shadow",
    )
    config_map = rendered(documents, "ConfigMap", "hx-hugepage-extender")
    (config_text,) = config_map["data"].values()
    config_file = tmp_path / "config.yaml"
    config_file.write_text(config_text)
    extender = start_extender(
        ["--kubeconfig", str(control_plane.kubeconfig), "--config", str(config_file)], ready_path="/readyz"
    )
    start_scheduler(
        {
            "profiles": [{"schedulerName": "hugepage-scheduler", "percentageOfNodesToScore": 100}],
            "extenders": [
                {
                    "urlPrefix": extender.url,
                    "filterVerb": "filter",
                    "prioritizeVerb": "prioritize",
                    "weight": 1,
                    "nodeCacheCapable": True,
                }
            ],
        },
        name=unique("flags-scheduler"),
    )
    key, value = test_label
    node = unique("held-node")
    control_plane.create_node(node, hugepages_2mi="2Gi", labels={key: value})
    # The whole pool is held outside pod requests (VMs started by a node agent):
    # the native scheduler sees 2Gi free; the extender sees none.
    control_plane.core.patch_node(
        node,
        {"metadata": {"annotations": {"hugepage-extender.io/reserved-hugepages-2Mi": "2Gi"}}},
        _content_type="application/merge-patch+json",
    )
    for namespace in (enforced, shadowed):
        control_plane.create_namespace(namespace)
        control_plane.create_pod(
            namespace, "p", scheduler_name="hugepage-scheduler", hugepages_2mi="1Gi", node_selector={key: value}
        )
    assert control_plane.wait_for_pod_bound(shadowed, "p", timeout=180) == node
    pod = control_plane.core.read_namespaced_pod("p", enforced)
    assert pod.spec is not None
    assert not pod.spec.node_name
    answer = extender.get("/metrics")
    assert answer is not None
    metrics = answer[1].decode()
    # The pages held outside pods leave less than the pod: unresolvable, counted with the pools too small.
    assert re.search(
        r'hugepage_extender_fit_rejected_nodes_total\{mode="shadow",reason="exceeds_pool"\} [1-9]', metrics
    )
    assert re.search(
        r'hugepage_extender_fit_rejected_nodes_total\{mode="enforce",reason="exceeds_pool"\} [1-9]', metrics
    )
