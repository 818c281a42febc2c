"""The chart's node agent: a hardened read-only DaemonSet, an identity that may write its own node's record only."""

from __future__ import annotations

import yaml

from .chartlib import CHART, NAMESPACE, RELEASE, Helm

AGENT = f"{RELEASE}-node-agent"


def test_the_agent_runs_on_every_node_reading_host_files_read_only(helm: Helm) -> None:
    rendered = helm.template()
    daemonset = rendered.get("DaemonSet", AGENT)
    assert daemonset["metadata"]["namespace"] == NAMESPACE
    pod = daemonset["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == AGENT
    assert pod["tolerations"] == [{"operator": "Exists"}]
    (container,) = pod["containers"]
    assert container["args"][:2] == ["node-agent", "--in-cluster"]
    assert {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}} in container["env"]
    security = container["securityContext"]
    assert security["allowPrivilegeEscalation"] is False
    assert security["readOnlyRootFilesystem"] is True
    assert security["privileged"] is False
    assert security["capabilities"] == {"drop": ["ALL"]}
    assert all(mount["readOnly"] is True for mount in container["volumeMounts"])
    assert {v["hostPath"]["path"] for v in pod["volumes"]} == {"/sys", "/var/lib/kubelet/pods"}
    assert "hostNetwork" not in pod
    # The host's PIDs, read-only through /proc (world-readable status and cgroup files): the pods'
    # own hugetlb mappings where the controller is off.
    assert pod["hostPID"] is True


def test_the_agent_may_create_and_patch_records_and_read_their_owner_and_nothing_else(helm: Helm) -> None:
    rendered = helm.template()
    records, owner = rendered.get("ClusterRole", AGENT)["rules"]
    assert records == {"apiGroups": ["hugepage-extender.io"], "resources": ["hugepagenodereports"],
                       "verbs": ["create", "patch"]}  # fmt: skip
    # The records are owned by the agent's admission policy (deleted with it): the agent reads its uid.
    assert owner == {"apiGroups": ["admissionregistration.k8s.io"], "resources": ["validatingadmissionpolicies"],
                     "resourceNames": [AGENT], "verbs": ["get"]}  # fmt: skip
    (agent,) = rendered.get("DaemonSet", AGENT)["spec"]["template"]["spec"]["containers"]
    assert f"--owner-policy={AGENT}" in agent["args"]
    binding = rendered.get("ClusterRoleBinding", AGENT)
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": AGENT, "namespace": NAMESPACE}]
    policy = rendered.get("ValidatingAdmissionPolicy", AGENT)["spec"]
    assert policy["failurePolicy"] == "Fail"
    (condition,) = policy["matchConditions"]
    assert condition["expression"] == f'request.userInfo.username == "system:serviceaccount:{NAMESPACE}:{AGENT}"'
    assert "authentication.kubernetes.io/node-name" in policy["variables"][0]["expression"]
    assert rendered.get("ValidatingAdmissionPolicyBinding", AGENT)["spec"] == {
        "policyName": AGENT,
        "validationActions": ["Deny"],
    }


def test_the_agent_can_live_in_a_privileged_namespace_of_its_own(helm: Helm) -> None:
    rendered = helm.template(set_values={"nodeAgent.namespace": "kube-system"})
    assert rendered.get("DaemonSet", AGENT)["metadata"]["namespace"] == "kube-system"
    assert rendered.get("ServiceAccount", AGENT)["metadata"]["namespace"] == "kube-system"
    (condition,) = rendered.get("ValidatingAdmissionPolicy", AGENT)["spec"]["matchConditions"]
    assert f"system:serviceaccount:kube-system:{AGENT}" in condition["expression"]
    assert rendered.get("Deployment", f"{RELEASE}-scheduler")["metadata"]["namespace"] == NAMESPACE


def test_disabled_renders_no_agent(helm: Helm) -> None:
    rendered = helm.template(set_values={"nodeAgent.enabled": "false"})
    assert not any("node-agent" in d["metadata"]["name"] for d in rendered.docs)


def test_the_crd_comes_from_crds_and_bounds_every_figure(helm: Helm) -> None:
    text = helm.template_text(extra=["--include-crds"])
    (crd,) = [d for d in yaml.safe_load_all(text) if d and d["kind"] == "CustomResourceDefinition"]
    assert crd["metadata"]["name"] == "hugepagenodereports.hugepage-extender.io"
    assert crd["spec"]["scope"] == "Cluster"
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["report"]
    figures = schema["properties"]["pageSizes"]["additionalProperties"]["properties"]
    for name in ("totalPages", "freePages", "outsidePages"):
        assert figures[name]["minimum"] == 0
    assert (CHART / "crds" / "hugepagenodereports.yaml").exists()
