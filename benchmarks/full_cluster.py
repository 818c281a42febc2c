"""Filter on full clusters over HTTP: every filter path against the null extender, or against the
floor of its answer where that answer must be larger.

The situation this product exists for is a cluster whose pools are mostly full. Each share of full
pools (10%, 50%, 90%, 99% and 100%, full by pod requests) at ``nodes`` nodes gets our extender
(``benchmarks.extender_server --full-percent``) and the null extender (which decodes the request and
echoes the names) in processes of their own, and one keep-alive client sending the same NodeNames
request (every node a candidate) for each case in ``CASES``, alternating servers so both see the
same machine (every other round in the reverse order, so that no request always follows the same one).

The base of a row is the null extender, except where the answer must name every candidate (no
node passes: the pod no pool can take, and a full cluster): echoing the names is then not an
answer, and the base is the null extender's floor of that answer (``/floor/rejected/...``: the
names decoded and every one written with the same reason, as large as ours).

Measured in ``rounds`` rounds of ``requests`` requests per case and base; ``x base`` is the median
over the rounds of each round's ratio of medians, with the rounds' least and greatest.

Two page sizes (issue 24: within 1.2 x of one size): every node has a 1 GiB pool beside its 2 MiB
one (``ONE_GIB_POOL``; the nodes whose 2 MiB pool is full have their 1 GiB pool full too), and a
third server guards both sizes (``resourceNames``) over the same nodes and pods, sent in the same
rounds: each case's pod (2 MiB pages only), and the same pod asking one 1 GiB page besides
(``BOTH_SIZES``). ``x one size`` is each round's ratio of medians, two sizes over one, median and
range over the rounds; the pod asking both sizes is read against the one-size pod's figure too.
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import aiohttp
import msgspec

from benchmarks.cluster import node_documents, request_body
from benchmarks.http_decision import HEADERS, server_process
from benchmarks.null_extender import REJECTED

COLUMNS = [
    "full %",
    "case",
    "requests",
    "p50 ms",
    "base",
    "base p50 ms",
    "x base",
    "x min",
    "x max",
    "x null",
    "passed",
    "answer KB",
    "base KB",
]


@dataclass(frozen=True)
class Case:
    namespace: str  # its policy: benchmarks.extender_server.CONFIG
    hugepages: str
    pod_name: str = "incoming"


# Pools are 64 GiB: a 128 GiB pod is one no pool can take (every node unresolvable), the pod the
# scheduler retries most. K = 0 is served only with the bind verb (config.holds_need_bind); the
# filter is the same call whether or not the bind verb is served.
CASES = {
    "shadow K=3": Case("bench-shadow", "1Gi"),
    "enforce K=3": Case("bench", "1Gi"),
    "enforce K=16": Case("bench-k16", "1Gi"),
    "enforce K=0 (bind)": Case("bench-k0", "1Gi"),
    "no pool can take": Case("bench", "128Gi", "too-large"),
}
SIZES_COLUMNS = [
    "full %",
    "case",
    "one size p50 ms",
    "two sizes p50 ms",
    "x one size",
    "x min",
    "x max",
    "two sizes x base",
    "both sizes p50 ms",
    "both x one size",
    "both x min",
    "both x max",
    "passed",
]
ONE_GIB_POOL = "16Gi"
RESOURCE_NAMES = "hugepages-2Mi,hugepages-1Gi"
BOTH_SIZES = "1Gi"  # of hugepages-1Gi, beside the case's hugepages-2Mi
TWO = "two sizes: "  # the prefix of the two-size server's targets
BOTH = "both sizes: "
BASES = {
    "null": "/filter",
    "floor insufficient": "/floor/rejected/insufficient",
    "floor exceeds pool": "/floor/rejected/exceeds-pool",
}
_FLOOR_OF = {REJECTED.insufficient: "floor insufficient", REJECTED.exceeds_pool: "floor exceeds pool"}


def case_bodies(documents: list[dict[str, Any]], *, one_gib: str | None = None) -> dict[str, bytes]:
    """Each case's NodeNames request over ``documents``; with ``one_gib``, its pod asks that much
    ``hugepages-1Gi`` besides."""
    return {
        name: request_body(
            documents,
            full_nodes=False,
            hugepages=case.hugepages,
            namespace=case.namespace,
            pod_name=case.pod_name,
            one_gib=one_gib,
        )
        for name, case in CASES.items()
    }


async def _timed(session: aiohttp.ClientSession, url: str, body: bytes) -> tuple[float, bytes]:
    started = time.perf_counter()
    async with session.post(url, data=body, headers=HEADERS) as response:
        answer = await response.read()
        if response.status != 200:
            raise RuntimeError(f"{url} answered {response.status}: {answer[:300]!r}")
    return time.perf_counter() - started, answer


Times = dict[str, list[float]]


async def _measure(
    targets: list[tuple[str, str, bytes]], rounds: int, requests: int
) -> tuple[list[Times], dict[str, bytes]]:
    """Each round's latencies per target (name, URL, body), sent in turn, and each one's last answer."""
    answers: dict[str, bytes] = {}
    per_round: list[Times] = []
    async with aiohttp.ClientSession() as session:
        for _, url, body in targets:  # warm every path
            for _ in range(3):
                await _timed(session, url, body)
        for round_number in range(rounds):
            times: Times = {name: [] for name, _, _ in targets}
            # Every other round in the reverse order: no target always follows the same one.
            order = targets if round_number % 2 == 0 else targets[::-1]
            for _ in range(requests):
                for name, url, body in order:
                    seconds, answers[name] = await _timed(session, url, body)
                    times[name].append(seconds)
            per_round.append(times)
    return per_round, answers


def _base_of(answer: dict[str, Any], nodes: int) -> str:
    """The null extender, unless the answer names every candidate: then the floor for its reason."""
    rejected = answer.get("FailedAndUnresolvableNodes") or {}
    reasons = set(rejected.values())
    if len(rejected) == nodes and len(reasons) == 1 and (reason := reasons.pop()) in _FLOOR_OF:
        return _FLOOR_OF[reason]
    return "null"


def run(
    nodes: int = 5000,
    shares: Sequence[int] = (10, 50, 90, 99, 100),
    rounds: int = 5,
    requests: int = 60,
    log: Callable[[str], None] = print,
    *,
    two_sizes: list[dict[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """One row per share and case; with ``two_sizes``, a list, also one row there per share and case
    for the server guarding both sizes (``SIZES_COLUMNS``), measured in the same rounds."""
    documents = node_documents(nodes)
    bodies, both_bodies = case_bodies(documents), case_bodies(documents, one_gib=BOTH_SIZES)
    rows: list[dict[str, Any]] = []
    for share in shares:
        shape = ["--nodes", str(nodes), "--full-percent", str(share), "--one-gib-pool", ONE_GIB_POOL]
        with contextlib.ExitStack() as servers:
            ours = servers.enter_context(server_process("benchmarks.extender_server", *shape))
            null = servers.enter_context(server_process("benchmarks.null_extender"))
            two = None
            if two_sizes is not None:
                two = servers.enter_context(
                    server_process("benchmarks.extender_server", *shape, "--resource-names", RESOURCE_NAMES)
                )
            targets = []
            for case, body in bodies.items():
                targets.append((case, f"{ours.url}/filter", body))
                if two is not None:  # each case's variants one after the other: the same moment of the machine
                    targets.append((TWO + case, f"{two.url}/filter", body))
                    targets.append((BOTH + case, f"{two.url}/filter", both_bodies[case]))
            # The bases are sent the first case's body (the same names as every case's).
            first = next(iter(bodies.values()))
            targets += [(base, f"{null.url}{path}", first) for base, path in BASES.items()]
            per_round, answers = asyncio.run(_measure(targets, rounds, requests))

        def p50(name: str, times: list[Times] = per_round) -> float:
            return statistics.median(t for one in times for t in one[name]) * 1000

        def ratios(name: str, base: str, times: list[Times] = per_round) -> list[float]:
            return [statistics.median(one[name]) / statistics.median(one[base]) for one in times]

        for name in CASES:
            answer = msgspec.json.decode(answers[name])
            base = _base_of(answer, nodes)
            against_base = ratios(name, base)
            rows.append(
                {
                    "nodes": nodes,
                    "full %": share,
                    "case": name,
                    "requests": rounds * requests,
                    "p50 ms": p50(name),
                    "base": base,
                    "base p50 ms": p50(base),
                    "x base": statistics.median(against_base),
                    "x min": min(against_base),
                    "x max": max(against_base),
                    "x null": p50(name) / p50("null"),
                    "passed": len(answer.get("NodeNames") or []),
                    "answer KB": len(answers[name]) / 1000,
                    "base KB": len(answers[base]) / 1000,
                }
            )
            if two_sizes is not None:
                two_x, both_x = ratios(TWO + name, name), ratios(BOTH + name, name)
                passed = [
                    len(msgspec.json.decode(answers[key]).get("NodeNames") or [])
                    for key in (name, TWO + name, BOTH + name)
                ]
                two_sizes.append(
                    {
                        "nodes": nodes,
                        "full %": share,
                        "case": name,
                        "requests": rounds * requests,
                        "one size p50 ms": p50(name),
                        "two sizes p50 ms": p50(TWO + name),
                        "x one size": statistics.median(two_x),
                        "x min": min(two_x),
                        "x max": max(two_x),
                        "two sizes x base": statistics.median(ratios(TWO + name, base)),
                        "both sizes p50 ms": p50(BOTH + name),
                        "both x one size": statistics.median(both_x),
                        "both x min": min(both_x),
                        "both x max": max(both_x),
                        "passed": "/".join(map(str, passed)),
                    }
                )
        log(f"full cluster: {share}% full measured")
    return rows
