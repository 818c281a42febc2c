"""The wire's fast path (scheduler keys, one field-skipping pass) reads every request as the general path does."""

from typing import Any

import msgspec
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from extender.core.answer import FilterDecision, HostScores
from extender.core.candidatelists import RECENT_CANDIDATE_LISTS, RecentCandidates
from extender.core.namelist import NameList
from extender.shell.wire import (
    ExtenderArgs,
    WireError,
    _check_names,
    _node_names,
    _parse_canonical,
    _parse_general,
    parse_extender_args,
    render_filter,
    render_priorities,
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


def test_a_short_repeated_candidate_list_is_a_fresh_list_each_time() -> None:
    encoded = msgspec.json.encode({"Pod": _pod(), "NodeNames": ["a", "b"]})
    first = parse_extender_args(encoded)
    assert isinstance(first.node_names, list)
    first.node_names.append("mutated")
    second = parse_extender_args(encoded)
    assert second.node_names == ["a", "b"]
    other = parse_extender_args(msgspec.json.encode({"Pod": _pod(), "NodeNames": ["c"]}))
    assert other.node_names == ["c"]
    assert parse_extender_args(encoded).node_names == ["a", "b"]


LONG = [f"node-{i:05d}" for i in range(1000)]  # over SMALL_CANDIDATE_LIST bytes of JSON


def test_a_long_candidate_list_is_read_in_place_and_served_again_while_its_bytes_repeat() -> None:
    encoded = msgspec.json.encode({"Pod": _pod(), "NodeNames": LONG})
    first = parse_extender_args(encoded)
    assert isinstance(first.node_names, NameList)
    assert first.node_names == LONG
    assert parse_extender_args(encoded).node_names is first.node_names  # immutable: safe to share
    _same(first, _parse_general(encoded))
    rotated = parse_extender_args(msgspec.json.encode({"Pod": _pod(), "NodeNames": LONG[1:] + LONG[:1]}))
    assert rotated.node_names is not first.node_names
    assert list(rotated.node_names) == LONG[1:] + LONG[:1]


def test_a_request_ending_with_the_last_list_decodes_only_what_comes_before_it() -> None:
    first = parse_extender_args(msgspec.json.encode({"Pod": _pod("web-0"), "Nodes": None, "NodeNames": LONG}))
    other_pod = msgspec.json.encode({"Pod": _pod("web-1"), "Nodes": None, "NodeNames": LONG})
    again = _parse_canonical(other_pod)
    assert again is not None
    assert again.pod.metadata.name == "web-1"
    assert again.node_names is first.node_names
    _same(again, _parse_general(other_pod))
    full = {"Pod": _pod(), "Nodes": {"items": [_node("a")]}, "NodeNames": LONG}  # Nodes still wins
    _same(parse_extender_args(msgspec.json.encode(full)), _parse_general(msgspec.json.encode(full)))
    for names in (LONG, LONG[::-1]):  # the last list, and one not seen before
        tail = b'"NodeNames":' + msgspec.json.encode(names) + b"}"
        for broken in (b'{"Pod":{"metadata":{"name":7}},' + tail, b'{"Pod":' + tail, b"[" + tail):
            assert _parse_canonical(broken) is None
            with pytest.raises(WireError):
                parse_extender_args(broken)
    pod = _pod()
    pod["metadata"]["annotations"] = {"a": '"NodeNames":["x"]}'}
    tricky = {"Pod": pod, "NodeNames": LONG[::-1]}
    _same(parse_extender_args(msgspec.json.encode(tricky)), _parse_general(msgspec.json.encode(tricky)))


def _scheduler_lists(count: int) -> list[list[str]]:
    """Each scheduler's feasible nodes: every node but one, a different one each."""
    return [LONG[:i] + LONG[i + 1 :] for i in range(count)]


def test_the_lists_of_several_schedulers_are_each_served_again() -> None:
    lists = _scheduler_lists(RECENT_CANDIDATE_LISTS)
    first = [parse_extender_args(msgspec.json.encode({"Pod": _pod(), "NodeNames": n})).node_names for n in lists]
    assert all(isinstance(names, NameList) for names in first)
    for _ in range(2):  # interleaved, as several schedulers send them: each list found again
        for names, seen in zip(lists, first, strict=True):
            for pod in ("web-1", "web-2"):
                for body in (
                    msgspec.json.encode({"Pod": _pod(pod), "Nodes": None, "NodeNames": names}),  # cut from the body
                    msgspec.json.encode({"NodeNames": names, "Pod": _pod(pod)}),  # not last: decoded, then found
                ):
                    again = _parse_canonical(body)
                    assert again is not None
                    assert again.node_names is seen
                    assert again.pod.metadata.name == pod
                    _same(again, _parse_general(body))


def test_recent_candidate_lists_are_bounded_and_the_least_recently_used_goes_first() -> None:
    a, b, c = (msgspec.json.encode(names) for names in _scheduler_lists(3))
    recent = RecentCandidates(_node_names, _check_names, lists=2)
    first_a, first_b = recent.names(msgspec.Raw(a)), recent.names(msgspec.Raw(b))
    assert recent.names(msgspec.Raw(a)) is first_a  # a used last: b goes first
    recent.names(msgspec.Raw(c))
    assert [kept.json for kept in recent.kept()] == [c, a]
    assert recent.names(msgspec.Raw(b)) is not first_b
    # Names and bytes bound what is kept too; the newest list is kept whatever its size.
    by_names = RecentCandidates(
        _node_names, _check_names, names=2 * (len(LONG) - 1) - 1
    )  # each list: every name but one
    for data in (a, b, c):
        by_names.names(msgspec.Raw(data))
    assert [kept.json for kept in by_names.kept()] == [c]
    by_bytes = RecentCandidates(_node_names, _check_names, nbytes=len(a) + len(b))
    for data in (a, b, c):
        by_bytes.names(msgspec.Raw(data))
    assert [kept.json for kept in by_bytes.kept()] == [c, b]
    huge = msgspec.json.encode([f"node-{i:06d}" for i in range(10 * len(LONG))])
    assert by_bytes.names(msgspec.Raw(huge)) is by_bytes.kept()[0]
    assert len(by_bytes.kept()) == 1
    # Through cut_from (the scheduler's key order) the same bounds hold.
    cut = RecentCandidates(_node_names, _check_names, lists=2)
    for data in (a, b, c, a):
        body = b'{"Pod":{},"Nodes":null,"NodeNames":' + data + b"}"
        found = cut.cut_from(body)
        assert found is not None
        assert found[0] == b'{"Pod":{},"Nodes":null,"NodeNames":null}'
        assert found[1].json == data
    assert [kept.json for kept in cut.kept()] == [a, c]


def test_a_long_list_that_is_not_plain_is_decoded() -> None:
    names = [*LONG, "caf\u00e9", 'quote"d']
    encoded = msgspec.json.encode({"Pod": _pod(), "NodeNames": names})
    fast = _parse_canonical(encoded)
    assert fast is not None
    assert isinstance(fast.node_names, list)
    _same(fast, _parse_general(encoded))


def test_every_candidate_passing_echoes_the_list_as_it_came() -> None:
    encoded = msgspec.json.encode({"Pod": _pod(), "NodeNames": LONG})
    args = parse_extender_args(encoded)
    answer = render_filter(args, FilterDecision(passed=args.node_names))
    assert answer == render_filter(args, FilterDecision(passed=list(LONG)))
    assert msgspec.json.decode(answer)["NodeNames"] == LONG


@settings(max_examples=50)
@given(
    st.lists(st.from_regex(r"[a-z0-9][-a-z0-9.]{0,30}", fullmatch=True), min_size=1, max_size=80),
    st.data(),
)
def test_priorities_of_names_read_in_place_render_as_structs_do(names: list[str], data: st.DataObject) -> None:
    scores = np.array(data.draw(st.lists(st.integers(0, 10), min_size=len(names), max_size=len(names))), np.int64)
    in_place = NameList.read(msgspec.json.encode(names))
    assert in_place is not None
    fast = render_priorities(HostScores(in_place, scores))
    assert fast == render_priorities(HostScores(names, scores))
    assert msgspec.json.decode(fast) == [{"Host": n, "Score": int(s)} for n, s in zip(names, scores, strict=True)]


def test_scores_outside_0_to_10_are_still_rendered() -> None:
    in_place = NameList.read(b'["a","b"]')
    assert in_place is not None
    rendered = render_priorities(HostScores(in_place, np.array([11, -1], np.int64)))
    assert msgspec.json.decode(rendered) == [{"Host": "a", "Score": 11}, {"Host": "b", "Score": -1}]


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
