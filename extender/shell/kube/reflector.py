"""List, then watch from the list's resourceVersion; relist on 410 Gone.

One reflector per resource runs in a daemon thread with the official client
(which is synchronous) and hands compact records to the event loop, where the
cluster state is changed; the state is never touched from the thread.

Traps of the Python client designed around: lists and events are decoded
with msgspec from the raw response (``_preload_content=False``), never into
the client's model objects (seconds at thousands of pods); every request has
a ``_request_timeout`` (without one a watch hangs forever when the network
drops), its read timeout longer than the API server's ~60 s bookmarks, so an
idle but healthy watch is not torn down; 410 is handled here, not by the
client's ``Watch`` helper. Every list and watch after one that did not last
(``HEALTHY_WATCH_SECONDS``) waits as client-go's reflector waits between its
ListAndWatch calls (0.8 s doubling to 30 s, with jitter), whatever ended it: an error,
410 Gone (as an event or an HTTP status), a watch that ends at once with nothing
(client-go's "very short watch", ``VeryShortWatchError`` in k8s.io/client-go
tools/cache/reflector.go) or after an event or a bookmark. Such API servers had the
extender list and watch 370-2,700 times a second. What such a churn brings is applied
but is no progress: readiness fails after ``--watch-stale-seconds`` until a watch lasts.
The one exception is the first 410 Gone since a watch lasted, listed again at once:
events were missed, so the extender is not ready from the 410 until that
list is applied (``missed``). After an API server restart a watch met 410 at once, and the
wait before the list let filters answer for seconds from a picture that still held pods
deleted meanwhile (e2e/cluster/test_requeue.py, a burst cut by an API server restart).
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import msgspec
from kubernetes.client.exceptions import ApiException

from extender.core.errors import ExtenderError
from extender.shell.kube.backoff import Backoff

log = logging.getLogger("extender.shell.kube.reflector")

# Objects per list page. The API server's cost of a page grows with the objects still to come, so
# a list costs it more than linearly in pages: with 180,000 pods, 500 a page took it 13-15 s and
# 2,000 a page 7.4 s (5,000: 7.0 s); a page of 2,000 pods is about 3 MB (docs/performance.md, Scale).
PAGE_SIZE = 2000

Obj = TypeVar("Obj")
Rec = TypeVar("Rec")


class Gone(ExtenderError):
    """The resourceVersion is too old to watch from: list again."""


class NotInstalled(ExtenderError):
    """An optional resource's definition is not installed."""


class VeryShortWatch(ExtenderError):
    """The watch ended within a second without a single event."""


# A watch ending sooner than this with no event is a failure (client-go's threshold).
SHORT_WATCH_SECONDS = 1.0
# A watch that stays open this long is healthy: the backoff starts over and progress counts again.
# A real API server keeps one open for its timeout (5 minutes here), or until a 410 after minutes.
HEALTHY_WATCH_SECONDS = 5.0


class _ListMeta(msgspec.Struct, rename="camel"):
    resource_version: str = ""
    continue_: str | None = msgspec.field(default=None, name="continue")


class _Status(msgspec.Struct):
    code: int = 0
    reason: str = ""
    message: str = ""


class _ObjectMeta(msgspec.Struct, rename="camel"):
    resource_version: str = ""


class _Versioned(msgspec.Struct):
    metadata: _ObjectMeta = msgspec.field(default_factory=_ObjectMeta)


class _Event(msgspec.Struct):
    type: str
    object: msgspec.Raw


@dataclass(frozen=True)
class Resource(Generic[Obj, Rec]):
    """What to list and watch, and how to compact one object into a record."""

    name: str  # for logs: "nodes", "pods"
    list_call: Callable[..., Any]  # e.g. CoreV1Api.list_node
    object_type: type[Obj]
    compact: Callable[[Obj], Rec]
    field_selector: str | None = None
    # A watch event's object, when it needs more than a listed one (a shadow pod's status: extender.core.podoutcome).
    compact_event: Callable[[Obj], Rec] | None = None
    # A custom resource whose definition may not be installed: its list answering 404 means none
    # exist (the handlers are told of an empty list, then the list is retried with backoff).
    optional: bool = False


