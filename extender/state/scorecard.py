"""Shadow's scorecard: each shadow verdict follows its pod until the pod's outcome is known.

For a pod of a shadow namespace that asks hugepages, the verdict shadow gives for the node the
scheduler chose (``podoutcome.Prediction``: judged at bind time by the bind verb, else at the first
watch event showing the pod bound) is kept until the watch shows what became of the pod
(``podoutcome``). The pair lands in one of four cells, once:

    predicted_failed     shadow said "would reject", and the pod failed on its node
    predicted_ran        shadow said "would reject", and the pod ran (a false alarm)
    failed_unpredicted   shadow said "would admit", and the pod failed (a miss)
    ran_as_predicted     shadow said "would admit", and the pod ran

Credit per node and burst: the pods judged on one node within ``PAIR_SECONDS`` of the first of them
are a burst (they race for the node's pages as they start). Shadow names the pods past the node's room,
the last placed; the kernel gives its pages to whichever consumer starts first. So within a burst a
false alarm (``predicted_ran``) and a miss (``failed_unpredicted``) pair up: the failure was foreseen,
on that node at that time, and the pod shadow named ran in its stead. The pair counts as
``predicted_failed`` (the pod that failed) and ``ran_as_predicted`` (the pod that ran), each pod still
once; its stories name the partner. Pairing keeps both margins: as many pods predicted (shadow's "would
reject" verdicts) and as many failed as without it.

Counters only go up, so a pod is counted once its cell is final: a pod in one of the two pairable cells
is held (``awaiting``) while its burst may still give it a partner, that is while the burst still takes
pods or one of its pods that could become the partner has no outcome yet. Held pods are followed pods:
``MAX_FOLLOWED`` bounds them too, and one is counted unpaired at the latest when it would expire
(``shadowWindowSeconds`` after its verdict).

A pod deleted before its outcome is counted as ``deleted``; one whose outcome never came within
``shadowWindowSeconds`` as ``expired``; one pushed out by the cap on pods followed as ``dropped``.
Memory is bounded whatever the rate of pods: at most ``MAX_FOLLOWED`` pods followed (held ones among
them); bursts, at most one per followed pod plus one per node judged in the last ``PAIR_SECONDS``; per
row ``WINDOW_BUCKETS`` time buckets of counts and the last ``STORIES_PER_CELL`` pods of each cell.
Rows are the namespaces the config names and ``_other`` for the rest (as the metrics' labels).
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import msgspec

from extender.core.podoutcome import (
    CELLS,
    ENDS,
    PodOutcome,
    PodSignal,
    Prediction,
    cell_of,
    outcome_at_deletion,
    outcome_of,
)
from extender.core.shadowdocument import PodStory

MAX_FOLLOWED = 20_000  # pods awaiting their outcome; 100,000 pods an hour settle in minutes (docs/performance.md)
STORIES_PER_CELL = 5
WINDOW_BUCKETS = 60
# A pod that left the watch of active pods is deleted unless the watch of ended pods shows it Failed or
# Succeeded within this time (the two watches' events come in no set order between them).
GONE_GRACE_SECONDS = 5.0
# A node's burst: the pods judged on it this soon after the first. Pods placed this close start together
# and race for the node's pages (the replay's pick-to-node window is 5 s on average; a kind burst of 8
# consumers is judged within a second or two).
PAIR_SECONDS = 10.0
# The two cells a pair turns into the other two: a false alarm and a miss on one node, in one burst.
PAIRED = {"predicted_ran": "ran_as_predicted", "failed_unpredicted": "predicted_failed"}
PARTNER = {"predicted_ran": "failed_unpredicted", "failed_unpredicted": "predicted_ran"}
Counted = tuple[str, str]  # (row, end): a pod counted, as the metric counts it


@dataclass(slots=True, eq=False)
class _Burst:
    """The pods judged on one node in ``PAIR_SECONDS`` from the first (until ``closes_at``): how many
    are still followed without an outcome, by verdict, and those held in a pairable cell (all in one
    cell: a false alarm and a miss held together would have paired)."""

    closes_at: float
    undecided_reject: int = 0
    undecided_admit: int = 0
    held: dict[str, None] = field(default_factory=dict)  # uids, oldest first
    held_cell: str = ""

    def joined(self, prediction: Prediction, change: int) -> None:
        if prediction.would_reject:
            self.undecided_reject += change
        else:
            self.undecided_admit += change

    def could_pair(self, cell: str, now: float) -> bool:
        """Whether a partner for a pod of ``cell`` may still come: a pod yet to join, or one without an
        outcome whose verdict could make it (a miss is a "would admit" pod's, a false alarm a "would
        reject" pod's)."""
        if now < self.closes_at:
            return True
        return (self.undecided_admit if cell == "predicted_ran" else self.undecided_reject) > 0


@dataclass(slots=True)
class _Followed:
    row: str
    pod: str  # namespace/name
    node: str
    prediction: Prediction
    judged_at: float
    burst: _Burst
    signal: PodSignal | None = None
    ready_since: float | None = None
    held: str = ""  # the pairable cell it waits in for a partner ("" while it has no outcome)
    decided_at: float | None = None


@dataclass(slots=True)
class _Row:
    """One namespace's counts: in time buckets over the window, and since the extender started."""

    buckets: deque[tuple[int, dict[str, int]]] = field(default_factory=deque)
    total: dict[str, int] = field(default_factory=lambda: dict.fromkeys(ENDS, 0))
    stories: dict[str, deque[PodStory]] = field(
        default_factory=lambda: {cell: deque(maxlen=STORIES_PER_CELL) for cell in CELLS}
    )

    def count(self, end: str, bucket: int) -> None:
        self.total[end] += 1
        if not self.buckets or self.buckets[-1][0] != bucket:
            self.buckets.append((bucket, dict.fromkeys(ENDS, 0)))
            while self.buckets[0][0] <= bucket - WINDOW_BUCKETS:  # past the window, read or not
                self.buckets.popleft()
        self.buckets[-1][1][end] += 1

    def in_window(self, oldest: int) -> dict[str, int]:
        while self.buckets and self.buckets[0][0] < oldest:
            self.buckets.popleft()
        counts = dict.fromkeys(ENDS, 0)
        for _, bucket in self.buckets:
            for end, n in bucket.items():
                counts[end] += n
        return counts


def precision_recall(counts: dict[str, int]) -> tuple[float | None, float | None]:
    """Of the pods shadow said would be turned away, the share that failed; of the pods that failed,
    the share shadow foresaw. None where nothing was counted."""
    hit, false_alarm, miss = counts["predicted_failed"], counts["predicted_ran"], counts["failed_unpredicted"]
    precision = hit / (hit + false_alarm) if hit + false_alarm else None
    recall = hit / (hit + miss) if hit + miss else None
    return precision, recall


class Scorecard:
    """Verdicts waiting for their pods' outcomes (and pairs), and what came of those already known."""

    def __init__(
        self,
        *,
        settle_seconds: float,
        window_seconds: float,
        clock: Callable[[], float],
        row_of: Callable[[str], str],
        rows: tuple[str, ...] = (),
        max_followed: int = MAX_FOLLOWED,
        pair_seconds: float = PAIR_SECONDS,
    ) -> None:
        self.settle_seconds = settle_seconds
        self.window_seconds = window_seconds
        self.pair_seconds = pair_seconds
        self._clock = clock
        self._row_of = row_of
        self._max_followed = max_followed
        self._bucket_seconds = window_seconds / WINDOW_BUCKETS
        self._followed: dict[str, _Followed] = {}  # in the order judged: the oldest first
        self._ready: dict[str, float] = {}  # followed pods Ready now, in the order they became Ready
        self._gone: dict[str, float] = {}  # followed pods the watch of active pods no longer shows, since when
        self._bursts: dict[str, _Burst] = {}  # per node, the burst pods still join: the first to close first
        self.rows: dict[str, _Row] = {row: _Row() for row in rows}

    @property
    def followed(self) -> int:
        return len(self._followed)

    def is_followed(self, uid: str) -> bool:
        return uid in self._followed

    def judged(self, uid: str, namespace: str, name: str, node: str, prediction: Prediction) -> list[Counted]:
        """Follow a pod from its verdict on; the first verdict of a pod stands. Returns what was counted:
        a pod pushed out by the cap on pods followed, pods held that the node's last burst cannot pair."""
        if uid in self._followed:
            return []
        ended = []
        if len(self._followed) >= self._max_followed:
            oldest, followed = next(iter(self._followed.items()))
            ended += self._end(oldest, followed.held or "dropped")
        now = self._clock()
        burst = self._bursts.get(node)
        if burst is None or now >= burst.closes_at:
            if burst is not None:
                del self._bursts[node]
                ended += self._release(burst)
            burst = self._bursts[node] = _Burst(now + self.pair_seconds)
        burst.joined(prediction, +1)
        row = self._row_of(namespace)
        self.rows.setdefault(row, _Row())
        self._followed[uid] = _Followed(row, f"{namespace}/{name}", node, prediction, now, burst)
        return ended

    def forget(self, uid: str) -> list[Counted]:
        """A verdict whose bind failed: the pod is not on that node, and is not counted. Returns the pods
        held that its burst now cannot pair."""
        followed = self._followed.pop(uid, None)
        if followed is None:
            return []
        self._ready.pop(uid, None)
        self._gone.pop(uid, None)
        return self._left(uid, followed)

    def seen(self, uid: str, signal: PodSignal, *, deleted: bool = False) -> list[Counted]:
        """A watch event of a followed pod (others, and those with an outcome, are ignored); returns what
        was counted."""
        followed = self._followed.get(uid)
        if followed is None or followed.held:
            return []
        followed.signal = signal
        now = self._clock()
        if deleted:
            outcome = outcome_at_deletion(signal)
            if outcome is not None:
                return self._decided(uid, outcome)
            # Deleted, or turned Failed or Succeeded: the watch of ended pods says which within moments.
            self._gone.setdefault(uid, now)
            return []
        if signal.ready and not signal.failure:
            if followed.ready_since is None:
                followed.ready_since = now
                self._ready[uid] = now
        elif followed.ready_since is not None:
            followed.ready_since = None  # Ready lost: the settle time starts over at the next Ready
            del self._ready[uid]
        ready_for = None if followed.ready_since is None else now - followed.ready_since
        outcome = outcome_of(signal, ready_for=ready_for, settle_seconds=self.settle_seconds)
        return [] if outcome is None else self._decided(uid, outcome)

    def tick(self) -> list[Counted]:
        """Pods Ready for the settle time ran; pods gone from the watch without an outcome were deleted;
        bursts past their time release the pods held that nothing left in them can pair; pods without an
        outcome for the window expire (a held one counted in its cell). O(1) when nothing is due: the
        dicts are in time order."""
        now = self._clock()
        ended = []
        while self._ready:
            uid, since = next(iter(self._ready.items()))
            if now - since < self.settle_seconds:
                break
            ended += self._decided(uid, PodOutcome.RAN)
        while self._gone:
            uid, since = next(iter(self._gone.items()))
            if now - since < GONE_GRACE_SECONDS:
                break
            ended += self._end(uid, "deleted")
        while self._bursts:
            node, burst = next(iter(self._bursts.items()))
            if now < burst.closes_at:
                break
            del self._bursts[node]
            ended += self._release(burst)
        while self._followed:
            uid, followed = next(iter(self._followed.items()))
            if now - followed.judged_at < self.window_seconds:
                break
            ended += self._end(uid, followed.held or "expired")
        return ended

    def _decided(self, uid: str, outcome: PodOutcome) -> list[Counted]:
        """A pod's outcome: counted in its cell, paired with a pod its burst holds, or held for one."""
        followed = self._followed[uid]
        cell = cell_of(followed.prediction, outcome)
        if cell not in PAIRED:
            return self._end(uid, cell)
        burst = followed.burst
        if burst.held and burst.held_cell == PARTNER[cell]:
            partner = next(iter(burst.held))
            partner_pod = self._followed[partner].pod
            return [
                *self._end(partner, PAIRED[PARTNER[cell]], paired_with=followed.pod),
                *self._end(uid, PAIRED[cell], paired_with=partner_pod),
            ]
        now = self._clock()
        if not burst.could_pair(cell, now):
            return self._end(uid, cell)
        burst.joined(followed.prediction, -1)
        burst.held[uid] = None
        burst.held_cell = cell
        followed.held, followed.decided_at = cell, now
        self._ready.pop(uid, None)
        self._gone.pop(uid, None)
        return []

    def _release(self, burst: _Burst) -> list[Counted]:
        """The pods a burst holds once nothing left in it can pair them: counted in their own cell."""
        if not burst.held or burst.could_pair(burst.held_cell, self._clock()):
            return []
        ended = []
        for uid in list(burst.held):
            ended += self._end(uid, burst.held_cell)
        return ended

    def _end(self, uid: str, end: str, *, paired_with: str = "") -> list[Counted]:
        """Count a pod once, in its cell or end (and what its leaving its burst releases)."""
        followed = self._followed.pop(uid)
        self._ready.pop(uid, None)
        self._gone.pop(uid, None)
        now = self._clock()
        row = self.rows[followed.row]
        row.count(end, int(now // self._bucket_seconds))
        if end in CELLS:
            row.stories[end].append(_story(followed, end, now, paired_with))
        return [(followed.row, end), *self._left(uid, followed)]

    def _left(self, uid: str, followed: _Followed) -> list[Counted]:
        """A pod no longer followed leaves its burst; the pods the burst held that it was the last
        possible partner of are counted."""
        burst = followed.burst
        if followed.held:
            del burst.held[uid]
            return []
        burst.joined(followed.prediction, -1)
        return self._release(burst)

    def document(self, row: str | None = None) -> dict[str, Any]:
        """The scorecard as ``/debug/shadow`` answers it: each row's counts over the window and since the
        start, precision and recall over the window, the last pods of each cell; one row when named.
        ``awaiting``: pods without an outcome, or held for a partner."""
        now = self._clock()
        oldest = int(now // self._bucket_seconds) - WINDOW_BUCKETS + 1
        awaiting = Counter(f.row for f in self._followed.values())
        rows = {}
        for name, data in sorted(self.rows.items()):
            if row is not None and name != row:
                continue
            window = data.in_window(oldest)
            precision, recall = precision_recall(window)
            rows[name] = {
                "window": window,
                "total": dict(data.total),
                "precision": precision,
                "recall": recall,
                "awaiting": awaiting[name],
                "pods": {cell: [msgspec.to_builtins(s) for s in reversed(data.stories[cell])] for cell in CELLS},
            }
        return {
            "settleSeconds": self.settle_seconds,
            "windowSeconds": self.window_seconds,
            "pairSeconds": self.pair_seconds,
            "followed": len(self._followed),
            "namespaces": rows,
        }


def _story(followed: _Followed, cell: str, now: float, paired_with: str) -> PodStory:
    prediction, signal = followed.prediction, followed.signal
    verdict = f"would reject: {prediction.why}" if prediction.would_reject else "would admit"
    if cell in ("predicted_failed", "failed_unpredicted"):
        outcome = f"failed: {signal.failure}" if signal is not None else "failed"
    elif signal is not None and signal.succeeded:
        outcome = "ran: Succeeded"
    else:
        outcome = "ran: Ready"
    decided_at = now if followed.decided_at is None else followed.decided_at
    seconds = round(decided_at - followed.judged_at, 1)
    return PodStory(followed.pod, followed.node, verdict, outcome, prediction.judged_by, seconds, paired_with)
