"""Shadow's scorecard (extender.state.scorecard): every pod counted once, in its cell (a false alarm and a miss
on one node, in one burst, paired); counted only once its cell is final; bounded memory."""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import msgspec
import pytest

from extender.core.config import build_config
from extender.core.objects import Pod
from extender.core.podoutcome import CELLS, ENDS, PodOutcome, PodSignal, Prediction, cell_of
from extender.core.shadowdocument import parse_shadow_document, render_shadow
from extender.shell.handlers import Extender
from extender.shell.metrics import Metrics
from extender.state.cluster import ClusterState
from extender.state.scorecard import (
    GONE_GRACE_SECONDS,
    PAIR_SECONDS,
    STORIES_PER_CELL,
    Scorecard,
    precision_recall,
)
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
        assert card.judged(uid, "payments", f"pod-{uid}", f"n-{uid}", prediction) == []  # each on its node
    assert card.seen("a", FAILED) == [("payments", "predicted_failed")]
    assert card.seen("b", READY) == []  # Ready now: it must still run for the settle time
    assert card.seen("c", FAILED) == []  # a miss: held while a false alarm may still join its node's burst
    assert card.seen("d", READY) == []
    assert card.seen("e", PodSignal(deleting=True)) == [("payments", "deleted")]
    clock.now += PAIR_SECONDS
    assert card.tick() == [("payments", "failed_unpredicted")]
    clock.now += SETTLE - PAIR_SECONDS - 1
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
        "node": "n-a",
        "verdict": "would reject: Insufficient hugepages-2Mi",
        "outcome": "failed: OutOfhugepages-2Mi",
        "judgedBy": "bind",
        "secondsToOutcome": 0.0,
        "pairedWith": "",
    }
    assert row["pods"]["failed_unpredicted"][0]["secondsToOutcome"] == 0.0  # at its failure, not its count


def test_the_first_verdict_stands_and_later_events_of_a_counted_pod_count_nothing() -> None:
    clock = Clock()
    card = _card(clock)
    card.judged("a", "payments", "a", "n1", ADMIT)
    card.judged("a", "payments", "a", "n2", REJECT)  # the watch after the bind verb: the bind's verdict stands
    assert card.seen("a", FAILED) == []  # held for a partner: its outcome is known, its cell not yet
    assert card.seen("a", READY) == []
    clock.now += PAIR_SECONDS
    assert card.tick() == [("payments", "failed_unpredicted")]
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
    clock.now += PAIR_SECONDS
    card.tick()
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
        ended += card.judged(uid, "payments", uid, f"n-{uid}", prediction)  # alone on its node: never paired
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


def test_a_false_alarm_and_a_miss_on_one_node_in_one_burst_pair_as_a_foreseen_failure() -> None:
    """Shadow names the last pod placed past the node's room; the kernel failed another one of the burst."""
    clock = Clock()
    card = _card(clock)
    card.judged("first", "vms", "dpdk", "n1", ADMIT)
    clock.now += 1
    card.judged("last", "vms", "vm", "n1", REJECT)
    assert card.seen("first", FAILED) == []  # a miss, held: "last" may still run
    assert card.seen("last", READY) == []
    clock.now += PAIR_SECONDS  # the burst closes, "last" still undecided: the miss stays held
    assert card.tick() == []
    assert card.document()["namespaces"]["vms"]["awaiting"] == 2
    clock.now += SETTLE
    assert card.tick() == [("vms", "predicted_failed"), ("vms", "ran_as_predicted")]
    row = card.document()["namespaces"]["vms"]
    assert row["total"] == {**dict.fromkeys(ENDS, 0), "predicted_failed": 1, "ran_as_predicted": 1}
    assert (row["precision"], row["recall"], row["awaiting"]) == (1.0, 1.0, 0)
    failed, ran = row["pods"]["predicted_failed"][0], row["pods"]["ran_as_predicted"][0]
    assert (failed["pod"], failed["verdict"], failed["pairedWith"]) == ("vms/dpdk", "would admit", "vms/vm")
    assert (ran["pod"], ran["verdict"], ran["pairedWith"]) == ("vms/vm", f"would reject: {REJECT.why}", "vms/dpdk")
    assert failed["secondsToOutcome"] == 1.0  # at its failure, not at the pairing
    text = render_shadow(parse_shadow_document(msgspec.json.encode(card.document())))
    assert "vms/dpdk on n1: shadow said would admit (watch);" in text
    assert "paired with vms/vm (same node and burst:" in text


