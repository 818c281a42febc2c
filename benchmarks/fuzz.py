"""Hostile-input fuzzing of ``hugepage-extender serve`` over real sockets (issue 11).

A fresh ``serve`` process (the bundled example cluster, enforce by default, a shadow and
an off namespace) answers generated requests across every verb and probe: valid
filter/prioritize in both wire modes, odd quantities (NaN, sNaN, Infinity, 1e999999, a
100,000-digit number, ...), deep nesting, malformed and truncated JSON, wrong types,
Content-Encoding mismatches, control characters in names, binds, too many candidates,
bodies over ``maxRequestBytes``, clients that leave mid-body and clients that send
their body slowly. Seeded: the same seed sends the same requests.

What it checks: no answer is a 5xx, every answer arrives within 1 s, and the server's
RSS grows by at most 50 MiB from after the warm-up to the end.

Run (docs/reliability.md): ``python -m benchmarks.fuzz --requests 100000 --seed 1``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import gzip
import json
import random
import socket
import subprocess
import sys
import tempfile
import time
import zlib
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

NODES = ["hp-roomy-1", "hp-roomy-2", "hp-busy", "hp-full", "hp-small", "hp-vm-host"]
NAMESPACES = ["default", "dpdk", "vms", "shadowed", "unfiltered", "hugepage-extender"]
MAX_REQUEST_BYTES = 2 * 1024 * 1024
CONFIG = f"""
maxRequestBytes: {MAX_REQUEST_BYTES}
defaults: {{mode: enforce, sampleSize: 3}}
namespaces:
  shadowed: {{mode: shadow}}
  unfiltered: {{mode: "off"}}
  vms: {{mode: enforce, needFromMemory: true, sampleSize: 16}}
