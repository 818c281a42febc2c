"""Shared test helpers: small builders for pods, nodes and accounts."""

from __future__ import annotations

import sys
from enum import StrEnum
from pathlib import Path
from typing import Any, cast

import msgspec

from extender.objects import Node, Pod
from extender.policy import POLICY_FIELDS, Policy, field_type

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


def other_value(field_name: str) -> Any:
    """A value of a ``Policy`` knob other than its default, within its bounds: what a round trip
    of that knob through config, ``/debug/state`` and the chart must carry."""
    default = getattr(Policy(), field_name)
    kind = field_type(field_name)
    assert field_name in {f.name for f in POLICY_FIELDS}
    if kind is bool:
        return not default
    if kind is int:
        return default + 2
    if kind is float:
        return default * 2 + 1.5
    members: list[Any] = list(cast("type[StrEnum]", kind))  # Mode, Widening
    return members[(members.index(default) + 1) % len(members)]
