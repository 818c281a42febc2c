"""One extender per scheduler, on loopback: what the topology promises, on kind.

The chart (e2e/kind/values.yaml) runs two secondary scheduler pods, each with
its own extender as a native sidecar that listens on 127.0.0.1 only; the pod
holding the lease schedules. These scenarios show:

- from another pod in the cluster the verbs cannot be reached at all (only the
  probe port answers, and it serves no verb and no /debug/state), while
  ``kubectl port-forward`` (authenticated and authorised by the API server)
  reaches /debug/state;
- the scheduler's leader killed during a burst: the lease moves, nothing is
  over-committed, nothing lost; the time until placements resume is printed;
- the leader's extender container killed during a burst: the same;
- the extender's round trip over loopback against the previous topology's
  Service path, side by side (benchmarks/extender_round_trip.py's client, the
  same server).
"""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from benchmarks.extender_round_trip import CLIENT, body
from e2e.controlplane import wait_until
from e2e.kind.test_kind import (
    KUBECONFIG,
    KUBECTL,
    MI,
    NAMESPACE,
    PAGE,
    POOL_PAGES,
    RELEASE,
    TOUCHER_IMAGE,
    WATCH_SETTLE_SECONDS,
    create_pod,
    extender_pods,
    get_json,
    kubectl,
    leader,
    metric,
    pods,
    says_no_room,
    scheduling_messages,
    set_reserved,
    worker_names,
)

__all__ = ["pods"]  # the fixture, shared with test_kind.py
# An enforcing namespace of its own (e2e/kind/values.yaml), so these scenarios run
# whatever test_kind.py left (its namespaces go when its module ends).
ENFORCE = "hp-topology"

VERBS_PORT, PROBE_PORT = 8888, 8081

# Run in a client pod on a worker: a TCP connect to each address (refused, or answered),
# and what the probe port answers for a verb and for /debug/state.
PROBE_CLIENT = r"""
import json, socket, sys, urllib.error, urllib.request
targets, verbs, probe = json.loads(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
result = {}
for ip in targets:
    try:
        socket.create_connection((ip, verbs), timeout=3).close()
        result[f"{ip}:{verbs}"] = "connected"
    except OSError as error:
        result[f"{ip}:{verbs}"] = type(error).__name__
    for method, path in (("POST", "/filter"), ("GET", "/debug/state"), ("GET", "/readyz")):
        request = urllib.request.Request(f"http://{ip}:{probe}{path}", data=b"{}" if method == "POST" else None)
        try:
            with urllib.request.urlopen(request, timeout=3) as response:
                result[f"{ip}:{probe} {method} {path}"] = response.status
        except urllib.error.HTTPError as error:
            result[f"{ip}:{probe} {method} {path}"] = error.code
        except OSError as error:
            result[f"{ip}:{probe} {method} {path}"] = type(error).__name__
print(json.dumps(result))
"""


def client_pod(name: str, node: str, *, labels: dict[str, str] | None = None, command: list[str] | None = None) -> str:
    """A pod of the extender's image (it has Python) on ``node``, idle unless given a command
    (then ready once it listens on the verbs' port); its name."""
    listening = {"tcpSocket": {"port": VERBS_PORT}, "periodSeconds": 1} if command else None
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ENFORCE, "labels": {"app": "hugepage-e2e-topology", **(labels or {})}},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": node},
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {
                    "name": "main",
                    "image": TOUCHER_IMAGE,
                    "imagePullPolicy": "Never",
                    "command": command or ["sleep", "3600"],
                    "resources": {"requests": {"cpu": "10m", "memory": "32Mi"}, "limits": {"memory": "256Mi"}},
                    **({"readinessProbe": listening} if listening else {}),
                }
            ],
        },
    }
    kubectl("apply", "-f", "-", stdin=json.dumps(pod))
    kubectl("wait", "--for=condition=Ready", f"pod/{name}", "-n", ENFORCE, "--timeout=120s")
    return name


def delete_topology_pods() -> None:
    kubectl("delete", "pods,services", "-n", ENFORCE, "-l", "app=hugepage-e2e-topology", "--wait=true", check=False)


