"""Many connections against ``hugepage-extender serve``: peak RSS against the chart's memory
limit, and the scheduler's filter latency meanwhile (issue 22; docs/reliability.md).

Each attack runs against a fresh ``serve`` (the bundled example cluster, a probe port beside
the verbs) on 127.0.0.1, while a scheduler-like client sends a filter every 10 ms on one
keep-alive connection (5 s timeout, the scheduler's ``httpTimeout``). Every loop is bounded
in count and in time. The attacks, as the issue found them:

- ``probe-headers``: connections to the probe port that each send about 1 MB of header
  lines (aiohttp's default limits, 127 lines of 8,100 bytes) and never end the block;
- ``probe-headers-within-limits``: the same within this extender's limits (31 lines of 4,000 bytes);
- ``verbs-headers``: complete requests with header blocks as large as the limits allow, to the verbs;
- ``slow-readers``: prioritize requests of 100,000 long names whose 34 MiB answers are never read;
- ``withheld-uploads``: bodies just under ``maxRequestBytes`` whose last byte never comes;
- ``combined``: the fuzz of ``benchmarks.fuzz`` running while every flood above runs again and again;
- ``memory-together``: gzip'ed worst-case prioritize bodies, withheld uploads and slow readers, each
  again and again, together for 40 s (issue 29, ``memory_attacks_together``).

Run: ``python -m benchmarks.hostile_load [--scale 1.0] [--attacks NAME ...] [--json FILE]``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gzip
import json
import os
import resource
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import msgspec

from benchmarks.cluster import node_documents, request_body
from benchmarks.fuzz import CONFIG as FUZZ_CONFIG
from benchmarks.fuzz import MAX_REQUEST_BYTES as FUZZ_MAX_REQUEST_BYTES
from benchmarks.fuzz import NODES, run_requests
from benchmarks.worst_request import names_body
from extender.core.config import DEFAULT_MAX_REQUEST_BYTES
from extender.shell.wire import MAX_CANDIDATES

HOST = "127.0.0.1"
CHART_MEMORY_LIMIT_MIB = 512  # charts/hugepage-extender/values.yaml, resources.limits.memory
FILTER = json.dumps(
    {
        "Pod": {
            "metadata": {"name": "web-0", "namespace": "default", "uid": "uid-scheduler"},
            "spec": {"containers": [{"name": "c", "resources": {"requests": {"hugepages-2Mi": "1Gi", "cpu": "1"}}}]},
        },
        "NodeNames": NODES,
    }
).encode()


# --------------------------------------------------------------------------- the server


def _free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def _status_kib(pid: int, key: str) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    raise KeyError(key)


class Serve:
    """A ``serve --example`` process with a probe port, its log in a file."""

    def __init__(
        self,
        tmp: Path,
        *,
        config: str = "",
        limit_files: int | None = None,
        snapshot: Path | None = None,
        liveness_socket: str | None = None,
    ) -> None:
        self.port, self.probe_port = _free_port(), _free_port()
        self.log_path = tmp / "serve.log"
        config_path = tmp / "config.yaml"
        config_path.write_text(config)
        source = ["--snapshot", str(snapshot)] if snapshot is not None else ["--example"]
        command = [sys.executable, "-m", "extender", "serve", *source, "--config", str(config_path)]
        command += ["--port", str(self.port), "--probe-port", str(self.probe_port)]
        command += ["--drain-seconds", "0", "--shutdown-timeout", "1"]
        if liveness_socket is not None:
            command += ["--liveness-socket", liveness_socket]

        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(
                command, stdout=log, stderr=log, env={**os.environ, "PYTHONUNBUFFERED": "1"}
            )
        if limit_files is not None:
            resource.prlimit(self.process.pid, resource.RLIMIT_NOFILE, (limit_files, limit_files))
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection((HOST, self.probe_port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or self.process.poll() is not None:
                    raise RuntimeError(f"serve did not start: {self.log_path.read_text()[-2000:]}") from None
                time.sleep(0.1)
        self.start_mib = self.rss_mib()

    def rss_mib(self) -> float:
        return _status_kib(self.process.pid, "VmRSS") / 1024

    def peak_mib(self) -> float:
        return _status_kib(self.process.pid, "VmHWM") / 1024

    def stop(self) -> str:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self.log_path.read_text(errors="replace")


# --------------------------------------------------------------------------- the scheduler


@dataclass
class SchedulerProbe:
    """Filter calls as the scheduler makes them, one at a time on a keep-alive connection, from a
    thread of its own (its own event loop: the attacks' clients do not delay it)."""

    body: bytes = FILTER
    latencies: list[float] = field(default_factory=list)
    failures: int = 0
    reasons: Counter[str] = field(default_factory=Counter)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self, port: int) -> None:
        self._thread = threading.Thread(target=asyncio.run, args=(self.run(port, self._stop),), daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)

    async def run(self, port: int, stop: threading.Event, interval: float = 0.01) -> None:
        timeout = aiohttp.ClientTimeout(total=5)
        connector = aiohttp.TCPConnector(limit=1)
        async with aiohttp.ClientSession(f"http://{HOST}:{port}", timeout=timeout, connector=connector) as session:
            while not stop.is_set():
                started = time.perf_counter()
                try:
                    async with session.post(
                        "/filter", data=self.body, headers={"Content-Type": "application/json"}
                    ) as r:
                        answer = await r.read()
                        why = "" if r.status == 200 and b'"NodeNames"' in answer else f"status {r.status}"
                except (aiohttp.ClientError, TimeoutError, OSError) as error:
                    why = type(error).__name__
                if not why:
                    self.latencies.append(time.perf_counter() - started)
                else:
                    self.failures += 1
                    self.reasons[why] += 1
                await asyncio.sleep(interval)

    def figures(self) -> dict[str, Any]:
        ordered = sorted(self.latencies)

        def at(q: float) -> float:
            return round(1000 * ordered[int(q * (len(ordered) - 1))], 2) if ordered else 0.0

        return {
            "scheduler_filters": len(ordered),
            "scheduler_failures": self.failures,
            "scheduler_failure_reasons": dict(self.reasons),
            "scheduler_p50_ms": at(0.5),
            "scheduler_p99_ms": at(0.99),
            "scheduler_max_ms": round(1000 * ordered[-1], 2) if ordered else 0.0,
        }


