"""Helpers for the placement tests: a live extender, scheduler configs, metrics and pool accounting.

The oracle here is independent of the extender's code: a pod's hugepage need is
read from the API objects with the client's own quantity parser.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any, TypeVar

import yaml
from kubernetes import client
from kubernetes.utils import parse_quantity as _parse_quantity
from prometheus_client.parser import text_string_to_metric_families

from e2e.controlplane import (
    ControlPlane,
    Scheduler,
    Service,
    extender_scheduler_config,
    pod_assignments,
    pod_events,
    wait_until,
)

RESOURCE = "hugepages-2Mi"
RESERVED_ANNOTATION = "hugepage-extender.io/reserved-hugepages-2Mi"
EXTENDER_REASON_INSUFFICIENT = f"Insufficient {RESOURCE} (pool in use or held by placements in flight)"
EXTENDER_REASON_EXCEEDS_POOL = f"Pod's {RESOURCE} request exceeds the node's whole pool"
EXTENDER_REASON_HELD_OUTSIDE = f"Pod's {RESOURCE} request exceeds what pages held outside pods leave of the pool"
# Short scheduler backoff keeps the Pending and retry cases quick.
BACKOFF = {"podInitialBackoffSeconds": 1, "podMaxBackoffSeconds": 2}

StartExtender = Callable[..., Service]
StartScheduler = Callable[..., Scheduler]
T = TypeVar("T")
parse_quantity: Callable[[str], Decimal] = _parse_quantity


# --------------------------------------------------------------------------- waiting


BIN = Path(sys.executable).parent  # the project's console scripts (hugepage-extender, kubectl-hugepages)


def run(command: str, *args: str, env: Mapping[str, str] | None = None) -> str:
    """A console script of the project, run to success; its output."""
    done = subprocess.run(
        [str(BIN / command), *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=180,
        env={**os.environ, **(env or {})},
    )
    assert done.returncode == 0, f"{command} {' '.join(args)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def wait_for_event(
    core: client.CoreV1Api, namespace: str, pod: str, reason: str, *, contains: str = "", timeout: float = 30.0
) -> str:
    """The first ``reason: message`` event on the pod whose text contains ``contains``."""

    def find() -> str | None:
        for event in pod_events(core, namespace, pod):
            if event.startswith(f"{reason}:") and contains in event:
                return event
        return None

    try:
        return wait_until(f"a {reason} event on {namespace}/{pod}", find, timeout=timeout)
    except AssertionError:
        raise AssertionError(
            f"no {reason} event containing {contains!r} on {namespace}/{pod}: {pod_events(core, namespace, pod)}"
        ) from None


def assert_stays_pending(core: client.CoreV1Api, namespace: str, names: Iterable[str], seconds: float) -> None:
    """Every named pod is still unbound after ``seconds`` (checked all along)."""
    wanted = set(names)
    deadline = time.monotonic() + seconds
    while True:
        assignments = pod_assignments(core, namespace)
        bound = {name: node for name, node in assignments.items() if name in wanted and node}
        assert not bound, f"pods expected to stay Pending were bound: {bound}"
        if time.monotonic() > deadline:
            return
        time.sleep(0.25)


# --------------------------------------------------------------------------- the extender


def write_extender_config(directory: Path, document: Mapping[str, Any], name: str = "extender.yaml") -> Path:
    path = directory / name
    path.write_text(yaml.safe_dump(dict(document), sort_keys=False))
    return path


def start_live_extender(
    plane: ControlPlane,
    start_extender: StartExtender,
    config: Path,
    *,
    name: str,
    port: int | None = None,
    enable_bind: bool = False,
    extra_args: Sequence[str] = (),
    timeout: float = 60.0,
) -> Service:
    """``hugepage-extender serve --kubeconfig <admin> --config <config>``, waited for until /readyz (synced)."""
    args = ["--kubeconfig", str(plane.kubeconfig), "--config", str(config), *extra_args]
    if enable_bind:
        args.append("--enable-bind")
    return start_extender(args, name=name, port=port, ready_path="/readyz", timeout=timeout)


def metric_value(service: Service, name: str, labels: Mapping[str, str] | None = None) -> float:
    """The sum of the samples called ``name`` whose labels include ``labels`` (0 when none)."""
    answer = service.get("/metrics")
    assert answer is not None, f"{service.name} /metrics did not answer"
    status, body = answer
    assert status == 200, f"{service.name} /metrics answered {status}"
    wanted = dict(labels or {})
    total = 0.0
    for family in text_string_to_metric_families(body.decode()):
        for sample in family.samples:
            if sample.name == name and wanted.items() <= sample.labels.items():
                total += sample.value
    return total


# --------------------------------------------------------------------------- the scheduler


def placement_scheduler_config(
    extender_url: str | None,
    *,
    scheduler_name: str,
    node_cache_capable: bool = True,
    ignorable: bool = False,
    bind: bool = False,
    http_timeout: str = "5s",
) -> dict[str, Any]:
    """A KubeSchedulerConfiguration: one profile scoring every node, short backoff,
    and the extender at ``extender_url`` (none when None: the native scheduler alone)."""
    if extender_url is None:
        config: dict[str, Any] = {
            "apiVersion": "kubescheduler.config.k8s.io/v1",
            "kind": "KubeSchedulerConfiguration",
            "profiles": [{"schedulerName": scheduler_name, "percentageOfNodesToScore": 100}],
        }
    else:
        config = extender_scheduler_config(
            extender_url,
            scheduler_name=scheduler_name,
            node_cache_capable=node_cache_capable,
            ignorable=ignorable,
            http_timeout=http_timeout,
            percentage_of_nodes_to_score=100,
            extender={"bindVerb": "bind"} if bind else None,
        )
    config.update(BACKOFF)
    return config


# --------------------------------------------------------------------------- objects


def reserve_pages(core: client.CoreV1Api, node: str, quantity: str) -> None:
    """Publish pages held outside pod requests on a node (the extender's annotation)."""
    core.patch_node(node, {"metadata": {"annotations": {RESERVED_ANNOTATION: quantity}}})


def create_pods(plane: ControlPlane, namespace: str, names: Sequence[str], *, workers: int = 4, **kwargs: Any) -> None:
    """Create many pods at once (``pod_manifest`` kwargs), a few API calls in parallel."""

    def create(name: str) -> None:
        plane.create_pod(namespace, name, **kwargs)

    with ThreadPoolExecutor(max_workers=workers) as pool:
        list(pool.map(create, names))


def bound_pod(plane: ControlPlane, namespace: str, name: str, node: str, **kwargs: Any) -> None:
    """A pod bound to ``node`` by a Binding of our own (no scheduler involved), e.g. a VM already running."""
    kwargs.setdefault("scheduler_name", "no-such-scheduler")
    plane.create_pod(namespace, name, **kwargs)
    body = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": name, "namespace": namespace},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
    }
    # Not decoded: the client's model rejects the API's answer (a Status, not a Binding).
    plane.core.create_namespaced_pod_binding(
        name, namespace, client.V1Binding.model_validate(body), _preload_content=False
    )


