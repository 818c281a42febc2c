"""A JSON array of node names, read in place: a name is decoded only when it is read.

kube-scheduler sends every feasible node's name with each pod: 5,000 names,
65 KB, at 5,000 nodes. A best-of-K filter reads K of them, yet decoding all
5,000 into strings (and freeing them after the answer) costs more than the
rest of the decision. One vectorised pass over the bytes finds where each
name sits instead, and an answer that passes every candidate echoes the bytes
as they came.

Only the plain form is read in place: compact (as Go's encoder writes it),
printable ASCII, no escapes, which every valid node name is (a DNS subdomain).
Anything else is left to a JSON decoder.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import overload

import msgspec
import numpy as np
import numpy.typing as npt

_QUOTE, _COMMA, _SPACE, _DEL = ord('"'), ord(","), ord(" "), 0x7F
_decoder = msgspec.json.Decoder(list[str])


def _printable_array_bytes(json: bytes) -> npt.NDArray[np.uint8] | None:
    """``json``'s bytes when it is shaped ``["...",...]`` in printable ASCII without escapes, else None."""
    if len(json) < 4 or json[:2] != b'["' or json[-2:] != b'"]' or b"\\" in json:
        return None
    data = np.frombuffer(json, np.uint8)
    if data.min() < _SPACE or data.max() >= _DEL:
        return None
    return data


def _commas_are_separators(quotes: npt.NDArray[np.bool_], commas: npt.NDArray[np.intp]) -> bool:
    """Whether every comma is a separator ``","`` of its own and there is no other quote (``quotes``
    marks each byte of the array that is a quote, ``commas`` are the offsets of its commas)."""
    size = len(quotes)
    if np.count_nonzero(quotes) != 2 * len(commas) + 2:
        return False
    return not len(commas) or bool(
        commas[0] >= 3  # the opening quote is not the first separator's
        and commas[-1] <= size - 4  # nor the closing one the last separator's
        and (len(commas) == 1 or np.diff(commas).min() >= 3)  # no quote shared by two
        and quotes[commas - 1].all()
        and quotes[commas + 1].all()
    )


class NameList(Sequence[str]):
    """An immutable sequence of the names in ``json``; ``json`` is kept and may be echoed."""

    __slots__ = ("_array", "_commas", "_distinct", "_lengths", "_names", "_reads", "json", "memo")

    def __init__(self, json: bytes, commas: npt.NDArray[np.intp]) -> None:
        self.json = json
        self._commas = commas  # the separators' commas: name i ends at the quote before comma i
        self._names: list[str] | None = None
        self._array: npt.NDArray[np.object_] | None = None
        self._distinct: bool | None = None
        self._lengths: npt.NDArray[np.intp] | None = None  # each name's bytes, for select()
        self._reads = 0
        # What a reader derived from these names (the columns' slots), kept with the list:
        # as long as the list is kept, and no longer.
        self.memo: object = None

    @classmethod
    def read(cls, json: bytes) -> NameList | None:
        """The names in ``json``, or None when it is not a plain array of names.

        Plain: ``["a","b",...]`` with no whitespace, escapes or characters outside
        printable ASCII. Checked whole, so that what is read in place is a valid
        JSON array of strings: every comma is a separator ``","`` of its own (no
        quote shared by two) and there is no other quote, so the commas alone say
        where each name starts and ends.
        """
        if json == b"[]":
            return cls(json, np.zeros(0, np.intp))
        data = _printable_array_bytes(json)
        if data is None:
            return None
        quotes = data == _QUOTE
        commas = (data == _COMMA).nonzero()[0]
        if not _commas_are_separators(quotes, commas):
            return None
        return cls(json, commas)

    def nbytes(self) -> int:
        """About what the list holds in memory: its bytes and arrays, and once decoded each name's
        string (49 bytes and its characters) with its slot, and the slots readers found (``memo``:
        an array of them per table, in a tuple)."""
        count = len(self)
        size = len(self.json) + self._commas.nbytes
        if self._names is not None:
            size += len(self.json) + 57 * count
        for array in (self._array, self._lengths):
            if array is not None:
                size += array.nbytes
        memo = self.memo
        if memo is not None:
            size += 8 * count * (len(memo) if isinstance(memo, tuple) else 1)
        return size

    def __len__(self) -> int:
        return len(self._commas) + 1 if len(self.json) > 2 else 0

    @overload
    def __getitem__(self, index: int) -> str: ...

    @overload
    def __getitem__(self, index: slice) -> list[str]: ...

    def __getitem__(self, index: int | slice) -> str | list[str]:
        if self._names is not None or isinstance(index, slice):
            return self.names()[index]
        self._reads += 1
        if self._reads > 64:
            # A scan is under way (a widened best-of-K): one pass decodes the rest for less.
            return self.names()[index]
        count = len(self)
        if not -count <= index < count:
            raise IndexError("NameList index out of range")
        index %= count
        commas = self._commas
        start = 2 if index == 0 else int(commas[index - 1]) + 2
        end = len(self.json) - 2 if index == count - 1 else int(commas[index]) - 1
        return self.json[start:end].decode("ascii")

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def names(self) -> list[str]:
        """Every name, decoded once in one pass (do not modify the list)."""
        if self._names is None:
            self._names = _decoder.decode(self.json)
        return self._names

    def array(self) -> npt.NDArray[np.object_]:
        """Every name in a numpy object array, built once: a mask over the candidates
        selects names without a Python loop (do not modify it)."""
        if self._array is None:
            self._array = np.array(self.names(), dtype=object)
        return self._array

    def select(self, mask: npt.NDArray[np.bool_]) -> NameList:
        """The names where ``mask`` is true, in order, as a list read in place: its JSON is cut
        from this one's bytes (each name with its quotes and comma), so an answer passing most of
        a long list writes it without encoding thousands of strings."""
        json = self.json
        count = len(self)
        if not count or not mask.any():
            return NameList(b"[]", np.zeros(0, np.intp))
        if self._lengths is None:
            # Name i with its quotes and the comma after it (the last has none), from byte 1 on.
            ends = np.empty(count, np.intp)
            ends[:-1] = self._commas + 1
            ends[-1] = len(json) - 1
            self._lengths = np.diff(ends, prepend=1)
        lengths = self._lengths
        cut = np.frombuffer(json, np.uint8)[1:-1][np.repeat(mask, lengths)].tobytes()
        if cut.endswith(b","):
            cut = cut[:-1]
        # Each kept name but the last is followed by its comma: the commas of the new list.
        new_commas = np.cumsum(lengths[mask])[:-1]  # offsets past each comma, less the "[" before
        return NameList(b"[" + cut + b"]", new_commas)

    def distinct(self) -> bool:
        """Whether no name is given twice (as the scheduler sends them); found once."""
        if self._distinct is None:
            self._distinct = len(set(self.names())) == len(self)
        return self._distinct

    def __eq__(self, other: object) -> bool:
        if isinstance(other, NameList):
            return self.json == other.json
        return isinstance(other, list | tuple) and self.names() == list(other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"NameList({len(self)} names)"