# --------------------------------------------------------------------------- the attacks


async def _open(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
    try:
        return await asyncio.wait_for(asyncio.open_connection(HOST, port), 5)
    except (OSError, TimeoutError):
        return None


async def _send(writer: asyncio.StreamWriter, data: bytes, timeout: float = 5.0) -> bool:
    """Write in slices (no copy of a large body per connection), giving up when the server has
    not read a slice within ``timeout``."""
    view = memoryview(data)
    try:
        for start in range(0, len(view), 1 << 20):
            writer.write(view[start : start + (1 << 20)])
            await asyncio.wait_for(writer.drain(), timeout)
    except (OSError, TimeoutError):
        return False
    return True


def _close(writers: list[asyncio.StreamWriter]) -> None:
    for writer in writers:
        transport = writer.transport
        if not transport.is_closing():
            transport.abort()


async def header_flood(
    port: int, connections: int, *, lines: int, line_bytes: int, finish: bool = False, hold_seconds: float = 1.0
) -> dict[str, Any]:
    """``connections`` connections, each sending ``lines`` header lines of ``line_bytes``; the block
    never ends unless ``finish`` (then a complete request that is never read)."""
    writers: list[asyncio.StreamWriter] = []
    line = b"X-Fill: " + b"a" * line_bytes + b"\r\n"
    head = (b"POST /filter" if finish else b"GET /metrics") + b" HTTP/1.1\r\nHost: x\r\n" + line * lines
    if finish:
        head += b"Content-Length: " + str(len(FILTER)).encode() + b"\r\n\r\n" + FILTER

    async def one() -> None:
        opened = await _open(port)
        if opened is not None:
            writers.append(opened[1])
            await _send(opened[1], head, timeout=2.0)

    for start in range(0, connections, 50):
        await asyncio.gather(*(one() for _ in range(min(50, connections - start))))
    await asyncio.sleep(hold_seconds)
    cut = sum(1 for w in writers if w.transport.is_closing() or w.is_closing())
    _close(writers)
    return {"connections": len(writers), "closed_by_server_or_client": cut}


async def slow_readers(port: int, clients: int, body: bytes, hold_seconds: float) -> dict[str, Any]:
    """Prioritize requests whose answers are never read (the client's own buffer stops at 128 KiB),
    sent one after the other (all at once, their bodies are cut for the budget before any is
    answered), then held for ``hold_seconds``."""
    opened = [o for o in await asyncio.gather(*(_open(port) for _ in range(clients))) if o is not None]
    head = (
        f"POST /prioritize HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    sent = [await _send(writer, head.encode() + body, timeout=30) for _, writer in opened]  # one at a time
    await asyncio.sleep(hold_seconds)
    _close([writer for _, writer in opened])
    return {"clients": len(opened), "requests_sent": sum(sent)}


async def withheld_uploads(port: int, clients: int, size: int, hold_seconds: float) -> dict[str, Any]:
    """Bodies of ``size`` bytes whose last byte never comes."""
    body = b'{"Pod":{},"NodeNames":["' + b"x" * (size - 27) + b'"]}'
    head = f"POST /filter HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    opened = [o for o in await asyncio.gather(*(_open(port) for _ in range(clients))) if o is not None]
    sent = await asyncio.gather(*(_send(writer, head.encode() + body[:-1], timeout=10) for _, writer in opened))
    await asyncio.sleep(hold_seconds)
    _close([writer for _, writer in opened])
    return {"clients": len(opened), "bodies_sent": sum(sent)}


async def metrics_flood(port: int, connections: int, seconds: float, per_second: float) -> dict[str, Any]:
    """``connections`` keep-alive connections scraping ``/metrics``, ``per_second`` scrapes a second
    in all (each connection in turn), for ``seconds``."""
    scrapes = failures = 0
    deadline = time.monotonic() + seconds
    timeout = aiohttp.ClientTimeout(total=10)
    connector = aiohttp.TCPConnector(limit=connections)
    async with aiohttp.ClientSession(f"http://{HOST}:{port}", timeout=timeout, connector=connector) as session:

        async def one(offset: float) -> None:
            nonlocal scrapes, failures
            await asyncio.sleep(offset)
            while time.monotonic() < deadline:
                started = time.monotonic()
                try:
                    async with session.get("/metrics") as response:
                        await response.read()
                        scrapes += response.status == 200
                except (aiohttp.ClientError, TimeoutError, OSError):
                    failures += 1
                await asyncio.sleep(max(0.0, connections / per_second - (time.monotonic() - started)))

        await asyncio.gather(*(one(i / per_second) for i in range(connections)))
    return {"scrapes": scrapes, "scrape_failures": failures, "scrapes_per_second": round(scrapes / seconds, 1)}


async def gzip_slow_readers(port: int, clients: int, body: bytes, hold_seconds: float) -> dict[str, Any]:
    """``slow_readers`` with the body gzip'ed: a few hundred KiB on the wire, ``maxRequestBytes`` plain."""
    packed = gzip.compress(body, compresslevel=9)
    opened = [o for o in await asyncio.gather(*(_open(port) for _ in range(clients))) if o is not None]
    head = (
        "POST /prioritize HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Encoding: gzip\r\n"
        f"Content-Length: {len(packed)}\r\n\r\n"
    )
    sent = await asyncio.gather(*(_send(writer, head.encode() + packed, timeout=30) for _, writer in opened))
    await asyncio.sleep(hold_seconds)
    _close([writer for _, writer in opened])
    return {"clients": len(opened), "requests_sent": sum(sent), "wire_bytes": len(packed)}


async def memory_attacks_together(port: int, seconds: float, scale: float = 1.0) -> dict[str, Any]:
    """Gzip'ed worst-case prioritize bodies, withheld uploads and slow readers, each again and again
    at once for ``seconds`` (issue 29's combined attack)."""
    big = names_body(DEFAULT_MAX_REQUEST_BYTES - 4096, MAX_CANDIDATES)
    rounds: Counter[str] = Counter()
    deadline = time.monotonic() + seconds
    attacks = {
        "gzip": lambda: gzip_slow_readers(port, max(1, round(6 * scale)), big, 2.0),
        "uploads": lambda: withheld_uploads(
            port, max(1, round(12 * scale)), DEFAULT_MAX_REQUEST_BYTES - 1024 * 1024, 2.0
        ),
        "slow-readers": lambda: slow_readers(port, max(1, round(6 * scale)), big, 2.0),
    }

    async def again(name: str) -> None:
        while time.monotonic() < deadline:
            await attacks[name]()
            rounds[name] += 1

    await asyncio.gather(*(again(name) for name in attacks))
    return {"rounds": dict(rounds)}


# --------------------------------------------------------------------------- one attack, measured


async def _measured(serve: Serve, attack: Callable[[], Awaitable[dict[str, Any]]]) -> dict[str, Any]:
    stop = asyncio.Event()
    scheduler = SchedulerProbe()
    peak = serve.rss_mib()

    async def sample() -> None:
        nonlocal peak
        while not stop.is_set():
            peak = max(peak, serve.rss_mib())
            await asyncio.sleep(0.02)

    scheduler.start(serve.port)
    sampling = asyncio.create_task(sample())
    started = time.monotonic()
    try:
        result = await attack()
    finally:
        stop.set()
        scheduler.stop()
        await sampling
    seconds = time.monotonic() - started
    await asyncio.sleep(6.0)  # the server gives memory back every 5 s after a burst
    return {
        **result,
        "seconds": round(seconds, 1),
        "rss_start_mib": round(serve.start_mib, 1),
        "rss_peak_mib": round(max(peak, serve.peak_mib()), 1),
        "rss_after_mib": round(serve.rss_mib(), 1),
        "chart_limit_mib": CHART_MEMORY_LIMIT_MIB,
        **scheduler.figures(),
    }


def attacks(scale: float) -> dict[str, Callable[[int, int], Awaitable[dict[str, Any]]]]:
    """Each attack at ``scale`` (1.0: the issue's sizes), given the verbs and probe ports."""
    many = max(1, round(400 * scale))
    big = names_body(DEFAULT_MAX_REQUEST_BYTES - 4096, MAX_CANDIDATES)
    return {
        "probe-headers": lambda verbs, probe: header_flood(probe, many, lines=127, line_bytes=8100),
        "probe-headers-within-limits": lambda verbs, probe: header_flood(probe, many, lines=31, line_bytes=4000),
        "verbs-headers": lambda verbs, probe: header_flood(
            verbs, max(1, round(300 * scale)), lines=31, line_bytes=4000, finish=True
        ),
        "slow-readers": lambda verbs, probe: slow_readers(verbs, max(1, round(6 * scale)), big, 12.0 * scale + 1),
        "withheld-uploads": lambda verbs, probe: withheld_uploads(
            verbs, max(1, round(12 * scale)), DEFAULT_MAX_REQUEST_BYTES - 1024 * 1024, 2.0
        ),
    }


def run_attack(name: str, scale: float = 1.0) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        serve = Serve(Path(tmp))
        try:
            figures = asyncio.run(_measured(serve, lambda: attacks(scale)[name](serve.port, serve.probe_port)))
        finally:
            log = serve.stop()
    return {"attack": name, **figures, **_logged(log)}


def memory_together(seconds: float = 40.0) -> dict[str, Any]:
    """Issue 29's combined memory attack (``memory_attacks_together``) against a fresh ``serve``."""
    with tempfile.TemporaryDirectory() as tmp:
        serve = Serve(Path(tmp))
        try:
            figures = asyncio.run(_measured(serve, lambda: memory_attacks_together(serve.port, seconds)))
        finally:
            log = serve.stop()
    return {"attack": "memory-together", **figures, **_logged(log)}


def _logged(log: str) -> dict[str, int]:
    return {
        "log_lines": log.count("\n"),
        "tracebacks_logged": log.count("Traceback"),
        "connections_evicted_logged": log.count("connections open (the cap)"),
        "bodies_cut_logged": sum(1 for line in log.splitlines() if "a body from" in line and " cut: " in line),
        "answers_cut_logged": sum(1 for line in log.splitlines() if "an answer of" in line and " cut: " in line),
    }


# --------------------------------------------------------------------------- file descriptors


def descriptor_exhaustion(files: int = 64, connections: int = 150, hold_seconds: float = 3.0) -> dict[str, Any]:
    """``serve`` limited to ``files`` descriptors, ``connections`` opened and held: its log's size."""
    with tempfile.TemporaryDirectory() as tmp:
        serve = Serve(Path(tmp), limit_files=files)
        held = []
        try:
            for _ in range(connections):
                with contextlib.suppress(OSError):
                    held.append(socket.create_connection((HOST, serve.port), timeout=1))
            time.sleep(hold_seconds)
        finally:
            for sock in held:
                sock.close()
            log = serve.stop()
    return {
        "files": files,
        "connections": len(held),
        "seconds": hold_seconds,
        "log_bytes": len(log),
        "log_lines": log.count("\n"),
        "accept_errors_logged": log.count("socket.accept() out of system resource"),
        "tracebacks_logged": log.count("Traceback"),
    }


# --------------------------------------------------------------------------- /metrics at scale


def _flood_process(port: int, connections: int, seconds: float, per_second: float) -> subprocess.Popen[bytes]:
    """``metrics_flood`` in a process of its own (its clients do not compete with the scheduler's
    for this process's interpreter); its figures are its output."""
    code = (
        "import asyncio, json; from benchmarks.hostile_load import metrics_flood; "
        f"print(json.dumps(asyncio.run(metrics_flood({port}, {connections}, {seconds}, {per_second}))))"
    )
    root = str(Path(__file__).resolve().parents[1])
    return subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, env={**os.environ, "PYTHONPATH": root}, cwd=root
    )


def metrics_under_scrapes(
    nodes: int = 15_000, connections: int = 64, per_second: float = 64.0, seconds: float = 8.0
) -> dict[str, Any]:
    """``serve`` over ``nodes`` nodes: the scheduler's filter latency for ``seconds`` alone, then for
    ``seconds`` while ``connections`` scrape ``/metrics`` (``per_second`` in all) from another process."""
    documents = node_documents(nodes)
    body = request_body(documents[:200], full_nodes=False, hugepages="1Gi", namespace="default")
    with tempfile.TemporaryDirectory() as tmp:
        snapshot = Path(tmp) / "snapshot.json"
        snapshot.write_bytes(msgspec.json.encode({"kind": "List", "items": documents}))
        del documents
        serve = Serve(Path(tmp), config="defaults: {mode: enforce, sampleSize: 3}\n", snapshot=snapshot)
        try:
            alone = _filters_for(serve.port, body, seconds)
            flood = _flood_process(serve.probe_port, connections, seconds + 2, per_second)
            time.sleep(1.5)  # the flood's process starts, its connections open
            scraped = _filters_for(serve.port, body, seconds)
            flooded = json.loads(flood.communicate(timeout=60)[0])
            rss = serve.rss_mib()
        finally:
            serve.stop()
    return {
        "nodes": nodes,
        "scrape_connections": connections,
        **flooded,
        "filter_p50_ms_alone": alone["scheduler_p50_ms"],
        "filter_p50_ms_scraped": scraped["scheduler_p50_ms"],
        "filter_p99_ms_alone": alone["scheduler_p99_ms"],
        "filter_p99_ms_scraped": scraped["scheduler_p99_ms"],
        "filters_alone": alone["scheduler_filters"],
        "filters_scraped": scraped["scheduler_filters"],
        "filter_failures": alone["scheduler_failures"] + scraped["scheduler_failures"],
        "rss_mib": round(rss, 1),
    }


def _filters_for(port: int, body: bytes, seconds: float) -> dict[str, Any]:
    scheduler = SchedulerProbe(body=body)
    scheduler.start(port)
    time.sleep(seconds)
    scheduler.stop()
    return scheduler.figures()


# --------------------------------------------------------------------------- probes under connection churn


async def connection_churn(port: int, clients: int, seconds: float, host: str = HOST) -> dict[str, Any]:
    """``clients`` clients each opening a connection, sending a ``/healthz`` request and closing
    without waiting for the answer, again and again for ``seconds``."""
    opened = refused = 0
    deadline = time.monotonic() + seconds
    request = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"

    async def one() -> None:
        nonlocal opened, refused
        while time.monotonic() < deadline:
            try:
                _, writer = await asyncio.wait_for(asyncio.open_connection(host, port), 2)
            except (OSError, TimeoutError):
                refused += 1
                await asyncio.sleep(0.01)
                continue
            opened += 1
            writer.write(request)
            await asyncio.sleep(0)
            writer.transport.abort()

    await asyncio.gather(*(one() for _ in range(clients)))
    return {"churn_clients": clients, "connections_opened": opened, "connections_per_second": round(opened / seconds)}


def _churn_process(port: int, clients: int, seconds: float) -> subprocess.Popen[bytes]:
    code = (
        "import asyncio, json; from benchmarks.hostile_load import connection_churn; "
        f"print(json.dumps(asyncio.run(connection_churn({port}, {clients}, {seconds}))))"
    )
    root = str(Path(__file__).resolve().parents[1])
    return subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, env={**os.environ, "PYTHONPATH": root}, cwd=root
    )


