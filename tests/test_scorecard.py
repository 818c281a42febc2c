"""Shadow's scorecard (extender.scorecard): every pod counted once, in its cell; bounded memory."""

from __future__ import annotations

import random
from typing import Any

import msgspec
import pytest

from extender.cluster import ClusterState
from extender.config import build_config
from extender.handlers import Extender
from extender.metrics import Metrics
from extender.objects import Pod
from extender.podoutcome import CELLS, ENDS, PodSignal, Prediction
from extender.scorecard import GONE_GRACE_SECONDS, STORIES_PER_CELL, Scorecard, precision_recall
from tests.conftest import make_node, make_pod

SETTLE, WINDOW = 30.0, 3600.0
REJECT = Prediction(would_reject=True, why="Insufficient hugepages-2Mi", judged_by="bind")
ADMIT = Prediction(would_reject=False, why="room for it", judged_by="watch")
READY = PodSignal(ready=True)
FAILED = PodSignal(failure="OutOfhugepages-2Mi")


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _card(clock: Clock, **kwargs: int) -> Scorecard:
    named = {"payments", "vms"}
    return Scorecard(
        settle_seconds=SETTLE,
        window_seconds=WINDOW,
        clock=clock,
        row_of=lambda ns: ns if ns in named else "_other",
        rows=("payments", "vms"),
        **kwargs,
    )


def test_each_cell_from_a_verdict_and_what_the_watch_then_shows() -> None:
    clock = Clock()
    card = _card(clock)
    for uid, prediction in (("a", REJECT), ("b", REJECT), ("c", ADMIT), ("d", ADMIT), ("e", ADMIT)):
        assert card.judged(uid, "payments", f"pod-{uid}", "n1", prediction) == []
    assert card.seen("a", FAILED) == [("payments", "predicted_failed")]
    assert card.seen("b", READY) == []  # Ready now: it must still run for the settle time
    assert card.seen("c", FAILED) == [("payments", "failed_unpredicted")]
    assert card.seen("d", READY) == []
    assert card.seen("e", PodSignal(deleting=True)) == [("payments", "deleted")]
    clock.now += SETTLE - 1
    assert card.tick() == []
    clock.now += 1
    assert sorted(card.tick()) == [("payments", "predicted_ran"), ("payments", "ran_as_predicted")]
    assert card.followed == 0
    row = card.document("payments")["namespaces"]["payments"]
    assert row["window"] == {**dict.fromkeys(ENDS, 0), **dict.fromkeys(CELLS, 1), "deleted": 1}
    assert (row["precision"], row["recall"]) == (0.5, 0.5)
    story = row["pods"]["predicted_failed"][0]
    assert story == {
        "pod": "payments/pod-a",
        "node": "n1",
        "verdict": "would reject: Insufficient hugepages-2Mi",
        "outcome": "failed: OutOfhugepages-2Mi",
        "judgedBy": "bind",
        "secondsToOutcome": 0.0,
    }


def test_the_first_verdict_stands_and_later_events_of_a_counted_pod_count_nothing() -> None:
    clock = Clock()
    card = _card(clock)
    card.judged("a", "payments", "a", "n1", ADMIT)
    card.judged("a", "payments", "a", "n2", REJECT)  # the watch after the bind verb: the bind's verdict stands
    assert card.seen("a", FAILED) == [("payments", "failed_unpredicted")]
    assert card.seen("a", FAILED) == []
    assert card.seen("a", PodSignal(), deleted=True) == []
    card.tick()
    assert card.seen("never-judged", FAILED) == []


