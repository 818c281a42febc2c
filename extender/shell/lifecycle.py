"""The serving process's start and stop: the ports opened with their limits, the background tasks,
and on SIGTERM the drain (readiness fails, begun requests are answered, then the ports close)."""

from __future__ import annotations

import asyncio
import logging
import re
import signal
import ssl
from collections.abc import Callable, Coroutine
from typing import Any

from aiohttp import web

from extender.shell.connections import (
    GuardedRunner,
    connections_within_open_files,
    cut_overdue_answers,
    keep_large_buffers_apart,
    raise_open_files_limit,
    trim_after_bursts,
)
from extender.shell.handlers import BUFFERS, EXTENDER
from extender.shell.limits import (
    ANSWER_TIMEOUT_SECONDS,
    KEEPALIVE_TIMEOUT_SECONDS,
    LIVENESS_CONNECTIONS,
    PROBE_BACKLOG,
    app_runner,
)
from extender.shell.verbcalls import BEGUN

log = logging.getLogger("extender.shell.server")

# What is left of the shutdown budget for aiohttp's own close of each port, once begun requests
# had their time: it waits up to twice its timeout per connection (the handler, then its cancel).
CLOSE_SECONDS = 0.1
ServedApp = tuple[web.Application, str, int, ssl.SSLContext | None]


def _loop_error(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """asyncio's errors, each under a message that does not change with the objects it names.

    asyncio formats the objects into the message (``Exception in callback
    BaseSelectorEventLoop._start_serving(<... at 0x7f...>)``, a timer's deadline), so each
    record was unlike the last and none was counted as a repeat (``logs.RepeatLimiter``):
    when file descriptors ran out, every failed accept() scheduled a retry that failed again."""
    message = str(context.get("message") or "unhandled exception in the event loop")
    head = re.sub(r"\(<.*|<.*", "", message.splitlines()[0]).strip() or "event loop error"
    error = context.get("exception")
    logging.getLogger("asyncio").error(
        head.replace("%", "%%"), exc_info=error if isinstance(error, BaseException) else None
    )


async def _started(runner: GuardedRunner, site: Callable[..., web.BaseSite], *args: Any, **kwargs: Any) -> web.BaseSite:
    await runner.setup()
    started = site(runner, *args, **kwargs)
    await started.start()
    return started


async def serve_until_stopped(
    apps: list[ServedApp],
    *,
    shutdown_timeout: float,
    drain_seconds: float = 0.0,
    on_start: Callable[[], None] | None = None,
    on_stop: Callable[[], None] | None = None,
    keepalive_timeout: float = KEEPALIVE_TIMEOUT_SECONDS,
    background: tuple[Callable[[], Coroutine[Any, Any, None]], ...] = (),
    liveness: tuple[web.Application, str] | None = None,
) -> None:
    """Serve every (app, host, port, tls) until SIGTERM or SIGINT, then drain gracefully.

    On the signal ``on_stop`` runs first (readiness fails), new requests are still
    served for ``drain_seconds`` while the endpoints drop this pod, then the ports
    close and requests already begun (their bodies still arriving, too) are answered
    until ``drain_seconds + shutdown_timeout`` after the signal, the budget the chart
    checks against the grace period: what is still under way then is cut. ``background``
    tasks (certificate reloads) run meanwhile and are cancelled at the end. ``liveness``: an app
    served on the abstract unix socket of that name too (``create_liveness_app``).
    """
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    keep_large_buffers_apart()
    raise_open_files_limit()
    loop.set_exception_handler(_loop_error)
    runners: list[GuardedRunner] = []
    sites: list[web.BaseSite] = []
    tasks = [asyncio.create_task(job()) for job in background]
    try:
        await _open_ports(apps, liveness, keepalive_timeout, runners, sites)
        ledger = apps[0][0][BUFFERS]
        tasks.append(asyncio.create_task(cut_overdue_answers(ledger, ANSWER_TIMEOUT_SECONDS)))
        tasks.append(asyncio.create_task(trim_after_bursts([r.guarded for r in runners], ledger)))
        if on_start is not None:
            on_start()
        await stop.wait()
        deadline = loop.time() + drain_seconds + shutdown_timeout
        if on_stop is not None:
            on_stop()
        log.info(
            "stopping: not ready; serving %.0f s more, then answering begun requests for up to %.0f s",
            drain_seconds,
            shutdown_timeout,
        )
        if drain_seconds > 0:
            await asyncio.sleep(drain_seconds)
        await _answer_begun(apps, runners, sites, deadline, shutdown_timeout)
    finally:
        for task in tasks:
            task.cancel()
        for runner in reversed(runners):
            await runner.cleanup()


async def _open_ports(
    apps: list[ServedApp],
    liveness: tuple[web.Application, str] | None,
    keepalive_timeout: float,
    runners: list[GuardedRunner],
    sites: list[web.BaseSite],
) -> None:
    """Each app's port, then the liveness socket; each runner is added to ``runners`` before it
    starts, so that the caller cleans it up whatever happens next."""
    wanted = apps[0][0][EXTENDER].config.max_connections
    for index, (app, host, port, tls) in enumerate(apps):
        # aiohttp's own close waits up to twice this per connection: what is left of the
        # budget once begun requests had theirs.
        # The verbs: aiohttp's default backlog.
        cap, backlog = connections_within_open_files(wanted, PROBE_BACKLOG if index else 128, len(apps))
        runner = app_runner(
            app,
            shutdown_timeout=CLOSE_SECONDS,
            keepalive_timeout=keepalive_timeout,
            max_connections=cap,
            port_name="probe" if index else "verbs",
        )
        runners.append(runner)  # cleaned up whatever happens next
        sites.append(await _started(runner, web.TCPSite, host, port, ssl_context=tls, backlog=backlog))
    if liveness is not None:
        app, name = liveness
        runner = app_runner(
            app, shutdown_timeout=CLOSE_SECONDS, max_connections=LIVENESS_CONNECTIONS, port_name="liveness"
        )
        # Abstract (a leading NUL): no file, and only this network namespace reaches it.
        runners.append(runner)
        sites.append(await _started(runner, web.UnixSite, "\0" + name))


async def _answer_begun(
    apps: list[ServedApp],
    runners: list[GuardedRunner],
    sites: list[web.BaseSite],
    deadline: float,
    shutdown_timeout: float,
) -> None:
    """No new connections, then the begun requests answered until ``deadline``, less what aiohttp's
    close of each port takes."""
    for listening in sites:
        await listening.stop()  # no new connections
    begun = [app[BEGUN] for app, *_ in apps if BEGUN in app]
    # aiohttp's close of each port takes up to twice CLOSE_SECONDS: leave that out of the wait.
    closing = 2 * CLOSE_SECONDS * len(runners) + CLOSE_SECONDS
    loop = asyncio.get_running_loop()
    try:
        async with asyncio.timeout_at(max(loop.time(), deadline - closing)):
            for requests in begun:
                await requests.none_left()
    except TimeoutError:
        log.warning(
            "stopping: %d requests still unanswered after %.1f s; closing them",
            sum(b.count for b in begun),
            shutdown_timeout,
        )
