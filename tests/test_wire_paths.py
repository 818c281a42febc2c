"""The wire's fast path (scheduler keys, one field-skipping pass) reads every request as the general path does."""

from typing import Any

import msgspec
import pytest

from extender.decision import FilterDecision
from extender.wire import (
    ExtenderArgs,
    WireError,
    _parse_canonical,
    _parse_general,
    parse_extender_args,
    render_filter,
)


def _pod(name: str = "web-0") -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
        "spec": {"containers": [{"name": "main", "resources": {"requests": {"hugepages-2Mi": "1Gi"}}}]},
    }


def _node(name: str, zone: str = "a") -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {"zone": zone}},
        "status": {"allocatable": {"hugepages-2Mi": "4Gi"}, "images": [{"names": ["x"]}]},
    }


def _raw(args: ExtenderArgs) -> dict[str, bytes] | None:
    raw = args.raw_nodes
    return None if raw is None else {name: bytes(value) for name, value in raw.items()}


def _same(fast: ExtenderArgs, general: ExtenderArgs) -> None:
    assert fast.pod == general.pod
    assert fast.node_names == general.node_names
    assert fast.full_nodes == general.full_nodes
    assert _raw(fast) == _raw(general)
    everyone = FilterDecision(passed=list(general.node_names))
    assert render_filter(fast, everyone) == render_filter(general, everyone)


@pytest.mark.parametrize(
    "body",
    [
        pytest.param({"Pod": _pod(), "Nodes": None, "NodeNames": ["a", "b", "a"]}, id="names, a repeat kept"),
        pytest.param({"Pod": _pod(), "NodeNames": []}, id="no candidates"),
        pytest.param({"Pod": _pod(), "Nodes": {"metadata": {}, "items": [_node("a"), _node("b")]}}, id="full Nodes"),
        pytest.param(
            {"Pod": _pod(), "Nodes": {"items": [_node("a"), _node("b"), _node("a", zone="z")]}, "NodeNames": None},
            id="full Nodes, a repeated name keeps its first place and last object",
        ),
        pytest.param({"Pod": _pod(), "Nodes": {"items": []}, "NodeNames": None}, id="full Nodes, empty list"),
        pytest.param({"Pod": _pod(), "Nodes": {"items": None}, "NodeNames": ["a"]}, id="items null: names"),
        pytest.param({"Pod": _pod(), "Nodes": {"items": [_node("a")]}, "NodeNames": 7}, id="Nodes wins over NodeNames"),
    ],
)
def test_fast_path_reads_as_the_general_path(body: dict[str, Any]) -> None:
    encoded = msgspec.json.encode(body)
    fast = _parse_canonical(encoded)
    assert fast is not None
    _same(fast, _parse_general(encoded))
    again = _parse_canonical(encoded)  # the same candidate list again: from the last-candidates cache
    assert again is not None
    _same(again, _parse_general(encoded))


def test_a_repeated_candidate_list_is_a_fresh_list_each_time() -> None:
    encoded = msgspec.json.encode({"Pod": _pod(), "NodeNames": ["a", "b"]})
    first = parse_extender_args(encoded)
    first.node_names.append("mutated")
    second = parse_extender_args(encoded)
    assert second.node_names == ["a", "b"]
    other = parse_extender_args(msgspec.json.encode({"Pod": _pod(), "NodeNames": ["c"]}))
    assert other.node_names == ["c"]
    assert parse_extender_args(encoded).node_names == ["a", "b"]


@pytest.mark.parametrize(
    "body",
    [
        pytest.param({"pod": _pod(), "nodenames": ["a"]}, id="lower-case keys"),
        pytest.param({"POD": _pod(), "NODES": {"items": [_node("a")]}}, id="upper-case keys"),
        pytest.param({"Pod": _pod(), "NodeNames": ["a"], "Extra": 1}, id="an unknown key"),
    ],
)
def test_other_keys_take_the_general_path(body: dict[str, Any]) -> None:
    encoded = msgspec.json.encode(body)
    assert _parse_canonical(encoded) is None
    _same(parse_extender_args(encoded), _parse_general(encoded))


@pytest.mark.parametrize(
    "body",
    [
        b"not json",
        b"[1, 2]",
        msgspec.json.encode({"Pod": _pod()}),
        msgspec.json.encode({"Pod": None, "NodeNames": ["a"]}),
        msgspec.json.encode({"Pod": {"spec": {"containers": 3}}, "NodeNames": ["a"]}),
        msgspec.json.encode({"Pod": _pod(), "Nodes": {"items": [_node("a"), {"metadata": {}}]}}),
        msgspec.json.encode({"Pod": _pod(), "Nodes": {"items": [1]}}),
        msgspec.json.encode({"Pod": _pod(), "NodeNames": None}),
        msgspec.json.encode({"Pod": _pod(), "NodeNames": ["a", 7]}),
        msgspec.json.encode({"Pod": _pod(), "NodeNames": "a"}),
    ],
)
def test_errors_are_the_general_paths(body: bytes) -> None:
    with pytest.raises(WireError) as general:
        _parse_general(body)
    with pytest.raises(WireError) as parsed:
        parse_extender_args(body)
    assert str(parsed.value) == str(general.value)
