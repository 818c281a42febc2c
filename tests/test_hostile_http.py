"""Hostile and broken requests over HTTP: every failure of a request's content is a short 4xx,
never a 500, a traceback or an echo of the input (issue 11; docs/reliability.md)."""

from __future__ import annotations

import asyncio
import gzip
import io
import logging
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import msgspec
import pytest
from aiohttp import web

from extender.core.binding import BindingArgs
from extender.core.config import DEFAULT_RESOURCE
from extender.shell.handlers import Extender
from extender.shell.limits import app_runner
from extender.shell.server import create_app
from extender.state.cluster import ClusterState
from tests.conftest import make_extender, make_node, make_pod, make_state, pod_json

CONFIG = {"defaults": {"mode": "enforce", "sampleSize": 3}}
NODES = [make_node("roomy", hugepages="4Gi"), make_node("small", hugepages="512Mi")]


class RecordingBinder:
    """Binds nothing; records what it was asked to bind."""

    def __init__(self) -> None:
        self.bound: list[BindingArgs] = []

    async def bind(self, args: BindingArgs) -> None:
        self.bound.append(args)


@pytest.fixture
def state() -> ClusterState:
    return make_state(CONFIG, NODES)


@pytest.fixture
def binder() -> RecordingBinder:
    return RecordingBinder()


@pytest.fixture
def extender(state: ClusterState, binder: RecordingBinder) -> Extender:
    return make_extender(state, binder=binder)


@pytest.fixture
async def client(extender: Extender) -> AsyncIterator[Served]:
    """A client of the app served as ``serve`` serves it (its runner's limits and timeouts)."""
    runner = app_runner(create_app(extender), keepalive_timeout=2.0)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    async with aiohttp.ClientSession(f"http://127.0.0.1:{runner.addresses[0][1]}") as session:
        yield Served(session, runner.addresses[0][1])
    await runner.cleanup()


class Served:
    """A client session to a served app; ``post``/``get`` take paths."""

    def __init__(self, session: aiohttp.ClientSession, port: int) -> None:
        self.session = session
        self.port = port

    def post(self, path: str, **kwargs: Any) -> Any:
        return self.session.post(path, **kwargs)

    def get(self, path: str) -> Any:
        return self.session.get(path)


def pod_args(name: str = "web-0", namespace: str = "default", **requests: Any) -> dict[str, Any]:
    pod = pod_json(make_pod(name, namespace, hugepages=requests.pop("hugepages", "1Gi"), cpu=requests.pop("cpu", "1")))
    return {"Pod": pod, "NodeNames": ["roomy", "small"]}


