"""Our extender as a process over a synthetic cluster, for the HTTP benchmark.

The real request path: ``extender.shell.server.create_app`` over an ``Extender``
whose state holds the synthetic cluster of ``benchmarks.cluster`` (the same
nodes the client puts in its requests; the documents themselves are not
kept, so the process weighs what the extender does). Pods in namespace ``bench`` get the
default best-of-K sample (K = 3), pods in ``bench-k16`` a sample of 16 (the most a filter holds
a pod on), pods in ``bench-k0`` have every candidate examined (K = 0), pods in ``bench-shadow``
are in shadow mode (the default mode).

``--one-gib-pool 16Gi`` gives every node a ``hugepages-1Gi`` pool too (taken whole on the nodes
``--full-percent`` fills); ``--resource-names hugepages-2Mi,hugepages-1Gi`` guards both sizes
(``resourceNames``; by default the first alone, as ``CONFIG``).

``--bound-after-ms``: as a cluster's watch would, each pod a filter held nodes for shows up bound
(to the first node held) that long after the filter, and is deleted a second later, on the same
event loop: the holds of a stream of new pods then end as they do in a cluster, and the state stays
the size of the cluster rather than growing with every pod.

Run: ``python -m benchmarks.extender_server --nodes 5000 --port 8898``.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
import time
from collections import deque
from collections.abc import Sequence
from typing import Any

from benchmarks.cluster import synthetic_state
from benchmarks.null_extender import MAX_BODY, serve
from extender.core.capacity import hugepages_for
from extender.shell.handlers import Extender
from extender.shell.kube.informer import freeze_cache
from extender.shell.metrics import Metrics
from extender.shell.server import create_app
from extender.state.records import PodRecord, PodUsage

CONFIG: dict[str, Any] = {
    "maxRequestBytes": MAX_BODY,
    "defaults": {"mode": "enforce", "sampleSize": 3, "widening": "fullscan"},
    "namespaces": {
        "bench-k0": {"sampleSize": 0},
        "bench-k16": {"sampleSize": 16},
        "bench-shadow": {"mode": "shadow"},
    },
}
PODS_PER_NODE = 20
MAX_PODS = 100_000
DELETED_AFTER_SECONDS = 1.0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.extender_server")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8898)
    parser.add_argument("--nodes", type=int, required=True)
    parser.add_argument("--pods", type=int, help=f"bound pods (default: {PODS_PER_NODE} a node, at most {MAX_PODS:,})")
    parser.add_argument("--full-percent", type=int, default=0, help="nodes of every hundred whose pool is full")
    parser.add_argument("--one-gib-pool", help="every node has a hugepages-1Gi pool of this size (e.g. 16Gi)")
    parser.add_argument("--resource-names", help="the sizes guarded, comma-separated (default: hugepages-2Mi)")
    parser.add_argument("--hold-timeout-seconds", type=float, help="holdTimeoutSeconds (default: the config's)")
    parser.add_argument(
        "--bound-after-ms", type=float, default=0.0, help="a held pod shows up bound this long after its filter"
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    pods = min(args.nodes * PODS_PER_NODE, MAX_PODS) if args.pods is None else args.pods
    config_document = CONFIG
    if args.resource_names:
        config_document = {**config_document, "resourceNames": args.resource_names.split(",")}
    if args.hold_timeout_seconds:  # holds stand this long (a burst's placements in flight: benchmarks.in_flight)
        defaults = {**CONFIG["defaults"], "holdTimeoutSeconds": args.hold_timeout_seconds}
        config_document = {**config_document, "defaults": defaults}
    config, state = synthetic_state(
        args.nodes, pods, config_document, full_percent=args.full_percent, one_gib_pool=args.one_gib_pool
    )
    freeze_cache()  # as `serve` does once its cache is listed
    extender = Extender(config, state, Metrics())
    app = create_app(extender)
    if args.bound_after_ms > 0:
        asyncio.run(_serve_with_watch(extender, app, args.host, args.port, args.bound_after_ms / 1000))
    else:
        asyncio.run(serve(app, args.host, args.port))
    return 0


async def _serve_with_watch(extender: Extender, app: Any, host: str, port: int, bound_after: float) -> None:
    """``serve``, with each held pod shown bound ``bound_after`` s after its filter and deleted later."""
    state, verbs = extender.state, extender.verbs
    bound: deque[tuple[float, PodRecord]] = deque()
    deleted: deque[tuple[float, str]] = deque()
    filter_call = verbs.filter  # the server's filter_pod calls it

    def filter_and_watch(*args: Any, **kwargs: Any) -> Any:
        result = filter_call(*args, **kwargs)
        uid, demand = args[0], args[2]
        if result.held:
            node = result.decision.nodes_to_hold[0]
            pages = tuple(hugepages_for(demand.bytes_of(size), book.page_size) for size, book in state.books.items())
            usage = PodUsage(node, demand.cpu_millis, pages)
            bound.append((time.monotonic() + bound_after, PodRecord(uid, usage, False)))
        return result

    verbs.filter = filter_and_watch  # type: ignore[method-assign]

    async def watch() -> None:
        while True:
            await asyncio.sleep(min(bound_after, 0.005))
            now = time.monotonic()
            while bound and bound[0][0] <= now:
                _, record = bound.popleft()
                state.apply_pod_record(record)
                deleted.append((now + DELETED_AFTER_SECONDS, record.uid))
            while deleted and deleted[0][0] <= now:
                state.remove_pod(deleted.popleft()[1])

    task = asyncio.create_task(watch())
    try:
        await serve(app, host, port)
    finally:
        task.cancel()


if __name__ == "__main__":
    sys.exit(main())