def test_a_pod_gone_from_the_active_watch_is_deleted_unless_the_ended_watch_soon_shows_it_failed() -> None:
    clock = Clock()
    card = _card(clock)
    card.judged("refused", "payments", "refused", "n1", REJECT)
    card.judged("gone", "payments", "gone", "n1", REJECT)
    # Both leave the watch of active pods as deletions carrying their status from before.
    assert card.seen("refused", PodSignal(), deleted=True) == []
    assert card.seen("gone", PodSignal(), deleted=True) == []
    clock.now += GONE_GRACE_SECONDS / 2
    assert card.seen("refused", FAILED) == [("payments", "predicted_failed")]  # the watch of ended pods
    assert card.tick() == []
    clock.now += GONE_GRACE_SECONDS / 2
    assert card.tick() == [("payments", "deleted")]
    assert card.followed == 0


def test_ready_lost_before_the_settle_time_starts_it_over_and_a_failure_in_it_fails() -> None:
    clock = Clock()
    card = _card(clock)
    card.judged("a", "vms", "a", "n1", REJECT)
    card.seen("a", READY)
    clock.now += SETTLE / 2
    card.seen("a", PodSignal())  # not Ready any more
    clock.now += SETTLE
    assert card.tick() == []
    card.seen("a", READY)
    clock.now += SETTLE / 2
    assert card.seen("a", PodSignal(failure="container qemu restarted 1 times")) == [("vms", "predicted_failed")]
    assert card.tick() == []


def test_namespaces_not_named_fold_into_other_and_a_failed_bind_is_not_counted() -> None:
    clock = Clock()
    card = _card(clock)
    for i in range(100):
        card.judged(f"u{i}", f"team-{i}", "p", "n1", ADMIT)
        card.seen(f"u{i}", FAILED)
    assert set(card.rows) == {"payments", "vms", "_other"}
    assert card.document()["namespaces"]["_other"]["total"]["failed_unpredicted"] == 100
    card.judged("x", "payments", "x", "n1", REJECT)
    card.forget("x")
    assert card.seen("x", FAILED) == []
    assert card.document("payments")["namespaces"]["payments"]["total"] == dict.fromkeys(ENDS, 0)


def test_pods_without_an_outcome_expire_after_the_window_and_leave_the_window_counts() -> None:
    clock = Clock()
    card = _card(clock)
    card.judged("stuck", "payments", "stuck", "n1", REJECT)
    card.judged("done", "payments", "done", "n1", REJECT)
    card.seen("done", FAILED)
    clock.now += WINDOW
    assert card.tick() == [("payments", "expired")]
    row = card.document()["namespaces"]["payments"]
    assert (row["window"]["expired"], row["window"]["predicted_failed"]) == (1, 0)  # the failure is past the window
    assert (row["total"]["expired"], row["total"]["predicted_failed"]) == (1, 1)
    assert row["precision"] is None


def test_the_cap_on_pods_followed_drops_the_oldest_counted_as_dropped() -> None:
    clock = Clock()
    card = _card(clock, max_followed=3)
    for uid in "abc":
        card.judged(uid, "payments", uid, "n1", ADMIT)
    assert card.judged("d", "payments", "d", "n1", ADMIT) == [("payments", "dropped")]
    assert card.followed == 3
    assert not card.is_followed("a")


def test_a_cells_stories_keep_the_last_few_newest_first() -> None:
    clock = Clock()
    card = _card(clock)
    for i in range(STORIES_PER_CELL + 3):
        card.judged(f"u{i}", "payments", f"p{i}", "n1", REJECT)
        card.seen(f"u{i}", FAILED)
    stories = card.document()["namespaces"]["payments"]["pods"]["predicted_failed"]
    assert [s["pod"] for s in stories] == [f"payments/p{i}" for i in range(STORIES_PER_CELL + 2, 2, -1)]


