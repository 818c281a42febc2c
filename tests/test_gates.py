"""Pods behind the extender's scheduling gate: which are lifted, in which order, and what each lift holds."""

import asyncio
import time
from typing import Any

import msgspec
from kubernetes.client import ApiClient

from extender.core.config import DEFAULT_RESOURCE
from extender.core.gates import GATE, GatedPod, GatedPods, gate_index
from extender.core.objects import Pod
from extender.core.writes import WriteBudget
from extender.shell.handlers import Extender
from extender.shell.kube.informer import ClusterInformer
from extender.state.cluster import ClusterState
from extender.state.gatelift import LIFTS_PER_ROUND
from tests.conftest import make_extender, make_node, make_state

CONFIG = {"defaults": {"mode": "enforce", "sampleSize": 0}, "namespaces": {"canary": {"mode": "shadow"}}}


class RecordedLifts:
    """The lifts the extender would send (``kube/gatelift.GateWriter`` sends them for real:
    e2e/cluster/test_gates.py)."""

    def __init__(self) -> None:
        self.sent: list[str] = []

    def lift(self, pod: GatedPod) -> None:
        self.sent.append(pod.name)


def gated(
    name: str,
    hugepages: str = "512Mi",
    *,
    namespace: str = "default",
    priority: int = 0,
    created: str = "",
    gates: tuple[str, ...] = (GATE,),
) -> Pod:
    document: dict[str, Any] = {
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": f"uid-{name}",
            "creationTimestamp": created or "2026-12-02T10:00:00Z",
        },
        "spec": {
            "containers": [{"name": "main", "resources": {"requests": {"hugepages-2Mi": hugepages}}}],
            "schedulingGates": [{"name": gate} for gate in gates],
            "priority": priority,
        },
        "status": {"phase": "Pending"},
    }
    return msgspec.convert(document, Pod)


def watched(state: ClusterState) -> tuple[Extender, ClusterInformer, RecordedLifts]:
    """An extender lifting gates, fed by the informer's own handlers (as its watch threads hand pods over)."""
    lifts = RecordedLifts()
    pods = GatedPods()
    extender = make_extender(state, gated=pods, lifter=lifts)
    extender.lift_clock = lambda: 0.0  # rounds bounded by count only: a loaded machine would cut them short
    informer = ClusterInformer(ApiClient(), state)
    informer.gated = pods
    return extender, informer, lifts


def show(informer: ClusterInformer, *pods: Pod) -> None:
    for pod in pods:
        informer._pod_upserted(informer._pod_record(pod))


def tick(extender: Extender) -> None:
    extender.release_due(time.monotonic())


def test_lifts_follow_the_room_in_the_queues_order_and_hold_it() -> None:
    state = make_state(CONFIG, [make_node("a", hugepages="1Gi"), make_node("b", hugepages="1Gi")])
    extender, informer, lifts = watched(state)
    show(
        informer,
        gated("early", created="2026-12-02T09:00:00Z", hugepages="1Gi"),
        gated("late", created="2026-12-02T11:00:00Z"),
        gated("urgent", priority=1000, created="2026-12-02T12:00:00Z"),
        gated("later", created="2026-12-02T11:30:00Z"),
    )
    tick(extender)
    # 2 GiB of room: the high-priority pod first, then by creation; "later" finds none left.
    assert lifts.sent == ["urgent", "early", "late"]
    assert sum(account.held_bytes for account in state.books[DEFAULT_RESOURCE].accounts.values()) == 2 << 30
    tick(extender)
    assert lifts.sent == ["urgent", "early", "late"]  # nothing freed, nothing new: no round
    # "early" is bound elsewhere and its hold goes: room frees, the next in line is lifted.
    informer._pod_deleted(informer._pod_record(gated("early", hugepages="1Gi")))
    state.release("uid-early")
    tick(extender)
    assert lifts.sent == ["urgent", "early", "late", "later"]