def _quantity(resources: Mapping[str, str] | None, name: str) -> Decimal:
    if not resources or name not in resources:
        return Decimal(0)
    return Decimal(parse_quantity(resources[name]))


def hugepage_need(pod: client.V1Pod, *, need_from_memory: bool) -> int:
    """Bytes of the pool a pod holds: its containers' hugepage requests, or their memory requests for
    VM-backed pods (enough for the one-container pods these tests make: no init containers, no overhead)."""
    containers = pod.spec.containers if pod.spec is not None else []

    def total(name: str) -> Decimal:
        return sum(
            (_quantity(c.resources.requests if c.resources else None, name) for c in containers),
            Decimal(0),
        )

    need = total(RESOURCE)
    if need == 0 and need_from_memory:
        need = total("memory")
    return int(need)


def pool_bytes(node: client.V1Node) -> int:
    """What a node's pool offers pods: allocatable minus the pages it reports held outside pods."""
    allocatable = (node.status.allocatable if node.status else None) or {}
    annotations = (node.metadata.annotations if node.metadata else None) or {}
    reserved = int(parse_quantity(annotations.get(RESERVED_ANNOTATION, "0")))
    return int(parse_quantity(allocatable.get(RESOURCE, "0"))) - reserved


def pool_usage(
    plane: ControlPlane, nodes: Iterable[str], need_from_memory: Mapping[str, bool]
) -> dict[str, tuple[int, int]]:
    """Node -> (bytes held by its bound non-terminal pods, bytes its pool offers), read from the API.

    ``need_from_memory`` says, per namespace, whether memory-only pods hold pages.
    """
    wanted = set(nodes)
    used: defaultdict[str, int] = defaultdict(int)
    for pod in plane.core.list_pod_for_all_namespaces().items:
        node = pod.spec.node_name if pod.spec is not None else None
        if node not in wanted or (pod.status and pod.status.phase in ("Succeeded", "Failed")):
            continue
        namespace = pod.metadata.namespace if pod.metadata else ""
        used[str(node)] += hugepage_need(pod, need_from_memory=need_from_memory.get(str(namespace), False))
    return {name: (used[name], pool_bytes(plane.core.read_node(name))) for name in wanted}


