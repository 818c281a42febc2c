"""Placements in flight: pods whose node is chosen (or narrowed down) but not yet seen bound.

One entry per pod UID, so asking again for the same pod moves or refreshes
its entry instead of counting it twice. An entry may hold the pod's need on
several nodes at once: when the filter leaves a few nodes and the scheduler
has not said which it picked, the need is held on each of them until the
pod shows up bound (or its bind names the node). That errs towards refusing
a node for a moment rather than over-committing a pool. Time is passed in,
never read here.
"""

from __future__ import annotations

import heapq
import itertools
from collections import defaultdict
from collections.abc import Sequence

import msgspec

HOLD_LIMIT = 16  # most nodes a filter answer holds a pod's need on (see FilterDecision.nodes_to_hold)


class Hold(msgspec.Struct, frozen=True, gc=False):
    nodes: tuple[str, ...]
    hugepage_bytes: int
    cpu_millis: int
    expires_at: float
    held_at: float = 0.0  # when the pod's need was first held, kept when the hold narrows


class HoldLedger:
    def __init__(self) -> None:
        self._by_uid: dict[str, Hold] = {}
        self._bytes: defaultdict[str, int] = defaultdict(int)
        self._cpu: defaultdict[str, int] = defaultdict(int)
        # Deadlines, soonest first: (expires_at, order of holding, uid, the hold it was
        # set for). An entry whose hold was released or replaced is dropped when it comes up.
        self._deadlines: list[tuple[float, int, str, Hold]] = []
        self._holds = itertools.count()

    def __len__(self) -> int:
        return len(self._by_uid)

    def __contains__(self, uid: object) -> bool:
        return uid in self._by_uid

    def held_on(self, node: str) -> tuple[int, int]:
        """Hugepage bytes and CPU millicores in flight to ``node``."""
        return self._bytes.get(node, 0), self._cpu.get(node, 0)

    def hold_of(self, uid: str) -> Hold | None:
        return self._by_uid.get(uid)

    def holds(self) -> dict[str, Hold]:
        return dict(self._by_uid)

    def hold(self, uid: str, hold: Hold) -> set[str]:
        """Count ``uid`` against each of ``hold.nodes``; returns the nodes whose totals changed."""
        touched = self.release(uid)
        self._by_uid[uid] = hold
        for node in hold.nodes:
            self._bytes[node] += hold.hugepage_bytes
            self._cpu[node] += hold.cpu_millis
        deadlines = self._deadlines
        if len(deadlines) > 2 * len(self._by_uid) + 64:
            # Pods held again and again leave stale entries: drop them, O(1) per hold overall.
            deadlines[:] = [entry for entry in deadlines if self._by_uid.get(entry[2]) is entry[3]]
            heapq.heapify(deadlines)
        heapq.heappush(deadlines, (hold.expires_at, next(self._holds), uid, hold))
        touched.update(hold.nodes)
        return touched

    def release(self, uid: str) -> set[str]:
        hold = self._by_uid.pop(uid, None)
        if hold is None:
            return set()
        for node in hold.nodes:
            self._bytes[node] -= hold.hugepage_bytes
            self._cpu[node] -= hold.cpu_millis
            if not self._bytes[node] and not self._cpu[node]:
                del self._bytes[node], self._cpu[node]
        return set(hold.nodes)

    def expire(self, now: float) -> set[str]:
        """Drop holds past their deadline (the pod never showed up bound): O(log n) each."""
        touched: set[str] = set()
        deadlines = self._deadlines
        while deadlines and deadlines[0][0] <= now:
            _, _, uid, hold = heapq.heappop(deadlines)
            if self._by_uid.get(uid) is hold:
                touched |= self.release(uid)
        return touched


def nodes_of(node_or_nodes: str | Sequence[str]) -> tuple[str, ...]:
    return (node_or_nodes,) if isinstance(node_or_nodes, str) else tuple(dict.fromkeys(node_or_nodes))
