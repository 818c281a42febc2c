"""ClusterState: accounts from nodes and pods, and placements in flight."""

import pytest

from extender.core.capacity import NodeAccount
from extender.core.config import DEFAULT_RESOURCE, build_config
from extender.core.podrequest import PodDemand
from extender.core.quantity import QuantityError
from extender.state.cluster import ClusterState
from tests.conftest import PAGE_2MI, Clock, GiB, make_node, make_pod


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def state(clock: Clock) -> ClusterState:
    config = build_config({"namespaces": {"vms": {"needFromMemory": True}}}, {})
    s = ClusterState(config, clock=clock)
    s.replace(
        [make_node("a", hugepages="4Gi", cpu="8", reserved="1Gi"), make_node("b", hugepages="2Gi"), make_node("c")],
        [
            make_pod("p1", hugepages="1Gi", cpu="2", node="a", phase="Running"),
            make_pod("p2", hugepages="1Gi", node="a", phase="Succeeded"),  # terminal: not counted
            make_pod("p3", hugepages="1Gi"),  # not bound: not counted
            make_pod("vm", "vms", memory="1Gi", cpu="1", node="b", phase="Running"),  # need from memory
        ],
    )
    return s


def test_accounts_from_allocatable_pods_and_annotations(state: ClusterState) -> None:
    assert state.ready
    assert state.books[DEFAULT_RESOURCE].accounts["a"] == NodeAccount(
        page_size=PAGE_2MI,
        total_pages=2048,
        used_pages=512,
        outside_pods_pages=512,
        cpu_millis=8000,
        cpu_requested_millis=2000,
    )
    assert state.books[DEFAULT_RESOURCE].accounts["b"].used_pages == 512
    assert not state.books[DEFAULT_RESOURCE].accounts["c"].has_pool
    assert state.pod_count == 2


def test_pod_lifecycle_updates_only_the_nodes_it_touches(state: ClusterState) -> None:
    state.apply_pod(make_pod("p3", hugepages="1Gi", node="b", phase="Running"))
    assert state.books[DEFAULT_RESOURCE].accounts["b"].used_pages == 1024
    state.apply_pod(make_pod("p3", hugepages="1Gi", node="b", phase="Succeeded"))
    assert state.books[DEFAULT_RESOURCE].accounts["b"].used_pages == 512
    state.apply_pod(make_pod("p1", hugepages="1Gi", cpu="2", node="a", phase="Running"))  # replay is idempotent
    assert state.books[DEFAULT_RESOURCE].accounts["a"].used_pages == 512
    state.remove_pod("uid-default-p1")
    assert state.books[DEFAULT_RESOURCE].accounts["a"].used_pages == 0
    assert state.books[DEFAULT_RESOURCE].accounts["a"].cpu_requested_millis == 0


def test_reservation_counts_until_the_pod_is_seen_bound(state: ClusterState) -> None:
    demand = PodDemand({DEFAULT_RESOURCE: GiB}, 500)
    assert state.hold("uid-default-p3", "b", demand, 30)
    assert state.books[DEFAULT_RESOURCE].accounts["b"].held_bytes == GiB
    assert state.books[DEFAULT_RESOURCE].accounts["b"].held_cpu_millis == 500
    state.apply_pod(make_pod("p3", hugepages="1Gi", node="b", phase="Pending"))
    assert state.books[DEFAULT_RESOURCE].accounts["b"].held_bytes == 0
    assert state.books[DEFAULT_RESOURCE].accounts["b"].used_pages == 1024  # counted once, as usage


def test_reservation_is_idempotent_per_pod_and_moves_with_it(state: ClusterState) -> None:
    demand = PodDemand({DEFAULT_RESOURCE: GiB}, 0)
    state.hold("u", "a", demand, 30)
    state.hold("u", "a", demand, 30)
    assert state.books[DEFAULT_RESOURCE].accounts["a"].held_bytes == GiB
    state.hold("u", "b", demand, 30)
    assert state.books[DEFAULT_RESOURCE].accounts["a"].held_bytes == 0
    assert state.books[DEFAULT_RESOURCE].accounts["b"].held_bytes == GiB
    assert state.hold_count == 1


