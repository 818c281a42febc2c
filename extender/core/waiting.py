"""Pods the extender keeps waiting: enforced pods whose latest filter call admitted no node.

Only the filter sees them (a pod the scheduler cannot place stays Pending and is
retried), so the tracker learns from filter calls: a pod the watch shows waiting
enters at its first call that admits nothing (a UID only a request names never
does), leaves when a call admits a node or the watch no longer shows it waiting,
and is forgotten when the scheduler has not asked about it for
``forget_after_seconds`` (placed by another scheduler). kube-scheduler retries an
unschedulable pod at least every 5 minutes (``podMaxInUnschedulablePodsDuration``),
so a pod still Pending is asked about well within the default 10 minutes.

Time is passed in, never read here. Memory: one entry per waiting pod the watch shows.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

FORGET_AFTER_SECONDS = 600.0


@dataclass(frozen=True, slots=True)
class Waiting:
    count: int
    oldest_seconds: float  # how long the longest-waiting pod has waited; 0 when none waits


class WaitingPods:
    def __init__(self, forget_after_seconds: float = FORGET_AFTER_SECONDS) -> None:
        self._forget_after = forget_after_seconds
        self._since: dict[str, tuple[float, float]] = {}  # uid -> (first unplaced, last asked about)

    def __len__(self) -> int:
        return len(self._since)

    def unplaced(self, uid: str, now: float) -> None:
        if not uid:
            return
        first = self._since.get(uid, (now, now))[0]
        self._since[uid] = (first, now)

    def placed(self, uid: str) -> None:
        self._since.pop(uid, None)

    def uids(self) -> Iterator[str]:
        return iter(self._since)

    def any_of(self, still_waiting: Callable[[str], bool]) -> bool:
        """Whether a pod tracked here still waits by ``still_waiting`` (the watch shows it unbound)."""
        return any(still_waiting(uid) for uid in self._since)

    def summary(self, now: float, still_waiting: Callable[[str], bool] = lambda uid: True) -> Waiting:
        """Drops pods not asked about for ``forget_after_seconds`` and those not ``still_waiting``
        (the watch no longer shows them unbound); the rest, counted."""
        cutoff = now - self._forget_after
        for uid in [uid for uid, (_, last) in self._since.items() if last < cutoff or not still_waiting(uid)]:
            del self._since[uid]
        if not self._since:
            return Waiting(0, 0.0)
        first = min(first for first, _ in self._since.values())
        return Waiting(len(self._since), max(0.0, now - first))
