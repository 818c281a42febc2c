"""`helm template` over the ci/ matrix: what every scenario must render.

Each check reads the rendered objects the way the API server, the kubelet or
kube-scheduler will read them: names are DNS labels, the config path in the
args is the file the volume mounts, the scheduler's caData is the CA that
signed the served certificate.
"""

from __future__ import annotations

import base64
import itertools
import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from extender.core.gates import GATE
from extender.shell.kube.nudge import NUDGE_ANNOTATION

from .chartlib import CHART, CI_VALUES, NAMESPACE, RELEASE, ROOT, Doc, Helm, HelmError, Rendered

CI = {p.name.removesuffix("-values.yaml"): p for p in CI_VALUES}
EXTENDER = RELEASE  # the release is named like the chart, so fullname == release
SCHEDULER = f"{RELEASE}-scheduler"
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
CLUSTER_SCOPED = {
    "ClusterRole",
    "ClusterRoleBinding",
    "MutatingAdmissionPolicy",
    "MutatingAdmissionPolicyBinding",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
}
STANDARD_LABELS = (
    "helm.sh/chart",
    "app.kubernetes.io/name",
    "app.kubernetes.io/instance",
    "app.kubernetes.io/version",
    "app.kubernetes.io/managed-by",
    "app.kubernetes.io/component",
    "app.kubernetes.io/part-of",
)


@pytest.fixture(scope="module")
def renders(helm: Helm) -> dict[str, Rendered]:
    return {name: helm.template(values=[path]) for name, path in CI.items()}


def values_of(name: str) -> dict[str, Any]:
    loaded = yaml.safe_load(CI[name].read_text()) or {}
    assert isinstance(loaded, dict)
    return loaded


def container(workload: Doc, name: str) -> Doc:
    """A container of a Deployment or DaemonSet, the native sidecars (initContainers) included."""
    pod = workload["spec"]["template"]["spec"]
    found = [c for c in [*pod.get("initContainers", []), *pod["containers"]] if c["name"] == name]
    assert len(found) == 1
    result: Doc = found[0]
    return result


# Where each topology puts the extender: in the secondary scheduler's pods, in a
# DaemonSet on the control-plane nodes, or in a Deployment of its own behind a Service.
WORKLOAD = {
    "sidecar": ("Deployment", SCHEDULER),
    "controlPlane": ("DaemonSet", EXTENDER),
    "service": ("Deployment", EXTENDER),
}


def extender_workload(rendered: Rendered, topology: str) -> Doc:
    kind, name = WORKLOAD[topology]
    return rendered.get(kind, name)


def the_extender_container(rendered: Rendered, topology: str) -> Doc:
    return container(extender_workload(rendered, topology), "extender")


def scheduler_config(rendered: Rendered) -> Doc:
    data = rendered.get("ConfigMap", SCHEDULER)["data"]["scheduler-config.yaml"]
    config = yaml.safe_load(data)
    assert isinstance(config, dict)
    return config


ENFORCE_MARKER = "hugepage-extender.io/enforce"
SHADOW_MARKER = "hugepage-extender.io/shadow"


def entries(config: Doc) -> tuple[Doc, Doc]:
    """The scheduler's two entries for the extender (decision 0005): enforce, then shadow."""
    enforce, shadow = config["extenders"]
    assert enforce["managedResources"] == [{"name": ENFORCE_MARKER, "ignoredByScheduler": True}]
    assert shadow["managedResources"] == [{"name": SHADOW_MARKER, "ignoredByScheduler": True}]
    return enforce, shadow


def the_extender(config: Doc) -> Doc:
    """The enforce entry: the one that scores and binds."""
    return entries(config)[0]


def _merged(defaults: Any, given: Any) -> Any:
    if isinstance(defaults, dict) and isinstance(given, dict):
        return {**defaults, **{k: _merged(defaults.get(k), v) for k, v in given.items()}}
    return given


def effective(name: str) -> dict[str, Any]:
    """The scenario's values over the chart's defaults, as helm merges them."""
    defaults = yaml.safe_load((CHART / "values.yaml").read_text())
    merged: dict[str, Any] = _merged(defaults, values_of(name))
    return merged


def is_own(name: str) -> bool:
    return bool(values_of(name).get("scheduler", {}).get("mode") == "own")


def topology_of(name: str) -> str:
    """topology when set, else by scheduler.mode: the sidecar (secondary) or the control-plane DaemonSet (own)."""
    explicit = str(effective(name).get("topology") or "")
    return explicit or ("controlPlane" if is_own(name) else "sidecar")


def is_loopback(name: str) -> bool:
    return topology_of(name) != "service"


def is_tls(name: str) -> bool:
    """tls.enabled when set, else on only behind a Service (the verbs on a network port)."""
    explicit = effective(name)["tls"]["enabled"]
    return explicit if isinstance(explicit, bool) else not is_loopback(name)


def is_mtls(name: str) -> bool:
    explicit = effective(name)["tls"]["clientAuth"]["enabled"]
    return explicit if isinstance(explicit, bool) else is_tls(name)


def is_bind(name: str) -> bool:
    """The bind verb: bind.enabled when set, else by scheduler.mode (decision 0004): on with the secondary scheduler."""
    explicit = effective(name)["bind"]["enabled"]
    return explicit if isinstance(explicit, bool) else not is_own(name)


# -- every object ---------------------------------------------------------------


@pytest.mark.parametrize("scenario", sorted(CI))
def test_objects_are_well_formed(renders: dict[str, Rendered], scenario: str) -> None:
    rendered = renders[scenario]
    assert rendered.docs
    for doc in rendered.docs:
        meta = doc["metadata"]
        where = f"{scenario}: {doc['kind']}/{meta['name']}"
        assert doc["apiVersion"], where
        assert DNS_LABEL.match(meta["name"]), f"{where}: not a DNS label"
        for label in STANDARD_LABELS:
            assert label in meta["labels"], f"{where}: no {label} label"
        if doc["kind"] in CLUSTER_SCOPED:
            assert "namespace" not in meta, where
        elif meta["name"] == f"{EXTENDER}-leader-lease":  # beside the Lease it reads
            assert meta["namespace"] == leader_lease_of(scenario).split("/")[0], where
        elif not (doc["kind"] == "RoleBinding" and meta["namespace"] == "kube-system"):
            assert meta["namespace"] == NAMESPACE, where


@pytest.mark.parametrize(
    ("release", "set_values"),
    [
        # helm's longest release name (53) plus "-hugepage-extender" is 71 characters
        ("a-long-release-name-that-a-platform-team-might-choose", {}),
        ("r", {"fullnameOverride": "f" * 63}),
    ],
    ids=["long-release", "long-fullname-override"],
)
def test_names_are_truncated_to_63(helm: Helm, release: str, set_values: dict[str, str]) -> None:
    docs = [d for d in yaml.safe_load_all(helm.template_text(release=release, set_values=set_values)) if d]
    for doc in docs:
        name = doc["metadata"]["name"]
        assert len(name) <= 63, name
        assert DNS_LABEL.match(name), name
    deployments = [d["metadata"]["name"] for d in docs if d["kind"] == "Deployment"]
    assert [name.endswith("-scheduler") for name in deployments] == [True]  # the extender is its sidecar


