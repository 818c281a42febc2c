"""The parts of Kubernetes objects the extender reads, as msgspec structs.

Decoding into these skips every other field of a Pod or Node, which is what
keeps a 5,000-node request or a 100,000-pod list cheap (no full dict tree, no
client model objects). Field names follow the Kubernetes JSON tags.
"""

from __future__ import annotations

import msgspec

from extender.quantity import RawQuantity

ResourceList = dict[str, RawQuantity]


class ObjectMeta(msgspec.Struct, rename="camel", omit_defaults=True):
    name: str = ""
    namespace: str = ""
    uid: str = ""
    resource_version: str = ""
    annotations: dict[str, str] | None = None


class ResourceRequirements(msgspec.Struct, rename="camel", omit_defaults=True):
    requests: ResourceList | None = None
    limits: ResourceList | None = None


class Container(msgspec.Struct, rename="camel", omit_defaults=True):
    name: str = ""
    resources: ResourceRequirements | None = None
    restart_policy: str | None = None


class PodSpec(msgspec.Struct, rename="camel", omit_defaults=True):
    node_name: str | None = None
    scheduler_name: str | None = None
    runtime_class_name: str | None = None
    containers: list[Container] = []
    init_containers: list[Container] | None = None
    overhead: ResourceList | None = None
    resources: ResourceRequirements | None = None


class PodStatus(msgspec.Struct, rename="camel", omit_defaults=True):
    phase: str | None = None


class Pod(msgspec.Struct, rename="camel", omit_defaults=True):
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: PodSpec = msgspec.field(default_factory=PodSpec)
    status: PodStatus = msgspec.field(default_factory=PodStatus)

    @property
    def is_terminal(self) -> bool:
        return self.status.phase in ("Succeeded", "Failed")


class NodeStatus(msgspec.Struct, rename="camel", omit_defaults=True):
    allocatable: ResourceList | None = None


class Node(msgspec.Struct, rename="camel", omit_defaults=True):
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    status: NodeStatus = msgspec.field(default_factory=NodeStatus)


class NameOnly(msgspec.Struct, gc=False):
    name: str


class NodeName(msgspec.Struct, gc=False):
    """Only a node's name: what full-Nodes requests are decoded down to. Both fields are
    required, so a flood of empty items fails at the first one instead of building
    millions of defaults; annotations are skipped (a hostile node could carry millions)."""

    metadata: NameOnly
