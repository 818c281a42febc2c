"""The kube-scheduler extender v1 wire format: parse requests, render answers.

The scheduler's Go types carry no JSON tags, so it sends capitalised keys and
its decoder matches keys case-insensitively; requests are accepted in any
casing and answered with the canonical keys. Full Node objects are passed
through as raw bytes: only their names are decoded, and the answer echoes
the admitted objects byte for byte. A long ``NodeNames`` list is read in place
(``namelist.NameList``): names are decoded as a decision reads them, and an
answer passing every candidate echoes the list's bytes.

Requests with the scheduler's own keys take a fast path: one pass that
decodes the pod and the node names and skips every other field, the same
pass a field-skipping decoder makes. Full-Nodes bodies are split into each
node's bytes only when an answer echoes nodes (filter; prioritize never
does). Anything the fast path does not accept as is (other casings, unknown
keys, errors) goes through the general path, which gives the same results
and the same error messages.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import msgspec
import numpy as np

from extender.core.answer import FilterDecision, HostScores, RejectedByReason
from extender.core.binding import BindingArgs
from extender.core.candidatelists import RecentCandidates
from extender.core.errors import ExtenderError
from extender.core.namelist import NameList
from extender.core.objects import NodeName, Pod
from extender.core.scoring import MAX_PRIORITY


class WireError(ExtenderError, ValueError):
    """A request the extender cannot read; answered with 400."""


@dataclass(frozen=True, slots=True)
class ExtenderArgs:
    pod: Pod
    node_names: Sequence[str]  # a list, or a NameList read in place
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


class _NodeList(msgspec.Struct):
    items: list[msgspec.Raw] | None = None


class _NodeNameList(msgspec.Struct):
    items: list[NodeName] | None = None


_NULL = msgspec.Raw(b"null")
_Args = TypeVar("_Args")


class _CanonicalArgs(msgspec.Struct, forbid_unknown_fields=True):
    """ExtenderArgs with the keys kube-scheduler sends; any other key leaves the fast path."""

    Pod: msgspec.Raw  # its size is checked before it is decoded
    Nodes: _NodeNameList | None = None
    NodeNames: msgspec.Raw = _NULL  # decoded through RecentCandidates


# Bounds on what one request may make the extender build, checked before decoding it:
# no stored Pod exceeds etcd's 1.5 MiB request limit (its JSON is a few times that of
# protobuf at most), and no cluster has 100,000 nodes (kube-scheduler is tested to 5,000).
MAX_POD_BYTES = 4 * 1024 * 1024
MAX_CANDIDATES = 100_000


class _RawNodes(msgspec.Struct):
    """Only the node list of ExtenderArgs, each node as raw bytes (the rest is skipped)."""

    Nodes: _NodeList | None = None


class _HostPriority(msgspec.Struct):
    Host: str
    Score: int


# What follows each name in a HostPriorityList, by score: rendering is then one join.
_AFTER_NAME = np.array([f'","Score":{score}}},{{"Host":"' for score in range(MAX_PRIORITY + 1)], dtype=object)
_AFTER_LAST_NAME = [f'","Score":{score}}}]' for score in range(MAX_PRIORITY + 1)]


_top_level = msgspec.json.Decoder(dict[str, msgspec.Raw])
_pod = msgspec.json.Decoder(Pod)
_node_list = msgspec.json.Decoder(_NodeList | None)
_node_name_list = msgspec.json.Decoder(_NodeNameList | None)
_node_names = msgspec.json.Decoder(list[str] | None)
_node_name = msgspec.json.Decoder(NodeName)
_string = msgspec.json.Decoder(str)
_canonical = msgspec.json.Decoder(_CanonicalArgs)
_raw_node_list = msgspec.json.Decoder(_RawNodes)
_encoder = msgspec.json.Encoder()


def recent_candidate_bytes() -> int:
    """About what the candidate lists kept for the next requests hold in memory."""
    return _recent_candidates.nbytes()


def drop_recent_candidates() -> None:
    """Let go of the candidate lists kept for the next requests (those in use stay with their requests)."""
    _recent_candidates.drop()


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


MAX_MESSAGE_CHARS = 300  # an error message from the decoder, as answered and logged


def _bounded(parse: Callable[[bytes], _Args]) -> Callable[[bytes], _Args]:
    """Every failure of a body's content is a WireError with a short message.

    msgspec bounds nesting by the interpreter's recursion limit (about 1,000 levels;
    Kubernetes objects nest a few dozen) and raises RecursionError beyond it: a
    client's mistake, answered 400 like any other malformed body.
    """

    @functools.wraps(parse)
    def bounded(body: bytes) -> _Args:
        try:
            return parse(body)
        except RecursionError:
            raise WireError("JSON nested too deeply") from None
        except WireError as error:
            message = str(error)
            if len(message) <= MAX_MESSAGE_CHARS:
                raise
            raise WireError(message[:MAX_MESSAGE_CHARS] + "...") from None

    return bounded


@_bounded
def parse_extender_args(body: bytes) -> ExtenderArgs:
    return _parse_canonical(body) or _parse_general(body)


def _parse_canonical(body: bytes) -> ExtenderArgs | None:
    """The fast path: one field-skipping pass; None when the general path must decide."""
    repeat = _recent_candidates.cut_from(body)
    try:
        args = _canonical.decode(body if repeat is None else repeat[0])
    except msgspec.DecodeError:
        return None
    pod = _pod_of(args.Pod)
    if pod is None:
        return None
    if args.Nodes is not None and args.Nodes.items is not None:
        item_names = [node.metadata.name for node in args.Nodes.items]
        if not all(item_names):
            return None  # the general path names the item without a name
        _check_count(len(item_names))
        names = list(dict.fromkeys(item_names))
        return ExtenderArgs(
            pod, item_names if len(names) == len(item_names) else names, _body=body, _item_names=item_names
        )
    candidates = repeat[1] if repeat is not None else _candidates(args.NodeNames)
    return None if candidates is None else ExtenderArgs(pod, candidates)


def _pod_of(raw: msgspec.Raw) -> Pod | None:
    _check_pod_size(raw)
    try:
        pod: Pod = _pod.decode(raw)
    except msgspec.DecodeError:
        return None  # the general path says what is wrong
    return _checked_identity(pod)


# What Kubernetes allows (a DNS label, a DNS subdomain, a UUID): anything longer names no pod
# or node, and would only make what the extender remembers per pod (its UID, its namespace
# and name, for holds and bind) as large as the request.
MAX_NAMESPACE, MAX_NAME, MAX_UID = 63, 253, 128


def _checked_identity(pod: Pod) -> Pod:
    meta = pod.metadata
    _check_identity(meta.namespace, meta.name, meta.uid, "Pod")
    return pod


def _check_identity(namespace: str, name: str, uid: str, what: str, node: str = "") -> None:
    for field, value, limit in (
        ("namespace", namespace, MAX_NAMESPACE),
        ("name", name, MAX_NAME),
        ("uid", uid, MAX_UID),
        ("node", node, MAX_NAME),
    ):
        if len(value) > limit:
            raise WireError(f"{what} {field} longer than {limit} characters")


def _check_pod_size(raw: msgspec.Raw) -> None:
    if len(raw) > MAX_POD_BYTES:
        raise WireError(f"Pod is over {MAX_POD_BYTES} bytes: larger than any stored pod")


def _check_count(count: int) -> None:
    if count > MAX_CANDIDATES:
        raise WireError(f"more than {MAX_CANDIDATES} candidate nodes")


def _check_names(raw: bytes | msgspec.Raw) -> None:
    """Before a NodeNames list is decoded: node names hold no comma, so commas count them."""
    if len(raw) > 2 * MAX_CANDIDATES and bytes(raw).count(b",") >= MAX_CANDIDATES:
        raise WireError(f"more than {MAX_CANDIDATES} candidate nodes")


_recent_candidates = RecentCandidates(_node_names, _check_names)


def _candidates(raw: msgspec.Raw) -> Sequence[str] | None:
    """The names in NodeNames; None when the general path must decide (a null, an error)."""
    try:
        return _recent_candidates.names(raw)
    except msgspec.DecodeError:
        return None


def _parse_general(body: bytes) -> ExtenderArgs:
    fields = _fields(body, "ExtenderArgs")
    if "pod" not in fields:
        raise WireError("ExtenderArgs has no Pod")
    _check_pod_size(fields["pod"])
    pod: Pod = _checked_identity(_decode(_pod, fields["pod"], "Pod"))
    node_list: _NodeList | None = None
    if "nodes" in fields:
        # Names first: a bad item fails at once, and the count is known before a
        # raw slice of every item is made.
        named: _NodeNameList | None = _decode(_node_name_list, fields["nodes"], "Nodes")
        if named is not None and named.items is not None:
            _check_count(len(named.items))
        node_list = _decode(_node_list, fields["nodes"], "Nodes")
    if node_list is not None and node_list.items is not None:
        raw_nodes: dict[str, msgspec.Raw] = {}
        for index, raw in enumerate(node_list.items):
            node: NodeName = _decode(_node_name, raw, f"Nodes.items[{index}]")
            if not node.metadata.name:
                raise WireError(f"invalid Nodes.items[{index}]: node without metadata.name")
            raw_nodes[node.metadata.name] = raw
        return ExtenderArgs(pod, list(raw_nodes), _raw_nodes=raw_nodes)
    if "nodenames" in fields:
        _check_names(fields["nodenames"])
    names = _decode(_node_names, fields["nodenames"], "NodeNames") if "nodenames" in fields else None
    if names is None:
        raise WireError("ExtenderArgs has neither Nodes nor NodeNames")
    return ExtenderArgs(pod, names)


@_bounded
def parse_binding_args(body: bytes) -> BindingArgs:
    fields = _fields(body, "ExtenderBindingArgs")
    values: dict[str, str] = {}
    for key in ("podname", "podnamespace", "poduid", "node"):
        if key not in fields:
            raise WireError(f"ExtenderBindingArgs has no {key}")
        values[key] = _decode(_string, fields[key], key)
    if not values["podname"] or not values["node"] or not values["poduid"]:
        # An empty PodUID would bind without the UID precondition: never.
        raise WireError("ExtenderBindingArgs needs a PodName, a PodUID and a Node")
    _check_identity(values["podnamespace"], values["podname"], values["poduid"], "ExtenderBindingArgs", values["node"])
    return BindingArgs(values["podname"], values["podnamespace"], values["poduid"], values["node"])


def _node_reasons(*rejected: Mapping[str, str]) -> Mapping[str, str] | msgspec.Raw:
    """One map of rejected nodes: names grouped by a constant reason (``RejectedByReason``, the
    names read in place, so no escaping) are written with one join per reason."""
    given = [nodes for nodes in rejected if nodes]
    if not all(isinstance(nodes, RejectedByReason) for nodes in given):
        return {name: reason for nodes in given for name, reason in nodes.items()}
    parts = []
    for nodes in given:
        assert isinstance(nodes, RejectedByReason)  # for the type checker: checked above
        for reason, names in nodes.groups:
            value = _encoder.encode(reason).decode()
            parts.append('"' + f'":{value},"'.join(names) + f'":{value}')
    return msgspec.Raw(("{" + ",".join(parts) + "}").encode())


def render_filter(args: ExtenderArgs, decision: FilterDecision) -> bytes:
    """ExtenderFilterResult in the same mode as the request.

    Every rejected node is FailedAndUnresolvableNodes, never FailedNodes (docs/design.md,
    "Preemption"): the extender is asked only about nodes the in-tree filters accepted, and
    kube-scheduler's preemption dry run on a FailedNodes node runs the in-tree filters alone
    (``framework/preemption/preemption.go``, ``findCandidates`` and ``DryRunPreemption``): they
    pass with no victim, and the attempt errs ("expected at least one victim pod on node") each
    time a lower-priority pod runs there, preempting nothing.

    The rejected nodes and their reasons are written only when no node passes: kube-scheduler
    reads them only then (its FailedScheduling event and preemption run only for a pod no node
    passed), as it already does without them for the nodes a best-of-K sample never examined.
    At 5,000 nodes, 90% of them full, naming the rejected would make a K = 0 answer 400 KB
    instead of 6 KB; the decision's counts (metrics) are the same either way.
    """
    rejected = not decision.passed
    result: dict[str, Any] = {
        "FailedNodes": {},
        "FailedAndUnresolvableNodes": _node_reasons(decision.failed, decision.unresolvable) if rejected else {},
        "Error": "",
    }
    raw = args.raw_nodes
    if raw is not None:
        result["Nodes"] = {"items": [raw[name] for name in decision.passed]}
        result["NodeNames"] = None
    else:
        result["Nodes"] = None
        passed = decision.passed
        # Every candidate passed: the list goes back as it came, without encoding it again.
        result["NodeNames"] = msgspec.Raw(passed.json) if isinstance(passed, NameList) else list(passed)
    return _encoder.encode(result)


def render_filter_error(message: str) -> bytes:
    """A filter answer that fails the scheduling attempt (the pod is retried)."""
    return _encoder.encode(
        {"Nodes": None, "NodeNames": None, "FailedNodes": {}, "FailedAndUnresolvableNodes": {}, "Error": message}
    )


def render_priorities(host_scores: HostScores) -> bytes:
    names, scores = host_scores.names, host_scores.scores
    if isinstance(names, NameList) and len(names) and scores.min() >= 0 and scores.max() <= MAX_PRIORITY:
        # Names read in place need no escaping: the answer is the names joined with
        # what follows each, about three times as fast as encoding one struct per node.
        after = _AFTER_NAME[scores].tolist()
        after[-1] = _AFTER_LAST_NAME[scores[-1]]
        parts: list[str] = [""] * (2 * len(names))
        parts[0::2] = names.names()
        parts[1::2] = after
        parts[0] = '[{"Host":"' + parts[0]  # not before the joined answer: a copy of it (34 MiB at most)
        return "".join(parts).encode()
    return _encoder.encode(list(map(_HostPriority, names, scores.tolist())))


def render_binding(error: str = "") -> bytes:
    return _encoder.encode({"Error": error})


def render_error(message: str) -> bytes:
    return _encoder.encode({"Error": message})
