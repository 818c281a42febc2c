"""A bind is a reservation, on the real kube-scheduler (issue 29).

The burst that over-committed a pool once in ten rounds: the bind verb (the chart's default with its
secondary scheduler), ``sampleSize: 0`` (every fitting node admitted, no hold until a bind names one),
hugepage pods and VM pods sized by memory mixed, 140 pods of 512Mi onto pools that hold 128 of them.
Two filters a few milliseconds apart admit two pods to the same last room; the second bind is
refused (``binds_total{result="no_room"}``) and the scheduler retries that pod. Twenty rounds on one
control plane, extender and scheduler, the pods deleted between rounds; then a few with two schedulers
sharing the extender, where the race comes nearly every round (figures: docs/reliability.md).
"""

from __future__ import annotations

import functools
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from kubernetes import client

from e2e.cluster.placement_support import Cell, bound_active_pods, metric_value, pool_usage
from e2e.controlplane import Service, wait_until

pytestmark = pytest.mark.cluster

SLOT = 512 << 20
CAPACITY = 128
BURST = 140
ROUNDS = 20


def _pods(core: client.CoreV1Api, namespaces: list[str], prefix: str) -> list[client.V1Pod]:
    return [
        pod
        for namespace in namespaces
        for pod in core.list_namespaced_pod(namespace).items
        if pod.metadata is not None and str(pod.metadata.name).startswith(prefix)
    ]


def _node_of(pod: client.V1Pod) -> str | None:
    return pod.spec.node_name if pod.spec is not None else None


def _turned_away(pod: client.V1Pod) -> bool:
    """Unbound, Pending, and told so by the scheduler (PodScheduled False): waiting for room, not failed."""
    conditions = (pod.status.conditions if pod.status else None) or []
    unscheduled = any(c.type == "PodScheduled" and c.status == "False" for c in conditions)
    phase = pod.status.phase if pod.status else None
    return not _node_of(pod) and phase == "Pending" and unscheduled


def _settled(core: client.CoreV1Api, namespaces: list[str], prefix: str) -> list[client.V1Pod] | None:
    """The round's pods once the pools are full and each of the rest is turned away (a refused bind's pod
    is retried after its backoff: the round is over only when each has been filtered again); else None."""
    pods = _pods(core, namespaces, prefix)
    bound = sum(1 for pod in pods if _node_of(pod))
    return pods if bound >= CAPACITY and all(_node_of(p) or _turned_away(p) for p in pods) else None


def _bindings_made(extender: Service, before: int, at_least: int) -> int | None:
    made = _binds(extender, "bound") - before
    return made if made >= at_least else None


def _binds(extender: Service, result: str) -> int:
    return int(metric_value(extender, "hugepage_extender_binds_total", {"result": result}))


