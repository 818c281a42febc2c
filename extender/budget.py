"""The process's memory budget against its clients: which connection gives way when
connections or buffered bytes reach their caps (docs/reliability.md, "Memory under load").

Pure: connections are described by plain values, time is passed in, and the shell
(``extender.connections``) closes whatever this module names.

Two caps. Connections per port: a new one past the cap closes the connection that
matters least: one of the address that holds the most connections (a flood from one pod
gives way before a kubelet's probe from its node or a scheduler), then one with no request
under way before one with, then the one that finished the fewest requests (a slow header
block finished none; a flood of fresh connections one each), then the longest idle. A
scheduler keeps its connections and sends request after request on them, so they are the
last to go. Bytes held for clients across
connections (request bodies being read, answers not yet taken): past the cap, the
holders that made no progress for the longest are cut until the total is under it
again; a request that streams is younger than one that stalls.
"""

from __future__ import annotations

import collections
import itertools
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TypeVar

Conn = TypeVar("Conn")


@dataclass(frozen=True, slots=True)
class ConnectionView:
    """What the cap's choice reads of one open connection."""

    busy: bool  # a request is under way (its body arriving, its handler running, its answer being sent)
    requests: int  # requests it finished parsing
    last_request_at: float  # when it last finished parsing one (when it opened, if never)
    peer: str = ""  # the client's address


# Past this many requests connections rank alike, by idleness: a new scheduler connection is
# not forever behind an attacker's that sent many.
SEASONED_REQUESTS = 8


def eviction_order(connections: Iterable[tuple[Conn, ConnectionView]]) -> list[Conn]:
    """The connections in the order they give way to a new one, first to go first."""

    listed = list(connections)
    per_peer = collections.Counter(view.peer for _, view in listed)

    def rank(view: ConnectionView) -> tuple[int, bool, int, float]:
        return -per_peer[view.peer], view.busy, min(view.requests, SEASONED_REQUESTS), view.last_request_at

    ranked = sorted(listed, key=lambda item: rank(item[1]))
    return [conn for conn, _ in ranked]


@dataclass(eq=False, slots=True)
class Holding:
    """Bytes one request holds for its client: its body so far, or its answer not yet taken."""

    kind: str  # "body" or "answer"
    cut: Callable[[str], None]  # closes the connection (which lets go of the bytes), given why (below)
    since: float
    progress_at: float
    size: int = 0
    order: int = 0


# Why a holding is cut: the cap was passed, or an answer was not taken in time.
OVER_BUDGET = "over_budget"
NOT_TAKEN = "not_taken"


@dataclass
class BufferLedger:
    """Bytes held for clients across every connection, against one cap."""

    limit: int
    total: int = 0
    cuts: int = 0  # holdings cut (for the cap, or overdue)
    released: int = 0  # bytes let go of, ever: the shell gives memory back after a burst
    _holdings: dict[int, Holding] = field(default_factory=dict)
    _order: itertools.count[int] = field(default_factory=itertools.count)

    def open(self, kind: str, cut: Callable[[str], None], now: float) -> Holding:
        holding = Holding(kind, cut, now, now, order=next(self._order))
        self._holdings[holding.order] = holding
        return holding

    def grow(self, holding: Holding, size: int, now: float) -> None:
        """``holding`` now holds ``size`` more bytes; past the cap, the stalest holdings are cut
        (``holding`` itself too when it is the stalest)."""
        if holding.order not in self._holdings:
            return
        holding.size += size
        holding.progress_at = now
        self.total += size
        if self.total > self.limit:
            for stale in sorted(self._holdings.values(), key=lambda h: (h.progress_at, h.order)):
                self.cut(stale, OVER_BUDGET)
                if self.total <= self.limit:
                    break

    def close(self, holding: Holding) -> None:
        """The bytes are let go of (the body was read into a request, the answer was taken)."""
        if self._holdings.pop(holding.order, None) is not None:
            self.total -= holding.size
            self.released += holding.size

    def cut(self, holding: Holding, reason: str) -> None:
        self.close(holding)
        self.cuts += 1
        holding.cut(reason)

    def overdue(self, kind: str, older_than: float, now: float) -> list[Holding]:
        """Holdings of ``kind`` begun more than ``older_than`` seconds ago."""
        return [h for h in self._holdings.values() if h.kind == kind and now - h.since > older_than]

    def __len__(self) -> int:
        return len(self._holdings)
