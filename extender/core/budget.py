"""The process's memory budget against its clients: which connection gives way when
connections or buffered bytes reach their caps (docs/reliability.md, "Memory under load").

Pure: connections are described by plain values, time is passed in, and the shell
(``extender.shell.connections``) closes whatever this module names.

Two caps. Connections per port: a new one past the cap closes the connection that
matters least: one of the address that holds the most connections (a flood from one pod
gives way before a kubelet's probe from its node or a scheduler), then one with no request
under way before one with, then the one that finished the fewest requests (a slow header
block finished none; a flood of fresh connections one each), then the longest idle. A
scheduler keeps its connections and sends request after request on them, so they are the
last to go. Bytes held for clients across
connections (request bodies being read, inflated and decided, answers not yet taken, the
candidate lists kept for the next requests): past the cap, the kept lists go first, then the
holders that made no progress for the longest are cut until the total is under it again; a
request that streams is younger than one that stalls. A request being decided cannot be
cut (closing its connection frees nothing until it is done), and the bytes of a holding cut
are still counted, as dying, until its owner has let go of them: room asked for before
bytes are made (a body inflated, a copy) is given only when what is still held leaves it.
"""

from __future__ import annotations

import collections
import enum
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


# What a holding holds, and whether cutting its connection lets go of it.
BODY = "body"  # a request body arriving
IN_HAND = "in_hand"  # a request's body read (and inflated), the request being decided: not cut
ANSWER = "answer"  # an answer its client has not taken yet
KEPT = "kept"  # the candidate lists kept for the next requests: dropped, first, when room is needed
CUTTABLE = frozenset({BODY, ANSWER, KEPT})


@dataclass(eq=False, slots=True)
class Holding:
    """Bytes one request holds for its client (its body so far, or its answer not yet taken), or
    the process keeps for the next requests."""

    kind: str
    cut: Callable[[str], None]  # closes the connection (which lets go of the bytes), given why (below)
    since: float
    progress_at: float
    size: int = 0
    order: int = 0
    dying: bool = False  # cut, its bytes not yet let go of by its owner


def _cut_order(holding: Holding) -> tuple[bool, float, int]:
    return holding.kind != KEPT, holding.progress_at, holding.order


# Why a holding is cut: the cap was passed, or an answer was not taken in time.
OVER_BUDGET = "over_budget"
NOT_TAKEN = "not_taken"


class Room(enum.Enum):
    """The answer to room asked for before bytes are made."""

    GRANTED = "granted"  # counted: make them
    WAIT = "wait"  # bytes cut are still being let go of: ask again in a moment
    REFUSED = "refused"  # more than the cap holds beside what cannot be cut


@dataclass
class BufferLedger:
    """Bytes held for clients across every connection, against one cap."""

    limit: int
    total: int = 0  # bytes of the holdings not cut
    dying: int = 0  # bytes of holdings cut whose owners have not let go of them yet
    cuts: int = 0  # holdings cut (for the cap, or overdue)
    released: int = 0  # bytes let go of, ever: the shell gives memory back after a burst
    _holdings: dict[int, Holding] = field(default_factory=dict)
    _order: itertools.count[int] = field(default_factory=itertools.count)

    def open(self, kind: str, cut: Callable[[str], None], now: float) -> Holding:
        holding = Holding(kind, cut, now, now, order=next(self._order))
        self._holdings[holding.order] = holding
        return holding

    def grow(self, holding: Holding, size: int, now: float) -> None:
        """``holding`` now holds ``size`` more bytes (or fewer, when negative); past the cap, the
        kept lists and then the stalest holdings are cut (``holding`` itself too when it is the
        stalest)."""
        if holding.order not in self._holdings:
            return
        holding.size += size
        holding.progress_at = now
        self.total += size
        if self.total > self.limit:
            self._cut_stalest(lambda: self.total <= self.limit)

    def claim(self, holding: Holding, size: int, now: float) -> Room:
        """Room for ``size`` more bytes of ``holding`` before they are made: the kept lists and
        then the stalest other holdings are cut until what is held, dying bytes counted, leaves
        it. Granted, the bytes count as ``holding``'s; to wait when only dying bytes are in the
        way; refused when ``holding`` is cut or the holdings that cannot be cut leave no room."""
        if holding.order not in self._holdings:
            return Room.REFUSED

        def fits() -> bool:
            return self.total + self.dying + size <= self.limit

        if not fits():
            self._cut_stalest(fits, keep=holding)
        if fits():
            holding.size += size
            holding.progress_at = now
            self.total += size
            return Room.GRANTED
        return Room.WAIT if self.total + size <= self.limit else Room.REFUSED

    def in_hand(self, holding: Holding) -> None:
        """``holding``'s body has arrived and its request is being decided: it is not cut (its
        connection closed, nothing would be let go of until the request is done)."""
        holding.kind = IN_HAND

    def let_go(self, holding: Holding, size: int) -> None:
        """``size`` of ``holding``'s bytes are let go of (a copy freed, room claimed and not used)."""
        holding.size -= size
        if holding.dying:
            self.dying -= size
        elif holding.order in self._holdings:
            self.total -= size
            self.released += size

    def close(self, holding: Holding) -> None:
        """The bytes are let go of (the body was read into a request, the answer was taken, the
        holding was cut and its owner is done with it)."""
        if holding.dying:
            holding.dying = False
            self.dying -= holding.size
        elif self._holdings.pop(holding.order, None) is not None:
            self.total -= holding.size
            self.released += holding.size

    def cut(self, holding: Holding, reason: str) -> None:
        """Close ``holding``'s connection: its bytes count as dying until its owner closes it."""
        if self._holdings.pop(holding.order, None) is None:
            return
        self.total -= holding.size
        self.released += holding.size
        self.dying += holding.size
        holding.dying = True
        self.cuts += 1
        holding.cut(reason)

    def _cut_stalest(self, fits: Callable[[], bool], keep: Holding | None = None) -> None:
        """Cut the holdings that may be cut, the kept lists first and then the stalest, until ``fits``."""
        cuttable = [h for h in self._holdings.values() if h.kind in CUTTABLE and h is not keep]
        for stale in sorted(cuttable, key=_cut_order):
            if fits():
                return
            self.cut(stale, OVER_BUDGET)

    def overdue(self, kind: str, older_than: float, now: float) -> list[Holding]:
        """Holdings of ``kind`` begun more than ``older_than`` seconds ago."""
        return [h for h in self._holdings.values() if h.kind == kind and now - h.since > older_than]

    def __len__(self) -> int:
        """Holdings for clients (the kept lists are the process's own)."""
        return sum(1 for h in self._holdings.values() if h.kind != KEPT)
