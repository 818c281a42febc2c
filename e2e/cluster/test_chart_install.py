"""The Helm chart against the real API server and the real kube-scheduler.

- ``helm install`` succeeds and the API server accepts every object, in each
  topology (the scheduler's native sidecar, the control-plane DaemonSet on the
  host network, the Deployment behind a Service).
- The extender's identity can do what the extender needs (and, with a
  ServiceAccount of its own, no more).
- ``helm upgrade --reset-then-reuse-values`` from the previous chart version
  (0.1.0: the extender behind a Service) moves it into the scheduler's pods and
  removes what loopback makes unnecessary.
- The chart's KubeSchedulerConfiguration is loaded by the real kube-scheduler,
  which then calls a running extender.
- The extender runs with the chart's ConfigMap as its config file, and the
  per-namespace flags take effect.
- Bystanders (a default-scheduler hugepage pod, a third scheduler's, plain pods) in
  enforcing, shadow and off namespaces get no marker and are placed as without the
  chart, in both modes, installed, after a namespace flips, and after the uninstall.
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

from e2e.controlplane import ControlPlane, Scheduler, Service, pod_manifest, wait_until

pytestmark = pytest.mark.cluster

CHART = Path(__file__).resolve().parents[2] / "charts" / "hugepage-extender"
ENFORCE, SHADOW = "hugepage-extender.io/enforce", "hugepage-extender.io/shadow"
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


def uninstall(plane: ControlPlane, release: str, namespace: str) -> None:
    """``helm uninstall``, then wait until the API server no longer applies the release's
    MutatingAdmissionPolicy: it marks new pods of its scheduler (``hugepage-scheduler`` by default)
    cluster-wide (shadow by default), and the API server drops a deleted policy a moment after the
    delete, so the other tests' pods could still be marked."""
    helm(plane, "uninstall", release, "--namespace", namespace)
    probe = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": unique("marker-probe")},
        "spec": {
            "schedulerName": "hugepage-scheduler",
            "containers": [
                {
                    "name": "main",
                    "image": "registry.k8s.io/pause:3.10",
                    "resources": {"limits": {"hugepages-2Mi": "2Mi", "memory": "16Mi", "cpu": "10m"}},
                }
            ],
        },
    }

    def unmarked() -> bool:
        created = plane.core.create_namespaced_pod("default", client.V1Pod.model_validate(probe), dry_run="All")
        resources = created.spec.containers[0].resources if created.spec else None
        limits = (resources.limits if resources else None) or {}
        return not any(name.startswith("hugepage-extender.io/") for name in limits)

    wait_until("the release's marker policy to be gone", unmarked, timeout=60, interval=0.5)


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


def as_dict(plane: ControlPlane, obj: object) -> dict[str, Any]:
    """An API object as the API server's JSON (camelCase keys)."""
    document: dict[str, Any] = plane.api_client.sanitize_for_serialization(obj)  # type: ignore[no-untyped-call]
    return document


def workloads(plane: ControlPlane, namespace: str) -> dict[str, dict[str, Any]]:
    """The release's Deployments and DaemonSets (the node agent's aside), by kind/name."""
    apps = client.AppsV1Api(plane.api_client)
    found: dict[str, dict[str, Any]] = {}
    listed: list[tuple[str, object]] = [("Deployment", apps.list_namespaced_deployment(namespace))]
    listed.append(("DaemonSet", apps.list_namespaced_daemon_set(namespace)))
    for kind, answer in listed:
        for item in as_dict(plane, answer)["items"]:
            name = item["metadata"]["name"]
            if "node-agent" not in name:
                found[f"{kind}/{name}"] = item
    return found


EXTENDER_NEEDS = [
    ("get", "nodes", ""),
    ("list", "nodes", ""),
    ("watch", "nodes", ""),
    ("list", "pods", ""),
    ("watch", "pods", ""),
    ("list", "hugepagenodereports", "hugepage-extender.io"),
    ("watch", "hugepagenodereports", "hugepage-extender.io"),
    ("create", "events", ""),
]


