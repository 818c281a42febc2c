"""Filter with placements in flight over HTTP: a stream of distinct pods, each holding its nodes, against
the same filter with none in flight and against the null extender, in one run.

A burst of pods keeps the holds of every pod placed until the watch shows it bound (in snapshot mode,
until ``holdTimeoutSeconds``). Requests that repeat one pod never show that: each attempt releases the
pod's own hold before it holds again, so one hold is outstanding. Here, at ``nodes`` nodes and
``share`` % of the pools full (``benchmarks.extender_server``), two servers of ours guarding both page
sizes are fed the same cluster: **none** is sent each case's one pod over and over (one hold
outstanding per case), **in flight** first ``in_flight`` distinct K=3 pods (each holding its three
nodes, half of them asking both sizes) and then a new pod for every request measured, so that at least
``in_flight`` pods' holds stand throughout. A pod asking one size is decided on the sizes it asks
alone, so one pair of servers serves every case.

The rounds go case by case through the three processes in turn: none, in flight, and the null
extender (the names decoded and echoed; for the pod no pool can take, its floor of an answer naming
every candidate: ``benchmarks.null_extender``). Each process gets one request in three, as a
scheduler's extender gets every call back to back. An earlier layout ran five processes on two cores
and sent the servers of the pod asking both sizes one request in twelve: each came to it with its
caches cold, and that pod measured 1.37 ms where a one-size pod doing as much measured 0.79 ms
(docs/performance.md, "Placements in flight").

``x none`` is each round's ratio of medians, in flight over none, median and range over the rounds;
``x base``, the in-flight p50 over the null extender's (its floor's, where the answer names every
node: ``full_cluster._base_of``).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
import msgspec

from benchmarks.cluster import node_documents, request_body
from benchmarks.full_cluster import BASES, ONE_GIB_POOL, RESOURCE_NAMES, _base_of, _timed
from benchmarks.http_decision import server_process

COLUMNS = [
    "case",
    "held pods",
    "none p50 ms",
    "in flight p50 ms",
    "x none",
    "x min",
    "x max",
    "base",
    "base p50 ms",
    "x base",
    "passed",
]
HOLD_SECONDS = 3600  # every hold stands through the run (a burst's, not yet seen bound)
NUMBER = "-%07d"  # a fixed width: each pod's body is the first one with its number replaced


@dataclass(frozen=True)
class Case:
    namespace: str  # its policy: benchmarks.extender_server.CONFIG
    hugepages: str
    one_gib: str | None = None  # of hugepages-1Gi besides: the server guarding both sizes


CASES = {
    "shadow K=3": Case("bench-shadow", "1Gi"),
    "enforce K=3": Case("bench", "1Gi"),
    "enforce K=16": Case("bench-k16", "1Gi"),
    "no pool can take": Case("bench", "128Gi"),
    "two sizes K=3": Case("bench", "1Gi", one_gib="1Gi"),
}


def _pods(first: bytes, tag: str) -> Callable[[], bytes]:
    """A new pod's body at each call: ``first`` (pod ``tag-0000000``) with its pod's name (so its UID) renumbered."""
    numbers = itertools.count(1)
    old = (tag + NUMBER % 0).encode()
    return lambda: first.replace(old, (tag + NUMBER % next(numbers)).encode())


def _body(documents: list[dict[str, Any]], case: Case, tag: str) -> bytes:
    return request_body(
        documents,
        full_nodes=False,
        hugepages=case.hugepages,
        namespace=case.namespace,
        pod_name=tag + NUMBER % 0,
        one_gib=case.one_gib,
    )


async def _measure(
    targets: list[tuple[str, str, Callable[[], bytes]]],
    warm: list[tuple[str, Callable[[], bytes]]],
    in_flight: int,
    rounds: int,
    requests: int,
) -> tuple[list[dict[str, list[float]]], dict[str, bytes]]:
    answers: dict[str, bytes] = {}
    per_round: list[dict[str, list[float]]] = []
    async with aiohttp.ClientSession() as session:
        for url, body in warm:  # the pods in flight before the first request measured
            for _ in range(in_flight):
                await _timed(session, url, body())
        for round_number in range(rounds):
            times: dict[str, list[float]] = {name: [] for name, _, _ in targets}
            order = targets if round_number % 2 == 0 else targets[::-1]
            for _ in range(requests):
                for name, url, body in order:
                    seconds, answers[name] = await _timed(session, url, body())
                    times[name].append(seconds)
            per_round.append(times)
    return per_round, answers


async def _bases(url: str, first: dict[str, bytes], nodes: int) -> dict[str, str]:
    """Each case's base: the null extender, or the floor of an answer naming every node when ours does."""
    bases = {}
    async with aiohttp.ClientSession() as session:
        for name, body in first.items():
            _, answer = await _timed(session, url, body)
            bases[name] = _base_of(msgspec.json.decode(answer), nodes)
    return bases


def _same(body: bytes) -> Callable[[], bytes]:
    return lambda: body


def run(
    nodes: int = 5000,
    share: int = 90,
    *,
    in_flight: int = 1000,
    rounds: int = 5,
    requests: int = 40,
    log: Callable[[str], None] = print,
) -> list[dict[str, Any]]:
    documents = node_documents(nodes)
    shape = ["--nodes", str(nodes), "--full-percent", str(share), "--one-gib-pool", ONE_GIB_POOL]
    shape += ["--hold-timeout-seconds", str(HOLD_SECONDS), "--resource-names", RESOURCE_NAMES]
    tags = {name: f"case{index}" for index, name in enumerate(CASES)}
    first = {name: _body(documents, case, tags[name]) for name, case in CASES.items()}
    with contextlib.ExitStack() as servers:
        started = time.monotonic()
        none, busy = (servers.enter_context(server_process("benchmarks.extender_server", *shape)) for _ in range(2))
        null = servers.enter_context(server_process("benchmarks.null_extender"))
        log(f"in flight: servers up in {time.monotonic() - started:.0f} s")
        bases = asyncio.run(_bases(f"{none.url}/filter", first, nodes))
        targets: list[tuple[str, str, Callable[[], bytes]]] = []
        for name in CASES:
            targets.append((f"none: {name}", f"{none.url}/filter", _same(first[name])))
            targets.append((name, f"{busy.url}/filter", _pods(first[name], tags[name])))
            targets.append((f"base: {name}", f"{null.url}{BASES[bases[name]]}", _same(first[name])))
        warm = [
            (f"{busy.url}/filter", _pods(_body(documents, CASES[held], f"warm{index}"), f"warm{index}"))
            for index, held in enumerate(("enforce K=3", "two sizes K=3"))
        ]
        per_round, answers = asyncio.run(_measure(targets, warm, in_flight // len(warm), rounds, requests))

    def p50(name: str) -> float:
        return statistics.median(t for one in per_round for t in one[name]) * 1000

    rows = []
    for name in CASES:
        against = [statistics.median(one[name]) / statistics.median(one[f"none: {name}"]) for one in per_round]
        answer = msgspec.json.decode(answers[name])
        base = bases[name]
        rows.append(
            {
                "nodes": nodes,
                "full %": share,
                "case": name,
                "held pods": f"{in_flight:,}-{in_flight + rounds * requests:,}",
                "none p50 ms": p50(f"none: {name}"),
                "in flight p50 ms": p50(name),
                "x none": statistics.median(against),
                "x min": min(against),
                "x max": max(against),
                "base": base,
                "base p50 ms": p50(f"base: {name}"),
                "x base": p50(name) / p50(f"base: {name}"),
                "passed": len(answer.get("NodeNames") or []),
            }
        )
    return rows
