"""The extender's own API writes about waiting pods are bounded per minute whatever the backlog
(extender/core/writes.py): Events across every pod, nudges by their pacer; each counted by kind and result."""

from __future__ import annotations

import asyncio

from prometheus_client import generate_latest

from extender.core.answer import FilterDecision, Outcome
from extender.core.nudge import NudgePacer
from extender.core.objects import ObjectMeta, Pod
from extender.core.writes import KINDS, PER_MINUTE, RESULTS, WINDOW_SECONDS, WriteBudget
from extender.shell.kube.events import PodEvents
from extender.shell.metrics import Metrics
from tests.test_kube_transport_errors import _unreachable_api


def test_a_budget_allows_at_most_its_writes_in_any_minute() -> None:
    budget = WriteBudget(3)
    allowed = [t for t in (0.0, 1.0, 2.0, 3.0, 59.9, 60.0, 60.5, 61.0, 62.0, 119.0, 120.0) if budget.take(t)]
    assert allowed == [0.0, 1.0, 2.0, 60.0, 61.0, 62.0, 120.0]
    for start in allowed:  # any window of a minute holds at most 3
        assert sum(1 for t in allowed if start <= t < start + WINDOW_SECONDS) <= 3


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