@pytest.mark.parametrize(
    ("settings", "topology", "bind"),
    [
        # Decision 0004: the bind verb is on by default with the secondary scheduler.
        pytest.param([], "sidecar", True, id="default-sidecar-binds"),
        pytest.param(["--set", "topology=service"], "service", True, id="service-binds"),
        pytest.param(
            ["--set", "topology=service", "--set", "bind.enabled=false"], "service", False, id="service-bind-off"
        ),
        pytest.param(["--set", "scheduler.mode=own"], "controlPlane", False, id="own-control-plane"),
    ],
)
def test_helm_install_is_accepted_and_rbac_is_least_privilege(
    control_plane: ControlPlane, settings: list[str], topology: str, bind: bool
) -> None:
    namespace = unique("hx-install")
    release = unique("hx")  # ClusterRoles are cluster-wide: one release name per install
    helm(control_plane, "install", release, str(CHART), "--namespace", namespace, "--create-namespace", *settings)
    try:
        check_install(control_plane, release, namespace, topology, bind)
    finally:
        # The chart's MutatingAdmissionPolicy marks new pods cluster-wide (shadow by default): gone
        # with the release, so the other tests' pods stay unmarked.
        uninstall(control_plane, release, namespace)


def check_install(control_plane: ControlPlane, release: str, namespace: str, topology: str, bind: bool) -> None:
    status = helm(control_plane, "status", release, "--namespace", namespace)
    assert "STATUS: deployed" in status
    found = workloads(control_plane, namespace)
    scheduler = f"Deployment/{release}-hugepage-extender-scheduler"
    extender = {"sidecar": scheduler, "service": f"Deployment/{release}-hugepage-extender"}.get(
        topology, f"DaemonSet/{release}-hugepage-extender"
    )
    assert extender in found, sorted(found)
    pod = found[extender]["spec"]["template"]["spec"]
    if topology == "sidecar":
        # The API server kept the native sidecar (an init container that restarts always).
        (sidecar,) = pod["initContainers"]
        assert sidecar["name"] == "extender"
        assert sidecar["restartPolicy"] == "Always"
        assert sorted(found) == [scheduler]
    if topology == "controlPlane":
        assert pod["hostNetwork"] is True
        assert sorted(found) == [extender]  # the cluster's own scheduler: none of the chart's

    account = pod["serviceAccountName"]
    user = f"system:serviceaccount:{namespace}:{account}"
    for verb, resource, group in EXTENDER_NEEDS:
        assert allowed(control_plane, user, verb, resource, group=group), f"cannot {verb} {resource}"
    assert allowed(control_plane, user, "create", "pods", sub="binding") == (bind or topology == "sidecar")
    for verb, resource, group in [("get", "secrets", ""), ("update", "nodes", ""), ("create", "deployments", "apps")]:
        assert not allowed(control_plane, user, verb, resource, group=group), f"may {verb} {resource}"
    # The nudge and the lift of its scheduling gate: patch pods (a ValidatingAdmissionPolicy narrows it to
    # its own pod's one annotation, and to removing that gate: e2e/cluster/test_fail_closed.py, test_gates.py).
    assert allowed(control_plane, user, "patch", "pods", namespace=namespace)
    assert allowed(control_plane, user, "patch", "pods")
    if topology == "sidecar":
        # One pod, one ServiceAccount: the sidecar runs as the scheduler's, which may bind
        # (and preempt) whatever bind.enabled says (docs/install.md, "Topology").
        return
    for verb, resource, group in [
        ("get", "secrets", ""),
        ("list", "secrets", ""),
        ("delete", "pods", ""),
        ("update", "nodes", ""),
        ("update", "pods", ""),
        ("create", "pods", ""),
        ("list", "configmaps", ""),
        ("create", "deployments", "apps"),
    ]:
        assert not allowed(control_plane, user, verb, resource, group=group), f"may {verb} {resource}"


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
        d for d in documents if d["kind"] == "Deployment" and d["metadata"]["name"] == "hx-hugepage-extender-scheduler"
    ]
    (sidecar,) = deployment["spec"]["template"]["spec"]["initContainers"]
    assert "--enable-bind" in sidecar["args"]
    assert scheduler_config["profiles"][0]["percentageOfNodesToScore"] == 0
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
    for mode in ("shadow", "enforce"):
        labels = f'mode="{mode}",reason="exceeds_pool",resource="hugepages-2Mi"'
        assert re.search(r"hugepage_extender_fit_rejected_nodes_total\{" + labels + r"\} [1-9]", metrics)


