"""Shared test helpers: small builders for pods, nodes and accounts."""

from __future__ import annotations

import os
import random
import sys
import time
from collections.abc import Iterable, Mapping
from enum import StrEnum
from pathlib import Path
from typing import Any, cast

import msgspec
from hypothesis import settings

from extender.core.capacity import NodeAccount
from extender.core.config import build_config
from extender.core.objects import Node, Pod
from extender.core.policy import POLICY_FIELDS, Policy, field_type
from extender.shell.handlers import Extender
from extender.shell.metrics import Metrics
from extender.state.cluster import ClusterState

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # e2e/ and benchmarks/ are importable from tests
    sys.path.insert(0, str(ROOT))

MiB = 1024 * 1024
GiB = 1024 * MiB
PAGE_2MI = 2 * MiB


QUICK_PROPERTIES = os.environ.get("QUICK_PROPERTIES") == "1"  # `make core`: the pure core's loop of a few seconds
if QUICK_PROPERTIES:
    settings.register_profile("quick", max_examples=10)
    settings.load_profile("quick")


def examples(count: int) -> int:
    """A property's examples: ``count``, or a tenth with QUICK_PROPERTIES=1 (``make core``; ``make unit``
    and CI run them all)."""
    return max(10, count // 10) if QUICK_PROPERTIES else count


class Clock:
    """A clock the test moves by hand (``clock.now += 30``): the state's monotonic or wall clock."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


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


def make_account(
    pool: int,
    used: int = 0,
    reserved: int = 0,
    *,
    held_mib: int = 0,
    held_bytes: int = 0,
    numa_free: int = -1,
    cpus: int = 0,
    page: int = PAGE_2MI,
) -> NodeAccount:
    """A node's account in pages of ``page``: its pool, used by pods, held outside pods (reserved);
    placements in flight in MiB (or bytes); the best NUMA node's free pages (-1: no NUMA figures).
    ``page=0`` is a node the extender does not know."""
    return NodeAccount(
        page_size=page,
        total_pages=pool,
        used_pages=used,
        outside_pods_pages=reserved,
        held_bytes=held_mib * MiB + held_bytes,
        numa_free_pages=numa_free,
        cpu_millis=cpus * 1000,
    )


def make_state(
    document: Mapping[str, Any] | None,
    nodes: Iterable[Node],
    pods: Iterable[Pod] = (),
    *,
    exempt: frozenset[str] = frozenset(),
    clock: Clock | None = None,
    wall_clock: Clock | None = None,
) -> ClusterState:
    """A loaded state under the config ``document`` (as the YAML file reads), on ``clock``s the test moves."""
    config = build_config(document or {}, {}, exempt)
    state = ClusterState(config, clock=clock or time.monotonic, wall_clock=wall_clock or time.time)
    state.replace(nodes, pods)
    return state


def make_extender(state: ClusterState, **kwargs: Any) -> Extender:
    """The HTTP extender over ``state`` with its config, seeded draws and its own metrics (``Extender`` kwargs)."""
    kwargs.setdefault("rng", random.Random(1))
    return Extender(state.config, state, Metrics(), **kwargs)


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
    if field_name == "need_from_memory_runtime_class":
        return "kata-qemu"
    if kind is str:  # needFromMemoryResource: a size the default config guards
        return "hugepages-2Mi"
    members: list[Any] = list(cast("type[StrEnum]", kind))  # Mode, Widening
    return members[(members.index(default) + 1) % len(members)]
