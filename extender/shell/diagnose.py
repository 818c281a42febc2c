"""Live diagnostics: ``explain --kubeconfig`` and ``kubectl hugepages``, against the cluster as it is now.

One read of the API (the pod, every node, every bound pod, the node agents' records)
builds the same ``ClusterState`` the extender builds from its watch; the running
extender, when asked, adds what only it knows: placements in flight and the
namespace's effective policy. Then the same ``explain_pod`` and ``node_rows`` as
offline.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from collections.abc import Iterable, Sequence
from pathlib import Path

from kubernetes import client

from extender.core.config import Config
from extender.core.diagnostics import ExtenderState, NodeRow, node_rows
from extender.core.errors import ExtenderError
from extender.core.gates import GATE, gate_index
from extender.shell.kube.live import LiveCluster, LivePod, extender_url_of_service, read_cluster, read_pod
from extender.shell.remote import RemoteExtender
from extender.state.cluster import ClusterState
from extender.state.explain import PodExplanation, explain_pod


def _adopt(config: Config, remote: ExtenderState | None) -> Config:
    """The extender's pools (resource names) and policies win over a local config's: it is the one deciding."""
    if remote is None:
        return config
    return dataclasses.replace(config, resource_names=remote.resource_names, placement=remote.placement)


def live_explanation(
    api: client.ApiClient,
    namespace: str,
    name: str,
    *,
    config: Config,
    nodes: Sequence[str] | None = None,
    extender: RemoteExtender | None = None,
    cluster: str = "the API server",
    config_source: str = "built-in defaults",
) -> PodExplanation:
    live_pod = read_pod(api, namespace, name)
    pod = live_pod.pod
    # The extender first: its pool and policy decide how the cluster's pods are counted.
    remote = extender.state(namespace, None, exclude_pod=pod.metadata.uid) if extender is not None else None
    config = _adopt(config, remote)
    live = read_cluster(api)
    state = ClusterState(config)
    state.replace(live.nodes, [p for p in live.pods if p.metadata.uid != pod.metadata.uid], live.reports)
    sources = {"cluster": f"{cluster}: {len(live.nodes)} nodes, {len(live.pods)} bound pods"}
    if live.reports_missing:
        sources["node reports"] = f"none read ({live.reports_missing}): nodes counted from pod requests"
    names = _candidates(live, live_pod, nodes, sources)
    if pod.spec.node_name:
        sources["pod"] = f"already bound to {pod.spec.node_name} (not counted there below)"
    elif gate_index(pod) is not None:
        sources["pod"] = f"behind the scheduling gate {GATE}: lifted by the extender once a node it may use has room"
    sources.update(_decider_sources(remote, extender, state.nodes() if names is None else names, config_source))
    holds = remote.holds_by_size if remote is not None else None
    return explain_pod(state, pod, names, holds=holds, sources=sources)


def _candidates(
    live: LiveCluster, live_pod: LivePod, nodes: Sequence[str] | None, sources: dict[str, str]
) -> list[str] | None:
    """The nodes to explain: those asked for, else those the pod's nodeSelector matches (said in
    ``sources``), else None (every node)."""
    if nodes:
        return list(nodes)
    if live_pod.node_selector:
        # The scheduler never considers the others: the table keeps to the nodes it does.
        names = live.matching(live_pod.node_selector)
        shown = ",".join(f"{k}={v}" for k, v in sorted(live_pod.node_selector.items()))
        sources["candidates"] = f"{len(names)} nodes match the pod's nodeSelector {shown}"
        return names
    return None


def _decider_sources(
    remote: ExtenderState | None, extender: RemoteExtender | None, shown: Iterable[str], config_source: str
) -> dict[str, str]:
    """Where the policy and the placements in flight come from: the running extender when asked
    (with its holds on the nodes ``shown``), else the local config, with nothing known in flight."""
    if remote is None or extender is None:
        return {"policy": config_source, "in flight": "not known: ask the running extender (--extender URL)"}
    held = remote.pods_held_on(set(shown))
    sources = {
        "policy": f"the extender at {extender.url}" + (" (namespace exempt)" if remote.exempt else ""),
        "in flight": f"the extender at {extender.url}: {held} hold(s) on these nodes",
    }
    if not remote.ready:
        sources["warning"] = "the extender is not ready: its cluster state is not synced"
    return sources


def live_node_rows(
    api: client.ApiClient, *, config: Config, extender: RemoteExtender | None = None
) -> tuple[list[NodeRow], ExtenderState | None]:
    remote = extender.state("", None) if extender is not None else None
    config = _adopt(config, remote)
    live = read_cluster(api)
    state = ClusterState(config)
    state.replace(live.nodes, live.pods, live.reports)
    holds = remote.holds_by_size if remote is not None else {}
    reports = remote.node_reports if remote is not None else None
    rows = []
    for size, book in state.books.items():  # one table of every size guarded, size by size
        name = size if len(state.books) > 1 else ""
        rows += node_rows(book.accounts, holds.get(size, {}), reports, resource=name)
    return rows, remote


# --------------------------------------------------------------------------- shared command-line options


def add_extender_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("the running extender (placements in flight, effective policy)")
    group.add_argument(
        "--extender",
        metavar="URL",
        default=os.environ.get("HUGEPAGE_EXTENDER_URL"),
        help="its verbs' URL (default: $HUGEPAGE_EXTENDER_URL), e.g. http://127.0.0.1:8888 through "
        "kubectl port-forward to the scheduler pod holding the lease (the chart's default: the verbs "
        "listen on that pod's loopback), or the chart's Service with topology=service",
    )
    group.add_argument(
        "--extender-service",
        metavar="NAMESPACE/NAME",
        help="find the URL on the chart's Service (its hugepage-extender.io/url annotation; "
        "topology=service only), e.g. hugepage-extender/hugepage-extender; the URL must be reachable from here",
    )
    group.add_argument("--extender-ca-file", type=Path, help="CA of its serving certificate")
    group.add_argument("--extender-cert-file", type=Path, help="client certificate, when it requires one")
    group.add_argument("--extender-key-file", type=Path, help="key of --extender-cert-file")


def remote_from_args(args: argparse.Namespace, api: client.ApiClient | None = None) -> RemoteExtender | None:
    """The extender named by ``--extender``, else found through ``--extender-service`` (needs ``api``)."""
    url = args.extender
    if not url and args.extender_service and api is not None:
        namespace, name = split_pod_name(args.extender_service)
        url = extender_url_of_service(api, namespace, name)
    if not url:
        return None
    return RemoteExtender(
        url,
        ca_file=args.extender_ca_file,
        cert_file=args.extender_cert_file,
        key_file=args.extender_key_file,
    )


def split_pod_name(value: str, default_namespace: str = "default") -> tuple[str, str]:
    """``NAMESPACE/NAME`` or ``NAME`` (in ``default_namespace``)."""
    namespace, _, name = value.rpartition("/")
    if not name or "/" in namespace:
        raise PodNameError(f"expected NAMESPACE/NAME or NAME, got {value!r}")
    return namespace or default_namespace, name


class PodNameError(ExtenderError, ValueError):
    """A pod argument that is not NAMESPACE/NAME."""
