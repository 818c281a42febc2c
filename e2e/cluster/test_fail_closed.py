"""Enforcing namespaces fail closed, shadow and off fail open, in both of the chart's scheduler
modes (decision 0005), on the real kube-apiserver and kube-scheduler.

The chart is rendered as installed; its MutatingAdmissionPolicy is applied for real and marks new
pods by their namespace's mode; its scheduler configuration runs in the real kube-scheduler with
the extender unreachable. Pods of the enforcing namespace wait; pods of the shadow and off
namespaces are placed; pods of the extender's own namespace never get a marker. The nudge's
ValidatingAdmissionPolicy lets the extender's identity annotate its own pod and nothing else.
"""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from kubernetes.dynamic import DynamicClient

from e2e.cluster.placement_support import assert_stays_pending, wait_for_event
from e2e.cluster.test_node_agent import token_client
from e2e.controlplane import ControlPlane, free_port, node_manifest, wait_until
from extender.kube.nudge import NUDGE_ANNOTATION

pytestmark = pytest.mark.cluster

CHART = Path(__file__).resolve().parents[2] / "charts" / "hugepage-extender"
ENFORCE_MARKER = "hugepage-extender.io/enforce"
SHADOW_MARKER = "hugepage-extender.io/shadow"
Render = Callable[..., list[dict[str, Any]]]


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def helm_template(plane: ControlPlane, release: str, namespace: str, *values: str) -> list[dict[str, Any]]:
    helm = plane.bin_dir / "helm"
    if not helm.exists():
        pytest.skip(f"no helm in {plane.bin_dir} (e2e/tools/build builds it)")
    sets = [arg for value in values for arg in ("--set", value)]
    args = [str(helm), "template", release, str(CHART), "--namespace", namespace, "--kube-version", "v1.37.2", *sets]
    out = subprocess.run(args, check=True, capture_output=True, text=True, timeout=120).stdout
    return [doc for doc in yaml.safe_load_all(out) if doc]


def one(documents: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in documents if d["kind"] == kind]


@pytest.fixture
def applied(control_plane: ControlPlane) -> Iterator[Callable[[list[dict[str, Any]]], None]]:
    """``apply(documents)``: create them (cluster-scoped or namespaced); deleted after the test, so the
    chart's admission policies never outlive it on the shared control plane."""
    dynamic = DynamicClient(control_plane.api_client)  # type: ignore[no-untyped-call]
    made: list[tuple[Any, str, str | None]] = []

    def apply(documents: list[dict[str, Any]]) -> None:
        for doc in documents:
            resource = dynamic.resources.get(api_version=doc["apiVersion"], kind=doc["kind"])
            namespace = doc["metadata"].get("namespace")
            resource.create(body=doc, namespace=namespace)
            made.append((resource, doc["metadata"]["name"], namespace))

    try:
        yield apply
    finally:
        for resource, name, namespace in reversed(made):
            resource.delete(name=name, namespace=namespace)


def markers(plane: ControlPlane, namespace: str, name: str) -> set[str]:
    pod = plane.core.read_namespaced_pod(name, namespace)
    assert pod.spec is not None
    limits = pod.spec.containers[0].resources.limits or {} if pod.spec.containers[0].resources else {}
    return {key for key in limits if key in (ENFORCE_MARKER, SHADOW_MARKER)}


@pytest.mark.parametrize("mode", ["secondary", "own"])
def test_the_extender_unreachable_enforce_pods_wait_and_shadow_and_off_pods_are_placed(
    control_plane: ControlPlane,
    applied: Callable[[list[dict[str, Any]]], None],
    start_scheduler: Callable[..., Any],
    test_label: tuple[str, str],
    mode: str,
) -> None:
    release_namespace = unique("hx")
    enforced, shadowed, switched_off = unique("enforce"), unique("shadow"), unique("off")
    for namespace in (release_namespace, enforced, shadowed, switched_off):
        control_plane.create_namespace(namespace)
    unreachable = f"http://127.0.0.1:{free_port()}"  # nothing listens
    settings = [
        f"scheduler.mode={mode}",
        f"scheduler.extender.urlPrefix={unreachable}",
        "tls.enabled=false",
        "tls.clientAuth.enabled=false",
        "networkPolicy.enabled=false",
        # Off by default, so the policy marks only this test's pods on the shared control plane.
        "config.defaults.mode=off",
        f"config.namespaces.{enforced}.mode=enforce",
        f"config.namespaces.{shadowed}.mode=shadow",
        f"config.namespaces.{switched_off}.mode=off",
        # Even listed as enforcing, the extender's own namespace gets no marker (no deadlock).
        f"config.namespaces.{release_namespace}.mode=enforce",
    ]
    documents = helm_template(control_plane, unique("hx"), release_namespace, *settings)
    policies = one(documents, "MutatingAdmissionPolicy") + one(documents, "MutatingAdmissionPolicyBinding")
    assert len(policies) == 2
    applied(policies)

    # The policy is compiled a moment after it is created: wait until it marks a pod (dry run).
    probe = client.V1Pod.model_validate(
        {
            "metadata": {"name": "probe"},
            "spec": {
                "containers": [
                    {"name": "c", "image": "x", "resources": {"limits": {"hugepages-2Mi": "2Mi", "memory": "64Mi"}}}
                ]
            },
        }
    )

    def marking() -> bool:
        made = control_plane.core.create_namespaced_pod(enforced, probe, dry_run="All")
        assert made.spec is not None
        resources = made.spec.containers[0].resources
        return bool(resources and resources.limits and ENFORCE_MARKER in resources.limits)

    wait_until("the MutatingAdmissionPolicy to mark pods", marking, timeout=60)

    config_map = next(d for d in one(documents, "ConfigMap") if d["metadata"]["name"].endswith("-scheduler"))
    scheduler_config = yaml.safe_load(config_map["data"]["scheduler-config.yaml"])
    enforce_entry, shadow_entry = scheduler_config["extenders"]
    assert (enforce_entry["ignorable"], shadow_entry["ignorable"]) == (False, True)
    scheduler_name = unique("hp")
    if mode == "own":
        # The file for the cluster's own scheduler; here under a profile name of its own, so it
        # schedules this test's pods only, and with this control plane's kubeconfig.
        assert "profiles" not in scheduler_config
        scheduler_config["profiles"] = [{"schedulerName": scheduler_name, "percentageOfNodesToScore": 100}]
        scheduler_config["clientConnection"] = {}
    else:
        scheduler_config["profiles"][0]["schedulerName"] = scheduler_name
        scheduler_config.pop("leaderElection", None)
    scheduler_config.update({"podInitialBackoffSeconds": 1, "podMaxBackoffSeconds": 2})
    start_scheduler(scheduler_config, name=scheduler_name)

    key, value = test_label
    node = unique("fc-node")
    control_plane.create_node(node, hugepages_2mi="2Gi", labels={key: value})
    for namespace in (enforced, shadowed, switched_off, release_namespace):
        control_plane.create_pod(
            namespace, "p", scheduler_name=scheduler_name, hugepages_2mi="256Mi", node_selector={key: value}
        )
    assert markers(control_plane, enforced, "p") == {ENFORCE_MARKER}
    assert markers(control_plane, shadowed, "p") == {SHADOW_MARKER}
    assert markers(control_plane, switched_off, "p") == set()
    assert markers(control_plane, release_namespace, "p") == set()

    # Shadow: the ignorable entry is skipped; off and the extender's own: not sent at all.
    for namespace in (shadowed, switched_off, release_namespace):
        assert control_plane.wait_for_pod_bound(namespace, "p", timeout=60) == node
    # Enforce: the entry that is not ignorable fails the attempt; the pod waits, and says why.
    wait_for_event(control_plane.core, enforced, "p", "FailedScheduling", contains="/filter")
    assert_stays_pending(control_plane.core, enforced, ["p"], 5)


