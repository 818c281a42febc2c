"""One read of the live cluster for ``explain`` and ``kubectl hugepages``: a pod, the nodes, the bound pods.

Decoded straight into the extender's own structs (``extender.objects``), as the
watch does, so explain counts exactly what the extender counts. Read-only:
get pods and list nodes and pods, what a namespace viewer with node read access
has (``kubectl hugepages`` runs as the user).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

import msgspec
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from extender.errors import ExtenderError
from extender.kube.client import api_client
from extender.objects import Node, Pod

# Bound, non-terminal pods: what holds pages (the same filter as the extender's watch, plus bound).
BOUND_ACTIVE_PODS = "spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed"
PAGE_SIZE = 500
T = TypeVar("T")


class LiveReadError(ExtenderError):
    """The API could not be read (not found, forbidden, unreachable); the message says which call."""


class _ListMeta(msgspec.Struct, rename="camel"):
    continue_: str | None = msgspec.field(default=None, name="continue")


class _Page(msgspec.Struct, Generic[T]):
    items: list[T] = []
    metadata: _ListMeta = msgspec.field(default_factory=_ListMeta)


@dataclass(frozen=True, slots=True)
class LiveCluster:
    nodes: list[Node]
    pods: list[Pod]  # bound and not terminal


def _call(what: str, call: Callable[..., Any], *args: Any, **kwargs: Any) -> bytes:
    try:
        response = call(*args, _preload_content=False, _request_timeout=30, **kwargs)
    except ApiException as error:
        reason = error.reason or ""
        raise LiveReadError(f"{what}: {error.status} {reason}".rstrip()) from None
    except Exception as error:  # connection refused, TLS, DNS: the client's own exceptions vary
        raise LiveReadError(f"{what}: {error}") from None
    data: bytes = response.data
    return data


def _list_all(what: str, call: Callable[..., Any], item: type[T], **kwargs: Any) -> list[T]:
    decoder = msgspec.json.Decoder(_Page[item])  # type: ignore[valid-type]
    items: list[T] = []
    token: str | None = None
    while True:
        extra = {"_continue": token} if token else {}
        page = decoder.decode(_call(what, call, limit=PAGE_SIZE, **kwargs, **extra))
        items.extend(page.items)
        token = page.metadata.continue_
        if not token:
            return items


def read_pod(api: client.ApiClient, namespace: str, name: str) -> Pod:
    core = client.CoreV1Api(api)
    return msgspec.json.decode(
        _call(f"get pod {namespace}/{name}", core.read_namespaced_pod, name, namespace), type=Pod
    )


def read_cluster(api: client.ApiClient) -> LiveCluster:
    core = client.CoreV1Api(api)
    nodes = _list_all("list nodes", core.list_node, Node)
    pods = _list_all("list pods", core.list_pod_for_all_namespaces, Pod, field_selector=BOUND_ACTIVE_PODS)
    return LiveCluster(nodes, pods)


def api_client_for(
    kubeconfig: Path | None, *, context: str | None = None, in_cluster: bool = False
) -> client.ApiClient:
    """A client for the kubeconfig's current context (``$KUBECONFIG`` or ~/.kube/config when None),
    or ``context``; or the pod's service account."""
    if in_cluster:
        return api_client(None, in_cluster=True)
    try:
        api: client.ApiClient = config.new_client_from_config(  # type: ignore[no-untyped-call]
            config_file=str(kubeconfig) if kubeconfig else None, context=context
        )
    except (config.ConfigException, OSError) as error:
        raise LiveReadError(f"kubeconfig: {error}") from None
    return api
