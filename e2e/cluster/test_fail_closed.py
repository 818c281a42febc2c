"""Enforcing namespaces fail closed, shadow and off fail open, in both of the chart's scheduler
modes (decision 0005), on the real kube-apiserver and kube-scheduler.

The chart is rendered as installed; its MutatingAdmissionPolicy is applied for real and marks new
pods by their namespace's mode; its scheduler configuration runs in the real kube-scheduler with
the extender unreachable. Pods of the enforcing namespace wait; pods of the shadow and off
namespaces are placed; pods of the extender's own namespace never get a marker. The nudge's
ValidatingAdmissionPolicy lets the extender's identity annotate its own pod and nothing else.
"""

from __future__ import annotations

import functools
import re
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
from e2e.controlplane import ControlPlane, free_port, node_manifest, pod_manifest, wait_until
from extender.shell.kube.nudge import NUDGE_ANNOTATION

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
    policies: list[dict[str, Any]] = []

    def apply(documents: list[dict[str, Any]]) -> None:
        for doc in documents:
            resource = dynamic.resources.get(api_version=doc["apiVersion"], kind=doc["kind"])
            namespace = doc["metadata"].get("namespace")
            resource.create(body=doc, namespace=namespace)
            made.append((resource, doc["metadata"]["name"], namespace))
            if doc["kind"] == "MutatingAdmissionPolicy":
                policies.append(doc)

    try:
        yield apply
    finally:
        for resource, name, namespace in reversed(made):
            resource.delete(name=name, namespace=namespace)
        # The API server drops a deleted policy a moment later: until then it would still mark the
        # next test's pods of the schedulers it names.
        for condition in [c for p in policies for c in p["spec"]["matchConditions"]]:
            if condition["name"] == "a-pod-of-the-extenders-schedulers":
                for scheduler_name in re.findall(r"'([^']+)'", condition["expression"].rsplit(" in ", 1)[1]):
                    wait_until(
                        f"the marker policy to be gone for {scheduler_name}",
                        functools.partial(unmarked, control_plane, scheduler_name),
                        timeout=60,
                        interval=0.5,
                    )


def unmarked(plane: ControlPlane, scheduler_name: str) -> bool:
    return not dry_run_markers(plane, "default", scheduler_name)


