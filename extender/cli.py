"""The ``hugepage-extender`` command: ``serve``, ``explain`` and ``node-agent``."""

from __future__ import annotations

import argparse
import asyncio
import logging
import math
import os
import socket
import ssl
import sys
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import yaml
from kubernetes.client import ApiClient
from kubernetes.config.config_exception import ConfigException as KubeConfigError

from extender import __version__
from extender.core.config import Config, ConfigError, holds_need_bind
from extender.core.errors import ExtenderError
from extender.core.gates import GATE, GatedPods
from extender.core.policy import Mode
from extender.shell.configfile import load_config
from extender.shell.diagnose import add_extender_arguments, split_pod_name
from extender.shell.explaincommand import explain
from extender.shell.handlers import Extender
from extender.shell.kube.binder import ApiBinder
from extender.shell.kube.client import api_client
from extender.shell.kube.events import PodEvents
from extender.shell.kube.gatelift import GateWriter
from extender.shell.kube.informer import DEFAULT_STALE_AFTER_SECONDS, ClusterInformer, freeze_cache
from extender.shell.kube.lease import LeaseWatch, split_lease_name
from extender.shell.kube.nudge import PodNudger
from extender.shell.lifecycle import serve_until_stopped
from extender.shell.logs import configure as configure_logging
from extender.shell.metrics import Metrics
from extender.shell.nodeagent.cli import add_parser as add_node_agent_parser
from extender.shell.server import create_app, create_liveness_app, create_probe_app
from extender.shell.snapshot import load_snapshot
from extender.shell.tls import CertificateReloader, server_ssl_context
from extender.state.cluster import ClusterState

log = logging.getLogger("extender")


def _exempt_namespaces(args: argparse.Namespace) -> frozenset[str]:
    # The extender's own pods must never wait on the extender (a known deadlock).
    return frozenset(n for n in (args.extender_namespace,) if n)


# Said once at start, and by hugepage_extender_nudge_pod 0 (docs/design.md, "Requeue").
NO_NUDGE_POD = (
    "no pod to annotate when room frees (--nudge-pod empty, no $POD_NAMESPACE/$POD_NAME): pods the extender "
    "turns away wait for an API event or the scheduler's 5-minute flush; set --nudge-pod NAMESPACE/NAME "
    "(a pod the extender's identity may patch), or run in a pod with the downward-API variables"
)


def _own_pod() -> str:
    """``$POD_NAMESPACE/$POD_NAME`` (the downward API), or "" outside a pod."""
    namespace, name = os.environ.get("POD_NAMESPACE", ""), os.environ.get("POD_NAME", "")
    return f"{namespace}/{name}" if namespace and name else ""


def _config(args: argparse.Namespace) -> Config:
    return load_config(args.config, exempt_namespaces=_exempt_namespaces(args))


def _serve(args: argparse.Namespace) -> int:
    config = _config(args)
    tls = server_ssl_context(args.tls_cert_file, args.tls_key_file, args.client_ca_file)
    live = args.in_cluster or args.kubeconfig is not None
    if args.enable_bind and not live:
        raise ConfigError("--enable-bind needs a cluster (--kubeconfig or --in-cluster)")
    if (problem := holds_need_bind(config)) is not None and not args.enable_bind:
        raise ConfigError(problem)
    metrics = Metrics()
    state = ClusterState(config, on_hold_bound=metrics.hold_to_bound.observe)
    if not live:
        snapshot = load_snapshot(args.snapshot)
        state.replace(snapshot.nodes, snapshot.pods, snapshot.reports)
        del snapshot
        freeze_cache()
        source = "the bundled example snapshot" if args.example else args.snapshot
        log.info("loaded %s: %d nodes, %d bound pods", source, state.node_count, state.pod_count)
    # Made before serving, so a bad kubeconfig stops the process at once.
    api = api_client(args.kubeconfig, in_cluster=args.in_cluster) if live else None

    def serving() -> None:
        log.info(
            "hugepage-extender %s serving %s on %s:%d (%s%s%s), default mode %s, cluster state from %s",
            __version__,
            " and ".join(config.resource_names),
            args.host,
            args.port,
            "https" if tls else "http",
            ", client certificates required" if args.client_ca_file else "",
            f"; probes and metrics on {args.probe_host or args.host}:{args.probe_port}" if args.probe_port else "",
            config.placement.defaults.mode.value,
            "the API server" if live else "a snapshot",
        )

    asyncio.run(_serve_async(args, config, state, metrics, tls, api, serving))
    return 0