def scheduler_pod(name: str) -> dict[str, Any]:
    pod: dict[str, Any] = get_json("pod", name, "-n", NAMESPACE)
    return pod


@contextlib.contextmanager
def port_forward(pod: str, port: int) -> Iterator[int]:
    """``kubectl port-forward`` to the pod's 127.0.0.1:``port``: the authenticated path to /debug/state."""
    with socket.socket() as spare:
        spare.bind(("127.0.0.1", 0))
        local = int(spare.getsockname()[1])
    command = [KUBECTL, "--kubeconfig", KUBECONFIG, "-n", NAMESPACE, "port-forward", f"pod/{pod}", f"{local}:{port}"]
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as forward:
        try:
            assert forward.stdout is not None
            line = forward.stdout.readline()
            assert "Forwarding from" in line, line
            yield local
        finally:
            forward.terminate()
            forward.wait(timeout=10)


@pytest.fixture(scope="module")
def workers() -> Iterator[list[str]]:
    names = worker_names()
    assert len(names) == 3, names
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ENFORCE}}
    kubectl("apply", "-f", "-", stdin=json.dumps(namespace))
    set_reserved(dict.fromkeys(names))
    yield names
    delete_topology_pods()
    kubectl("delete", "namespace", ENFORCE, "--wait=false", check=False)
    set_reserved(dict.fromkeys(names))


# -- the verbs are out of reach --------------------------------------------------------------


def test_the_verbs_cannot_be_reached_from_another_pod(workers: list[str]) -> None:
    schedulers = [scheduler_pod(name) for name in extender_pods()]
    assert len(schedulers) == 2
    targets = [p["status"]["podIP"] for p in schedulers] + [p["status"]["hostIP"] for p in schedulers]
    try:
        client = client_pod("outsider", workers[0])
        printed = kubectl(
            "exec", client, "-n", ENFORCE, "--", "python", "-c", PROBE_CLIENT, json.dumps(targets),
            str(VERBS_PORT), str(PROBE_PORT),
        )  # fmt: skip
    finally:
        delete_topology_pods()
    seen = json.loads(printed)
    print(f"\nfrom a pod on {workers[0]} to the scheduler pods' and their nodes' addresses: {seen}")
    pod_ips = [p["status"]["podIP"] for p in schedulers]
    for ip in targets:
        # Nothing listens on the verbs' port at any address but the pods' own 127.0.0.1.
        assert seen[f"{ip}:{VERBS_PORT}"] == "ConnectionRefusedError", (ip, seen)
    for ip in pod_ips:
        # The probe port answers its probes, and no verb and no /debug/state.
        assert seen[f"{ip}:{PROBE_PORT} GET /readyz"] == 200, seen
        assert seen[f"{ip}:{PROBE_PORT} POST /filter"] in {404, 405}, seen
        assert seen[f"{ip}:{PROBE_PORT} GET /debug/state"] == 404, seen
    # The authenticated path: kubectl port-forward (pods/portforward in the release's
    # namespace) to the lease holder's 127.0.0.1, where explain --extender reads its holds.
    with port_forward(leader(), VERBS_PORT) as local:
        request = f"http://127.0.0.1:{local}/debug/state?namespace={ENFORCE}"
        with urllib.request.urlopen(request, timeout=10) as response:
            state = json.load(response)
    assert state["ready"] is True, state
    print(f"/debug/state through kubectl port-forward to the leader: ready={state['ready']}")


# -- failover during a burst -------------------------------------------------------------------

ROOM = 256 * MI  # room per worker; the rest of the pool held outside pods (the annotation)
UNIT = 64 * MI  # per pod: 4 fit on a worker, 12 on the three


def container_id(pod: dict[str, Any], name: str) -> str:
    statuses = pod["status"].get("initContainerStatuses", []) + pod["status"].get("containerStatuses", [])
    (status,) = [s for s in statuses if s["name"] == name]
    container: str = status["containerID"]
    return container.split("://", 1)[1]


def kill_container(pod_name: str, container: str) -> None:
    """SIGKILL, no grace: the container's process dies as in a crash (the kubelet restarts it)."""
    pod = scheduler_pod(pod_name)
    node = pod["spec"]["nodeName"]  # kind's node is the Docker container of that name
    stop = ["docker", "exec", node, "crictl", "stop", "--timeout", "0", container_id(pod, container)]
    subprocess.run(stop, check=True, stdout=subprocess.DEVNULL)  # it prints the container's ID