def test_reservation_ends_when_the_pod_is_deleted_or_times_out(state: ClusterState, clock: Clock) -> None:
    state.hold("gone", "a", PodDemand({DEFAULT_RESOURCE: GiB}, 0), 30)
    state.remove_pod("gone")
    assert state.books[DEFAULT_RESOURCE].accounts["a"].held_bytes == 0
    state.hold("slow", "a", PodDemand({DEFAULT_RESOURCE: GiB}, 0), 30)
    clock.now += 29.9
    state.expire_holds()
    assert state.books[DEFAULT_RESOURCE].accounts["a"].held_bytes == GiB
    clock.now += 0.2
    state.expire_holds()
    assert state.books[DEFAULT_RESOURCE].accounts["a"].held_bytes == 0
    assert state.hold_count == 0


def test_bound_pods_are_not_reserved_twice(state: ClusterState) -> None:
    assert not state.hold("uid-default-p1", "a", PodDemand({DEFAULT_RESOURCE: GiB}, 0), 30)
    assert state.books[DEFAULT_RESOURCE].accounts["a"].held_bytes == 0


def test_reservations_survive_a_relist(state: ClusterState) -> None:
    state.hold("in-flight", "a", PodDemand({DEFAULT_RESOURCE: GiB}, 0), 30)
    state.replace([make_node("a", hugepages="4Gi")], [])
    assert state.books[DEFAULT_RESOURCE].accounts["a"].held_bytes == GiB
    assert set(state.books[DEFAULT_RESOURCE].accounts) == {"a"}


def test_a_bound_pod_record_keeps_one_shared_node_name_and_no_owner(state: ClusterState) -> None:
    """At 300,000 pods each byte a record keeps is 0.3 MB: the pods of a node share its name (the
    watch decodes a new copy with each pod), and only a pod waiting for a node keeps its owner."""
    node = "".join(["node-", "a"])  # built at run time: not the literal's interned string
    first = state.pod_record(make_pod("q1", hugepages="1Gi", node=node, phase="Running"))
    second = state.pod_record(make_pod("q2", hugepages="1Gi", node="".join(["node-", "a"]), phase="Running"))
    assert first.usage is not None
    assert second.usage is not None
    assert first.usage.node == "node-a"
    assert first.usage.node is second.usage.node
    assert first.owner == second.owner == ""
    assert state.pod_record(make_pod("q3", hugepages="1Gi", phase="Succeeded")).owner == ""
    waiting = make_pod("q4", "ns", hugepages="1Gi")
    assert state.pod_record(waiting).owner == "ns/q4"
    state.apply_pod(waiting)
    assert state.owner_of("uid-ns-q4") == "ns/q4"
    state.apply_pod(make_pod("q4", "ns", hugepages="1Gi", node="a", phase="Running"))
    assert state.owner_of("uid-ns-q4") is None
    assert state.books[DEFAULT_RESOURCE].accounts["a"].used_pages == 1024


def test_node_changes_and_removal(state: ClusterState) -> None:
    state.apply_node(make_node("b", hugepages="8Gi"))
    assert state.books[DEFAULT_RESOURCE].accounts["b"].total_pages == 4096
    assert state.books[DEFAULT_RESOURCE].accounts["b"].used_pages == 512
    state.remove_node("b")
    assert "b" not in state.books[DEFAULT_RESOURCE].accounts
    state.apply_node(make_node("b", hugepages="8Gi"))  # pods bound to it were kept
    assert state.books[DEFAULT_RESOURCE].accounts["b"].used_pages == 512


def test_a_bad_object_leaves_the_state_whole(state: ClusterState) -> None:
    before = dict(state.books[DEFAULT_RESOURCE].accounts)
    with pytest.raises(QuantityError):
        state.apply_pod(make_pod("p1", hugepages="lots", node="a", phase="Running"))
    with pytest.raises(QuantityError):
        state.replace([make_node("z", hugepages="plenty")], [])
    assert state.books[DEFAULT_RESOURCE].accounts == before


def test_a_hold_on_several_nodes_counts_on_each_until_the_pod_is_seen_bound(state: ClusterState) -> None:
    demand = PodDemand({DEFAULT_RESOURCE: GiB}, 100)
    assert state.hold("u", ["a", "b", "a"], demand, 30)
    assert (
        state.books[DEFAULT_RESOURCE].accounts["a"].held_bytes
        == state.books[DEFAULT_RESOURCE].accounts["b"].held_bytes
        == GiB
    )
    state.hold("u", "b", demand, 30)  # the bind names the node: the hold narrows to it
    assert state.books[DEFAULT_RESOURCE].accounts["a"].held_bytes == 0
    assert state.books[DEFAULT_RESOURCE].accounts["b"].held_bytes == GiB
    state.hold("v", ["a", "b"], demand, 30)
    state.apply_pod(make_pod("v", uid="v", hugepages="1Gi", node="a", phase="Pending"))
    assert state.books[DEFAULT_RESOURCE].accounts["a"].held_bytes == 0
    assert state.books[DEFAULT_RESOURCE].accounts["b"].held_bytes == GiB  # only u's hold is left
    assert state.hold_count == 1


