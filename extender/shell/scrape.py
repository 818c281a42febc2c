"""The ``/metrics`` page, rendered off the event loop and at most so often, whoever scrapes.

A render walks every node's account (about 55 ms at 15,000 nodes): on the event loop, 64
connections scraping in a loop took the scheduler's filter p50 from 1 ms to 1.2 s. Here the
state is read on the loop (``Metrics.freeze``: references, and the agents' record counts), the
walk and the text are made in a thread, scrapes that come while a render is under way share
it, and a render starts at most once per ``SHARE`` times the last one's duration: renders take
at most about 1/SHARE of the time, so a flood of scrapes costs what a few do
(docs/reliability.md, "Hostile load"). Prometheus reads a page at most that much older.
"""

from __future__ import annotations

import asyncio
import time

from prometheus_client import generate_latest

from extender.shell.metrics import Metrics

# A render's duration times this: the least time from one render's start to the next's.
SHARE = 20.0
MAX_AGE_SECONDS = 5.0  # never older than this (a render of 250 ms or more)


class MetricsPage:
    def __init__(self, metrics: Metrics, share: float = SHARE) -> None:
        self._metrics = metrics
        self._share = share
        self._body = b""
        self._next_render = 0.0  # monotonic time before which the last body is served again
        self._rendering: asyncio.Future[bytes] | None = None
        self.renders = 0

    async def body(self) -> bytes:
        if self._body and time.monotonic() < self._next_render:
            return self._body
        if self._rendering is None:
            self._rendering = asyncio.ensure_future(self._render())
        # Shielded: a scraper that leaves does not cancel the render the others wait for.
        return await asyncio.shield(self._rendering)

    async def _render(self) -> bytes:
        started = time.monotonic()
        try:
            self._metrics.freeze()
            try:
                body = await asyncio.to_thread(generate_latest, self._metrics.registry)
            finally:
                self._metrics.thaw()
        finally:
            self._rendering = None
        done = time.monotonic()
        self.renders += 1
        self._body = body
        self._next_render = started + min(MAX_AGE_SECONDS, self._share * (done - started))
        return body
