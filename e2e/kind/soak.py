"""The churn soak on the kind cluster: real consumers arriving and leaving, outside consumers on
the host, faults on a schedule; what failed on its node, what was stranded, how long pods took.

Run by test_consumers.test_churn_soak (the kind suite: 4 minutes in enforce, 1 in off) and ``make soak`` (60 minutes).
One seeded schedule (``SOAK_SEED``) is played in the enforce namespace for the whole run, then its
beginning again in the off namespace (``SOAK_OFF_MINUTES``, default a fifth of the run) for the
creation-to-running comparison:

- arrivals: VMs (both pod styles), DPDK and plain pods, lifetimes of 30-120 s once ready. With one
  hugepage pool behind every kind node, a page taken through one node is outside the others'
  pods: the consumers go to worker 1, where the node agent's record counts the pages of the
  other nodes and the host; the plain pods go anywhere.
- outside consumers: QEMU on the host (1 unit), started and stopped in turn. One starts only
  while no consumer is between its placement and holding its pages, and arrivals wait until
  the node agent's record shows it: a daemon that takes pages while a pod is in flight races
  every scheduler, and the pod would fail on the node whatever placed it.
- faults, in turn at even intervals: an extender killed, the scheduler's leader killed, the node
  agent restarted, the API server's watches cut (its container stopped; the kubelet restarts
  it). Pods are found by their labels and containers (a container named ``extender`` or
  ``kube-scheduler`` in a pod of the release), not by the chart's layout.

Measured, per phase: pods failed on the node (by the pod's status; and the consumer's own error,
test_consumers.CONSUMER_ERRORS), pods stranded (unbound for more than 10 s while the kernel's
counters showed room for them: free pages less those promised to pods bound and not yet
holding theirs), creation to ready p50/p99 per class, the extender's RSS and CPU every 15 s,
and the error lines of the scheduler and the extender grouped by message.
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import re
import statistics
import subprocess
import time
from collections import Counter
from collections.abc import Callable, Iterable
from datetime import datetime
from pathlib import Path
from typing import Any

from e2e.kind.consumers import (
    ENFORCE,
    LABEL,
    NAMESPACE,
    OFF,
    RELEASE,
    UNIT,
    HostVM,
    consumer_error,
    consumer_pod,
)
from e2e.kind.test_kind import (
    failure_on_the_node,
    get_json,
    helm_upgrade,
    host_pool,
    is_ready,
    kubectl,
    outside_pages,
    set_reserved,
)

CLASSES = {"vm-hugepages": 0.25, "vm-memory": 0.2, "dpdk": 0.2, "plain": 0.35}
STRANDED_AFTER = 10.0  # seconds unbound while the kernel had room
MEAN_ARRIVAL_SECONDS = 8.0
LIFETIME_SECONDS = (30.0, 120.0)
HOST_VM_EVERY_SECONDS = 75.0
FAULTS = ("extender killed", "scheduler leader killed", "node agent restarted", "API server watches cut")
SAMPLE_SECONDS = 1.0
RESOURCE_SAMPLE_SECONDS = 15.0
CLUSTER = os.environ.get("KIND_E2E_CLUSTER", "hugepage-e2e")


@dataclasses.dataclass(frozen=True)
class Event:
    at: float  # seconds from the phase's start
    what: str  # "pod", "host-vm" or "fault"
    detail: str  # the pod's class, or the fault
    lifetime: float = 0.0


def schedule(seed: int, seconds: float) -> list[Event]:
    """The run's events: Poisson arrivals, a host VM toggled, the faults in turn."""
    rng = random.Random(seed)
    events: list[Event] = []
    t = rng.expovariate(1 / MEAN_ARRIVAL_SECONDS)
    while t < seconds:
        kind = rng.choices(list(CLASSES), weights=list(CLASSES.values()))[0]
        events.append(Event(t, "pod", kind, rng.uniform(*LIFETIME_SECONDS)))
        t += rng.expovariate(1 / MEAN_ARRIVAL_SECONDS)
    t = HOST_VM_EVERY_SECONDS / 2
    while t < seconds:
        events.append(Event(t, "host-vm", "toggle"))
        t += HOST_VM_EVERY_SECONDS
    # Faults spread over the run, each kind at least once, one every 5 minutes in a long run,
    # at least 30 s apart, none in the last minute.
    count = max(len(FAULTS), int(seconds // 300))
    gap = (seconds - 60) / (count + 1)
    if gap >= 30:
        events += [Event(gap * (i + 1), "fault", FAULTS[i % len(FAULTS)]) for i in range(count)]
    return sorted(events, key=lambda e: e.at)


@dataclasses.dataclass
class Phase:
    namespace: str
    seconds: float
    pods: Counter[str] = dataclasses.field(default_factory=Counter)
    failures: dict[str, str] = dataclasses.field(default_factory=dict)
    strandings: dict[str, str] = dataclasses.field(default_factory=dict)
    latencies: dict[str, list[float]] = dataclasses.field(default_factory=dict)
    # The same, of the pods that fit when they arrived: the kernel had room for them and for every
    # consumer waiting before them. The others waited for room in off as well (placed there at once,
    # to fail), so only these compare.
    fit_latencies: dict[str, list[float]] = dataclasses.field(default_factory=dict)
    faults: list[str] = dataclasses.field(default_factory=list)
    faults_not_applied: list[str] = dataclasses.field(default_factory=list)  # the fault, and why not
    host_vms: int = 0
    timeline: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    resources: list[dict[str, float]] = dataclasses.field(default_factory=list)
    errors: Counter[str] = dataclasses.field(default_factory=Counter)
    api_errors: Counter[str] = dataclasses.field(default_factory=Counter)  # kubectl calls refused (faults)
    accounts: list[str] = dataclasses.field(default_factory=list)  # what was counted on worker 1 at each stranding

    @property
    def failed_on_the_node(self) -> int:
        return len(self.failures)

    @property
    def stranded(self) -> int:
        return len(self.strandings)

    def unproven(self, *, host_vms: bool = True) -> list[str]:
        """What the phase was to exercise and did not: a pod class none of whose pods became ready,
        a fault kind never applied, no host VM (the consumer outside pods) started. A run that
        proved nothing must not pass as one that failed nothing."""
        missing = [f"no {kind} pod ran" for kind in CLASSES if not self.latencies.get(kind)]
        applied = {fault.rsplit(" at ", 1)[0] for fault in self.faults}
        missing += [f"fault {fault!r} never applied" for fault in FAULTS if fault not in applied]
        missing += [f"fault not applied: {why}" for why in self.faults_not_applied]
        if host_vms and not self.host_vms:
            missing.append("no host VM started")
        return missing

    def percentiles(self, kind: str, *, fit: bool = False) -> tuple[float, float] | None:
        values = sorted((self.fit_latencies if fit else self.latencies).get(kind, []))
        if not values:
            return None
        p99 = values[min(len(values) - 1, round(0.99 * (len(values) - 1)))]
        return statistics.median(values), p99


@dataclasses.dataclass
class Report:
    enforce: Phase
    off: Phase | None

    @property
    def failed_on_the_node(self) -> int:
        return self.enforce.failed_on_the_node

    @property
    def stranded(self) -> int:
        return self.enforce.stranded

    @property
    def failures(self) -> dict[str, str]:
        return self.enforce.failures

    @property
    def strandings(self) -> dict[str, str]:
        return self.enforce.strandings

    def lines(self) -> list[str]:
        out = []
        for phase in (self.enforce, self.off):
            if phase is None:
                continue
            out.append(
                f"{phase.namespace}: {phase.seconds / 60:.1f} min, {sum(phase.pods.values())} pods "
                f"({', '.join(f'{k} {v}' for k, v in sorted(phase.pods.items()))}), {phase.host_vms} host VM starts, "
                f"faults: {', '.join(phase.faults) or 'none'}"
            )
            out.append(f"  {phase.failed_on_the_node} failed on the node, {phase.stranded} stranded")
            for name, why in sorted(phase.failures.items()):
                out.append(f"  failed   {name}: {why}")
            for name, why in sorted(phase.strandings.items()):
                out.append(f"  stranded {name}: {why}")
            for kind in CLASSES:
                if (p := phase.percentiles(kind)) is not None:
                    count = len(phase.latencies[kind])
                    line = f"  creation to ready, {kind}: p50 {p[0]:.1f} s, p99 {p[1]:.1f} s ({count} pods)"
                    if (q := phase.percentiles(kind, fit=True)) is not None:
                        fitted = len(phase.fit_latencies[kind])
                        line += f"; where it fit: p50 {q[0]:.1f} s, p99 {q[1]:.1f} s ({fitted} pods)"
                    out.append(line)
            if phase.resources:
                first, last = phase.resources[0], phase.resources[-1]
                peak = max(r["rss_mib"] for r in phase.resources)
                # Per interval: a replica killed and replaced starts its CPU seconds again.
                pairs = zip(phase.resources, phase.resources[1:], strict=False)
                rates = [(b["cpu_seconds"] - a["cpu_seconds"]) / (b["t"] - a["t"]) for a, b in pairs]
                cpu = statistics.mean([r for r in rates if r >= 0] or [0.0])
                out.append(
                    f"  extender RSS {first['rss_mib']:.1f} -> {last['rss_mib']:.1f} MiB (peak {peak:.1f}), "
                    f"CPU {cpu * 100:.1f}% of a core ({len(phase.resources)} samples)"
                )
            for message, count in phase.errors.most_common(20):
                out.append(f"  error x{count}: {message}")
            for call, count in phase.api_errors.most_common():
                out.append(f"  API call refused x{count}: {call}")
        return out

    def plot(self, rows: int = 24) -> list[str]:
        """The enforce phase over time, one row per slice: pods running (#) and pending (.),
        stranded and failed so far, free pages, host VMs, the extender's RSS."""
        timeline = self.enforce.timeline
        if not timeline:
            return []
        step = max(1, len(timeline) // rows)
        out = ["     t  running (#) / pending (.)          stranded failed  free  host-VMs  extender RSS"]
        rss = "-"
        for i in range(0, len(timeline), step):
            chunk = timeline[i : i + step]
            last = chunk[-1]
            running = max(r["running"] for r in chunk)
            pending = max(r["pending"] for r in chunk)
            seen = [r["extender_rss_mib"] for r in chunk if "extender_rss_mib" in r]
            rss = f"{seen[-1]:.0f} MiB" if seen else rss
            bar = ("#" * running + "." * pending)[:32]
            out.append(
                f"{last['t']:6.0f}  {bar:<32}  {last['stranded']:8d} {last['failed']:6d} {last['free_pages']:5d}"
                f" {last['host_vms']:9d}  {rss}"
            )
        return out

    def summary(self) -> str:
        e = self.enforce
        p99 = []
        for kind in CLASSES:
            ours = e.percentiles(kind, fit=True)
            theirs = self.off.percentiles(kind, fit=True) if self.off is not None else None
            if ours is not None:
                versus = f" vs off {theirs[1]:.1f}" if theirs is not None else ""
                p99.append(f"{kind} {ours[1]:.1f}{versus}")
        rss = ""
        if e.resources:
            rss = f"; extender RSS {e.resources[0]['rss_mib']:.0f} -> {e.resources[-1]['rss_mib']:.0f} MiB"
        off = ""
        if self.off is not None:
            minutes, failed = self.off.seconds / 60, self.off.failed_on_the_node
            off = f"; off ({minutes:.1f} min, same schedule): {failed} failed on the node"
        return (
            f"soak: {e.seconds / 60:.1f} min enforce, {sum(e.pods.values())} pods, {e.host_vms} host VM starts, "
            f"{len(e.faults)} faults: {e.failed_on_the_node} failed on the node, {e.stranded} stranded; "
            f"p99 creation to ready where it fit (s): {', '.join(p99)}{rss}{off}"
        )


# -- the cluster ---------------------------------------------------------------------------------


def _release_pods(container: str) -> list[dict[str, Any]]:
    """The release's running pods with a container of that name (whatever deploys them: a native
    sidecar, the extender beside kube-scheduler, is an init container that restarts always)."""
    items = get_json("pods", "-n", NAMESPACE, "-l", f"app.kubernetes.io/instance={RELEASE}")["items"]
    return [
        p
        for p in items
        if p.get("status", {}).get("phase") == "Running"
        and not p["metadata"].get("deletionTimestamp")
        and any(c["name"] == container for c in [*p["spec"]["containers"], *p["spec"].get("initContainers", [])])
    ]


def _scheduler_leader() -> str | None:
    names: set[str] = {p["metadata"]["name"] for p in _release_pods("kube-scheduler")}
    for lease in get_json("leases", "-n", NAMESPACE)["items"]:
        holder: str = lease.get("spec", {}).get("holderIdentity") or ""
        leader = next((n for n in names if holder.startswith(n)), None)
        if leader is not None:
            return leader
    return None


def _logs(pod: str, container: str) -> str:
    text: str = kubectl("logs", pod, "-n", NAMESPACE, "-c", container, check=False)
    return text


_NUMBERS = re.compile(r"\b[0-9a-f]{8}-[0-9a-f-]{27}\b|\b\d[\d.:]*\b")
_QUOTED = r'"(?:[^"\\]|\\.)*"'
_KLOG = re.compile(rf"^E\d{{4}} [^]]*\] (?:(?P<message>{_QUOTED})(?: err=(?P<err>{_QUOTED}))?|(?P<text>.*))")


def error_messages(text: str) -> Iterable[str]:
    """Error lines grouped by message: klog's ``E1201 ...`` lines (the scheduler) by their message
    and the kind of error (``"Failed to watch": _ is forbidden``: the resource blanked), the
    extender's ERROR and WARNING lines by their text; numbers and uids blanked."""
    for raw in text.splitlines():
        line = re.sub(r"^\[pod/[^]]*\] ", "", raw)  # kubectl logs --prefix
        if match := _KLOG.match(line):
            if match["message"] is not None:
                err = (match["err"] or "").strip('"')
                kind = re.sub(r"^\S+", "_", err.split(":", 1)[0]) if err else ""
                message = match["message"] + (f": {kind}" if kind else "")
            else:
                message = match["text"]
        elif extender := re.search(r" (?P<level>ERROR|WARNING) (?P<rest>.*)", line):
            message = f"{extender['level']} {extender['rest']}"
        else:
            continue
        yield _NUMBERS.sub("_", message)[:160]


def _stop_containers(which: str, node: str, ids: list[str]) -> None:
    """Stop the containers (crictl on the kind node); a fault that stopped nothing was not applied."""
    if not ids:
        raise AssertionError(f"fault {which!r}: no container found on {node}")
    for container_id in ids:
        stopped = subprocess.run(
            ["docker", "exec", node, "crictl", "stop", container_id], capture_output=True, text=True, check=False
        )
        if stopped.returncode != 0:
            raise AssertionError(f"fault {which!r}: crictl stop {container_id} failed: {stopped.stderr.strip()}")


def _fault(which: str, workers: list[str], errors: Counter[str]) -> None:
    if which == "extender killed":
        # The Lease holder's own extender, its container killed where it runs (its pod stays and the
        # kubelet restarts it, as e2e/kind/test_topology.py does); any extender where none leads.
        pods = _release_pods("extender")
        leader = _scheduler_leader()
        pod = next((p for p in pods if p["metadata"]["name"] == leader), pods[0] if pods else None)
        if pod is None:
            raise AssertionError(f"fault {which!r}: nothing found to act on")
        name = pod["metadata"]["name"]
        errors.update(error_messages(_logs(name, "extender")))  # its lines go with it
        node = pod["spec"]["nodeName"]  # a kind node's name is its container's
        ids = subprocess.run(
            ["docker", "exec", node, "crictl", "ps", "-q", "--name", "^extender$",
             "--label", f"io.kubernetes.pod.name={name}"],
            capture_output=True, text=True, check=False,
        ).stdout.split()  # fmt: skip
        _stop_containers(which, node, ids)
        return
    if which == "scheduler leader killed":
        victim, container = _scheduler_leader(), "kube-scheduler"
    elif which == "node agent restarted":
        agents = [p for p in _release_pods("node-agent") if p["spec"].get("nodeName") == workers[0]]
        victim = agents[0]["metadata"]["name"] if agents else None
        container = "node-agent"
    else:
        # The API server's container stopped: every watch breaks; the kubelet starts it again.
        node = f"{CLUSTER}-control-plane"
        ids = subprocess.run(
            ["docker", "exec", node, "crictl", "ps", "-q", "--name", "kube-apiserver"],
            capture_output=True, text=True, check=False,
        ).stdout.split()  # fmt: skip
        _stop_containers(which, node, ids)
        return
    if victim is None:
        raise AssertionError(f"fault {which!r}: nothing found to act on")
    errors.update(error_messages(_logs(victim, container)))  # its lines go with it
    kubectl("delete", "pod", victim, "-n", NAMESPACE, "--wait=false")


def _extender_resources(t: float) -> dict[str, float] | None:
    pods = _release_pods("extender")
    if not pods:
        return None
    rss = cpu = 0.0
    read = 0
    for pod in pods:
        path = f"/api/v1/namespaces/{NAMESPACE}/pods/{pod['metadata']['name']}:8081/proxy/metrics"
        text = kubectl("get", "--raw", path, check=False)
        for line in text.splitlines():
            if line.startswith("process_resident_memory_bytes "):
                rss += float(line.split()[1])
                read += 1
            elif line.startswith("process_cpu_seconds_total "):
                cpu += float(line.split()[1])
    if read < len(pods):
        return None  # a replica starting or the API server away: no sample rather than a low one
    return {"t": t, "rss_mib": rss / (1 << 20), "cpu_seconds": cpu, "replicas": float(len(pods))}


def _accounts(node: str) -> str:
    """What is counted on ``node`` (a stranding's evidence): the pods bound there that need pages
    (phase, deleting, ready), the node agent's record, the leading extender's holds there, the kernel."""
    pods = get_json("pods", "-A", "--field-selector", f"spec.nodeName={node}")["items"]
    counted = []
    for pod in pods:
        if pod["metadata"].get("labels", {}).get("app") != LABEL or _need_pages(pod) == 0:
            continue
        flags = [pod.get("status", {}).get("phase", "?")]
        flags += ["deleting"] if pod["metadata"].get("deletionTimestamp") else []
        flags += ["ready"] if is_ready(pod) else []
        counted.append(f"{pod['metadata']['name']}({','.join(flags)})")
    leader = _scheduler_leader()
    holds = "?"
    if leader is not None:
        url = f"http://127.0.0.1:8888/debug/state?nodes={node}"
        code = f"import urllib.request; print(urllib.request.urlopen({url!r}, timeout=5).read().decode())"
        text = kubectl("exec", leader, "-n", NAMESPACE, "-c", "extender", "--", "python", "-c", code, check=False)
        try:
            state = json.loads(text)
            holds = json.dumps({k: state[k].get(node) for k in ("inFlight", "nodeReports")})
        except (ValueError, AttributeError, KeyError):
            holds = text.strip()[:200] or "?"
    record = outside_pages(node)
    return f"{len(counted)} consumers bound {counted}; record outside {record}; kernel {host_pool()}; extender {holds}"


def _timestamp(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def _need_pages(pod: dict[str, Any]) -> int:
    return 0 if pod["metadata"]["labels"].get("consumer") == "plain" else UNIT


def _retrying(what: str, action: Callable[[], Any], seconds: float = 300.0) -> Any:
    """An API call that a cut API server may refuse for a while."""
    until = time.monotonic() + seconds
    while True:
        try:
            return action()
        except AssertionError:
            if time.monotonic() > until:
                raise AssertionError(f"{what}: the API server did not come back") from None
            time.sleep(1.0)


class Player:
    """Plays a schedule in one namespace, observing once a second (``SAMPLE_SECONDS``)."""

    def __init__(self, namespace: str, seconds: float, workers: list[str]) -> None:
        self.namespace, self.workers, self.w1 = namespace, workers, workers[0]
        self.phase = Phase(namespace, seconds)
        self.host_vms: list[HostVM] = []
        self.host_vm_due = False
        self.wait_for_record: tuple[int, float] | None = None  # (outside pages to see on w1, until)
        self.lifetime_of: dict[str, float] = {}
        self.delete_at: dict[str, float] = {}  # the pod's lifetime from ready; a failed one at once
        self.room_since: dict[str, float] = {}
        self.fit: set[str] = set()  # pods the kernel had room for when they arrived (and for those before)
        self.seen: set[str] = set()
        self.counted: set[str] = set()
        self.serial = 0

    def play(self, events: list[Event]) -> Phase:
        queue, start = list(events), time.monotonic()
        next_resources = 0.0
        try:
            while (now := time.monotonic() - start) < self.phase.seconds:
                try:
                    next_resources = self._tick(now, queue, next_resources)
                except AssertionError as error:
                    # The API server away (a fault): the tick is tried again; what a call said is counted.
                    self.phase.api_errors[str(error).split(":", 1)[0]] += 1
                time.sleep(max(0.0, SAMPLE_SECONDS - (time.monotonic() - start - now)))
        finally:
            for vm in self.host_vms:
                vm.stop()
            for container in ("extender", "kube-scheduler"):
                for pod in _release_pods(container):
                    self.phase.errors.update(error_messages(_logs(pod["metadata"]["name"], container)))
            ours = f"app={LABEL}"
            kubectl("delete", "pods", "-n", self.namespace, "-l", ours, "--grace-period=1", "--wait=true", check=False)
        return self.phase

    def _tick(self, now: float, queue: list[Event], next_resources: float) -> float:
        items = _retrying("listing pods", lambda: get_json("pods", "-n", self.namespace, "-l", f"app={LABEL}"))
        pods = {p["metadata"]["name"]: p for p in items["items"]}
        in_flight = [p for p in pods.values() if _in_flight(p)]
        self._record_seen()
        while queue and queue[0].at <= now and self.wait_for_record is None:
            self._happen(queue.pop(0))
        if self.host_vm_due and not in_flight:
            waiting = [p for p in pods.values() if not p["spec"].get("nodeName") and _need_pages(p) > 0]
            self._toggle_host_vm(len(waiting))
        self._observe(now, pods, sum(_need_pages(p) for p in in_flight))
        if now < next_resources:
            return next_resources
        if (sample := _extender_resources(now)) is not None:
            self.phase.resources.append(sample)
            self.phase.timeline[-1]["extender_rss_mib"] = round(sample["rss_mib"], 1)
        return now + RESOURCE_SAMPLE_SECONDS

    def _record_seen(self) -> None:
        if self.wait_for_record is not None:
            pages, until = self.wait_for_record
            seen = outside_pages(self.w1)
            if (seen is not None and seen >= pages) or time.monotonic() > until:
                self.wait_for_record = None

    def _happen(self, event: Event) -> None:
        if event.what == "pod":
            self.serial += 1
            name = f"{event.detail}-{self.serial:04d}"
            # Consumers on worker 1 (the one pool behind every node: see the module note).
            pod = consumer_pod(self.namespace, name, event.detail, node=None if event.detail == "plain" else self.w1)
            _retrying("creating a pod", lambda: kubectl("apply", "-f", "-", stdin=json.dumps(pod)))
            self.lifetime_of[name] = event.lifetime
            self.phase.pods[event.detail] += 1
        elif event.what == "host-vm":
            self.host_vm_due = True
        else:
            try:
                _fault(event.detail, self.workers, self.phase.errors)
            except AssertionError as error:  # counted, not lost with the tick (Phase.unproven)
                self.phase.faults_not_applied.append(f"{event.detail} at {event.at:.0f} s: {error}")
                return
            self.phase.faults.append(f"{event.detail} at {event.at:.0f} s")

    def _toggle_host_vm(self, waiting: int) -> None:
        self.host_vm_due = False
        if self.host_vms:
            self.host_vms.pop().stop()
            return
        # Only out of room no waiting consumer needs: a VM taking the pages a pod is about to be
        # placed on races every scheduler (the extender learns of it with the agent's next record),
        # and that pod would fail on its node whatever placed it. The hour's first run lost one so.
        pool = host_pool()
        if pool["free_hugepages"] - pool["resv_hugepages"] < UNIT * (1 + waiting):
            return
        vm = HostVM(UNIT)
        vm.start()
        self.host_vms.append(vm)
        self.phase.host_vms += 1
        # Arrivals wait until worker 1's record shows the VM's pages (or 20 s).
        self.wait_for_record = ((outside_pages(self.w1) or 0) + UNIT, time.monotonic() + 20)

    def _observe(self, now: float, pods: dict[str, dict[str, Any]], promised: int) -> None:
        pool = host_pool()
        room = pool["free_hugepages"] - pool["resv_hugepages"] - promised
        running = pending = 0
        waiting = 0  # consumers waiting so far, oldest first: room for a new one is room past theirs
        for name, pod in sorted(pods.items(), key=lambda item: item[1]["metadata"]["creationTimestamp"]):
            if name not in self.seen:
                self.seen.add(name)
                need = _need_pages(pod)
                own = need if _in_flight(pod) else 0  # placed since the last look: its pages promised
                if need == 0 or need * (waiting + 1) <= room + own:
                    self.fit.add(name)
            if not pod["spec"].get("nodeName") and not pod["metadata"].get("deletionTimestamp"):
                waiting += _need_pages(pod) > 0
            if pod["metadata"].get("deletionTimestamp"):
                # Deleted by the soak at its lifetime's end (grace 1 s): testpmd then dies of SIGKILL
                # (exit 137) while the pod goes, which is no failure on the node.
                continue
            if not pod["spec"].get("nodeName"):
                pending += 1
                self._maybe_stranded(now, name, pod, room)
                continue
            self.room_since.pop(name, None)
            why = failure_on_the_node(pod)
            if why is not None:
                if name not in self.phase.failures:
                    error = consumer_error(self.namespace, name)
                    self.phase.failures[name] = f"{why}: {error}" if error else why
                self.delete_at.setdefault(name, now)
            elif is_ready(pod):
                running += 1
                self._ready(now, name, pod)
        for name in [n for n, at in self.delete_at.items() if at <= now]:
            kubectl("delete", "pod", name, "-n", self.namespace, "--grace-period=1", "--wait=false", check=False)
            self.delete_at.pop(name)
        self.phase.timeline.append(
            {"t": round(now, 1), "running": running, "pending": pending, "stranded": self.phase.stranded,
             "failed": self.phase.failed_on_the_node, "free_pages": pool["free_hugepages"],
             "host_vms": len(self.host_vms)}
        )  # fmt: skip

    def _maybe_stranded(self, now: float, name: str, pod: dict[str, Any], room: int) -> None:
        if _need_pages(pod) > room:
            self.room_since.pop(name, None)
            return
        since = self.room_since.setdefault(name, now)
        if now - since > STRANDED_AFTER and name not in self.phase.strandings:
            last = f"; last fault: {self.phase.faults[-1]}" if self.phase.faults else ""
            self.phase.strandings[name] = (
                f"unbound {now - since:.0f} s at {now:.0f} s with {room} pages free by the kernel{last}"
            )
            conditions = pod.get("status", {}).get("conditions", [])
            said = next((c.get("message", "") for c in conditions if c["type"] == "PodScheduled"), "")
            self.phase.accounts.append(f"at {now:.0f} s, {name} stranded ({said}): {_accounts(self.w1)}")

    def _ready(self, now: float, name: str, pod: dict[str, Any]) -> None:
        if name in self.counted:
            return
        self.counted.add(name)
        ready = next(c for c in pod["status"]["conditions"] if c["type"] == "Ready")
        took = _timestamp(ready["lastTransitionTime"]) - _timestamp(pod["metadata"]["creationTimestamp"])
        kind = pod["metadata"]["labels"]["consumer"]
        self.phase.latencies.setdefault(kind, []).append(took)
        if name in self.fit:
            self.phase.fit_latencies.setdefault(kind, []).append(took)
        self.delete_at[name] = now + self.lifetime_of.get(name, LIFETIME_SECONDS[0])


def _in_flight(pod: dict[str, Any]) -> bool:
    """A consumer placed and not yet holding its pages (neither ready nor failed)."""
    return (
        bool(pod["spec"].get("nodeName"))
        and _need_pages(pod) > 0
        and not is_ready(pod)
        and failure_on_the_node(pod) is None
        and pod.get("status", {}).get("phase") != "Succeeded"
    )


def run(*, minutes: float, workers: list[str], artifacts: Path) -> Report:
    """The soak: the schedule in enforce for ``minutes``, its beginning in off; the report (also
    written to ``artifacts``: soak.txt, soak-timeline.jsonl)."""
    seed = int(os.environ.get("SOAK_SEED", "21"))
    seconds = minutes * 60
    off_seconds = float(os.environ.get("SOAK_OFF_MINUTES", str(max(1.0, minutes / 5)))) * 60
    events = schedule(seed, seconds)
    set_reserved(dict.fromkeys(workers))
    # Pages held before (someone else's, on a shared machine) are outside pods for the agents and
    # not free for the strandings: both read the kernel.
    minutes_off = off_seconds / 60
    print(f"\nsoak starting: {minutes:.1f} + {minutes_off:.1f} min, seed {seed}, host pool before {host_pool()}")
    helm_upgrade("nodeAgent.enabled=true")
    kubectl("rollout", "status", f"daemonset/{RELEASE}-node-agent", "-n", NAMESPACE, "--timeout=180s")
    try:
        enforce = Player(ENFORCE, seconds, workers).play(events)
        off = Player(OFF, off_seconds, workers).play([e for e in events if e.at < off_seconds]) if off_seconds else None
    finally:
        helm_upgrade("nodeAgent.enabled=false")
    report = Report(enforce, off)
    artifacts.mkdir(parents=True, exist_ok=True)
    (artifacts / "soak.txt").write_text("\n".join([*report.lines(), *report.plot(), report.summary()]) + "\n")
    with (artifacts / "soak-timeline.jsonl").open("w") as out:
        for phase in (enforce, off):
            for row in phase.timeline if phase is not None else []:
                out.write(json.dumps({"phase": phase.namespace, **row}) + "\n")  # type: ignore[union-attr]
    (artifacts / "soak-accounts.txt").write_text(
        "\n".join(line for phase in (enforce, off) if phase is not None for line in phase.accounts) + "\n"
    )
    for line in [*report.lines(), *report.plot()]:
        print(line)
    return report
