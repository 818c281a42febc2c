"""Shared test helpers: small builders for pods, nodes and accounts."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import msgspec

from extender.objects import Node, Pod

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # e2e/ and benchmarks/ are importable from tests
    sys.path.insert(0, str(ROOT))

MiB = 1024 * 1024
GiB = 1024 * MiB
PAGE_2MI = 2 * MiB


def make_pod(
    name: str = "pod",
    namespace: str = "default",
    *,
    uid: str | None = None,
    hugepages: str | None = None,
    cpu: str | None = None,
    memory: str | None = None,
    node: str | None = None,
    phase: str = "Pending",
    resource: str = "hugepages-2Mi",
) -> Pod:
    requests: dict[str, Any] = {}
    if hugepages is not None:
        requests[resource] = hugepages
    if cpu is not None:
        requests["cpu"] = cpu
    if memory is not None:
        requests["memory"] = memory
    document: dict[str, Any] = {
        "metadata": {"name": name, "namespace": namespace, "uid": uid or f"uid-{namespace}-{name}"},
        "spec": {"containers": [{"name": "main", "resources": {"requests": requests}}]},
        "status": {"phase": phase},
    }
    if node is not None:
        document["spec"]["nodeName"] = node
    return msgspec.convert(document, Pod)


def make_node(
    name: str,
    *,
    hugepages: str | None = None,
    cpu: str = "16",
    reserved: str | None = None,
    resource: str = "hugepages-2Mi",
) -> Node:
    allocatable: dict[str, Any] = {"cpu": cpu, "memory": "64Gi", "pods": "110"}
    if hugepages is not None:
        allocatable[resource] = hugepages
    metadata: dict[str, Any] = {"name": name}
    if reserved is not None:
        metadata["annotations"] = {f"hugepage-extender.io/reserved-{resource}": reserved}
    return msgspec.convert({"metadata": metadata, "status": {"allocatable": allocatable}}, Node)


def pod_json(pod: Pod) -> Any:
    return msgspec.to_builtins(pod)
