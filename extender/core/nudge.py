"""When to nudge the scheduler: room freed while an enforced pod the extender turned away waits.

kube-scheduler files a pod an extender rejected under the pseudo-plugin "Extender", which any
cluster event requeues, and nothing else does before the unschedulable flush (5 minutes;
docs/design.md, "Requeue"). Room frees here without any API event the scheduler sees: a hold
that times out or is dropped, a bind that failed, a node agent record giving pages back, or an
event the extender's watch saw after the scheduler had already looked again. So the shell
writes one small API change the scheduler does react to (an annotation on the extender's own
pod, ``kube/nudge.py``): a *nudge*. This module decides when: at most once per
``interval_seconds``, only while room was freed since the last nudge (room some waiting pod
could fit in: ``ClusterState.take_freed``) and some enforced pod waits; a nudge that failed is
tried again an interval later. Time is passed in, never read here.
"""

from __future__ import annotations

import math

NUDGE_INTERVAL_SECONDS = 1.0  # at most one API write a second, and only while pods wait


class NudgePacer:
    def __init__(self, interval_seconds: float = NUDGE_INTERVAL_SECONDS) -> None:
        self._interval = interval_seconds
        self._freed = False  # room freed since the last nudge that went through
        self._last = -math.inf  # when the last nudge was tried

    @property
    def interval_seconds(self) -> float:
        return self._interval

    @property
    def freed(self) -> bool:
        """Room freed since the last nudge that went through."""
        return self._freed

    def room_freed(self) -> None:
        self._freed = True

    def due(self, now: float, *, waiting: bool) -> bool:
        """Whether to nudge now. Room freed while no pod waits is forgotten: a pod turned away
        later was decided with that room in view."""
        if not waiting:
            self._freed = False
            return False
        return self._freed and now - self._last >= self._interval

    def sent(self, now: float) -> None:
        self._freed = False
        self._last = now

    def failed(self, now: float) -> None:
        """The write did not go through: keep the request, try again an interval later."""
        self._last = now
