"""The node agent on the real kube-apiserver and kube-scheduler.

- Least privilege, with the agent's real identity: a service-account token bound (TokenRequest)
  to a pod bound to a fake Node, so it carries the node-name claim the kubelet's tokens carry;
  the chart's RBAC and ValidatingAdmissionPolicy let it write its own node's record and nothing
  else (not another node's record, not Node objects).
- A node whose agent reports pages held outside pods gets no pod that would overflow it, and the
  scheduler's FailedScheduling event says why.
- The agent stopped: its record goes stale and the extender falls back to requests-only
  accounting, visibly (metrics, explain).
- needFromMemory pods never land on a node without a pool or with a zero pool.
"""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from kubernetes.dynamic import DynamicClient

from e2e.cluster.placement_support import (
    EXTENDER_REASON_INSUFFICIENT,
    RESOURCE,
    Cell,
    assert_stays_pending,
    metric_value,
    wait_for_event,
)
from e2e.controlplane import ControlPlane, ManagedProcess, node_manifest, wait_until
from extender.core.nodeagent.counters import KernelPool, PodPages, Source, size_report
from extender.core.nodeagent.record import NodeRecord
from extender.core.nodereport import GROUP, PLURAL, VERSION
from extender.shell.kube.events import REASON_NO_COMPATIBLE
from extender.shell.nodeagent.publish import ApiPublisher

pytestmark = pytest.mark.cluster

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "hugepage-extender"
MiB = 1 << 20
PAGE = 2 * MiB
HELD_OUTSIDE = f"Pod's {RESOURCE} request exceeds what pages held outside pods leave of the pool"
NO_POOL = f"Node has no {RESOURCE} pool"
NODE_CLAIM = "authentication.kubernetes.io/node-name"


# --------------------------------------------------------------------------- the chart's objects


def helm_template(plane: ControlPlane, release: str, namespace: str, *show_only: str) -> list[dict[str, Any]]:
    helm = plane.bin_dir / "helm"
    if not helm.exists():
        pytest.skip(f"no helm in {plane.bin_dir} (e2e/tools/build builds it)")
    args = [str(helm), "template", release, str(CHART), "--namespace", namespace, "--kube-version", "v1.37.2"]
    for template in show_only:
        args += ["--show-only", template]
    out = subprocess.run(args, check=True, capture_output=True, text=True, timeout=120).stdout
    return [doc for doc in yaml.safe_load_all(out) if doc]


@pytest.fixture
def agent_objects(control_plane: ControlPlane, report_crd: None, namespace: str) -> str:
    """The chart's agent ServiceAccount, ClusterRole(Binding), ValidatingAdmissionPolicy(Binding), applied
    as rendered for a release of this test's own in its namespace; the agent's ServiceAccount name."""
    release = f"na{uuid.uuid4().hex[:6]}"
    docs = helm_template(
        control_plane, release, namespace, "templates/node-agent-rbac.yaml", "templates/node-agent-policy.yaml"
    )
    dynamic = DynamicClient(control_plane.api_client)  # type: ignore[no-untyped-call]
    for doc in docs:
        resource = dynamic.resources.get(api_version=doc["apiVersion"], kind=doc["kind"])
        resource.create(body=doc, namespace=doc["metadata"].get("namespace"))
    (account,) = [d["metadata"]["name"] for d in docs if d["kind"] == "ServiceAccount"]
    return str(account)


# --------------------------------------------------------------------------- the agent's identity