@pytest.mark.parametrize("seed", range(5))
def test_every_pod_is_counted_once_in_the_cell_its_verdict_and_outcome_make(seed: int) -> None:
    rng = random.Random(seed)
    clock = Clock()
    card = _card(clock)
    expected = dict.fromkeys(ENDS, 0)
    ended: list[tuple[str, str]] = []
    for i in range(2000):
        uid = f"u{i}"
        prediction = rng.choice((REJECT, ADMIT))
        ended += card.judged(uid, "payments", uid, "n1", prediction)
        fate = rng.choice(("failed", "ran", "deleted", "refused", "never"))
        if fate == "failed":
            ended += card.seen(uid, READY) + card.seen(uid, FAILED)
            expected["predicted_failed" if prediction.would_reject else "failed_unpredicted"] += 1
        elif fate == "ran":
            ended += card.seen(uid, READY)
            expected["predicted_ran" if prediction.would_reject else "ran_as_predicted"] += 1
        elif fate == "deleted":
            ended += card.seen(uid, PodSignal(), deleted=True)
            expected["deleted"] += 1
        elif fate == "refused":
            ended += card.seen(uid, PodSignal(), deleted=True) + card.seen(uid, FAILED)
            expected["predicted_failed" if prediction.would_reject else "failed_unpredicted"] += 1
        else:
            expected["expired"] += 1
        clock.now += rng.uniform(0, 2)
        ended += card.tick()
    clock.now += WINDOW
    ended += card.tick()
    assert card.followed == 0
    assert len(ended) == 2000
    assert card.document()["namespaces"]["payments"]["total"] == expected
    assert {cell: sum(1 for _, c in ended if c == cell) for cell in ENDS} == expected


def test_precision_and_recall_are_none_without_their_cells() -> None:
    counts = dict.fromkeys(ENDS, 0)
    assert precision_recall(counts) == (None, None)
    counts.update(predicted_failed=3, predicted_ran=1, failed_unpredicted=0)
    assert precision_recall(counts) == (0.75, 1.0)


def test_the_extender_judges_a_pod_first_shown_bound_against_the_pool_without_it_and_counts_its_outcome() -> None:
    """The watch path (no bind verb): the verdict on the node when the watch first shows the pod bound,
    read before the state counts the pod; its status then decides its cell and the metric."""
    config = build_config({"shadowSettleSeconds": 0, "namespaces": {"team": {"mode": "shadow"}}}, {})
    state = ClusterState(config)
    state.replace([make_node("a", hugepages="512Mi")], [])
    extender = Extender(config, state, Metrics())

    def placed(name: str, **status: Any) -> str:
        waiting = make_pod(name, "team", hugepages="512Mi")
        state.apply_pod(waiting)
        extender.verbs.filter_pod(waiting, ["a"])
        for pod in (make_pod(name, "team", hugepages="512Mi", node="a", phase="Running"), _with(waiting, **status)):
            record = state.with_signal(state.pod_record(pod), pod)
            extender.pod_seen(record, False)
            state.apply_pod_record(record)
        return f"team/{name}"

    placed("first", phase="Running", conditions=[{"type": "Ready", "status": "True"}])
    placed("second", phase="Failed", reason="OutOfhugepages-2Mi")
    report = extender.scorecard.document("team")["namespaces"]["team"]
    first, second = report["pods"]["ran_as_predicted"][0], report["pods"]["predicted_failed"][0]
    assert (first["pod"], first["verdict"], first["judgedBy"]) == ("team/first", "would admit", "watch")
    assert second["pod"] == "team/second"
    assert second["verdict"].startswith("would reject: Insufficient hugepages-2Mi")
    assert second["outcome"] == "failed: OutOfhugepages-2Mi"
    samples = {
        s.labels["cell"]: s.value
        for family in extender.metrics.registry.collect()
        if family.name == "hugepage_extender_shadow_outcomes"
        for s in family.samples
        if s.name.endswith("_total") and s.labels["pod_namespace"] == "team"
    }
    assert samples == {"predicted_failed": 1, "predicted_ran": 0, "failed_unpredicted": 0, "ran_as_predicted": 1}


def _with(pod: Pod, **status: Any) -> Pod:
    """``pod`` bound to node a with this status, as the watch decodes it."""
    document = msgspec.to_builtins(pod)
    document["spec"]["nodeName"] = "a"
    document["status"] = status
    return msgspec.json.decode(msgspec.json.encode(document), type=Pod)
