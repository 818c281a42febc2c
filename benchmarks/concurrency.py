"""Several schedulers on one extender: 1, 2, 4 and 8 at once, ours against the null extender.

Each client behaves as one kube-scheduler does towards its extender: one request at a time on
a keep-alive connection of its own, and for each pod a filter, then a prioritize of the nodes the
filter passed. Every pod is new (a name and UID never sent before), asks for one 2 MiB page (so
the holds of a long run do not fill the pools) and carries its scheduler's feasible nodes as
``NodeNames``: every node but one, a different one per scheduler, so that each scheduler sends a
list of its own (the same list with each of its pods, as while the cluster does not change).

Our extender (``benchmarks.extender_server --bound-after-ms 10``) shows each pod it held nodes for
bound 10 ms after its filter (the mean hold to bound of the real kube-scheduler, docs/performance.md)
and deletes it a second later, on its own event loop as the watch does: holds end, and the state
stays the size of the cluster. Modes: enforce with the default best-of-K (K = 3: the filter answers
3 nodes, prioritize scores those 3) and shadow (the default mode: every candidate passes and is
scored). The null extender gets the same requests: for enforce, a prioritize of 3 of the candidates.

Cells alternate between the null extender and ours for each count of schedulers and mode, over
``rounds`` rounds, so both see the same machine. Per cell: pods placed per second (all clients), the
latency of a pod (its filter and its prioritize, back to back), and the server's CPU time per pod
(from ``/proc``; a server using a whole core is the bottleneck).
"""

from __future__ import annotations

import asyncio
import itertools
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec

from benchmarks.cluster import node_documents, request_body
from benchmarks.http_decision import server_process
from benchmarks.stats import percentile

COLUMNS = [
    "nodes",
    "mode",
    "schedulers",
    "pods",
    "pods/s",
    "null pods/s",
    "x null pods/s",
    "p50 ms",
    "p99 ms",
    "null p50 ms",
    "null p99 ms",
    "x null p50",
    "x null p99",
    "cpu ms/pod",
    "null cpu ms/pod",
]
MODES = {"enforce K=3": "bench", "shadow": "bench-shadow"}
K = 3
POD = "conc-%010d"  # a fixed width: each pod's body is the template with its name (and so its UID) replaced
BOUND_AFTER_MS = 10.0
_KEY = b'"NodeNames":'
_passed = msgspec.json.Decoder(dict[str, Any])