@dataclass(frozen=True)
class Handlers(Generic[Rec]):
    """Called on the event loop, in the order the API server sent them."""

    relisted: Callable[[list[Rec]], None]
    upserted: Callable[[Rec], None]
    deleted: Callable[[Rec], None]


def _lines(response: Any) -> Iterator[bytes]:
    """Newline-delimited watch events from a streaming response, as bytes."""
    buffer = b""
    for chunk in response.stream(amt=None, decode_content=False):
        buffer += chunk
        *complete, buffer = buffer.split(b"\n")
        yield from (line for line in complete if line.strip())
    if buffer.strip():
        yield buffer


class Reflector(Generic[Obj, Rec]):
    def __init__(
        self,
        resource: Resource[Obj, Rec],
        handlers: Handlers[Rec],
        post: Callable[[Callable[[], None]], None],
        *,
        stop: threading.Event,
        page_size: int = PAGE_SIZE,
        watch_timeout_seconds: int = 300,
        connect_timeout_seconds: float = 10.0,
        read_timeout_seconds: float = 90.0,
    ) -> None:
        self._resource = resource
        self._handlers = handlers
        self._post = post
        self._stop = stop
        self._page_size = page_size
        self._watch_timeout = watch_timeout_seconds
        self._timeouts = (connect_timeout_seconds, read_timeout_seconds)
        self._list_type = msgspec.json.Decoder(_page_type(resource.object_type))
        self._object = msgspec.json.Decoder(resource.object_type)
        self._rng = random.Random()
        # Read by other threads (readiness, metrics); plain assignments, so no lock.
        self.relists = 0  # how often a full list was needed
        self.failures = 0  # lists and watches that failed (each retried with backoff)
        # Monotonic time the API server last answered: a list, an event, a bookmark, a watch's end.
        self.last_progress: float | None = None
        self.last_failure = ""  # why the last list or watch failed, for readiness
        # A 410 Gone: events were missed, so the picture is stale until the next list is applied.
        self.missed = False
        # Since a list or watch did not last, until a watch does: what comes meanwhile is no progress.
        self._churning = False
        self._watch_opened: float | None = None  # when the current watch's stream opened

    def run(self) -> None:
        """The endless loop, kept tiny: list, watch until it ends, wait when it did not last, repeat."""
        backoff = Backoff()
        version: str | None = None
        listed_at_once = False  # since a watch lasted: a 410's list again came without a wait
        while not self._stop.is_set():
            self._watch_opened = None
            failure = ""
            try:
                if version is None:
                    version = self._list()
                version = self._watch(version)
            except Gone:
                failure = "410 Gone: resourceVersion expired"
                log.info("%s: resourceVersion %s expired (410 Gone): listing again", self._resource.name, version)
                version = None
                self.missed = True
                if not listed_at_once and not self._lasted():
                    # Listed again at once: until then the extender is not ready
                    # (``missed``), so a wait would only turn pods away. A second 410 backs off.
                    listed_at_once = True
                    continue
            except Exception as error:
                failure = _describe(error)
            if self._lasted():
                listed_at_once = False
                backoff.reset()
                self._churning = False
                self.last_failure = failure
                continue
            self.failures += 1
            self.last_failure = failure or f"the watch ended within {HEALTHY_WATCH_SECONDS:.0f} s"
            self._churning = True
            delay = backoff.next_delay()
            log.warning(
                "%s: list and watch failed (%s); again in %.1f s", self._resource.name, self.last_failure, delay
            )
            self._stop.wait(delay)

    def _lasted(self) -> bool:
        """Whether the current watch stayed open long enough to be healthy (a short one, asked to last
        a second, counts when it lasts half of it)."""
        opened = self._watch_opened
        least = min(HEALTHY_WATCH_SECONDS, self._watch_timeout / 2)
        return opened is not None and time.monotonic() - opened >= least

    def _progress(self) -> None:
        """The API server answered: progress for readiness, unless lists and watches churn."""
        if not self._churning or self.last_progress is None or self._lasted():
            self.last_progress = time.monotonic()

    def _list(self) -> str:
        """Every object, page by page; each page compacted before the next is read."""
        records: list[Rec] = []
        token: str | None = None
        started = time.monotonic()
        listed_after_410 = self.missed
        while True:
            kwargs: dict[str, Any] = {"limit": self._page_size, "_preload_content": False}
            if token:
                kwargs["_continue"] = token
            if self._resource.field_selector:
                kwargs["field_selector"] = self._resource.field_selector
            try:
                response = self._resource.list_call(_request_timeout=self._timeouts, **kwargs)
            except ApiException as error:
                if error.status == 410:  # the continue token expired mid-list
                    raise Gone from None
                if error.status == 404 and self._resource.optional:
                    self._post(lambda: self._handlers.relisted([]))
                    raise NotInstalled(f"{self._resource.name}: not installed (404); none can exist") from None
                raise
            page = self._list_type.decode(response.data)
            records.extend(self._resource.compact(item) for item in page.items)
            token = page.metadata.continue_
            if not token:
                break
        version: str = page.metadata.resource_version
        self.relists += 1
        self._progress()
        log.info(
            "%s: listed %d at resourceVersion %s in %.2f s",
            self._resource.name,
            len(records),
            version,
            time.monotonic() - started,
        )

        def relisted() -> None:
            self._handlers.relisted(records)
            if listed_after_410:  # on the event loop, once the state has what was listed since the 410
                self.missed = False

        self._post(relisted)
        return version

    def _watch(self, version: str) -> str:
        """Apply events until the server ends the watch; returns the last resourceVersion seen."""
        kwargs: dict[str, Any] = {}
        if self._resource.field_selector:
            kwargs["field_selector"] = self._resource.field_selector
        timeout = self._watch_timeout + self._rng.randrange(0, max(1, self._watch_timeout // 5))
        try:
            response = self._resource.list_call(
                watch=True,
                resource_version=version,
                allow_watch_bookmarks=True,
                # Spread the servers' watch restarts; the server closes the stream cleanly.
                timeout_seconds=timeout,
                _preload_content=False,
                _request_timeout=self._timeouts,
                **kwargs,
            )
        except ApiException as error:
            if error.status == 410:
                raise Gone from None
            raise
        started = self._watch_opened = time.monotonic()
        events = 0
        try:
            for line in _lines(response):
                if self._stop.is_set():
                    break
                version = self._apply(line, version)
                events += 1
                self._progress()
        finally:
            response.release_conn()
        # Shorter than half its own timeout, too: a watch asked to last a second may end in one.
        short = min(SHORT_WATCH_SECONDS, timeout / 2)
        if not events and time.monotonic() - started < short and not self._stop.is_set():
            raise VeryShortWatch(f"very short watch: it ended within {short:.1f} s without an event")
        self._progress()  # the server ended the watch cleanly
        return version

    def _apply(self, line: bytes, version: str) -> str:
        event = msgspec.json.decode(line, type=_Event)
        if event.type == "ERROR":
            status = msgspec.json.decode(event.object, type=_Status)
            if status.code == 410:
                raise Gone
            raise RuntimeError(f"watch error {status.code} {status.reason}: {status.message}")
        if event.type == "BOOKMARK":
            return msgspec.json.decode(event.object, type=_Versioned).metadata.resource_version or version
        obj = self._object.decode(event.object)
        record = (self._resource.compact_event or self._resource.compact)(obj)
        if event.type == "DELETED":
            self._post(lambda: self._handlers.deleted(record))
        else:
            self._post(lambda: self._handlers.upserted(record))
        return msgspec.json.decode(event.object, type=_Versioned).metadata.resource_version or version


def _page_type(object_type: type[Any]) -> Any:
    return msgspec.defstruct(
        f"{object_type.__name__}Page",
        [
            ("metadata", _ListMeta, msgspec.field(default_factory=_ListMeta)),
            ("items", list[object_type], msgspec.field(default_factory=list)),  # type: ignore[valid-type]
        ],
    )


def _describe(error: Exception) -> str:
    if isinstance(error, VeryShortWatch):
        return str(error)
    if isinstance(error, ApiException):
        return f"{error.status} {error.reason}"
    return f"{type(error).__name__}: {error}"
