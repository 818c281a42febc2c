"""Peak RSS of ``hugepage-extender serve`` answering the worst requests ``maxRequestBytes`` allows.

Each shape runs in a fresh process (peak RSS, VmHWM, only grows): the process starts
over the bundled example snapshot, its RSS is read, one request of the shape is sent,
and its peak is read after the answer. The chart's memory limit must hold above the
largest peak (docs/reliability.md).

Run: ``python -m benchmarks.worst_request [--max-request-bytes N] [--json FILE]``.
"""

from __future__ import annotations

import argparse
import http.client
import json
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from extender.core.config import DEFAULT_MAX_REQUEST_BYTES
from extender.shell.wire import MAX_CANDIDATES, MAX_POD_BYTES

POD = {
    "metadata": {"name": "p", "namespace": "default", "uid": "u1"},
    "spec": {"containers": [{"name": "c", "resources": {"requests": {"hugepages-2Mi": "2Mi", "cpu": "1"}}}]},
}


def _pod_json() -> bytes:
    return json.dumps(POD, separators=(",", ":")).encode()


def _names(count: int, length: int) -> list[bytes]:
    return [(f"n{i:07d}".ljust(length, "x")).encode() for i in range(count)]


def names_body(size: int, count: int) -> bytes:
    """A NodeNames list of ``count`` names, as long as ``size`` allows."""
    length = max(8, (size - 400) // count - 3)
    names = b'","'.join(_names(count, length))
    return b'{"Pod":' + _pod_json() + b',"NodeNames":["' + names + b'"]}'


def nodes_body(size: int, count: int) -> bytes:
    """Full Node objects, each padded with an annotation the extender skips."""
    per_item = max(40, (size - 400) // count - 1)
    items = []
    for i in range(count):
        head = f'{{"metadata":{{"name":"n{i:07d}"}},"status":{{"allocatable":{{"hugepages-2Mi":"1Gi"}}}},"x":"'
        items.append((head + "x" * max(0, per_item - len(head) - 2) + '"}').encode())
    return b'{"Pod":' + _pod_json() + b',"Nodes":{"items":[' + b",".join(items) + b']},"NodeNames":null}'


def big_pod_body(size: int, containers: bool) -> bytes:
    """A Pod just under MAX_POD_BYTES: a million empty containers, or as many annotations."""
    limit = min(size, MAX_POD_BYTES) - 200
    if containers:
        pod = b'{"metadata":{"name":"p","uid":"u"},"spec":{"containers":[' + b",".join([b"{}"] * (limit // 3)) + b"]}}"
    else:
        pairs = b",".join(b'"k%07d":""' % i for i in range(limit // 14))
        pod = b'{"metadata":{"name":"p","uid":"u","annotations":{' + pairs + b'}},"spec":{"containers":[]}}'
    return b'{"Pod":' + pod + b',"NodeNames":["hp-full"]}'


def tiny_nodes_body(size: int, named: bool) -> bytes:
    """As many node items as fit, nameless ({}) or with the shortest names: refused."""
    if named:
        items = [b'{"metadata":{"name":"%x"}}' % i for i in range((size - 200) // 32)]
    else:
        items = [b"{}"] * ((size - 200) // 3)
    return b'{"Pod":' + _pod_json() + b',"Nodes":{"items":[' + b",".join(items) + b"]}}"


def shapes(size: int) -> dict[str, tuple[str, Callable[[], bytes]]]:
    return {
        "prioritize, NodeNames, most names, longest": ("prioritize", lambda: names_body(size, MAX_CANDIDATES)),
        "filter, NodeNames, most names, longest": ("filter", lambda: names_body(size, MAX_CANDIDATES)),
        "prioritize, NodeNames, 8M short names (refused)": ("prioritize", lambda: names_body(size, size // 12)),
        "filter, full Nodes, most nodes (echoed)": ("filter", lambda: nodes_body(size, MAX_CANDIDATES)),
        "filter, full Nodes, 5,000 large nodes (echoed)": ("filter", lambda: nodes_body(size, 5_000)),
        "filter, full Nodes, millions of empty items (refused)": ("filter", lambda: tiny_nodes_body(size, False)),
        "filter, full Nodes, a million named items (refused)": ("filter", lambda: tiny_nodes_body(size, True)),
        "filter, largest Pod: empty containers": ("filter", lambda: big_pod_body(size, containers=True)),
        "filter, largest Pod: annotations": ("filter", lambda: big_pod_body(size, containers=False)),
    }


ARGV = [sys.executable, "-m", "extender", "--log-level", "error", "serve", "--example"]


def _status(pid: int, key: str) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith(key):
                return int(line.split()[1]) // 1024
    raise KeyError(key)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def measure(verb: str, body: bytes, max_request_bytes: int, mode: str) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "config.yaml"
        config.write_text(f"maxRequestBytes: {max_request_bytes}\ndefaults: {{mode: {mode}, sampleSize: 3}}\n")
        port = _free_port()
        process = subprocess.Popen(
            [*ARGV, "--port", str(port), "--config", str(config)],
        )
        try:
            deadline = time.monotonic() + 30
            while True:
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=1).close()
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.1)
            before = _status(process.pid, "VmRSS:")
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
            started = time.monotonic()
            connection.request("POST", f"/{verb}", body=body, headers={"Content-Type": "application/json"})
            response = connection.getresponse()
            answer = response.read()
            seconds = time.monotonic() - started
            peak = _status(process.pid, "VmHWM:")
            after = _status(process.pid, "VmRSS:")
            connection.close()
        finally:
            process.terminate()
            process.wait(timeout=30)
    return {
        "body_mib": round(len(body) / 2**20, 1),
        "status": response.status,
        "answer_mib": round(len(answer) / 2**20, 1),
        "seconds": round(seconds, 2),
        "rss_before_mib": before,
        "peak_rss_mib": peak,
        "rss_after_mib": after,
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.worst_request")
    parser.add_argument("--max-request-bytes", type=int, default=DEFAULT_MAX_REQUEST_BYTES)
    parser.add_argument("--only", help="run only shapes whose name contains this")
    parser.add_argument("--modes", default="shadow,enforce", help="modes to run each shape in (shadow echoes all)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    size = args.max_request_bytes - 1024
    rows = []
    for name, (verb, build) in shapes(size).items():
        if args.only and args.only not in name:
            continue
        body = build()
        assert len(body) <= args.max_request_bytes, (name, len(body))
        for mode in args.modes.split(","):
            row = {"shape": name, "mode": mode, **measure(verb, body, args.max_request_bytes, mode)}
            rows.append(row)
            print(json.dumps(row), flush=True)
        del body
    if args.json:
        args.json.write_text(json.dumps({"max_request_bytes": args.max_request_bytes, "rows": rows}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
