"""Lists and watches against an API server that never lets a watch last back off like client-go's
reflector, whatever ends them, and readiness fails meanwhile (issue 29: 410 Gone to every watch, as
an event or an HTTP status, had the extender list and watch 371-410 times a second at 88% CPU; one
bookmark and a closed stream, 783-890 watches a second; /readyz stayed ok).

The API server is an aiohttp server on loopback answering what kube-apiserver answers on those
paths; the extender's own reflector reads it through the official client."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import msgspec
import pytest
from aiohttp import web
from kubernetes import client

from extender.core.config import build_config
from extender.core.objects import Node
from extender.shell.kube.informer import ClusterInformer
from extender.shell.kube.reflector import Handlers, Reflector, Resource
from extender.state.cluster import ClusterState

NODE = {"metadata": {"name": "n1", "resourceVersion": "6"}}
GONE = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Expired", "code": 410}


@dataclass
class FakeApiServer:
    """Lists nodes; answers every watch as ``mode`` says."""

    mode: str
    lists: list[float] = field(default_factory=list)
    watches: list[float] = field(default_factory=list)
    port: int = 0

    async def nodes(self, request: web.Request) -> web.StreamResponse:
        if request.query.get("watch") not in ("true", "1", "True"):
            self.lists.append(time.monotonic())
            return web.json_response({"kind": "NodeList", "metadata": {"resourceVersion": "5"}, "items": [NODE]})
        self.watches.append(time.monotonic())
        if self.mode == "gone-status":
            return web.json_response({**GONE, "message": "too old resource version"}, status=410)
        line = {
            "gone-event": {"type": "ERROR", "object": GONE},
            "one-bookmark": {"type": "BOOKMARK", "object": {"kind": "Node", "metadata": {"resourceVersion": "9"}}},
            "one-event": {"type": "MODIFIED", "object": NODE},
        }[self.mode]
        response = web.StreamResponse()
        await response.prepare(request)
        await response.write(msgspec.json.encode(line) + b"\n")
        await response.write_eof()  # and the stream ends
        return response


@pytest.fixture
def api_server(request: pytest.FixtureRequest) -> Iterator[FakeApiServer]:
    server = FakeApiServer(request.param)
    loop = asyncio.new_event_loop()
    started = threading.Event()
    runner: list[web.AppRunner] = []

    async def start() -> None:
        app = web.Application()
        app.router.add_get("/api/v1/nodes", server.nodes)
        runner.append(web.AppRunner(app, access_log=None))
        await runner[0].setup()
        site = web.TCPSite(runner[0], "127.0.0.1", 0)
        await site.start()
        server.port = runner[0].addresses[0][1]
        started.set()

    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    asyncio.run_coroutine_threadsafe(start(), loop)
    assert started.wait(10)
    yield server
    asyncio.run_coroutine_threadsafe(runner[0].cleanup(), loop).result(10)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(10)
    loop.close()


@pytest.mark.parametrize("api_server", ["gone-event", "gone-status", "one-bookmark", "one-event"], indirect=True)
def test_lists_and_watches_that_never_last_back_off_and_make_the_extender_unready(api_server: FakeApiServer) -> None:
    configuration = client.Configuration(host=f"http://127.0.0.1:{api_server.port}")
    api = client.ApiClient(configuration)
    stop = threading.Event()
    applied: list[str] = []
    resource: Resource[Node, str] = Resource("nodes", client.CoreV1Api(api).list_node, Node, lambda n: n.metadata.name)
    handlers: Handlers[str] = Handlers(relisted=applied.extend, upserted=applied.append, deleted=applied.append)
    reflector = Reflector(resource, handlers, lambda callback: callback(), stop=stop)
    thread = threading.Thread(target=reflector.run, daemon=True)
    seconds = 8.0
    started = time.monotonic()
    thread.start()
    time.sleep(seconds)

    state = ClusterState(build_config({}, {}))
    informer = ClusterInformer(api, state, stale_after_seconds=3.0)
    informer.reflectors = {"nodes": reflector, "pods": reflector}
    state.ready = True
    reason = state.unready_reason()
    stop.set()
    thread.join(5)
    api.close()  # type: ignore[no-untyped-call]

    requests = len(api_server.lists) + len(api_server.watches)
    assert api_server.watches, "the server was watched"
    assert applied, "what the server sent was applied"
    # 0.8 s, 1.6, 3.2 (each up to +50 %): at most 4 rounds of a list and a watch in 8 s (before: thousands),
    # and against 410 Gone one more: the first 410's list comes at once (Reflector.run).
    gone = api_server.mode.startswith("gone")
    rounds = 5 if gone else 4
    assert len(api_server.watches) <= rounds, api_server.watches
    later = [t for t in api_server.lists + api_server.watches if t - started >= seconds / 2]
    assert len(later) / (seconds / 2) <= 1.0, later  # at most one a second once the backoff has grown
    assert requests <= 2 * rounds
    assert reflector.failures >= 2
    # Unready, saying why: events missed (410 Gone), or else the first list was the last progress.
    assert reason is not None, "ready while no watch lasts"
    assert ("missed events" if gone else "no progress") in reason, reason
    assert reflector.last_failure in reason