def test_a_lifted_pod_leaves_the_gate_and_its_hold_ends_at_its_filter() -> None:
    state = make_state(CONFIG, [make_node("a", hugepages="1Gi")])
    extender, informer, lifts = watched(state)
    pod = gated("vm", hugepages="1Gi")
    show(informer, pod)
    tick(extender)
    assert lifts.sent == ["vm"]
    assert state.books[DEFAULT_RESOURCE].accounts["a"].held_bytes == 1 << 30
    lifted = msgspec.structs.replace(pod, spec=msgspec.structs.replace(pod.spec, scheduling_gates=[]))
    show(informer, lifted)
    assert extender.gated is not None
    assert len(extender.gated) == 0
    # Its own filter does not see its own hold in the way.
    assert extender.verbs.filter_pod(lifted, ["a"]).decision.passed == ["a"]


def test_pods_with_nothing_to_wait_for_are_lifted_at_once_holding_nothing() -> None:
    state = make_state(CONFIG, [make_node("a", hugepages="1Gi")])
    extender, informer, lifts = watched(state)
    show(informer, gated("in-shadow", "4Gi", namespace="canary"), gated("no-pages", "0"))
    tick(extender)
    assert sorted(lifts.sent) == ["in-shadow", "no-pages"]
    assert state.books[DEFAULT_RESOURCE].accounts["a"].held_bytes == 0


def test_only_the_extenders_gate_is_ours() -> None:
    assert gate_index(gated("both", gates=("example.com/quota", GATE))) == 1
    assert gate_index(gated("theirs", gates=("example.com/quota",))) is None
    state = make_state(CONFIG, [make_node("a", hugepages="1Gi")])
    extender, informer, lifts = watched(state)
    show(informer, gated("theirs", gates=("example.com/quota",)))
    tick(extender)
    assert lifts.sent == []
    assert extender.gated is not None
    assert len(extender.gated) == 0


def test_lifts_past_the_budget_are_dropped_counted_and_hold_nothing() -> None:
    state = make_state(CONFIG, [make_node("a", hugepages="4Gi")])
    extender, informer, lifts = watched(state)
    extender._gate_budget = WriteBudget(1)
    show(informer, gated("first"), gated("second"))
    tick(extender)
    assert lifts.sent == ["first"]
    assert state.books[DEFAULT_RESOURCE].accounts["a"].held_bytes == 512 << 20
    dropped = extender.metrics.child(extender.metrics.api_writes, "gate", "dropped")
    assert dropped._value.get() == 1


def test_a_round_is_bounded_and_the_next_tick_goes_on() -> None:
    state = make_state(CONFIG, [make_node(f"n{i}", hugepages="1Gi") for i in range(64)])
    extender, informer, lifts = watched(state)
    show(informer, *(gated(f"p{i:02}", created=f"2026-12-02T10:00:{i:02}Z") for i in range(LIFTS_PER_ROUND + 8)))
    tick(extender)
    assert len(lifts.sent) == LIFTS_PER_ROUND
    tick(extender)
    assert lifts.sent == [f"p{i:02}" for i in range(LIFTS_PER_ROUND + 8)]


async def test_the_lift_timer_takes_arrivals_and_the_rest_of_a_round_without_the_release_timer() -> None:
    state = make_state(CONFIG, [make_node(f"n{i}", hugepages="1Gi") for i in range(64)])
    extender, informer, lifts = watched(state)
    task = asyncio.create_task(extender.lift_timer(tick_seconds=0.01))
    try:
        async with asyncio.timeout(5):
            show(informer, gated("first"))
            while lifts.sent != ["first"]:
                await asyncio.sleep(0.01)
            # More than a round's bound: the rest goes on at the lift timer's next tick.
            more = range(LIFTS_PER_ROUND + 8)
            show(informer, *(gated(f"p{i:02}", created=f"2026-12-02T10:01:{i:02}Z") for i in more))
            while len(lifts.sent) < 1 + LIFTS_PER_ROUND + 8:
                await asyncio.sleep(0.01)
    finally:
        task.cancel()
    assert lifts.sent == ["first", *(f"p{i:02}" for i in range(LIFTS_PER_ROUND + 8))]
    assert not extender.gated or not extender.gated.arrived


