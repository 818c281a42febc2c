"""The node agents' cost at scale: API writes per second, and the extender's cost per record update.

``writes``: 5,000 agents run the real publish policy (``PublishState``) over simulated time, each
reading every ``interval`` seconds, with the figures the extender reads changing at a given rate
per node (Poisson); steady state after the first heartbeat period. ``updates``: the extender's
cluster state at 5,000 nodes and 100,000 pods applies record updates as its watch hands them over
(decode the watch event's object, read and check the report, rebuild one account).

``python -m benchmarks.node_reports`` prints both tables.
"""

from __future__ import annotations

import datetime as dt
import math
import random
import time
from typing import Any

import msgspec

from benchmarks.stats import percentile, table, timed
from extender.core.config import build_config
from extender.core.nodeagent.counters import KernelPool, PodPages, Source, size_report
from extender.shell.nodeagent.publish import DEFAULT_INTERVAL_SECONDS, PublishPolicy, PublishState
from extender.state.cluster import ClusterState

__all__ = ["PublishPolicy", "simulate_writes", "updates", "writes"]
from extender.core.nodeagent.record import NodeRecord
from extender.core.nodereport import ReportObject
from extender.core.objects import Node, Pod

WRITE_COLUMNS = ["nodes", "heartbeat s", "jitter", "changes /node/h", "writes/s simulated", "writes/s formula"]
UPDATE_COLUMNS = ["nodes", "pods", "what", "p50 us", "p99 us", "per second at p50"]
RESOURCE = "hugepages-2Mi"
PAGE = 2 << 20


def simulate_writes(
    nodes: int, policy: PublishPolicy, changes_per_node_hour: float, *, hours: float, seed: int = 1
) -> float:
    """Writes per second, all nodes together, in steady state: agents started at any phase of a heartbeat
    period, the first two periods left out."""
    rng = random.Random(seed)
    interval = DEFAULT_INTERVAL_SECONDS
    start_measure = 2 * policy.heartbeat_seconds
    end = start_measure + hours * 3600
    rate = changes_per_node_hour / 3600
    writes = 0
    for _ in range(nodes):
        state = PublishState()
        t = interval * math.floor(rng.uniform(0, policy.heartbeat_seconds) / interval)  # steady state: any phase
        version = 0
        next_change = t + (rng.expovariate(rate) if rate else math.inf)
        while t < end:
            while next_change <= t:  # the figures changed since the last read
                version += 1
                next_change += rng.expovariate(rate)
            if state.due((version,), t, policy) is not None:
                state.written((version,), t, policy, rng)
                if t >= start_measure:
                    writes += 1
            # The next read at which something can be due: a change, a heartbeat, the change-rate limit.
            wake = min(next_change, state.heartbeat_at)
            if state.key != (version,):
                wake = min(wake, state.written_at + policy.min_interval_seconds)
            t += max(interval, math.ceil((max(wake, t) - t) / interval) * interval)
    return writes / (end - start_measure)


def writes(quick: bool = False) -> list[dict[str, Any]]:
    rows = []
    nodes = 5000
    hours = 1.0 if quick else 4.0
    for heartbeat, jitter in ((900.0, 0.2), (60.0, 0.2)):
        policy = PublishPolicy(heartbeat_seconds=heartbeat, jitter=jitter)
        for changes in (0.0, 1.0, 6.0):
            rows.append(
                {
                    "nodes": nodes,
                    "heartbeat s": heartbeat,
                    "jitter": jitter,
                    "changes /node/h": changes,
                    "writes/s simulated": simulate_writes(nodes, policy, changes, hours=hours),
                    "writes/s formula": policy.writes_per_second(nodes, changes),
                }
            )
    return rows


def _record(node: str, outside: int) -> bytes:
    pool = KernelPool(total=2048, free=2048 - outside - 512, surplus=0, reserved=0)
    numa = {0: KernelPool(1024, 700, 0), 1: KernelPool(1024, 2048 - outside - 512 - 700, 0)}
    record = NodeRecord(
        node,
        dt.datetime.now(dt.UTC),
        Source.CGROUP_V2,
        {RESOURCE: size_report(pool, numa, PodPages(512, {0: 300, 1: 212}))},
    )
    return msgspec.json.encode({**record.api_object(), "metadata": {"name": node, "resourceVersion": "12345"}})


def updates(quick: bool = False) -> list[dict[str, Any]]:
    nodes = 5000
    pods = 20_000 if quick else 100_000
    state = ClusterState(build_config({"namespaces": {"strict": {"nodeReportMaxAgeSeconds": 60}}}, {}))
    node_objects = [
        msgspec.convert(
            {"metadata": {"name": f"node-{i:05d}"}, "status": {"allocatable": {RESOURCE: "4Gi", "cpu": "64"}}}, Node
        )
        for i in range(nodes)
    ]
    pod_objects = [
        msgspec.convert(
            {
                "metadata": {"name": f"p{i}", "namespace": "default", "uid": f"uid-{i}"},
                "spec": {
                    "nodeName": f"node-{i % nodes:05d}",
                    "containers": [{"resources": {"requests": {RESOURCE: "2Mi", "cpu": "100m"}}}],
                },
                "status": {"phase": "Running"},
            },
            Pod,
        )
        for i in range(pods)
    ]
    state.replace(node_objects, pod_objects)
    events = [_record(f"node-{i % nodes:05d}", outside=(i * 7) % 800) for i in range(2000)]
    decoder = msgspec.json.Decoder(ReportObject)
    for event in events[:nodes]:  # every node reported once: the steady state
        obj = decoder.decode(event)
        state.apply_report(*state.report_record(obj.metadata.name, obj.report_bytes))
    cursor = iter(range(10**9))

    def one_update() -> None:
        event = events[next(cursor) % len(events)]
        obj = decoder.decode(event)  # the watch thread's part
        state.apply_report(*state.report_record(obj.metadata.name, obj.report_bytes))

    repeat = 2000 if quick else 20_000
    samples = timed(one_update, repeat=repeat, warmup=200)
    strict = state._config.policy_for("strict")
    view = timed(lambda: state.books[RESOURCE].view_for(strict), repeat=200 if quick else 1000)
    expire = timed(state.expire_reports, repeat=repeat)
    rows = []
    for what, got in (
        ("record update (decode, check, one account)", samples),
        ("expire_reports, none due (every filter call)", expire),
        ("view_for, a namespace with its own max age", view),
    ):
        p50 = percentile(got, 0.5)
        rows.append(
            {
                "nodes": nodes,
                "pods": pods,
                "what": what,
                "p50 us": p50 * 1e6,
                "p99 us": percentile(got, 0.99) * 1e6,
                "per second at p50": 1 / p50 if p50 else None,
            }
        )
    return rows


def main() -> None:
    started = time.monotonic()
    print("## API writes per second from the node agents (real publish policy, simulated time)\n")
    print(table(writes(), WRITE_COLUMNS))
    print("\n## The extender's cost per record update\n")
    print(table(updates(), UPDATE_COLUMNS))
    print(f"\n# {time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    main()
