"""The last few long NodeNames lists the scheduler sent, read in place and kept by their exact bytes
(``wire`` reads every NodeNames list through them).

Pure: no I/O; the event loop is the only caller.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import msgspec

from extender.core.namelist import NameList

SMALL_CANDIDATE_LIST = 4096  # bytes of NodeNames below which a list is decoded, never kept

# What the recent long NodeNames lists may hold at once (the newest is always kept, as large
# as maxRequestBytes allows, while the server's budget has room for it: ``recent_candidate_bytes``,
# ``drop_recent_candidates``): one list per scheduler sharing this extender, for up to 8 of them
# at 15,000 nodes. A kept list costs about 100 bytes a name once its names are decoded and its
# slots found (its bytes, each name's string, two arrays): 4 MiB for 8 lists of 5,000 names, and
# at most about 20 MiB beside the newest whatever the requests bring.
RECENT_CANDIDATE_LISTS = 8
RECENT_CANDIDATE_NAMES = 120_000
RECENT_CANDIDATE_BYTES = 4 * 1024 * 1024


class RecentCandidates:
    """The last few long NodeNames lists, read in place and kept by their exact bytes.

    kube-scheduler sends every feasible node's name with each pod, so while
    the feasible set stays the same, its consecutive requests carry the same
    bytes: comparing them costs a few microseconds, and the same immutable
    ``NameList`` (with whatever it has decoded, and the slots the columns
    found for it) serves again. Several schedulers sharing the extender each
    send lists of their own, interleaved: a few lists are kept, the most
    recently used first, so that each scheduler's list is found again. The
    event loop is the only caller: no lock.
    """

    _KEY = b'"NodeNames":'

    def __init__(
        self,
        decoder: msgspec.json.Decoder[list[str] | None],
        check: Callable[[bytes | msgspec.Raw], None],
        lists: int = RECENT_CANDIDATE_LISTS,
        names: int = RECENT_CANDIDATE_NAMES,
        nbytes: int = RECENT_CANDIDATE_BYTES,
    ) -> None:
        self._decoder = decoder  # a list not read in place (short, or with escapes) is decoded
        self._check = check  # before a list is read or decoded: the wire's bound on its names
        self._limits = (lists, names, nbytes)
        self._kept: list[NameList] = []  # most recently used first

    def kept(self) -> list[NameList]:
        """The lists kept, most recently used first (for tests)."""
        return list(self._kept)

    def nbytes(self) -> int:
        """About what the kept lists hold in memory."""
        return sum(names.nbytes() for names in self._kept)

    def drop(self) -> None:
        self._kept.clear()

    def names(self, raw: msgspec.Raw) -> Sequence[str] | None:
        """The names in ``raw`` (None for a JSON null); DecodeError if it is not a list of strings."""
        self._check(raw)
        if len(raw) < SMALL_CANDIDATE_LIST:
            # Short lists (prioritize after a best-of-K filter) decode in no time and would
            # only evict the long ones the next filters bring again.
            names: list[str] | None = self._decoder.decode(raw)
            return names
        data = bytes(raw)
        for at, kept in enumerate(self._kept):
            if data == kept.json:
                return self._use(at)
        in_place = self._read(data)
        if in_place is None:
            return self._decoder.decode(data)  # escapes, spaces, non-ASCII: not read in place
        return in_place

    def cut_from(self, body: bytes) -> tuple[bytes, NameList] | None:
        """``body`` with ``null`` in place of its NodeNames list, and that list read in
        place, when the list comes last (as the scheduler writes it) and is long and plain.

        Decoding what is left skips 65 KB of names at 5,000 nodes. ``NameList.read``
        proves the list one complete, valid JSON value, so the body with ``null`` in its
        place is valid exactly when the body is, and decodes to the same pod and keys
        (a ``"NodeNames":`` inside a string would leave that string open).
        """
        key = self._KEY
        for at, kept in enumerate(self._kept):
            # The body ends with the key, the list and "}": compared in place (no copy of the tail),
            # memcmp from the list's first byte: lists that differ mostly differ early.
            start = len(body) - 1 - len(kept.json)
            if (
                start >= len(key)
                and body.startswith(kept.json, start)
                and body.startswith(key, start - len(key))
                and body.endswith(b"}")
            ):
                return body[: start - len(key)] + key + b"null}", self._use(at)
        at = body.rfind(self._KEY)
        if at < 0 or len(body) - at < SMALL_CANDIDATE_LIST or not body.endswith(b"]}"):
            return None
        names = body[at + len(self._KEY) : -1]
        self._check(names)
        in_place = self._read(names)
        if in_place is None:
            return None
        return body[:at] + self._KEY + b"null}", in_place

    def _use(self, at: int) -> NameList:
        entry = self._kept[at]
        if at:
            del self._kept[at]
            self._kept.insert(0, entry)
        return entry

    def _read(self, data: bytes) -> NameList | None:
        """``data`` read in place and kept first; None when it is not a plain list."""
        in_place = NameList.read(data)
        if in_place is None:
            return None
        kept = self._kept
        kept.insert(0, in_place)
        lists, names, nbytes = self._limits
        # The least recently used go first, until the rest is within every bound; the newest stays.
        while len(kept) > 1 and (
            len(kept) > lists or sum(len(n) for n in kept) > names or sum(len(n.json) for n in kept) > nbytes
        ):
            kept.pop()
        return in_place
