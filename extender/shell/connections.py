"""Connections under a budget: a cap per port, bytes held for clients counted across them,
and memory given back to the system after a burst (docs/reliability.md, "Memory under load").

aiohttp bounds one request (header line and count limits, ``client_max_size``) but not how
many connections are open, nor what they hold together: each open connection may hold a
header block being read, a body being read, an answer its client does not take. The
choices are ``extender.core.budget``'s; this module only counts and closes.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ctypes.util
import functools
import gc
import logging
import os
import resource
import time
from collections.abc import Callable
from typing import Any

from aiohttp import web
from aiohttp.web_protocol import RequestHandler

from extender.core.budget import NOT_TAKEN, OVER_BUDGET, BufferLedger, ConnectionView, eviction_order
from extender.shell.aiohttp_internals import (
    ServerWrappingRunner,
    forget_refused_head_traceback,
    handler_arguments,
    pause_reading,
    queued_requests,
    request_in_progress,
    requests_parsed,
)

log = logging.getLogger("extender.shell.connections")

# Pipelined requests parsed ahead of the one being handled: each keeps its header block
# (aiohttp queues up to 32). No scheduler, kubelet or Prometheus pipelines.
QUEUED_REQUESTS = 2
CUT_REASONS = {
    OVER_BUDGET: "bodies and answers held for clients over maxBufferedBytes",
    NOT_TAKEN: "not taken in time (10 s)",
}
# Answers up to this size are not counted: the transport takes each in one write, and a client
# that reads none of them holds at most this much per connection (the cap bounds connections).
SMALL_ANSWER_BYTES = 64 * 1024


class GuardedHandler(RequestHandler):
    """aiohttp's connection, with what the cap's choice reads of it."""

    __slots__ = ("last_request_at", "ledger", "on_cut", "peer")

    def __init__(
        self, manager: web.Server, *, ledger: BufferLedger, on_cut: Callable[[str], None], **kwargs: Any
    ) -> None:
        super().__init__(manager, **kwargs)
        self.last_request_at = time.monotonic()
        self.ledger = ledger
        self.on_cut = on_cut
        self.peer = ""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        peer = transport.get_extra_info("peername")
        self.peer = str(peer[0]) if isinstance(peer, tuple) else ""
        super().connection_made(transport)  # the server's cap: it reads every connection's peer

    def data_received(self, data: bytes) -> None:
        parsed = requests_parsed(self)
        super().data_received(data)
        if requests_parsed(self) != parsed:
            self.last_request_at = time.monotonic()
            # A refused head (a header line over the limit): aiohttp keeps the parser's error for
            # its 400, and the error's traceback keeps the read it failed in (up to 256 KiB) in
            # a cycle with this connection until a full collection. 400 such connections held
            # about 100 MiB at once.
            forget_refused_head_traceback(self)
            if queued_requests(self) >= QUEUED_REQUESTS:
                pause_reading(self)  # aiohttp resumes it as the queue drains

    def view(self) -> ConnectionView:
        return ConnectionView(request_in_progress(self), requests_parsed(self), self.last_request_at, self.peer)

    def cut(self) -> None:
        """Close at once, dropping what is buffered to send (``close`` would wait to send it)."""
        if self.transport is not None:
            self.transport.abort()

    def _cut_answer(self, size: int, reason: str) -> None:
        log.warning("an answer of %d bytes to %s cut: %s", size, self._peer(), CUT_REASONS[reason])
        self.on_cut(f"answer_{reason}")
        self.cut()

    def _peer(self) -> str:
        peer = self.transport.get_extra_info("peername") if self.transport is not None else None
        return str(peer[0]) if isinstance(peer, tuple) else "a client"

    async def finish_response(
        self, request: web.BaseRequest, resp: web.StreamResponse, start_time: float | None
    ) -> tuple[web.StreamResponse, bool]:
        """The answer counts as held until its client takes it, and is cut when it does not in
        time (``cut_overdue_answers``)."""
        size = resp.content_length or 0
        if size <= SMALL_ANSWER_BYTES:  # one write the transport takes whole (most answers)
            return await super().finish_response(request, resp, start_time)
        holding = self.ledger.open("answer", functools.partial(self._cut_answer, size), time.monotonic())
        try:
            self.ledger.grow(holding, size, time.monotonic())
            return await super().finish_response(request, resp, start_time)
        finally:
            self.ledger.close(holding)


class GuardedServer(web.Server):
    """aiohttp's server with a cap on open connections: past it, a new connection closes the one
    ``budget.eviction_order`` puts first."""

    def __init__(
        self,
        *args: Any,
        port_name: str,
        max_connections: int,
        ledger: BufferLedger,
        on_cut: Callable[[str], None],
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.port_name = port_name
        self.max_connections = max_connections
        self.ledger = ledger
        self.on_cut = on_cut
        self.evictions = 0
        self.closed = 0  # connections closed since the last trim
        # The connections counted against the cap, in the order they opened: those cut or lost leave
        # at once. Not aiohttp's ``_connections``, which keeps a cut one until its loss is handled in
        # a later turn of the loop: a batch of a flood's connections (up to 128 accepted in one turn)
        # made each new one walk hundreds, and one turn took a second.
        self._open: dict[GuardedHandler, None] = {}

    def __call__(self) -> RequestHandler:
        loop, kwargs = handler_arguments(self)
        return GuardedHandler(self, loop=loop, ledger=self.ledger, on_cut=self.on_cut, **kwargs)

    def connection_made(self, handler: RequestHandler, transport: asyncio.Transport) -> None:
        """Past the cap, the connections ``eviction_order`` puts first are closed, never the new
        one: at this point (not when accepted, which comes in batches) it can be ranked with the
        rest, so a batch of a flood's fresh connections goes before a scheduler's."""
        super().connection_made(handler, transport)
        if not isinstance(handler, GuardedHandler):
            return
        if len(self._open) + 1 > self.max_connections:
            for gone in [h for h in self._open if h.transport is None or h.transport.is_closing()]:
                del self._open[gone]
            excess = len(self._open) + 1 - self.max_connections
            if excess > 0:
                for victim in eviction_order([(h, h.view()) for h in self._open])[:excess]:
                    self._evict(victim)
        self._open[handler] = None

    def _evict(self, victim: GuardedHandler) -> None:
        self.evictions += 1
        del self._open[victim]
        log.warning(
            "%s port: %d connections open (the cap): closing one %s",
            self.port_name,
            self.max_connections,
            "with a request under way" if victim.view().busy else "idle or still sending its header",
        )
        self.on_cut("connection_cap")
        victim.cut()

    def connection_lost(self, handler: RequestHandler, exc: BaseException | None = None) -> None:
        super().connection_lost(handler, exc)
        if isinstance(handler, GuardedHandler):
            self._open.pop(handler, None)
        self.closed += 1


class GuardedRunner(ServerWrappingRunner):
    """``web.AppRunner`` serving through a ``GuardedServer``."""

    def __init__(
        self,
        app: web.Application,
        *,
        port_name: str,
        max_connections: int,
        ledger: BufferLedger,
        on_cut: Callable[[str], None],
        **kwargs: Any,
    ) -> None:
        super().__init__(app, **kwargs)
        self._port_name, self._max_connections = port_name, max_connections
        self._ledger, self._on_cut = ledger, on_cut

    def wrap_server(self, plain: web.Server, handler_kwargs: dict[str, Any]) -> web.Server:
        return GuardedServer(
            plain.request_handler,
            request_factory=plain.request_factory,
            handler_cancellation=plain.handler_cancellation,
            port_name=self._port_name,
            max_connections=self._max_connections,
            ledger=self._ledger,
            on_cut=self._on_cut,
            **handler_kwargs,
        )

    @property
    def guarded(self) -> GuardedServer:
        server = self.server
        assert isinstance(server, GuardedServer)
        return server


# Descriptors kept for what is not a client's connection: the watches and other API calls, the
# Events' and the binder's pools, log files, the liveness socket's few connections.
RESERVED_FILES = 24
MIN_CONNECTIONS = 4


def connections_within_open_files(wanted: int, backlog: int, ports: int) -> tuple[int, int]:
    """(connections a port, accepts a turn of the event loop): ``wanted`` (``maxConnections``) and
    ``backlog``, fewer when the open-files limit cannot hold both on every port beside what the process
    has open and ``RESERVED_FILES``. asyncio accepts up to the backlog before the cap can close an idle
    connection, and past the limit ``accept()`` fails: clients that open connections and send nothing
    held every descriptor until the idle timeout (at a limit of 64, 150 such connections kept
    ``/filter`` unanswered for 105 s, and asyncio retried accept() again and again)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return wanted, backlog
    try:
        open_now = len(os.listdir("/proc/self/fd"))
    except OSError:
        open_now = 0
    room = (soft - open_now - RESERVED_FILES) // max(1, ports)
    if room >= wanted + backlog:
        return wanted, backlog
    half = max(MIN_CONNECTIONS, room // 2)
    log.warning(
        "open-files limit %d (%d open): at most %d connections a port (maxConnections %d), %d accepted at once",
        soft,
        open_now,
        min(wanted, half),
        wanted,
        min(backlog, half),
    )
    return min(wanted, half), min(backlog, half)


def raise_open_files_limit() -> None:
    """The soft limit on open files up to the hard one: a container's soft limit is often 1,024,
    well under what two ports' caps and the watches may need."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


# -- memory given back ---------------------------------------------------------------

_M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter


def _glibc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        libc = ctypes.CDLL(name)
        libc.malloc_trim  # noqa: B018 (glibc only: musl has none)
    except (OSError, AttributeError):
        return None
    return libc


_LIBC = _glibc()


def keep_large_buffers_apart() -> None:
    """Blocks of 1 MiB and more (bodies, answers) are mapped on their own and unmapped when freed.
    glibc's default raises this threshold after the first large block is freed, up to 32 MiB, and
    then carves later ones out of the heap, which a burst leaves grown. Not lower: asyncio reads
    into a 256 KiB block on every receive, and mapping each cost a filter 50 us more."""
    if _LIBC is not None:
        _LIBC.mallopt(_M_MMAP_THRESHOLD, 1024 * 1024)


def give_memory_back() -> None:
    """Return the heap's free pages to the system (glibc's ``malloc_trim``)."""
    if _LIBC is not None:
        _LIBC.malloc_trim(0)


# What counts as a burst worth giving memory back after: a probe's connection a few seconds
# is not one.
BURST_CONNECTIONS = 16
BURST_BYTES = 16 * 1024 * 1024


async def trim_after_bursts(servers: list[GuardedServer], ledger: BufferLedger, interval_seconds: float = 5.0) -> None:
    """Every ``interval_seconds``, when many connections closed or many bytes of bodies and answers
    were let go of since the last look, give the freed memory back: first the reference cycles
    a refused request leaves (an error keeps its traceback, whose frames keep the connection and
    its last read, up to 256 KiB), then the heap's free pages (in a thread: the trim walks it)."""
    released = ledger.released
    while True:
        await asyncio.sleep(interval_seconds)
        closed = sum(server.closed for server in servers)
        if closed >= BURST_CONNECTIONS or ledger.released - released >= BURST_BYTES:
            for server in servers:
                server.closed = 0
            released = ledger.released
            gc.collect()
            await asyncio.to_thread(give_memory_back)


async def cut_overdue_answers(ledger: BufferLedger, answer_seconds: float, interval_seconds: float = 1.0) -> None:
    """An answer its client has not taken within ``answer_seconds`` is cut: the scheduler's own
    timeout (``httpTimeout``, 5 s by default) has long given up on it."""
    while True:
        await asyncio.sleep(interval_seconds)
        for holding in ledger.overdue("answer", answer_seconds, time.monotonic()):
            ledger.cut(holding, NOT_TAKEN)
