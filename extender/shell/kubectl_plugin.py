"""``kubectl hugepages``: the extender's view of the cluster, as a kubectl plugin.

kubectl runs any ``kubectl-<name>`` on the PATH as ``kubectl <name>``; the
package installs ``kubectl-hugepages``. It reads the current kubeconfig context
(``$KUBECONFIG``, else ~/.kube/config), as kubectl does, and asks the running
extender (``--extender URL`` or ``$HUGEPAGE_EXTENDER_URL``) for what only it
knows.

    kubectl hugepages explain payments/dpdk-router   # why is this pod Pending?
    kubectl hugepages nodes                          # pool, used, outside pods, in flight, free, report age
    kubectl hugepages shadow payments                # shadow's verdicts against what became of the pods
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

import msgspec

from extender import __version__
from extender.core.diagnostics import render_node_rows
from extender.core.errors import ExtenderError
from extender.core.shadowdocument import render_shadow
from extender.shell.configfile import load_config
from extender.shell.diagnose import (
    add_extender_arguments,
    live_explanation,
    live_node_rows,
    remote_from_args,
    split_pod_name,
)
from extender.shell.kube.live import api_client_for, context_namespace
from extender.shell.remote import ExtenderUnreachable
from extender.state.explain import render_table


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--kubeconfig", type=Path, help="kubeconfig file (default: $KUBECONFIG, else ~/.kube/config)")
    parser.add_argument("--context", help="kubeconfig context (default: the current one)")
    parser.add_argument(
        "--config",
        type=Path,
        help="the extender's config file, when --extender is not given (default: built-in defaults)",
    )
    parser.add_argument("-o", "--output", choices=("table", "json"), default="table")
    add_extender_arguments(parser)


def _explain(args: argparse.Namespace) -> int:
    namespace, name = split_pod_name(args.pod, args.namespace or context_namespace(args.kubeconfig, args.context))
    with api_client_for(args.kubeconfig, context=args.context) as api:
        result = live_explanation(
            api,
            namespace,
            name,
            config=load_config(args.config),
            extender=remote_from_args(args, api),
            cluster=f"context {args.context}" if args.context else "the current kubeconfig context",
            config_source=f"--config {args.config}"
            if args.config
            else "built-in defaults (no --config, no --extender)",
        )
    print(json.dumps(result.as_dict(), indent=2) if args.output == "json" else render_table(result))
    return 0


def _nodes(args: argparse.Namespace) -> int:
    with api_client_for(args.kubeconfig, context=args.context) as api:
        rows, remote = live_node_rows(api, config=load_config(args.config), extender=remote_from_args(args, api))
    if args.output == "json":
        print(json.dumps({"extender": remote is not None, "nodes": [r.as_dict() for r in rows]}, indent=2))
    else:
        print(render_node_rows(rows, with_extender=remote is not None))
    return 0


def _shadow(args: argparse.Namespace) -> int:
    remote = remote_from_args(args)
    if remote is None and args.extender_service:
        with api_client_for(args.kubeconfig, context=args.context) as api:
            remote = remote_from_args(args, api)
    if remote is None:
        raise ExtenderUnreachable("the scorecard is the running extender's: give --extender or --extender-service")
    document = remote.shadow(args.namespace or "")
    print(
        msgspec.json.format(msgspec.json.encode(document)).decode()
        if args.output == "json"
        else render_shadow(document)
    )
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kubectl hugepages",
        description="Why is my pod Pending? The hugepage extender's view of pods and nodes.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    exp = commands.add_parser("explain", help="node by node, why a pod fits or not (NAMESPACE/NAME or NAME)")
    exp.add_argument("pod", help="NAMESPACE/NAME, or NAME with -n")
    exp.add_argument(
        "-n", "--namespace", help="the pod's namespace when not in the name (default: the context's namespace)"
    )
    _common(exp)
    exp.set_defaults(run=_explain)
    nodes = commands.add_parser("nodes", help="per node: pool, used by pods, outside pods, in flight, free")
    _common(nodes)
    nodes.set_defaults(run=_nodes)
    shadow = commands.add_parser(
        "shadow", help="shadow's scorecard: its verdicts against what became of the pods, and the pods behind each"
    )
    shadow.add_argument("namespace", nargs="?", help="one namespace's row (default: every shadow namespace)")
    _common(shadow)
    shadow.set_defaults(run=_shadow)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    # The client retries a refused connection three times, each with a warning: the one
    # error line below says it once.
    logging.getLogger("urllib3").setLevel(logging.ERROR)
    try:
        return int(args.run(args))
    except ExtenderError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