def bound_per_node(names: list[str]) -> dict[str, list[str]]:
    items = {p["metadata"]["name"]: p for p in get_json("pods", "-n", ENFORCE)["items"]}
    by_node: dict[str, list[str]] = {}
    for name in names:
        node = items.get(name, {}).get("spec", {}).get("nodeName")
        if node:
            by_node.setdefault(node, []).append(name)
    return by_node


def bound_count(names: list[str]) -> int:
    return sum(len(v) for v in bound_per_node(names).values())


def burst_with_a_failure(
    workers: list[str], created: list[tuple[str, str]], what: str, fail: Callable[[], None]
) -> dict[str, Any]:
    """16 pods of 64Mi on 12 places, in two waves of 8; ``fail`` runs once at least 3 of the
    first wave are bound (usually all 8: they bind within a fraction of a second), and the
    second wave is created right after it. Asserts nothing over-committed and nothing lost;
    returns the figures."""
    set_reserved(dict.fromkeys(workers, f"{(POOL_PAGES * PAGE - ROOM) // MI}Mi"))
    names = [f"{what}-{i:02d}" for i in range(16)]
    for name in names[:8]:
        create_pod(created, ENFORCE, name, hugepages=f"{UNIT // MI}Mi")
    wait_until("a few pods of the first wave bound", lambda: bound_count(names) >= 3, timeout=60, interval=0.1)
    holder = leader()
    before = bound_count(names)
    killed = time.monotonic()
    fail()
    for name in names[8:]:
        create_pod(created, ENFORCE, name, hugepages=f"{UNIT // MI}Mi")
    wait_until("the next placement", lambda: bound_count(names) > before, timeout=180, interval=0.1)
    resumed = time.monotonic() - killed

    def twelve_bound() -> dict[str, list[str]] | None:
        found = bound_per_node(names)
        return found if sum(len(v) for v in found.values()) == 12 else None

    by_node = wait_until("12 of the 16 pods bound", twelve_bound, timeout=240, interval=0.5)
    settled = time.monotonic() - killed
    pending = [n for n in names if all(n not in v for v in by_node.values())]
    # Nothing lost: the other 4 wait, each with the extender's reason (after the failure,
    # once the extender answered again).
    wait_until(
        "the extender's reason on every pending pod",
        lambda: all(says_no_room(scheduling_messages(ENFORCE).get(n, "")) for n in pending),
        timeout=120,
        interval=1.0,
    )
    time.sleep(WATCH_SETTLE_SECONDS)
    final = bound_per_node(names)
    per_node = ", ".join(f"{node}: {len(on)}" for node, on in sorted(final.items()))
    figures = {
        "bound_before": before,
        "resumed_s": round(resumed, 1),
        "twelve_bound_s": round(settled, 1),
        "per_node": per_node,
        "holder_before": holder,
        "holder_after": leader(),
    }
    print(
        f"\n{what}: {before} bound before; placements resumed {resumed:.1f} s after the kill, "
        f"12 bound after {settled:.1f} s; per node {per_node}; lease {holder} -> {figures['holder_after']}"
    )
    # Nothing over-committed: at most 4 pods of 64Mi on any worker, and still 12 after a wait.
    assert sum(len(v) for v in final.values()) == 12, final
    for node, on in final.items():
        assert len(on) * UNIT <= ROOM, (node, on)
    assert len(pending) == 4, pending
    return figures


def lease_holder() -> str:
    identity: str = get_json("lease", f"{RELEASE}-scheduler", "-n", NAMESPACE)["spec"]["holderIdentity"]
    return identity


