"""A verb's request body, read (and inflated) within the process's memory budget
(``budget.BufferLedger``; docs/reliability.md, "Memory under load").

What a body holds counts from the time it arrives until its verb has answered: its bytes as they
arrive, then, while its request is decided, the plain bytes an encoded body inflates to, each
piece counted before it is made, and the pieces' joined copy before it is made too. A body
whose bytes the budget cannot make room for now is refused (503) before they are made: a gzip'ed
body of a few hundred KiB on the wire inflates to ``maxRequestBytes``, and six of them arriving
together counted only their wire bytes while each was inflated and decided at full size.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
import zlib
from collections.abc import Callable

from aiohttp import web
from aiohttp.web_protocol import RequestPayloadError

from extender.core.budget import BODY, IN_HAND, BufferLedger, Holding, Room
from extender.core.quantity import quote
from extender.shell.aiohttp_internals import client_max_size
from extender.shell.connections import CUT_REASONS
from extender.shell.wire import WireError

log = logging.getLogger("extender.shell.server")

BODY_TIMEOUT_SECONDS = 10.0  # the scheduler sends a whole request within its httpTimeout (5 s)
# zlib's window bits: a gzip stream (16 + 15) or a zlib one (15); "deflate" in HTTP is zlib.
_ENCODINGS = {"gzip": 16 + 15, "x-gzip": 16 + 15, "deflate": 15}
# An encoded body is inflated this much at a time, each piece counted before it is made: pieces
# of 1 MiB are mapped on their own (``connections.keep_large_buffers_apart``), so none is left
# in the heap once let go of. The input is fed in slices: zlib copies what a call leaves unread.
INFLATE_PIECE_BYTES = 1024 * 1024
INFLATE_INPUT_BYTES = 64 * 1024
# Room not there yet because bytes cut are still being let go of (their owners unwind at the
# next turns of the event loop): asked again every few ms, for at most this long.
ROOM_WAIT_SECONDS = 1.0
ROOM_POLL_SECONDS = 0.005

# The holding of a request's body, once its bytes count: let go of when its verb is done (``done``).
HOLDING = web.RequestKey("body_holding", Holding)


class ClientGone(Exception):
    """The client closed the connection before its request body arrived."""


class NoRoom(Exception):
    """The memory budget cannot make room for what the request's body needs now (answered 503)."""


async def read_body(
    request: web.Request, ledger: BufferLedger, count_cut: Callable[[str], None], timeout: float = BODY_TIMEOUT_SECONDS
) -> bytes:
    """The request body, with every failure to receive it a known error:
    a body its Content-Encoding does not describe is a WireError (400), a body
    that takes longer than ``timeout`` a 408, a client that leaves ClientGone, a body
    the budget cannot hold now NoRoom (503).

    aiohttp's own decompression is off (``limits.app_runner``): it logged a traceback for an
    encoding it lacks and waited for the rest of a truncated stream. Here a body is inflated a
    piece at a time, bounded by ``client_max_size`` like a plain one. Its bytes count against
    ``ledger`` (``count_cut`` counts a body cut for it) until ``done``.
    """
    limit = client_max_size(request.app)
    holding: Holding | None = None
    if request.content.is_eof():
        # All of it has arrived (most requests): aiohttp buffers at most 128 KiB of a body before
        # it stops reading, so it is small, and it is read without a wait: no timer, no budget.
        body = await _receive(request, limit, None, None)
    else:
        holding = _hold(request, ledger, BODY, count_cut)
        try:
            async with asyncio.timeout(timeout):
                body = await _receive(request, limit, ledger, holding)
        except RequestPayloadError:
            raise WireError("the body could not be read") from None
        except TimeoutError:
            raise web.HTTPRequestTimeout(text="request body not received in time") from None
        except ConnectionResetError:
            raise ClientGone from None
        ledger.in_hand(holding)
    encoding = request.headers.get("Content-Encoding", "identity").strip().lower()
    if encoding in ("", "identity"):
        return body
    wbits = _ENCODINGS.get(encoding)
    if wbits is None:
        raise WireError(f"Content-Encoding {quote(encoding)} is not supported (gzip, deflate or none)")
    if holding is None:
        holding = _hold(request, ledger, IN_HAND, count_cut)
    return await _inflate(body, wbits, limit, ledger, holding)


def done(request: web.Request, ledger: BufferLedger) -> None:
    """The request's verb is done with its body: what it held is let go of."""
    holding = request.get(HOLDING)
    if holding is not None:
        ledger.close(holding)


