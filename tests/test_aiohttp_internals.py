"""``extender.shell.aiohttp_internals`` against the installed aiohttp: each private attribute it reads exists
and means what it assumes, on a real server and real connections over loopback. pyproject.toml allows
only the aiohttp minor versions this test ran against: a new one is admitted by running it here."""

from __future__ import annotations

import asyncio
import re
import tomllib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.web_protocol import RequestHandler
from packaging.specifiers import SpecifierSet

from extender.shell.aiohttp_internals import (
    ServerWrappingRunner,
    client_max_size,
    forget_refused_head_traceback,
    handler_arguments,
    pause_reading,
    queued_requests,
    request_in_progress,
    requests_parsed,
)

ROOT = Path(__file__).resolve().parents[1]
MAX_FIELD_SIZE = 100
WAIT_SECONDS = 5.0


class _Handler(RequestHandler):
    """aiohttp's connection, keeping what the adapter said of it as each read was parsed."""

    def __init__(self, manager: web.Server, **kwargs: Any) -> None:
        super().__init__(manager, **kwargs)
        self.refused: list[BaseException] = []
        self.traceback_kept: list[bool] = []

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        last = self._messages[-1][0] if self._messages else None  # the test may look: it checks the adapter
        error = getattr(last, "exc", None)
        if isinstance(error, BaseException):
            self.refused.append(error)
            forget_refused_head_traceback(self)
            self.traceback_kept.append(error.__traceback__ is not None)


class _Server(web.Server):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.made: list[_Handler] = []

    def __call__(self) -> RequestHandler:
        loop, kwargs = handler_arguments(self)
        handler = _Handler(self, loop=loop, **kwargs)
        self.made.append(handler)
        return handler


class _Runner(ServerWrappingRunner):
    def wrap_server(self, plain: web.Server, handler_kwargs: dict[str, Any]) -> web.Server:
        self.handler_kwargs = handler_kwargs
        return _Server(
            plain.request_handler,
            request_factory=plain.request_factory,
            handler_cancellation=plain.handler_cancellation,
            **handler_kwargs,
        )


class Served:
    def __init__(self, runner: _Runner, port: int, release: asyncio.Event, entered: asyncio.Event) -> None:
        self.runner, self.port, self.release, self.entered = runner, port, release, entered

    @property
    def server(self) -> _Server:
        assert isinstance(self.runner.server, _Server)
        return self.runner.server

    async def connection(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, _Handler]:
        reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
        async with asyncio.timeout(WAIT_SECONDS):
            while not self.server.made:
                await asyncio.sleep(0.01)
        return reader, writer, self.server.made[-1]


@pytest.fixture
async def served() -> AsyncIterator[Served]:
    release, entered = asyncio.Event(), asyncio.Event()

    async def slow(request: web.Request) -> web.Response:
        entered.set()
        await release.wait()
        return web.Response(text="slow")

    async def fast(request: web.Request) -> web.Response:
        return web.Response(text="fast")

    app = web.Application(client_max_size=12345)
    app.router.add_get("/slow", slow)
    app.router.add_get("/fast", fast)
    runner = _Runner(app, access_log=None, max_field_size=MAX_FIELD_SIZE, keepalive_timeout=7.0)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield Served(runner, port, release, entered)
    finally:
        release.set()
        await runner.cleanup()


def test_the_installed_aiohttp_is_one_pyproject_allows() -> None:
    """The pin and the aiohttp this test runs against agree (requirements/constraints.txt installs it)."""
    dependencies = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    (pin,) = [d for d in dependencies if re.match(r"aiohttp\s*[<>=]", d)]
    assert aiohttp.__version__ in SpecifierSet(pin.removeprefix("aiohttp"))
    constraints = (ROOT / "requirements" / "constraints.txt").read_text()
    assert f"aiohttp=={aiohttp.__version__}" in constraints.splitlines()


async def test_the_runner_hook_gives_its_server_aiohttp_own_arguments(served: Served) -> None:
    assert isinstance(served.runner.server, _Server)  # setup() made the server through the hook
    loop, kwargs = handler_arguments(served.server)
    assert loop is asyncio.get_running_loop()
    assert kwargs == served.runner.handler_kwargs
    assert kwargs["max_field_size"] == MAX_FIELD_SIZE
    assert kwargs["keepalive_timeout"] == 7.0
    async with aiohttp.ClientSession() as session, session.get(f"http://127.0.0.1:{served.port}/fast") as response:
        assert (response.status, await response.text()) == (200, "fast")


def test_client_max_size_is_the_apps_body_limit() -> None:
    assert client_max_size(web.Application(client_max_size=12345)) == 12345
    assert client_max_size(web.Application()) == 1024**2  # aiohttp's default


async def test_a_connection_counts_its_requests_and_knows_one_under_way(served: Served) -> None:
    reader, writer, connection = await served.connection()
    assert (requests_parsed(connection), request_in_progress(connection), queued_requests(connection)) == (0, False, 0)
    writer.write(b"GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")
    async with asyncio.timeout(WAIT_SECONDS):
        await served.entered.wait()
    assert requests_parsed(connection) == 1
    assert request_in_progress(connection)
    assert queued_requests(connection) == 0  # taken by its handler
    served.release.set()
    async with asyncio.timeout(WAIT_SECONDS):
        assert (await reader.readline()).startswith(b"HTTP/1.1 200")
        while request_in_progress(connection):
            await asyncio.sleep(0.01)
    writer.close()


async def test_pipelined_requests_queue_and_reading_pauses_until_they_drain(served: Served) -> None:
    reader, writer, connection = await served.connection()
    writer.write(b"GET /slow HTTP/1.1\r\nHost: x\r\n\r\n" + b"GET /fast HTTP/1.1\r\nHost: x\r\n\r\n" * 2)
    async with asyncio.timeout(WAIT_SECONDS):
        await served.entered.wait()
        while requests_parsed(connection) < 3:
            await asyncio.sleep(0.01)
    assert queued_requests(connection) == 2  # the two behind the one being handled
    assert connection.transport is not None
    assert connection.transport.is_reading()
    pause_reading(connection)
    pause_reading(connection)  # a second call while paused is no second pause
    assert not connection.transport.is_reading()
    served.release.set()
    async with asyncio.timeout(WAIT_SECONDS):
        answers = (await reader.readuntil(b"fast")) + (await reader.readuntil(b"fast"))
        while not connection.transport.is_reading():  # aiohttp resumed it as its queue drained
            await asyncio.sleep(0.01)
    assert answers.count(b"HTTP/1.1 200") == 3
    assert queued_requests(connection) == 0
    writer.close()


async def test_a_refused_head_is_queued_as_its_error_and_lets_go_of_its_traceback(served: Served) -> None:
    reader, writer, connection = await served.connection()
    writer.write(b"GET /fast HTTP/1.1\r\nHost: x\r\nX-Long: " + b"a" * (2 * MAX_FIELD_SIZE) + b"\r\n\r\n")
    async with asyncio.timeout(WAIT_SECONDS):
        assert b" 400 " in await reader.readline()
    assert requests_parsed(connection) == 1  # a refused head counts
    assert len(connection.refused) == 1
    assert isinstance(connection.refused[0], HttpProcessingError)
    assert connection.traceback_kept == [False]
    assert connection.refused[0].__traceback__ is None
    writer.close()
