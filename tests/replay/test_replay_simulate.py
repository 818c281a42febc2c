"""The simulated cluster on cases small enough to work out by hand."""

from __future__ import annotations

from extender.core.holds import HOLD_LIMIT
from extender.core.policy import Mode
from extender.state.cluster import ClusterState
from replay.model import (
    GIB,
    PAGE_SIZE_BYTES,
    RESOURCE_NAME,
    Arrival,
    InFlight,
    NodeGroup,
    Scenario,
    Trace,
    Variant,
    parse_variant,
)
from replay.simulate import (
    NodeSpec,
    PodPlan,
    TrueNodes,
    build_nodes,
    node_object,
    pod_object,
    run_variant,
)
from replay.tally import merge

PAGES_PER_GIB = GIB // PAGE_SIZE_BYTES


def two_nodes_one_hidden_full() -> tuple[NodeGroup, ...]:
    # vmhost has 6 of its 8 GiB used by VMs outside Kubernetes, and four times
    # the CPUs, so a scheduler that sees only CPU prefers it.
    return (
        NodeGroup(1, 8 * GIB, 16_000, 0, 0, "roomy"),
        NodeGroup(1, 8 * GIB, 64_000, 6 * GIB, 6 * GIB, "vmhost"),
    )


def trace(*arrivals: tuple[float, int]) -> Trace:
    """Arrivals of (time, GiB) in namespace vm, 1 CPU, living 100 s."""
    return Trace(tuple(Arrival(t, "vm", gib * GIB, 1000, 100.0) for t, gib in arrivals), windows=1)


def test_outside_usage_reaches_the_extender_as_reserved_pages() -> None:
    spec = NodeSpec("vmhost-0000", pool_pages=4096, outside_pages=3072, cpu_millis=64_000)
    state = ClusterState(parse_variant("enforce").config(30.0))
    state.replace([node_object(spec)], [])
    account = state.books[RESOURCE_NAME].accounts["vmhost-0000"]
    assert (account.total_pages, account.outside_pods_pages, account.cpu_millis) == (4096, 3072, 64_000)


def test_a_vm_pod_asks_for_memory_and_the_extender_derives_its_hugepage_need() -> None:
    pod = pod_object(PodPlan("p", "vm", 6 * GIB, 1000, 100.0, 5.0, None))
    assert pod.spec.containers[0].resources is not None
    assert pod.spec.containers[0].resources.requests == {"memory": str(6 * GIB), "cpu": "1000m"}
    demand = ClusterState(parse_variant("off").config(30.0)).demand_of(pod)
    assert (demand.bytes_of(RESOURCE_NAME), demand.cpu_millis) == (6 * GIB, 1000)


def test_outside_usage_is_drawn_within_the_groups_range_and_fixed_by_the_seed() -> None:
    groups = (NodeGroup(50, 8 * GIB, 16_000, 1 * GIB, 3 * GIB, "n"),)
    nodes = build_nodes(groups, seed=3)
    assert all(1 * PAGES_PER_GIB <= n.outside_pages <= 3 * PAGES_PER_GIB for n in nodes)
    assert nodes == build_nodes(groups, seed=3)
    assert nodes != build_nodes(groups, seed=4)


def test_true_nodes_count_what_is_on_its_way_as_taken() -> None:
    nodes = TrueNodes([NodeSpec("a", 4 * PAGES_PER_GIB, 0, 4000)])
    assert nodes.has_room(4 * PAGES_PER_GIB, 1000)
    nodes.arriving_pages["a"] += 1 * PAGES_PER_GIB
    assert not nodes.has_room(4 * PAGES_PER_GIB, 1000)  # 3 GiB left once the arrival lands
    assert nodes.free_pages("a") == 4 * PAGES_PER_GIB  # ...but the pool itself is still empty
    nodes.assumed_cpu["a"] = 3500
    assert not nodes.cpu_fits("a", 1000)  # 3.5 + 1 CPU > 4 allocatable


def test_the_blind_scheduler_sends_a_pod_to_a_node_full_of_outside_usage() -> None:
    scenario = Scenario(two_nodes_one_hidden_full(), (), trace((0.0, 4)))
    off = merge(run_variant(scenario, parse_variant("off"), seed=1).steps)
    enforce = merge(run_variant(scenario, parse_variant("enforce:fullscan:k0"), seed=1).steps)
    assert (off.placed, off.failed_node) == (0, 1)
    assert (enforce.placed, enforce.failed_node) == (1, 0)


