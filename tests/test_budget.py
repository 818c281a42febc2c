"""The memory budget's choices, without I/O: which connection gives way at the cap, which
holdings are cut past the bytes' cap, and repeated log lines counted in one."""

from __future__ import annotations

import logging

from extender.core.budget import ANSWER, BODY, IN_HAND, KEPT, BufferLedger, ConnectionView, Room, eviction_order
from extender.shell.logs import RepeatLimiter


def test_the_idlest_connection_that_did_the_least_gives_way_first() -> None:
    connections = {
        "scheduler": ConnectionView(busy=False, requests=500, last_request_at=99.0),
        "slow-header": ConnectionView(busy=False, requests=0, last_request_at=50.0),
        "fresh-slow-header": ConnectionView(busy=False, requests=0, last_request_at=98.0),
        "flood-one-request": ConnectionView(busy=False, requests=1, last_request_at=99.5),
        "stalled-body": ConnectionView(busy=True, requests=1, last_request_at=10.0),
        "old-idle-scrape": ConnectionView(busy=False, requests=40, last_request_at=20.0),
    }
    assert eviction_order(connections.items()) == [
        "slow-header",
        "fresh-slow-header",
        "flood-one-request",
        "old-idle-scrape",
        "scheduler",
        "stalled-body",
    ]


def test_the_address_with_the_most_connections_gives_way_first() -> None:
    """Issue 29: a flood of fresh connections from one pod made the kubelet's fresh probe connection
    the idlest, and it was cut (30% of probes). The flood's address holds the most: it goes first."""
    connections = {
        "kubelet-probe": ConnectionView(busy=False, requests=0, last_request_at=1.0, peer="10.0.0.1"),
        "flood-1": ConnectionView(busy=False, requests=0, last_request_at=2.0, peer="10.1.2.3"),
        "flood-2": ConnectionView(busy=True, requests=1, last_request_at=3.0, peer="10.1.2.3"),
        "flood-3": ConnectionView(busy=False, requests=0, last_request_at=4.0, peer="10.1.2.3"),
    }
    assert eviction_order(connections.items()) == ["flood-1", "flood-3", "flood-2", "kubelet-probe"]


def test_past_the_cap_the_stalest_holdings_are_cut_until_under_it() -> None:
    cut: list[str] = []
    ledger = BufferLedger(limit=100)
    stalled = ledger.open("body", lambda _: cut.append("stalled"), now=0.0)
    ledger.grow(stalled, 60, now=1.0)
    unread = ledger.open("answer", lambda _: cut.append("unread"), now=2.0)
    ledger.grow(unread, 30, now=2.0)
    streaming = ledger.open("body", lambda _: cut.append("streaming"), now=3.0)
    ledger.grow(streaming, 5, now=3.0)
    ledger.grow(streaming, 20, now=4.0)  # 115 > 100: the one stalled longest goes
    assert cut == ["stalled"]
    assert ledger.total == 55
    ledger.grow(stalled, 1_000, now=5.0)  # a cut holding counts no more
    assert ledger.total == 55
    ledger.close(streaming)
    assert ledger.total == 30
    assert ledger.released == 85
    assert [h.kind for h in ledger.overdue("answer", older_than=5.0, now=8.0)] == ["answer"]
    assert ledger.overdue("answer", older_than=5.0, now=6.0) == []


def test_a_holding_larger_than_the_cap_cuts_itself() -> None:
    cut: list[str] = []
    ledger = BufferLedger(limit=10)
    alone = ledger.open("body", lambda _: cut.append("alone"), now=0.0)
    ledger.grow(alone, 11, now=0.0)
    assert cut == ["alone"]
    assert ledger.total == 0


