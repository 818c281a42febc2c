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

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Reservation:
    nodes: tuple[str, ...]
    hugepage_bytes: int
    cpu_millis: int
    expires_at: float


class InFlightLedger:
    def __init__(self) -> None:
        self._by_uid: dict[str, Reservation] = {}
        self._bytes: defaultdict[str, int] = defaultdict(int)
        self._cpu: defaultdict[str, int] = defaultdict(int)
        self._next_expiry = float("inf")

    def __len__(self) -> int:
        return len(self._by_uid)

    def __contains__(self, uid: object) -> bool:
        return uid in self._by_uid

    def pending(self, node: str) -> tuple[int, int]:
        """Hugepage bytes and CPU millicores in flight to ``node``."""
        return self._bytes.get(node, 0), self._cpu.get(node, 0)

    def reservations_of(self, uid: str) -> Reservation | None:
        return self._by_uid.get(uid)

    def reservations(self) -> dict[str, Reservation]:
        return dict(self._by_uid)

    def hold(self, uid: str, reservation: Reservation) -> set[str]:
        """Count ``uid`` against each of ``reservation.nodes``; returns the nodes whose totals changed."""
        touched = self.release(uid)
        self._by_uid[uid] = reservation
        for node in reservation.nodes:
            self._bytes[node] += reservation.hugepage_bytes
            self._cpu[node] += reservation.cpu_millis
        self._next_expiry = min(self._next_expiry, reservation.expires_at)
        touched.update(reservation.nodes)
        return touched

    def release(self, uid: str) -> set[str]:
        reservation = self._by_uid.pop(uid, None)
        if reservation is None:
            return set()
        for node in reservation.nodes:
            self._bytes[node] -= reservation.hugepage_bytes
            self._cpu[node] -= reservation.cpu_millis
            if not self._bytes[node] and not self._cpu[node]:
                del self._bytes[node], self._cpu[node]
        return set(reservation.nodes)

    def expire(self, now: float) -> set[str]:
        """Drop reservations past their deadline (the pod never showed up bound)."""
        if now < self._next_expiry:
            return set()
        touched: set[str] = set()
        for uid in [uid for uid, r in self._by_uid.items() if r.expires_at <= now]:
            touched |= self.release(uid)
        self._next_expiry = min((r.expires_at for r in self._by_uid.values()), default=float("inf"))
        return touched


def nodes_of(node_or_nodes: str | Sequence[str]) -> tuple[str, ...]:
    return (node_or_nodes,) if isinstance(node_or_nodes, str) else tuple(dict.fromkeys(node_or_nodes))