def _hold(request: web.Request, ledger: BufferLedger, kind: str, count_cut: Callable[[str], None]) -> Holding:
    holding = ledger.open(kind, functools.partial(_cut_body, request, count_cut), time.monotonic())
    request[HOLDING] = holding
    return holding


def _cut_body(request: web.Request, count_cut: Callable[[str], None], reason: str) -> None:
    log.warning("a body from %s cut: %s", request.remote, CUT_REASONS[reason])
    count_cut(f"body_{reason}")
    if request.transport is not None:
        request.transport.abort()


async def _receive(request: web.Request, limit: int, ledger: BufferLedger | None, holding: Holding | None) -> bytes:
    """The body, at most ``limit`` bytes, read from the stream: ``request.read()`` would keep it
    on the request, and aiohttp keeps a keep-alive connection's last request (and response)
    until the next request on that connection arrives. Each idle connection kept its last body:
    up to maxRequestBytes each, about 20 MiB each with full Nodes at 5,000 nodes. What has
    arrived counts against the process's budget of bytes held for clients (``ledger``)."""
    chunks: list[bytes] = []
    size = 0
    try:
        while chunk := await request.content.readany():
            size += len(chunk)
            if size > limit:
                raise web.HTTPRequestEntityTooLarge(max_size=limit, actual_size=size)
            chunks.append(chunk)
            if ledger is not None and holding is not None:
                ledger.grow(holding, len(chunk), time.monotonic())
        # Joined without asking for room: a body arriving beside it (the next request of a slow
        # reader, a scheduler's) would be cut for its copy, which lives only while it is decided.
        return b"".join(chunks)
    except BaseException:
        # The stream keeps the error, whose traceback keeps this frame, which keeps the request
        # and so the stream: a cycle, freed only by a full collection. A cut 31 MiB body stayed.
        chunks.clear()
        raise


async def _inflate(body: bytes, wbits: int, limit: int, ledger: BufferLedger, holding: Holding) -> bytes:
    """``body`` inflated, at most ``limit`` bytes: a WireError when it is not one whole stream of
    its encoding (truncated, corrupt, followed by more), a 413 past ``limit``, NoRoom when the
    budget cannot make room for the next piece now."""
    inflater = zlib.decompressobj(wbits)
    wire = memoryview(body)
    fed = 0
    pending: bytes | memoryview = b""
    pieces: list[bytes] = []
    size = 0
    try:
        while not inflater.eof:
            if not pending and fed < len(wire):
                pending, fed = wire[fed : fed + INFLATE_INPUT_BYTES], fed + INFLATE_INPUT_BYTES
            await _room(ledger, holding, INFLATE_PIECE_BYTES)
            try:
                piece = inflater.decompress(pending, INFLATE_PIECE_BYTES)
            except zlib.error:
                raise WireError("the body does not match its Content-Encoding") from None
            ledger.let_go(holding, INFLATE_PIECE_BYTES - len(piece))
            pending = inflater.unconsumed_tail  # only when the piece is full
            if not piece and not pending and fed >= len(wire):
                break  # all of it fed, nothing more comes out, and the stream has not ended
            size += len(piece)
            if size > limit:
                raise web.HTTPRequestEntityTooLarge(max_size=limit, actual_size=size)
            pieces.append(piece)
        if not inflater.eof or inflater.unused_data or fed < len(wire):
            raise WireError("the body does not match its Content-Encoding")
        return await _joined(pieces, size, ledger, holding)
    finally:
        pieces.clear()


async def _joined(pieces: list[bytes], size: int, ledger: BufferLedger, holding: Holding) -> bytes:
    """``pieces`` (``size`` bytes, counted in ``holding``) as one body: the copy counted before it is
    made, the pieces' bytes let go of once it is."""
    await _room(ledger, holding, size)
    joined = b"".join(pieces)
    pieces.clear()
    ledger.let_go(holding, size)
    return joined


async def _room(ledger: BufferLedger, holding: Holding, size: int) -> None:
    """``size`` more bytes counted for ``holding`` before they are made (``BufferLedger.claim``),
    waiting a moment for bytes cut to be let go of; NoRoom when they cannot be."""
    deadline = time.monotonic() + ROOM_WAIT_SECONDS
    while (room := ledger.claim(holding, size, time.monotonic())) is not Room.GRANTED:
        if room is Room.REFUSED or time.monotonic() >= deadline:
            raise NoRoom
        await asyncio.sleep(ROOM_POLL_SECONDS)
