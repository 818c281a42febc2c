"""A real Kubernetes control plane on 127.0.0.1: etcd, kube-apiserver, kube-scheduler.

No Docker, no kubelet, no controller-manager. The binaries come from
``e2e/tools/build`` (or ``$E2E_TOOLS_BIN``); certificates are made with the
``openssl`` command. Nodes are plain API objects whose status the tests write
themselves, so the real kube-scheduler binds pods to them and the pods stay
Pending with ``spec.nodeName`` set.

Typical use::

    with ControlPlane() as cp:                      # etcd + kube-apiserver, admin kubeconfig
        cp.create_node("node-a", hugepages_2mi="1Gi")
        cp.start_scheduler()                        # default profile, no extender
        cp.create_pod("default", "p", hugepages_2mi="128Mi")
        assert cp.wait_for_pod_bound("default", "p") == "node-a"

Every process runs in its own process group with its output in
``<workdir>/logs/<name>.log``; ``stop()`` (and interpreter exit, and on Linux
the death of the thread that started them) kills them all.

One module a job: ``binaries``, ``probes``, ``processes``, ``certificates``,
``scheduler``, ``plane`` (the ``ControlPlane``), ``objects`` (scheduler configs and API objects).
"""

from __future__ import annotations

from e2e.controlplane.binaries import REPO_ROOT, find_binaries
from e2e.controlplane.certificates import (
    Certificates,
    generate_certificates,
    issue_client_certificate,
    write_kubeconfig,
)
from e2e.controlplane.errors import BinariesUnavailable, ControlPlaneError
from e2e.controlplane.objects import (
    FAKE_NODE_LABEL,
    PAUSE_IMAGE,
    create_namespace,
    create_node,
    create_pod,
    delete_pods,
    extender_scheduler_config,
    node_manifest,
    pod_assignments,
    pod_events,
    pod_manifest,
    wait_for_pod_bound,
    wait_for_pods_bound,
)
from e2e.controlplane.plane import ControlPlane
from e2e.controlplane.probes import LOOPBACK, free_port, http_get, port_is_open, wait_until
from e2e.controlplane.processes import ManagedProcess, Service
from e2e.controlplane.scheduler import DEFAULT_SCHEDULER, Scheduler

__all__ = [
    "DEFAULT_SCHEDULER",
    "FAKE_NODE_LABEL",
    "LOOPBACK",
    "PAUSE_IMAGE",
    "REPO_ROOT",
    "BinariesUnavailable",
    "Certificates",
    "ControlPlane",
    "ControlPlaneError",
    "ManagedProcess",
    "Scheduler",
    "Service",
    "create_namespace",
    "create_node",
    "create_pod",
    "delete_pods",
    "extender_scheduler_config",
    "find_binaries",
    "free_port",
    "generate_certificates",
    "http_get",
    "issue_client_certificate",
    "node_manifest",
    "pod_assignments",
    "pod_events",
    "pod_manifest",
    "port_is_open",
    "wait_for_pod_bound",
    "wait_for_pods_bound",
    "wait_until",
    "write_kubeconfig",
]
