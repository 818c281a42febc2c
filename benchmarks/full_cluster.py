"""Filter on full clusters over HTTP: shadow, enforce K=3 and enforce K=0 against the null extender.

The situation this product exists for is a cluster whose pools are mostly full. Each row is one
share of full pools (10%, 50%, 90%, 99% and 100%, full by pod requests) at ``nodes`` nodes: our extender
(``benchmarks.extender_server --full-percent``) and the null extender (which decodes the request and
echoes the names) in processes of their own, one keep-alive client sending the same NodeNames
request (every node a candidate, a 1 GiB pod) ``requests`` times per mode, alternating servers so
both see the same machine. ``x null`` is the ratio of the medians measured in the same run.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

import aiohttp
import msgspec

from benchmarks.cluster import node_documents, request_body
from benchmarks.http_decision import HEADERS, server_process

COLUMNS = ["nodes", "full %", "mode", "requests", "p50 ms", "null p50 ms", "x null", "passed", "answer KB", "null KB"]
MODES = {"shadow": "bench-shadow", "enforce K=3": "bench", "enforce K=0": "bench-k0"}


async def _timed(session: aiohttp.ClientSession, url: str, body: bytes) -> tuple[float, bytes]:
    started = time.perf_counter()
    async with session.post(url, data=body, headers=HEADERS) as response:
        answer = await response.read()
        if response.status != 200:
            raise RuntimeError(f"{url} answered {response.status}: {answer[:300]!r}")
    return time.perf_counter() - started, answer


async def _measure(ours: str, null: str, bodies: dict[str, bytes], requests: int) -> dict[str, Any]:
    times: dict[str, list[float]] = {mode: [] for mode in [*bodies, "null"]}
    answers: dict[str, bytes] = {}
    null_answer = b""
    async with aiohttp.ClientSession() as session:
        for body in bodies.values():  # warm both
            await _timed(session, f"{ours}/filter", body)
            await _timed(session, f"{null}/filter", body)
        for _ in range(requests):
            for mode, body in bodies.items():
                seconds, answers[mode] = await _timed(session, f"{ours}/filter", body)
                times[mode].append(seconds)
                seconds, null_answer = await _timed(session, f"{null}/filter", body)
                times["null"].append(seconds)
    return {"times": times, "answers": answers, "null answer": null_answer}


def run(
    nodes: int = 5000,
    shares: Sequence[int] = (10, 50, 90, 99, 100),
    requests: int = 60,
    log: Callable[[str], None] = print,
) -> list[dict[str, Any]]:
    documents = node_documents(nodes)
    bodies = {
        mode: request_body(documents, full_nodes=False, hugepages="1Gi", namespace=ns) for mode, ns in MODES.items()
    }
    rows: list[dict[str, Any]] = []
    for share in shares:
        with (
            server_process("benchmarks.extender_server", "--nodes", str(nodes), "--full-percent", str(share)) as ours,
            server_process("benchmarks.null_extender") as null,
        ):
            measured = asyncio.run(_measure(ours.url, null.url, bodies, requests))
        null_p50 = statistics.median(measured["times"]["null"]) * 1000
        for mode in MODES:
            answer = msgspec.json.decode(measured["answers"][mode])
            p50 = statistics.median(measured["times"][mode]) * 1000
            rows.append(
                {
                    "nodes": nodes,
                    "full %": share,
                    "mode": mode,
                    "requests": requests,
                    "p50 ms": p50,
                    "null p50 ms": null_p50,
                    "x null": p50 / null_p50,
                    "passed": len(answer.get("NodeNames") or []),
                    "answer KB": len(measured["answers"][mode]) / 1000,
                    "null KB": len(measured["null answer"]) / 1000,
                }
            )
        log(f"full cluster: {share}% full measured")
    return rows