class Connection:
    """One keep-alive HTTP/1.1 connection, one request at a time, as Go's client keeps one per scheduler.

    Written on asyncio streams rather than aiohttp's client, which costs several times more CPU
    per request: on two cores the clients must leave the servers as much of the machine as they can.
    """

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, host: bytes) -> None:
        self._reader, self._writer, self._host = reader, writer, host

    @classmethod
    async def open(cls, url: str) -> Connection:
        host, _, port = url.removeprefix("http://").partition(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        return cls(reader, writer, f"{host}:{port}".encode())

    async def post(self, path: str, body: bytes) -> bytes:
        self._writer.write(
            b"POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
            % (path.encode(), self._host, len(body))
        )
        self._writer.write(body)
        head = await self._reader.readuntil(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n")[1:]:
            key, _, value = line.partition(b":")
            if key.strip().lower() == b"content-length":
                length = int(value)
        answer = await self._reader.readexactly(length)
        status, _, _ = head.partition(b"\r\n")
        if not status.startswith(b"HTTP/1.1 200"):
            raise RuntimeError(f"{path} answered {status!r}: {answer[:300]!r}")
        return answer

    async def close(self) -> None:
        self._writer.close()
        await self._writer.wait_closed()


@dataclass
class Cell:
    latencies: list[float] = field(default_factory=list)
    wall_seconds: float = 0.0
    cpu_seconds: float = 0.0
    client_cpu_seconds: float = 0.0

    @property
    def pods(self) -> int:
        return len(self.latencies)


def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime


class Scheduler:
    """One client: its own connection, its own feasible list, one pod at a time."""

    def __init__(self, documents: list[dict[str, Any]], index: int, namespace: str, pods: itertools.count[int]) -> None:
        own = documents[:index] + documents[index + 1 :]  # every node but one: a list of its own
        self.names = [d["metadata"]["name"] for d in own]
        self.template = request_body(own, full_nodes=False, hugepages="2Mi", namespace=namespace, pod_name=POD % 0)
        self.token = (POD % 0).encode()
        self.prefix = self.template[: self.template.rindex(_KEY) + len(_KEY)]
        self.shadow = namespace == MODES["shadow"]
        self.pods = pods

    async def pod(self, connection: Connection, null: bool) -> None:
        """Filter a new pod, then prioritize what the filter passed (as the scheduler does)."""
        name = (POD % next(self.pods)).encode()
        body = self.template.replace(self.token, name)
        answer = await connection.post("/filter", body)
        if self.shadow:
            scored = body  # every candidate passed
        else:
            # The null extender passes every candidate: it gets the same 3-node prioritize as ours.
            passed = self.names[:K] if null else _passed.decode(answer)["NodeNames"]
            if len(passed) != K:
                raise RuntimeError(f"filter passed {len(passed)} nodes, expected {K}: {answer[:300]!r}")
            scored = self.prefix.replace(self.token, name) + msgspec.json.encode(passed) + b"}"
        await connection.post("/prioritize", scored)


async def _cell(url: str, pid: int, schedulers: Sequence[Scheduler], seconds: float, null: bool) -> Cell:
    connections = [await Connection.open(url) for _ in schedulers]
    cell = Cell()
    try:
        # Each connection made, and each scheduler's list seen once, before the clock starts.
        await asyncio.gather(*(s.pod(c, null) for s, c in zip(schedulers, connections, strict=True)))
        cpu, client_cpu = _cpu_seconds(pid), time.process_time()
        started = time.perf_counter()
        deadline = started + seconds

        async def run(scheduler: Scheduler, connection: Connection) -> None:
            while time.perf_counter() < deadline:
                began = time.perf_counter()
                await scheduler.pod(connection, null)
                cell.latencies.append(time.perf_counter() - began)

        await asyncio.gather(*(run(s, c) for s, c in zip(schedulers, connections, strict=True)))
        cell.wall_seconds = time.perf_counter() - started
        cell.cpu_seconds = _cpu_seconds(pid) - cpu
        cell.client_cpu_seconds = time.process_time() - client_cpu
    finally:
        for connection in connections:
            await connection.close()
    return cell


def _merge(cells: Sequence[Cell]) -> Cell:
    return Cell(
        [x for c in cells for x in c.latencies],
        sum(c.wall_seconds for c in cells),
        sum(c.cpu_seconds for c in cells),
    )


def run(
    nodes: int = 5000,
    levels: Sequence[int] = (1, 2, 4, 8),
    *,
    seconds: float = 3.0,
    rounds: int = 3,
    modes: Sequence[str] = tuple(MODES),
    log: Callable[[str], None] = print,
) -> list[dict[str, Any]]:
    documents = node_documents(nodes)
    pods = itertools.count(1)
    cells: dict[tuple[str, str, int], list[Cell]] = {}
    with (
        server_process(
            "benchmarks.extender_server", "--nodes", str(nodes), "--bound-after-ms", str(BOUND_AFTER_MS)
        ) as ours,
        server_process("benchmarks.null_extender") as null,
    ):
        servers = {"ours": ours, "null": null}
        for round_ in range(rounds):
            for n in levels:
                for mode in modes:
                    schedulers = [Scheduler(documents, i, MODES[mode], pods) for i in range(n)]
                    order = ("null", "ours") if round_ % 2 == 0 else ("ours", "null")
                    for which in order:
                        server = servers[which]
                        cell = asyncio.run(_cell(server.url, server.pid, schedulers, seconds, which == "null"))
                        cells.setdefault((which, mode, n), []).append(cell)
            log(f"concurrency: round {round_ + 1} of {rounds} measured")
    rows: list[dict[str, Any]] = []
    for mode in modes:
        for n in levels:
            o, z = _merge(cells["ours", mode, n]), _merge(cells["null", mode, n])
            figures = {
                name: (cell.pods / cell.wall_seconds, percentile(cell.latencies, 0.5), percentile(cell.latencies, 0.99))
                for name, cell in (("ours", o), ("null", z))
            }
            (rate, p50, p99), (null_rate, null_p50, null_p99) = figures["ours"], figures["null"]
            rows.append(
                {
                    "nodes": nodes,
                    "mode": mode,
                    "schedulers": n,
                    "pods": o.pods,
                    "pods/s": rate,
                    "null pods/s": null_rate,
                    "x null pods/s": rate / null_rate,
                    "p50 ms": p50 * 1e3,
                    "p99 ms": p99 * 1e3,
                    "null p50 ms": null_p50 * 1e3,
                    "null p99 ms": null_p99 * 1e3,
                    "x null p50": p50 / null_p50,
                    "x null p99": p99 / null_p99,
                    "cpu ms/pod": o.cpu_seconds / o.pods * 1e3,
                    "null cpu ms/pod": z.cpu_seconds / z.pods * 1e3,
                }
            )
    return rows
