"""The scheduler's window (extender/window.py): an Error, so the scheduler tries its next nodes, only
when every node it sent was turned away, it may have stopped short, some node it did not send would
hold the pod, the pod came through the enforce entry, and the pod's run of retries is not over."""

from __future__ import annotations

import random
from typing import Any

import msgspec
import pytest
from prometheus_client import generate_latest

from extender.config import build_config
from extender.decision import Reasons, SizeView
from extender.objects import Pod
from extender.server import WINDOW_RETRY_MESSAGE, create_app
from extender.verbs import ExtenderVerbs
from extender.window import (
    ENFORCE_MARKER,
    WindowRetries,
    may_be_a_window,
    room_anywhere,
    through_enforce_entry,
    windows_to_cover,
)
from tests.conftest import ROOT, make_account, make_extender, make_node, make_pod, make_state, pod_json
from tests.test_server import ClientFactory

NODES = 300  # the scheduler's window: at least 100 nodes (numFeasibleNodesToFind)


def test_the_scheduler_may_stop_short_only_with_at_least_100_candidates_and_fewer_than_every_node() -> None:
    assert may_be_a_window(100, 300)
    assert may_be_a_window(299, 300)
    assert not may_be_a_window(99, 300)  # fewer than 100 found: it filtered every node
    assert not may_be_a_window(300, 300)  # every node sent
    assert not may_be_a_window(50, 80)  # below 100 nodes it filters every node
    assert windows_to_cover(100, 300) == 3
    assert windows_to_cover(120, 300) == 3
    assert windows_to_cover(500, 5000) == 10


def test_a_run_of_retries_ends_after_the_windows_that_cover_the_nodes_then_rests() -> None:
    retries = WindowRetries(rest_seconds=300)
    asked: list[int] = []

    def room() -> bool:
        asked.append(1)
        return True

    def retry(now: float, candidates: int = 100) -> int:
        return retries.retry("u", candidates=candidates, nodes=300, now=now, room=room)

    assert [retry(0), retry(1), retry(3), retry(7)] == [1, 2, 3, 0]
    assert [retry(10), retry(306)] == [0, 0]  # resting: events that requeue it start no new run
    assert retry(307.1) == 1  # rested: a new run
    retries.placed("u")
    assert len(retries) == 0
    asked.clear()
    assert retry(400, candidates=99) == 0
    assert asked == []  # room is asked last, only when a retry is otherwise allowed


def test_a_pod_no_node_can_hold_is_turned_away_at_once() -> None:
    retries = WindowRetries()
    assert retries.retry("u", candidates=100, nodes=300, now=0, room=lambda: False) == 0
    assert len(retries) == 0


def test_runs_are_remembered_for_a_bounded_number_of_pods() -> None:
    retries = WindowRetries(remembered=2)
    for uid in ("a", "b", "c"):
        retries.retry(uid, candidates=100, nodes=300, now=0, room=lambda: True)
    assert len(retries) == 2


def size(need: int, accounts: Any, columns: Any = None) -> SizeView:
    return SizeView(need, accounts, Reasons.for_resource("hugepages-2Mi"), None, columns)


def test_room_anywhere_on_columns_agrees_with_the_accounts() -> None:
    need = 2 * 1024**2
    state = make_state(None, [make_node(f"n{i}", hugepages="1Gi", reserved="1Gi") for i in range(3)])
    accounts = state.accounts
    assert not room_anywhere([size(need, accounts)], numa=False)
    assert not room_anywhere([size(need, accounts, state.columns)], numa=False)
    state.apply_node(make_node("n1", hugepages="1Gi"))
    assert room_anywhere([size(need, state.accounts)], numa=False)
    assert room_anywhere([size(need, state.accounts, state.columns)], numa=False)
    pinned = {"n": make_account(512, numa_free=0)}  # the pool is free, no NUMA node has a page
    assert room_anywhere([size(need, pinned)], numa=False)
    assert not room_anywhere([size(need, pinned)], numa=True)


def test_room_anywhere_for_a_pod_of_two_sizes_needs_one_node_with_both() -> None:
    need = 2 * 1024**2
    small = {"a": make_account(512), "b": make_account(0)}  # 2Mi room on a only
    large = {"a": make_account(0), "b": make_account(512)}  # the other size's room on b only
    assert not room_anywhere([size(need, small), size(need, large)], numa=False)
    large["a"] = make_account(512)
    assert room_anywhere([size(need, small), size(need, large)], numa=False)
    assert not room_anywhere([], numa=False)