def agent_token(plane: ControlPlane, namespace: str, account: str, node: str | None) -> str:
    """A token for ``account`` as the kubelet would get it for a pod on ``node``: TokenRequest bound to a pod
    bound to the node (so it carries the node claim). ``node`` None: a plain token with no pod, no node."""
    bound: client.V1BoundObjectReference | None = None
    if node is not None:
        pod = f"agent-{node}"[:63]
        body = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": pod},
            "spec": {
                "nodeName": node,
                "serviceAccountName": account,
                "automountServiceAccountToken": False,
                "containers": [{"name": "agent", "image": "registry.k8s.io/pause:3.10"}],
            },
        }
        created = plane.core.create_namespaced_pod(namespace, client.V1Pod.model_validate(body))
        assert created.metadata is not None
        bound = client.V1BoundObjectReference(kind="Pod", api_version="v1", name=pod, uid=created.metadata.uid)
    request = client.AuthenticationV1TokenRequest.model_validate(
        {"spec": {"audiences": [], "expirationSeconds": 3600, **({"boundObjectRef": bound.to_dict()} if bound else {})}}
    )
    answer = plane.core.create_namespaced_service_account_token(account, namespace, request)
    assert answer.status is not None
    return str(answer.status.token)


def token_client(plane: ControlPlane, token: str) -> client.ApiClient:
    configuration = client.Configuration()
    configuration.host = plane.apiserver_url
    configuration.ssl_ca_cert = str(plane.certificates.ca_cert)
    configuration.api_key = {"authorization": token}
    configuration.api_key_prefix = {"authorization": "Bearer"}
    return client.ApiClient(configuration)


def token_kubeconfig(plane: ControlPlane, token: str, path: Path) -> Path:
    document = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "e2e", "cluster": {"server": plane.apiserver_url,
                                                 "certificate-authority": str(plane.certificates.ca_cert)}}],
        "users": [{"name": "agent", "user": {"token": token}}],
        "contexts": [{"name": "e2e", "context": {"cluster": "e2e", "user": "agent"}}],
        "current-context": "e2e",
    }  # fmt: skip
    path.write_text(yaml.safe_dump(document))
    path.chmod(0o600)
    return path


def record(node: str, *, total: int = 512, outside: int = 0) -> NodeRecord:
    pool = KernelPool(total=total, free=total - outside, surplus=0, reserved=0)
    return NodeRecord(node, dt.datetime.now(dt.UTC), Source.CGROUP_V2, {RESOURCE: size_report(pool, {}, PodPages(0))})


def forbidden(call: Any) -> str:
    """The API's refusal message of ``call()``, which must be refused (403)."""
    with pytest.raises(ApiException) as refused:
        call()
    assert refused.value.status == 403, f"expected 403, got {refused.value.status}: {refused.value.body}"
    return str(refused.value.body)


def read_report(plane: ControlPlane, node: str) -> dict[str, Any]:
    custom = client.CustomObjectsApi(plane.api_client)
    found: Any = custom.get_cluster_custom_object(GROUP, VERSION, PLURAL, node)
    return dict(found)


# --------------------------------------------------------------------------- 1. least privilege


