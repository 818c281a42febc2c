"""Decision cost over HTTP on loopback: requests/s and latency with concurrent keep-alive clients.

Each server runs in a process of its own (``benchmarks.extender_server`` for
ours, ``benchmarks.null_extender`` for the floors), so the client's event loop
never shares a core's time slice with the server's by construction; the
client is one ``aiohttp.ClientSession`` whose connections are reused, with
``clients`` requests in flight at once (kube-scheduler itself sends one
filter at a time per scheduler).

A cell runs until it has ``min_requests`` answers and ``min_seconds`` have
passed, or for ``max_seconds`` at most; latency is from sending the request to
having read the whole answer. Floors measured in the same run against the
same request bytes: the null extender (``x null``) and, for full-Nodes
requests, the field-skipping decode floor (``x floor``).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import msgspec

from benchmarks.cluster import node_documents, request_body
from benchmarks.extender_server import MAX_PODS, PODS_PER_NODE
from benchmarks.stats import percentile
from extender.core.candidatelists import RECENT_CANDIDATE_LISTS

REPO_ROOT = Path(__file__).resolve().parent.parent
HEADERS = {"Content-Type": "application/json"}
NEW_POD = "new-%09d"  # a fixed width: each new pod's body is the first one with its uid replaced
COLUMNS = [
    "nodes",
    "mode",
    "verb",
    "K",
    "hugepages",
    "clients",
    "requests",
    "req/s",
    "p50 ms",
    "p99 ms",
    "null p50 ms",
    "x null",
    "floor p50 ms",
    "x floor",
]


@dataclass(frozen=True)
class Budget:
    """How long one cell runs: at least ``min_requests`` and ``min_seconds``, at most ``max_seconds``."""

    min_requests: int
    min_seconds: float
    max_seconds: float


FULL = {"names": Budget(300, 1.5, 4.0), "nodes": Budget(30, 1.5, 8.0)}
QUICK = {"names": Budget(60, 0.5, 1.5), "nodes": Budget(8, 0.5, 3.0)}


@dataclass(frozen=True)
class Load:
    latencies: list[float]
    wall_seconds: float

    @property
    def rate(self) -> float:
        return len(self.latencies) / self.wall_seconds


@dataclass(frozen=True)
class Server:
    url: str
    pid: int

    def memory_mib(self) -> dict[str, float]:
        """Resident set now and at its peak (VmRSS, VmHWM), in MiB."""
        figures: dict[str, float] = {}
        with open(f"/proc/{self.pid}/status") as status:
            for line in status:
                key, _, value = line.partition(":")
                if key in ("VmRSS", "VmHWM"):
                    figures["rss_mib" if key == "VmRSS" else "peak_rss_mib"] = int(value.split()[0]) / 1024
        return figures


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def server_process(module: str, *args: str, timeout: float = 120.0, cwd: Path = REPO_ROOT) -> Iterator[Server]:
    """``python -m module --port P *args`` in its own process group, yielded once it listens. ``cwd``
    is the checkout whose code it runs (``python -m`` imports from there first)."""
    port = free_port()
    with tempfile.TemporaryFile() as log:
        process = subprocess.Popen(
            [sys.executable, "-m", module, "--port", str(port), *args],
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            _wait_healthy(process, f"{module} on port {port}", port, timeout, log)
            yield Server(f"http://127.0.0.1:{port}", process.pid)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait()


def _wait_healthy(process: subprocess.Popen[bytes], what: str, port: int, timeout: float, log: Any) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            log.seek(0)
            raise RuntimeError(f"{what} exited with {process.returncode}:\n{log.read().decode()[-2000:]}")
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.settimeout(0.5)
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise TimeoutError(f"{what} did not listen within {timeout:.0f} s")


async def _post(session: aiohttp.ClientSession, url: str, body: bytes) -> bytes:
    async with session.post(url, data=body, headers=HEADERS) as response:
        answer = await response.read()
        if response.status != 200:
            raise RuntimeError(f"{url} answered {response.status}: {answer[:300]!r}")
        return answer


def _check(url: str, answer: bytes, expect_nodes: int | None) -> None:
    """The answer is what the scheduler would accept (and the figures are not those of an error page)."""
    if url.endswith("/floor/filter"):
        return
    decoded = msgspec.json.decode(answer)
    if url.endswith("/prioritize"):
        if not isinstance(decoded, list) or (expect_nodes is not None and len(decoded) != expect_nodes):
            raise RuntimeError(f"{url}: unexpected answer {answer[:200]!r}")
        return
    if decoded.get("Error"):
        raise RuntimeError(f"{url}: error {decoded['Error']!r}")
    passed = decoded["NodeNames"] if decoded.get("NodeNames") is not None else decoded["Nodes"]["items"]
    if not passed or (expect_nodes is not None and len(passed) != expect_nodes):
        raise RuntimeError(f"{url}: {len(passed or [])} nodes passed, expected {expect_nodes}")


async def measure(
    session: aiohttp.ClientSession,
    url: str,
    body: bytes | Sequence[bytes] | Callable[[int], bytes],
    *,
    clients: int,
    budget: Budget,
    expect_nodes: int | None = None,
) -> Load:
    """Latency of each request and the wall time, ``clients`` requests in flight at once.

    Several bodies are sent in turn (request i sends ``body[i % len(body)]``), or
    ``body(i)`` is request i's body (built before its clock starts).
    """
    if callable(body):
        body_of = body
    else:
        bodies = [body] if isinstance(body, bytes) else list(body)
        body_of = lambda i: bodies[i % len(bodies)]  # noqa: E731
    answers = await asyncio.gather(*(_post(session, url, body_of(-1 - i)) for i in range(clients)))  # connections
    _check(url, answers[0], expect_nodes)
    latencies: list[float] = []
    sent = 0
    started = time.perf_counter()
    soonest, latest = started + budget.min_seconds, started + budget.max_seconds

    async def client() -> None:
        nonlocal sent
        while True:
            now = time.perf_counter()
            if now >= latest or (now >= soonest and len(latencies) >= budget.min_requests):
                return
            sent += 1
            request = body_of(sent)
            started_one = time.perf_counter()
            await _post(session, url, request)
            latencies.append(time.perf_counter() - started_one)

    await asyncio.gather(*(client() for _ in range(clients)))
    return Load(latencies, time.perf_counter() - started)


def _new_pods(documents: list[dict[str, Any]], full: bool) -> Callable[[int], bytes]:
    """Request bodies for a new pod each call (a uid this server has not seen).

    Each holds its need on the 3 nodes it is admitted to until the hold expires (no pod
    ever binds here): one page each, so that the thousands of holds a cell leaves
    behind do not fill the pools the next cells are measured on.
    """
    first = request_body(documents, full_nodes=full, hugepages="2Mi", pod_name=NEW_POD % 0)
    uids = itertools.count(1)

    def body(_: int) -> bytes:
        return first.replace(b"uid-bench-" + NEW_POD.encode() % 0, b"uid-bench-" + NEW_POD.encode() % next(uids))

    return body


def _row(
    nodes: int,
    full: bool,
    verb: str,
    *,
    k: object,
    hugepages: object,
    clients: int,
    load: Load,
    null: Load | None = None,
    floor: Load | None = None,
) -> dict[str, Any]:
    p50 = percentile(load.latencies, 0.5) * 1e3
    row: dict[str, Any] = {
        "nodes": nodes,
        "mode": "Nodes" if full else "NodeNames",
        "verb": verb,
        "K": k,
        "hugepages": hugepages,
        "clients": clients,
        "requests": len(load.latencies),
        "req/s": load.rate,
        "p50 ms": p50,
        "p99 ms": percentile(load.latencies, 0.99) * 1e3,
    }
    for name, floor_load in (("null", null), ("floor", floor)):
        if floor_load is not None:
            floor_p50 = percentile(floor_load.latencies, 0.5) * 1e3
            row[f"{name} p50 ms"] = floor_p50
            row[f"x {name}"] = p50 / floor_p50
    return row


async def _size(
    nodes: int,
    ours: str,
    null: str,
    clients_levels: Sequence[int],
    budgets: dict[str, Budget],
    *,
    cells_done: Callable[[bool, int], None] = lambda full, clients: None,
) -> list[dict[str, Any]]:
    documents = node_documents(nodes)
    rows: list[dict[str, Any]] = []
    connector = aiohttp.TCPConnector(limit=max(clients_levels), force_close=False)
    timeout = aiohttp.ClientTimeout(total=120)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        for full in (False, True):
            budget = budgets["nodes" if full else "names"]
            bodies = {
                (hp, ns): request_body(documents, full_nodes=full, hugepages=hp, namespace=ns)
                for hp, ns in (("1Gi", "bench"), ("1Gi", "bench-k0"), (None, "bench"))
            }
            body = bodies[("1Gi", "bench")]
            # More orders than the wire keeps lists (RECENT_CANDIDATE_LISTS), in turn: none is found again.
            orders = (
                []
                if full
                else [
                    request_body(documents[i:] + documents[:i], full_nodes=full, hugepages="1Gi")
                    for i in range(1, 2 * RECENT_CANDIDATE_LISTS + 1)
                ]
            )
            new_pod_body = _new_pods(documents, full)
            for clients in clients_levels:

                async def run(
                    url: str,
                    body: bytes | list[bytes] | Callable[[int], bytes],
                    expect: int | None = None,
                    *,
                    c: int = clients,
                    b: Budget = budget,
                ) -> Load:
                    return await measure(session, url, body, clients=c, budget=b, expect_nodes=expect)

                null_f = await run(f"{null}/filter", body, nodes)
                null_p = await run(f"{null}/prioritize", body, nodes)
                floor_f = await run(f"{null}/floor/filter", body) if full else None
                floor_p = await run(f"{null}/floor/prioritize", body, nodes) if full else None
                for (hp, ns), verb_body in bodies.items():
                    k = "-" if hp is None else 0 if ns == "bench-k0" else 3
                    hugepages = "yes" if hp else "no"
                    load = await run(f"{ours}/filter", verb_body, min(3, nodes) if k == 3 else nodes)
                    rows.append(
                        _row(
                            nodes,
                            full,
                            "filter",
                            k=k,
                            hugepages=hugepages,
                            clients=clients,
                            load=load,
                            null=null_f,
                            floor=floor_f,
                        )
                    )
                    if ns == "bench":
                        # A pod no filter has held nodes for (as after a K = 0 filter): the scheduler
                        # sends prioritize only the nodes filter admitted, so a pod held on K nodes
                        # is never scored against thousands.
                        scored = request_body(documents, full_nodes=full, hugepages=hp, pod_name="scored")
                        load = await run(f"{ours}/prioritize", scored, nodes)
                        rows.append(
                            _row(
                                nodes,
                                full,
                                "prioritize",
                                k="-",
                                hugepages=hugepages,
                                clients=clients,
                                load=load,
                                null=null_p,
                                floor=floor_p,
                            )
                        )
                if not full:
                    # kube-scheduler filters each pod once (the rows above send the same pod again, a
                    # retry: its previous hold is released first). A new pod each call holds nodes
                    # without releasing any; its hold ends when it shows up bound, off this path.
                    load = await run(f"{ours}/filter", new_pod_body, 3)
                    rows.append(
                        _row(
                            nodes,
                            full,
                            "filter, a new pod each call",
                            k=3,
                            hugepages="yes",
                            clients=clients,
                            load=load,
                            null=null_f,
                        )
                    )
                    # kube-scheduler lists feasible nodes in the order its parallel filter finds them, so
                    # the same candidates often come in another order: every request misses the wire's
                    # recent candidate lists here (the rows above repeat one body, and hit them).
                    load = await run(f"{ours}/filter", orders, 3)
                    rows.append(
                        _row(
                            nodes,
                            full,
                            "filter, order varies",
                            k=3,
                            hugepages="yes",
                            clients=clients,
                            load=load,
                            null=null_f,
                        )
                    )
                rows.append(_row(nodes, full, "null filter", k="-", hugepages="-", clients=clients, load=null_f))
                rows.append(_row(nodes, full, "null prioritize", k="-", hugepages="-", clients=clients, load=null_p))
                if floor_f is not None and floor_p is not None:
                    rows.append(_row(nodes, full, "floor filter", k="-", hugepages="-", clients=clients, load=floor_f))
                    rows.append(
                        _row(nodes, full, "floor prioritize", k="-", hugepages="-", clients=clients, load=floor_p)
                    )
                cells_done(full, clients)
    return rows


def run(
    sizes: Sequence[int],
    *,
    clients: Sequence[int] = (1, 4),
    quick: bool = False,
    budgets: dict[str, Budget] | None = None,
    memory: list[dict[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """One row per (size, wire mode, clients, verb, K, hugepages), each with its floors.

    ``memory`` gets one row per size: our server's resident set once it holds
    ``extender_server``'s cluster, after the NodeNames cells, after the full-Nodes cells
    (requests of up to 30 MB, ``clients`` at once), and at its peak: after the one-client
    full-Nodes cells (as one scheduler sends them) and overall.
    """
    budgets = budgets or (QUICK if quick else FULL)
    rows: list[dict[str, Any]] = []
    with server_process("benchmarks.null_extender") as null:
        for nodes in sizes:
            with server_process("benchmarks.extender_server", "--nodes", str(nodes)) as ours:
                figures: dict[str, Any] = {"nodes": nodes, "pods": min(nodes * PODS_PER_NODE, MAX_PODS)}
                figures["loaded rss MiB"] = ours.memory_mib()["rss_mib"]

                def cells_done(full: bool, at_once: int, server: Server = ours, into: dict[str, Any] = figures) -> None:
                    now = server.memory_mib()
                    into["rss MiB after full Nodes" if full else "rss MiB after NodeNames"] = now["rss_mib"]
                    into["peak rss MiB"] = now["peak_rss_mib"]
                    if full and at_once == 1:  # as one scheduler sends them: one at a time
                        into["peak rss MiB, full Nodes one at a time"] = now["peak_rss_mib"]

                rows.extend(asyncio.run(_size(nodes, ours.url, null.url, clients, budgets, cells_done=cells_done)))
                if memory is not None:
                    memory.append(figures)
    return rows


MEMORY_COLUMNS = [
    "nodes",
    "pods",
    "loaded rss MiB",
    "rss MiB after NodeNames",
    "rss MiB after full Nodes",
    "peak rss MiB, full Nodes one at a time",
    "peak rss MiB",
]