def test_in_flight_accounting_turns_a_node_failure_into_a_fast_rejection() -> None:
    # One 8 GiB pool, two 6 GiB pods 0.005 s apart: the first's bind is still on
    # its way (it shows up bound after the calibrated 0.01 s) when the second is decided.
    scenario = Scenario((NodeGroup(1, 8 * GIB, 16_000),), (), trace((0.0, 6), (0.005, 6)))
    outcomes = {}
    for inflight in InFlight:
        total = merge(run_variant(scenario, Variant(Mode.ENFORCE, inflight=inflight), seed=1).steps)
        outcomes[inflight] = (total.placed, total.failed_node, total.failed_decision)
        assert total.false_failures == 0  # the node was taken: rejecting was right
    assert outcomes[InFlight.NONE] == (1, 1, 0)
    assert outcomes[InFlight.FILTER] == (1, 0, 1)  # the filter held the one node it admitted
    assert outcomes[InFlight.BIND] == (1, 0, 1)


def k0_cluster(small_nodes: int) -> Scenario:
    """``small_nodes`` 8 GiB nodes with 16 CPUs and one with 64 CPUs, which the blind
    scheduler prefers; two 6 GiB pods 0.005 s apart (within the first's bind), decided with K = 0."""
    nodes = (NodeGroup(small_nodes, 8 * GIB, 16_000, prefix="small"), NodeGroup(1, 8 * GIB, 64_000, prefix="big"))
    return Scenario(nodes, (), trace((0.0, 6), (0.005, 6)))


def outcome(scenario: Scenario, spec: str) -> tuple[int, int, int, int]:
    total = merge(run_variant(scenario, parse_variant(spec), seed=1).steps)
    return total.placed, total.failed_node, total.failed_decision, total.false_failures


def test_the_filter_holds_every_admitted_node_up_to_the_hold_limit() -> None:
    # HOLD_LIMIT nodes admitted: the first pod is held on all of them, so the
    # second finds none free although every node but one could hold it.
    assert outcome(k0_cluster(HOLD_LIMIT - 1), "enforce:fullscan:k0") == (1, 0, 1, 1)
    # One more: the filter holds nothing, both pods go to the 64-CPU node, one fails there.
    assert outcome(k0_cluster(HOLD_LIMIT), "enforce:fullscan:k0") == (1, 1, 0, 0)
    # The bind verb holds the picked node alone, whatever the filter left.
    assert outcome(k0_cluster(HOLD_LIMIT - 1), "enforce:fullscan:k0:inflight=bind") == (2, 0, 0, 0)
    assert outcome(k0_cluster(HOLD_LIMIT), "enforce:fullscan:k0:inflight=bind") == (2, 0, 0, 0)
    assert outcome(k0_cluster(HOLD_LIMIT), "enforce:fullscan:k0:inflight=none") == (1, 1, 0, 0)


def test_a_namespace_scoped_variant_enforces_only_there() -> None:
    scenario = Scenario(
        two_nodes_one_hidden_full(),
        (),
        Trace((Arrival(0.0, "batch", 4 * GIB, 1000, 100.0), Arrival(200.0, "vm", 4 * GIB, 1000, 100.0)), windows=1),
    )
    run = run_variant(scenario, parse_variant("enforce:fullscan:k0:ns=vm"), seed=1)
    assert (run.namespaces["batch"].failed_node, run.namespaces["vm"].placed) == (1, 1)


def test_the_bind_verb_holds_pods_of_every_mode_the_filter_alone_only_enforced_ones() -> None:
    # One 8 GiB pool; a batch pod (mode off) and then a vm pod (enforce), 6 GiB
    # each, both on their way at once. The filter holds only pods it enforces,
    # so without the bind verb the batch pod is invisible until it shows up bound, the vm
    # pod is sent too and one of them fails on the node. The bind verb holds the
    # batch pod as well, and the vm pod is turned away at the decision.
    arrivals = (Arrival(0.0, "batch", 6 * GIB, 1000, 100.0), Arrival(0.005, "vm", 6 * GIB, 1000, 100.0))
    scenario = Scenario((NodeGroup(1, 8 * GIB, 16_000),), (), Trace(arrivals, windows=1))
    filter_only = run_variant(scenario, parse_variant("enforce:fullscan:k3:ns=vm"), seed=1)
    bind = run_variant(scenario, parse_variant("enforce:fullscan:k3:inflight=bind:ns=vm"), seed=1)
    assert merge(filter_only.steps).failed_node == 1
    assert merge(bind.steps).failed_node == 0
    assert bind.namespaces["vm"].failed_decision == 1
    assert bind.namespaces["vm"].false_failures == 0


def test_a_pod_counts_on_its_node_once_bound_long_before_the_node_runs_it() -> None:
    # The same two pods 0.1 s apart: the first shows up bound after 0.01 s (the
    # measured bind delay), so even without holds the second is refused at the
    # decision, though the first reaches its node only seconds later.
    scenario = Scenario((NodeGroup(1, 8 * GIB, 16_000),), (), trace((0.0, 6), (0.1, 6)))
    total = merge(run_variant(scenario, Variant(Mode.ENFORCE, inflight=InFlight.NONE), seed=1).steps)
    assert (total.placed, total.failed_node, total.failed_decision) == (1, 0, 1)