"""
ODD_QUANTITIES: list[Any] = [
    "NaN", "nan", "sNaN", "-sNaN", "Infinity", "-Infinity", "inf", "+inf", "1e999999", "1e1000000", "1e400",
    "1e-999999", "9" * 100_000, "1" * 5_000 + "Gi", "1e" + "9" * 60, "-1", "-0", "0x10", "1_000", " 1", "1 ",
    "1.5.5", "1Zi", "1ki", "٣", "1\n", "", ".", "e3", "1e", "1.5e3Ki", "8Ei", "7Ei", "9223372036854775808",
    True, False, None, 1e308, -1, 2**63, [], {}, ["1Gi"], {"value": "1Gi"},
]  # fmt: skip
VALID_QUANTITIES = ["0", "1", "2Mi", "512Mi", "1Gi", "1.5Gi", "4Gi", "100m", "2", "500m", "1e3", "64Gi", "0.1", 3, 2.5]


@dataclass
class Outcome:
    kind: str
    status: int | None  # None: no answer expected (the client left)
    seconds: float


@dataclass
class Tally:
    outcomes: list[Outcome] = field(default_factory=list)

    def figures(self) -> dict[str, Any]:
        answered = [o for o in self.outcomes if o.status is not None]
        latencies = sorted(o.seconds for o in answered)
        server_errors = [o for o in answered if o.status is not None and o.status >= 500]
        return {
            "requests": len(self.outcomes),
            "answered": len(answered),
            "status": dict(sorted(Counter(str(o.status) for o in self.outcomes).items())),
            "kinds": dict(sorted(Counter(o.kind for o in self.outcomes).items())),
            "server_errors": len(server_errors),
            "server_error_kinds": dict(Counter(o.kind for o in server_errors)),
            "slower_than_1s": sum(1 for s in latencies if s > 1.0),
            "slow_kinds": dict(Counter(f"{o.kind} {o.status}" for o in answered if o.seconds > 1.0)),
            "max_seconds": round(latencies[-1], 4) if latencies else 0.0,
            "p99_seconds": round(latencies[int(0.99 * (len(latencies) - 1))], 4) if latencies else 0.0,
        }


# --------------------------------------------------------------------------- request generators


@dataclass
class Request:
    kind: str
    path: str
    body: bytes = b""
    method: str = "POST"
    headers: dict[str, str] = field(default_factory=dict)
    leave_after: int | None = None  # send this many body bytes, then close without reading
    slow: bool = False  # send the body in a few pieces with pauses


def _pod(rng: random.Random, quantity: Any = None, where: str = "hugepages-2Mi") -> dict[str, Any]:
    requests: dict[str, Any] = {}
    if rng.random() < 0.8:
        requests["hugepages-2Mi"] = rng.choice(VALID_QUANTITIES)
    if rng.random() < 0.7:
        requests["cpu"] = rng.choice(VALID_QUANTITIES)
    if rng.random() < 0.3:
        requests["memory"] = rng.choice(VALID_QUANTITIES)
    if quantity is not None:
        requests[where] = quantity
    name = rng.choice(["web-0", "db", "vm-1", f"p-{rng.randrange(10**6)}"])
    containers = [{"name": "c", "resources": {"requests": requests}}]
    if rng.random() < 0.2:
        containers.append({"name": "side", "resources": {"limits": {"cpu": rng.choice(VALID_QUANTITIES)}}})
    return {
        "metadata": {"name": name, "namespace": rng.choice(NAMESPACES), "uid": f"uid-{rng.randrange(5000)}"},
        "spec": {"containers": containers},
    }


def _names(rng: random.Random) -> list[str]:
    names = rng.sample(NODES, rng.randrange(0, len(NODES) + 1))
    if rng.random() < 0.3:
        names += [f"unknown-{rng.randrange(100)}" for _ in range(rng.randrange(1, 20))]
    return names


def _node(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}}, "status": {"allocatable": {}}}


def _args(rng: random.Random, pod: dict[str, Any]) -> dict[str, Any]:
    names = _names(rng)
    if rng.random() < 0.25:
        return {"Pod": pod, "Nodes": {"items": [_node(n) for n in names]}, "NodeNames": None}
    key = rng.choice(["NodeNames", "nodenames", "nodeNames"]) if rng.random() < 0.1 else "NodeNames"
    return {"Pod": pod, key: names}


def _post(kind: str, verb: str, document: Any, **kwargs: Any) -> Request:
    body = document if isinstance(document, bytes) else json.dumps(document).encode()
    return Request(kind, f"/{verb}", body, **kwargs)


def _verb(rng: random.Random) -> str:
    return rng.choice(["filter", "prioritize"])


def valid(rng: random.Random) -> Request:
    return _post("valid", _verb(rng), _args(rng, _pod(rng)))


def odd_quantity(rng: random.Random) -> Request:
    where = rng.choice(["hugepages-2Mi", "cpu", "memory"])
    return _post("odd-quantity", _verb(rng), _args(rng, _pod(rng, rng.choice(ODD_QUANTITIES), where)))


def deep(rng: random.Random) -> Request:
    depth = rng.choice([50, 500, 1000, 5000, 100_000])
    nested = b"[" * depth + b"]" * depth if rng.random() < 0.5 else b'{"a":' * depth + b"1" + b"}" * depth
    spot = rng.randrange(3)
    if spot == 0:
        body = b'{"Pod":{"spec":{"x":' + nested + b'}},"NodeNames":["hp-full"]}'
    elif spot == 1:
        body = b'{"Pod":' + nested + b',"NodeNames":[]}'
    else:
        body = b'{"Pod":{},"NodeNames":' + nested + b"}"
    return _post("deep", rng.choice(["filter", "prioritize", "bind"]), body)


def malformed(rng: random.Random) -> Request:
    body = bytearray(json.dumps(_args(rng, _pod(rng))).encode())
    how = rng.randrange(4)
    if how == 0:
        body = body[: rng.randrange(len(body))]
    elif how == 1:
        for _ in range(rng.randrange(1, 8)):
            body[rng.randrange(len(body))] = rng.randrange(256)
    elif how == 2:
        body = bytearray(rng.randbytes(rng.randrange(1, 2000)))
    else:
        body = bytearray(rng.choice([b"", b"null", b"[]", b"1", b'"x"', b"{}", b'{"Pod":null}', b'{"Pod":{}}']))
    return _post("malformed", rng.choice(["filter", "prioritize", "bind"]), bytes(body))


def _mutate(rng: random.Random, value: Any, depth: int = 0) -> Any:
    """``value`` with one random part replaced by a value of another type."""
    odd = rng.choice([None, True, 1, -1, 1.5, "x", "\n", [], {}, [1], {"a": None}, "9" * 400, 2**70])
    if depth > 6 or rng.random() < 0.2:
        return odd
    if isinstance(value, dict) and value:
        key = rng.choice(list(value))
        return {**value, key: _mutate(rng, value[key], depth + 1)}
    if isinstance(value, list) and value:
        i = rng.randrange(len(value))
        return [*value[:i], _mutate(rng, value[i], depth + 1), *value[i + 1 :]]
    return odd


def wrong_types(rng: random.Random) -> Request:
    return _post("wrong-types", _verb(rng), _mutate(rng, _args(rng, _pod(rng))))


def encoding(rng: random.Random) -> Request:
    body = json.dumps(_args(rng, _pod(rng))).encode()
    how = rng.randrange(5)
    if how == 0:
        return _post("encoding", _verb(rng), body, headers={"Content-Encoding": "gzip"})  # says gzip, is not
    if how == 1:
        return _post("encoding", _verb(rng), body, headers={"Content-Encoding": "deflate"})
    if how == 2:
        return _post("encoding", _verb(rng), body, headers={"Content-Encoding": rng.choice(["br", "zstd", "x"])})
    if how == 3:
        return _post("encoding", _verb(rng), gzip.compress(body), headers={"Content-Encoding": "gzip"})
    return _post(
        "encoding", _verb(rng), zlib.compress(body)[: rng.randrange(1, 40)], headers={"Content-Encoding": "deflate"}
    )


def names_with_controls(rng: random.Random) -> Request:
    pod = _pod(rng)
    pod["metadata"]["name"] = rng.choice(["a\nERROR forged", "\x00\x1b[31m", "é" * 300, "x" * 100_000, "\u2028"])
    pod["metadata"]["namespace"] = rng.choice(["default", "ns\nINFO x", "\t"])
    pod["spec"]["containers"][0]["resources"]["requests"]["hugepages-2Mi"] = "1Ti"  # nothing fits: logged
    return _post("control-characters", "filter", _args(rng, pod))


def bind(rng: random.Random) -> Request:
    document: Any = {
        "PodName": rng.choice(["web-0", "", "x\ny"]),
        "PodNamespace": rng.choice(["default", "kube-system", ""]),
        "PodUID": rng.choice([f"uid-{rng.randrange(5000)}", ""]),
        "Node": rng.choice([*NODES, "", "nowhere"]),
    }
    if rng.random() < 0.3:
        document = _mutate(rng, document)
    return _post("bind", "bind", document)


@functools.cache
def _many_names(count: int) -> bytes:
    """Built once per size: encoding 150,000 names takes the client long enough to delay
    its reading of other answers, which would count against the server."""
    return json.dumps([f"n{i}" for i in range(count)]).encode()


def many_candidates(rng: random.Random) -> Request:
    count = rng.choice([5_000, 100_000, 100_001, 150_000])
    pod = json.dumps(_pod(rng)).encode()
    return _post("many-candidates", _verb(rng), b'{"Pod":' + pod + b',"NodeNames":' + _many_names(count) + b"}")


def oversized(rng: random.Random) -> Request:
    size = MAX_REQUEST_BYTES + rng.randrange(1, 1_000_000)
    body = b'{"Pod":{},"NodeNames":["' + b"x" * size + b'"]}'
    return _post("oversized", _verb(rng), body)


def leaves(rng: random.Random) -> Request:
    request = valid(rng)
    request.kind, request.leave_after = "client-leaves", rng.randrange(0, len(request.body))
    return request


def slow(rng: random.Random) -> Request:
    request = valid(rng)
    request.kind, request.slow = "slow-body", True
    return request


def probe(rng: random.Random) -> Request:
    return Request("probe", rng.choice(["/healthz", "/readyz", "/metrics"]), method="GET")


GENERATORS: list[tuple[Callable[[random.Random], Request], float]] = [
    (valid, 30),
    (odd_quantity, 14),
    (deep, 5),
    (malformed, 12),
    (wrong_types, 12),
    (encoding, 6),
    (names_with_controls, 4),
    (bind, 6),
    (many_candidates, 0.5),
    (oversized, 0.3),
    (leaves, 4),
    (slow, 0.5),
    (probe, 5),
]


def generate(rng: random.Random) -> Request:
    functions = [function for function, _ in GENERATORS]
    weights = [weight for _, weight in GENERATORS]
    chosen: Callable[[random.Random], Request] = rng.choices(functions, weights)[0]
    return chosen(rng)


# --------------------------------------------------------------------------- the client


async def send(port: int, request: Request) -> Outcome:
    started = time.perf_counter()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        headers = {"Host": "fuzz", "Connection": "close", **request.headers}
        if request.method == "POST":
            headers.setdefault("Content-Type", "application/json")
            headers["Content-Length"] = str(len(request.body))
        head = f"{request.method} {request.path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        writer.write(head.encode() + b"\r\n")
        if request.leave_after is not None:
            writer.write(request.body[: request.leave_after])
            await writer.drain()
            return Outcome(request.kind, None, time.perf_counter() - started)
        if request.slow:
            third = max(1, len(request.body) // 3)
            for i in range(0, len(request.body), third):
                writer.write(request.body[i : i + third])
                await writer.drain()
                await asyncio.sleep(0.05)
            started = time.perf_counter()  # the answer's time counts from the last byte
        else:
            writer.write(request.body)
        await writer.drain()
        status_line = await reader.readline()
        await reader.read()  # Connection: close: the rest is the answer
        status = int(status_line.split()[1]) if status_line.startswith(b"HTTP/") else 0
        return Outcome(request.kind, status, time.perf_counter() - started)
    except (ConnectionResetError, BrokenPipeError):
        # The server may close on a refused body (413) while the rest is being sent.
        return Outcome(request.kind, 0, time.perf_counter() - started)
    finally:
        writer.close()
        with contextlib.suppress(ConnectionResetError, BrokenPipeError):
            await writer.wait_closed()


async def run_requests(port: int, seed: int, count: int, workers: int, after: Callable[[int], None]) -> Tally:
    rng = random.Random(seed)
    tally = Tally()
    queue: asyncio.Queue[Request | None] = asyncio.Queue(maxsize=workers * 4)

    async def worker() -> None:
        while (request := await queue.get()) is not None:
            tally.outcomes.append(await send(port, request))
            after(len(tally.outcomes))

    tasks = [asyncio.create_task(worker()) for _ in range(workers)]
    for _ in range(count):
        await queue.put(generate(rng))
    for _ in tasks:
        await queue.put(None)
    await asyncio.gather(*tasks)
    return tally


# --------------------------------------------------------------------------- the server


SERVE = [
    sys.executable,
    "-m",
    "extender",
    "--log-level",
    "warning",
    "serve",
    "--example",
    "--extender-namespace",
    "hugepage-extender",
]


def _rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise KeyError("VmRSS")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def fuzz(requests: int, seed: int, *, workers: int = 4, warmup: int = 500, log: Path | None = None) -> dict[str, Any]:
    """Start ``serve``, send ``requests`` generated requests, return the figures."""
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "config.yaml"
        config.write_text(CONFIG)
        port = _free_port()
        log_file = (log or Path(tmp) / "serve.log").open("wb")
        process = subprocess.Popen(
            [*SERVE, "--port", str(port), "--config", str(config)],
            stdout=log_file,
            stderr=log_file,
        )
        try:
            deadline = time.monotonic() + 30
            while True:
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=1).close()
                    break
                except OSError:
                    if time.monotonic() > deadline or process.poll() is not None:
                        raise RuntimeError("serve did not start") from None
                    time.sleep(0.1)
            rss: dict[str, float] = {"start": _rss_mib(process.pid)}

            def after(done: int) -> None:
                if done == min(warmup, requests):
                    rss["after_warmup"] = _rss_mib(process.pid)
                rss["peak"] = (
                    max(rss.get("peak", 0.0), _rss_mib(process.pid)) if done % 100 == 0 else rss.get("peak", 0)
                )

            started = time.monotonic()
            tally = asyncio.run(run_requests(port, seed, requests, workers, after))
            elapsed = time.monotonic() - started
            rss["end"] = _rss_mib(process.pid)
            alive = process.poll() is None
        finally:
            process.terminate()
            process.wait(timeout=30)
            log_file.close()
        logged = (log or Path(tmp) / "serve.log").read_text(errors="replace")
    figures = tally.figures()
    base = rss.get("after_warmup", rss["start"])
    return {
        "seed": seed,
        "seconds": round(elapsed, 1),
        **figures,
        "rss_start_mib": round(rss["start"], 1),
        "rss_after_warmup_mib": round(base, 1),
        "rss_end_mib": round(rss["end"], 1),
        "rss_peak_mib": round(max(rss.get("peak", 0.0), rss["end"]), 1),
        "rss_growth_mib": round(rss["end"] - base, 1),
        "server_alive": alive,
        "tracebacks_logged": logged.count("Traceback"),
        "error_lines_logged": sum(1 for line in logged.splitlines() if " ERROR " in line),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.fuzz", description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--json", type=Path, help="write the figures here too")
    args = parser.parse_args(argv)
    figures = fuzz(args.requests, args.seed, workers=args.workers)
    text = json.dumps(figures, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    ok = (
        figures["server_errors"] == 0
        and figures["slower_than_1s"] == 0
        and figures["rss_growth_mib"] <= 50
        and figures["server_alive"]
        and figures["tracebacks_logged"] == 0
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
