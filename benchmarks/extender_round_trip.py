"""The extender's round trip as kube-scheduler makes it, one path against another.

kube-scheduler calls its extender over one kept-alive connection per worker, a
filter request after the other, and waits for each answer. ``CLIENT`` does the
same and times each call at the client; it needs only Python's standard
library, so it runs wherever the extender image's Python does:

- here (``python -m benchmarks.extender_round_trip``): ``serve --example`` on
  127.0.0.1 over plain HTTP (the chart's default: the extender beside the
  scheduler) and over HTTPS with client certificates (the previous default, the
  Service topology's), the same requests, side by side;
- on kind (e2e/kind/test_topology.py): one extender pod, called from inside
  its own pod on 127.0.0.1 and from a pod on another node through a Service
  (kube-proxy, the pod network): what the Service path adds, measured.

Figures, not assertions: compare them within one run only.
"""

from __future__ import annotations

import argparse
import functools
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.http_decision import REPO_ROOT, free_port
from benchmarks.stats import table
from e2e.controlplane import generate_certificates, http_get, issue_client_certificate, wait_until

# What kube-scheduler sends for one pod (NodeNames: the extender keeps its own node cache),
# a pod that needs pages, against the bundled example cluster's nodes.
REQUEST = {
    "Pod": {
        "metadata": {"name": "round-trip", "namespace": "payments", "uid": "0f0e0d0c-round-trip"},
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "resources": {
                        "requests": {"cpu": "1", "memory": "1Gi", "hugepages-2Mi": "1Gi"},
                        "limits": {"memory": "1Gi", "hugepages-2Mi": "1Gi"},
                    },
                }
            ]
        },
    },
    "NodeNames": ["hp-roomy-1", "hp-roomy-2", "hp-busy", "hp-full", "hp-small", "hp-vm-host", "plain-1", "plain-2"],
}

# argv: URL COUNT BODY [CA CERT KEY]. Prints one JSON line of milliseconds.
CLIENT = r"""
import http.client, json, ssl, sys, time, urllib.parse
url, count, body = sys.argv[1], int(sys.argv[2]), sys.argv[3].encode()
parts = urllib.parse.urlsplit(url)
if parts.scheme == "https":
    context = ssl.create_default_context(cafile=sys.argv[4])
    context.load_cert_chain(sys.argv[5], sys.argv[6])
    connection = http.client.HTTPSConnection(parts.hostname, parts.port, timeout=10, context=context)
else:
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
warmup, samples = 50, []
for i in range(warmup + count):
    started = time.perf_counter()
    connection.request("POST", "/filter", body, {"Content-Type": "application/json"})
    response = connection.getresponse()
    response.read()
    if response.status != 200:
        raise SystemExit(f"filter answered {response.status}")
    if i >= warmup:
        samples.append((time.perf_counter() - started) * 1000)
samples.sort()
pick = lambda q: samples[min(len(samples) - 1, int(q * len(samples)))]
figures = {"calls": count, "mean_ms": sum(samples) / count}
figures.update({f"p{round(q * 100)}_ms": pick(q) for q in (0.5, 0.9, 0.99)})
print(json.dumps(figures))
"""

COLUMNS = ["path", "calls", "mean_ms", "p50_ms", "p90_ms", "p99_ms"]


def body() -> str:
    return json.dumps(REQUEST)


def summarize(path: str, printed: str) -> dict[str, Any]:
    """One table row from CLIENT's output line."""
    figures: dict[str, Any] = json.loads(printed.strip().splitlines()[-1])
    return {"path": path, **figures}


def _serve(workdir: Path, port: int, probe: int, tls: list[str]) -> subprocess.Popen[bytes]:
    argv = [sys.executable, "-m", "extender", "serve", "--example", "--port", str(port), "--probe-port", str(probe)]
    with (workdir / f"serve-{port}.log").open("wb") as log:  # the child keeps its own descriptor
        return subprocess.Popen([*argv, *tls], stdout=log, stderr=log, cwd=REPO_ROOT)


def run(calls: int = 2000) -> list[dict[str, Any]]:
    """Plain HTTP and HTTPS with client certificates, both on 127.0.0.1, the same requests."""
    rows = []
    with tempfile.TemporaryDirectory(prefix="hugepage-round-trip-") as tmp:
        workdir = Path(tmp)
        certs = generate_certificates(workdir / "pki")  # the serving certificate names 127.0.0.1
        client_cert, client_key = issue_client_certificate(certs, "hugepage-scheduler")
        mtls = ["--tls-cert-file", str(certs.serving_cert), "--tls-key-file", str(certs.serving_key)]
        mtls += ["--client-ca-file", str(certs.ca_cert)]
        for path, tls, extra in (
            ("loopback, plain HTTP (the sidecar's default)", [], []),
            ("loopback, HTTPS + client certs (the Service's default)", mtls, [certs.ca_cert, client_cert, client_key]),
        ):
            port, probe = free_port(), free_port()
            server = _serve(workdir, port, probe, tls)
            try:
                wait_until("the extender to serve", functools.partial(_ready, probe), timeout=30, interval=0.1)
                url = f"{'https' if tls else 'http'}://127.0.0.1:{port}"
                argv = [sys.executable, "-c", CLIENT, url, str(calls), body(), *map(str, extra)]
                printed = subprocess.run(argv, check=True, capture_output=True, text=True).stdout
                rows.append(summarize(path, printed))
            finally:
                server.terminate()
                server.wait(timeout=30)
    return rows


def _ready(probe: int) -> bool:
    answer = http_get(probe, "/readyz")
    return answer is not None and answer[0] == 200


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.extender_round_trip")
    parser.add_argument("--calls", type=int, default=2000)
    args = parser.parse_args()
    print(table(run(args.calls), COLUMNS))
    return 0


if __name__ == "__main__":
    sys.exit(main())
