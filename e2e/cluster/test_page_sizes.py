"""Every page size, through the real kube-scheduler: one extender guards the 2 MiB and the 1 GiB pools.

Nodes with one pool or both; pods asking 2Mi, 1Gi and both. Pages held outside pods (the manual
annotation, per size) are what only the extender sees: kube-scheduler's own ``NodeResourcesFit``
counts pod requests against allocatable, so the natively most attractive nodes below look free to
it. Then ``explain`` (``hugepage-extender explain --kubeconfig`` and ``kubectl hugepages explain``)
shows, per size and per node, what the extender's filter answers.
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Mapping
from typing import Any

import msgspec
import pytest

from e2e.cluster.placement_support import Cell, parse_quantity, run, wait_extender_in_step, wait_for_event
from extender.core.answer import Reasons
from extender.core.capacity import Fit
from extender.shell.kube.events import REASON_NO_COMPATIBLE
from tests.verdicts import of_filter_answer

pytestmark = pytest.mark.cluster
SMALL, LARGE = "hugepages-2Mi", "hugepages-1Gi"
RESERVED = "hugepage-extender.io/reserved-"


def node(
    cell: Cell, suffix: str, *, small: str, large: str, cpu: str = "8", held: Mapping[str, str] | None = None
) -> str:
    """A node with a 2 MiB pool of ``small`` and a 1 GiB pool of ``large`` ("0": none), and pages
    held outside pods per size (the annotation, which only the extender reads)."""
    name = f"{cell.slug}-{suffix}"
    memory = "256Gi" if cpu == "64" else "32Gi"
    cell.plane.create_node(
        name, hugepages_2mi=small, resources={LARGE: large}, cpu=cpu, memory=memory, labels=cell.selector
    )
    if held:
        annotations = {RESERVED + resource: quantity for resource, quantity in held.items()}
        cell.core.patch_node(name, {"metadata": {"annotations": annotations}})
    return name


def asks(small: str | None = None, large: str | None = None) -> dict[str, Any]:
    """``pod_manifest`` arguments of a pod asking ``small`` of 2 MiB pages and ``large`` of 1 GiB pages."""
    return {"hugepages_2mi": small, "extended": {LARGE: large} if large else None}


def filter_one_node(url: str, pod: Mapping[str, Any], name: str) -> Any:
    """The extender's answer for ``pod`` on ``name`` alone, as kube-scheduler asks it."""
    body = msgspec.json.encode({"Pod": pod, "NodeNames": [name]})
    request = urllib.request.Request(f"{url}/filter", data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as answer:
        return msgspec.json.decode(answer.read())


def test_pods_of_either_size_or_both_land_only_where_each_pool_they_need_holds_them(cell: Cell) -> None:
    # The natively attractive nodes (64 CPUs) each have one pool held outside pods in full.
    only_small = node(cell, "only-2m", small="1Gi", large="0")
    only_large = node(cell, "only-1g", small="0", large="4Gi")
    large_held = node(cell, "1g-held", small="1Gi", large="4Gi", cpu="64", held={LARGE: "4Gi"})
    small_held = node(cell, "2m-held", small="1Gi", large="4Gi", cpu="64", held={SMALL: "1Gi"})
    roomy = node(cell, "roomy", small="1Gi", large="4Gi")
    # Every candidate drawn (K = 5 nodes): the scheduler's own scores then pick among those that fit. With
    # K = 3 a draw leaving out "2m-held" sent "one-gi" to "roomy" one time in eight, and "both-again" then
    # found no 1 GiB page there.
    policy = {"mode": "enforce", "sampleSize": 5}
    config = {"resourceNames": [SMALL, LARGE], "namespaces": {cell.namespace: policy}}
    extender = cell.extender(config)
    scheduler = cell.scheduler(extender)

    def place(name: str, **kwargs: Any) -> str:
        cell.pod(name, scheduler, **kwargs)
        bound = cell.plane.wait_for_pod_bound(cell.namespace, name, timeout=120)
        wait_extender_in_step(cell.plane, extender)
        return bound

    # One size each: never on the node whose pool of that size is held outside pods.
    assert place("two-mi", **asks(small="256Mi")) in {only_small, large_held, roomy}
    assert place("one-gi", **asks(large="2Gi")) in {only_large, small_held, roomy}
    # Both sizes: only "roomy" has room in both pools (each 64-CPU node lacks one).
    assert place("both", **asks(small="512Mi", large="2Gi")) == roomy
    assert place("both-again", **asks(small="256Mi", large="1Gi")) == roomy

    # Pinned to a node one of whose pools cannot hold it: Pending, in the words of the size at fault.
    for name, target, resource in (("on-1g-held", large_held, LARGE), ("on-2m-held", small_held, SMALL)):
        pinned = {**cell.selector, "kubernetes.io/hostname": target}
        cell.pod(name, scheduler, node_selector=pinned, **asks(small="2Mi", large="1Gi"))
        reason = Reasons.for_resource(resource).held_outside
        wait_for_event(cell.core, cell.namespace, name, "FailedScheduling", contains=reason)
        wait_for_event(
            cell.core, cell.namespace, name, REASON_NO_COMPATIBLE, contains=f"2Mi of {SMALL} and 1Gi of {LARGE}"
        )
    # "roomy" now has 256Mi of 2 MiB pages and 1 GiB page left: a pod asking more of 1 GiB waits there.
    cell.pod(
        "too-many",
        scheduler,
        node_selector={**cell.selector, "kubernetes.io/hostname": roomy},
        **asks(large="1Gi", small="2Mi"),
    )
    assert cell.plane.wait_for_pod_bound(cell.namespace, "too-many", timeout=120) == roomy
    wait_extender_in_step(cell.plane, extender)
    cell.pod("over", scheduler, node_selector={**cell.selector, "kubernetes.io/hostname": roomy}, **asks(large="1Gi"))
    wait_for_event(cell.core, cell.namespace, "over", "FailedScheduling", contains=f"Insufficient {LARGE}")
    assert cell.plane.pod_assignments(cell.namespace)["over"] is None

    # No pool of either size over-committed, counting what is held outside pods.
    for name in (only_small, only_large, large_held, small_held, roomy):
        for resource in (SMALL, LARGE):
            used, offered = pool_of(cell, name, resource)
            assert used <= offered, (name, resource, used, offered)


def pool_of(cell: Cell, name: str, resource: str) -> tuple[int, int]:
    """(bytes of ``resource`` the node's bound pods request, bytes its pool offers pods), read from the
    API with the client's own quantity parser: an oracle independent of the extender's code."""
    live = cell.core.read_node(name)
    allocatable = (live.status.allocatable if live.status else None) or {}
    annotations = (live.metadata.annotations if live.metadata else None) or {}
    held = annotations.get(RESERVED + resource, "0")
    offered = int(parse_quantity(allocatable.get(resource, "0"))) - int(parse_quantity(held))
    used = 0
    for pod in cell.core.list_namespaced_pod(cell.namespace).items:
        if pod.spec is None or pod.spec.node_name != name:
            continue
        for container in pod.spec.containers:
            requests = (container.resources.requests if container.resources else None) or {}
            used += int(parse_quantity(requests.get(resource, "0")))
    return used, offered


def test_explain_shows_each_size_and_agrees_with_the_filter_on_every_node(cell: Cell) -> None:
    """``explain`` per size, live (``hugepage-extender explain --kubeconfig`` and ``kubectl hugepages
    explain``, with the running extender's holds and policy), for pods of 2Mi, 1Gi and both: per node
    the verdict over every size and the size it comes from are the filter's answer."""
    nodes = [
        node(cell, "only-2m", small="1Gi", large="0"),
        node(cell, "only-1g", small="0", large="4Gi"),
        node(cell, "1g-held", small="1Gi", large="4Gi", held={LARGE: "3Gi"}),
        node(cell, "2m-held", small="1Gi", large="4Gi", held={SMALL: "1Gi"}),
        node(cell, "roomy", small="1Gi", large="4Gi"),
        node(cell, "neither", small="0", large="0"),
    ]
    config = {
        "resourceNames": [SMALL, LARGE],
        "namespaces": {cell.namespace: {"mode": "enforce", "holdTimeoutSeconds": 300}},
    }
    pods = {
        "two-mi": asks(small="512Mi"),
        "one-gi": asks(large="2Gi"),
        "both": asks(small="512Mi", large="2Gi"),
        "huge": asks(small="2Mi", large="8Gi"),  # larger than any 1 GiB pool
    }
    for name, kwargs in pods.items():
        cell.plane.create_pod(cell.namespace, name, scheduler_name="nobody", node_selector=cell.selector, **kwargs)
    extender = cell.extender(config)
    kubeconfig = str(cell.plane.kubeconfig)
    compared: set[tuple[str, str]] = set()
    for name in pods:
        pod_name = f"{cell.namespace}/{name}"
        flags = ["--output", "json", "--extender", extender.url]
        cli = json.loads(run("hugepage-extender", "explain", "--kubeconfig", kubeconfig, "--pod", pod_name, *flags))
        plugin = json.loads(run("kubectl-hugepages", "explain", pod_name, *flags, env={"KUBECONFIG": kubeconfig}))
        pod = msgspec.json.decode(cell.core.read_namespaced_pod(name, cell.namespace, _preload_content=False).data)  # type: ignore[attr-defined]
        sizes = [table["resource_name"] for table in (cli, *cli["more"])]
        assert sizes == [r for r, k in ((SMALL, "hugepages_2mi"), (LARGE, "extended")) if pods[name][k]], (name, sizes)
        for document in (cli, plugin):
            for node_name in nodes:
                if cli["more"]:
                    verdict, resource = (
                        document["verdicts"][node_name]["verdict"],
                        document["verdicts"][node_name]["resourceName"],
                    )
                else:
                    (row,) = [r for r in document["nodes"] if r["node"] == node_name]
                    verdict, resource = row["verdict"], document["resource_name"]
                said = of_filter_answer(filter_one_node(extender.url, pod, node_name), node_name)
                fit = Fit(verdict)
                shown = ("admitted", "") if fit.admits else ("unresolvable", Reasons.for_resource(resource).of(fit))
                assert shown == said, (name, node_name, verdict, resource)
                compared.add((verdict, resource))
    # Every kind of verdict was compared, for each size.
    assert {("fits", SMALL), ("fits", LARGE), ("no pool", SMALL), ("no pool", LARGE)} <= compared
    assert {("held outside pods", SMALL), ("held outside pods", LARGE), ("exceeds pool", LARGE)} <= compared