@dataclass(frozen=True, slots=True)
class _Clients:
    """What the extender writes and watches through the API beside the informer; each closed at exit."""

    binder: ApiBinder | None
    events: PodEvents | None
    nudger: PodNudger | None
    gated: GatedPods | None
    lifter: GateWriter | None
    lease: LeaseWatch | None  # lifts only beside the scheduler holding it (extender.core.leadership)

    def close(self) -> None:
        if self.lease is not None:
            self.lease.stop()
        for closable in (self.binder, self.events, self.nudger, self.lifter):
            if closable is not None:
                closable.close()


def _clients(args: argparse.Namespace, api: ApiClient, metrics: Metrics) -> _Clients:
    nudger = None
    if args.nudge_pod:
        namespace, name = split_pod_name(args.nudge_pod)
        nudger = PodNudger(api, namespace, name)
    else:
        log.warning(NO_NUDGE_POD)
    metrics.nudge_pod.set(1 if nudger is not None else 0)
    lifts = args.lift_gates
    return _Clients(
        binder=ApiBinder(api, timeout_seconds=args.bind_timeout_seconds) if args.enable_bind else None,
        events=PodEvents(api, metrics, instance=args.hostname) if args.events else None,
        nudger=nudger,
        gated=GatedPods() if lifts else None,
        lifter=GateWriter(api, metrics) if lifts else None,
        lease=(
            LeaseWatch(
                api, *args.leader_lease, hostname=args.hostname, watch_timeout_seconds=args.watch_timeout_seconds
            )
            if args.leader_lease and lifts
            else None
        ),
    )


async def _serve_async(  # noqa: PLR0917 (one call site, in order)
    args: argparse.Namespace,
    config: Config,
    state: ClusterState,
    metrics: Metrics,
    tls: ssl.SSLContext | None,
    api: ApiClient | None,
    serving: Callable[[], None],
) -> None:
    if api is None:
        extender = Extender(config, state, metrics)
        await _serve_apps(args, extender, tls, serving)
        return
    informer = ClusterInformer(
        api,
        state,
        node_reports=args.node_reports,
        stale_after_seconds=args.watch_stale_seconds,
        watch_timeout_seconds=args.watch_timeout_seconds,
    )
    clients = _clients(args, api, metrics)
    informer.gated = clients.gated
    lease = clients.lease
    extender = Extender(
        config,
        state,
        metrics,
        binder=clients.binder,
        events=clients.events,
        verify_holds=True,
        nudger=clients.nudger,
        gated=clients.gated,
        lifter=clients.lifter,
        lift_turn=lease.turn if lease is not None else None,
    )
    placement = config.placement
    if any(p.mode is Mode.SHADOW for p in (placement.defaults, *placement.namespaces.values())):
        informer.pod_seen = extender.pod_seen  # shadow's scorecard follows its pods (and watches ended ones)
    informer.start(asyncio.get_running_loop())
    reflectors = dict(informer.reflectors)
    if lease is not None:
        reflectors["leader-lease"] = lease.start(asyncio.get_running_loop())
    metrics.watch_reflectors(reflectors)
    try:
        await _serve_apps(args, extender, tls, serving)
    finally:
        informer.stop()
        clients.close()


async def _serve_apps(
    args: argparse.Namespace, extender: Extender, tls: ssl.SSLContext | None, serving: Callable[[], None]
) -> None:
    apps = [(create_app(extender), args.host, args.port, tls)]
    if args.probe_port:
        probe_host = args.host if args.probe_host is None else args.probe_host
        apps.append((create_probe_app(extender), probe_host, args.probe_port, None))
    background: list[Callable[[], Coroutine[Any, Any, None]]] = [extender.release_timer]
    if extender.gated is not None:
        background.append(extender.lift_timer)
    if tls is not None:
        reloader = CertificateReloader(tls, args.tls_cert_file, args.tls_key_file, args.client_ca_file)
        background.append(lambda: reloader.watch(args.tls_reload_seconds))

    def not_ready() -> None:
        extender.draining = True

    await serve_until_stopped(
        apps,
        shutdown_timeout=args.shutdown_timeout,
        drain_seconds=args.drain_seconds,
        on_start=serving,
        on_stop=not_ready,
        background=tuple(background),
        liveness=(create_liveness_app(extender), args.liveness_socket) if args.liveness_socket else None,
    )