def test_room_asked_before_bytes_are_made_waits_for_cut_bytes_to_be_let_go_of() -> None:
    """Issue 29: a gzip'ed body inflated while an answer cut for it was still held stacked both.
    Room asked for before the bytes are made: the kept lists go first, then the stalest; bytes cut
    count as dying until their owner lets go of them, and room waits for them."""
    cut: list[str] = []
    ledger = BufferLedger(limit=100)

    def drop_kept(reason: str) -> None:
        cut.append("kept")
        ledger.close(kept)  # dropped at once: nothing to unwind

    kept = ledger.open(KEPT, drop_kept, now=0.0)
    ledger.grow(kept, 20, now=0.0)
    unread = ledger.open(ANSWER, lambda _: cut.append("unread"), now=1.0)
    ledger.grow(unread, 40, now=1.0)
    inflating = ledger.open(IN_HAND, lambda _: cut.append("inflating"), now=2.0)
    assert ledger.claim(inflating, 30, now=2.0) is Room.GRANTED  # 90 of 100: nothing cut
    assert ledger.claim(inflating, 20, now=3.0) is Room.GRANTED  # the kept lists go, let go of at once
    assert cut == ["kept"]
    assert (ledger.total, ledger.dying) == (90, 0)
    assert ledger.claim(inflating, 30, now=4.0) is Room.WAIT  # the answer is cut, its bytes still held
    assert cut == ["kept", "unread"]
    assert (ledger.total, ledger.dying) == (50, 40)
    ledger.close(unread)  # its owner unwound
    assert ledger.dying == 0
    assert ledger.claim(inflating, 30, now=5.0) is Room.GRANTED
    ledger.let_go(inflating, 30)  # a copy freed
    assert ledger.total == 50


def test_a_request_being_decided_is_never_cut_and_room_beside_it_is_refused() -> None:
    cut: list[str] = []
    ledger = BufferLedger(limit=100)
    deciding = ledger.open(BODY, lambda _: cut.append("deciding"), now=0.0)
    ledger.grow(deciding, 70, now=0.0)
    ledger.in_hand(deciding)
    arriving = ledger.open(BODY, lambda _: cut.append("arriving"), now=1.0)
    ledger.grow(arriving, 20, now=1.0)
    assert ledger.claim(arriving, 20, now=2.0) is Room.REFUSED  # 110: the request in hand cannot give way
    ledger.grow(arriving, 20, now=2.0)  # bytes that arrived anyway: the arriving body is cut, not the other
    assert cut == ["arriving"]
    assert ledger.claim(deciding, 31, now=3.0) is Room.REFUSED  # more than the cap beside nothing cut
    assert ledger.claim(deciding, 30, now=3.0) is Room.WAIT  # the cut body is still being let go of
    assert ledger.total == 70


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Collected(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def test_a_repeated_message_is_a_few_lines_and_one_with_the_count() -> None:
    clock = Clock()
    target = Collected()
    limiter = RepeatLimiter(target, passed=3, window_seconds=10.0, clock=clock)
    log = logging.getLogger("test.repeats")
    log.propagate = False
    log.addHandler(limiter)
    try:
        for i in range(100_000):
            log.error("socket.accept() out of system resource (%d)", i)
        log.warning("another message")
        assert target.lines == [
            "socket.accept() out of system resource (0)",
            "socket.accept() out of system resource (1)",
            "socket.accept() out of system resource (2)",
            "another message",
        ]
        clock.now = 10.5
        log.error("socket.accept() out of system resource (%d)", -1)
        assert target.lines[4] == (
            "99997 more like this in the last 10 s, the last: socket.accept() out of system resource (99999)"
        )
        assert target.lines[5:] == ["socket.accept() out of system resource (-1)"]
        log.error("socket.accept() out of system resource (%d)", -2)
        log.error("socket.accept() out of system resource (%d)", -3)
        log.error("socket.accept() out of system resource (%d)", -4)  # the window's fourth: counted
        limiter.close()  # what is counted is said at the end, too
        assert target.lines[-1].startswith("1 more like this")
    finally:
        log.removeHandler(limiter)
