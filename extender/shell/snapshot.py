"""Cluster snapshots: the Nodes and Pods of a cluster, saved to a file.

Accepts what ``kubectl get nodes,pods -A -o yaml`` (or ``-o json``) writes: a
``List`` of objects; also NodeList/PodList, bare objects, and several YAML
documents in one file. The node agents' records come along with
``kubectl get nodes,pods,hugepagenodereports -A -o yaml``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import msgspec
import yaml

from extender.core.errors import ExtenderError
from extender.core.objects import Node, Pod

BUNDLED_SNAPSHOT = "example-snapshot.yaml"


class SnapshotError(ExtenderError, ValueError):
    """A snapshot file that cannot be read as Kubernetes Nodes and Pods."""


@dataclass(frozen=True, slots=True)
class Snapshot:
    nodes: list[Node]
    pods: list[Pod]
    reports: list[tuple[str, bytes | None]] = field(default_factory=list)  # HugepageNodeReport name, report JSON


def _objects(document: Any, where: str) -> Iterator[tuple[str, Any]]:
    if document is None:
        return
    if not isinstance(document, dict):
        raise SnapshotError(f"{where}: expected a Kubernetes object or List, got {type(document).__name__}")
    kind = str(document.get("kind", ""))
    if kind == "List" or kind.endswith("List"):
        item_kind = kind.removesuffix("List")
        for index, item in enumerate(document.get("items") or ()):
            if not isinstance(item, dict):
                raise SnapshotError(f"{where}.items[{index}]: expected an object")
            yield from _objects({"kind": item_kind, **item} if item_kind else item, f"{where}.items[{index}]")
        return
    yield kind, document


_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _documents(text: str, source: str) -> list[Any]:
    if text.lstrip().startswith("{"):
        # JSON (kubectl -o json): msgspec reads it an order of magnitude faster than YAML.
        try:
            return [msgspec.json.decode(text)]
        except msgspec.DecodeError:
            pass  # perhaps YAML flow style after all
    try:
        return list(yaml.load_all(text, Loader=_Loader))
    except yaml.YAMLError as error:
        raise SnapshotError(f"{source} is not valid YAML or JSON: {error}") from None


def pod_from(document: Any) -> Pod:
    """A Pod from a parsed document. Through JSON, not msgspec.convert: a pod's conditions and
    container statuses stay undecoded (msgspec.Raw, extender.core.objects.PodStatus), which only a
    decoder makes. Raises msgspec.ValidationError."""
    return msgspec.json.decode(msgspec.json.encode(document), type=Pod)


def parse_snapshot(text: str, source: str = "snapshot") -> Snapshot:
    documents = _documents(text, source)
    nodes: list[Node] = []
    pods: list[Pod] = []
    reports: list[tuple[str, bytes | None]] = []
    for doc_index, document in enumerate(documents):
        for kind, obj in _objects(document, f"{source}[{doc_index}]"):
            try:
                if kind == "Node":
                    nodes.append(msgspec.convert(obj, Node))
                elif kind == "Pod":
                    pods.append(pod_from(obj))
                elif kind == "HugepageNodeReport":
                    report = obj.get("report")
                    name = str((obj.get("metadata") or {}).get("name", ""))
                    reports.append((name, None if report is None else msgspec.json.encode(report)))
            except msgspec.ValidationError as error:
                name = (obj.get("metadata") or {}).get("name", "?")
                raise SnapshotError(f"{source}: {kind} {name}: {error}") from None
    return Snapshot(nodes, pods, reports)


def load_snapshot(path: Path | None) -> Snapshot:
    """A snapshot from ``path``, or the bundled example when None."""
    if path is None:
        text = resources.files("extender.data").joinpath(BUNDLED_SNAPSHOT).read_text()
        return parse_snapshot(text, f"bundled {BUNDLED_SNAPSHOT}")
    try:
        text = path.read_text()
    except OSError as error:
        raise SnapshotError(f"cannot read snapshot {path}: {error.strerror}") from None
    return parse_snapshot(text, str(path))