def test_the_agent_writes_its_own_nodes_record_and_nothing_else(
    control_plane: ControlPlane, agent_objects: str, namespace: str
) -> None:
    own, other = f"{namespace}-own"[:63], f"{namespace}-other"[:63]
    for node in (own, other):
        control_plane.create_node(node)
    agent = token_client(control_plane, agent_token(control_plane, namespace, agent_objects, own))

    # The token says who it is and where it runs, as a kubelet-issued one does.
    review = client.AuthenticationV1Api(agent).create_self_subject_review(client.V1SelfSubjectReview.model_validate({}))
    assert review.status is not None
    assert review.status.user_info is not None
    user = review.status.user_info
    assert user.username == f"system:serviceaccount:{namespace}:{agent_objects}"
    assert (user.extra or {}).get(NODE_CLAIM) == [own]

    publisher = ApiPublisher(agent, owner_policy=agent_objects)  # as the chart runs it
    custom = client.CustomObjectsApi(agent)

    # The policy is loaded a moment after it is created: until then RBAC alone would let any write
    # through, so wait until a write for some other node is refused (a probe name each time).
    def policy_active() -> bool:
        probe = f"probe-{uuid.uuid4().hex[:8]}"
        try:
            publisher.publish(record(probe))
        except ApiException as error:
            return bool(error.status == 403)
        return False

    wait_until("the ValidatingAdmissionPolicy to be in force", policy_active, timeout=180)

    # Its own node: created, then patched.
    publisher.publish(record(own, outside=10))
    publisher.publish(record(own, outside=20))
    written = read_report(control_plane, own)
    assert written["report"]["pageSizes"][RESOURCE]["outsidePages"] == 20
    # Owned by the agent's admission policy, so that uninstalling the agent takes its records too
    # (the garbage collector; shown in kind, e2e/kind/test_kind.py::test_helm_uninstall_leaves_nothing_behind).
    admission = client.AdmissionregistrationV1Api(control_plane.api_client)
    policy = admission.read_validating_admission_policy(agent_objects)
    assert policy.metadata is not None
    assert written["metadata"]["ownerReferences"] == [
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicy",
            "name": agent_objects,
            "uid": policy.metadata.uid,
        }
    ]

    # Another node's record: neither created nor, once it exists, patched.
    message = forbidden(lambda: publisher.publish(record(other)))
    assert f"the node agent on node '{own}' may not write the HugepageNodeReport '{other}'" in message
    ApiPublisher(control_plane.api_client).publish(record(other))  # the admin may
    forbidden(lambda: custom.patch_cluster_custom_object(GROUP, VERSION, PLURAL, other, {"report": {"source": "none"}}))
    # Not even its own record may be deleted (no RBAC verb), nor any be read or listed.
    forbidden(lambda: custom.delete_cluster_custom_object(GROUP, VERSION, PLURAL, own))
    forbidden(lambda: custom.list_cluster_custom_object(GROUP, VERSION, PLURAL))
    # Of the admission policies, it may read its own owner only.
    forbidden(lambda: client.AdmissionregistrationV1Api(agent).read_validating_admission_policy("some-other-policy"))
    forbidden(client.AdmissionregistrationV1Api(agent).list_validating_admission_policy)

    # Node objects: nothing, not even its own node's labels or status.
    core = client.CoreV1Api(agent)
    label = {"metadata": {"labels": {"evil": "yes"}}}
    forbidden(lambda: core.patch_node(own, label, _content_type="application/merge-patch+json"))
    forbidden(lambda: core.patch_node(other, label, _content_type="application/merge-patch+json"))
    forbidden(lambda: core.patch_node_status(own, {"status": {}}, _content_type="application/merge-patch+json"))
    forbidden(core.list_node)

    # The same account without the node claim (a token not bound to a pod on a node) writes nothing.
    unbound = ApiPublisher(token_client(control_plane, agent_token(control_plane, namespace, agent_objects, None)))
    message = forbidden(lambda: unbound.publish(record(own)))
    assert "no node in this service-account token" in message


# --------------------------------------------------------------------------- the agent process


def fixture_node(root: Path, *, total: int, outside: int) -> Path:
    """A node's sysfs and cgroup trees: ``total`` 2 MiB pages, ``outside`` of them held outside pods."""
    files = {
        "sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages": f"{total}\n",
        "sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages": f"{total - outside}\n",
        "sys/kernel/mm/hugepages/hugepages-2048kB/resv_hugepages": "0\n",
        "sys/kernel/mm/hugepages/hugepages-2048kB/surplus_hugepages": "0\n",
        "cgroup/cgroup.controllers": "hugetlb\n",
        "cgroup/kubepods.slice/hugetlb.2MB.current": "0\n",
        "cgroup/kubepods.slice/hugetlb.2MB.rsvd.current": "0\n",
    }
    for relative, text in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


