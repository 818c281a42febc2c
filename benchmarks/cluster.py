"""Synthetic clusters and requests for the benchmarks, built like scheduler_perf's fake nodes."""

from __future__ import annotations

import random
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import msgspec

from extender.core.config import DEFAULT_RESOURCE, Config, build_config
from extender.core.objects import Node, Pod
from extender.state.cluster import ClusterState

ENFORCE = {"defaults": {"mode": "enforce", "sampleSize": 3, "widening": "fullscan"}}


def node_document(i: int, rng: random.Random, one_gib_pool: str | None = None) -> dict[str, Any]:
    """A Node about the size of a real one (labels, conditions, images), so full-Nodes
    requests weigh what they weigh in a cluster; ``one_gib_pool``: a ``hugepages-1Gi`` pool
    of that size beside the 64 GiB ``hugepages-2Mi`` one."""
    name = f"node-{i:05d}"
    document: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "uid": f"{i:08x}-0000-4000-8000-000000000000",
            "resourceVersion": str(1000 + i),
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "topology.kubernetes.io/zone": f"zone-{i % 3}",
                "node.kubernetes.io/instance-type": "metal-64",
            },
            "annotations": {
                "node.alpha.kubernetes.io/ttl": "0",
                "volumes.kubernetes.io/controller-managed-attach-detach": "true",
            },
        },
        "spec": {"podCIDR": f"10.{i // 250}.{i % 250}.0/24"},
        "status": {
            "capacity": {"cpu": "64", "memory": "256Gi", "pods": "110", "hugepages-2Mi": "64Gi"},
            "allocatable": {"cpu": "63", "memory": "250Gi", "pods": "110", "hugepages-2Mi": "64Gi"},
            "conditions": [
                {"type": t, "status": "False" if t != "Ready" else "True", "reason": f"Kubelet{t}", "message": "ok"}
                for t in ("MemoryPressure", "DiskPressure", "PIDPressure", "Ready")
            ],
            "addresses": [{"type": "InternalIP", "address": f"10.0.{i // 250}.{i % 250}"}],
            "images": [
                {"names": [f"registry.example/app-{j}@sha256:{rng.getrandbits(128):032x}"], "sizeBytes": 10**8}
                for j in range(8)
            ],
            "nodeInfo": {"kubeletVersion": "v1.37.2", "containerRuntimeVersion": "containerd://2.1.0"},
        },
    }
    if one_gib_pool:
        for key in ("capacity", "allocatable"):
            document["status"][key]["hugepages-1Gi"] = one_gib_pool
    return document


def pod_document(
    name: str,
    hugepages: str | None,
    node: str | None = None,
    namespace: str = "bench",
    *,
    one_gib: str | None = None,
) -> dict[str, Any]:
    """A pod asking ``hugepages`` of ``hugepages-2Mi`` and ``one_gib`` of ``hugepages-1Gi`` (None: none)."""
    requests: dict[str, str] = {"cpu": "500m", "memory": "1Gi"}
    if hugepages:
        requests["hugepages-2Mi"] = hugepages
    if one_gib:
        requests["hugepages-1Gi"] = one_gib
    document: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{namespace}-{name}"},
        "spec": {
            "schedulerName": "hugepage-scheduler",
            "containers": [
                {"name": "main", "image": "registry.k8s.io/pause:3.10", "resources": {"requests": requests}}
            ],
        },
        "status": {"phase": "Running" if node else "Pending"},
    }
    if node:
        document["spec"]["nodeName"] = node
    return document


@dataclass(frozen=True)
class SyntheticCluster:
    config: Config
    state: ClusterState
    node_documents: list[dict[str, Any]]

    @property
    def names(self) -> list[str]:
        return [d["metadata"]["name"] for d in self.node_documents]


def synthetic_cluster(
    nodes: int, pods: int, config_document: dict[str, Any] | None = None, seed: int = 1
) -> SyntheticCluster:
    """``nodes`` nodes with 64 GiB pools, ``pods`` bound pods of 512 MiB spread over them."""
    documents = node_documents(nodes, seed)
    config, state = _state(documents, pods, config_document)
    return SyntheticCluster(config, state, documents)


def synthetic_state(
    nodes: int,
    pods: int,
    config_document: dict[str, Any] | None = None,
    seed: int = 1,
    full_percent: int = 0,
    *,
    one_gib_pool: str | None = None,
) -> tuple[Config, ClusterState]:
    """The state of ``synthetic_cluster`` alone: each document is dropped once read, as the
    extender's reflector drops each object, so a process holding it weighs what the extender does.

    ``full_percent``: that many nodes of every hundred get one more bound pod that takes what is
    left of their pool (full by pod requests: a resolvable rejection, as in a busy cluster).
    ``one_gib_pool``: every node has a ``hugepages-1Gi`` pool of that size too, which the bound pods
    ask none of, and the pod that fills a node's 2 MiB pool takes the whole of it (the same pods,
    whether the config guards one size or both)."""
    rng = random.Random(seed)
    documents = (node_document(i, rng, one_gib_pool) for i in range(nodes))
    config, state = _state(documents, pods, config_document)
    for i in range(nodes):
        if i % 100 < full_percent:
            name = f"node-{i:05d}"
            account = state.books[DEFAULT_RESOURCE].accounts[name]
            left = (account.total_pages - account.committed_pages) * account.page_size
            if left > 0 or one_gib_pool:
                fill = pod_document(f"fill-{i}", str(left) if left > 0 else None, name, one_gib=one_gib_pool)
                state.apply_pod(msgspec.convert(fill, Pod))
    return config, state


def _state(
    documents: Iterable[dict[str, Any]], pods: int, config_document: dict[str, Any] | None
) -> tuple[Config, ClusterState]:
    config = build_config(config_document or ENFORCE, {})
    state = ClusterState(config)
    names = []

    def nodes() -> Iterator[Node]:
        for document in documents:
            node = msgspec.convert(document, Node)
            names.append(node.metadata.name)
            yield node

    def bound_pods() -> Iterator[Pod]:
        for j in range(pods):
            yield msgspec.convert(pod_document(f"p{j}", "512Mi", names[j % len(names)]), Pod)

    state.replace(nodes(), bound_pods())
    return config, state


def node_documents(nodes: int, seed: int = 1, one_gib_pool: str | None = None) -> list[dict[str, Any]]:
    """The same ``nodes`` Node documents for the same seed, in any process."""
    rng = random.Random(seed)
    return [node_document(i, rng, one_gib_pool) for i in range(nodes)]


def request_body(
    documents: list[dict[str, Any]],
    *,
    full_nodes: bool,
    hugepages: str | None,
    namespace: str = "bench",
    pod_name: str = "incoming",
    one_gib: str | None = None,
) -> bytes:
    """An ExtenderArgs body as kube-scheduler sends it (capitalised keys; ``Nodes`` as a NodeList)."""
    pod = pod_document(pod_name, hugepages, namespace=namespace, one_gib=one_gib)
    if full_nodes:
        node_list = {"metadata": {}, "items": documents}
        return msgspec.json.encode({"Pod": pod, "Nodes": node_list, "NodeNames": None})
    names = [d["metadata"]["name"] for d in documents]
    return msgspec.json.encode({"Pod": pod, "Nodes": None, "NodeNames": names})


def extender_args(cluster: SyntheticCluster, *, full_nodes: bool, hugepages: str | None) -> bytes:
    return request_body(cluster.node_documents, full_nodes=full_nodes, hugepages=hugepages)
