"""The kube-scheduler extender v1 wire format: parse requests, render answers.

The scheduler's Go types carry no JSON tags, so it sends capitalised keys and
its decoder matches keys case-insensitively; requests are accepted in any
casing and answered with the canonical keys. Full Node objects are passed
through as raw bytes: only their names are decoded, and the answer echoes
the admitted objects byte for byte.

Requests with the scheduler's own keys take a fast path: one pass that
decodes the pod and the node names and skips every other field, the same
pass a field-skipping decoder makes. Full-Nodes bodies are split into each
node's bytes only when an answer echoes nodes (filter; prioritize never
does). Anything the fast path does not accept as is (other casings, unknown
keys, errors) goes through the general path, which gives the same results
and the same error messages.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from itertools import starmap
from typing import Any

import msgspec

from extender.decision import FilterDecision
from extender.objects import NodeName, Pod


class WireError(ValueError):
    """A request the extender cannot read; answered with 400."""


@dataclass(frozen=True, slots=True)
class ExtenderArgs:
    pod: Pod
    node_names: list[str]
    # Full-Nodes mode (nodeCacheCapable: false): each node's raw JSON by name, either
    # split already (general path) or split from the request body when first asked for
    # (fast path: ``_body``, and every item's name in request order, repeats included).
    _raw_nodes: dict[str, msgspec.Raw] | None = None
    _body: bytes | None = None
    _item_names: list[str] | None = None

    @property
    def full_nodes(self) -> bool:
        return self._raw_nodes is not None or self._body is not None

    @property
    def raw_nodes(self) -> dict[str, msgspec.Raw] | None:
        """Each node's name and raw JSON in full-Nodes mode (None in NodeNames mode).

        From the fast path this splits the body on each access (one pass that
        skips every field but the node list): ask once per request. A name
        given twice keeps its first place and its last object, as a dict does.
        """
        if self._body is None or self._item_names is None:
            return self._raw_nodes
        nodes = _raw_node_list.decode(self._body).Nodes
        raws = nodes.items if nodes is not None and nodes.items is not None else []
        return dict(zip(self._item_names, raws, strict=True))


@dataclass(frozen=True, slots=True)
class BindingArgs:
    pod_name: str
    pod_namespace: str
    pod_uid: str
    node: str


class _NodeList(msgspec.Struct):
    items: list[msgspec.Raw] | None = None


class _NodeNameList(msgspec.Struct):
    items: list[NodeName] | None = None


_NULL = msgspec.Raw(b"null")


class _CanonicalArgs(msgspec.Struct, forbid_unknown_fields=True):
    """ExtenderArgs with the keys kube-scheduler sends; any other key leaves the fast path."""

    Pod: Pod
    Nodes: _NodeNameList | None = None
    NodeNames: msgspec.Raw = _NULL  # decoded through _LastCandidates


SMALL_CANDIDATE_LIST = 4096  # bytes of NodeNames below which a list is decoded, never kept


class _LastCandidates:
    """The last NodeNames list decoded, kept by its exact bytes.

    kube-scheduler sends every feasible node's name with each pod, so while
    the feasible set stays the same, consecutive requests carry the same
    bytes. Comparing them costs a few microseconds; decoding 5,000 names into
    strings (and freeing them after the answer) costs 100 to 200. A hit
    returns a fresh list of the same strings, so no caller shares the cached
    one. The event loop is the only caller: no lock.
    """

    def __init__(self) -> None:
        self._raw = b""
        self._names: list[str] = []

    def names(self, raw: msgspec.Raw) -> list[str] | None:
        """The names in ``raw`` (None for a JSON null); DecodeError if it is not a list of strings."""
        if len(raw) < SMALL_CANDIDATE_LIST:
            # Short lists (prioritize after a best-of-K filter) decode in no time and would
            # only evict the long one the next filter brings again.
            names: list[str] | None = _node_names.decode(raw)
            return names
        data = bytes(raw)
        if data != self._raw:
            names = _node_names.decode(data)
            if names is None:
                return None
            self._raw, self._names = data, names
        return list(self._names)


class _RawNodes(msgspec.Struct):
    """Only the node list of ExtenderArgs, each node as raw bytes (the rest is skipped)."""

    Nodes: _NodeList | None = None


class _HostPriority(msgspec.Struct):
    Host: str
    Score: int


_top_level = msgspec.json.Decoder(dict[str, msgspec.Raw])
_pod = msgspec.json.Decoder(Pod)
_node_list = msgspec.json.Decoder(_NodeList | None)
_node_names = msgspec.json.Decoder(list[str] | None)
_node_name = msgspec.json.Decoder(NodeName)
_string = msgspec.json.Decoder(str)
_canonical = msgspec.json.Decoder(_CanonicalArgs)
_raw_node_list = msgspec.json.Decoder(_RawNodes)
_encoder = msgspec.json.Encoder()
_last_candidates = _LastCandidates()


def _fields(body: bytes, what: str) -> dict[str, msgspec.Raw]:
    try:
        top = _top_level.decode(body)
    except msgspec.ValidationError:
        raise WireError(f"{what} must be a JSON object") from None
    except msgspec.DecodeError as error:
        raise WireError(f"malformed JSON: {error}") from None
    return {key.lower(): value for key, value in top.items()}


def _decode(decoder: msgspec.json.Decoder[Any], raw: msgspec.Raw, field: str) -> Any:
    try:
        return decoder.decode(raw)
    except msgspec.DecodeError as error:
        message = str(error).replace(" - at `$", f" - at `{field}")
        if "`" not in message:
            message = f"{message} - at `{field}`"
        raise WireError(f"invalid {field}: {message}") from None


def parse_extender_args(body: bytes) -> ExtenderArgs:
    return _parse_canonical(body) or _parse_general(body)


def _parse_canonical(body: bytes) -> ExtenderArgs | None:
    """The fast path: one field-skipping pass; None when the general path must decide."""
    try:
        args = _canonical.decode(body)
    except msgspec.DecodeError:
        return None
    if args.Nodes is not None and args.Nodes.items is not None:
        item_names = [node.metadata.name for node in args.Nodes.items]
        if not all(item_names):
            return None  # the general path names the item without a name
        names = list(dict.fromkeys(item_names))
        return ExtenderArgs(
            args.Pod, item_names if len(names) == len(item_names) else names, _body=body, _item_names=item_names
        )
    try:
        candidates = _last_candidates.names(args.NodeNames)
    except msgspec.DecodeError:
        return None
    if candidates is None:
        return None
    return ExtenderArgs(args.Pod, candidates)


def _parse_general(body: bytes) -> ExtenderArgs:
    fields = _fields(body, "ExtenderArgs")
    if "pod" not in fields:
        raise WireError("ExtenderArgs has no Pod")
    pod: Pod = _decode(_pod, fields["pod"], "Pod")
    node_list: _NodeList | None = None
    if "nodes" in fields:
        node_list = _decode(_node_list, fields["nodes"], "Nodes")
    if node_list is not None and node_list.items is not None:
        raw_nodes: dict[str, msgspec.Raw] = {}
        for index, raw in enumerate(node_list.items):
            node: NodeName = _decode(_node_name, raw, f"Nodes.items[{index}]")
            if not node.metadata.name:
                raise WireError(f"invalid Nodes.items[{index}]: node without metadata.name")
            raw_nodes[node.metadata.name] = raw
        return ExtenderArgs(pod, list(raw_nodes), _raw_nodes=raw_nodes)
    names = _decode(_node_names, fields["nodenames"], "NodeNames") if "nodenames" in fields else None
    if names is None:
        raise WireError("ExtenderArgs has neither Nodes nor NodeNames")
    return ExtenderArgs(pod, names)


def parse_binding_args(body: bytes) -> BindingArgs:
    fields = _fields(body, "ExtenderBindingArgs")
    values: dict[str, str] = {}
    for key in ("podname", "podnamespace", "poduid", "node"):
        if key not in fields:
            raise WireError(f"ExtenderBindingArgs has no {key}")
        values[key] = _decode(_string, fields[key], key)
    if not values["podname"] or not values["node"]:
        raise WireError("ExtenderBindingArgs needs a PodName and a Node")
    return BindingArgs(values["podname"], values["podnamespace"], values["poduid"], values["node"])


def render_filter(args: ExtenderArgs, decision: FilterDecision) -> bytes:
    """ExtenderFilterResult in the same mode as the request."""
    result: dict[str, Any] = {
        "FailedNodes": decision.failed,
        "FailedAndUnresolvableNodes": decision.unresolvable,
        "Error": "",
    }
    raw = args.raw_nodes
    if raw is not None:
        result["Nodes"] = {"items": [raw[name] for name in decision.passed]}
        result["NodeNames"] = None
    else:
        result["Nodes"] = None
        result["NodeNames"] = decision.passed
    return _encoder.encode(result)


def render_filter_error(message: str) -> bytes:
    """A filter answer that fails the scheduling attempt (the pod is retried)."""
    return _encoder.encode(
        {"Nodes": None, "NodeNames": None, "FailedNodes": {}, "FailedAndUnresolvableNodes": {}, "Error": message}
    )


def render_priorities(scores: Iterable[tuple[str, int]]) -> bytes:
    # Structs encode in C, about twice as fast as one dict per node.
    return _encoder.encode(list(starmap(_HostPriority, scores)))


def render_binding(error: str = "") -> bytes:
    return _encoder.encode({"Error": error})


def render_error(message: str) -> bytes:
    return _encoder.encode({"Error": message})