@pytest.fixture
def start_agent(control_plane: ControlPlane, agent_objects: str, namespace: str, tmp_path: Path) -> Iterator[Any]:
    """``start_agent(node, total=, outside=, heartbeat=)``: the real ``hugepage-extender node-agent`` with
    the agent's node-bound token, reading a fixture tree; stopped after the test."""
    started: list[ManagedProcess] = []

    def start(node: str, *, total: int, outside: int, heartbeat: float = 60.0) -> ManagedProcess:
        root = fixture_node(tmp_path / f"node-{node}", total=total, outside=outside)
        token = agent_token(control_plane, namespace, agent_objects, node)
        kubeconfig = token_kubeconfig(control_plane, token, tmp_path / f"agent-{node}.kubeconfig")
        script = Path(sys.executable).parent / "hugepage-extender"
        argv = [str(script)] if script.exists() else [sys.executable, "-m", "extender"]
        process = control_plane.start_process(
            f"node-agent-{node}",
            [*argv, "node-agent", "--node-name", node, "--kubeconfig", str(kubeconfig),
             "--sysfs-root", str(root / "sys"), "--cgroup-root", str(root / "cgroup"),
             "--interval-seconds", "0.5", "--heartbeat-seconds", str(heartbeat), "--min-interval-seconds", "0.5"],
        )  # fmt: skip
        started.append(process)

        def published() -> bool:
            try:
                size = read_report(control_plane, node)["report"]["pageSizes"][RESOURCE]
            except ApiException:
                return False
            return bool(size["outsidePages"] == outside and size["totalPages"] == total)

        wait_until(f"the agent on {node} to publish outside={outside}", published, timeout=180)
        return process

    try:
        yield start
    finally:
        for process in started:
            process.stop()


# --------------------------------------------------------------------------- 2. outside pages keep pods off


def test_a_node_whose_agent_reports_outside_pages_gets_no_pod_that_would_overflow_it(
    cell: Cell, start_agent: Any
) -> None:
    # "held" is natively the better node (far more CPU and memory); its agent reports 384 of its 512
    # pages held outside pods (a DPDK daemon, say), which kube-scheduler cannot see.
    held = cell.node("held", hugepages="1Gi", cpu="64", memory="256Gi")
    free = cell.node("free", hugepages="1Gi")
    start_agent(held, total=512, outside=384)
    extender = cell.extender({"namespaces": {cell.namespace: {"mode": "enforce"}}})
    scheduler = cell.scheduler(extender)
    fresh = {"state": "fresh"}
    wait_until(
        "the extender to use the record",
        lambda: metric_value(extender, "hugepage_extender_node_reports", fresh) >= 1,
        timeout=180,
    )

    # 512Mi = 256 pages > the 128 the outside pages leave on "held": both go to "free".
    for name in ("p-0", "p-1"):
        cell.pod(name, scheduler, hugepages_2mi="512Mi")
        assert cell.plane.wait_for_pod_bound(cell.namespace, name) == free
    # A third fits nowhere: "free" is full of pods (preemption might help), "held" never could.
    cell.pod("p-2", scheduler, hugepages_2mi="512Mi")
    failed = wait_for_event(cell.core, cell.namespace, "p-2", "FailedScheduling", contains=HELD_OUTSIDE)
    assert f"1 {HELD_OUTSIDE}" in failed, failed
    # What the outside pages leave is still used: 256Mi = 128 pages fits on "held".
    cell.pod("small", scheduler, hugepages_2mi="256Mi", node_selector={**cell.selector, "kubernetes.io/hostname": held})
    assert cell.plane.wait_for_pod_bound(cell.namespace, "small") == held
    assert cell.plane.pod_assignments(cell.namespace)["p-2"] is None


# --------------------------------------------------------------------------- 3. the agent stops


def snapshot_of(plane: ControlPlane, path: Path) -> Path:
    """What `kubectl get nodes,pods,hugepagenodereports -A -o json` writes, from the admin's view."""
    api = plane.api_client
    items: list[Any] = []
    listing: Any
    for kind, listing in (
        ("Node", client.CoreV1Api(api).list_node(_preload_content=False)),
        ("Pod", client.CoreV1Api(api).list_pod_for_all_namespaces(_preload_content=False)),
        ("HugepageNodeReport", client.CustomObjectsApi(api).list_cluster_custom_object(
            GROUP, VERSION, PLURAL, _preload_content=False)),
    ):  # fmt: skip
        items += [{"kind": kind, **item} for item in msgspec.json.decode(listing.data)["items"]]
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
    return path