def marked(pod: Pod, marker: str = ENFORCE_MARKER) -> Pod:
    document: Any = msgspec.to_builtins(pod)
    document["spec"]["containers"][0]["resources"].setdefault("limits", {})[marker] = "1"
    document["spec"]["containers"][0]["resources"]["requests"][marker] = "1"
    return msgspec.convert(document, Pod)


def test_the_enforce_marker_is_the_charts() -> None:
    helpers = (ROOT / "charts" / "hugepage-extender" / "templates" / "_helpers.tpl").read_text()
    assert f'define "hugepage-extender.marker.enforce" -}}}}{ENFORCE_MARKER}{{{{- end' in helpers
    assert through_enforce_entry(marked(make_pod(hugepages="1Gi")))
    assert not through_enforce_entry(marked(make_pod(hugepages="1Gi"), "hugepage-extender.io/shadow"))
    assert not through_enforce_entry(make_pod(hugepages="1Gi"))


def cluster(fitting: set[int], mode: str = "enforce") -> ExtenderVerbs:
    """NODES nodes, every pool held outside pods but those in ``fitting``."""
    nodes = [make_node(f"n{i:03d}", hugepages="1Gi", reserved=None if i in fitting else "1Gi") for i in range(NODES)]
    state = make_state({"defaults": {"mode": mode}}, nodes)
    return ExtenderVerbs(build_config({"defaults": {"mode": mode}}, {}), state, rng=random.Random(1))


WINDOW = [f"n{i:03d}" for i in range(100)]


@pytest.mark.parametrize("fitting", [{250}, {5}], ids=["outside-the-window", "inside-the-window"])
def test_an_enforced_pod_turned_away_by_its_window_is_retried_while_a_node_outside_would_hold_it(
    fitting: set[int],
) -> None:
    verbs = cluster(fitting)
    pod = marked(make_pod(hugepages="512Mi"))
    result = verbs.filter_pod(pod, WINDOW)
    if 5 in fitting:
        assert list(result.decision.passed) == ["n005"]
        assert not result.window_retry
        return
    assert not result.decision.passed
    assert result.window_retry == 1
    assert [verbs.filter_pod(pod, WINDOW).window_retry for _ in range(3)] == [2, 3, 0]
    assert not result.held


def test_no_retry_for_a_pod_no_node_can_hold_an_unmarked_pod_a_shadow_pod_or_a_full_scan() -> None:
    verbs = cluster(set())
    assert verbs.filter_pod(marked(make_pod(hugepages="512Mi")), WINDOW).window_retry == 0  # no node has room
    verbs = cluster({250})
    assert verbs.filter_pod(make_pod("unmarked", hugepages="512Mi"), WINDOW).window_retry == 0
    assert verbs.filter_pod(marked(make_pod("few", hugepages="512Mi")), WINDOW[:99]).window_retry == 0
    shadow = cluster({250}, mode="shadow")
    assert shadow.filter_pod(marked(make_pod(hugepages="512Mi")), WINDOW).window_retry == 0  # every node passes


async def test_the_server_answers_a_window_retry_with_an_error_and_counts_it(aiohttp_client: ClientFactory) -> None:
    nodes = [make_node(f"n{i:03d}", hugepages="1Gi", reserved=None if i == 250 else "1Gi") for i in range(NODES)]
    extender = make_extender(make_state({"defaults": {"mode": "enforce"}}, nodes))
    client = await aiohttp_client(create_app(extender))
    body = msgspec.json.encode({"Pod": pod_json(marked(make_pod(hugepages="512Mi"))), "NodeNames": WINDOW})
    answers = []
    for _ in range(4):
        response = await client.post("/filter", data=body, headers={"Content-Type": "application/json"})
        answers.append(msgspec.json.decode(await response.read()))
    assert [a["Error"] for a in answers] == [WINDOW_RETRY_MESSAGE] * 3 + [""]
    assert len(answers[3]["FailedAndUnresolvableNodes"]) == len(WINDOW)  # the run is over: turned away
    metrics = generate_latest(extender.metrics.registry).decode()
    assert "hugepage_extender_window_retries_total 3.0" in metrics