LIVENESS_TIMEOUT_SECONDS = 2.0  # charts/hugepage-extender/values.yaml, livenessProbe.timeoutSeconds


def probe_once(port: int, source: str, timeout: float = LIVENESS_TIMEOUT_SECONDS) -> str:
    """A kubelet's HTTP probe: a fresh connection (from ``source``), ``GET /healthz``, 200 within
    ``timeout`` (the chart's ``timeoutSeconds``); "" when it passed, else why not."""
    phase = "connect"
    try:
        with socket.create_connection((HOST, port), timeout=timeout, source_address=(source, 0)) as sock:
            phase = "answer"
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            answer = b""
            while chunk := sock.recv(4096):
                answer += chunk
    except OSError as error:
        return f"{type(error).__name__} ({phase})"
    return "" if answer.startswith(b"HTTP/1.1 200") else f"answer {answer[:20]!r}"


def exec_probe_once(name: str, timeout: float = LIVENESS_TIMEOUT_SECONDS) -> str:
    """The chart's liveness probe as the kubelet runs it: ``python -m extender.shell.alive NAME`` in the
    container, failed when it exits non-zero or takes longer than ``timeout``; "" when it passed."""
    try:
        done = subprocess.run(
            [sys.executable, "-m", "extender.shell.alive", name], capture_output=True, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired:
        return "TimeoutExpired"
    return "" if done.returncode == 0 else done.stderr.decode(errors="replace").strip()[-80:]


def _probing(probe: Callable[[], str], seconds: float, interval: float) -> dict[str, Any]:
    outcomes: list[str] = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        started = time.monotonic()
        outcomes.append(probe())
        time.sleep(max(0.0, interval - (time.monotonic() - started)))
    run = longest = 0
    for outcome in outcomes:
        run = run + 1 if outcome else 0
        longest = max(longest, run)
    failed = [o for o in outcomes if o]
    return {
        "probes": len(outcomes),
        "failed": len(failed),
        "failure_reasons": dict(Counter(failed)),
        "failures_in_a_row_max": longest,
    }


def probes_under_churn(
    serve: Serve,
    *,
    clients: int = 1024,
    seconds: float = 20.0,
    interval: float = 0.5,
    source: str = "127.0.0.2",
    liveness_socket: str | None = None,
) -> dict[str, Any]:
    """While ``clients`` churn connections to the probe port from another process: HTTP probes
    every ``interval`` from ``source`` (a kubelet's address, not the flood's), and with
    ``liveness_socket`` the chart's exec liveness probe every ``interval`` too: failures, and the
    longest run of failures in a row (three failed liveness probes restart the container)."""
    churn = _churn_process(serve.probe_port, clients, seconds + 1)
    time.sleep(1.0)  # the churn under way
    results: dict[str, Any] = {}
    threads = [
        threading.Thread(
            target=lambda: results.update(
                http=_probing(lambda: probe_once(serve.probe_port, source), seconds, interval)
            )
        )
    ]
    if liveness_socket is not None:
        threads.append(
            threading.Thread(
                target=lambda: results.update(
                    liveness=_probing(lambda: exec_probe_once(liveness_socket), seconds, interval)
                )
            )
        )
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    churned = json.loads(churn.communicate(timeout=60)[0])
    return {**churned, **{f"{kind}_probes": figures for kind, figures in results.items()}}


# --------------------------------------------------------------------------- names from requests

NAMES_CONFIG = "defaults: {mode: shadow, sampleSize: 3}\nnamespaces:\n  dpdk: {mode: enforce, sampleSize: 3}\n"


def _made_up_filter(i: int) -> bytes:
    """A filter no node can pass (1Ti): even ``i`` a pod of a namespace of its own (shadow: a
    would-be rejection), odd ``i`` a pod of ``dpdk`` (enforced) under a UID of its own."""
    namespace, uid = (f"ns-{i}", f"uid-ns-{i}") if i % 2 == 0 else ("dpdk", f"made-up-{i}")
    pod = {
        "metadata": {"name": f"p{i}", "namespace": namespace, "uid": uid},
        "spec": {"containers": [{"name": "c", "resources": {"requests": {"hugepages-2Mi": "1Ti"}}}]},
    }
    body = json.dumps({"Pod": pod, "NodeNames": NODES}).encode()
    return b"POST /filter HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)


async def _answered(reader: asyncio.StreamReader) -> int:
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(
        int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")
    )
    await reader.readexactly(length)
    return int(head.split(b" ", 2)[1])


async def made_up_names(serve: Serve, requests: int, connections: int = 8, checkpoints: int = 10) -> dict[str, Any]:
    """``requests`` filters of made-up pods (``_made_up_filter``) on ``connections`` connections, each
    sending its next request once answered; RSS after every ``requests / checkpoints``."""
    rss: list[float] = []
    statuses: Counter[int] = Counter()
    step = max(1, requests // checkpoints)
    counter = iter(range(requests))

    async def one() -> None:
        reader, writer = await asyncio.open_connection(HOST, serve.port)
        try:
            for i in counter:
                writer.write(_made_up_filter(i))
                statuses[await _answered(reader)] += 1
                if (i + 1) % step == 0:
                    rss.append(round(serve.rss_mib(), 1))
        finally:
            writer.close()

    started = time.monotonic()
    await asyncio.gather(*(one() for _ in range(connections)))
    seconds = time.monotonic() - started
    async with aiohttp.ClientSession() as session, session.get(f"http://{HOST}:{serve.probe_port}/metrics") as r:
        page = await r.text()
    series = [line for line in page.splitlines() if line.startswith("hugepage_extender_shadow_rejected_pods_total{")]
    waiting = next(line for line in page.splitlines() if line.startswith("hugepage_extender_waiting_pods "))
    return {
        "requests": requests,
        "seconds": round(seconds, 1),
        "statuses": {str(k): v for k, v in statuses.items()},
        "rss_start_mib": round(serve.start_mib, 1),
        "rss_mib_at_checkpoints": rss,
        "rss_peak_mib": round(serve.peak_mib(), 1),
        "shadow_rejected_series": len(series),
        "waiting_pods": float(waiting.split()[1]),
        "metrics_bytes": len(page),
    }


def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def descriptor_lockout(files: int = 64, connections: int = 150, seconds: float = 6.0) -> dict[str, Any]:
    """``serve`` limited to ``files`` descriptors, ``connections`` opened to the verbs and held idle:
    meanwhile a scheduler's filter on a fresh connection every 0.5 s (5 s timeout), and the server's CPU."""
    with tempfile.TemporaryDirectory() as tmp:
        serve = Serve(Path(tmp), limit_files=files)
        held = []
        try:
            for _ in range(connections):
                with contextlib.suppress(OSError):
                    held.append(socket.create_connection((HOST, serve.port), timeout=1))
            time.sleep(0.5)
            cpu = _cpu_seconds(serve.process.pid)
            outcomes: list[float | None] = []
            started = time.monotonic()
            while time.monotonic() - started < seconds:
                began = time.monotonic()
                outcomes.append(_filter_once(serve.port) and time.monotonic() - began)
                time.sleep(max(0.0, 0.5 - (time.monotonic() - began)))
            cpu = _cpu_seconds(serve.process.pid) - cpu
            elapsed = time.monotonic() - started
        finally:
            for sock in held:
                sock.close()
            log = serve.stop()
    answered = [t for t in outcomes if t]
    return {
        "files": files,
        "connections_held": len(held),
        "filters": len(outcomes),
        "filters_answered": len(answered),
        "filter_max_seconds": round(max(answered), 3) if answered else None,
        "server_cpu_percent": round(100 * cpu / elapsed, 1),
        "accept_errors_logged": log.count("socket.accept() out of system resource"),
    }


def _filter_once(port: int, timeout: float = 5.0) -> bool:
    head = f"POST /filter HTTP/1.1\r\nHost: x\r\nContent-Length: {len(FILTER)}\r\nConnection: close\r\n\r\n"
    try:
        with socket.create_connection((HOST, port), timeout=timeout) as sock:
            sock.sendall(head.encode() + FILTER)
            answer = b""
            while chunk := sock.recv(65536):
                answer += chunk
    except OSError:
        return False
    return answer.startswith(b"HTTP/1.1 200") and b'"NodeNames"' in answer


# --------------------------------------------------------------------------- fuzz and floods together


async def _combined(serve: Serve, requests: int, seconds: float, scale: float) -> dict[str, Any]:
    floods = attacks(scale)
    order = ["probe-headers", "probe-headers-within-limits", "verbs-headers", "withheld-uploads", "slow-readers"]
    stop = asyncio.Event()
    rounds: dict[str, int] = dict.fromkeys(order, 0)

    async def flood() -> None:
        deadline = time.monotonic() + seconds
        while not stop.is_set() and time.monotonic() < deadline:
            for name in order:
                if stop.is_set() or time.monotonic() >= deadline:
                    break
                await floods[name](serve.port, serve.probe_port)
                rounds[name] += 1

    flooding = asyncio.create_task(flood())
    done = [0]

    async def fuzz() -> dict[str, Any]:
        tally = await run_requests(serve.port, 1, requests, 4, lambda n: done.__setitem__(0, n))
        return tally.figures()

    async def both() -> dict[str, Any]:
        fuzzed = await fuzz()
        stop.set()
        await flooding
        return {"fuzz": fuzzed, "flood_rounds": rounds}

    return await _measured(serve, both)


def combined(requests: int = 100_000, seconds: float = 600.0, scale: float = 0.5) -> dict[str, Any]:
    """The fuzz's requests while the floods run, until the fuzz is done (or ``seconds``)."""
    with tempfile.TemporaryDirectory() as tmp:
        # The fuzz's namespaces, with the default maxRequestBytes the floods are sized for.
        config = FUZZ_CONFIG.replace(f"maxRequestBytes: {FUZZ_MAX_REQUEST_BYTES}", "")
        serve = Serve(Path(tmp), config=config)
        try:
            figures = asyncio.run(_combined(serve, requests, seconds, scale))
        finally:
            log = serve.stop()
    fuzzed = figures.pop("fuzz")
    return {
        "attack": "combined",
        **figures,
        "fuzz_requests": fuzzed["requests"],
        "fuzz_server_errors": fuzzed["server_errors"],
        "fuzz_status": fuzzed["status"],
        "fuzz_p99_ms": round(1000 * fuzzed["p99_seconds"], 1),
        "fuzz_max_ms": round(1000 * fuzzed["max_seconds"], 1),
        **_logged(log),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.hostile_load", description=__doc__.split("\n\n")[0])
    parser.add_argument("--scale", type=float, default=1.0, help="1.0: the issue's sizes")
    names = [*attacks(1.0), "descriptors", "combined", "metrics-scrapes", "memory-together"]
    parser.add_argument("--attacks", nargs="*", choices=names, default=names)
    parser.add_argument("--combined-requests", type=int, default=100_000)
    parser.add_argument("--json", type=Path, help="write the figures here too")
    args = parser.parse_args(argv)
    results = []
    for name in args.attacks:
        if name == "descriptors":
            figures = {"attack": name, **descriptor_exhaustion()}
        elif name == "metrics-scrapes":
            figures = {"attack": name, **metrics_under_scrapes()}
        elif name == "memory-together":
            figures = memory_together()
        elif name == "combined":
            figures = combined(args.combined_requests, scale=args.scale / 2)
        else:
            figures = run_attack(name, args.scale)
        print(json.dumps(figures), flush=True)
        results.append(figures)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    over = [r["attack"] for r in results if r.get("rss_peak_mib", 0) > CHART_MEMORY_LIMIT_MIB * 0.8]
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