def test_the_schedulers_leader_killed_during_a_burst(workers: list[str], pods: list[tuple[str, str]]) -> None:
    holder = leader()
    identity = lease_holder()
    assert holder in extender_pods()

    def kill_the_leader() -> None:
        # No lease release: a crash. The lease expires (leaseDuration 15 s) and another
        # scheduler, with its own synced extender, takes it.
        kill_container(holder, "kube-scheduler")

    figures = burst_with_a_failure(workers, pods, "leader-killed", kill_the_leader)
    # The lease moved to another scheduler process (the other pod's, or the killed one's
    # successor in the same pod: a new identity either way), whose extender placed the rest.
    moved_to = lease_holder()
    print(f"lease holder: {identity} -> {moved_to}")
    assert moved_to != identity
    assert figures["holder_before"] == holder
    assert moved_to.split("_", 1)[0] in extender_pods()
    wait_until("both scheduler pods ready again", lambda: len(ready_schedulers()) == 2, timeout=120, interval=1.0)


def test_the_leaders_extender_killed_during_a_burst(workers: list[str], pods: list[tuple[str, str]]) -> None:
    holder = leader()
    restarts_before = restarts(holder, "extender")

    def kill_the_extender() -> None:
        # The scheduler's calls fail (connection refused, then "not synced" until the
        # restarted extender has listed the cluster): each attempt fails and is retried.
        kill_container(holder, "extender")

    figures = burst_with_a_failure(workers, pods, "extender-killed", kill_the_extender)
    assert restarts(holder, "extender") == restarts_before + 1
    print(f"extender killed: the lease stayed with {figures['holder_after']} (was {figures['holder_before']})")
    wait_until("both scheduler pods ready again", lambda: len(ready_schedulers()) == 2, timeout=120, interval=1.0)
    # The restarted extender filtered and bound the pods placed after the kill.
    assert metric(leader(), "hugepage_extender_binds_total", result="bound") > 0.0


def restarts(pod_name: str, container: str) -> int:
    pod = scheduler_pod(pod_name)
    statuses = pod["status"].get("initContainerStatuses", []) + pod["status"].get("containerStatuses", [])
    (status,) = [s for s in statuses if s["name"] == container]
    return int(status["restartCount"])


def ready_schedulers() -> list[str]:
    return [name for name in extender_pods() if _ready(scheduler_pod(name))]


def _ready(pod: dict[str, Any]) -> bool:
    conditions = pod.get("status", {}).get("conditions", [])
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


# -- the round trip: loopback against a Service ------------------------------------------------


def test_round_trip_over_loopback_against_a_service(workers: list[str]) -> None:
    # One extender (serve --example: the same decisions whatever the cluster) on worker 1,
    # behind a Service as the previous chart ran it. The same client, the same requests:
    # from inside its own pod on 127.0.0.1 (the sidecar's path), and from a pod on
    # worker 2 through the Service (kube-proxy, the pod network).
    serve = ["hugepage-extender", "serve", "--example", "--host", "0.0.0.0", "--port", str(VERBS_PORT)]  # noqa: S104
    try:
        server = client_pod("round-trip-server", workers[0], labels={"role": "server"}, command=serve)
        service = {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "round-trip", "namespace": ENFORCE, "labels": {"app": "hugepage-e2e-topology"}},
            "spec": {"selector": {"role": "server"}, "ports": [{"port": VERBS_PORT, "targetPort": VERBS_PORT}]},
        }
        kubectl("apply", "-f", "-", stdin=json.dumps(service))
        client = client_pod("round-trip-client", workers[1])
        calls = "2000"
        rows = []
        for path, pod, url in (
            ("loopback (in the server's pod)", server, f"http://127.0.0.1:{VERBS_PORT}"),
            ("Service, from another node", client, f"http://round-trip.{ENFORCE}.svc:{VERBS_PORT}"),
            ("loopback (in the server's pod), again", server, f"http://127.0.0.1:{VERBS_PORT}"),
        ):
            printed = kubectl("exec", pod, "-n", ENFORCE, "--", "python", "-c", CLIENT, url, calls, body())
            rows.append({"path": path, **json.loads(printed.strip().splitlines()[-1])})
    finally:
        delete_topology_pods()
    print("\nextender round trip (filter, 8 nodes, one kept-alive connection), milliseconds:")
    for row in rows:
        print(
            f"  {row['path']:<40} calls {row['calls']}  mean {row['mean_ms']:.3f}  p50 {row['p50_ms']:.3f}"
            f"  p90 {row['p90_ms']:.3f}  p99 {row['p99_ms']:.3f}"
        )
    assert all(row["calls"] == int(calls) for row in rows)
