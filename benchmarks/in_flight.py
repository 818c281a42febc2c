"""Filter with placements in flight over HTTP: a stream of distinct pods, each holding its nodes, against
the same filter with none in flight and against the null extender, in one run.

A burst of pods keeps the holds of every pod placed until the watch shows it bound (in snapshot mode,
until ``holdTimeoutSeconds``). Requests that repeat one pod never show that: each attempt releases the
pod's own hold before it holds again, so one hold is outstanding. Here, at ``nodes`` nodes and
``share`` % of the pools full (``benchmarks.extender_server``), two servers of ours are fed the same
cluster (and two more guarding two page sizes, for the case that asks both): **none** is sent each
case's one pod over and over (one hold outstanding per case), **in flight** first ``in_flight``
distinct K=3 pods (each holding its three nodes; pods of both sizes on the two-size server) and then a
new pod for every request measured, so that at least ``in_flight`` pods' holds stand throughout.
The null extender (the names decoded and echoed) and its floor of
an answer naming every candidate (``benchmarks.null_extender``, for the pod no pool can take) are sent
in the same rounds, alternating in order.

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
    shape += ["--hold-timeout-seconds", str(HOLD_SECONDS)]
    two = [*shape, "--resource-names", RESOURCE_NAMES]
    tags = {name: f"case{index}" for index, name in enumerate(CASES)}
    first = {name: _body(documents, case, tags[name]) for name, case in CASES.items()}
    with contextlib.ExitStack() as servers:
        started = time.monotonic()
        none, busy, none_two, busy_two = (
            servers.enter_context(server_process("benchmarks.extender_server", *args))
            for args in (shape, shape, two, two)
        )
        null = servers.enter_context(server_process("benchmarks.null_extender"))
        log(f"in flight: servers up in {time.monotonic() - started:.0f} s")
        targets: list[tuple[str, str, Callable[[], bytes]]] = []
        for name, case in CASES.items():
            quiet, held = (none_two, busy_two) if case.one_gib else (none, busy)
            targets.append((f"none: {name}", f"{quiet.url}/filter", _same(first[name])))
            targets.append((name, f"{held.url}/filter", _pods(first[name], tags[name])))
        warm = [
            (f"{server.url}/filter", _pods(_body(documents, CASES[held], "warm"), "warm"))
            for server, held in ((busy, "enforce K=3"), (busy_two, "two sizes K=3"))
        ]
        targets += [(base, f"{null.url}{path}", _same(first["enforce K=3"])) for base, path in BASES.items()]
        per_round, answers = asyncio.run(_measure(targets, warm, in_flight, rounds, requests))

    def p50(name: str) -> float:
        return statistics.median(t for one in per_round for t in one[name]) * 1000

    rows = []
    for name in CASES:
        against = [statistics.median(one[name]) / statistics.median(one[f"none: {name}"]) for one in per_round]
        answer = msgspec.json.decode(answers[name])
        base = _base_of(answer, nodes)
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
                "base p50 ms": p50(base),
                "x base": p50(name) / p50(base),
                "passed": len(answer.get("NodeNames") or []),
            }
        )
    return rows
