"""The kube-scheduler extender v1 wire format: parse requests, render answers.

The scheduler's Go types carry no JSON tags, so it sends capitalised keys and
its decoder matches keys case-insensitively; requests are accepted in any
casing and answered with the canonical keys. Full Node objects are passed
through as raw bytes: only their names are decoded, and the answer echoes
the admitted objects byte for byte.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
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
    # Full-Nodes mode (nodeCacheCapable: false): each node's name and raw JSON.
    raw_nodes: dict[str, msgspec.Raw] | None

    @property
    def full_nodes(self) -> bool:
        return self.raw_nodes is not None


@dataclass(frozen=True, slots=True)
class BindingArgs:
    pod_name: str
    pod_namespace: str
    pod_uid: str
    node: str


class _NodeList(msgspec.Struct):
    items: list[msgspec.Raw] | None = None


_top_level = msgspec.json.Decoder(dict[str, msgspec.Raw])
_pod = msgspec.json.Decoder(Pod)
_node_list = msgspec.json.Decoder(_NodeList | None)
_node_names = msgspec.json.Decoder(list[str] | None)
_node_name = msgspec.json.Decoder(NodeName)
_string = msgspec.json.Decoder(str)
_encoder = msgspec.json.Encoder()


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
        return ExtenderArgs(pod, list(raw_nodes), raw_nodes)
    names = _decode(_node_names, fields["nodenames"], "NodeNames") if "nodenames" in fields else None
    if names is None:
        raise WireError("ExtenderArgs has neither Nodes nor NodeNames")
    return ExtenderArgs(pod, names, None)


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
    if args.raw_nodes is not None:
        raw = args.raw_nodes
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
    return _encoder.encode([{"Host": host, "Score": score} for host, score in scores])


def render_binding(error: str = "") -> bytes:
    return _encoder.encode({"Error": error})


def render_error(message: str) -> bytes:
    return _encoder.encode({"Error": message})