def bound_active_pods(plane: ControlPlane) -> int:
    """Bound, non-terminal pods in the whole cluster: what the extender's cache should hold."""
    pods = plane.core.list_pod_for_all_namespaces().items
    return sum(
        1
        for p in pods
        if p.spec is not None and p.spec.node_name and not (p.status and p.status.phase in ("Succeeded", "Failed"))
    )


def wait_extender_in_step(plane: ControlPlane, extender: Service, *, timeout: float = 15.0) -> int:
    """Wait until the extender's cache holds as many pods as the API shows bound and active; that count."""

    def in_step() -> int | None:
        expected = bound_active_pods(plane)
        cached = int(metric_value(extender, "hugepage_extender_cached_pods"))
        return expected if cached == expected and expected > 0 else None

    return wait_until(f"{extender.name}'s cache to match the API", in_step, timeout=timeout)


# --------------------------------------------------------------------------- one test's corner


@dataclass
class Cell:
    """One test's corner of the shared control plane: its namespace, node label, nodes, extender
    and schedulers. Its pods select its label, so other tests' nodes are never candidates."""

    plane: ControlPlane
    namespace: str
    label: tuple[str, str]
    tmp_path: Path
    start_extender: StartExtender
    start_scheduler: StartScheduler

    @property
    def core(self) -> client.CoreV1Api:
        return self.plane.core

    @property
    def slug(self) -> str:
        return self.label[1]

    @property
    def selector(self) -> dict[str, str]:
        return {self.label[0]: self.label[1]}

    def node(
        self,
        suffix: str,
        *,
        hugepages: str = "1Gi",
        reserved: str | None = None,
        cpu: str = "8",
        memory: str = "32Gi",
        labels: Mapping[str, str] | None = None,
    ) -> str:
        """A node with this test's label (and ``labels``); ``reserved`` pages held outside pods."""
        name = f"{self.slug}-{suffix}"
        self.plane.create_node(
            name, hugepages_2mi=hugepages, cpu=cpu, memory=memory, labels={**self.selector, **(labels or {})}
        )
        if reserved is not None:
            reserve_pages(self.core, name, reserved)
        return name

    def new_namespace(self, suffix: str) -> str:
        name = f"{self.namespace}-{suffix}"[:63]
        self.plane.create_namespace(name)
        return name

    def extender(
        self,
        config: Mapping[str, Any],
        *,
        suffix: str = "",
        port: int | None = None,
        enable_bind: bool = False,
        nudge: bool = False,
        args: Sequence[str] = (),
    ) -> Service:
        """A live extender (list/watch of the API server) with this config and ``args``, ready. With
        ``nudge``, as in a cluster: its nudge annotates a pod of the test's own bound to a node (its own
        node, with no pool), the pod it names with --nudge-pod."""
        extra_args = list(args)
        if nudge:
            pod = f"extender{suffix}"
            bound_pod(self.plane, self.namespace, pod, self.node(f"home{suffix}", hugepages="0"), hugepages_2mi=None)
            extra_args += ["--nudge-pod", f"{self.namespace}/{pod}"]
        path = write_extender_config(self.tmp_path, config, name=f"extender{suffix}.yaml")
        return start_live_extender(
            self.plane,
            self.start_extender,
            path,
            name=f"extender-{self.slug}{suffix}",
            port=port,
            enable_bind=enable_bind,
            extra_args=extra_args,
        )

    def scheduler(self, extender: Service | None, *, prefix: str = "hp", **kwargs: Any) -> str:
        """A kube-scheduler of its own (``placement_scheduler_config`` kwargs); its scheduler name."""
        name = f"{prefix}-{self.slug}"
        url = extender.url if extender is not None else None
        self.start_scheduler(placement_scheduler_config(url, scheduler_name=name, **kwargs), name=name)
        return name

    def pod(self, name: str, scheduler: str, *, namespace: str | None = None, **kwargs: Any) -> str:
        """A pod for ``scheduler`` selecting this test's nodes (``pod_manifest`` kwargs)."""
        kwargs.setdefault("node_selector", self.selector)
        self.plane.create_pod(namespace or self.namespace, name, scheduler_name=scheduler, **kwargs)
        return name

    def pods(self, names: Sequence[str], scheduler: str, *, namespace: str | None = None, **kwargs: Any) -> list[str]:
        kwargs.setdefault("node_selector", self.selector)
        create_pods(self.plane, namespace or self.namespace, names, scheduler_name=scheduler, **kwargs)
        return list(names)
