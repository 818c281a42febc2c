"""The extender's own API writes about waiting pods are bounded per minute whatever the backlog
(extender/core/writes.py): Events across every pod, nudges by their pacer; each counted by kind and result."""

from __future__ import annotations

import asyncio

from prometheus_client import generate_latest

from extender.core.answer import FilterDecision, Outcome
from extender.core.gates import GATE, GatedPod
from extender.core.nudge import NudgePacer
from extender.core.objects import ObjectMeta, Pod
from extender.core.podrequest import PodDemand
from extender.core.reach import UNCONSTRAINED
from extender.core.writes import KINDS, PER_MINUTE, RESULTS, WINDOW_SECONDS, WriteBudget
from extender.shell.kube.events import REASON_WAITING_FOR_ROOM, PodEvents, waiting_message
from extender.shell.metrics import Metrics
from tests.test_kube_transport_errors import _unreachable_api


def test_a_budget_allows_at_most_its_writes_in_any_minute() -> None:
    budget = WriteBudget(3)
    allowed = [t for t in (0.0, 1.0, 2.0, 3.0, 59.9, 60.0, 60.5, 61.0, 62.0, 119.0, 120.0) if budget.take(t)]
    assert allowed == [0.0, 1.0, 2.0, 60.0, 61.0, 62.0, 120.0]
    for start in allowed:  # any window of a minute holds at most 3
        assert sum(1 for t in allowed if start <= t < start + WINDOW_SECONDS) <= 3


FILTERED = FilterDecision(passed=[], outcome=Outcome.NO_HUGEPAGE_CAPACITY)
NEEDS = {"hugepages-2Mi": 2 << 20}


def counted(metrics: Metrics, kind: str, result: str) -> float:
    value: float = metrics.api_writes.labels(kind, result)._value.get()
    return value


async def test_events_for_ten_thousand_waiting_pods_are_bounded_per_minute() -> None:
    """10,000 pods turned away within a minute, each due its Event (one per pod and reason a minute):
    at most PER_MINUTE["event"] are sent to the API server (here one nothing listens on: each fails),
    the rest dropped and counted; a minute later the budget allows as many again."""
    metrics = Metrics()
    now = [0.0]
    events = PodEvents(_unreachable_api(), metrics, instance="test", clock=lambda: now[0])
    decision = FilterDecision(passed=[], outcome=Outcome.NO_HUGEPAGE_CAPACITY)
    try:
        for minute in (0.0, 61.0):
            now[0] = minute
            for i in range(10_000):
                pod = Pod(metadata=ObjectMeta(name=f"p{i}", namespace="ns", uid=f"uid-{minute}-{i}"))
                events.no_fit(pod, decision, {"hugepages-2Mi": 2 << 20})
        for _ in range(200):  # the posts run in the events' thread pool
            if counted(metrics, "event", "failed") >= 2 * PER_MINUTE["event"]:
                break
            await asyncio.sleep(0.05)
    finally:
        events.close()
    assert counted(metrics, "event", "failed") == 2 * PER_MINUTE["event"]
    assert counted(metrics, "event", "dropped") == 2 * (10_000 - PER_MINUTE["event"])
    assert counted(metrics, "event", "written") == 0


async def test_waiting_events_of_ten_thousand_gated_pods_share_the_budget_per_minute() -> None:
    """10,000 pods behind the gate, each due its WaitingForRoom Event, and a pod turned away by the filter:
    PER_MINUTE["event"] across them all; a pod refused is not counted dropped (the caller keeps it for later)."""
    metrics = Metrics()
    now = [0.0]
    events = PodEvents(_unreachable_api(), metrics, instance="test", clock=lambda: now[0])
    demand = PodDemand({"hugepages-2Mi": 512 << 20}, 0)
    pods = [GatedPod(f"uid-{i}", "ns", f"p{i}", 0, 0, "", demand, UNCONSTRAINED, b"") for i in range(10_000)]
    try:
        events.no_fit(Pod(metadata=ObjectMeta(name="f", namespace="ns", uid="uid-f")), FILTERED, NEEDS)
        posted = [pod.name for pod in pods if events.waiting_for_room(pod)]
        assert len(posted) == PER_MINUTE["event"] - 1
        now[0] = 61.0
        assert sum(1 for pod in pods if events.waiting_for_room(pod)) == PER_MINUTE["event"]
        for _ in range(200):  # the posts run in the events' thread pool
            if counted(metrics, "event", "failed") >= 2 * PER_MINUTE["event"]:
                break
            await asyncio.sleep(0.05)
    finally:
        events.close()
    assert counted(metrics, "event", "failed") == 2 * PER_MINUTE["event"]
    assert counted(metrics, "event", "dropped") == 0
    body = events._event(Pod(metadata=ObjectMeta(name="p0", namespace="ns", uid="uid-0")), REASON_WAITING_FOR_ROOM, "m")
    assert (body["reason"], body["involvedObject"]["uid"]) == ("WaitingForRoom", "uid-0")


def test_a_waiting_event_says_the_size_the_amount_and_the_gate() -> None:
    message = waiting_message({"hugepages-2Mi": 512 << 20, "hugepages-1Gi": 2 << 30})
    assert "512Mi of hugepages-2Mi and 2Gi of hugepages-1Gi" in message
    assert GATE in message
    assert "no node this pod may use" in message


def test_nudges_are_at_most_one_a_second_whatever_waits() -> None:
    """Room freed at every tick of the timer (0.25 s) for a minute while pods wait: 60 nudges at most."""
    pacer = NudgePacer()
    sent = 0
    for tick in range(240):
        now = tick * 0.25
        pacer.room_freed()
        if pacer.due(now, waiting=True):
            pacer.sent(now)
            sent += 1
    assert sent <= PER_MINUTE["nudge"]


def test_every_series_of_the_write_metric_is_there_from_zero() -> None:
    page = generate_latest(Metrics().registry).decode()
    for kind in KINDS:
        for result in RESULTS:
            assert f'hugepage_extender_api_writes_total{{kind="{kind}",result="{result}"}} 0.0' in page