def _replay_moved(args: argparse.Namespace) -> int:
    """The replay left the package the image ships; the old command says where it went."""
    raise ConfigError(
        "the replay is no longer part of the extender: run `python -m replay "
        + " ".join(args.options)
        + "` in the source tree (pip install '.[replay]' for its plots)"
    )


class _Parser(argparse.ArgumentParser):
    """Usage errors in one line naming the problem, exit code 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message}\n")


def _port(text: str) -> int:
    port = _port_or_count(text)
    if not 1 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port (1-65535)")
    return port


def _port_or_count(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds")
    return value


_LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def _lease_name(text: str) -> tuple[str, str]:
    try:
        return split_lease_name(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _log_level(text: str) -> str:
    if text.upper() not in _LOG_LEVELS:
        raise argparse.ArgumentTypeError(f"{text!r} is not one of {', '.join(_LOG_LEVELS)}")
    return text.upper()


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="hugepage-extender",
        description="kube-scheduler extender that keeps pods off nodes whose hugepage pool cannot hold them",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument("--log-level", type=_log_level, default=os.environ.get("LOG_LEVEL", "INFO"))
    parser.add_argument(
        "--log-format",
        choices=("text", "json"),
        default=os.environ.get("LOG_FORMAT", "text"),
        help="text for people, json (one object a line) for log collectors",
    )
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    def common(sub: argparse.ArgumentParser) -> None:
        sub.add_argument("--config", type=Path, help="YAML config file (default: built-in defaults)")
        sub.add_argument(
            "--extender-namespace",
            default=os.environ.get("POD_NAMESPACE", ""),
            help="namespace whose pods always pass (default: $POD_NAMESPACE)",
        )

    serve = commands.add_parser("serve", help="serve the extender verbs over HTTP(S)")
    common(serve)
    # No default source: an extender that silently served a made-up cluster
    # would admit and rank pods against nodes that do not exist.
    source = serve.add_mutually_exclusive_group(required=True)
    source.add_argument("--snapshot", type=Path, help="serve over a snapshot of Nodes and Pods")
    source.add_argument("--kubeconfig", type=Path, help="list and watch this cluster")
    source.add_argument("--in-cluster", action="store_true", help="list and watch the cluster this pod runs in")
    source.add_argument("--example", action="store_true", help="serve over the bundled example cluster (a demo)")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=_port, default=8888)
    serve.add_argument("--tls-cert-file", type=Path, help="serve HTTPS with this certificate")
    serve.add_argument("--tls-key-file", type=Path, help="private key of --tls-cert-file")
    serve.add_argument("--client-ca-file", type=Path, help="require client certificates signed by this CA")
    serve.add_argument(
        "--shutdown-timeout",
        type=_seconds,
        default=10.0,
        help="on SIGTERM, seconds to answer requests already begun once the port is closed",
    )
    serve.add_argument(
        "--drain-seconds",
        type=_seconds,
        default=5.0,
        help="on SIGTERM, seconds to keep serving while not ready, so endpoints drop the pod first (default 5)",
    )
    serve.add_argument(
        "--tls-reload-seconds", type=_seconds, default=10.0, help="how often to look for renewed TLS files"
    )
    serve.add_argument(
        "--watch-stale-seconds",
        type=_seconds,
        default=DEFAULT_STALE_AFTER_SECONDS,
        help="a watch without progress for this long makes the extender unready and filter answer an error",
    )
    serve.add_argument(
        "--watch-timeout-seconds",
        type=_port_or_count,
        default=300,
        help="server-side timeout of each watch request; it then restarts (default 300)",
    )
    serve.add_argument(
        "--probe-port", type=_port, help="also serve /healthz, /readyz and /metrics over plain HTTP on this port"
    )
    serve.add_argument(
        "--probe-host",
        help="address of --probe-port (default: --host); the chart keeps the verbs on 127.0.0.1, beside "
        "the scheduler, and serves probes and metrics on 0.0.0.0 for the kubelet and Prometheus",
    )
    serve.add_argument(
        "--liveness-socket",
        help="also serve /healthz on this abstract unix socket, for an exec liveness probe "
        "(python -m extender.shell.alive NAME): no other pod can reach it, so no connection flood fails it",
    )
    serve.add_argument("--enable-bind", action="store_true", help="serve the bind verb (creates Bindings)")
    serve.add_argument(
        "--bind-timeout-seconds",
        type=float,
        default=1.5,
        help="API timeout of a bind; keep it under the scheduler's httpTimeout (the chart's 2 s)",
    )
    serve.add_argument(
        "--events",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="post an Event on pods no node can take, and on gated pods no node has room for (live cluster only)",
    )
    _live_cluster_arguments(serve)
    serve.set_defaults(run=_serve)

    exp = commands.add_parser("explain", help="show, node by node, whether a pod fits and how it scores")
    common(exp)
    cluster = exp.add_mutually_exclusive_group()
    cluster.add_argument("--snapshot", type=Path, help="snapshot of Nodes and Pods (default: the bundled example)")
    cluster.add_argument("--kubeconfig", type=Path, help="read the pod, nodes and bound pods from this cluster")
    cluster.add_argument("--in-cluster", action="store_true", help="read them with this pod's service account")
    exp.add_argument("--context", help="kubeconfig context (default: the current one)")
    exp.add_argument(
        "--pod",
        required=True,
        help="the pod: a YAML or JSON file; with --kubeconfig or --in-cluster, NAMESPACE/NAME",
    )
    exp.add_argument("--nodes", help="comma-separated candidate nodes (default: every node)")
    exp.add_argument("--output", choices=("table", "json"), default="table")
    add_extender_arguments(exp)
    exp.set_defaults(run=lambda args: explain(args, _config(args)))
    # Every word after `replay` is the replay's (no prefix character: none is an option here).
    moved = commands.add_parser("replay", help="moved: python -m replay, in the source tree", prefix_chars="\0")
    moved.add_argument("options", nargs=argparse.REMAINDER)
    moved.set_defaults(run=_replay_moved)
    add_node_agent_parser(commands)
    return parser


def _live_cluster_arguments(serve: argparse.ArgumentParser) -> None:
    """What ``serve`` writes to and reads from a live cluster besides nodes and pods."""
    serve.add_argument(
        "--nudge-pod",
        default=_own_pod(),
        help="NAMESPACE/NAME of a pod to annotate when room frees while pods the extender turned away wait, "
        "so the scheduler looks at them again (default: $POD_NAMESPACE/$POD_NAME, this pod; '' for none)",
    )
    serve.add_argument(
        "--lift-gates",
        action=argparse.BooleanOptionalAction,
        default=True,
        help=f"remove the scheduling gate {GATE} from pods once a node they may use has room (live cluster "
        "only; needs patch on pods)",
    )
    serve.add_argument(
        "--leader-lease",
        type=_lease_name,
        help="NAMESPACE/NAME of the scheduler's leader Lease: lift gates only while the scheduler on this host "
        "(--hostname) holds it and it has not expired; with no such Lease, lift (needs get, list and watch on "
        "that Lease). Default: none, this extender lifts whatever other replicas do",
    )
    serve.add_argument(
        "--hostname",
        default=socket.gethostname(),
        help="this host's name as the scheduler beside it puts it in the Lease's holderIdentity "
        "(<hostname>_<uuid>; default: the system's host name)",
    )
    serve.add_argument(
        "--node-reports",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="read the node agents' HugepageNodeReports (live cluster only; needs their CRD)",
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    # $LOG_LEVEL is a default, so argparse does not check it: check it here.
    try:
        level = _log_level(args.log_level)
    except argparse.ArgumentTypeError as error:
        parser.error(f"argument --log-level: {error}")
    configure_logging(level, args.log_format)
    try:
        return int(args.run(args))
    except ExtenderError as error:
        return _startup_error(str(error), args.log_format)
    except (OSError, ssl.SSLError, KubeConfigError, yaml.YAMLError) as error:
        # A missing or unreadable TLS file or kubeconfig, a port taken: one line, no traceback.
        return _startup_error(f"cannot start: {_one_line(error)}", args.log_format)


def _startup_error(message: str, log_format: str) -> int:
    """One line naming the problem, exit code 2: a JSON record for collectors, else plain text."""
    if log_format == "json":
        log.error("%s", message)
    else:
        print(f"hugepage-extender: {message}", file=sys.stderr)
    return 2


def _one_line(error: BaseException) -> str:
    text = str(error) or type(error).__name__
    if isinstance(error, OSError) and error.filename is not None:
        text = f"{error.strerror or text}: {error.filename}"
    return " ".join(text.split())


if __name__ == "__main__":
    sys.exit(main())