def test_pods_behind_the_gate_count_as_waiting_from_when_the_watch_showed_them() -> None:
    state = make_state(CONFIG, [make_node("a", hugepages="1Gi")])
    extender, informer, _ = watched(state)
    assert extender.waiting_summary().count == 0
    show(informer, gated("big", "2Gi"), gated("bigger", "4Gi"))
    tick(extender)
    waiting = extender.waiting_summary()
    assert waiting.count == 2
    assert 0 <= waiting.oldest_seconds < 5
    informer._pod_deleted(informer._pod_record(gated("big", "2Gi")))
    assert extender.waiting_summary().count == 1


class RecordedNotices:
    """The WaitingForRoom Events the extender would post, with a budget of ``allowed`` (``PodEvents``
    posts them for real, within ``writes.PER_MINUTE["event"]``: e2e/cluster/test_gates.py)."""

    def __init__(self, allowed: int = 1_000) -> None:
        self.told: list[str] = []
        self.allowed = allowed

    def no_fit(self, pod: Any, decision: Any, needs: Any) -> None:
        raise AssertionError("a gated pod is never filtered")

    def waiting_for_room(self, pod: GatedPod) -> bool:
        if len(self.told) >= self.allowed:
            return False
        self.told.append(pod.name)
        return True


def noticed(state: ClusterState, notices: RecordedNotices) -> tuple[Extender, ClusterInformer, RecordedLifts]:
    extender, informer, lifts = watched(state)
    extender.events = notices
    return extender, informer, lifts


def test_a_pod_no_node_has_room_for_is_told_why_once_while_it_waits() -> None:
    state = make_state(CONFIG, [make_node("a", hugepages="1Gi")])
    notices = RecordedNotices()
    extender, informer, lifts = noticed(state, notices)
    show(informer, gated("fits", "1Gi", created="2026-12-02T09:00:00Z"), gated("waits", "1Gi"), gated("too", "2Gi"))
    tick(extender)
    assert lifts.sent == ["fits"]
    assert sorted(notices.told) == ["too", "waits"]  # the lifted pod is told nothing
    # More pods behind the gate, room freed and taken again: rounds run, no pod is told twice.
    show(informer, gated("later", "1Gi"))
    tick(extender)
    informer._pod_deleted(informer._pod_record(gated("fits", "1Gi")))
    state.release("uid-fits")
    tick(extender)
    assert lifts.sent == ["fits", "waits"]
    assert sorted(notices.told) == ["later", "too", "waits"]
    for _ in range(3):
        tick(extender)
    assert sorted(notices.told) == ["later", "too", "waits"]


def test_waiting_events_past_the_budget_wait_for_it_and_those_lifted_first_are_dropped() -> None:
    state = make_state(CONFIG, [make_node("a", hugepages="1Gi", reserved="1Gi")])  # every page held outside pods
    notices = RecordedNotices(allowed=2)
    extender, informer, lifts = noticed(state, notices)
    show(informer, *(gated(f"p{i}", "256Mi", created=f"2026-12-02T10:00:0{i}Z") for i in range(4)))
    tick(extender)
    assert lifts.sent == []
    assert notices.told == ["p0", "p1"]  # in the queue's order, as many as the budget allows
    tick(extender)
    assert notices.told == ["p0", "p1"]
    notices.allowed = 3  # the budget's minute turns: the next in line is told, on the timer
    tick(extender)
    assert notices.told == ["p0", "p1", "p2"]
    # 1 GiB frees: all four are lifted, p3 before it could be told: dropped, counted, never told.
    state.apply_node(make_node("a", hugepages="1Gi", reserved="0"))
    tick(extender)
    assert lifts.sent == ["p0", "p1", "p2", "p3"]
    notices.allowed = 10
    tick(extender)
    assert notices.told == ["p0", "p1", "p2"]
    dropped = extender.metrics.child(extender.metrics.api_writes, "event", "dropped")
    assert dropped._value.get() == 1
