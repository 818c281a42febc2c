"""Our extender as a process over a synthetic cluster, for the HTTP benchmark.

The real request path: ``extender.server.create_app`` over an ``Extender``
whose state holds the synthetic cluster of ``benchmarks.cluster`` (the same
nodes the client puts in its requests; the documents themselves are not
kept, so the process weighs what the extender does). Pods in namespace ``bench`` get the
default best-of-K sample (K = 3), pods in ``bench-k0`` have every candidate
examined (K = 0), pods in ``bench-shadow`` are in shadow mode (the default mode).

Run: ``python -m benchmarks.extender_server --nodes 5000 --port 8898``.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from collections.abc import Sequence
from typing import Any

from benchmarks.cluster import synthetic_state
from benchmarks.null_extender import MAX_BODY, serve
from extender.kube.informer import freeze_cache
from extender.metrics import Metrics
from extender.server import Extender, create_app

CONFIG: dict[str, Any] = {
    "maxRequestBytes": MAX_BODY,
    "defaults": {"mode": "enforce", "sampleSize": 3, "widening": "fullscan"},
    "namespaces": {"bench-k0": {"sampleSize": 0}, "bench-shadow": {"mode": "shadow"}},
}
PODS_PER_NODE = 20
MAX_PODS = 100_000


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.extender_server")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8898)
    parser.add_argument("--nodes", type=int, required=True)
    parser.add_argument("--full-percent", type=int, default=0, help="nodes of every hundred whose pool is full")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    config, state = synthetic_state(
        args.nodes, min(args.nodes * PODS_PER_NODE, MAX_PODS), CONFIG, full_percent=args.full_percent
    )
    freeze_cache()  # as `serve` does once its cache is listed
    extender = Extender(config, state, Metrics())
    asyncio.run(serve(create_app(extender), args.host, args.port))
    return 0


if __name__ == "__main__":
    sys.exit(main())
