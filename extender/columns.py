"""Node accounts laid out as numpy columns, for scoring or admitting thousands of nodes at once.

A mirror of the cluster state's ``NodeAccount`` values, brought up to date by
the state when read (O(1) per node changed since). Slot 0 stands for every node the
extender does not know: no pool and no CPUs, as ``NO_POOL_ACCOUNT``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from operator import itemgetter

import numpy as np
import numpy.typing as npt

from extender.capacity import UNBOUNDED, NodeAccount, ceiling_bytes, headroom_bytes
from extender.namelist import NameList

IntColumn = npt.NDArray[np.int64]
INT64_MAX = (1 << 63) - 1

_FIELDS = (
    "page_size",
    "total_pages",
    "committed_pages",
    "held_pages",
    "used_pages",
    "cpu_millis",
    "cpu_busy_millis",
    "headroom",  # capacity.headroom_bytes
    "ceiling",  # capacity.ceiling_bytes
)


class NodeColumns:
    def __init__(self, capacity: int = 1024) -> None:
        self._slot: dict[str, int] = {}
        self._free: list[int] = []
        self._size = 1  # slot 0: the unknown node
        self._columns: dict[str, IntColumn] = {f: np.zeros(capacity, dtype=np.int64) for f in _FIELDS}
        self._columns["headroom"][0] = UNBOUNDED  # an unknown node is admitted, as one without a pool
        self._columns["ceiling"][0] = UNBOUNDED
        self._layout = 0  # changes whenever a name gets or loses a slot

    def __len__(self) -> int:
        return len(self._slot)

    def column(self, field: str) -> IntColumn:
        return self._columns[field]

    def put(self, name: str, account: NodeAccount) -> None:
        slot = self._slot.get(name)
        if slot is None:
            slot = self._free.pop() if self._free else self._grow()
            self._slot[name] = slot
            self._layout += 1
        c = self._columns
        c["page_size"][slot] = _int64(account.page_size)
        c["total_pages"][slot] = _int64(account.total_pages)
        c["committed_pages"][slot] = _int64(account.committed_pages)
        c["held_pages"][slot] = _int64(account.held_pages)
        c["used_pages"][slot] = _int64(account.used_pages)
        c["cpu_millis"][slot] = _int64(account.cpu_millis)
        c["cpu_busy_millis"][slot] = _int64(account.cpu_requested_millis + account.held_cpu_millis)
        c["headroom"][slot] = _int64(headroom_bytes(account))
        c["ceiling"][slot] = _int64(ceiling_bytes(account))

    def drop(self, name: str) -> None:
        slot = self._slot.pop(name, None)
        if slot is not None:
            for column in self._columns.values():
                column[slot] = 0
            self._free.append(slot)
            self._layout += 1

    def clear(self) -> None:
        layout = self._layout
        self.__init__(len(self._columns["page_size"]))  # type: ignore[misc]
        self._layout = layout + 1

    def slots(self, names: Sequence[str]) -> npt.NDArray[np.intp]:
        """Each name's slot, 0 for unknown names (read-only).

        The slots of a ``NameList`` are kept with it (``NameList.memo``): the same
        immutable list comes back while a scheduler's feasible set stays the same
        (the wire keeps one per scheduler), and mapping 5,000 names again would
        cost more than scoring them.
        """
        in_place = names if isinstance(names, NameList) else None
        if in_place is not None:
            memo = in_place.memo
            if isinstance(memo, _Slots) and memo.columns is self and memo.layout == self._layout:
                return memo.slots
        found = self._lookup(names)
        found.flags.writeable = False
        if in_place is not None:
            in_place.memo = _Slots(self, self._layout, found)
        return found

    def _lookup(self, names: Sequence[str]) -> npt.NDArray[np.intp]:
        """A C-speed lookup when every name is known."""
        if not names:
            return np.zeros(0, dtype=np.intp)
        try:
            found = itemgetter(*names)(self._slot)
        except KeyError:
            get = self._slot.get
            return np.fromiter((get(n, 0) for n in names), dtype=np.intp, count=len(names))
        return np.fromiter(found if len(names) > 1 else (found,), dtype=np.intp, count=len(names))

    def _grow(self) -> int:
        slot = self._size
        self._size += 1
        if slot >= len(self._columns["page_size"]):
            for field, column in self._columns.items():
                grown = np.zeros(len(column) * 2, dtype=np.int64)
                grown[: len(column)] = column
                self._columns[field] = grown
        return slot


@dataclass(frozen=True, slots=True)
class _Slots:
    """The slots ``columns`` found for a name list, valid while its layout is ``layout``."""

    columns: NodeColumns
    layout: int
    slots: npt.NDArray[np.intp]


def _int64(value: int) -> int:
    """Quantities no node has (over 9e18 bytes, pages or millicores) held at int64's limit:
    an odd object must not make the columns unwritable. Callers with values this large
    decide on the accounts instead."""
    return max(-INT64_MAX, min(value, INT64_MAX))
