"""One page size's book of accounts: what the decisions read of that size, node by node.

``ClusterState`` keeps the nodes, the pods, who waits and whether it is ready, once; it keeps one
``SizeBook`` per hugepage size guarded, keyed by resource name. A book keeps what differs by size:
the pages pods use on each node, the holds of placements in flight (their pages of this size, and
their CPU), the node agents' records of this size, and from those the accounts, their headroom and
their numpy columns. Every change rebuilds only the accounts of the nodes it touches.
"""

from __future__ import annotations

from collections import ChainMap, defaultdict
from collections.abc import Callable, Container, Iterable, Mapping
from typing import cast

import msgspec

from extender.core.capacity import NodeAccount, headroom_bytes
from extender.core.columns import NodeColumns
from extender.core.holds import Hold, HoldLedger
from extender.core.nodereport import PoolReport, ReportError
from extender.core.policy import Policy
from extender.state.nodeinputs import NodeCapacity, SizePool
from extender.state.reports import NodeReports, ReportView

_NO_POOL = SizePool(0, 0)


class SizeBook:
    """The accounts of one page size (``resource_name``), over the nodes and CPU the state shares."""

    def __init__(
        self,
        resource_name: str,
        page_size: int,
        nodes: Mapping[str, NodeCapacity],
        used_cpu: Mapping[str, int],
        reports: NodeReports,
    ) -> None:
        self.resource_name = resource_name
        self.page_size = page_size
        self._nodes = nodes  # the state's, shared: every book counts the same nodes
        self._used_cpu = used_cpu  # the state's, shared: CPU requested by bound pods, per node
        self.reports = reports
        self.accounts: dict[str, NodeAccount] = {}
        self.headroom: dict[str, int] = {}  # capacity.headroom_bytes of every account
        # The accounts again, as numpy columns for decisions over many nodes.
        self._columns = NodeColumns(before_read=self._refresh_columns)
        self._stale_columns: set[str] = set()  # accounts changed since the columns last saw them
        self._stale_holds: set[str] = set()  # accounts whose holds alone changed since then
        # Nodes whose headroom rose since the last ``take_freed``, each with its headroom before
        # that first rise: room freed, which the scheduler may not know of (docs/design.md, "Requeue").
        self._raised: dict[str, int] = {}
        self.used_pages: defaultdict[str, int] = defaultdict(int)
        self.ledger = HoldLedger()

    # -- what decisions and diagnostics read ---------------------------------

    @property
    def columns(self) -> NodeColumns:
        """The accounts as numpy columns, brought up to date when a column is read: only
        decisions over many nodes read them, while every hold and every pod event changes
        accounts."""
        return self._columns

    def _refresh_columns(self) -> None:
        stale, holds = self._stale_columns, self._stale_holds
        if not (stale or holds):
            return
        accounts, columns = self.accounts, self._columns
        for name in stale:
            account = accounts.get(name)
            if account is not None:
                columns.put(name, account)
        if holds:
            headroom = self.headroom
            for name in holds:  # only what a hold changes is written (SizeBook.refresh_holds)
                account = accounts.get(name)
                if account is not None and name not in stale and not columns.put_held(name, account, headroom[name]):
                    columns.put(name, account)
            holds.clear()
        stale.clear()

    def holds(self) -> dict[str, Hold]:
        return self.ledger.holds()

    @property
    def hold_count(self) -> int:
        return len(self.ledger)

    def view_for(self, policy: Policy) -> tuple[Mapping[str, NodeAccount], Mapping[str, int], bool]:
        """The accounts (and headroom) as a namespace whose ``nodeReportMaxAgeSeconds`` differs from
        the defaults' sees them, and whether they differ. O(records) for such namespaces only."""
        if not self.reports:
            return self.accounts, self.headroom, False
        overlay = {
            name: self._account(name, fresh=fresh)
            for name, fresh in self.reports.differing(policy.node_report_max_age_seconds)
            if name in self._nodes
        }
        if not overlay:
            return self.accounts, self.headroom, False
        room = {name: headroom_bytes(account) for name, account in overlay.items()}
        return ChainMap(overlay, self.accounts), ChainMap(room, self.headroom), True

    def accounts_without(
        self, uid: str, accounts: Mapping[str, NodeAccount] | None = None
    ) -> Mapping[str, NodeAccount]:
        """The accounts (default: the book's) as the pod ``uid`` should see them: without its own hold."""
        return self.accounts_without_holds((uid,), accounts)

    def accounts_without_holds(
        self, uids: Iterable[str], accounts: Mapping[str, NodeAccount] | None = None
    ) -> Mapping[str, NodeAccount]:
        """The accounts (default: the book's) without the holds of ``uids`` (``accounts`` itself when none holds)."""
        base = self.accounts if accounts is None else accounts
        own: dict[str, NodeAccount] = {}
        for uid in uids:
            hold = self.ledger.hold_of(uid)
            if hold is None:
                continue
            for node in hold.nodes:
                account = own.get(node) or base.get(node)
                if account is not None:
                    own[node] = msgspec.structs.replace(
                        account,
                        held_bytes=account.held_bytes - hold.hugepage_bytes,
                        held_cpu_millis=account.held_cpu_millis - hold.cpu_millis,
                    )
        return ChainMap(own, cast("dict[str, NodeAccount]", base)) if own else base  # read, never written

    def report_view(self, name: str, max_age: float | None = None) -> ReportView:
        return self.reports.view(name, max_age)

    def report_counts(self) -> dict[str, int]:
        """Nodes by the state of their record, under the defaults' max age. ``none`` counts only the
        nodes whose pages held outside pods nobody states: a pool, no record, no annotation (a node
        without a pool has nothing to hold; an annotated one is stated by hand). O(nodes), per scrape."""
        unstated = sum(
            1
            for name, capacity in self._nodes.items()
            if (pool := self.pool_of(capacity)).total_pages > 0 and not pool.annotated and not self.reports.stated(name)
        )
        return self.reports.counts(self._nodes, unstated)

    def take_freed(self, least_need: Callable[[], int]) -> bool:
        """Whether some node has more room than when last asked, and now at least ``least_need()``
        bytes; and start afresh (``ClusterState.take_freed``)."""
        raised, self._raised = self._raised, {}
        headroom = self.headroom
        rose = [room for name, before in raised.items() if (room := headroom.get(name, -1)) > before]
        return bool(rose) and max(rose) >= least_need()

    def pool_of(self, capacity: NodeCapacity) -> SizePool:
        """A node's pool of this size: none when the Node has none."""
        return capacity.pools.get(self.resource_name, _NO_POOL)

    # -- changes: each rebuilds the accounts it touches ------------------------

    def apply_report(self, name: str, report: PoolReport | None, error: ReportError | None) -> None:
        self.refresh(self.reports.apply(name, report, error))

    def hold(self, uid: str, hold: Hold) -> None:
        self.refresh_holds(self.ledger.hold(uid, hold))

    def release(self, uid: str) -> None:
        self.refresh_holds(self.ledger.release(uid))

    def expire_holds(self, now: float) -> None:
        self.refresh_holds(self.ledger.expire(now))

    def remove_node(self, name: str) -> None:
        self.accounts.pop(name, None)
        self.headroom.pop(name, None)
        self._columns.drop(name)

    def replace_used(self, used: Iterable[tuple[str, int]], *, bound: Container[str]) -> None:
        """A relist of pods: the pages of this size they use, (node, pages) each; the holds of the pods
        now ``bound`` end."""
        self.used_pages.clear()
        for node, pages in used:
            self.used_pages[node] += pages
        for uid in [uid for uid in self.ledger.holds() if uid in bound]:
            self.ledger.release(uid)
        self.rebuild()

    def rebuild(self) -> None:
        """Every account anew (a relist)."""
        before = self.headroom
        self.accounts = {name: self._account(name) for name in self._nodes}
        self.headroom = {name: headroom_bytes(account) for name, account in self.accounts.items()}
        for name, room in self.headroom.items():
            if room > (old := before.get(name, -1)):
                self._raised.setdefault(name, old)
        self._stale_columns.clear()
        self._stale_holds.clear()
        self._columns.clear()
        for name, account in self.accounts.items():
            self._columns.put(name, account)

    def refresh(self, names: Iterable[str]) -> None:
        headroom = self.headroom
        for name in names:
            if name in self._nodes:
                account = self._account(name)
                self.accounts[name] = account
                room = headroom_bytes(account)
                if room > (old := headroom.get(name, -1)):
                    self._raised.setdefault(name, old)
                headroom[name] = room
                self._stale_columns.add(name)

    def refresh_holds(self, names: Iterable[str]) -> None:
        """``refresh`` after a change of holds alone (a hold placed, released or expired), which is most
        of a filter's own work on the state: only the accounts' held bytes and CPU change. Every other
        change to a node rebuilds its account (``refresh``), so every other field is already what
        ``_account`` would give: the account is the same with its held figures replaced, and the
        columns rewrite only what holds change (``NodeColumns.put_held``). O(nodes touched), a few
        attribute reads each. ``tests/test_properties.py`` holds the state to a rebuild of every account
        and a fresh table after any sequence of changes."""
        accounts, headroom, held_on, raised = self.accounts, self.headroom, self.ledger.held_on, self._raised
        stale = self._stale_holds
        for name in names:
            account = accounts.get(name)  # the accounts' names are the nodes'
            if account is None:
                continue
            held_bytes, held_cpu = held_on(name)
            account = msgspec.structs.replace(account, held_bytes=held_bytes, held_cpu_millis=held_cpu)
            accounts[name] = account
            room = headroom_bytes(account)
            if room > (old := headroom.get(name, -1)):
                raised.setdefault(name, old)
            headroom[name] = room
            stale.add(name)

    def _account(self, name: str, *, fresh: bool | None = None) -> NodeAccount:
        capacity = self._nodes[name]
        pool = self.pool_of(capacity)
        held_bytes, held_cpu = self.ledger.held_on(name)
        used = self.used_pages.get(name, 0)
        total, outside, numa_free = pool.total_pages, pool.outside_pods_pages, -1
        report = self.reports.used(name, fresh=fresh)
        if report is not None:
            total, outside, numa_free = _with_report(pool, report, used)
        return NodeAccount(
            page_size=self.page_size,
            total_pages=total,
            used_pages=used,
            outside_pods_pages=outside,
            numa_free_pages=numa_free,
            held_bytes=held_bytes,
            cpu_millis=capacity.cpu_millis,
            cpu_requested_millis=self._used_cpu.get(name, 0),
            held_cpu_millis=held_cpu,
        )


def _with_report(pool: SizePool, report: PoolReport, used_pages: int) -> tuple[int, int, int]:
    """(pool, pages held outside pods, best NUMA node's free pages) from a fresh record.

    Pods can use at most min(allocatable, kernel total - outside) pages: the kubelet admits up to
    allocatable, the kernel has what is not held outside pods. As an account, pool = min(allocatable,
    kernel total) and outside = what the kubelet does not already keep out of allocatable (its
    reserved hugepages are where system daemons belong): outside - (kernel total - pool), floored.
    A NUMA node's free pages lose the kernel's unfaulted holds (it does not say whose) and the
    pages pods requested but do not hold yet (just bound, not started)."""
    total = min(pool.total_pages, report.total_pages)
    if pool.annotated:
        outside = pool.outside_pods_pages
    elif report.outside_pages is not None:
        outside = max(0, report.outside_pages - (report.total_pages - total))
    else:
        outside = 0
    numa_free = -1
    if report.numa_free_pages:
        not_yet_held = max(0, used_pages - report.pod_pages) if report.pod_pages is not None else used_pages
        numa_free = max(0, max(report.numa_free_pages) - report.reserved_pages - not_yet_held)
    return total, outside, numa_free
