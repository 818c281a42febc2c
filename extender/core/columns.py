"""Node accounts laid out as numpy columns, for scoring or admitting thousands of nodes at once.

A mirror of the cluster state's ``NodeAccount`` values, brought up to date by
the state when read (O(1) per node changed since). Slot 0 stands for every node the
extender does not know: no pool and no CPUs, as ``UNKNOWN_ACCOUNT``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from operator import itemgetter

import numpy as np
import numpy.typing as npt

from extender.core.capacity import UNBOUNDED, NodeAccount, ceiling_bytes, headroom_bytes
from extender.core.namelist import NameList

IntColumn = npt.NDArray[np.int64]
IntTable = npt.NDArray[np.int64]  # one row per field, one column per slot
INT64_MAX = (1 << 63) - 1
KEPT_TABLES = 4  # tables whose slots a name list keeps: one per page size guarded, and to spare

FIELDS = (
    "page_size",
    "total_pages",
    "committed_pages",
    "held_pages",
    "used_pages",
    "cpu_millis",
    "cpu_busy_millis",
    "headroom",  # capacity.headroom_bytes
    "ceiling",  # capacity.ceiling_bytes
)  # put() writes a node's values in this order
_ROW = {field: row for row, field in enumerate(FIELDS)}
_HELD_PAGES, _CPU_BUSY, _HEADROOM = _ROW["held_pages"], _ROW["cpu_busy_millis"], _ROW["headroom"]


class NodeColumns:
    def __init__(self, capacity: int = 1024, before_read: Callable[[], None] = lambda: None) -> None:
        # Called before any column or slot is read: the owner brings changed nodes up to date
        # then, so that only decisions that read the columns pay for keeping them.
        self._before_read = before_read
        self._slot: dict[str, int] = {}
        self._free: list[int] = []
        self._size = 1  # slot 0: the unknown node
        # One row per field: a node's values are written in one assignment (a column per field
        # took nine, about 9 us per node changed).
        self._table: IntTable = np.zeros((len(FIELDS), capacity), dtype=np.int64)
        self._table[_ROW["headroom"], 0] = UNBOUNDED  # an unknown node is admitted, unlike one without a pool
        self._table[_ROW["ceiling"], 0] = UNBOUNDED
        self._layout = 0  # changes whenever a name gets or loses a slot

    def __len__(self) -> int:
        return len(self._slot)

    def column(self, field: str) -> IntColumn:
        self._before_read()
        row: IntColumn = self._table[_ROW[field]]
        return row

    def put(self, name: str, account: NodeAccount) -> None:
        slot = self._slot.get(name)
        if slot is None:
            slot = self._free.pop() if self._free else self._grow()
            self._slot[name] = slot
            self._layout += 1
        page, used = account.page_size, account.used_pages
        values = (
            page,
            account.total_pages,
            used + account.outside_pods_pages,  # committed_pages
            -(account.held_bytes // -page) if page > 0 else 0,  # held_pages (capacity.hugepages_for)
            used,
            account.cpu_millis,
            account.cpu_requested_millis + account.held_cpu_millis,
            headroom_bytes(account),
            ceiling_bytes(account),
        )
        try:
            self._table[:, slot] = values
        except OverflowError:  # a value beyond int64 (see _int64): clamped, only then
            self._table[:, slot] = [_int64(value) for value in values]

    def put_held(self, name: str, account: NodeAccount, headroom: int) -> bool:
        """``put`` for an account whose holds alone changed since it was put (a hold placed, released
        or expired): only its held pages, CPU in flight and ``headroom`` (``headroom_bytes`` of it)
        are written, the other fields being what they were. False, writing nothing, when the node
        has no slot yet (``put`` it whole)."""
        slot = self._slot.get(name)
        if slot is None:
            return False
        page = account.page_size
        table = self._table
        try:
            table[_HELD_PAGES, slot] = -(account.held_bytes // -page) if page > 0 else 0
            table[_CPU_BUSY, slot] = account.cpu_requested_millis + account.held_cpu_millis
            table[_HEADROOM, slot] = headroom
        except OverflowError:  # a value beyond int64: the whole row, clamped
            self.put(name, account)
        return True

    def drop(self, name: str) -> None:
        slot = self._slot.pop(name, None)
        if slot is not None:
            self._table[:, slot] = 0
            self._free.append(slot)
            self._layout += 1

    def clear(self) -> None:
        layout = self._layout
        self.__init__(self._table.shape[1], self._before_read)  # type: ignore[misc]
        self._layout = layout + 1

    def slots(self, names: Sequence[str]) -> npt.NDArray[np.intp]:
        """Each name's slot, 0 for unknown names (read-only).

        The slots of a ``NameList`` are kept with it (``NameList.memo``): the same
        immutable list comes back while a scheduler's feasible set stays the same
        (the wire keeps one per scheduler), and mapping 5,000 names again would
        cost more than scoring them. Each table's slots are kept (at most
        ``KEPT_TABLES``): with several page sizes guarded, each size's columns read
        the same list, and a pod asking two sizes must not evict the slots the next
        pod asking one reads.
        """
        self._before_read()
        in_place = names if isinstance(names, NameList) else None
        kept: tuple[_Slots, ...] = ()
        if in_place is not None:
            memo = in_place.memo
            if isinstance(memo, tuple):
                kept = memo
                for entry in kept:
                    if entry.columns is self and entry.layout == self._layout:
                        return entry.slots
        found = self._lookup(names)
        found.flags.writeable = False
        if in_place is not None:
            others = tuple(entry for entry in kept if entry.columns is not self)
            in_place.memo = (*others[-(KEPT_TABLES - 1) :], _Slots(self, self._layout, found))
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
        if slot >= self._table.shape[1]:
            grown = np.zeros((len(FIELDS), self._table.shape[1] * 2), dtype=np.int64)
            grown[:, : self._table.shape[1]] = self._table
            self._table = grown
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