def test_pods_on_other_nodes_or_past_the_burst_do_not_pair() -> None:
    clock = Clock()
    card = _card(clock)
    card.judged("alarm", "vms", "alarm", "n1", REJECT)
    card.judged("elsewhere", "vms", "elsewhere", "n2", ADMIT)  # another node
    clock.now += PAIR_SECONDS
    card.judged("later", "vms", "later", "n1", ADMIT)  # n1's next burst
    # n2's burst is over and holds no "would reject" pod: a miss at once; n1's next burst still takes pods.
    assert card.seen("elsewhere", FAILED) == [("vms", "failed_unpredicted")]
    assert card.seen("later", FAILED) == []
    card.seen("alarm", READY)
    clock.now += SETTLE
    assert sorted(card.tick()) == [("vms", "failed_unpredicted"), ("vms", "predicted_ran")]
    assert card.followed == 0
    stories = card.document()["namespaces"]["vms"]["pods"].values()
    assert all(story["pairedWith"] == "" for cell in stories for story in cell)


def test_a_held_pod_is_counted_in_its_own_cell_once_nothing_left_in_its_burst_can_pair_it() -> None:
    clock = Clock()
    card = _card(clock)
    for uid, prediction in (("miss", ADMIT), ("gone", REJECT), ("stuck", REJECT), ("alarm", REJECT)):
        card.judged(uid, "vms", uid, "n1", prediction)
    card.judged("alarm2", "vms", "alarm2", "n2", REJECT)
    card.judged("never", "vms", "never", "n2", ADMIT)
    assert card.seen("miss", FAILED) == []
    clock.now += PAIR_SECONDS
    assert card.tick() == []  # three "would reject" pods without an outcome yet
    assert card.seen("gone", PodSignal(deleting=True)) == [("vms", "deleted")]
    assert card.forget("stuck") == []  # its bind failed: not counted, one possible partner less
    # The last possible partner failed too (a hit, not a false alarm): the miss stays a miss.
    failure = PodSignal(failure="container qemu restarted 1 times")
    assert card.seen("alarm", failure) == [("vms", "predicted_failed"), ("vms", "failed_unpredicted")]
    assert card.followed == 2
    card.seen("alarm2", READY)
    clock.now += SETTLE
    assert card.tick() == []  # "alarm2" held: "never" (n2) may still fail
    clock.now += WINDOW
    assert card.tick() == [("vms", "predicted_ran"), ("vms", "expired")]  # at its expiry, in its cell
    assert card.followed == 0


@pytest.mark.parametrize("seed", range(5))
def test_on_few_nodes_each_pod_is_counted_once_and_each_burst_pairs_all_it_can(seed: int) -> None:
    """The pairing against a reference: per node, bursts of ``PAIR_SECONDS`` from their first verdict;
    each burst turns min(false alarms, misses) pairs into hits and ran-as-predicted; the margins (pods
    predicted, pods failed) stay as they were; the counter only ever counts a pod once."""
    rng = random.Random(seed)
    clock = Clock()
    card = _card(clock)
    per_pod: dict[str, tuple[str, float, str]] = {}  # uid: (node, judged at, cell before pairing)
    ended: list[tuple[str, str]] = []
    for i in range(1500):
        uid, node = f"u{i}", rng.choice(("n1", "n2", "n3"))
        prediction = rng.choice((REJECT, ADMIT))
        ended += card.judged(uid, "payments", uid, node, prediction)
        failed = rng.random() < 0.5
        ended += card.seen(uid, READY) + (card.seen(uid, FAILED) if failed else [])
        per_pod[uid] = (node, clock.now, cell_of(prediction, PodOutcome.FAILED if failed else PodOutcome.RAN))
        clock.now += rng.expovariate(1.0)
        ended += card.tick()
    clock.now += SETTLE + PAIR_SECONDS
    ended += card.tick()
    assert card.followed == 0
    assert len(ended) == len(per_pod)
    expected = dict.fromkeys(ENDS, 0)
    for burst in _bursts(per_pod):
        cells = Counter(per_pod[uid][2] for uid in burst)
        pairs = min(cells["predicted_ran"], cells["failed_unpredicted"])
        cells.update(predicted_ran=-pairs, failed_unpredicted=-pairs, predicted_failed=pairs, ran_as_predicted=pairs)
        for cell, count in cells.items():
            expected[cell] += count
    assert Counter(cell for _, cell in ended) == {cell: n for cell, n in expected.items() if n}
    assert card.document()["namespaces"]["payments"]["total"] == expected