def previous_chart(directory: Path) -> Path:
    """The chart as it was before 0.2.0 (the extender behind a Service), from this repository's history:
    the parent of the first commit whose values.yaml has ``topology``."""
    repo = CHART.parents[1]

    def git(*args: str) -> str:
        result = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=False)
        assert result.returncode == 0, f"git {' '.join(args)}: {result.stderr.strip()} (needs the repository's history)"
        return result.stdout.strip()

    found = git("log", "--reverse", "--format=%H", '-Stopology: ""', "--", "charts/hugepage-extender/values.yaml")
    assert found, "no commit introduced the topology value"
    bump = found.splitlines()[0]
    archive = subprocess.run(
        ["git", "-C", str(repo), "archive", f"{bump}^", "charts/hugepage-extender"], capture_output=True, check=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(directory)], input=archive, check=True)
    return directory / "charts" / "hugepage-extender"


def test_upgrade_from_the_service_topology_moves_the_extender_beside_the_scheduler(
    control_plane: ControlPlane, tmp_path: Path
) -> None:
    old = previous_chart(tmp_path)
    assert yaml.safe_load((old / "Chart.yaml").read_text())["version"] == "0.1.0"
    namespace, release = unique("hx-upgrade"), unique("hx")
    mine = ["--set", "config.namespaces.payments.mode=enforce"]  # a value the user set
    helm(control_plane, "install", release, str(old), "--namespace", namespace, "--create-namespace", *mine)
    try:
        fullname = f"{release}-hugepage-extender"
        network = client.NetworkingV1Api(control_plane.api_client)

        def policies() -> list[str]:
            listed = as_dict(control_plane, network.list_namespaced_network_policy(namespace))
            return [p["metadata"]["name"] for p in listed["items"]]

        def service() -> dict[str, Any]:
            return as_dict(control_plane, control_plane.core.read_namespaced_service(fullname, namespace))

        def config_map(name: str, key: str) -> Any:
            found = as_dict(control_plane, control_plane.core.read_namespaced_config_map(name, namespace))
            return yaml.safe_load(found["data"][key])

        assert f"Deployment/{fullname}" in workloads(control_plane, namespace)
        assert policies() == [fullname]
        assert service()["spec"]["sessionAffinity"] == "ClientIP"

        # What docs/install.md says to run: the user's values, the new chart's defaults.
        helm(control_plane, "upgrade", release, str(CHART), "--namespace", namespace, "--reset-then-reuse-values")

        found = workloads(control_plane, namespace)
        assert sorted(found) == [f"Deployment/{fullname}-scheduler"], sorted(found)  # the extender's Deployment is gone
        (sidecar,) = found[f"Deployment/{fullname}-scheduler"]["spec"]["template"]["spec"]["initContainers"]
        assert sidecar["restartPolicy"] == "Always"
        assert "--host=127.0.0.1" in sidecar["args"]
        assert policies() == []
        assert [p["name"] for p in service()["spec"]["ports"]] == ["metrics"]
        assert service()["spec"].get("sessionAffinity") in (None, "None")
        listed = as_dict(control_plane, control_plane.core.list_namespaced_secret(namespace))["items"]
        secrets = [item["metadata"]["name"] for item in listed]
        assert not [name for name in secrets if name.endswith(("-tls", "-client-tls"))], secrets  # TLS off on loopback
        enforce, shadow = config_map(f"{fullname}-scheduler", "scheduler-config.yaml")["extenders"]
        for entry in (enforce, shadow):  # decision 0005: one entry per failure mode, both on loopback
            assert entry["urlPrefix"] == "http://127.0.0.1:8888"
            assert "tlsConfig" not in entry
        assert (enforce["ignorable"], shadow["ignorable"]) == (False, True)
        assert config_map(fullname, "config.yaml")["namespaces"]["payments"]["mode"] == "enforce"
    finally:
        # The new chart's MutatingAdmissionPolicy marks new pods cluster-wide: gone with the
        # release, so a failure here leaves the other tests' pods unmarked.
        uninstall(control_plane, release, namespace)