def test_the_nudge_may_annotate_the_extenders_own_pod_and_nothing_else(
    control_plane: ControlPlane, applied: Callable[[list[dict[str, Any]]], None]
) -> None:
    release_namespace = unique("hx")
    control_plane.create_namespace(release_namespace)
    release = unique("hx")
    # The service topology: the extender runs as its own ServiceAccount (with the sidecar it runs
    # as the scheduler's, and tests/chart/test_render.py checks the policy names that one).
    documents = helm_template(control_plane, release, release_namespace, "config.defaults.mode=off", "topology=service")
    wanted = ("ServiceAccount", "Role", "RoleBinding", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")
    objects = [
        d
        for d in documents
        if d["kind"] in wanted
        and (d["metadata"]["name"].endswith("-nudge") or d["kind"] == "ServiceAccount")
        and "node-agent" not in d["metadata"]["name"]
        and "scheduler" not in d["metadata"]["name"]
    ]
    assert sorted(d["kind"] for d in objects) == sorted(wanted)
    applied(objects)
    (account,) = [d["metadata"]["name"] for d in objects if d["kind"] == "ServiceAccount"]

    node = unique("nudge-node")
    control_plane.core.create_node(client.V1Node.model_validate(node_manifest(node)))
    uids = {}
    for name in ("own", "other"):
        body = {
            "metadata": {"name": name},
            "spec": {
                "nodeName": node,
                "serviceAccountName": account,
                "automountServiceAccountToken": False,
                "containers": [{"name": "extender", "image": "registry.k8s.io/pause:3.10"}],
            },
        }
        made = control_plane.core.create_namespaced_pod(release_namespace, client.V1Pod.model_validate(body))
        assert made.metadata is not None
        uids[name] = made.metadata.uid
    # A token as the kubelet gets it for the extender's pod: bound to the pod (its name a claim).
    own = {"kind": "Pod", "apiVersion": "v1", "name": "own", "uid": uids["own"]}
    request = client.AuthenticationV1TokenRequest.model_validate(
        {"spec": {"audiences": [], "expirationSeconds": 3600, "boundObjectRef": own}}
    )
    token = control_plane.core.create_namespaced_service_account_token(account, release_namespace, request)
    assert token.status is not None
    extender = client.CoreV1Api(token_client(control_plane, str(token.status.token)))

    def patch(name: str, body: dict[str, Any]) -> int:
        try:
            extender.patch_namespaced_pod(name, release_namespace, body, _preload_content=False)
        except ApiException as error:
            return int(error.status)
        return 200

    nudge = {"metadata": {"annotations": {NUDGE_ANNOTATION: "2026-12-01T00:00:00.000Z"}}}
    # The policy is in force a moment after it is created: until then RBAC alone lets the write through.
    wait_until("the nudge policy to refuse another pod", lambda: patch("other", nudge) == 403, timeout=60)
    assert patch("own", nudge) == 200
    assert patch("own", {"metadata": {"labels": {"evil": "yes"}}}) == 403
    assert patch("own", {"metadata": {"annotations": {"other": "x"}}}) == 403
    assert patch("own", {"metadata": {"annotations": {NUDGE_ANNOTATION: "again"}}}) == 200
    try:
        extender.delete_namespaced_pod("own", release_namespace)
        deleted = 200
    except ApiException as error:
        deleted = int(error.status)
    assert deleted == 403
