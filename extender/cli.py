"""The ``hugepage-extender`` command: ``serve``, ``explain``, ``replay`` and ``node-agent``."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import socket
import ssl
import sys
from collections.abc import Sequence
from pathlib import Path

import msgspec
import yaml

from extender import __version__
from extender.cluster import ClusterState
from extender.config import Config, ConfigError, load_config
from extender.explain import explain, render_table
from extender.kube.binder import ApiBinder
from extender.kube.client import api_client
from extender.kube.events import PodEvents
from extender.kube.informer import ClusterInformer, freeze_cache
from extender.metrics import Metrics
from extender.nodeagent.cli import add_parser as add_node_agent_parser
from extender.objects import Pod
from extender.quantity import QuantityError
from extender.replay import add_parser as add_replay_parser
from extender.server import Extender, create_app, create_probe_app, serve_until_stopped
from extender.snapshot import SnapshotError, load_snapshot
from extender.tls import TLSConfigError, server_ssl_context

log = logging.getLogger("extender")


def _exempt_namespaces(args: argparse.Namespace) -> frozenset[str]:
    # The extender's own pods must never wait on the extender (a known deadlock).
    return frozenset(n for n in (args.extender_namespace,) if n)


def _config(args: argparse.Namespace) -> Config:
    return load_config(args.config, exempt_namespaces=_exempt_namespaces(args))


def _serve(args: argparse.Namespace) -> int:
    config = _config(args)
    tls = server_ssl_context(args.tls_cert_file, args.tls_key_file, args.client_ca_file)
    live = args.in_cluster or args.kubeconfig is not None
    if args.enable_bind and not live:
        raise ConfigError("--enable-bind needs a cluster (--kubeconfig or --in-cluster)")
    state = ClusterState(config)
    if not live:
        snapshot = load_snapshot(args.snapshot)
        state.replace(snapshot.nodes, snapshot.pods, snapshot.reports)
        del snapshot
        freeze_cache()
        source = args.snapshot or "the bundled example snapshot"
        log.info("loaded %s: %d nodes, %d bound pods", source, state.node_count, state.pod_count)
    log.info(
        "hugepage-extender %s serving %s on %s:%d (%s%s), default mode %s, cluster state from %s",
        __version__,
        config.resource_name,
        args.host,
        args.port,
        "https" if tls else "http",
        ", client certificates required" if args.client_ca_file else "",
        config.placement.defaults.mode.value,
        "the API server" if live else "a snapshot",
    )
    asyncio.run(_serve_async(args, config, state, tls, live=live))
    return 0


async def _serve_async(
    args: argparse.Namespace, config: Config, state: ClusterState, tls: ssl.SSLContext | None, *, live: bool
) -> None:
    metrics = Metrics()
    if not live:
        extender = Extender(config, state, metrics)
        await _serve_apps(args, extender, tls)
        return
    api = api_client(args.kubeconfig, in_cluster=args.in_cluster)
    informer = ClusterInformer(api, state, node_reports=args.node_reports)
    binder = ApiBinder(api, timeout_seconds=args.bind_timeout_seconds) if args.enable_bind else None
    events = (
        PodEvents(api, metrics, resource_name=config.resource_name, instance=socket.gethostname())
        if args.events
        else None
    )
    extender = Extender(config, state, metrics, binder=binder, events=events)
    informer.start(asyncio.get_running_loop())
    try:
        await _serve_apps(args, extender, tls)
    finally:
        informer.stop()
        for closable in (binder, events):
            if closable is not None:
                closable.close()


async def _serve_apps(args: argparse.Namespace, extender: Extender, tls: ssl.SSLContext | None) -> None:
    apps = [(create_app(extender), args.host, args.port, tls)]
    if args.probe_port:
        apps.append((create_probe_app(extender), args.host, args.probe_port, None))
    await serve_until_stopped(apps, shutdown_timeout=args.shutdown_timeout)


def _read_pod(path: Path) -> Pod:
    try:
        document = yaml.safe_load(path.read_text())
    except OSError as error:
        raise SnapshotError(f"cannot read pod {path}: {error.strerror}") from None
    except yaml.YAMLError as error:
        raise SnapshotError(f"{path} is not valid YAML: {error}") from None
    try:
        return msgspec.convert(document, Pod)
    except msgspec.ValidationError as error:
        raise SnapshotError(f"{path}: not a Pod: {error}") from None


def _explain(args: argparse.Namespace) -> int:
    config = _config(args)
    state = ClusterState(config)
    snapshot = load_snapshot(args.snapshot)
    state.replace(snapshot.nodes, snapshot.pods, snapshot.reports)
    state.expire_reports()
    pod = _read_pod(args.pod)
    namespace = pod.metadata.namespace or "default"
    policy = config.policy_for(namespace)
    names = args.nodes.split(",") if args.nodes else sorted(state.accounts)
    result = explain(
        f"{namespace}/{pod.metadata.name}",
        state.demand_of(pod),
        names,
        resource_name=config.resource_name,
        accounts=state.view_for(policy)[0],
        policy=policy,
        reports=lambda name: state.report_view(name, policy.node_report_max_age_seconds),
    )
    if args.output == "json":
        print(json.dumps(result.as_dict(), indent=2))
    else:
        print(render_table(result))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="hugepage-extender",
        description="kube-scheduler extender that keeps pods off nodes whose hugepage pool cannot hold them",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument("--log-level", default=os.environ.get("LOG_LEVEL", "INFO"))
    commands = parser.add_subparsers(dest="command", required=True)

    def common(sub: argparse.ArgumentParser) -> None:
        sub.add_argument("--config", type=Path, help="YAML config file (default: built-in defaults)")
        sub.add_argument("--snapshot", type=Path, help="snapshot of Nodes and Pods (default: bundled example)")
        sub.add_argument(
            "--extender-namespace",
            default=os.environ.get("POD_NAMESPACE", ""),
            help="namespace whose pods always pass (default: $POD_NAMESPACE)",
        )

    serve = commands.add_parser("serve", help="serve the extender verbs over HTTP(S)")
    common(serve)
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8888)
    serve.add_argument("--tls-cert-file", type=Path, help="serve HTTPS with this certificate")
    serve.add_argument("--tls-key-file", type=Path, help="private key of --tls-cert-file")
    serve.add_argument("--client-ca-file", type=Path, help="require client certificates signed by this CA")
    serve.add_argument("--shutdown-timeout", type=float, default=10.0, help="seconds to drain on SIGTERM")
    serve.add_argument(
        "--probe-port", type=int, help="also serve /healthz, /readyz and /metrics over plain HTTP on this port"
    )
    serve.add_argument("--kubeconfig", type=Path, help="list and watch this cluster instead of a snapshot")
    serve.add_argument("--in-cluster", action="store_true", help="list and watch the cluster this pod runs in")
    serve.add_argument("--enable-bind", action="store_true", help="serve the bind verb (creates Bindings)")
    serve.add_argument(
        "--bind-timeout-seconds",
        type=float,
        default=4.0,
        help="API timeout of a bind; keep it under the scheduler's httpTimeout (default 5 s)",
    )
    serve.add_argument(
        "--events",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="post an Event on pods no node can take (live cluster only)",
    )
    serve.add_argument(
        "--node-reports",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="read the node agents' HugepageNodeReports (live cluster only; needs their CRD)",
    )
    serve.set_defaults(run=_serve)

    exp = commands.add_parser("explain", help="show, node by node, whether a pod fits and how it scores")
    common(exp)
    exp.add_argument("--pod", type=Path, required=True, help="the pod, as YAML or JSON")
    exp.add_argument("--nodes", help="comma-separated candidate nodes (default: every node)")
    exp.add_argument("--output", choices=("table", "json"), default="table")
    exp.set_defaults(run=_explain)
    add_replay_parser(commands)
    add_node_agent_parser(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr
    )
    try:
        return int(args.run(args))
    except (ConfigError, SnapshotError, QuantityError, TLSConfigError) as error:
        log.error("%s", error)
        print(f"hugepage-extender: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
