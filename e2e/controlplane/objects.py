"""Scheduler configurations and the API objects tests create: nodes, namespaces, pods; waiting on them."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

FAKE_NODE_LABEL = "e2e.hugepage-extender.io/fake-node"
PAUSE_IMAGE = "registry.k8s.io/pause:3.10"


def extender_scheduler_config(
    url_prefix: str,
    *,
    scheduler_name: str = "hugepage-scheduler",
    filter_verb: str | None = "filter",
    prioritize_verb: str | None = "prioritize",
    weight: int = 1,
    node_cache_capable: bool = True,
    ignorable: bool = False,
    http_timeout: str = "5s",
    percentage_of_nodes_to_score: int | None = 100,
    extender: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A KubeSchedulerConfiguration with one profile and one HTTP extender at ``url_prefix``.

    ``extender`` adds or overrides keys of the extender entry (e.g. ``bindVerb``,
    ``managedResources``, ``tlsConfig``). Pass the result to ``ControlPlane.start_scheduler``.
    """
    entry: dict[str, Any] = {
        "urlPrefix": url_prefix,
        "httpTimeout": http_timeout,
        "nodeCacheCapable": node_cache_capable,
        "ignorable": ignorable,
        "enableHTTPS": url_prefix.startswith("https:"),
    }
    if filter_verb:
        entry["filterVerb"] = filter_verb
    if prioritize_verb:
        entry["prioritizeVerb"] = prioritize_verb
        entry["weight"] = weight
    entry.update(extender or {})
    profile: dict[str, Any] = {"schedulerName": scheduler_name}
    if percentage_of_nodes_to_score is not None:
        profile["percentageOfNodesToScore"] = percentage_of_nodes_to_score
    return {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "profiles": [profile],
        "extenders": [entry],
    }


# --------------------------------------------------------------------------- object helpers


def node_manifest(
    name: str,
    *,
    hugepages_2mi: str = "1Gi",
    cpu: str = "16",
    memory: str = "64Gi",
    pods: str = "110",
    labels: Mapping[str, str] | None = None,
    resources: Mapping[str, str] | None = None,
    ready: bool = True,
) -> dict[str, Any]:
    """A Node with its status: capacity = allocatable = the given resources (``resources`` adds/overrides)."""
    allocatable = {"cpu": cpu, "memory": memory, "pods": pods, "hugepages-2Mi": hugepages_2mi, **(resources or {})}
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                FAKE_NODE_LABEL: "true",
                **(labels or {}),
            },
        },
        "spec": {},
        "status": {
            "capacity": dict(allocatable),
            "allocatable": dict(allocatable),
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True" if ready else "False",
                    "reason": "KubeletReady" if ready else "KubeletNotReady",
                    "message": "fake node (no kubelet)",
                    "lastHeartbeatTime": now,
                    "lastTransitionTime": now,
                }
            ],
            "addresses": [{"type": "Hostname", "address": name}],
            "nodeInfo": {
                "architecture": "amd64",
                "operatingSystem": "linux",
                "kubeletVersion": "v1.37.2",
                "bootID": "",
                "containerRuntimeVersion": "",
                "kernelVersion": "",
                "kubeProxyVersion": "",
                "machineID": "",
                "osImage": "",
                "systemUUID": "",
            },
        },
    }


def create_node(core: client.CoreV1Api, name: str, **kwargs: Any) -> client.V1Node:
    """Create a fake Node (``node_manifest`` kwargs), then write its status (ignored on create).

    The TaintNodesByCondition admission plugin puts ``node.kubernetes.io/not-ready:NoSchedule``
    on every new Node, and no node-lifecycle controller runs here to lift it: remove it
    (unless ``taints`` are given, which replace it).
    """
    taints = kwargs.pop("taints", None)
    manifest = node_manifest(name, **kwargs)
    status = manifest.pop("status")
    core.create_node(client.V1Node.model_validate(manifest))
    core.patch_node(name, {"spec": {"taints": taints}}, _content_type="application/merge-patch+json")
    return core.patch_node_status(name, {"status": status}, _content_type="application/merge-patch+json")


def create_namespace(core: client.CoreV1Api, name: str, labels: Mapping[str, str] | None = None) -> client.V1Namespace:
    """Create a namespace (no controller-manager runs, so deleting one never finishes: use fresh names)."""
    body = {"metadata": {"name": name, "labels": dict(labels or {})}}
    return core.create_namespace(client.V1Namespace.model_validate(body))