def _burst(cell: Cell, schedulers: tuple[str, str], vm_ns: str, prefix: str) -> None:
    """Half hugepage pods, half VM pods sized by memory (invisible to kube-scheduler's own accounting)."""
    with ThreadPoolExecutor(max_workers=2) as pool:
        names = [f"{prefix}h{i:03d}" for i in range(BURST // 2)]
        hugepage_pods = pool.submit(cell.pods, names, schedulers[0], hugepages_2mi="512Mi")
        names = [f"{prefix}v{i:03d}" for i in range(BURST // 2)]
        vm_pods = pool.submit(cell.pods, names, schedulers[1], namespace=vm_ns, memory="512Mi")
        hugepage_pods.result(), vm_pods.result()


def _cleared(cell: Cell, extender: Service, namespaces: list[str]) -> None:
    """Every pod deleted, and the extender's cache and holds back where they were."""
    for namespace in namespaces:
        cell.core.delete_collection_namespaced_pod(namespace, grace_period_seconds=0)

    def gone() -> bool:
        cached = metric_value(extender, "hugepage_extender_cached_pods")
        return not _pods(cell.core, namespaces, "") and cached == bound_active_pods(cell.plane)

    wait_until("the pods gone from the API and the extender's cache", gone, timeout=30)
    wait_until("no holds", lambda: metric_value(extender, "hugepage_extender_holds") == 0, timeout=30)


# One scheduler, 2Gi pools: the chart's secondary scheduler and the pools of the issue, which met the race
# in one round of ten (its next filter races only its previous pod's bind). Two schedulers sharing the
# extender (one per pod kind), pools of one pod: filters of one interleave with the other's binds all along
# the burst and every room is a last one, so the race comes nearly every round; the test asserts it was met
# (binds refused for room), and the code before this fix over-committed a pool in its first round.
@pytest.mark.parametrize(
    ("schedulers", "pool", "rounds"), [(1, 2048, ROUNDS), (2, 512, 4)], ids=["one-scheduler", "two-schedulers"]
)
def test_a_burst_onto_pools_that_hold_fewer_binds_exactly_what_fits_every_round(
    cell: Cell, schedulers: int, pool: int, rounds: int
) -> None:
    hugepage_ns, vm_ns = cell.namespace, cell.new_namespace("vms")
    nodes = [cell.node(f"n{i:03d}", hugepages=f"{pool}Mi") for i in range(CAPACITY * SLOT // (pool << 20))]
    policy = {"mode": "enforce", "sampleSize": 0}
    extender = cell.extender(
        {"namespaces": {hugepage_ns: policy, vm_ns: {**policy, "needFromMemory": True}}}, enable_bind=True
    )
    first = cell.scheduler(extender, bind=True)
    by_kind = (first, first if schedulers == 1 else cell.scheduler(extender, prefix="vm", bind=True))
    namespaces = [hugepage_ns, vm_ns]
    refusals: list[int] = []
    seconds: list[float] = []
    started_all = time.monotonic()
    for round_ in range(rounds):
        prefix = f"r{round_:02d}-"
        refused_before, made_before = _binds(extender, "no_room"), _binds(extender, "bound")
        started = time.monotonic()
        _burst(cell, by_kind, vm_ns, prefix)
        what = f"round {round_}: {CAPACITY} bound and the rest turned away"
        pods = wait_until(what, functools.partial(_settled, cell.core, namespaces, prefix), timeout=60)
        seconds.append(time.monotonic() - started)
        usage = pool_usage(cell.plane, nodes, {vm_ns: True})
        over = {node: (used // SLOT, offered // SLOT) for node, (used, offered) in usage.items() if used > offered}
        assert not over, f"round {round_}: over-committed pools (pods held, pods offered): {over}"
        waiting = [pod for pod in pods if not _node_of(pod)]
        assert len(pods) - len(waiting) == CAPACITY, f"round {round_}: {len(pods) - len(waiting)} bound"
        assert len(waiting) == BURST - CAPACITY
        assert all(_turned_away(pod) for pod in waiting)  # Pending, retried: not failed
        # The extender made every Binding. It counts one when the API server's answer reaches it, which
        # under load can come after the test has seen the pod bound: wait for the count. At least, not
        # exactly: while a round is cleared its waiting pods take the room its deleted pods free, and those
        # Bindings can be counted after the next round has begun (the full suite at load 16: 36 between
        # rounds 0 and 3, then 131 in round 3 with 128 bound and none over).
        counted = functools.partial(_bindings_made, extender, made_before, CAPACITY)
        wait_until(f"round {round_}: the extender to count its Bindings", counted, timeout=10)
        refusals.append(_binds(extender, "no_room") - refused_before)
        print(f"round {round_}: bound {CAPACITY}, binds refused for room {refusals[-1]}, {seconds[-1]:.1f}s")
        _cleared(cell, extender, namespaces)
    print(
        f"{schedulers} scheduler(s), {len(nodes)} pools of {pool}Mi, {rounds} rounds of {BURST} pods in "
        f"{time.monotonic() - started_all:.0f}s: "
        f"bound {CAPACITY} and 0 pools over every round; binds refused for room per round {refusals} "
        f"({sum(refusals)} in all); a round {min(seconds):.1f}-{max(seconds):.1f}s to settle"
    )
    if schedulers > 1:
        assert sum(refusals) > 0, "the race of two filters admitting the same last room never came"