def test_a_stopped_agents_record_goes_stale_and_the_extender_falls_back_visibly(cell: Cell, start_agent: Any) -> None:
    max_age = 6.0
    held = cell.node("held", hugepages="1Gi")
    agent = start_agent(held, total=512, outside=512, heartbeat=1.0)  # the whole pool held outside pods
    config = {"defaults": {"nodeReportMaxAgeSeconds": max_age}, "namespaces": {cell.namespace: {"mode": "enforce"}}}
    extender = cell.extender(config)
    scheduler = cell.scheduler(extender)
    only_held = {**cell.selector, "kubernetes.io/hostname": held}

    cell.pod("pinned", scheduler, hugepages_2mi="256Mi", node_selector=only_held)
    wait_for_event(cell.core, cell.namespace, "pinned", "FailedScheduling", contains=HELD_OUTSIDE)
    wait_for_event(cell.core, cell.namespace, "pinned", REASON_NO_COMPATIBLE)
    # Heartbeats keep it fresh well past the max age. (The metrics count every node of the shared
    # control plane, whose other tests' agents have stopped: this node is told apart by the log.)
    went_stale = f"node {held}: agent record is"
    log = cell.plane.processes[extender.name].log_path
    assert_stays_pending(cell.core, cell.namespace, ["pinned"], max_age + 2)
    assert went_stale not in log.read_text()
    stale_before = metric_value(extender, "hugepage_extender_node_reports", {"state": "stale"})
    gone_before = metric_value(extender, "hugepage_extender_node_reports_gone_stale_total")

    # The agent stops: nothing refreshes the record; once it is older than the max age the node is
    # counted from pod requests alone (metric, log, explain), and the pod is placed.
    agent.stop()
    stopped = read_report(cell.plane, held)["report"]["observedAt"]
    wait_until("the extender to log the record stale", lambda: went_stale in log.read_text(), timeout=max_age + 20)
    assert metric_value(extender, "hugepage_extender_node_reports", {"state": "stale"}) >= stale_before + 1
    assert metric_value(extender, "hugepage_extender_node_reports_gone_stale_total") >= gone_before + 1
    # A pod asking now is placed there. (The one that waited is retried when the scheduler next looks:
    # a stale record is no cluster event, so that can take until its unschedulable-pods timeout.)
    cell.pod("after", scheduler, hugepages_2mi="256Mi", node_selector=only_held)
    assert cell.plane.wait_for_pod_bound(cell.namespace, "after", timeout=180) == held
    assert read_report(cell.plane, held)["report"]["observedAt"] == stopped  # nobody wrote since

    # explain, from what kubectl would save, shows the record, its age, and that it is not used.
    snapshot = snapshot_of(cell.plane, cell.tmp_path / "snapshot.json")
    config_file = cell.tmp_path / "explain.yaml"
    config_file.write_text(yaml.safe_dump(config))
    pod_file = cell.tmp_path / "pod.yaml"
    need = {RESOURCE: "256Mi"}
    container = {"name": "a", "resources": {"requests": need, "limits": need}}
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "next", "namespace": cell.namespace},
           "spec": {"containers": [container]}}  # fmt: skip
    pod_file.write_text(yaml.safe_dump(pod))
    out = subprocess.run(
        [sys.executable, "-m", "extender", "explain", "--snapshot", str(snapshot), "--config", str(config_file),
         "--pod", str(pod_file), "--nodes", held, "--output", "json"],
        check=True, capture_output=True, text=True,
    ).stdout  # fmt: skip
    explained = json.loads(out)
    (row,) = explained["nodes"]
    assert row["report"] == "stale"
    assert row["report_outside_pages"] == 512
    assert row["report_age_seconds"] > max_age
    assert row["reserved_pages"] == 0  # requests only
    assert "counted from pod requests only" in explained["fallback"]


# --------------------------------------------------------------------------- 4. no pool, zero pool


