"""Placements in flight: pods whose node is chosen but not yet seen bound.

One entry per pod UID, so asking again for the same pod moves or refreshes
its entry instead of counting it twice. Time is passed in, never read here.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Reservation:
    node: str
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

    def reservations(self) -> dict[str, Reservation]:
        return dict(self._by_uid)

    def hold(self, uid: str, reservation: Reservation) -> set[str]:
        """Count ``uid`` against ``reservation.node``; returns the nodes whose totals changed."""
        touched = self.release(uid)
        self._by_uid[uid] = reservation
        self._bytes[reservation.node] += reservation.hugepage_bytes
        self._cpu[reservation.node] += reservation.cpu_millis
        self._next_expiry = min(self._next_expiry, reservation.expires_at)
        touched.add(reservation.node)
        return touched

    def release(self, uid: str) -> set[str]:
        reservation = self._by_uid.pop(uid, None)
        if reservation is None:
            return set()
        node = reservation.node
        self._bytes[node] -= reservation.hugepage_bytes
        self._cpu[node] -= reservation.cpu_millis
        if not self._bytes[node] and not self._cpu[node]:
            del self._bytes[node], self._cpu[node]
        return {node}

    def expire(self, now: float) -> set[str]:
        """Drop reservations past their deadline (the pod never showed up bound)."""
        if now < self._next_expiry:
            return set()
        touched: set[str] = set()
        for uid in [uid for uid, r in self._by_uid.items() if r.expires_at <= now]:
            touched |= self.release(uid)
        self._next_expiry = min((r.expires_at for r in self._by_uid.values()), default=float("inf"))
        return touched
