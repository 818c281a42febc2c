"""The parts of Kubernetes objects the extender reads, as msgspec structs.

Decoding into these skips every other field of a Pod or Node, which is what
keeps a 5,000-node request or a 100,000-pod list cheap (no full dict tree, no
client model objects). Field names follow the Kubernetes JSON tags.
"""

from __future__ import annotations

import msgspec

from extender.core.quantity import RawQuantity

ResourceList = dict[str, RawQuantity]


class ObjectMeta(msgspec.Struct, rename="camel", omit_defaults=True):
    name: str = ""
    namespace: str = ""
    uid: str = ""
    resource_version: str = ""
    creation_timestamp: str | None = None  # orders the lifts of gated pods (extender/core/gates.py)
    annotations: dict[str, str] | None = None
    deletion_timestamp: str | None = None  # being deleted: a shadow pod's outcome is then "deleted"


class ResourceRequirements(msgspec.Struct, rename="camel", omit_defaults=True):
    requests: ResourceList | None = None
    limits: ResourceList | None = None


class Container(msgspec.Struct, rename="camel", omit_defaults=True):
    name: str = ""
    resources: ResourceRequirements | None = None
    restart_policy: str | None = None


class NodeSelectorRequirement(msgspec.Struct, rename="camel", omit_defaults=True, gc=False):
    key: str = ""
    operator: str = ""
    values: list[str] | None = None


class NodeSelectorTerm(msgspec.Struct, rename="camel", omit_defaults=True, gc=False):
    match_expressions: list[NodeSelectorRequirement] | None = None
    match_fields: list[NodeSelectorRequirement] | None = None


class NodeSelector(msgspec.Struct, rename="camel", omit_defaults=True, gc=False):
    node_selector_terms: list[NodeSelectorTerm] = []


class NodeAffinity(msgspec.Struct, rename="camel", omit_defaults=True, gc=False):
    required_during_scheduling_ignored_during_execution: NodeSelector | None = None


class Affinity(msgspec.Struct, rename="camel", omit_defaults=True, gc=False):
    node_affinity: NodeAffinity | None = None


class Toleration(msgspec.Struct, rename="camel", omit_defaults=True, gc=False):
    key: str = ""
    operator: str = ""
    value: str = ""
    effect: str = ""


class SchedulingGate(msgspec.Struct, omit_defaults=True, gc=False):
    name: str = ""


class PodSpec(msgspec.Struct, rename="camel", omit_defaults=True):
    node_name: str | None = None
    # A gated pod waits outside the scheduler's queue (extender/core/gates.py); its priority orders the lifts.
    scheduling_gates: list[SchedulingGate] | None = None
    priority: int | None = None
    scheduler_name: str | None = None
    runtime_class_name: str | None = None
    containers: list[Container] = []
    init_containers: list[Container] | None = None
    overhead: ResourceList | None = None
    resources: ResourceRequirements | None = None
    # Which nodes the pod may use (extender/core/reach.py): where room counts for a window retry.
    node_selector: dict[str, str] | None = None
    affinity: Affinity | None = None
    tolerations: list[Toleration] | None = None


class PodStatus(msgspec.Struct, rename="camel", omit_defaults=True):
    phase: str | None = None
    reason: str | None = None  # a Failed pod's: the kubelet's admission refusal (OutOfhugepages-2Mi, ...)
    message: str | None = None
    # Left undecoded (a slice of the response): only a shadow pod's are read (extender.core.podoutcome).
    conditions: msgspec.Raw = msgspec.Raw()
    container_statuses: msgspec.Raw = msgspec.Raw()
    init_container_statuses: msgspec.Raw = msgspec.Raw()


class Pod(msgspec.Struct, rename="camel", omit_defaults=True):
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: PodSpec = msgspec.field(default_factory=PodSpec)
    status: PodStatus = msgspec.field(default_factory=PodStatus)

    @property
    def is_terminal(self) -> bool:
        return self.status.phase in ("Succeeded", "Failed")


class NodeStatus(msgspec.Struct, rename="camel", omit_defaults=True):
    allocatable: ResourceList | None = None


class NodeMeta(ObjectMeta, rename="camel", omit_defaults=True):
    labels: dict[str, str] | None = None  # a node's only (a pod's are never read)


class Taint(msgspec.Struct, rename="camel", omit_defaults=True, gc=False):
    key: str = ""
    value: str = ""
    effect: str = ""


class NodeSpec(msgspec.Struct, rename="camel", omit_defaults=True):
    taints: list[Taint] | None = None
    unschedulable: bool = False


class Node(msgspec.Struct, rename="camel", omit_defaults=True):
    metadata: NodeMeta = msgspec.field(default_factory=NodeMeta)
    spec: NodeSpec = msgspec.field(default_factory=NodeSpec)
    status: NodeStatus = msgspec.field(default_factory=NodeStatus)


class NameOnly(msgspec.Struct, gc=False):
    name: str


class NodeName(msgspec.Struct, gc=False):
    """Only a node's name: what full-Nodes requests are decoded down to. Both fields are
    required, so a flood of empty items fails at the first one instead of building
    millions of defaults; annotations are skipped (a hostile node could carry millions)."""

    metadata: NameOnly
