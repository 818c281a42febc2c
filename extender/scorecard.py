"""Shadow's scorecard: each shadow verdict follows its pod until the pod's outcome is known.

For a pod of a shadow namespace that asks hugepages, the verdict shadow gives for the node the
scheduler chose (``podoutcome.Prediction``: judged at bind time by the bind verb, else at the first
watch event showing the pod bound) is kept until the watch shows what became of the pod
(``podoutcome``). The pair lands in one of four cells, once:

    predicted_failed     shadow said "would reject", and the pod failed on its node
    predicted_ran        shadow said "would reject", and the pod ran (a false alarm)
    failed_unpredicted   shadow said "would admit", and the pod failed (a miss)
    ran_as_predicted     shadow said "would admit", and the pod ran

A pod deleted before its outcome is counted as ``deleted``; one whose outcome never came within
``shadowWindowSeconds`` as ``expired``; one pushed out by the cap on pods followed as ``dropped``.
Memory is bounded whatever the rate of pods: at most ``MAX_FOLLOWED`` pods followed, per row
``WINDOW_BUCKETS`` time buckets of counts and the last ``STORIES_PER_CELL`` pods of each cell.
Rows are the namespaces the config names and ``_other`` for the rest (as the metrics' labels).
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import msgspec

from extender.podoutcome import CELLS, ENDS, PodOutcome, PodSignal, Prediction, cell_of, outcome_at_deletion, outcome_of
from extender.shadowreport import PodStory

MAX_FOLLOWED = 20_000  # pods awaiting their outcome; 100,000 pods an hour settle in minutes (docs/performance.md)
STORIES_PER_CELL = 5
WINDOW_BUCKETS = 60
# A pod that left the watch of active pods is deleted unless the watch of ended pods shows it Failed or
# Succeeded within this time (the two watches' events come in no set order between them).
GONE_GRACE_SECONDS = 5.0


@dataclass(slots=True)
class _Followed:
    row: str
    pod: str  # namespace/name
    node: str
    prediction: Prediction
    judged_at: float
    signal: PodSignal | None = None
    ready_since: float | None = None


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
    """Verdicts waiting for their pods' outcomes, and what came of those already known."""

    def __init__(
        self,
        *,
        settle_seconds: float,
        window_seconds: float,
        clock: Callable[[], float],
        row_of: Callable[[str], str],
        rows: tuple[str, ...] = (),
        max_followed: int = MAX_FOLLOWED,
    ) -> None:
        self.settle_seconds = settle_seconds
        self.window_seconds = window_seconds
        self._clock = clock
        self._row_of = row_of
        self._max_followed = max_followed
        self._bucket_seconds = window_seconds / WINDOW_BUCKETS
        self._followed: dict[str, _Followed] = {}  # in the order judged: the oldest first
        self._ready: dict[str, float] = {}  # followed pods Ready now, in the order they became Ready
        self._gone: dict[str, float] = {}  # followed pods the watch of active pods no longer shows, since when
        self.rows: dict[str, _Row] = {row: _Row() for row in rows}

    @property
    def followed(self) -> int:
        return len(self._followed)

    def is_followed(self, uid: str) -> bool:
        return uid in self._followed

    def judged(self, uid: str, namespace: str, name: str, node: str, prediction: Prediction) -> list[tuple[str, str]]:
        """Follow a pod from its verdict on; the first verdict of a pod stands. Returns what was counted
        (``(row, end)``): a pod pushed out by the cap on pods followed."""
        if uid in self._followed:
            return []
        ended = []
        if len(self._followed) >= self._max_followed:
            oldest = next(iter(self._followed))
            ended.append(self._end(oldest, "dropped"))
        row = self._row_of(namespace)
        self.rows.setdefault(row, _Row())
        self._followed[uid] = _Followed(row, f"{namespace}/{name}", node, prediction, self._clock())
        return ended

    def forget(self, uid: str) -> None:
        """A verdict whose bind failed: the pod is not on that node, and is not counted."""
        if self._followed.pop(uid, None) is not None:
            self._ready.pop(uid, None)
            self._gone.pop(uid, None)

    def seen(self, uid: str, signal: PodSignal, *, deleted: bool = False) -> list[tuple[str, str]]:
        """A watch event of a followed pod (others are ignored); returns what was counted."""
        followed = self._followed.get(uid)
        if followed is None:
            return []
        followed.signal = signal
        now = self._clock()
        if deleted:
            outcome = outcome_at_deletion(signal)
            if outcome is not None:
                return [self._end(uid, cell_of(followed.prediction, outcome))]
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
        return [] if outcome is None else [self._end(uid, cell_of(followed.prediction, outcome))]

    def tick(self) -> list[tuple[str, str]]:
        """Pods Ready for the settle time ran; pods gone from the watch without an outcome were deleted;
        pods without an outcome for the window expire. O(1) when nothing is due: the dicts are in time order."""
        now = self._clock()
        ended = []
        while self._ready:
            uid, since = next(iter(self._ready.items()))
            if now - since < self.settle_seconds:
                break
            ended.append(self._end(uid, cell_of(self._followed[uid].prediction, PodOutcome.RAN)))
        while self._gone:
            uid, since = next(iter(self._gone.items()))
            if now - since < GONE_GRACE_SECONDS:
                break
            ended.append(self._end(uid, "deleted"))
        while self._followed:
            uid, followed = next(iter(self._followed.items()))
            if now - followed.judged_at < self.window_seconds:
                break
            ended.append(self._end(uid, "expired"))
        return ended

    def _end(self, uid: str, end: str) -> tuple[str, str]:
        followed = self._followed.pop(uid)
        self._ready.pop(uid, None)
        self._gone.pop(uid, None)
        now = self._clock()
        row = self.rows[followed.row]
        row.count(end, int(now // self._bucket_seconds))
        if end in CELLS:
            row.stories[end].append(_story(followed, end, now))
        return followed.row, end

    def document(self, row: str | None = None) -> dict[str, Any]:
        """The scorecard as ``/debug/shadow`` answers it: each row's counts over the window and since the
        start, precision and recall over the window, the last pods of each cell; one row when named."""
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
            "followed": len(self._followed),
            "namespaces": rows,
        }


def _story(followed: _Followed, cell: str, now: float) -> PodStory:
    prediction, signal = followed.prediction, followed.signal
    verdict = f"would reject: {prediction.why}" if prediction.would_reject else "would admit"
    if cell in ("predicted_failed", "failed_unpredicted"):
        outcome = f"failed: {signal.failure}" if signal is not None else "failed"
    elif signal is not None and signal.succeeded:
        outcome = "ran: Succeeded"
    else:
        outcome = "ran: Ready"
    seconds = round(now - followed.judged_at, 1)
    return PodStory(followed.pod, followed.node, verdict, outcome, prediction.judged_by, seconds)
