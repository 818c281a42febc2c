"""One read of the live cluster for ``explain`` and ``kubectl hugepages``: a pod, the nodes, the bound
pods and the node agents' ``HugepageNodeReport``s.

Decoded straight into the extender's own structs (``extender.core.objects``, the records left
raw as the watch leaves them), so explain counts exactly what the extender counts.
Read-only: get pods and list nodes, pods and node reports, what a namespace viewer with
node read access has (``kubectl hugepages`` runs as the user); without the reports' CRD,
or the right to list them, the nodes are counted from pod requests and the reading says so.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

import msgspec
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from extender.core.errors import ExtenderError
from extender.core.nodereport import GROUP, PLURAL, VERSION, ReportObject
from extender.core.objects import Node, Pod
from extender.shell.kube.client import api_client

# Bound, non-terminal pods: what holds pages (the same filter as the extender's watch, plus bound).
BOUND_ACTIVE_PODS = "spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed"
PAGE_SIZE = 500
T = TypeVar("T")


class LiveReadError(ExtenderError):
    """The API could not be read (not found, forbidden, unreachable); the message says which call."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status  # the API's HTTP status, None when it did not answer


class _ListMeta(msgspec.Struct, rename="camel"):
    continue_: str | None = msgspec.field(default=None, name="continue")


class _Page(msgspec.Struct, Generic[T]):
    items: list[T] = []
    metadata: _ListMeta = msgspec.field(default_factory=_ListMeta)


class _Labels(msgspec.Struct):
    labels: dict[str, str] | None = None


class _Labeled(msgspec.Struct):
    """Only a node's labels: the extender's own structs skip them (its cache never needs them)."""

    metadata: _Labels = msgspec.field(default_factory=_Labels)


class _SelectorSpec(msgspec.Struct, rename="camel"):
    node_selector: dict[str, str] | None = None


class _WithSelector(msgspec.Struct):
    spec: _SelectorSpec = msgspec.field(default_factory=_SelectorSpec)


@dataclass(frozen=True, slots=True)
class LivePod:
    pod: Pod
    node_selector: dict[str, str]  # spec.nodeSelector: which nodes the scheduler considers at all


@dataclass(frozen=True, slots=True)
class LiveCluster:
    nodes: list[Node]
    pods: list[Pod]  # bound and not terminal
    labels: dict[str, dict[str, str]]  # node -> its labels
    reports: list[tuple[str, bytes | None]]  # HugepageNodeReport name, its report as JSON
    reports_missing: str = ""  # why no record could be read ("" when they were listed)

    def matching(self, selector: dict[str, str]) -> list[str]:
        """Nodes whose labels hold every key=value of ``selector`` (as spec.nodeSelector selects), by name."""
        wanted = selector.items()
        return sorted(n.metadata.name for n in self.nodes if wanted <= self.labels.get(n.metadata.name, {}).items())


def _call(what: str, call: Callable[..., Any], *args: Any, **kwargs: Any) -> bytes:
    try:
        response = call(*args, _preload_content=False, _request_timeout=30, **kwargs)
    except ApiException as error:
        reason = error.reason or ""
        raise LiveReadError(f"{what}: {error.status} {reason}".rstrip(), error.status) from None
    except Exception as error:  # connection refused, TLS, DNS: the client's own exceptions vary
        # urllib3's MaxRetryError carries the cause in .reason
        raise LiveReadError(f"{what}: {getattr(error, 'reason', None) or error}") from None
    data: bytes = response.data
    return data


def _list_pages(what: str, call: Callable[..., Any], **kwargs: Any) -> list[bytes]:
    """Every page of a list, as the API sent it."""
    pages: list[bytes] = []
    token: str | None = None
    while True:
        extra = {"_continue": token} if token else {}
        pages.append(_call(what, call, limit=PAGE_SIZE, **kwargs, **extra))
        token = msgspec.json.decode(pages[-1], type=_Page[_Labeled]).metadata.continue_
        if not token:
            return pages


def _items(pages: list[bytes], item: type[T]) -> list[T]:
    decoder = msgspec.json.Decoder(_Page[item])  # type: ignore[valid-type]
    return [obj for page in pages for obj in decoder.decode(page).items]


def read_pod(api: client.ApiClient, namespace: str, name: str) -> LivePod:
    core = client.CoreV1Api(api)
    raw = _call(f"get pod {namespace}/{name}", core.read_namespaced_pod, name, namespace)
    selector = msgspec.json.decode(raw, type=_WithSelector).spec.node_selector or {}
    return LivePod(msgspec.json.decode(raw, type=Pod), selector)


def read_cluster(api: client.ApiClient) -> LiveCluster:
    core = client.CoreV1Api(api)
    node_pages = _list_pages("list nodes", core.list_node)
    nodes = _items(node_pages, Node)
    labels = {
        n.metadata.name: labeled.metadata.labels or {}
        for n, labeled in zip(nodes, _items(node_pages, _Labeled), strict=True)
    }
    pod_pages = _list_pages("list pods", core.list_pod_for_all_namespaces, field_selector=BOUND_ACTIVE_PODS)
    reports, missing = _read_reports(api)
    return LiveCluster(nodes, _items(pod_pages, Pod), labels, reports, missing)


def _read_reports(api: client.ApiClient) -> tuple[list[tuple[str, bytes | None]], str]:
    """The node agents' records, as the extender's third reflector lists them; none, and why,
    where their CRD is not installed (404) or the user may not list them (403)."""
    custom = client.CustomObjectsApi(api)
    try:
        pages = _list_pages(
            f"list {PLURAL}", custom.list_cluster_custom_object, group=GROUP, version=VERSION, plural=PLURAL
        )
    except LiveReadError as error:
        if error.status in (403, 404):
            return [], str(error)
        raise
    return [(r.metadata.name, r.report_bytes) for r in _items(pages, ReportObject)], ""


URL_ANNOTATION = "hugepage-extender.io/url"


class _ServiceMeta(msgspec.Struct):
    annotations: dict[str, str] | None = None


class _Service(msgspec.Struct):
    metadata: _ServiceMeta = msgspec.field(default_factory=_ServiceMeta)


def extender_url_of_service(api: client.ApiClient, namespace: str, name: str) -> str:
    """The extender's URL, as the chart annotates its Service (``hugepage-extender.io/url``)."""
    core = client.CoreV1Api(api)
    raw = _call(f"get service {namespace}/{name}", core.read_namespaced_service, name, namespace)
    url = (msgspec.json.decode(raw, type=_Service).metadata.annotations or {}).get(URL_ANNOTATION)
    if not url:
        raise LiveReadError(
            f"service {namespace}/{name} has no {URL_ANNOTATION} annotation: only the chart's topology=service "
            "serves the verbs behind a Service; beside the scheduler (the default) they listen on its pod's "
            "127.0.0.1: kubectl port-forward to the lease holder and pass --extender http://127.0.0.1:8888"
        )
    return url


def context_namespace(kubeconfig: Path | None, context: str | None = None) -> str:
    """The namespace of the kubeconfig's current context (or ``context``), as kubectl uses it; else default."""
    try:
        contexts, current = config.list_kube_config_contexts(  # type: ignore[no-untyped-call]
            config_file=str(kubeconfig) if kubeconfig else None
        )
    except (config.ConfigException, OSError):
        return "default"
    chosen = next((c for c in contexts if c.get("name") == context), None) if context else current
    namespace = ((chosen or {}).get("context") or {}).get("namespace")
    return str(namespace) if namespace else "default"


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