def pod_manifest(
    name: str,
    *,
    scheduler_name: str | None = None,
    hugepages_2mi: str | None = None,
    cpu: str | None = "100m",
    memory: str | None = "64Mi",
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    node_selector: Mapping[str, str] | None = None,
    image: str = PAUSE_IMAGE,
    priority_class_name: str | None = None,
    extended: Mapping[str, str] | None = None,
    scheduling_gates: Sequence[str] = (),
) -> dict[str, Any]:
    """A one-container pod. Hugepages, memory and ``extended`` resources get limits equal to their
    requests, as the API demands."""
    requests: dict[str, str] = {}
    limits: dict[str, str] = {}
    if cpu:
        requests["cpu"] = cpu
    if memory:
        requests["memory"] = limits["memory"] = memory
    if hugepages_2mi:
        requests["hugepages-2Mi"] = limits["hugepages-2Mi"] = hugepages_2mi
    for resource, quantity in (extended or {}).items():
        requests[resource] = limits[resource] = quantity
    spec: dict[str, Any] = {
        "containers": [{"name": "app", "image": image, "resources": {"requests": requests, "limits": limits}}],
        "terminationGracePeriodSeconds": 0,
    }
    if scheduler_name:
        spec["schedulerName"] = scheduler_name
    if node_selector:
        spec["nodeSelector"] = dict(node_selector)
    if priority_class_name:
        spec["priorityClassName"] = priority_class_name
    if scheduling_gates:
        spec["schedulingGates"] = [{"name": gate} for gate in scheduling_gates]
    metadata: dict[str, Any] = {"name": name, "labels": dict(labels or {})}
    if annotations:
        metadata["annotations"] = dict(annotations)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def create_pod(core: client.CoreV1Api, namespace: str, name: str, **kwargs: Any) -> client.V1Pod:
    """Create a pod from ``pod_manifest(name, **kwargs)``."""
    return core.create_namespaced_pod(namespace, client.V1Pod.model_validate(pod_manifest(name, **kwargs)))


def _scheduling_condition(pod: client.V1Pod) -> str:
    for condition in (pod.status.conditions if pod.status else None) or []:
        if condition.type == "PodScheduled":
            return f"PodScheduled={condition.status} {condition.reason or ''}: {condition.message or ''}".strip()
    return "no PodScheduled condition yet"


def wait_for_pod_bound(
    core: client.CoreV1Api, namespace: str, name: str, *, timeout: float = 120.0, interval: float = 0.1
) -> str:
    """The node a pod is bound to, once ``spec.nodeName`` is set; TimeoutError says why not."""
    deadline = time.monotonic() + timeout
    while True:
        pod = core.read_namespaced_pod(name, namespace)
        if pod.spec is not None and pod.spec.node_name:
            return str(pod.spec.node_name)
        if time.monotonic() > deadline:
            events = "; ".join(pod_events(core, namespace, name)) or "no events"
            raise TimeoutError(
                f"pod {namespace}/{name} not bound after {timeout:.0f}s: {_scheduling_condition(pod)} ({events})"
            )
        time.sleep(interval)


def wait_for_pods_bound(
    core: client.CoreV1Api, namespace: str, names: Iterable[str], *, timeout: float = 180.0, interval: float = 0.2
) -> dict[str, str]:
    """Wait until every named pod is bound; name -> node."""
    wanted = set(names)
    deadline = time.monotonic() + timeout
    while True:
        bound = {k: v for k, v in pod_assignments(core, namespace).items() if k in wanted and v}
        if len(bound) == len(wanted):
            return bound
        if time.monotonic() > deadline:
            pending = sorted(wanted - bound.keys())
            raise TimeoutError(f"{len(pending)} of {len(wanted)} pods in {namespace} not bound: {pending[:10]}")
        time.sleep(interval)


def pod_assignments(
    core: client.CoreV1Api, namespace: str | None, *, label_selector: str | None = None
) -> dict[str, str | None]:
    """Pod -> node (None while unbound). Keys are names in ``namespace``, or ``ns/name`` for all (None)."""
    if namespace is None:
        pods = core.list_pod_for_all_namespaces(label_selector=label_selector).items
    else:
        pods = core.list_namespaced_pod(namespace, label_selector=label_selector).items
    result: dict[str, str | None] = {}
    for pod in pods:
        meta = pod.metadata
        if meta is None or meta.name is None:
            continue
        key = meta.name if namespace is not None else f"{meta.namespace}/{meta.name}"
        result[key] = pod.spec.node_name if pod.spec is not None else None
    return result


def pod_events(core: client.CoreV1Api, namespace: str, name: str) -> list[str]:
    """``reason: message`` of the events about one pod, oldest first."""
    try:
        events = core.list_namespaced_event(
            namespace, field_selector=f"involvedObject.name={name},involvedObject.kind=Pod"
        ).items
    except ApiException:
        return []
    return [f"{e.reason}: {e.message}" for e in events]


def delete_pods(core: client.CoreV1Api, namespace: str, label_selector: str | None = None) -> int:
    """Delete pods at once (grace period 0: no kubelet will confirm); how many."""
    names = list(pod_assignments(core, namespace, label_selector=label_selector))
    for pod_name in names:
        with contextlib.suppress(ApiException):
            core.delete_namespaced_pod(pod_name, namespace, grace_period_seconds=0)
    return len(names)
