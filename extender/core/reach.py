"""Which nodes a pod may use, read as kube-scheduler's in-tree filters read the pod and the node.

A window retry (extender/core/window.py) is worth an Error only where some node the scheduler could still
send would hold the pod: room on a node the pod's node selector, required node affinity or missing
tolerations exclude is room it can never use. The rules follow the pinned kube-scheduler (v1.37.2):

- ``NodeAffinity`` (pkg/scheduler/framework/plugins/nodeaffinity/node_affinity.go, ``Filter``; the
  terms as k8s.io/component-helpers/scheduling/corev1/nodeaffinity reads them): every pair of the node
  selector, and one required term at least (terms ORed; a term's requirements ANDed; an empty term
  matches nothing; a term that does not parse matches nothing);
- ``TaintToleration`` (plugins/tainttoleration, ``Filter``): every ``NoSchedule`` and ``NoExecute``
  taint tolerated (k8s.io/api/core/v1, ``Toleration.ToleratesTaint``);
- ``NodeUnschedulable`` (plugins/nodeunschedulable, ``Filter``): a cordoned node only for a pod that
  tolerates ``node.kubernetes.io/unschedulable:NoSchedule``.

Where the extender cannot tell (a toleration's ``Lt``/``Gt``, behind a feature gate), the node counts as
usable: a room counted in vain costs at most one bounded run of retries, a room missed strands a pod.

The scheduler's scan itself (``scanned``): ``NodeAffinity``'s PreFilter narrows the nodes filtered to
those a ``metadata.name`` field requirement names in every term (node_affinity.go, ``PreFilter``), and
``numFeasibleNodesToFind`` is computed from that count (schedule_one.go, ``findNodesThatPassFilters``).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

import msgspec

from extender.core.objects import Node, NodeSelectorRequirement, NodeSelectorTerm, Pod, Taint, Toleration

UNSCHEDULABLE_TAINT = Taint("node.kubernetes.io/unschedulable", effect="NoSchedule")  # v1.TaintNodeUnschedulable
_FILTERED_EFFECTS = frozenset(("NoSchedule", "NoExecute"))
_NAME_FIELD = "metadata.name"  # metav1.ObjectNameField, the one field a node selector term may name


class NodeReach(msgspec.Struct, frozen=True, gc=False):
    """What of a node decides which pods may use it: its labels, and the taints the filters read
    (``NoSchedule``, ``NoExecute``; a cordon as its taint)."""

    labels: dict[str, str]
    taints: tuple[Taint, ...] = ()


def node_reach(node: Node) -> NodeReach:
    taints = tuple(taint for taint in node.spec.taints or () if taint.effect in _FILTERED_EFFECTS)
    if node.spec.unschedulable:
        taints = (*taints, UNSCHEDULABLE_TAINT)
    return NodeReach(node.metadata.labels or {}, taints)


@dataclass(frozen=True, slots=True)
class PodReach:
    """What of a pod decides which nodes it may use."""

    selector: dict[str, str]
    terms: tuple[NodeSelectorTerm, ...] | None  # the required node affinity's terms; None: no required affinity
    tolerations: tuple[Toleration, ...]

    def may_use(self, name: str, node: NodeReach) -> bool:
        """Whether the in-tree filters above pass the node ``name`` for this pod."""
        labels = node.labels
        if any(labels.get(key) != value for key, value in self.selector.items()):
            return False
        if self.terms is not None and not any(
            term_matches(term, name, labels) for term in self.terms if term.match_expressions or term.match_fields
        ):
            return False
        return all(any(tolerates(t, taint) for t in self.tolerations) for taint in node.taints)

    def scanned(self, nodes: Collection[str]) -> int:
        """How many nodes the scheduler filters for this pod, of ``nodes`` (every node it knows)."""
        if not self.terms:
            return len(nodes)
        named: set[str] = set()
        for term in self.terms:
            names = _named_by(term)
            if names is None:  # a term naming no node: every node is filtered
                return len(nodes)
            named |= names
        return sum(1 for name in named if name in nodes)


def _named_by(term: NodeSelectorTerm) -> set[str] | None:
    """The nodes every ``metadata.name In`` requirement of the term names; None when it has none."""
    names: set[str] | None = None
    for field in term.match_fields or ():
        if field.key == _NAME_FIELD and field.operator == "In":
            values = set(field.values or ())
            names = values if names is None else names & values
    return names


UNCONSTRAINED = PodReach({}, None, ())  # a pod with no node selector, no required affinity, no tolerations


def pod_reach(pod: Pod) -> PodReach:
    spec = pod.spec
    node_affinity = spec.affinity.node_affinity if spec.affinity is not None else None
    required = node_affinity.required_during_scheduling_ignored_during_execution if node_affinity else None
    terms = tuple(required.node_selector_terms) if required is not None else None
    return PodReach(spec.node_selector or {}, terms, tuple(spec.tolerations or ()))


def term_matches(term: NodeSelectorTerm, name: str, labels: dict[str, str]) -> bool:
    """A non-empty required term: every label requirement and every field requirement holds."""
    return all(_label_matches(r, labels) for r in term.match_expressions or ()) and all(
        _field_matches(r, name) for r in term.match_fields or ()
    )


def _label_matches(requirement: NodeSelectorRequirement, labels: dict[str, str]) -> bool:
    """k8s.io/apimachinery/pkg/labels, ``Requirement.Matches``; an operator it refuses matches nothing."""
    value = labels.get(requirement.key)
    values = requirement.values or ()
    match requirement.operator:
        case "In":
            return value is not None and value in values
        case "NotIn":
            return value is None or value not in values
        case "Exists" | "DoesNotExist":
            return (value is not None) == (requirement.operator == "Exists")
        case "Gt" | "Lt" if value is not None and len(values) == 1:
            return _compares(value, values[0], greater=requirement.operator == "Gt")
    return False


def _compares(value: str, bound: str, *, greater: bool) -> bool:
    """``Gt``/``Lt``: both integers, else no match."""
    try:
        have, than = int(value), int(bound)
    except ValueError:
        return False
    return have > than if greater else have < than


def _field_matches(requirement: NodeSelectorRequirement, name: str) -> bool:
    value = name if requirement.key == _NAME_FIELD else ""
    values = requirement.values or ()
    if len(values) != 1:
        return False  # refused by the scheduler's parser: the term matches nothing
    if requirement.operator == "In":
        return value == values[0]
    if requirement.operator == "NotIn":
        return value != values[0]
    return False


def tolerates(toleration: Toleration, taint: Taint) -> bool:
    """``Toleration.ToleratesTaint`` (k8s.io/api/core/v1/toleration.go); ``Lt``/``Gt`` count as tolerating."""
    if toleration.effect and toleration.effect != taint.effect:
        return False
    if toleration.key and toleration.key != taint.key:
        return False
    match toleration.operator:
        case "" | "Equal":
            return toleration.value == taint.value
        case "Exists" | "Lt" | "Gt":
            return True
    return False