def dry_run_markers(plane: ControlPlane, namespace: str, scheduler_name: str) -> set[str]:
    """The markers a new hugepage pod of ``scheduler_name`` would get (created with dry run)."""
    probe = pod_manifest(unique("probe"), scheduler_name=scheduler_name, hugepages_2mi="2Mi")
    made = plane.core.create_namespaced_pod(namespace, client.V1Pod.model_validate(probe), dry_run="All")
    assert made.spec is not None
    limits = (made.spec.containers[0].resources.limits if made.spec.containers[0].resources else None) or {}
    return {key for key in limits if key in (ENFORCE_MARKER, SHADOW_MARKER)}


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
    # The policy marks pods of the extender's schedulers only: here a profile of this test's own.
    scheduler_name = unique("hp")
    profile = (
        [f"scheduler.schedulerName={scheduler_name}"]
        if mode == "secondary"
        # Own mode marks nothing until the operator says the cluster's scheduler runs the config.
        else ["scheduler.own.active=true", f"scheduler.own.schedulerNames={{{scheduler_name}}}"]
    )
    settings = [
        f"scheduler.mode={mode}",
        *profile,
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
        # The enforce entry's own fail-closed answer, which gated pods never reach (they wait
        # behind the gate no extender lifts: test_gates.py).
        "gates.enabled=false",
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
                "schedulerName": scheduler_name,
                "containers": [
                    {"name": "c", "image": "x", "resources": {"limits": {"hugepages-2Mi": "2Mi", "memory": "64Mi"}}}
                ],
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
    assert [p["schedulerName"] for p in scheduler_config["profiles"]] == [scheduler_name]
    if mode == "own":
        # The file for the cluster's own scheduler, with this control plane's kubeconfig.
        scheduler_config["clientConnection"] = {}
    else:
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


def resource_keys(pod: client.V1Pod) -> tuple[set[str], set[str]]:
    """The marker keys of every container's requests and of its limits."""
    assert pod.spec is not None
    requests: set[str] = set()
    limits: set[str] = set()
    for container in [*pod.spec.containers, *(pod.spec.init_containers or [])]:
        resources = container.resources
        requests |= (
            {k for k in (resources.requests or {}) if k in (ENFORCE_MARKER, SHADOW_MARKER)} if resources else set()
        )
        limits |= {k for k in (resources.limits or {}) if k in (ENFORCE_MARKER, SHADOW_MARKER)} if resources else set()
    return requests, limits


def test_the_default_render_marks_only_pods_its_scheduler_serves_and_no_tenant_opts_out(
    control_plane: ControlPlane,
    applied: Callable[[list[dict[str, Any]]], None],
    default_scheduler: Any,
    start_scheduler: Callable[..., Any],
    test_label: tuple[str, str],
) -> None:
    """The chart's default values (the secondary scheduler, shadow everywhere) plus an enforcing
    namespace and a VM namespace, applied to a cluster whose default kube-scheduler runs: a hugepage
    pod of the default scheduler, or of a third one, is left alone and the default one binds it; a
    pod of the chart's scheduler arriving with the shadow marker in the enforcing namespace ends with
    the enforce marker only (and waits while the extender cannot answer), one arriving with enforce
    in a shadow namespace ends with shadow (and is placed); a plain pod of the VM namespace that
    names another runtime class gets no marker, one of the VM runtime class does."""
    release_namespace, enforced, shadowed, vms = unique("hx"), unique("enforce"), unique("shadow"), unique("vms")
    for namespace in (release_namespace, enforced, shadowed, vms):
        control_plane.create_namespace(namespace)
    node_api = client.NodeV1Api(control_plane.api_client)
    vm_runtime, other_runtime = unique("kata"), unique("runc")
    for runtime in (vm_runtime, other_runtime):
        node_api.create_runtime_class(
            client.V1RuntimeClass.model_validate({"metadata": {"name": runtime}, "handler": "runc"})
        )
    documents = helm_template(
        control_plane,
        unique("hx"),
        release_namespace,
        f"config.namespaces.{enforced}.mode=enforce",
        f"config.namespaces.{vms}.mode=enforce",
        f"config.namespaces.{vms}.needFromMemory=true",
        f"config.namespaces.{vms}.needFromMemoryRuntimeClass={vm_runtime}",
        "gates.enabled=false",  # the markers and the enforce entry's answer (the gate: test_gates.py)
    )
    policies = one(documents, "MutatingAdmissionPolicy") + one(documents, "MutatingAdmissionPolicyBinding")
    assert len(policies) == 2
    config_map = next(d for d in one(documents, "ConfigMap") if d["metadata"]["name"].endswith("-scheduler"))
    scheduler_config = yaml.safe_load(config_map["data"]["scheduler-config.yaml"])
    (profile,) = scheduler_config["profiles"]
    chart_scheduler = profile["schedulerName"]
    assert chart_scheduler == "hugepage-scheduler"  # the default
    try:
        applied(policies)
        wait_until(
            "the MutatingAdmissionPolicy to mark pods",
            lambda: bool(dry_run_markers(control_plane, enforced, chart_scheduler)),
            timeout=60,
        )

        # The chart's scheduler, its extender unreachable, on this test's node only.
        for entry in scheduler_config["extenders"]:
            entry["urlPrefix"] = f"http://127.0.0.1:{free_port()}"
        scheduler_config.pop("leaderElection", None)
        scheduler_config.update({"podInitialBackoffSeconds": 1, "podMaxBackoffSeconds": 2})
        start_scheduler(scheduler_config, name=unique("chart-scheduler"))
        key, value = test_label
        node = unique("bystander-node")
        control_plane.create_node(node, hugepages_2mi="2Gi", labels={key: value})
        on_node = {"node_selector": {key: value}, "hugepages_2mi": "128Mi"}

        # Bystanders: the default scheduler's hugepage pods (a DPDK DaemonSet's, a database's) and a
        # third scheduler's are not touched, in the enforcing namespace and in a shadow one.
        for namespace in (enforced, shadowed):
            control_plane.create_pod(namespace, "dpdk", **on_node)
            control_plane.create_pod(namespace, "third", scheduler_name="third-scheduler", **on_node)
            for name in ("dpdk", "third"):
                assert resource_keys(control_plane.core.read_namespaced_pod(name, namespace)) == (set(), set())
            assert control_plane.wait_for_pod_bound(namespace, "dpdk", timeout=60) == node

        # No opt-out: the namespace's mode decides, whatever marker the pod arrived with.
        control_plane.create_pod(
            enforced, "tenant", scheduler_name=chart_scheduler, extended={SHADOW_MARKER: "1"}, **on_node
        )
        control_plane.create_pod(
            shadowed, "tenant", scheduler_name=chart_scheduler, extended={ENFORCE_MARKER: "1"}, **on_node
        )
        tenant_enforced = control_plane.core.read_namespaced_pod("tenant", enforced)
        assert resource_keys(tenant_enforced) == ({ENFORCE_MARKER}, {ENFORCE_MARKER})
        assert resource_keys(control_plane.core.read_namespaced_pod("tenant", shadowed)) == (
            {SHADOW_MARKER},
            {SHADOW_MARKER},
        )
        # Routed accordingly: the shadow one is placed without the extender; the enforce one waits for it.
        assert control_plane.wait_for_pod_bound(shadowed, "tenant", timeout=60) == node
        wait_for_event(control_plane.core, enforced, "tenant", "FailedScheduling", contains="/filter")
        assert_stays_pending(control_plane.core, enforced, ["tenant"], 3)

        # needFromMemoryRuntimeClass: only the VM runtime's pods need pages for their memory.
        for name, runtime in (("plain", ""), ("other-runtime", other_runtime), ("vm", vm_runtime)):
            body = pod_manifest(name, scheduler_name=chart_scheduler, memory="256Mi")
            if runtime:
                body["spec"]["runtimeClassName"] = runtime
            made = control_plane.core.create_namespaced_pod(vms, client.V1Pod.model_validate(body), dry_run="All")
            expected = {ENFORCE_MARKER} if runtime == vm_runtime else set()
            assert resource_keys(made) == (expected, expected), name
    finally:
        for runtime in (vm_runtime, other_runtime):
            node_api.delete_runtime_class(runtime)
