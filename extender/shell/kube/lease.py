"""A watch of one Lease, the scheduler's leader Lease (``serve --leader-lease NAMESPACE/NAME``): the
extender lifts scheduling gates only while the scheduler beside it holds it (``extender.core.leadership``).

The list and the watch name the Lease by ``fieldSelector=metadata.name=NAME``, so RBAC may grant
``get``, ``list`` and ``watch`` on that one name (``resourceNames``) and nothing else of the namespace.
The watch runs in a daemon thread through the reflector (``extender.shell.kube.reflector``); the Lease as last
seen is kept on the event loop, and each lift round asks ``turn()`` with this process's clock.
"""

from __future__ import annotations

import asyncio
import functools
import threading
import time
from collections.abc import Callable
from datetime import datetime

import msgspec
from kubernetes import client

from extender.core.leadership import LeaseRecord, LiftTurn, lift_turn
from extender.shell.kube.reflector import Handlers, Reflector, Resource


class _Meta(msgspec.Struct):
    name: str = ""


class _LeaseSpec(msgspec.Struct, rename="camel"):
    holder_identity: str | None = None
    renew_time: datetime | None = None
    lease_duration_seconds: int | None = None


class LeaseObject(msgspec.Struct):
    metadata: _Meta = msgspec.field(default_factory=_Meta)
    spec: _LeaseSpec = msgspec.field(default_factory=_LeaseSpec)


def lease_record(lease: LeaseObject) -> LeaseRecord:
    spec = lease.spec
    renewed = spec.renew_time.timestamp() if spec.renew_time is not None else None
    return LeaseRecord(spec.holder_identity or "", renewed, spec.lease_duration_seconds)


def split_lease_name(text: str) -> tuple[str, str]:
    """``NAMESPACE/NAME`` of ``--leader-lease``."""
    namespace, separator, name = text.partition("/")
    if not separator or not namespace or not name or "/" in name:
        raise ValueError(f"{text!r} is not NAMESPACE/NAME")
    return namespace, name


class LeaseWatch:
    """The leader Lease as last seen, and whether this host's extender lifts by it."""

    def __init__(
        self,
        api: client.ApiClient,
        namespace: str,
        name: str,
        *,
        hostname: str,
        watch_timeout_seconds: int = 300,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.where = f"{namespace}/{name}"
        self._hostname = hostname
        self._clock = clock
        self._lease: LeaseRecord | None = None
        self._read = False
        self._stop = threading.Event()
        list_lease = functools.partial(client.CoordinationV1Api(api).list_namespaced_lease, namespace)
        self._resource: Resource[LeaseObject, LeaseRecord] = Resource(
            f"lease {self.where}", list_lease, LeaseObject, lease_record, f"metadata.name={name}"
        )
        self._watch_timeout = watch_timeout_seconds

    def turn(self) -> LiftTurn:
        """Whether this extender lifts now (on the event loop)."""
        return lift_turn(self._lease, read=self._read, hostname=self._hostname, now=self._clock())

    def start(self, loop: asyncio.AbstractEventLoop) -> Reflector[LeaseObject, LeaseRecord]:
        """Start the watch thread; its reflector, for the watch metrics."""

        def post(callback: Callable[[], None]) -> None:
            loop.call_soon_threadsafe(callback)

        reflector = Reflector(
            self._resource,
            Handlers(self._listed, self._upserted, self._deleted),
            post,
            stop=self._stop,
            watch_timeout_seconds=self._watch_timeout,
        )
        threading.Thread(target=reflector.run, name="watch-leader-lease", daemon=True).start()
        return reflector

    def stop(self) -> None:
        self._stop.set()

    # -- on the event loop

    def _listed(self, records: list[LeaseRecord]) -> None:
        self._lease = records[0] if records else None
        self._read = True

    def _upserted(self, record: LeaseRecord) -> None:
        self._lease = record

    def _deleted(self, record: LeaseRecord) -> None:
        self._lease = None
