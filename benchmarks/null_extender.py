"""A null extender: the same aiohttp stack as ours, answering its input unchanged.

It is the floor the extender's figures are read against, in the HTTP
benchmark and behind a real kube-scheduler: whatever it costs is the cost of
being an extender at all (HTTP, the body, the scheduler's marshalling), not
of deciding anything.

- ``POST /filter``: every candidate passes. The answer echoes the request's
  ``NodeNames`` or ``Nodes`` bytes as they came (no node is decoded).
- ``POST /prioritize``: every candidate scores 0 (node names are decoded,
  skipping every other field, since the answer names each node).
- ``POST /floor/rejected/insufficient``, ``/floor/rejected/exceeds-pool``: the
  floor of an answer that names every candidate (no node passes): the names
  decoded, and every one written into ``FailedAndUnresolvableNodes`` with the
  extender's own reason for that cause (a dict encoded by msgspec), so the
  answer is as large as the extender's.
- ``POST /floor/filter``, ``/floor/prioritize``: the field-skipping decode
  floor. Each decodes the pod and every node's name in one pass that skips
  every other field (the least any extender that looks at each node must
  do). The filter floor then writes back as many bytes as it read (what
  echoing every node costs when all pass: not a valid answer, a floor to
  measure, never to put behind a scheduler); the prioritize floor answers
  every name with score 0.

Run: ``python -m benchmarks.null_extender --port 8899``.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence

import msgspec
from aiohttp import web

from extender.core.answer import Reasons
from extender.core.objects import NodeName, Pod

JSON = "application/json"
MAX_BODY = 1 << 30  # a 15,000-node full-Nodes request is ~30 MB


class _NodeNames(msgspec.Struct):
    items: list[NodeName] | None = None


class _FieldSkipping(msgspec.Struct, forbid_unknown_fields=False):
    """ExtenderArgs with only what a decision needs: the pod and each node's name."""

    Pod: Pod
    Nodes: _NodeNames | None = None
    NodeNames: list[str] | None = None


_top_level = msgspec.json.Decoder(dict[str, msgspec.Raw])
_names = msgspec.json.Decoder(list[str] | None)
_node_names = msgspec.json.Decoder(_NodeNames | None)
_field_skipping = msgspec.json.Decoder(_FieldSkipping)
_encoder = msgspec.json.Encoder()


class HostPriority(msgspec.Struct):
    Host: str
    Score: int


def _fields(body: bytes) -> dict[str, msgspec.Raw]:
    return {key.lower(): value for key, value in _top_level.decode(body).items()}


def _is_null(raw: msgspec.Raw | None) -> bool:
    # Raw values span exactly the JSON value, so a null is 4 bytes (never copy a 10 MB node list).
    return raw is None or (len(raw) == 4 and bytes(raw) == b"null")


def null_filter(body: bytes) -> bytes:
    """ExtenderFilterResult passing every candidate, the candidates' bytes echoed."""
    fields = _fields(body)
    nodes = fields.get("nodes")
    answer: dict[str, object] = {"FailedNodes": {}, "FailedAndUnresolvableNodes": {}, "Error": ""}
    if not _is_null(nodes):
        answer["Nodes"], answer["NodeNames"] = nodes, None
    else:
        answer["Nodes"], answer["NodeNames"] = None, fields.get("nodenames")
    return _encoder.encode(answer)


def candidate_names(body: bytes) -> list[str]:
    fields = _fields(body)
    nodes = fields.get("nodes")
    if nodes is not None and not _is_null(nodes):
        node_list = _node_names.decode(nodes)
        return [n.metadata.name for n in (node_list.items if node_list and node_list.items else [])]
    names = fields.get("nodenames")
    return (_names.decode(names) if names is not None else None) or []


REJECTED = Reasons.for_resource("hugepages-2Mi")  # the benchmarks' resource, the extender's reasons


def rejected_floor(body: bytes, reason: str) -> bytes:
    """ExtenderFilterResult naming every candidate rejected for ``reason``: the least an answer
    that names them all costs (decode the names, encode the map)."""
    return _encoder.encode(
        {
            "FailedNodes": {},
            "FailedAndUnresolvableNodes": dict.fromkeys(candidate_names(body), reason),
            "Error": "",
            "Nodes": None,
            "NodeNames": [],
        }
    )


def null_prioritize(body: bytes) -> bytes:
    """HostPriorityList: every candidate, score 0."""
    return _encoder.encode([HostPriority(name, 0) for name in candidate_names(body)])


def field_skipping_decode(body: bytes) -> tuple[Pod, list[str]]:
    """The least any extender that looks at each node must do: one pass, every other field skipped.

    Assumes the scheduler's capitalised keys (the extender itself accepts any casing).
    """
    args = _field_skipping.decode(body)
    if args.Nodes is not None and args.Nodes.items is not None:
        return args.Pod, [n.metadata.name for n in args.Nodes.items]
    return args.Pod, args.NodeNames or []


def floor_filter(body: bytes) -> bytes:
    field_skipping_decode(body)
    return body


def floor_prioritize(body: bytes) -> bytes:
    _, names = field_skipping_decode(body)
    return _encoder.encode([HostPriority(name, 0) for name in names])


async def _filter(request: web.Request) -> web.Response:
    return web.Response(body=null_filter(await request.read()), content_type=JSON)


async def _prioritize(request: web.Request) -> web.Response:
    return web.Response(body=null_prioritize(await request.read()), content_type=JSON)


async def _insufficient_floor(request: web.Request) -> web.Response:
    return web.Response(body=rejected_floor(await request.read(), REJECTED.insufficient), content_type=JSON)


async def _exceeds_pool_floor(request: web.Request) -> web.Response:
    return web.Response(body=rejected_floor(await request.read(), REJECTED.exceeds_pool), content_type=JSON)


async def _floor_filter(request: web.Request) -> web.Response:
    return web.Response(body=floor_filter(await request.read()), content_type=JSON)


async def _floor_prioritize(request: web.Request) -> web.Response:
    return web.Response(body=floor_prioritize(await request.read()), content_type=JSON)


async def _ok(request: web.Request) -> web.Response:
    return web.Response(text="ok")


def create_app() -> web.Application:
    app = web.Application(client_max_size=MAX_BODY)
    app.router.add_post("/filter", _filter)
    app.router.add_post("/prioritize", _prioritize)
    app.router.add_post("/floor/rejected/insufficient", _insufficient_floor)
    app.router.add_post("/floor/rejected/exceeds-pool", _exceeds_pool_floor)
    app.router.add_post("/floor/filter", _floor_filter)
    app.router.add_post("/floor/prioritize", _floor_prioritize)
    app.router.add_get("/healthz", _ok)
    app.router.add_get("/readyz", _ok)
    return app


async def serve(app: web.Application, host: str, port: int) -> None:
    """Serve until cancelled or killed, with no access log (as ``hugepage-extender serve``)."""
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    try:
        await web.TCPSite(runner, host, port).start()
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.null_extender")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8899)
    args = parser.parse_args(argv)
    asyncio.run(serve(create_app(), args.host, args.port))
    return 0


if __name__ == "__main__":
    sys.exit(main())
