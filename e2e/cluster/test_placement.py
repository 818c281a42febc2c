"""Placement with the real kube-scheduler calling the extender over HTTP, the extender in live mode.

Every test runs ``hugepage-extender serve --kubeconfig <admin> --config <file>`` (list/watch of
the real kube-apiserver) and a kube-scheduler of its own whose profile scores every node. Each
test has its own namespace(s), nodes carrying its ``test_label`` and pods selecting that label,
so the nodes of other tests (the control plane is shared by the session) are never candidates.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import msgspec
import pytest

from e2e.cluster.placement_support import (
    EXTENDER_REASON_EXCEEDS_POOL,
    EXTENDER_REASON_INSUFFICIENT,
    RESOURCE,
    Cell,
    assert_stays_pending,
    bound_pod,
    metric_value,
    pool_usage,
    wait_extender_in_step,
    wait_for_event,
)
from e2e.controlplane import wait_until
from extender.core.answer import Outcome
from extender.core.candidatelists import SMALL_CANDIDATE_LIST
from extender.shell.kube.events import REASON_NO_CAPACITY, REASON_NO_COMPATIBLE, event_for

pytestmark = pytest.mark.cluster


def _assert_no_pool_overcommitted(cell: Cell, nodes: list[str], need_from_memory: dict[str, bool]) -> None:
    for node, (used, pool) in pool_usage(cell.plane, nodes, need_from_memory).items():
        assert used <= pool, f"{node}: pods hold {used} bytes of hugepages, its pool offers {pool}"


# --------------------------------------------------------------------------- 1. fit, both wire modes


@pytest.mark.parametrize("node_cache_capable", [True, False], ids=["node-names", "full-nodes"])
def test_pods_land_only_on_nodes_that_fit(cell: Cell, node_cache_capable: bool) -> None:
    # The natively most attractive nodes (far more CPU and memory) hold pages outside pod
    # requests, which only the extender sees: "full" has none left, "part" room for one pod.
    full = cell.node("full", reserved="1Gi", cpu="64", memory="256Gi")
    part = cell.node("part", reserved="768Mi", cpu="64", memory="256Gi")
    free = cell.node("free")
    filled = cell.node("filled")
    bound_pod(cell.plane, cell.namespace, "running", filled, hugepages_2mi="512Mi")
    extender = cell.extender({"namespaces": {cell.namespace: {"mode": "enforce"}}})
    scheduler = cell.scheduler(extender, node_cache_capable=node_cache_capable)

    # One at a time, each seen by the extender's watch before the next: this test is about
    # the fit of each decision (in-flight accounting has a test of its own).
    for i in range(7):  # 256Mi free on part, 1Gi on free, 512Mi on filled
        name = cell.pod(f"hp-{i}", scheduler, hugepages_2mi="256Mi")
        cell.plane.wait_for_pod_bound(cell.namespace, name, timeout=180)
        wait_extender_in_step(cell.plane, extender)
    placed = cell.plane.pod_assignments(cell.namespace)
    del placed["running"]
    assert sorted(str(node) for node in placed.values()) == sorted([part] + [free] * 4 + [filled] * 2), placed
    _assert_no_pool_overcommitted(cell, [full, part, free, filled], {})

    # Every pool is now full: the next pod waits, and the scheduler says why in the extender's words.
    cell.pod("one-too-many", scheduler, hugepages_2mi="256Mi")
    wait_for_event(cell.core, cell.namespace, "one-too-many", "FailedScheduling", contains=EXTENDER_REASON_INSUFFICIENT)
    assert cell.plane.pod_assignments(cell.namespace)["one-too-many"] is None


WIDE_NODES = 120


@pytest.mark.parametrize("sample_size", [3, 0], ids=["best-of-3", "every-node"])
def test_a_wide_cluster_is_read_in_place_and_only_free_pools_fill(cell: Cell, sample_size: int) -> None:
    # Enough nodes that the scheduler's candidate list is too long to decode (6.6 KB here): the
    # extender reads it in place. Every pool looks free to kube-scheduler; only the extender sees
    # that all but one node in twelve hold their whole pool outside pods.
    nodes, free = [], []
    for i in range(WIDE_NODES):
        roomy = i % 12 == 0
        node = cell.node(f"w{i:03d}", hugepages="1Gi", reserved=None if roomy else "1Gi")
        nodes.append(node)
        if roomy:
            free.append(node)
    assert len(msgspec.json.encode(nodes)) > SMALL_CANDIDATE_LIST
    # Every node (K = 0) admits more nodes than a hold covers: that needs the bind verb.
    bind = sample_size == 0
    config = {"namespaces": {cell.namespace: {"mode": "enforce", "sampleSize": sample_size}}}
    # With its nudge, as the chart runs it: a pod turned away by another's hold that is then
    # released (that pod bound elsewhere) is looked at again, with no other event to wait for.
    extender = cell.extender(config, enable_bind=bind, nudge=True)
    scheduler = cell.scheduler(extender, bind=bind)  # the extender is ready: it has listed every node

    names = cell.pods([f"p-{i:02d}" for i in range(2 * len(free))], scheduler, hugepages_2mi="512Mi")
    cell.plane.wait_for_pods_bound(cell.namespace, names, timeout=180)
    placed = {name: node for name, node in cell.plane.pod_assignments(cell.namespace).items() if name in names}
    assert sorted(str(node) for node in placed.values()) == sorted(free * 2), placed
    _assert_no_pool_overcommitted(cell, nodes, {})


# --------------------------------------------------------------------------- 2. need derived from memory


def test_vm_pods_sized_by_memory_are_kept_off_a_pool_they_would_overflow(cell: Cell) -> None:
    # VM pods request memory only; their guest RAM is backed by hugepages (needFromMemory).
    # "small" is natively the better node (far more CPU and memory) but a running VM holds
    # 768Mi of its 1Gi pool, which kube-scheduler cannot see: it counts no hugepages at all.
    small = cell.node("small", hugepages="1Gi", cpu="64", memory="256Gi")
    big = cell.node("big", hugepages="4Gi", cpu="8", memory="32Gi")
    bound_pod(cell.plane, cell.namespace, "running-vm", small, memory="768Mi")
    extender = cell.extender({"namespaces": {cell.namespace: {"mode": "enforce", "needFromMemory": True}}})
    with_extender = cell.scheduler(extender)
    native = cell.scheduler(None, prefix="native")

    for i in range(3):
        name = cell.pod(f"vm-{i}", with_extender, memory="512Mi")
        assert cell.plane.wait_for_pod_bound(cell.namespace, name) == big
        wait_extender_in_step(cell.plane, extender)
    # Only "small" allowed: the extender keeps the pod Pending and says why.
    only_small = {**cell.selector, "kubernetes.io/hostname": small}
    cell.pod("vm-pinned", with_extender, memory="512Mi", node_selector=only_small)
    wait_for_event(cell.core, cell.namespace, "vm-pinned", "FailedScheduling", contains=EXTENDER_REASON_INSUFFICIENT)
    wait_for_event(cell.core, cell.namespace, "vm-pinned", REASON_NO_CAPACITY)
    _assert_no_pool_overcommitted(cell, [small, big], {cell.namespace: True})

    # The same scheduler without the extender puts the same pod on "small", overflowing its pool.
    cell.pod("vm-native", native, memory="512Mi")
    assert cell.plane.wait_for_pod_bound(cell.namespace, "vm-native") == small
    used, pool = pool_usage(cell.plane, [small], {cell.namespace: True})[small]
    assert used > pool, (used, pool)
    assert cell.plane.pod_assignments(cell.namespace)["vm-pinned"] is None


# --------------------------------------------------------------------------- 3. full pools, shadow, events


def test_full_pools_leave_pods_pending_with_the_extenders_reason_and_event(cell: Cell) -> None:
    # Both pools are used up by running VMs whose guest RAM is hugepages (memory-only requests):
    # kube-scheduler alone sees them empty. (Pools held outside pods are another, unresolvable,
    # matter: e2e/cluster/test_node_agent.py.)
    pooled = {"e2e.hugepage-extender.io/pool": "yes"}
    full = [cell.node(f"full-{i}", labels=pooled) for i in range(2)]
    no_pool = cell.node("no-pool", hugepages="0")
    vms = cell.new_namespace("vms")
    for i, node in enumerate(full):
        bound_pod(cell.plane, vms, f"running-vm-{i}", node, memory="1Gi")
    extender = cell.extender(
        {"namespaces": {cell.namespace: {"mode": "enforce"}, vms: {"mode": "enforce", "needFromMemory": True}}}
    )
    scheduler = cell.scheduler(extender)

    cell.pod("hp", scheduler, hugepages_2mi="256Mi")
    failed = wait_for_event(cell.core, cell.namespace, "hp", "FailedScheduling", contains=EXTENDER_REASON_INSUFFICIENT)
    # The scheduler's aggregation works: one count for both nodes, no per-node figures.
    assert f"2 {EXTENDER_REASON_INSUFFICIENT}" in failed, failed
    posted = wait_for_event(cell.core, cell.namespace, "hp", REASON_NO_CAPACITY)
    _, message = event_for(Outcome.NO_HUGEPAGE_CAPACITY, {RESOURCE: 256 << 20})
    assert posted == f"{REASON_NO_CAPACITY}: {message}"
    assert not any(node in posted for node in [*full, no_pool]), posted
    assert "1Gi" not in posted, posted

    # A VM pod larger than any whole pool: no node can ever hold it.
    cell.pod("vm-huge", scheduler, namespace=vms, memory="2Gi", node_selector={**cell.selector, **pooled})
    failed = wait_for_event(cell.core, vms, "vm-huge", "FailedScheduling", contains=EXTENDER_REASON_EXCEEDS_POOL)
    posted = wait_for_event(cell.core, vms, "vm-huge", REASON_NO_COMPATIBLE)
    _, message = event_for(Outcome.NO_COMPATIBLE_NODE, {RESOURCE: 2 << 30})
    assert posted == f"{REASON_NO_COMPATIBLE}: {message}"
    assert not any(node in posted for node in [*full, no_pool]), posted

    # Pods without a hugepage need are not the extender's business: they schedule, the
    # node without a pool included.
    cell.pod("plain", scheduler)
    cell.pod("plain-no-pool", scheduler, node_selector={**cell.selector, "kubernetes.io/hostname": no_pool})
    assert cell.plane.wait_for_pod_bound(cell.namespace, "plain") in {*full, no_pool}
    assert cell.plane.wait_for_pod_bound(cell.namespace, "plain-no-pool") == no_pool
    assert cell.plane.pod_assignments(cell.namespace)["hp"] is None
    assert cell.plane.pod_assignments(vms)["vm-huge"] is None


def test_shadow_namespace_places_as_without_extender_and_counts_beside_enforce(cell: Cell) -> None:
    # "roomy" is natively preferred but its pool is held outside pod requests; "small" has room.
    roomy = cell.node("roomy", reserved="1Gi", cpu="64", memory="256Gi")
    small = cell.node("small", cpu="2", memory="4Gi")
    shadow, native_ns = cell.new_namespace("shadow"), cell.new_namespace("native")
    enforce = cell.namespace
    extender = cell.extender({"namespaces": {enforce: {"mode": "enforce"}, shadow: {"mode": "shadow"}}})
    with_extender = cell.scheduler(extender)
    native = cell.scheduler(None, prefix="native")
    rejected = "hugepage_extender_fit_rejected_nodes_total"
    assert metric_value(extender, rejected, {"mode": "shadow"}) == 0

    for i in range(2):
        cell.pod(f"p-{i}", with_extender, namespace=shadow, hugepages_2mi="256Mi")
        cell.pod(f"p-{i}", native, namespace=native_ns, hugepages_2mi="256Mi")
        cell.pod(f"p-{i}", with_extender, namespace=enforce, hugepages_2mi="256Mi")
    names = ["p-0", "p-1"]
    in_shadow = cell.plane.wait_for_pods_bound(shadow, names)
    assert in_shadow == cell.plane.wait_for_pods_bound(native_ns, names) == {"p-0": roomy, "p-1": roomy}
    assert cell.plane.wait_for_pods_bound(enforce, names) == {"p-0": small, "p-1": small}
    # Each shadow pod met one node enforce would have rejected: unresolvably, as pages held outside
    # pods leave it nothing (counted with the pools too small).
    assert metric_value(extender, rejected, {"mode": "shadow", "reason": "exceeds_pool"}) >= 2
    assert metric_value(extender, "hugepage_extender_filter_outcomes_total", {"mode": "shadow"}) >= 2
    # Enforce rejected "roomy" for real (at least until kube-scheduler saw its pool used by requests).
    assert metric_value(extender, rejected, {"mode": "enforce"}) >= 1


# --------------------------------------------------------------------------- 4. a burst against a nearly full cluster

BURST_NODES = 25
SLOT = 128 << 20  # every pod in the burst needs 128Mi of the pool


def _burst_cluster(cell: Cell, vms: str) -> tuple[list[str], int]:
    """25 nodes with a 1280Mi pool (10 slots), a third each partly held by pages outside pods,
    a running VM, or a running hugepage pod. The nodes and the free slots they leave."""
    nodes: list[str] = []
    slots = 0
    for i in range(BURST_NODES):
        kind = i % 3
        node = cell.node(f"n{i:02d}", hugepages="1280Mi", reserved="512Mi" if kind == 0 else None)
        if kind == 1:
            bound_pod(cell.plane, vms, f"running-{i:02d}", node, memory="256Mi")
        elif kind == 2:
            bound_pod(cell.plane, cell.namespace, f"running-{i:02d}", node, hugepages_2mi="128Mi")
        slots += (6, 8, 9)[kind]
        nodes.append(node)
    return nodes, slots


def _bound_in(cell: Cell, namespaces: list[str], prefix: str) -> int:
    return sum(
        1
        for ns in namespaces
        for name, node in cell.plane.pod_assignments(ns).items()
        if node and name.startswith(prefix)
    )


# With or without the bind verb: the filter holds each pod's need on every node it
# admits (best-of-K leaves a few) until the pod shows up bound, because the scheduler
# filters the next pod before this one's binding (a goroutine) reaches anybody.
# Every configuration serve accepts: K from 1 to 16 without the bind verb (the largest
# hold), any K with it (K = 0: every fitting node admitted, no hold until bind names one).
@pytest.mark.parametrize(
    ("bind", "sample_size"),
    [
        pytest.param(True, 3, id="bind-verb"),
        pytest.param(False, 3, id="default-binder"),
        pytest.param(False, 16, id="default-binder-k16"),
        pytest.param(True, 0, id="bind-verb-every-node"),
    ],
)
def test_burst_never_overcommits_a_pool(cell: Cell, bind: bool, sample_size: int) -> None:
    vms = cell.new_namespace("vms")
    nodes, slots = _burst_cluster(cell, vms)
    policy = {"mode": "enforce", "sampleSize": sample_size}
    extender = cell.extender(
        {"namespaces": {cell.namespace: policy, vms: {**policy, "needFromMemory": True}}},
        enable_bind=bind,
    )
    scheduler = cell.scheduler(extender, bind=bind)
    wait_extender_in_step(cell.plane, extender)

    # Half ask for hugepages, half are VM pods sized by memory (invisible to kube-scheduler's
    # own hugepage accounting); more of them than free slots, so the cluster ends up full.
    burst = 210
    assert burst > slots
    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=2) as pool:
        hugepage_pods = pool.submit(
            cell.pods, [f"b-{i:03d}" for i in range(0, burst, 2)], scheduler, hugepages_2mi="128Mi"
        )
        vm_pods = pool.submit(
            cell.pods, [f"b-{i:03d}" for i in range(1, burst, 2)], scheduler, namespace=vms, memory="128Mi"
        )
        hugepage_pods.result(), vm_pods.result()
    created = time.monotonic() - started
    wait_until(
        f"{slots} burst pods bound",
        lambda: _bound_in(cell, [cell.namespace, vms], "b-") >= slots,
        timeout=120,
        interval=0.5,
    )
    filled = time.monotonic() - started
    # The rest are retried (backoff 1-2 s) a few times meanwhile: none of them may fit.
    time.sleep(4)
    bound = _bound_in(cell, [cell.namespace, vms], "b-")
    print(
        f"burst {burst} on {slots} free slots, bind={bind}: created {created:.1f}s, full {filled:.1f}s, bound {bound}"
    )
    usage = pool_usage(cell.plane, nodes, {vms: True})
    over = {node: (used // SLOT, pool // SLOT) for node, (used, pool) in usage.items() if used > pool}
    assert not over, f"over-committed pools (slots held, slots offered): {over}"
    assert bound == slots
    if bind:
        assert metric_value(extender, "hugepage_extender_binds_total", {"result": "bound"}) >= slots


# --------------------------------------------------------------------------- 5. the extender down


def test_extender_down_ignorable_schedules_and_required_waits_for_it(cell: Cell) -> None:
    node = cell.node("only", hugepages="2Gi")
    config = {"namespaces": {cell.namespace: {"mode": "enforce"}}}
    extender = cell.extender(config)
    required = cell.scheduler(extender, ignorable=False, http_timeout="2s")
    ignorable = cell.scheduler(extender, prefix="ign", ignorable=True, http_timeout="2s")
    cell.pod("before", required, hugepages_2mi="256Mi")
    assert cell.plane.wait_for_pod_bound(cell.namespace, "before") == node

    port = extender.port
    extender.stop()
    cell.pod("skipped", ignorable, hugepages_2mi="256Mi")
    cell.pod("waiting", required, hugepages_2mi="256Mi")
    assert cell.plane.wait_for_pod_bound(cell.namespace, "skipped") == node
    # The scheduler names the call that failed: the attempt errors and the pod is retried.
    wait_for_event(cell.core, cell.namespace, "waiting", "FailedScheduling", contains=f"{extender.url}/filter")
    assert_stays_pending(cell.core, cell.namespace, ["waiting"], seconds=3)

    # Back on the same port (as a restarted pod behind a Service would be): the pod is placed.
    cell.extender(config, port=port)
    assert cell.plane.wait_for_pod_bound(cell.namespace, "waiting", timeout=180) == node


# --------------------------------------------------------------------------- 6. kube-apiserver restarts


def test_extender_resumes_its_watch_after_an_apiserver_restart(cell: Cell) -> None:
    # VM pods (memory only): kube-scheduler sees no hugepages at all, so only the extender's
    # memory of the pods placed before the restart keeps the pools from overflowing after it.
    nodes = [cell.node(f"n{i}", hugepages="1Gi") for i in range(2)]
    extender = cell.extender({"namespaces": {cell.namespace: {"mode": "enforce", "needFromMemory": True}}})
    scheduler = cell.scheduler(extender)
    before = cell.pods([f"before-{i}" for i in range(3)], scheduler, memory="512Mi")
    cell.plane.wait_for_pods_bound(cell.namespace, before)
    wait_extender_in_step(cell.plane, extender)
    pid = extender.process.pid

    downtime = cell.plane.restart_apiserver(downtime=1.0)
    # Created at once, while the extender's watch may still be backing off: the resumed
    # watch (or a relist) must bring them.
    after = cell.pods([f"after-{i}" for i in range(3)], scheduler, memory="512Mi")

    def placed_after() -> dict[str, str]:
        return {k: str(v) for k, v in cell.plane.pod_assignments(cell.namespace).items() if k in after and v}

    first = wait_until("a pod created after the restart to be bound", placed_after, timeout=180)
    cached = wait_extender_in_step(cell.plane, extender, timeout=180)
    assert extender.process.running
    assert extender.process.pid == pid
    # One slot was left and one pod took it; the other two must wait although kube-scheduler
    # alone would place them (it counts no hugepages for memory-only pods).
    waiting = sorted(set(after) - set(first))
    assert len(first) == 1, first
    assert_stays_pending(cell.core, cell.namespace, waiting, seconds=3)
    wait_for_event(cell.core, cell.namespace, waiting[0], "FailedScheduling", contains=EXTENDER_REASON_INSUFFICIENT)
    _assert_no_pool_overcommitted(cell, nodes, {cell.namespace: True})
    assert metric_value(extender, "hugepage_extender_cached_pods") == cached
    print(f"apiserver back in {downtime:.1f}s; placed after it: {first}; extender caches {cached} pods")


def test_failover_to_a_fresh_replica_mid_burst_overcommits_nothing(cell: Cell) -> None:
    """What a failover does to placements in flight: the new replica starts with no holds, is not
    ready (filter answers an error, the scheduler retries) until its first list, then sees every
    placement the old one made as bound pods. Nothing is over-committed."""
    vms = cell.new_namespace("vms")
    nodes, slots = _burst_cluster(cell, vms)
    config = {"namespaces": {cell.namespace: {"mode": "enforce"}, vms: {"mode": "enforce", "needFromMemory": True}}}
    first = cell.extender(config)
    scheduler = cell.scheduler(first, ignorable=False)
    wait_extender_in_step(cell.plane, first)

    burst = 210
    names = [f"f-{i:03d}" for i in range(burst)]
    with ThreadPoolExecutor(max_workers=2) as pool:
        before = pool.submit(cell.pods, names[: burst // 2], scheduler, namespace=vms, memory="128Mi")
        time.sleep(0.3)  # the burst is under way when the replica goes
        port = first.port
        first.stop()
        second = cell.extender(config, suffix="-b", port=port)  # the Service's other replica
        before.result()
        cell.pods(names[burst // 2 :], scheduler, namespace=vms, memory="128Mi")
    wait_until(f"{slots} pods bound", lambda: _bound_in(cell, [vms], "f-") >= slots, timeout=120, interval=0.5)
    time.sleep(4)  # the rest are retried meanwhile: none may fit
    usage = pool_usage(cell.plane, nodes, {vms: True})
    over = {node: (used // SLOT, pool // SLOT) for node, (used, pool) in usage.items() if used > pool}
    assert not over, f"over-committed pools after a failover (slots held, slots offered): {over}"
    assert _bound_in(cell, [vms], "f-") == slots
    assert metric_value(second, "hugepage_extender_filter_outcomes_total", {"mode": "enforce", "outcome": "fit"}) > 0
