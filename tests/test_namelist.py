"""NameList reads a JSON array of names in place, or declines; it never reads it wrong."""

import msgspec
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from extender.core.namelist import NameList

DNS_LABEL = st.from_regex(r"[a-z0-9]([-a-z0-9]{0,20}[a-z0-9])?(\.[a-z0-9]{1,10})?", fullmatch=True)


@given(st.lists(DNS_LABEL, max_size=60))
def test_node_names_are_read_in_place_and_equal_the_decoded_list(names: list[str]) -> None:
    json = msgspec.json.encode(names)
    read = NameList.read(json)
    assert read is not None
    assert len(read) == len(names)
    assert [read[i] for i in range(len(names))] == names  # one at a time, before any full decode
    assert list(read) == names
    assert read.json is json


@given(st.lists(st.tuples(DNS_LABEL, st.booleans()), max_size=60), st.booleans())
def test_a_selection_is_the_selected_names_read_in_place(picks: list[tuple[str, bool]], twice: bool) -> None:
    names = [name for name, _ in picks]
    read = NameList.read(msgspec.json.encode(names))
    assert read is not None
    mask = np.array([keep for _, keep in picks], dtype=bool)
    for _ in range(2 if twice else 1):  # the second from what the first found
        selected = read.select(mask)
        wanted = [name for name, keep in picks if keep]
        assert msgspec.json.decode(selected.json) == wanted  # the bytes an answer echoes
        assert [selected[i] for i in range(len(wanted))] == wanted  # read one at a time
        assert list(selected) == wanted
        again = NameList.read(selected.json)
        assert again is not None
        assert list(again) == wanted


@given(st.lists(st.text(max_size=8), max_size=12))
def test_any_list_of_strings_is_read_right_or_declined(names: list[str]) -> None:
    read = NameList.read(msgspec.json.encode(names))
    if read is not None:
        assert [read[i] for i in range(len(read))] == names
        assert read.names() == names


@given(st.binary(max_size=40) | st.text(alphabet='[]",ab \\', max_size=30).map(str.encode))
def test_arbitrary_bytes_are_declined_unless_they_are_a_plain_list_of_strings(data: bytes) -> None:
    read = NameList.read(data)
    if read is not None:
        decoded = msgspec.json.decode(data, type=list[str])
        assert [read[i] for i in range(len(read))] == decoded


@pytest.mark.parametrize(
    ("json", "names"),
    [
        (b"[]", []),
        (b'[""]', [""]),
        (b'["",""]', ["", ""]),
        (b'["a"]', ["a"]),
        (b'["a","","b"]', ["a", "", "b"]),
        (b'["a b","c:d"]', ["a b", "c:d"]),
    ],
)
def test_plain_lists_including_empty_names(json: bytes, names: list[str]) -> None:
    read = NameList.read(json)
    assert read is not None
    assert list(read) == names


@pytest.mark.parametrize(
    "json",
    [
        b'["a,b"]',  # a comma inside a name
        b'["a",","]',  # a name that is a comma: quotes shared by two "separators"
        b'["a",",","b"]',
        b'[ "a"]',  # whitespace
        b'["a", "b"]',
        b'["a\\"b"]',  # an escape
        b'["\xc3\xa9"]',  # non-ASCII
        b'["a\x7f"]',
        b'["a",1]',
        b'["a",["b"]]',
        b'[["a","b"]]',
        b'["a",{"b":"c","d":"e"}]',
        b'{"a":"b"}',
        b"null",
        b'"a"',
    ],
)
def test_anything_else_is_left_to_a_decoder(json: bytes) -> None:
    assert NameList.read(json) is None


def test_a_scan_switches_to_one_full_decode_and_keeps_reading_the_same_names() -> None:
    names = [f"node-{i}" for i in range(500)]
    read = NameList.read(msgspec.json.encode(names))
    assert read is not None
    assert [read[i] for i in range(500)] == names
    assert read[-1] == "node-499"
    assert read[10:13] == names[10:13]
    with pytest.raises(IndexError):
        read[500]


def test_equality_with_other_sequences() -> None:
    read = NameList.read(b'["a","b"]')
    assert read == ["a", "b"]
    assert read == NameList.read(b'["a","b"]')
    assert read != ["a"]
    assert read != "ab"
