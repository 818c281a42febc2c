"""The ``explain`` command: why a pod is or is not placed, against a snapshot or the live cluster.
What it prints is what ``filter`` decides (``explain_pod``, the one explanation every path shares)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import msgspec
import yaml

from extender.core.config import Config, ConfigError
from extender.core.objects import Pod
from extender.shell.diagnose import live_explanation, remote_from_args, split_pod_name
from extender.shell.kube.live import api_client_for
from extender.shell.snapshot import SnapshotError, load_snapshot, pod_from
from extender.state.cluster import ClusterState
from extender.state.explain import PodExplanation, explain_pod, render_table


def read_pod(path: Path) -> Pod:
    try:
        document = yaml.safe_load(path.read_text())
    except OSError as error:
        raise SnapshotError(f"cannot read pod {path}: {error.strerror}") from None
    except yaml.YAMLError as error:
        raise SnapshotError(f"{path} is not valid YAML: {error}") from None
    try:
        return pod_from(document)
    except msgspec.ValidationError as error:
        raise SnapshotError(f"{path}: not a Pod: {error}") from None


def explain(args: argparse.Namespace, config: Config) -> int:
    """``explain``: a pod against a snapshot file (the default), or the live cluster (``--kubeconfig``,
    ``--in-cluster``); a table or JSON on stdout."""
    if args.kubeconfig is not None or args.in_cluster:
        return explain_live(args, config)
    if args.extender or args.extender_service:
        raise ConfigError("--extender needs a live cluster (--kubeconfig or --in-cluster)")
    state = ClusterState(config)
    snapshot = load_snapshot(args.snapshot)
    state.replace(snapshot.nodes, snapshot.pods, snapshot.reports)
    pod = read_pod(Path(args.pod))
    if not pod.metadata.namespace:
        pod = msgspec.structs.replace(pod, metadata=msgspec.structs.replace(pod.metadata, namespace="default"))
    result = explain_pod(state, pod, args.nodes.split(",") if args.nodes else None)
    print_explanation(result, args.output)
    return 0


def print_explanation(result: PodExplanation, output: str) -> None:
    if output == "json":
        print(json.dumps(result.as_dict(), indent=2))
    else:
        print(render_table(result))


def explain_live(args: argparse.Namespace, config: Config) -> int:
    """``explain --kubeconfig FILE --pod NAMESPACE/NAME``: the pod and the cluster as the API shows them now."""
    namespace, name = split_pod_name(args.pod)
    api = api_client_for(args.kubeconfig, context=args.context, in_cluster=args.in_cluster)
    with api:
        result = live_explanation(
            api,
            namespace,
            name,
            config=config,
            nodes=args.nodes.split(",") if args.nodes else None,
            extender=remote_from_args(args, api),
            cluster="in-cluster API server" if args.in_cluster else f"API server of {args.kubeconfig}",
            config_source=f"--config {args.config}" if args.config else "built-in defaults (no --config)",
        )
    print_explanation(result, args.output)
    return 0