def _bursts(per_pod: dict[str, tuple[str, float, str]]) -> list[list[str]]:
    """Each node's pods (in the order judged) cut into bursts: a burst takes the pods judged less than
    ``PAIR_SECONDS`` after its first."""
    bursts: list[list[str]] = []
    current: dict[str, tuple[float, list[str]]] = {}
    for uid, (node, at, _) in per_pod.items():
        if node not in current or at >= current[node][0] + PAIR_SECONDS:
            current[node] = (at, [])
            bursts.append(current[node][1])
        current[node][1].append(uid)
    return bursts


def test_the_cap_counts_a_held_pod_it_pushes_out_in_its_cell_not_as_dropped() -> None:
    clock = Clock()
    card = _card(clock, max_followed=3)
    card.judged("miss", "vms", "miss", "n1", ADMIT)
    card.judged("open", "vms", "open", "n1", REJECT)
    card.seen("miss", FAILED)
    card.judged("b", "vms", "b", "n2", ADMIT)
    # The cap pushes out the oldest, a held miss: counted in its cell, not as dropped.
    assert card.judged("c", "vms", "c", "n3", ADMIT) == [("vms", "failed_unpredicted")]
    assert card.document()["namespaces"]["vms"]["total"]["dropped"] == 0


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
    assert _outcomes(extender) == {
        "predicted_failed": 1,
        "predicted_ran": 0,
        "failed_unpredicted": 0,
        "ran_as_predicted": 1,
    }


def _with(pod: Pod, **status: Any) -> Pod:
    """``pod`` bound to node a with this status, as the watch decodes it."""
    document = msgspec.to_builtins(pod)
    document["spec"]["nodeName"] = "a"
    document["status"] = status
    return msgspec.json.decode(msgspec.json.encode(document), type=Pod)


def test_the_extenders_counter_moves_only_once_a_pods_cell_is_final() -> None:
    """A burst of two on one node whose pool holds one: shadow says the second would be turned away, the
    first fails, the second runs. The miss waits uncounted while the second may still be its partner;
    the pair then counts as a foreseen failure and a pod that ran as predicted."""
    config = build_config({"shadowSettleSeconds": 0, "namespaces": {"team": {"mode": "shadow"}}}, {})
    state = ClusterState(config)
    state.replace([make_node("a", hugepages="512Mi")], [])
    extender = Extender(config, state, Metrics())

    def seen(pod: Pod) -> None:
        record = state.with_signal(state.pod_record(pod), pod)
        extender.pod_seen(record, False)
        state.apply_pod_record(record)

    pods = {}
    for name in ("first", "second"):
        pods[name] = waiting = make_pod(name, "team", hugepages="512Mi")
        state.apply_pod(waiting)
        extender.verbs.filter_pod(waiting, ["a"])
        seen(_with(waiting, phase="Running"))
    seen(_with(pods["first"], phase="Failed", reason="OutOfhugepages-2Mi"))
    assert _outcomes(extender) == dict.fromkeys(CELLS, 0)
    assert extender.scorecard.document("team")["namespaces"]["team"]["awaiting"] == 2
    seen(_with(pods["second"], phase="Running", conditions=[{"type": "Ready", "status": "True"}]))
    assert _outcomes(extender) == {**dict.fromkeys(CELLS, 0), "predicted_failed": 1, "ran_as_predicted": 1}
    stories = extender.scorecard.document("team")["namespaces"]["team"]["pods"]
    assert (stories["predicted_failed"][0]["pod"], stories["predicted_failed"][0]["pairedWith"]) == (
        "team/first",
        "team/second",
    )


def _outcomes(extender: Extender) -> dict[str, float]:
    return {
        s.labels["cell"]: s.value
        for family in extender.metrics.registry.collect()
        if family.name == "hugepage_extender_shadow_outcomes"
        for s in family.samples
        if s.name.endswith("_total") and s.labels["pod_namespace"] == "team"
    }
