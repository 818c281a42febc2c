"""Synthetic clusters and requests for the benchmarks, built like scheduler_perf's fake nodes."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

import msgspec

from extender.cluster import ClusterState
from extender.config import Config, build_config
from extender.objects import Node, Pod

ENFORCE = {"defaults": {"mode": "enforce", "sampleSize": 3, "widening": "fullscan"}}


def node_document(i: int, rng: random.Random) -> dict[str, Any]:
    """A Node about the size of a real one (labels, conditions, images), so full-Nodes
    requests weigh what they weigh in a cluster."""
    name = f"node-{i:05d}"
    return {
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


def pod_document(name: str, hugepages: str | None, node: str | None = None) -> dict[str, Any]:
    requests: dict[str, str] = {"cpu": "500m", "memory": "1Gi"}
    if hugepages:
        requests["hugepages-2Mi"] = hugepages
    document: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "bench", "uid": f"uid-{name}"},
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
    rng = random.Random(seed)
    config = build_config(config_document or ENFORCE, {})
    documents = [node_document(i, rng) for i in range(nodes)]
    state = ClusterState(config)
    state.replace(
        (msgspec.convert(d, Node) for d in documents),
        (msgspec.convert(pod_document(f"p{j}", "512Mi", f"node-{j % nodes:05d}"), Pod) for j in range(pods)),
    )
    return SyntheticCluster(config, state, documents)


def extender_args(cluster: SyntheticCluster, *, full_nodes: bool, hugepages: str | None) -> bytes:
    pod = pod_document("incoming", hugepages)
    if full_nodes:
        return msgspec.json.encode({"Pod": pod, "Nodes": {"items": cluster.node_documents}, "NodeNames": None})
    return msgspec.json.encode({"Pod": pod, "NodeNames": cluster.names})
