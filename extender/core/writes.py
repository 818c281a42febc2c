"""The extender's own API writes about waiting pods, bounded per minute whatever the backlog.

Three kinds reach the API server because pods wait: an Event on a pod no node could take (at most one
per pod and reason a minute, ``kube/events.py``) or on a pod behind the scheduling gate that no node it
may use has room for (WaitingForRoom: once while it waits, ``gates.GatedPods``), a nudge (one annotation
of the extender's own pod, paced to one a second by ``nudge.NudgePacer``, whatever the number of pods
waiting) and a gate lifted (one patch per gated pod once in its life, when a node it may use has room:
``gatelift.py``). Per pod is not a bound when thousands of pods wait: 10,000 waiting pods would be 10,000
Events a minute. So each kind also has a budget across every pod, ``PER_MINUTE``: at most that many writes
in any 60 seconds; a write past it is dropped (and counted, ``hugepage_extender_api_writes_total{kind,
result="dropped"}``). An Event dropped is one the pod's FailedScheduling event from the scheduler already
stands for; a gated pod has none, so its WaitingForRoom Event waits for the budget instead (dropped only if
the pod is lifted or gone first: 10,000 gated pods are all told within three hours, 60 a minute). A nudge
never reaches the budget (the pacer allows 60 a minute), which bounds it all the same.
Time is passed in, never read here.
"""

from __future__ import annotations

from collections import deque

WINDOW_SECONDS = 60.0
KINDS = ("event", "nudge", "gate")  # the metric's label values, with RESULTS: a bounded label set
RESULTS = ("written", "failed", "dropped")
# A gate is lifted once per pod in its life, and the lifts set the pace at which gated pods reach the
# scheduler: 100 a second, about what one kube-scheduler places.
PER_MINUTE = {"event": 60, "nudge": 60, "gate": 6000}


class WriteBudget:
    """At most ``per_minute`` writes in any ``WINDOW_SECONDS``: the times of the last ``per_minute``
    writes are kept (bounded memory), a write is allowed when fewer were made or the oldest of them is
    a window old. O(1)."""

    def __init__(self, per_minute: int) -> None:
        self._per_minute = per_minute
        self._times: deque[float] = deque(maxlen=per_minute)

    def take(self, now: float) -> bool:
        """Whether a write may be made now; if so, it is counted."""
        times = self._times
        if len(times) >= self._per_minute and now - times[0] < WINDOW_SECONDS:
            return False
        times.append(now)  # the oldest drops out (maxlen)
        return True