def test_columns_read_after_any_change_hold_the_accounts_of_that_moment(state: ClusterState) -> None:
    def column_rows() -> dict[str, tuple[int, ...]]:
        columns = state.books[DEFAULT_RESOURCE].columns
        slots = columns.slots(sorted(state.books[DEFAULT_RESOURCE].accounts)).tolist()
        fields = ("total_pages", "committed_pages", "held_pages", "used_pages", "cpu_busy_millis")
        return {
            name: tuple(int(columns.column(f)[slot]) for f in fields)
            for name, slot in zip(sorted(state.books[DEFAULT_RESOURCE].accounts), slots, strict=True)
        }

    def account_rows() -> dict[str, tuple[int, ...]]:
        return {
            name: (
                a.total_pages,
                a.committed_pages,
                a.held_pages,
                a.used_pages,
                a.cpu_requested_millis + a.held_cpu_millis,
            )
            for name, a in sorted(state.books[DEFAULT_RESOURCE].accounts.items())
        }

    assert column_rows() == account_rows()
    state.hold("uid-new", ["a", "b"], PodDemand({DEFAULT_RESOURCE: GiB}, 500), 30)
    state.apply_pod(make_pod("p3", hugepages="1Gi", cpu="1", node="b", phase="Running"))
    state.remove_node("c")
    state.apply_node(make_node("d", hugepages="8Gi"))
    assert column_rows() == account_rows()
    state.release("uid-new")
    assert column_rows() == account_rows()


def test_quantities_beyond_int64_leave_every_view_usable(state: ClusterState) -> None:
    # Each quantity is at most 2^63-1 (quantity.py refuses more), but a pod of 9 exa-cores
    # counts 9e21 millicores: an odd object must not make the columns unwritable.
    state.apply_node(make_node("huge", hugepages="7Ei"))
    state.apply_pod(make_pod("greedy", cpu="9E", node="b", phase="Running"))
    columns = state.books[DEFAULT_RESOURCE].columns
    slots = columns.slots(["huge", "b", "a"]).tolist()
    assert columns.column("headroom")[slots[0]] == 7 << 60
    assert columns.column("cpu_busy_millis")[slots[1]] == (1 << 63) - 1
    assert (
        state.books[DEFAULT_RESOURCE].accounts["huge"].total_pages == (7 << 60) // PAGE_2MI
    )  # the accounts keep exact values
    assert (
        state.books[DEFAULT_RESOURCE].accounts["b"].cpu_requested_millis > 9 * 10**21
    )  # the accounts keep exact values


def test_a_hold_reports_how_long_it_lasted_when_its_pod_shows_up_bound(clock: Clock) -> None:
    lasted: list[float] = []
    state = ClusterState(build_config({}, {}), clock=clock, on_hold_bound=lasted.append)
    state.replace([make_node("a", hugepages="4Gi"), make_node("b", hugepages="4Gi")], [])
    state.hold("uid-default-p", ["a", "b"], PodDemand({DEFAULT_RESOURCE: GiB}, 0), 30)  # the filter admits two nodes
    clock.now += 0.25
    state.hold("uid-default-p", "b", PodDemand({DEFAULT_RESOURCE: GiB}, 0), 30)  # the bind narrows it: the same hold
    clock.now += 0.5
    state.apply_pod(make_pod("p", hugepages="1Gi", node="b", phase="Pending"))
    assert lasted == [0.75]
    state.apply_pod(make_pod("p", hugepages="1Gi", node="b", phase="Running"))  # no hold left to end
    assert lasted == [0.75]


@pytest.mark.parametrize("annotation", ["NaN", "1e999999", "inf", "-1Gi", "lots", "9" * 5000])
def test_a_bad_reserved_annotation_is_ignored_for_its_node_only(state: ClusterState, annotation: str) -> None:
    # Written by hand or a node agent: one bad value must neither fail a list nor hide the pool.
    state.replace_nodes([state.node_record(make_node("odd", hugepages="1Gi", reserved=annotation))])
    assert state.books[DEFAULT_RESOURCE].accounts["odd"].total_pages == 512
    assert state.books[DEFAULT_RESOURCE].accounts["odd"].outside_pods_pages == 0
