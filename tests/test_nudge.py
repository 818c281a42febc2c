"""When the extender nudges the scheduler: every release of room while an enforced pod waits, paced."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from extender.core.config import DEFAULT_RESOURCE, build_config
from extender.core.nudge import NudgePacer
from extender.core.podrequest import PodDemand
from extender.shell.handlers import Extender
from extender.shell.metrics import Metrics
from extender.shell.wire import parse_extender_args
from extender.state.cluster import ClusterState
from tests.conftest import GiB, make_node, make_pod


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_the_pacer_nudges_once_per_interval_only_while_a_pod_waits() -> None:
    pacer = NudgePacer(interval_seconds=1.0)
    assert not pacer.due(0.0, waiting=True)  # nothing freed
    pacer.room_freed()
    assert not pacer.due(0.0, waiting=False)  # freed while nobody waits: forgotten
    assert not pacer.due(0.1, waiting=True)
    pacer.room_freed()
    assert pacer.due(0.2, waiting=True)
    pacer.sent(0.2)
    pacer.room_freed()
    assert not pacer.due(1.1, waiting=True)  # within the interval
    assert pacer.due(1.2, waiting=True)
    pacer.failed(1.2)  # the write did not go through: kept, tried an interval later
    assert not pacer.due(2.1, waiting=True)
    assert pacer.due(2.2, waiting=True)
    pacer.sent(2.2)
    assert not pacer.due(9.0, waiting=True)


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def state(clock: Clock) -> ClusterState:
    s = ClusterState(build_config({"defaults": {"mode": "enforce"}}, {}), clock=clock)
    s.replace(
        [make_node("a", hugepages="2Gi"), make_node("b", hugepages="2Gi")], [make_pod("waiting", hugepages="1Gi")]
    )
    s.take_freed()
    return s


def test_room_freed_is_every_rise_of_a_nodes_headroom_not_undone_since(state: ClusterState, clock: Clock) -> None:
    demand = PodDemand({DEFAULT_RESOURCE: GiB}, 0)
    state.hold("h", ("a", "b"), demand, 30)
    assert not state.take_freed()  # less room
    state.hold("h", "a", demand, 30)  # narrowed by the bind verb: b freed
    assert state.take_freed()
    state.release("h")  # a new attempt releases the pod's hold and holds again: no room freed
    state.hold("h", "a", demand, 30)
    assert not state.take_freed()
    clock.now += 31  # timed out
    state.expire_holds()
    assert state.take_freed()
    state.hold("gone", "b", demand, 30)
    state.take_freed()
    state.remove_pod("gone")  # a held pod deleted
    assert state.take_freed()
    state.apply_node(make_node("c", hugepages="2Gi"))  # a node: room the extender did not have
    assert state.take_freed()
    state.apply_node(make_node("c", hugepages="2Gi", reserved="1Gi"))
    assert not state.take_freed()
    state.apply_node(make_node("c", hugepages="2Gi"))  # pages held outside pods given back
    assert state.take_freed()
    assert not state.take_freed()


def filter_body(pod: str, uid: str, nodes: list[str]) -> bytes:
    return (
        b'{"Pod": {"metadata": {"name": "%s", "namespace": "default", "uid": "%s"}, "spec": {"containers": '
        b'[{"name": "c", "resources": {"requests": {"hugepages-2Mi": "1Gi"}, "limits": {"hugepages-2Mi": "1Gi"}}}]}},'
        b' "NodeNames": %s}' % (pod.encode(), uid.encode(), str(nodes).replace("'", '"').encode())
    )


class Nudges:
    def __init__(self, succeed: bool = True) -> None:
        self.count = 0
        self.succeed = succeed

    async def nudge(self) -> bool:
        self.count += 1
        return self.succeed


def extender_over(state: ClusterState, nudger: Nudges) -> Extender:
    return Extender(state._config, state, Metrics(), nudger=nudger, verify_holds=True)


def rejected(extender: Extender, state: ClusterState) -> None:
    """The waiting pod asks and is turned away: both pools are held by another pod in flight."""
    state.apply_pod(make_pod("other", hugepages="2Gi"))
    extender.verbs.filter(
        "uid-default-other", "default", PodDemand({DEFAULT_RESOURCE: 2 * GiB}, 0), ["a", "b"], name="other"
    )
    args = parse_extender_args(filter_body("waiting", "uid-default-waiting", ["a", "b"]))
    decision = extender.verbs.filter(
        args.pod.metadata.uid, "default", state.demand_of(args.pod), args.node_names, name="waiting"
    ).decision
    assert not decision.passed
    extender.waiting.unplaced("uid-default-waiting", 0.0)
    state.take_freed()


async def run_timer(extender: Extender, until: Callable[[], bool], seconds: float = 3.0) -> None:
    task = asyncio.create_task(extender.release_timer(tick_seconds=0.01))
    try:
        async with asyncio.timeout(seconds):
            while not until():
                await asyncio.sleep(0.01)
    finally:
        task.cancel()


async def test_a_hold_that_times_out_nudges_on_the_timer_without_any_filter_call(
    state: ClusterState, clock: Clock
) -> None:
    nudges = Nudges()
    extender = extender_over(state, nudges)
    rejected(extender, state)
    clock.now += 31  # the other pod's hold times out; nobody calls filter
    await run_timer(extender, lambda: nudges.count > 0)
    assert state.hold_count == 0
    assert extender.metrics.nudges.labels("sent")._value.get() == 1
    assert extender.metrics.api_writes.labels("nudge", "written")._value.get() == 1


async def test_no_nudge_while_no_enforced_pod_waits(state: ClusterState, clock: Clock) -> None:
    nudges = Nudges()
    extender = extender_over(state, nudges)
    rejected(extender, state)
    state.apply_pod(make_pod("waiting", hugepages="1Gi", node="a", phase="Running"))  # placed after all
    clock.now += 31
    await run_timer(extender, lambda: state.hold_count == 0)
    await asyncio.sleep(0.05)
    assert nudges.count == 0


async def test_a_failed_nudge_is_tried_again(state: ClusterState, clock: Clock) -> None:
    nudges = Nudges(succeed=False)
    extender = extender_over(state, nudges)
    extender.pacer = NudgePacer(interval_seconds=0.02)
    rejected(extender, state)
    state.release("uid-default-other")  # its bind failed
    await run_timer(extender, lambda: nudges.count >= 3)
    assert extender.metrics.nudges.labels("failed")._value.get() >= 3
    assert extender.metrics.api_writes.labels("nudge", "failed")._value.get() >= 3


async def test_a_hold_dropped_as_unverified_nudges(state: ClusterState, clock: Clock) -> None:
    """A pod the watch never showed holds against other such pods only, and is dropped after
    UNVERIFIED_HOLD_SECONDS: the room it freed nudges, although nobody calls filter."""
    nudges = Nudges()
    extender = extender_over(state, nudges)
    # Two pods the watch has not shown: the first holds both pools, the second is turned away.
    extender.verbs.filter("ghost", "default", PodDemand({DEFAULT_RESOURCE: 2 * GiB}, 0), ["a", "b"], name="ghost")
    decision = extender.verbs.filter(
        "late", "default", PodDemand({DEFAULT_RESOURCE: GiB}, 0), ["a", "b"], name="late"
    ).decision
    assert not decision.passed
    extender.waiting.unplaced("late", 0.0)
    state.apply_pod(make_pod("late", hugepages="1Gi", uid="late"))  # the watch shows it now, waiting
    state.take_freed()
    clock.now += 5.1  # the ghost never shows up: its hold is dropped on the timer
    await run_timer(extender, lambda: nudges.count > 0)
    assert state.hold_count == 0
    assert extender.verbs.refused_holds == 1
    assert extender.metrics.holds_refused._value.get() == 1  # counted, although no filter call dropped it


def test_room_no_waiting_pod_fits_in_nudges_nothing(state: ClusterState) -> None:
    """A nudge requeues every waiting pod (about one filter call each, docs/performance.md, "A backlog of
    waiting pods"): room freed that is less than any waiting pod asks arms none."""
    extender = extender_over(state, Nudges())
    rejected(extender, state)  # the waiting pod asks 1Gi
    state.apply_node(make_node("c", hugepages="512Mi"))  # a node with room, too little for it
    assert not extender.release_due(0.0)
    assert not extender.pacer.freed
    state.apply_node(make_node("c", hugepages="2Gi"))  # now it would fit
    assert extender.release_due(0.0)
