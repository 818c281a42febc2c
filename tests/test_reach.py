"""Which nodes a pod may use (extender/core/reach.py), as kube-scheduler's NodeAffinity, TaintToleration and
NodeUnschedulable filters read the pod and the node (v1.37.2)."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from extender.core.objects import Node, Pod
from extender.core.reach import UNCONSTRAINED, node_reach, pod_reach


def pod(**spec: Any) -> Pod:
    return msgspec.convert({"metadata": {"name": "p"}, "spec": spec}, Pod)


def node(labels: dict[str, str] | None = None, **spec: Any) -> Node:
    return msgspec.convert({"metadata": {"name": "n", "labels": labels or {}}, "spec": spec}, Node)


def may_use(the_pod: Pod, the_node: Node, name: str = "n") -> bool:
    return pod_reach(the_pod).may_use(name, node_reach(the_node))


def required(*terms: dict[str, Any]) -> dict[str, Any]:
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": list(terms)}}}


def expression(key: str, operator: str, *values: str) -> dict[str, Any]:
    return {"matchExpressions": [{"key": key, "operator": operator, "values": list(values)}]}


def test_the_node_selector_needs_every_pair() -> None:
    chosen = pod(nodeSelector={"pool": "vm", "zone": "a"})
    assert may_use(chosen, node({"pool": "vm", "zone": "a", "other": "x"}))
    assert not may_use(chosen, node({"pool": "vm"}))
    assert not may_use(chosen, node({"pool": "vm", "zone": "b"}))
    assert may_use(pod(), node())


@pytest.mark.parametrize(
    ("term", "labels", "expected"),
    [
        (expression("pool", "In", "vm", "dpdk"), {"pool": "dpdk"}, True),
        (expression("pool", "In", "vm"), {}, False),
        (expression("pool", "NotIn", "vm"), {}, True),  # an absent label is not in the set
        (expression("pool", "NotIn", "vm"), {"pool": "vm"}, False),
        (expression("pool", "Exists"), {"pool": ""}, True),
        (expression("pool", "DoesNotExist"), {"pool": ""}, False),
        (expression("cores", "Gt", "8"), {"cores": "16"}, True),
        (expression("cores", "Gt", "8"), {"cores": "8"}, False),
        (expression("cores", "Lt", "8"), {"cores": "4"}, True),
        (expression("cores", "Lt", "8"), {"cores": "four"}, False),
        (expression("cores", "Gt", "8", "9"), {"cores": "16"}, False),  # refused by the parser: no match
        (expression("pool", "Near", "vm"), {"pool": "vm"}, False),
        ({}, {"pool": "vm"}, False),  # an empty term matches nothing
    ],
)
def test_a_required_term(term: dict[str, Any], labels: dict[str, str], expected: bool) -> None:
    assert may_use(pod(affinity=required(term)), node(labels)) is expected


def test_required_terms_are_ored_and_a_terms_requirements_anded() -> None:
    both = {
        "matchExpressions": [
            *expression("a", "Exists")["matchExpressions"],
            *expression("b", "Exists")["matchExpressions"],
        ]
    }
    anded = pod(affinity=required(both))
    assert not may_use(anded, node({"a": "1"}))
    assert may_use(anded, node({"a": "1", "b": "1"}))
    ored = pod(affinity=required(expression("a", "Exists"), expression("b", "Exists")))
    assert may_use(ored, node({"b": "1"}))
    assert not may_use(ored, node({"c": "1"}))
    assert not may_use(pod(affinity=required()), node())  # required, no term: nothing matches
    assert may_use(pod(affinity={"nodeAffinity": {}}), node())  # nothing required


def test_field_requirements_name_the_node() -> None:
    named = pod(affinity=required({"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["a"]}]}))
    assert may_use(named, node(), "a")
    assert not may_use(named, node(), "b")
    other = pod(affinity=required({"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["a"]}]}))
    assert may_use(other, node(), "b")
    assert not may_use(other, node(), "a")


def test_taints_need_a_toleration_and_a_cordon_is_one() -> None:
    tainted = node(taints=[{"key": "dedicated", "value": "vm", "effect": "NoSchedule"}])
    assert not may_use(pod(), tainted)
    assert may_use(pod(), node(taints=[{"key": "dedicated", "effect": "PreferNoSchedule"}]))
    assert not may_use(pod(), node(taints=[{"key": "gone", "effect": "NoExecute"}]))
    tolerations: list[tuple[dict[str, str], bool]] = [
        ({"key": "dedicated", "operator": "Equal", "value": "vm"}, True),
        ({"key": "dedicated", "value": "vm"}, True),  # no operator: Equal
        ({"key": "dedicated", "value": "dpdk"}, False),
        ({"key": "dedicated", "operator": "Exists"}, True),
        ({"key": "dedicated", "operator": "Exists", "effect": "NoExecute"}, False),
        ({"operator": "Exists"}, True),  # no key, Exists: every taint
        ({"key": "other", "operator": "Exists"}, False),
        ({"key": "dedicated", "operator": "Gt", "value": "1"}, True),  # behind a feature gate: counted usable
    ]
    for toleration, expected in tolerations:
        assert may_use(pod(tolerations=[toleration]), tainted) is expected, toleration
    cordoned = node(unschedulable=True)
    assert not may_use(pod(), cordoned)
    unschedulable = {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"}
    assert may_use(pod(tolerations=[unschedulable]), cordoned)


def test_the_scan_is_every_node_unless_every_term_names_nodes() -> None:
    nodes = {"a": None, "b": None, "c": None}
    assert UNCONSTRAINED.scanned(nodes) == 3
    assert pod_reach(pod(affinity=required(expression("pool", "Exists")))).scanned(nodes) == 3
    name_a = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["a"]}]}
    name_gone = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["gone"]}]}
    assert pod_reach(pod(affinity=required(name_a, name_gone))).scanned(nodes) == 1  # only nodes that exist
    assert pod_reach(pod(affinity=required(name_a, expression("pool", "Exists")))).scanned(nodes) == 3
