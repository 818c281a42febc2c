"""The one module that reads aiohttp's private attributes: what the connection guard and the body
reader need of aiohttp that it has no public way to give.

Each function names what it reads and what it assumes that means; ``tests/test_aiohttp_internals.py``
checks each against the installed aiohttp on a real server and connection, and pyproject.toml allows
only the aiohttp versions that test runs against. A new aiohttp fails that test before anything else.
"""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp import web
from aiohttp.web_protocol import RequestHandler, _ErrInfo


def requests_parsed(connection: RequestHandler) -> int:
    """How many request heads the connection has parsed (``_request_count``): a refused one counts too."""
    count: int = connection._request_count
    return count


def request_in_progress(connection: RequestHandler) -> bool:
    """Whether a handler is running for one of the connection's requests (``_request_in_progress``)."""
    busy: bool = connection._request_in_progress
    return busy


def queued_requests(connection: RequestHandler) -> int:
    """Requests parsed and not yet handled (``_messages``: a (message, payload) pair each), each keeping
    its header block."""
    return len(connection._messages)


def forget_refused_head_traceback(connection: RequestHandler) -> None:
    """When the newest queued request is a head the parser refused (``_ErrInfo``, kept for aiohttp's
    400), drop its error's traceback: its frames keep the read the parser failed in."""
    last = connection._messages[-1][0] if connection._messages else None
    if isinstance(last, _ErrInfo):
        last.exc.__traceback__ = None


def pause_reading(connection: RequestHandler) -> None:
    """Stop reading from the connection as aiohttp does when its own queue is full
    (``_pause_reading_for_buffer``, unless ``_buffer_paused``): aiohttp resumes it as the queue drains."""
    if not connection._buffer_paused:
        connection._pause_reading_for_buffer()


def handler_arguments(server: web.Server) -> tuple[asyncio.AbstractEventLoop, dict[str, Any]]:
    """The loop and the keyword arguments a ``web.Server`` passes each ``RequestHandler`` it makes
    (``_loop``, ``_kwargs``: the runner's limits, timeouts, access log)."""
    kwargs: dict[str, Any] = server._kwargs
    return server._loop, kwargs


def client_max_size(app: web.Application) -> int:
    """The largest request body the app accepts (``_client_max_size``, set by ``web.Application``)."""
    size: int = app._client_max_size
    return size


class ServerWrappingRunner(web.AppRunner):
    """``web.AppRunner`` whose server is the one ``wrap_server`` makes of aiohttp's own, so that every
    argument aiohttp gives its server (the app's handler, request factory, limits) carries over. The
    hook is the private ``_make_server``, which ``setup`` awaits."""

    async def _make_server(self) -> web.Server:
        plain = await super()._make_server()  # the app's start-up, and aiohttp's own arguments
        return self.wrap_server(plain, handler_arguments(plain)[1])

    def wrap_server(self, plain: web.Server, handler_kwargs: dict[str, Any]) -> web.Server:
        """The server to serve through: ``plain`` itself unless a subclass makes its own of it."""
        return plain