def test_selector_labels_are_a_stable_subset(renders: dict[str, Rendered]) -> None:
    deployment = renders["mtls-generated"].get("Deployment", EXTENDER)
    selector = deployment["spec"]["selector"]["matchLabels"]
    # No version or chart label in the immutable selector: upgrades must not change it.
    assert selector == {
        "app.kubernetes.io/name": "hugepage-extender",
        "app.kubernetes.io/instance": RELEASE,
        "app.kubernetes.io/component": "extender",
    }
    assert selector.items() <= deployment["spec"]["template"]["metadata"]["labels"].items()
    service = renders["mtls-generated"].get("Service", EXTENDER)
    assert service["spec"]["selector"] == selector
    # The default's metrics Service selects the scheduler pods, which carry the extender.
    scheduler = renders["default"].get("Deployment", SCHEDULER)["spec"]["selector"]["matchLabels"]
    assert renders["default"].get("Service", EXTENDER)["spec"]["selector"] == scheduler


# -- the extender's pods ------------------------------------------------------------


@pytest.mark.parametrize("scenario", sorted(CI))
def test_extender_pods_are_hardened(renders: dict[str, Rendered], scenario: str) -> None:
    deployment = extender_workload(renders[scenario], topology_of(scenario))
    pod = deployment["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == 65532
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    extender = container(deployment, "extender")
    security = extender["securityContext"]
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"]["drop"] == ["ALL"]
    assert extender["resources"]["requests"]["cpu"]
    assert extender["resources"]["requests"]["memory"]
    assert extender["resources"]["limits"]["memory"]


@pytest.mark.parametrize("scenario", sorted(CI))
def test_extender_probes_use_the_plain_http_probe_port(renders: dict[str, Rendered], scenario: str) -> None:
    extender = the_extender_container(renders[scenario], topology_of(scenario))
    ports = {p["name"]: p["containerPort"] for p in extender["ports"]}
    # Liveness through the socket only the pod reaches: no connection flood to the probe port fails it.
    assert extender["livenessProbe"]["exec"]["command"] == [
        "python",
        "-m",
        "extender.shell.alive",
        "hugepage-extender-liveness",
    ]
    assert "--liveness-socket=hugepage-extender-liveness" in extender["args"]
    assert extender["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "probe"}
    # Liveness waits for the first sync; the sidecar's kube-scheduler starts only after it.
    assert extender["startupProbe"]["httpGet"] == {"path": "/readyz", "port": "probe"}
    assert f"--probe-port={ports['probe']}" in extender["args"]
    assert "--probe-host=0.0.0.0" in extender["args"]  # the kubelet and Prometheus reach it
    assert "--port=8888" in extender["args"]
    if is_loopback(scenario):
        # The verbs listen on loopback only, and declare no port.
        assert "--host=127.0.0.1" in extender["args"]
        assert set(ports) == {"probe"}
    else:
        assert "--host=0.0.0.0" in extender["args"]
        assert ports["extender"] == 8888
    assert "scheme" not in extender["readinessProbe"]["httpGet"]  # HTTP even when the verbs are HTTPS


def test_the_sidecar_is_synced_before_its_scheduler_starts(renders: dict[str, Rendered]) -> None:
    rendered = renders["default"]
    deployment = rendered.get("Deployment", SCHEDULER)
    pod = deployment["spec"]["template"]["spec"]
    # A native sidecar: started before kube-scheduler, which the kubelet starts once the
    # sidecar's startupProbe (/readyz: the cluster state synced) passes; stopped after it.
    (sidecar,) = pod["initContainers"]
    assert sidecar["name"] == "extender"
    assert sidecar["restartPolicy"] == "Always"
    assert sidecar["startupProbe"]["httpGet"]["path"] == "/readyz"
    assert [c["name"] for c in pod["containers"]] == ["kube-scheduler"]
    assert the_extender(scheduler_config(rendered))["urlPrefix"] == "http://127.0.0.1:8888"
    # Each scheduler replica carries its own extender; one holds the lease.
    assert deployment["spec"]["replicas"] == 2
    assert scheduler_config(rendered)["leaderElection"]["leaderElect"] is True
    budget = rendered.get("PodDisruptionBudget", SCHEDULER)
    assert budget["spec"]["selector"] == deployment["spec"]["selector"]
    assert pod["terminationGracePeriodSeconds"] > 10  # above --shutdown-timeout=10
    # Nothing of the Service topology: no extender Deployment, budget, NetworkPolicy or ServiceAccount.
    assert not rendered.has("Deployment", EXTENDER)
    assert not rendered.has("PodDisruptionBudget", EXTENDER)
    assert not rendered.all("NetworkPolicy")
    assert not rendered.has("ServiceAccount", EXTENDER)
    annotations = deployment["spec"]["template"]["metadata"]["annotations"]
    assert {"checksum/config", "checksum/extender-config"} <= set(annotations)


def test_the_control_plane_daemonset_runs_beside_the_static_scheduler(renders: dict[str, Rendered]) -> None:
    rendered = renders["own-scheduler"]
    daemonset = rendered.get("DaemonSet", EXTENDER)
    pod = daemonset["spec"]["template"]["spec"]
    assert pod["hostNetwork"] is True
    assert pod["dnsPolicy"] == "ClusterFirstWithHostNet"
    assert pod["nodeSelector"] == {"node-role.kubernetes.io/control-plane": ""}
    assert {"key": "node-role.kubernetes.io/control-plane", "operator": "Exists", "effect": "NoSchedule"} in pod[
        "tolerations"
    ]
    assert "--host=127.0.0.1" in container(daemonset, "extender")["args"]
    assert daemonset["spec"]["updateStrategy"]["rollingUpdate"] == {"maxUnavailable": 1}
    assert the_extender(scheduler_config(rendered))["urlPrefix"] == "http://127.0.0.1:8888"
    assert not rendered.all("Deployment")
    assert not rendered.all("NetworkPolicy")
    assert not rendered.has("PodDisruptionBudget", EXTENDER)


def test_extender_defaults_for_availability(renders: dict[str, Rendered]) -> None:
    rendered = renders["mtls-generated"]  # topology service
    deployment = rendered.get("Deployment", EXTENDER)
    assert deployment["spec"]["replicas"] == 2
    assert deployment["spec"]["strategy"]["rollingUpdate"] == {"maxSurge": 1, "maxUnavailable": 0}
    pod = deployment["spec"]["template"]["spec"]
    hard = [c for c in pod["topologySpreadConstraints"] if c["whenUnsatisfiable"] == "DoNotSchedule"]
    assert [c["topologyKey"] for c in hard] == ["kubernetes.io/hostname"]
    assert hard[0]["nodeTaintsPolicy"] == "Honor"
    anti = pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert anti[0]["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    budget = rendered.get("PodDisruptionBudget", EXTENDER)
    assert budget["spec"]["maxUnavailable"] == 1
    assert budget["spec"]["selector"] == deployment["spec"]["selector"]
    assert pod["terminationGracePeriodSeconds"] > 10  # above --shutdown-timeout=10
    assert "--shutdown-timeout=10" in container(deployment, "extender")["args"]


def test_pod_namespace_comes_from_the_downward_api(renders: dict[str, Rendered]) -> None:
    env = {e["name"]: e for e in the_extender_container(renders["default"], "sidecar")["env"]}
    assert env["POD_NAMESPACE"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}


@pytest.mark.parametrize("scenario", sorted(CI))
def test_config_flag_names_the_mounted_config_map_key(renders: dict[str, Rendered], scenario: str) -> None:
    deployment = extender_workload(renders[scenario], topology_of(scenario))
    extender = container(deployment, "extender")
    assert extender["args"][:2] == ["serve", "--in-cluster"]
    (config_arg,) = [a for a in extender["args"] if a.startswith("--config=")]
    path = Path(config_arg.removeprefix("--config="))
    mount = next(m for m in extender["volumeMounts"] if Path(m["mountPath"]) == path.parent)
    volume = next(v for v in deployment["spec"]["template"]["spec"]["volumes"] if v["name"] == mount["name"])
    config_map = renders[scenario].get("ConfigMap", volume["configMap"]["name"])
    assert path.name in config_map["data"]


@pytest.mark.parametrize("scenario", sorted(CI))
def test_tls_flags_match_mounted_secrets(renders: dict[str, Rendered], scenario: str) -> None:
    deployment = extender_workload(renders[scenario], topology_of(scenario))
    args = container(deployment, "extender")["args"]
    mounts = {m["mountPath"]: m["name"] for m in container(deployment, "extender")["volumeMounts"]}
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    flags = {a.split("=", 1)[0]: a.split("=", 1)[1] for a in args if a.startswith("--") and "=" in a}
    tls_flags = ("--tls-cert-file", "--tls-key-file", "--client-ca-file")
    expected = tls_flags if is_mtls(scenario) else tls_flags[:2] if is_tls(scenario) else ()
    assert tuple(f for f in tls_flags if f in flags) == expected
    for flag in expected:
        path = Path(flags[flag])
        volume = volumes[mounts[str(path.parent)]]
        assert path.name in [item["path"] for item in volume["secret"]["items"]]
    if is_mtls(scenario):
        client_ca = volumes[mounts[str(Path(flags["--client-ca-file"]).parent)]]
        # The extender gets only the CA from the scheduler's client Secret, never its key.
        assert [item["key"] for item in client_ca["secret"]["items"]] == ["ca.crt"]


@pytest.mark.parametrize("scenario", sorted(CI))
def test_checksum_annotations_roll_the_pods(renders: dict[str, Rendered], scenario: str) -> None:
    topology = topology_of(scenario)
    annotations = extender_workload(renders[scenario], topology)["spec"]["template"]["metadata"]["annotations"]
    # In the scheduler's pods, checksum/config is the scheduler's own configuration.
    prefix = "checksum/extender-" if topology == "sidecar" else "checksum/"
    assert re.fullmatch(r"[0-9a-f]{64}", annotations[f"{prefix}config"])
    assert (f"{prefix}tls" in annotations) == is_tls(scenario)


def test_config_change_changes_the_checksum_and_nothing_else_does(helm: Helm) -> None:
    def checksum(set_values: dict[str, str]) -> str:
        deployment = helm.template(set_values=set_values).get("Deployment", SCHEDULER)
        value: str = deployment["spec"]["template"]["metadata"]["annotations"]["checksum/extender-config"]
        return value

    base = checksum({})
    assert checksum({"config.namespaces.payments.mode": "enforce"}) != base
    assert checksum({"replicaCount": "3"}) == base


# -- Service and RBAC -------------------------------------------------------------


@pytest.mark.parametrize("scenario", sorted(name for name in CI if is_loopback(name)))
def test_loopback_topologies_have_a_metrics_service_only(renders: dict[str, Rendered], scenario: str) -> None:
    rendered = renders[scenario]
    service = rendered.get("Service", EXTENDER)
    assert [p["name"] for p in service["spec"]["ports"]] == ["metrics"]
    assert service["spec"]["ports"][0]["targetPort"] == "probe"
    assert "sessionAffinity" not in service["spec"]
    assert service["spec"]["publishNotReadyAddresses"] is True  # the not-ready alert reads unready pods too
    assert "hugepage-extender.io/url" not in (service["metadata"].get("annotations") or {})
    workload = extender_workload(rendered, topology_of(scenario))
    assert service["spec"]["selector"] == workload["spec"]["selector"]["matchLabels"]
    assert [s["metadata"]["name"] for s in rendered.all("Service")] == [EXTENDER]


@pytest.mark.parametrize("scenario", sorted(name for name in CI if not is_loopback(name)))
def test_service_keeps_one_scheduler_on_one_replica(renders: dict[str, Rendered], scenario: str) -> None:
    service = renders[scenario].get("Service", EXTENDER)
    assert service["spec"]["sessionAffinity"] == "ClientIP"
    assert service["spec"]["sessionAffinityConfig"]["clientIP"]["timeoutSeconds"] > 0
    ports = {p["name"]: p for p in service["spec"]["ports"]}
    assert set(ports) == {"https" if is_tls(scenario) else "http", "metrics"}
    if is_own(scenario):
        assert service["spec"]["clusterIP"] == values_of(scenario)["service"]["clusterIP"]
    # kubectl hugepages --extender-service reads the verbs' URL here: the scheduler's urlPrefix.
    scheduler_config = renders[scenario].get("ConfigMap", SCHEDULER)["data"]["scheduler-config.yaml"]
    url = yaml.safe_load(scheduler_config)["extenders"][0]["urlPrefix"]
    assert service["metadata"]["annotations"]["hugepage-extender.io/url"] == url


@pytest.mark.parametrize("scenario", sorted(CI))
def test_extender_cluster_role_is_least_privilege(renders: dict[str, Rendered], scenario: str) -> None:
    rules = renders[scenario].get("ClusterRole", EXTENDER)["rules"]
    granted = {
        (group, resource, verb)
        for rule in rules
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
    expected = {("", r, v) for r in ("nodes", "pods") for v in ("get", "list", "watch")}
    expected |= {("hugepage-extender.io", "hugepagenodereports", v) for v in ("get", "list", "watch")}
    expected |= {(g, "events", v) for g in ("", "events.k8s.io") for v in ("create", "patch")}
    if is_bind(scenario):
        expected.add(("", "pods/binding", "create"))
    expected.add(("", "pods", "patch"))  # lifting its gate, narrowed by the nudge policy (gates on or off)
    assert granted == expected
    assert all("resourceNames" not in rule for rule in rules)
    binding = renders[scenario].get("ClusterRoleBinding", EXTENDER)
    assert binding["roleRef"]["name"] == EXTENDER
    # The sidecar runs as its pod's ServiceAccount, the scheduler's.
    account = SCHEDULER if topology_of(scenario) == "sidecar" else EXTENDER
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": account, "namespace": NAMESPACE}]


@pytest.mark.parametrize("scenario", sorted(CI))
def test_gates_are_the_extenders_gate_added_with_gates_on_and_lifted_either_way(
    renders: dict[str, Rendered], scenario: str
) -> None:
    """gates.enabled: the marker policy adds extender.core.gates.GATE; on or off, the extender lifts it (its
    default, no flag) and the nudge policy lets it remove that gate: a pod gated before gates were switched
    off is never stranded."""
    on = effective(scenario)["gates"]["enabled"]
    rendered = renders[scenario]
    mutations = [m for d in rendered.all("MutatingAdmissionPolicy") for m in d["spec"]["mutations"]]
    added = [m["applyConfiguration"]["expression"] for m in mutations if m["patchType"] == "ApplyConfiguration"]
    checks = [v["expression"] for d in rendered.all("ValidatingAdmissionPolicy") for v in d["spec"]["validations"]]
    args = the_extender_container(rendered, topology_of(scenario))["args"]
    assert not any("lift-gates" in arg for arg in args)
    # Own mode before scheduler.own.active renders no marker policy: nothing is routed, nothing gated.
    marks = bool(rendered.all("MutatingAdmissionPolicy"))
    assert any(f"schedulingGates{{name: '{GATE}'}}" in expression for expression in added) is (on and marks)
    assert any("variables.gateLifted" in expression for expression in checks)


def adds_the_gate(rendered: Rendered) -> bool:
    """Whether the marker policy gives the pods it routes to the enforce entry the extender's gate."""
    mutations = [m for d in rendered.all("MutatingAdmissionPolicy") for m in d["spec"]["mutations"]]
    return any(
        f"schedulingGates{{name: '{GATE}'}}" in m["applyConfiguration"]["expression"]
        for m in mutations
        if m["patchType"] == "ApplyConfiguration"
    )


def test_the_default_install_gates_the_pods_of_enforcing_namespaces(helm: Helm) -> None:
    """gates.enabled is on by default (decision 0007); ci/gates-off-values.yaml is the explicit way back."""
    assert yaml.safe_load((CHART / "values.yaml").read_text())["gates"]["enabled"] is True
    assert adds_the_gate(helm.template())
    assert adds_the_gate(helm.template(set_values={"config.namespaces.payments.mode": "enforce"}))
    assert not adds_the_gate(helm.template(values=[CI["gates-off"]]))


def test_an_upgrade_reusing_the_values_of_a_release_made_before_gates_renders_the_gate(
    helm: Helm, tmp_path: Path
) -> None:
    """`helm upgrade --reuse-values` renders with the defaults of the release's own chart, not this one's
    (Helm 3, pkg/action/upgrade.go reuseValues: ``chart.Values = oldVals``): a release made by a chart
    without the ``gates`` key has none. Its marker policy still renders, with the gate (the default)."""
    chart = tmp_path / "hugepage-extender"
    shutil.copytree(CHART, chart)
    defaults = yaml.safe_load((chart / "values.yaml").read_text())
    del defaults["gates"]
    (chart / "values.yaml").write_text(yaml.safe_dump(defaults))
    assert adds_the_gate(helm.template(chart=chart, set_values={"config.defaults.mode": "enforce"}))


def leader_lease_of(scenario: str) -> str:
    """The Lease the extender follows to lift gates only beside its holder ("": none, every replica lifts):
    the secondary scheduler's own in the sidecar, the cluster scheduler's beside it, none behind a Service."""
    values, topology = effective(scenario), topology_of(scenario)
    if topology == "sidecar":
        return f"{NAMESPACE}/{SCHEDULER}" if values["scheduler"]["leaderElection"]["enabled"] else ""
    return str(values["scheduler"]["own"]["leaderLease"]) if topology == "controlPlane" else ""


def assert_lifts_beside_the_lease_holder(rendered: Rendered, topology: str, lease: str) -> None:
    args = the_extender_container(rendered, topology)["args"]
    assert [arg for arg in args if arg.startswith("--leader-lease")] == ([f"--leader-lease={lease}"] if lease else [])
    name = f"{EXTENDER}-leader-lease"
    if not lease:
        assert not rendered.has("Role", name)
        assert not rendered.has("RoleBinding", name)
        return
    namespace, lease_name = lease.split("/")
    role, binding = rendered.get("Role", name), rendered.get("RoleBinding", name)
    assert role["metadata"]["namespace"] == binding["metadata"]["namespace"] == namespace
    # That one Lease, read only: its list and watch select it by name (extender/kube/lease.py).
    assert role["rules"] == [
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "resourceNames": [lease_name],
            "verbs": ["get", "list", "watch"],
        }
    ]
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name}
    account = SCHEDULER if topology == "sidecar" else EXTENDER
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": account, "namespace": NAMESPACE}]
    if topology == "sidecar":  # the Lease the scheduler beside it elects its leader with
        election = scheduler_config(rendered)["leaderElection"]
        assert (election["resourceNamespace"], election["resourceName"]) == (namespace, lease_name)


@pytest.mark.parametrize("scenario", sorted(CI))
def test_the_extender_lifts_gates_only_beside_the_scheduler_that_holds_the_lease(
    renders: dict[str, Rendered], scenario: str
) -> None:
    assert_lifts_beside_the_lease_holder(renders[scenario], topology_of(scenario), leader_lease_of(scenario))


@pytest.mark.parametrize(
    ("set_values", "topology", "lease"),
    [
        ({"scheduler.leaderElection.enabled": "false", "scheduler.replicaCount": "1"}, "sidecar", ""),
        ({"scheduler.mode": "own"}, "controlPlane", "kube-system/kube-scheduler"),
        (
            {"scheduler.mode": "own", "scheduler.own.leaderLease": "sched/my-scheduler"},
            "controlPlane",
            "sched/my-scheduler",
        ),
        ({"scheduler.mode": "own", "scheduler.own.leaderLease": ""}, "controlPlane", ""),
        ({"topology": "service"}, "service", ""),
    ],
)
def test_which_lease_the_extender_follows(helm: Helm, set_values: dict[str, str], topology: str, lease: str) -> None:
    assert_lifts_beside_the_lease_holder(helm.template(set_values=set_values), topology, lease)


# -- the scheduler ----------------------------------------------------------------


@pytest.mark.parametrize("scenario", sorted(CI))
def test_scheduler_config_is_wired_for_the_extender(renders: dict[str, Rendered], scenario: str) -> None:
    config = scheduler_config(renders[scenario])
    assert config["apiVersion"] == "kubescheduler.config.k8s.io/v1"
    assert config["kind"] == "KubeSchedulerConfiguration"
    if is_own(scenario):
        assert config["percentageOfNodesToScore"] == 0  # adaptive: docs/performance.md
        # The cluster's scheduler's profiles, the ones the marker policy marks pods of.
        assert config["profiles"] == [{"schedulerName": "default-scheduler"}]
    else:
        (profile,) = config["profiles"]
        assert profile["schedulerName"] == values_of(scenario).get("scheduler", {}).get(
            "schedulerName", "hugepage-scheduler"
        )
        assert profile["percentageOfNodesToScore"] == 0
    extender = the_extender(config)
    assert extender["nodeCacheCapable"] is True
    assert extender["filterVerb"] == "filter"
    assert extender["prioritizeVerb"] == "prioritize"
    assert extender["weight"] >= 1
    assert re.fullmatch(r"[0-9]+(ms|s|m)", extender["httpTimeout"])
    assert ("bindVerb" in extender) == is_bind(scenario)
    if is_bind(scenario):
        assert extender["bindVerb"] == "bind"
    scheme = "https" if is_tls(scenario) else "http"
    if is_loopback(scenario):
        assert extender["urlPrefix"] == f"{scheme}://127.0.0.1:8888"
    elif is_own(scenario):
        cluster_ip = values_of(scenario)["service"]["clusterIP"]
        assert extender["urlPrefix"] == f"{scheme}://{cluster_ip}:8888"
    else:
        assert extender["urlPrefix"] == f"{scheme}://{EXTENDER}.{NAMESPACE}.svc:8888"


@pytest.mark.parametrize("scenario", sorted(CI))
def test_https_always_comes_with_the_ca(renders: dict[str, Rendered], scenario: str) -> None:
    extender = the_extender(scheduler_config(renders[scenario]))
    if not extender.get("enableHTTPS"):
        assert not is_tls(scenario)
        assert "tlsConfig" not in extender
        return
    tls = extender["tlsConfig"]
    assert "insecure" not in tls
    ca = base64.b64decode(tls["caData"], validate=True).decode()
    assert ca.startswith("-----BEGIN CERTIFICATE-----")
    if is_loopback(scenario):
        assert "serverName" not in tls  # the scheduler checks 127.0.0.1, which the certificate names
    else:
        assert tls["serverName"] == f"{EXTENDER}.{NAMESPACE}.svc"
    secret_name = effective(scenario)["tls"].get("existingSecret") or f"{EXTENDER}-tls"
    rendered = renders[scenario]
    if rendered.has("Secret", secret_name):
        secret_ca = base64.b64decode(rendered.get("Secret", secret_name)["data"]["ca.crt"]).decode()
        assert secret_ca == ca
    else:
        assert ca == values_of(scenario)["tls"]["caBundle"]
    assert ("certFile" in tls) == is_mtls(scenario)
    assert ("keyFile" in tls) == is_mtls(scenario)
    assert "keyData" not in tls  # private keys stay in Secrets, never in a ConfigMap


@pytest.mark.parametrize("scenario", sorted(CI))
def test_enforcing_namespaces_fail_closed_and_shadow_fails_open_in_every_scenario(
    renders: dict[str, Rendered], scenario: str
) -> None:
    """Decision 0005: the enforce entry is never ignorable and is the only binder; the shadow entry
    is ignorable, filters only (shadow scores are neutral) and never binds."""
    enforce, shadow = entries(scheduler_config(renders[scenario]))
    assert enforce["ignorable"] is False
    assert shadow["ignorable"] is True
    assert "bindVerb" not in shadow
    assert "prioritizeVerb" not in shadow
    assert shadow["filterVerb"] == "filter"
    for key in ("urlPrefix", "httpTimeout", "nodeCacheCapable", "enableHTTPS", "tlsConfig"):
        assert enforce.get(key) == shadow.get(key), key


OWN = {"scheduler.mode": "own"}


@pytest.mark.parametrize(
    ("set_values", "bind"),
    [
        pytest.param({}, True, id="secondary-default-on"),
        pytest.param({"bind.enabled": "null"}, True, id="secondary-null-on"),
        pytest.param({"bind.enabled": "false"}, False, id="secondary-explicit-off"),
        pytest.param({"bind.enabled": "true"}, True, id="secondary-explicit-on"),
        pytest.param(OWN, False, id="own-default-off"),
        pytest.param({**OWN, "bind.enabled": "true"}, True, id="own-explicit-on"),
        pytest.param({**OWN, "bind.enabled": "false"}, False, id="own-explicit-off"),
    ],
)
def test_bind_defaults_by_mode_and_everything_follows_it(helm: Helm, set_values: dict[str, str], bind: bool) -> None:
    """Decision 0004: the bind verb is on with the secondary scheduler, off in own mode; an explicit
    bind.enabled wins. The scheduler's bindVerb, the extender's flags and its RBAC all agree."""
    rendered = helm.template(set_values=set_values)
    assert ("bindVerb" in the_extender(scheduler_config(rendered))) is bind
    args = the_extender_container(rendered, "controlPlane" if "scheduler.mode" in set_values else "sidecar")["args"]
    assert ("--enable-bind" in args) is bind
    assert any(a.startswith("--bind-timeout-seconds=") for a in args) is bind
    rules = rendered.get("ClusterRole", EXTENDER)["rules"]
    assert any("pods/binding" in rule["resources"] for rule in rules) is bind


def test_the_kind_suites_values_render_with_the_bind_verb(helm: Helm) -> None:
    # e2e/kind/run.sh installs these; a mistake in them would otherwise show only minutes into a kind run.
    rendered = helm.template(values=[ROOT / "e2e" / "kind" / "values.yaml"])
    extender = the_extender(scheduler_config(rendered))
    assert extender["bindVerb"] == "bind"
    assert extender["ignorable"] is False  # the enforce entry
    assert extender["urlPrefix"] == "http://127.0.0.1:8888"  # the sidecar, the chart's default
    assert "--enable-bind" in the_extender_container(rendered, "sidecar")["args"]


def test_default_bind_lets_an_enforcing_filter_admit_every_node(helm: Helm) -> None:
    # sampleSize 0 with enforce needs the bind verb (a hold covers at most 16 nodes): on by default now.
    rendered = helm.template(set_values={"config.defaults.mode": "enforce", "config.defaults.sampleSize": "0"})
    assert the_extender(scheduler_config(rendered))["bindVerb"] == "bind"


@pytest.mark.parametrize("scenario", sorted(CI))
def test_secondary_scheduler_deployment(renders: dict[str, Rendered], scenario: str) -> None:
    rendered = renders[scenario]
    if is_own(scenario):
        roles = sorted(r["metadata"]["name"] for r in rendered.all("Role"))
        lease_reader = [f"{EXTENDER}-leader-lease"] if leader_lease_of(scenario) else []
        assert roles == [*lease_reader, f"{EXTENDER}-nudge"]  # no scheduler roles
        own_deployments = [EXTENDER] if topology_of(scenario) == "service" else []
        assert [d["metadata"]["name"] for d in rendered.all("Deployment")] == own_deployments
        bindings = [b["metadata"]["name"] for b in rendered.all("ClusterRoleBinding")]
        assert sorted(bindings) == [EXTENDER, f"{EXTENDER}-node-agent"]  # no scheduler bindings
        return
    deployment = rendered.get("Deployment", SCHEDULER)
    pod = deployment["spec"]["template"]["spec"]
    assert "schedulerName" not in pod  # the default scheduler places the scheduler itself
    scheduler = container(deployment, "kube-scheduler")
    assert scheduler["image"] == "registry.k8s.io/kube-scheduler:v1.37.2"
    (config_arg,) = [a for a in scheduler["command"] if a.startswith("--config=")]
    path = Path(config_arg.removeprefix("--config="))
    mount = next(m for m in scheduler["volumeMounts"] if Path(m["mountPath"]) == path.parent)
    volume = next(v for v in pod["volumes"] if v["name"] == mount["name"])
    assert volume["configMap"]["name"] == SCHEDULER
    assert path.name == "scheduler-config.yaml"
    security = scheduler["securityContext"]
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"]["drop"] == ["ALL"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert scheduler["livenessProbe"]["httpGet"]["scheme"] == "HTTPS"
    assert pod["serviceAccountName"] == SCHEDULER
    if is_mtls(scenario):
        extender = the_extender(scheduler_config(rendered))
        cert = Path(extender["tlsConfig"]["certFile"])
        client = next(m for m in scheduler["volumeMounts"] if Path(m["mountPath"]) == cert.parent)
        client_volume = next(v for v in pod["volumes"] if v["name"] == client["name"])
        items = [item["path"] for item in client_volume["secret"]["items"]]
        assert sorted(items) == ["tls.crt", "tls.key"]


@pytest.mark.parametrize("scenario", sorted(name for name in CI if not is_own(name)))
def test_secondary_scheduler_rbac(renders: dict[str, Rendered], scenario: str) -> None:
    rendered = renders[scenario]
    subject = {"kind": "ServiceAccount", "name": SCHEDULER, "namespace": NAMESPACE}
    cluster_roles = {b["roleRef"]["name"] for b in rendered.all("ClusterRoleBinding") if b["subjects"] == [subject]}
    sidecar = {EXTENDER} if topology_of(scenario) == "sidecar" else set()  # the extender's role, for its sidecar
    assert cluster_roles == {"system:kube-scheduler", "system:volume-scheduler"} | sidecar
    reader = rendered.get("RoleBinding", f"{SCHEDULER}-authentication-reader")
    assert reader["metadata"]["namespace"] == "kube-system"
    assert reader["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": "extension-apiserver-authentication-reader",
    }
    lease_role = rendered.get("Role", f"{SCHEDULER}-leader-election")
    lease = scheduler_config(rendered)["leaderElection"]
    assert lease["resourceNamespace"] == NAMESPACE
    named = [r for r in lease_role["rules"] if "resourceNames" in r]
    assert named[0]["resourceNames"] == [lease["resourceName"]]
    assert "update" in named[0]["verbs"]


# -- optional objects ---------------------------------------------------------------


def test_monitoring_objects(renders: dict[str, Rendered]) -> None:
    rendered = renders["monitoring"]
    monitor = rendered.get("ServiceMonitor", EXTENDER)
    (endpoint,) = monitor["spec"]["endpoints"]
    service_ports = {p["name"] for p in rendered.get("Service", EXTENDER)["spec"]["ports"]}
    assert endpoint["port"] in service_ports
    assert endpoint["path"] == "/metrics"
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    dashboard = rendered.get("ConfigMap", f"{EXTENDER}-dashboard")
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    json.loads(dashboard["data"]["hugepage-extender.json"])
    # The metrics Service selects the pods that carry the extenders: the scheduler's.
    selector = rendered.get("Service", EXTENDER)["spec"]["selector"]
    assert selector == rendered.get("Deployment", SCHEDULER)["spec"]["selector"]["matchLabels"]
    assert not renders["default"].all("ServiceMonitor")
    assert not renders["default"].has("ConfigMap", f"{EXTENDER}-dashboard")


def test_network_policy_admits_only_the_scheduler_on_the_verbs(renders: dict[str, Rendered]) -> None:
    policy = renders["mtls-generated"].get("NetworkPolicy", EXTENDER)
    verbs, probes = policy["spec"]["ingress"]
    assert verbs["ports"] == [{"port": "extender", "protocol": "TCP"}]
    scheduler_labels = renders["mtls-generated"].get("Deployment", SCHEDULER)["spec"]["selector"]["matchLabels"]
    assert verbs["from"] == [{"podSelector": {"matchLabels": scheduler_labels}}]
    assert probes["ports"] == [{"port": "probe", "protocol": "TCP"}]
    own = renders["own-service"].get("NetworkPolicy", EXTENDER)
    assert own["spec"]["ingress"][0]["from"] == [{"ipBlock": {"cidr": "172.18.0.0/16"}}]
    # On loopback nothing else reaches the verbs: no policy, whatever networkPolicy.enabled says.
    for scenario in (name for name in CI if is_loopback(name)):
        assert not renders[scenario].all("NetworkPolicy"), scenario


# -- refusals: combinations the schema cannot see -----------------------------------


@pytest.mark.parametrize(
    ("set_values", "message"),
    [
        pytest.param(
            {"scheduler.mode": "own", "topology": "service"},
            "scheduler.mode=own with topology=service: the cluster's kube-scheduler runs on the host network",
            id="own-service-needs-cluster-ip",
        ),
        pytest.param(
            {"tls.clientAuth.enabled": "true"},
            "tls.clientAuth.enabled needs tls.enabled",
            id="mtls-needs-tls",
        ),
        pytest.param(
            {"scheduler.mode": "own", "topology": "sidecar"},
            "topology=sidecar puts the extender in the chart's secondary scheduler pods",
            id="sidecar-needs-the-secondary-scheduler",
        ),
        pytest.param(
            {"topology": "controlPlane"},
            "topology=controlPlane runs the extender beside the cluster's own kube-scheduler",
            id="control-plane-needs-own-mode",
        ),
        pytest.param(
            {"tls.enabled": "true", "tls.source": "values"},
            "tls.ca is required with tls.source=values",
            id="values-need-a-ca",
        ),
        pytest.param(
            {"tls.enabled": "true", "tls.source": "secret"},
            "tls.existingSecret is required with tls.source=secret",
            id="secret-needs-a-name",
        ),
        pytest.param(
            {"tls.enabled": "true", "tls.source": "secret", "tls.existingSecret": "serving"},
            "no CA for the scheduler (caData). Set tls.caBundle",
            id="secret-needs-a-ca",
        ),
        pytest.param(
            {"extender.shutdownTimeoutSeconds": "25"},
            "extender.drainSeconds (5) plus extender.shutdownTimeoutSeconds (25) must be under"
            " terminationGracePeriodSeconds (30)",
            id="drain-within-grace",
        ),
        pytest.param(
            {"bind.enabled": "false", "config.defaults.mode": "enforce", "config.defaults.sampleSize": "0"},
            "config.defaults.sampleSize: 0 with mode enforce admits more nodes than a hold covers",
            id="every-node-needs-bind",
        ),
        pytest.param(
            {
                "bind.enabled": "false",
                "config.namespaces.vms.mode": "enforce",
                "config.namespaces.vms.sampleSize": "17",
            },
            "config.namespaces.vms.sampleSize: 17 with mode enforce",
            id="k-above-16-needs-bind",
        ),
        pytest.param(
            {**OWN, "config.namespaces.vms.mode": "enforce", "config.namespaces.vms.sampleSize": "0"},
            "config.namespaces.vms.sampleSize: 0 with mode enforce",
            id="own-mode-k0-needs-bind",
        ),
        pytest.param(
            {"ports.probe": "8888"},
            "ports.extender and ports.probe must differ",
            id="distinct-ports",
        ),
        pytest.param(
            {"bind.enabled": "true", "bind.timeoutSeconds": "2"},
            "bind.timeoutSeconds (2) must be under scheduler.extender.httpTimeout (2s)",
            id="bind-within-http-timeout",
        ),
        pytest.param(
            {"scheduler.extender.httpTimeout": "1s"},
            "bind.timeoutSeconds (1.5) must be under scheduler.extender.httpTimeout (1s)",
            id="default-bind-within-http-timeout",
        ),
        pytest.param(
            {"scheduler.mode": "own", "topology": "service", "service.clusterIP": "10.96.0.88"},
            "list them in networkPolicy.extraExtenderFrom",
            id="own-network-policy-needs-peers",
        ),
    ],
)
def test_inconsistent_values_fail_with_a_clear_message(helm: Helm, set_values: dict[str, str], message: str) -> None:
    with pytest.raises(HelmError) as failure:
        helm.template(set_values=set_values)
    assert message in str(failure.value)


def test_scheduler_newer_than_the_cluster_is_refused(helm: Helm) -> None:
    with pytest.raises(HelmError) as failure:
        helm.template(extra=["--kube-version", "v1.36.1"])
    assert "scheduler.image.tag v1.37.2 is newer than the cluster (v1.36.1)" in str(failure.value)
    assert "set scheduler.image.tag to v1.36.x" in str(failure.value)
    older = helm.template(extra=["--kube-version", "v1.36.1"], set_values={"scheduler.image.tag": "v1.36.1"})
    assert container(older.get("Deployment", SCHEDULER), "kube-scheduler")["image"].endswith(":v1.36.1")


def test_clusters_without_mutating_admission_policy_are_refused(helm: Helm) -> None:
    with pytest.raises(HelmError) as failure:
        helm.template(extra=["--kube-version", "v1.35.3"], set_values={"scheduler.image.tag": "v1.35.3"})
    assert "kubeVersion" in str(failure.value) or ">=1.36.0-0" in str(failure.value)


def test_own_mode_reaches_an_ipv6_cluster_ip_in_brackets(helm: Helm) -> None:
    rendered = helm.template(
        set_values={
            "scheduler.mode": "own",
            "topology": "service",
            "service.clusterIP": "fd00:10:96::88",
            "networkPolicy.extraExtenderFrom[0].ipBlock.cidr": "fd00::/64",
        }
    )
    assert the_extender(scheduler_config(rendered))["urlPrefix"] == "https://[fd00:10:96::88]:8888"


def test_image_digest_wins_over_tag(helm: Helm) -> None:
    digest = "sha256:" + "ab" * 32
    rendered = helm.template(set_values={"image.digest": digest, "scheduler.image.digest": digest})
    assert the_extender_container(rendered, "sidecar")["image"] == (
        f"ghcr.io/hugepage-extender/hugepage-extender@{digest}"
    )
    assert container(rendered.get("Deployment", SCHEDULER), "kube-scheduler")["image"] == (
        f"registry.k8s.io/kube-scheduler@{digest}"
    )


def test_default_image_is_the_app_version(renders: dict[str, Rendered]) -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    image = the_extender_container(renders["default"], "sidecar")["image"]
    assert image == f"ghcr.io/hugepage-extender/hugepage-extender:{chart['appVersion']}"


# -- NOTES.txt ----------------------------------------------------------------------


def render_notes(helm: Helm, chart: Path, values: list[Path], set_values: dict[str, str] | None = None) -> str:
    rendered = helm.template(chart=chart, values=values, set_values=set_values or {})
    notes: str = rendered.get("ConfigMap", "rendered-notes")["data"]["notes"]
    return notes


def test_notes_tell_the_next_step_secondary(helm: Helm, notes_chart: Path) -> None:
    notes = render_notes(helm, notes_chart, [CI["namespaces"]])
    assert "Topology: sidecar (a container in each scheduler pod)" in notes
    assert "http://127.0.0.1:8888" in notes  # its own extender, on loopback
    assert f"get lease {SCHEDULER}" in notes  # /debug/state: port-forward to the leader
    assert "port-forward pod/${leader%%_*} 8888" in notes
    assert "schedulerName: hugepage-scheduler-1g" in notes
    assert "per-namespace: payments=enforce vms=enforce" in notes
    assert "When the extender cannot answer: pods of enforcing namespaces wait" in notes
    assert "Bind verb (the extender binds the pods the scheduler places): on" in notes
    assert "--set config.namespaces.<namespace>.mode=enforce" in notes
    snippet = yaml.safe_load(notes.split("consults the extender with:\n", 1)[1].split("\n\n", 1)[0])
    assert snippet["extenders"][0]["nodeCacheCapable"] is True
    assert snippet["extenders"][0]["weight"] == 5
    assert snippet["extenders"][0]["bindVerb"] == "bind"
    assert snippet["extenders"][1]["ignorable"] is True


def test_notes_say_a_config_change_rolls_the_sidecar_schedulers(helm: Helm, notes_chart: Path) -> None:
    # With the sidecar every config change rolls the scheduler's pods: the notes say so.
    sidecar = render_notes(helm, notes_chart, [CI["default"]])
    assert "the scheduler\n   pods roll, since they carry the extenders" in sidecar


def test_notes_tell_the_next_step_own(helm: Helm, notes_chart: Path) -> None:
    notes = render_notes(helm, notes_chart, [CI["own-scheduler"]])
    # Nothing is marked until the operator says the cluster's scheduler runs the configuration.
    assert "No pod is marked yet (scheduler.own.active=false)" in notes
    assert "--reuse-values --set scheduler.own.active=true" in notes
    assert "Topology: controlPlane (a DaemonSet on the control-plane nodes, host network)" in notes
    assert f"rollout status daemonset/{EXTENDER}" in notes
    assert "http://127.0.0.1:8888" in notes
    assert f"get configmap {SCHEDULER}" in notes
    assert "client-tls" not in notes  # no certificates on loopback by default
    assert "get lease kube-scheduler" in notes


def test_notes_tell_the_next_step_own_behind_a_service(helm: Helm, notes_chart: Path) -> None:
    notes = render_notes(helm, notes_chart, [CI["own-service"]])
    assert "https://10.96.0.88:8888" in notes
    assert f"get configmap {SCHEDULER}" in notes
    assert f"get secret {EXTENDER}-client-tls" in notes
    assert "the extender's own pods never do, so they start while it is down" in notes
    assert "--set scheduler.own.active=false" in notes
    assert "Bind verb (the extender binds the pods the scheduler places): off" in notes
    snippet = yaml.safe_load(notes.split("extenders section:\n", 1)[1].split("\n\n", 1)[0])
    assert snippet["extenders"][0]["tlsConfig"]["caData"]


def test_percentage_of_nodes_to_score_is_a_value(helm: Helm) -> None:
    own = helm.template(set_values={"scheduler.mode": "own", "scheduler.percentageOfNodesToScore": "100"})
    assert scheduler_config(own)["percentageOfNodesToScore"] == 100
    secondary = helm.template(set_values={"scheduler.percentageOfNodesToScore": "50"})
    assert scheduler_config(secondary)["profiles"][0]["percentageOfNodesToScore"] == 50
    with pytest.raises(HelmError):
        helm.template(set_values={"scheduler.percentageOfNodesToScore": "101"})


# -- fail closed where a namespace enforces (decision 0005) -------------------------------


def policy_variables(rendered: Rendered, schedulers: str = "['hugepage-scheduler']") -> dict[str, str]:
    policy = rendered.get("MutatingAdmissionPolicy", f"{EXTENDER}-markers")
    assert policy["spec"]["failurePolicy"] == "Fail"
    conditions = {c["name"]: " ".join(c["expression"].split()) for c in policy["spec"]["matchConditions"]}
    assert conditions == {
        "not-the-extenders-own-namespace": f"request.namespace != '{NAMESPACE}'",
        # Only the extender's schedulers ignore the marker: any other would leave the pod Pending.
        "a-pod-of-the-extenders-schedulers": "(has(object.spec.schedulerName) ? object.spec.schedulerName : "
        f"'default-scheduler') in {schedulers}",
    }
    # Every marker the pod arrived with goes first (no opt-out), then its namespace's is added (then,
    # with gates.enabled, the gate: test_gates_are_the_extenders_gate_added_with_gates_on_and_lifted_either_way).
    removal, addition, *gate = policy["spec"]["mutations"]
    assert [m["patchType"] for m in gate] in ([], ["ApplyConfiguration"])
    assert removal["patchType"] == "JSONPatch"
    for field, marker, section in itertools.product(
        ("containers", "initContainers"), ("enforce", "shadow"), ("requests", "limits")
    ):
        path = f"'/spec/{field}/' + string(i) + '/resources/{section}/hugepage-extender.io~1{marker}'"
        assert path in removal["jsonPatch"]["expression"]
    assert addition["patchType"] == "ApplyConfiguration"
    return {v["name"]: " ".join(v["expression"].split()) for v in policy["spec"]["variables"]}


def test_the_marker_policy_marks_pods_by_their_namespaces_mode(renders: dict[str, Rendered]) -> None:
    # Shadow by default, payments and vms enforcing, vms sized by memory (its VM runtime's pods
    # only), 1 GiB pages.
    variables = policy_variables(renders["namespaces"], schedulers="['hugepage-scheduler-1g']")
    assert variables["mode"] == "request.namespace in ['payments','vms'] ? 'enforce' : 'shadow'"
    assert variables["memoryNamespace"] == "(request.namespace in ['vms'])"
    assert variables["memoryRuntimeClass"] == (
        "request.namespace in {'vms':'kata-qemu'} ? {'vms':'kata-qemu'}[request.namespace] : ''"
    )
    assert "object.spec.runtimeClassName == variables.memoryRuntimeClass" in variables["fromMemory"]
    assert "'hugepages-1Gi' in c.resources.requests" in variables["wantsPages"]
    # Enforcing by default, one namespace in shadow, one off.
    assert policy_variables(renders["enforce"])["mode"] == (
        "request.namespace in ['batch'] ? 'shadow' : request.namespace in ['legacy'] ? 'off' : 'enforce'"
    )


@pytest.mark.parametrize(
    ("set_values", "mode", "from_memory"),
    [
        pytest.param({}, "'shadow'", "(request.namespace in [])", id="shadow-everywhere"),
        # The RFC's deployment-wide knob sits between the defaults and a namespace's entry.
        pytest.param(
            {"extender.extraEnv.BEST_OF_K_HUGEPAGE_FIT_FILTER": "true"}, "'enforce'", None, id="env-knob-enforces"
        ),
        pytest.param(
            {"config.defaults.needFromMemory": "true", "config.namespaces.db.needFromMemory": "false"},
            None,
            "!(request.namespace in ['db'])",
            id="memory-everywhere-but-one",
        ),
    ],
)
def test_the_marker_policy_resolves_modes_as_the_extender_does(
    helm: Helm, set_values: dict[str, str], mode: str | None, from_memory: str | None
) -> None:
    variables = policy_variables(helm.template(set_values=set_values))
    if mode is not None:
        assert variables["mode"] == mode
    if from_memory is not None:
        assert variables["memoryNamespace"] == from_memory


def test_in_own_mode_no_pod_is_marked_until_the_operator_says_the_scheduler_runs_the_config(helm: Helm) -> None:
    """The cluster's scheduler ignores the marker only once it runs the rendered configuration:
    until ``scheduler.own.active`` says so, the chart renders no marker policy at all."""
    assert not helm.template(set_values=OWN).all("MutatingAdmissionPolicy")
    assert not helm.template(set_values=OWN).all("MutatingAdmissionPolicyBinding")
    active = helm.template(set_values={**OWN, "scheduler.own.active": "true"})
    policy_variables(active, schedulers="['default-scheduler']")
    assert active.get("MutatingAdmissionPolicyBinding", f"{EXTENDER}-markers")
    profiles = helm.template(
        extra=[
            "--set",
            "scheduler.mode=own",
            "--set",
            "scheduler.own.active=true",
            "--set-json",
            'scheduler.own.schedulerNames=["default-scheduler","batch"]',
        ]
    )
    policy_variables(profiles, schedulers="['default-scheduler','batch']")
    assert [p["schedulerName"] for p in scheduler_config(profiles)["profiles"]] == ["default-scheduler", "batch"]


@pytest.mark.parametrize(("scenario", "identity"), [("default", SCHEDULER), ("mtls-generated", EXTENDER)])
def test_the_nudge_may_patch_pods_of_its_own_namespace_only(
    renders: dict[str, Rendered], scenario: str, identity: str
) -> None:
    """The identity the extender runs as (the scheduler's with the sidecar) may patch pods of its own
    namespace; the policy narrows that to the nudge annotation, and matches updates only (with the
    sidecar the identity is the scheduler's, which deletes preemption's victims)."""
    rendered = renders[scenario]
    role = rendered.get("Role", f"{EXTENDER}-nudge")
    assert role["metadata"]["namespace"] == NAMESPACE
    assert role["rules"] == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["patch"]}]
    binding = rendered.get("RoleBinding", f"{EXTENDER}-nudge")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": identity, "namespace": NAMESPACE}]
    policy = rendered.get("ValidatingAdmissionPolicy", f"{EXTENDER}-nudge")
    assert policy["spec"]["failurePolicy"] == "Fail"
    (rule,) = policy["spec"]["matchConstraints"]["resourceRules"]
    assert rule["operations"] == ["UPDATE"]
    assert f"system:serviceaccount:{NAMESPACE}:{identity}" in policy["spec"]["matchConditions"][0]["expression"]
    nudge = {v["name"]: v["expression"] for v in policy["spec"]["variables"]}["nudge"]
    assert nudge == f"'{NUDGE_ANNOTATION}'"  # the one annotation the extender writes
    env = {e["name"]: e for e in the_extender_container(rendered, topology_of(scenario))["env"]}
    assert env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"


def test_every_page_size_guarded_is_in_the_config_and_marks_pods(helm: Helm) -> None:
    """``config.resourceNames`` replaces ``resourceName`` in the config file, and the marker policy
    routes a pod asking pages of any size guarded to the extender."""
    sizes = ["hugepages-2Mi", "hugepages-1Gi"]
    rendered = helm.template(
        extra=[
            "--set-json",
            f"config.resourceNames={json.dumps(sizes)}",
            "--set",
            "config.namespaces.vms.needFromMemoryResource=hugepages-1Gi",
        ]
    )
    config_map = rendered.get("ConfigMap", EXTENDER)
    document = yaml.safe_load(config_map["data"]["config.yaml"])
    assert document["resourceNames"] == sizes
    assert "resourceName" not in document
    wants = policy_variables(rendered)["wantsPages"]
    for size in sizes:
        assert f"'{size}' in c.resources.requests" in wants
        assert f"'{size}' in object.spec.resources.limits" in wants
    with pytest.raises(HelmError):
        helm.template(extra=["--set-json", 'config.resourceNames=["memory"]'])