def served_markers(plane: ControlPlane, namespace: str, scheduler_name: str) -> set[str]:
    """The markers a new hugepage pod of ``scheduler_name`` would get now (created with dry run)."""
    probe = pod_manifest(unique("probe"), scheduler_name=scheduler_name, hugepages_2mi="2Mi")
    made = plane.core.create_namespaced_pod(namespace, client.V1Pod.model_validate(probe), dry_run="All")
    limits = (
        made.spec.containers[0].resources.limits if made.spec and made.spec.containers[0].resources else None
    ) or {}
    return {name for name in limits if name.startswith("hugepage-extender.io/")}


@pytest.mark.parametrize("mode", ["secondary", "own"])
def test_bystanders_are_placed_as_without_the_chart_through_upgrade_and_uninstall(
    control_plane: ControlPlane, default_scheduler: Scheduler, test_label: tuple[str, str], mode: str
) -> None:
    """Installed for real (helm install, upgrade, uninstall) beside a running default kube-scheduler:
    a hugepage pod of the default scheduler (own mode: the cluster scheduler's profile is another
    name here), one of a third scheduler, and a plain pod, in an enforcing, a shadow and an off
    namespace, get no marker and the default scheduler binds its own, installed, after a namespace
    flipped to enforce, and after the uninstall; meanwhile the served profile's pods are marked."""
    enforced, shadowed, switched_off = unique("by-enforce"), unique("by-shadow"), unique("by-off")
    for namespace in (enforced, shadowed, switched_off):
        control_plane.create_namespace(namespace)
    served = "hugepage-scheduler" if mode == "secondary" else unique("cluster-profile")
    settings = [f"config.namespaces.{enforced}.mode=enforce", f"config.namespaces.{switched_off}.mode=off"]
    if mode == "own":
        settings += ["scheduler.mode=own", "scheduler.own.active=true", f"scheduler.own.schedulerNames={{{served}}}"]
    sets = [arg for value in settings for arg in ("--set", value)]
    key, value = test_label
    node = unique("bystander-node")
    control_plane.create_node(node, hugepages_2mi="2Gi", labels={key: value})
    namespace, release = unique("hx-by"), unique("hx")

    def bystanders(phase: str) -> None:
        for where in (enforced, shadowed, switched_off):
            control_plane.create_pod(where, f"dpdk-{phase}", hugepages_2mi="64Mi", node_selector={key: value})
            control_plane.create_pod(where, f"third-{phase}", scheduler_name="third-scheduler", hugepages_2mi="64Mi")
            control_plane.create_pod(where, f"plain-{phase}", node_selector={key: value})
            for name in (f"dpdk-{phase}", f"third-{phase}", f"plain-{phase}"):
                pod = control_plane.core.read_namespaced_pod(name, where)
                resources = pod.spec.containers[0].resources if pod.spec else None
                limits = (resources.limits if resources else None) or {}
                assert not [k for k in limits if k.startswith("hugepage-extender.io/")], f"{phase}: {where}/{name}"
            for name in (f"dpdk-{phase}", f"plain-{phase}"):
                assert control_plane.wait_for_pod_bound(where, name, timeout=60) == node, f"{phase}: {where}/{name}"

    helm(control_plane, "install", release, str(CHART), "--namespace", namespace, "--create-namespace", *sets)
    try:
        wait_until(
            "the marker policy", lambda: served_markers(control_plane, enforced, served) == {ENFORCE}, timeout=60
        )
        assert served_markers(control_plane, shadowed, served) == {SHADOW}
        assert served_markers(control_plane, switched_off, served) == set()
        bystanders("installed")

        flip = ["--reuse-values", "--set", f"config.namespaces.{shadowed}.mode=enforce"]
        helm(control_plane, "upgrade", release, str(CHART), "--namespace", namespace, *flip)
        wait_until("the flip", lambda: served_markers(control_plane, shadowed, served) == {ENFORCE}, timeout=60)
        bystanders("upgraded")
    finally:
        uninstall(control_plane, release, namespace)
    wait_until("the policy gone", lambda: not served_markers(control_plane, enforced, served), timeout=60)
    bystanders("uninstalled")