async def post(client: Served, verb: str, body: Any, headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    data = io.BytesIO(body if isinstance(body, bytes) else msgspec.json.encode(body))
    response = await client.post(f"/{verb}", data=data, headers={"Content-Type": "application/json", **(headers or {})})
    return response.status, await response.read()


def no_errors_logged(caplog: pytest.LogCaptureFixture) -> None:
    bad = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert not bad, [r.getMessage()[:200] for r in bad]


@pytest.mark.parametrize("value", ["1e999999", "NaN", "sNaN", "Infinity", "inf", "1e1000000", "1e400", "-1"])
@pytest.mark.parametrize("resource", ["hugepages-2Mi", "cpu"])
async def test_odd_quantities_are_a_fast_400_on_every_verb(
    client: Served, caplog: pytest.LogCaptureFixture, value: str, resource: str
) -> None:
    body = pod_args()
    body["Pod"]["spec"]["containers"][0]["resources"]["requests"][resource] = value
    for verb in ("filter", "prioritize"):
        status, answer = await post(client, verb, body)
        assert status == 400, answer
        assert b"invalid quantity" in answer or b"more than any node" in answer
    no_errors_logged(caplog)


async def test_a_huge_invalid_quantity_is_not_echoed(client: Served, caplog: pytest.LogCaptureFixture) -> None:
    body = pod_args()
    body["Pod"]["spec"]["containers"][0]["resources"]["requests"]["hugepages-2Mi"] = "9" * (1 << 20) + "x"
    status, answer = await post(client, "filter", body)
    assert status == 400
    assert len(answer) < 300
    assert all(len(r.getMessage()) < 500 for r in caplog.records)


@pytest.mark.parametrize("depth", [1_000, 100_000])
async def test_deep_nesting_is_a_400(client: Served, caplog: pytest.LogCaptureFixture, depth: int) -> None:
    nested = b"[" * depth + b"]" * depth
    bodies = {
        "filter": b'{"Pod": {"spec": {"x": ' + nested + b'}}, "NodeNames": ["roomy"]}',
        "prioritize": b'{"NodeNames": ["roomy"], "Pod": ' + nested + b"}",
        "bind": b'{"PodName": ' + nested + b"}",
    }
    for verb, body in bodies.items():
        status, answer = await post(client, verb, body)
        assert status == 400, (verb, answer[:200])
    no_errors_logged(caplog)


async def test_a_body_unlike_its_content_encoding_is_a_400(client: Served, caplog: pytest.LogCaptureFixture) -> None:
    plain = msgspec.json.encode(pod_args())
    status, answer = await post(client, "filter", plain, {"Content-Encoding": "gzip"})
    assert status == 400
    assert b"Content-Encoding" in answer
    status, _ = await post(client, "filter", gzip.compress(plain), {"Content-Encoding": "gzip"})
    assert status == 200  # an honest gzip body is fine
    no_errors_logged(caplog)


async def test_a_client_leaving_mid_body_is_one_info_line(client: Served, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    _reader, writer = await asyncio.open_connection("127.0.0.1", client.port)
    writer.write(b'POST /filter HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{"Pod":')
    await writer.drain()
    await asyncio.sleep(0.1)
    writer.close()
    await asyncio.sleep(0.3)
    no_errors_logged(caplog)
    assert any("left before its body arrived" in r.getMessage() for r in caplog.records)
    metrics = await (await client.get("/metrics")).text()
    assert 'hugepage_extender_requests_total{code="499",verb="filter"} 1.0' in metrics
    assert 'code="500"' not in metrics


async def test_a_body_that_never_finishes_times_out(
    client: Served, extender: Extender, caplog: pytest.LogCaptureFixture
) -> None:
    extender.body_timeout_seconds = 0.3
    reader, writer = await asyncio.open_connection("127.0.0.1", client.port)
    writer.write(b"POST /filter HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{")
    await writer.drain()
    answer = await asyncio.wait_for(reader.read(100), 5)
    assert answer.startswith(b"HTTP/1.1 408")
    writer.close()
    no_errors_logged(caplog)


async def test_request_values_in_log_lines_are_quoted(client: Served, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    forged = "web\n2026-11-30 00:00:00 ERROR extender: forged"
    status, _ = await post(client, "filter", pod_args(forged, hugepages="64Gi"))  # no node fits: logged
    assert status == 200
    lines = [r.getMessage() for r in caplog.records if "no node fits" in r.getMessage()]
    assert lines
    assert all("\n" not in line for line in lines)
    assert "'web\\n2026" in lines[0]


async def test_readiness_and_filter_follow_watch_health(client: Served, state: ClusterState) -> None:
    assert (await client.get("/readyz")).status == 200
    state.staleness = lambda: "watch of pods made no progress for 200 s (API server unreachable?)"
    response = await client.get("/readyz")
    assert response.status == 503
    assert "no progress" in await response.text()
    status, answer = await post(client, "filter", pod_args())
    assert status == 200
    result = msgspec.json.decode(answer)
    assert "no progress" in result["Error"]
    assert not result["NodeNames"]
    metrics = await (await client.get("/metrics")).text()
    assert "hugepage_extender_ready 0.0" in metrics
    state.staleness = lambda: None
    assert (await client.get("/readyz")).status == 200


async def test_draining_fails_readiness_first(client: Served, extender: Extender) -> None:
    extender.draining = True
    assert (await client.get("/readyz")).status == 503
    assert (await post(client, "filter", pod_args()))[0] == 200  # still answering meanwhile


@pytest.mark.parametrize(
    ("binding", "bound"),
    [
        ({"PodName": "web-0", "PodNamespace": "default", "PodUID": "uid-default-web-0", "Node": "roomy"}, True),
        ({"PodName": "web-0", "PodNamespace": "default", "PodUID": "", "Node": "roomy"}, False),
        ({"PodName": "web-0", "PodNamespace": "kube-system", "PodUID": "uid-default-web-0", "Node": "roomy"}, False),
        ({"PodName": "web-0", "PodNamespace": "default", "PodUID": "uid-default-web-0", "Node": "small"}, False),
        ({"PodName": "other", "PodNamespace": "default", "PodUID": "uid-default-other", "Node": "roomy"}, False),
    ],
)
async def test_bind_binds_only_what_filter_admitted(
    client: Served, binder: RecordingBinder, binding: dict[str, str], bound: bool
) -> None:
    status, answer = await post(client, "filter", pod_args())
    assert msgspec.json.decode(answer)["NodeNames"] == ["roomy"]  # small's pool is too small
    status, answer = await post(client, "bind", binding)
    error = msgspec.json.decode(answer)["Error"]
    assert (status, not error) == ((200, True) if bound else (status, False))
    assert len(binder.bound) == int(bound)
    if bound:
        assert binder.bound[0].pod_uid == "uid-default-web-0"


async def test_keepalive_closes_connections_that_never_finish_a_request(extender: Extender) -> None:
    # The runner serve uses, with a short timeout: silent connections, and connections that
    # send half a header line and stop (slowloris), are closed; they cannot pile up.
    runner = app_runner(create_app(extender), keepalive_timeout=0.3)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        for first_bytes in (b"", b"POST /filter HTTP/1.1\r\nHost: x\r\nContent-Le"):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(first_bytes)
            await writer.drain()
            assert await asyncio.wait_for(reader.read(), 5) == b""  # closed by the server
            writer.close()
    finally:
        await runner.cleanup()


@pytest.mark.parametrize(("field", "length"), [("uid", 129), ("name", 254), ("namespace", 64)])
async def test_identities_longer_than_kubernetes_allows_are_a_400(client: Served, field: str, length: int) -> None:
    # What the extender remembers per pod (UID, namespace/name) stays as small as Kubernetes' own.
    body = pod_args()
    body["Pod"]["metadata"][field] = "x" * length
    for verb in ("filter", "prioritize"):
        status, answer = await post(client, verb, body)
        assert status == 400
        assert b"longer than" in answer
    binding = {"PodName": "p", "PodNamespace": "d", "PodUID": "u", "Node": "n"}
    binding[{"uid": "PodUID", "name": "PodName", "namespace": "PodNamespace"}[field]] = "x" * length
    assert (await post(client, "bind", binding))[0] == 400


async def test_a_made_up_demand_for_a_pod_the_watch_shows_neither_holds_nor_binds(
    client: Served, state: ClusterState, binder: RecordingBinder
) -> None:
    """Issue 22, finding 7: a caller naming a real Pending pod of another tenant with a made-up
    demand held pools with it and bound it anywhere. The watch's copy of the pod decides."""
    state.apply_pod(make_pod("db", "tenant", hugepages="1Gi", cpu="1"))  # the watch shows it waiting
    # No hugepages at all: every node would do, the small pool too.
    status, answer = await post(client, "filter", pod_args("db", "tenant", hugepages="0"))
    assert status == 200
    assert msgspec.json.decode(answer)["NodeNames"] == ["roomy"]  # its real 1Gi fits only there
    binding = {"PodName": "db", "PodNamespace": "tenant", "PodUID": "uid-tenant-db", "Node": "small"}
    status, answer = await post(client, "bind", binding)
    assert msgspec.json.decode(answer)["Error"]
    assert not binder.bound
    # A need of 3.5Gi holds 1Gi, its real need: another 1Gi pod still fits the 4Gi pool beside it.
    status, answer = await post(client, "filter", pod_args("db", "tenant", hugepages="3584Mi"))
    assert msgspec.json.decode(answer)["NodeNames"] == ["roomy"]
    assert {uid: hold.hugepage_bytes for uid, hold in state.books[DEFAULT_RESOURCE].holds().items()} == {
        "uid-tenant-db": 1 << 30
    }
    state.apply_pod(make_pod("web", "other", hugepages="2Gi", cpu="1"))
    status, answer = await post(client, "filter", pod_args("web", "other", hugepages="2Gi"))
    assert msgspec.json.decode(answer)["NodeNames"] == ["roomy"]


async def test_pipelined_requests_are_all_answered(client: Served) -> None:
    """At most two requests are parsed ahead of the one being handled (each keeps its header
    block); reading pauses and resumes as they are answered, so none is lost."""
    reader, writer = await asyncio.open_connection("127.0.0.1", client.port)
    writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n" * 20)
    await writer.drain()
    answers = b""
    while answers.count(b"HTTP/1.1 200") < 20:
        answers += await asyncio.wait_for(reader.read(65536), 5)
    writer.close()