def test_need_from_memory_pods_never_land_on_a_node_without_a_pool_or_with_a_zero_pool(cell: Cell) -> None:
    # "zero" reports hugepages-2Mi: "0" (the kubelet always reports its pools: known empty); "absent"
    # reports no such resource at all. Both are natively far better (CPU, memory) than "pooled".
    zero = cell.node("zero", hugepages="0", cpu="64", memory="256Gi")
    absent = f"{cell.slug}-absent"
    manifest = node_manifest(absent, cpu="64", memory="256Gi", labels=cell.selector)
    for resources in (manifest["status"]["capacity"], manifest["status"]["allocatable"]):
        del resources[RESOURCE]
    status = manifest.pop("status")
    cell.core.create_node(client.V1Node.model_validate(manifest))
    cell.core.patch_node(absent, {"spec": {"taints": None}}, _content_type="application/merge-patch+json")
    cell.core.patch_node_status(absent, {"status": status}, _content_type="application/merge-patch+json")
    pooled = cell.node("pooled", hugepages="4Gi", cpu="8", memory="32Gi")
    extender = cell.extender({"namespaces": {cell.namespace: {"mode": "enforce", "needFromMemory": True}}})
    scheduler = cell.scheduler(extender)

    # Two VM pods of 1536Mi guest RAM each (memory only): both to the only node with a pool.
    for name in ("vm-0", "vm-1"):
        cell.pod(name, scheduler, memory="1536Mi")
        assert cell.plane.wait_for_pod_bound(cell.namespace, name) == pooled
    # Pinned away from the pool: Pending, unresolvable, and said so.
    cell.pod(
        "vm-nowhere", scheduler, memory="1536Mi", node_selector={**cell.selector, "e2e.hugepage-extender.io/none": "x"}
    )
    for node in (zero, absent):
        name = f"vm-on-{node.rsplit('-', 1)[-1]}"
        cell.pod(name, scheduler, memory="1536Mi", node_selector={**cell.selector, "kubernetes.io/hostname": node})
        failed = wait_for_event(cell.core, cell.namespace, name, "FailedScheduling", contains=NO_POOL)
        assert f"1 {NO_POOL}" in failed, failed
        wait_for_event(cell.core, cell.namespace, name, REASON_NO_COMPATIBLE)
    # A third VM would overflow the pool (3 * 1536Mi > 4Gi): it waits too, for capacity (resolvable),
    # and is not sent to the natively better nodes without a pool.
    cell.pod("vm-2", scheduler, memory="1536Mi")
    wait_for_event(cell.core, cell.namespace, "vm-2", "FailedScheduling", contains=EXTENDER_REASON_INSUFFICIENT)
    placed = cell.plane.pod_assignments(cell.namespace)
    assert {name: node for name, node in placed.items() if node} == {"vm-0": pooled, "vm-1": pooled}, placed


# --------------------------------------------------------------------------- 5. odd annotations


def test_odd_annotations_never_keep_the_extender_unready(cell: Cell) -> None:
    # Anyone who may annotate Nodes can write these; "1e999999" once became a million-digit integer.
    odd = {"nan": "NaN", "huge": "1e999999", "word": "lots"}
    for suffix, value in odd.items():
        node = cell.node(suffix)
        cell.core.patch_node(
            node,
            {"metadata": {"annotations": {f"hugepage-extender.io/reserved-{RESOURCE}": value}}},
            _content_type="application/merge-patch+json",
        )
    cell.node("fine", cpu="2")  # a node with no annotation beside them
    extender = cell.extender({"namespaces": {cell.namespace: {"mode": "enforce"}}})  # waits for /readyz
    ignored = "hugepage_extender_ignored_node_inputs_total"
    assert metric_value(extender, ignored, {"kind": "annotation", "reason": "malformed"}) >= 2
    assert metric_value(extender, ignored, {"kind": "annotation", "reason": "absurd"}) >= 1
    # Those nodes are counted from pod requests, as if unannotated: pods still land on them.
    scheduler = cell.scheduler(extender)
    names = cell.pods([f"p-{i}" for i in range(4)], scheduler, hugepages_2mi="512Mi")
    placed = cell.plane.wait_for_pods_bound(cell.namespace, names)
    assert set(placed.values()) & {f"{cell.slug}-{suffix}" for suffix in odd}, placed
