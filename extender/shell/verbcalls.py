"""A verb's call as the server runs it: known errors become clear 4xx answers (with an honest log
line), anything else a logged 500, every call is counted and timed, and the calls begun and not yet
answered are known (``Begun``), for the shutdown to wait for."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from aiohttp import web
from aiohttp.typedefs import Handler

from extender.core.quantity import QuantityError
from extender.shell.bodies import ClientGone, NoRoom
from extender.shell.metrics import Metrics
from extender.shell.responses import JSON
from extender.shell.wire import WireError, render_error

log = logging.getLogger("extender.shell.server")

CLIENT_GONE = 499  # counted, never sent: the client left before its body arrived (nginx's code)


class Begun:
    """Verb requests begun and not yet answered (their bodies may still be arriving).

    aiohttp's own shutdown stops reading from every connection at once, which drops a
    request whose body is still arriving: the server waits for these itself first."""

    def __init__(self) -> None:
        self.count = 0
        self._none = asyncio.Event()
        self._none.set()

    def enter(self) -> None:
        self.count += 1
        self._none.clear()

    def leave(self) -> None:
        self.count -= 1
        if not self.count:
            self._none.set()

    async def none_left(self) -> None:
        await self._none.wait()


BEGUN = web.AppKey("begun", Begun)


def verb_call(
    verb: str, handler: Handler, metrics: Metrics, max_bytes: int, begun: Begun, *, done: Callable[[web.Request], None]
) -> Handler:
    """One verb's handler, with its metrics and the mapping of errors to clear answers; ``done`` once
    it has its answer (or error), before the answer is sent.

    A wrapper per route rather than an aiohttp middleware: the scheduler waits on
    every call, and a middleware chain costs each request more (about 15 us here).
    """

    async def answer(request: web.Request) -> web.StreamResponse:
        started = time.perf_counter()
        status = 500  # also what a cancelled request counts as
        begun.enter()
        try:
            try:
                response = await handler(request)
            except (WireError, QuantityError) as error:
                log.warning("bad %s request from %s: %s", verb, request.remote, error)
                response = web.Response(status=400, body=render_error(str(error)), content_type=JSON)
            except ClientGone:
                log.info("%s request from %s: the client left before its body arrived", verb, request.remote)
                status = CLIENT_GONE
                return web.Response(status=400, body=render_error("incomplete body"), content_type=JSON)
            except web.HTTPRequestEntityTooLarge:
                log.warning("bad %s request from %s: body over %d bytes", verb, request.remote, max_bytes)
                message = f"request body over maxRequestBytes ({max_bytes} bytes)"
                response = web.Response(status=413, body=render_error(message), content_type=JSON)
            except NoRoom:
                log.warning(
                    "%s request from %s refused: no room for its body now (maxBufferedBytes)", verb, request.remote
                )
                message = "the extender has no room for this request's body now (maxBufferedBytes): retry"
                response = web.Response(status=503, body=render_error(message), content_type=JSON)
            except (web.HTTPException, asyncio.CancelledError):
                raise
            except Exception:
                log.exception("%s request failed", verb)
                response = web.Response(status=500, body=render_error("internal error"), content_type=JSON)
            status = response.status
            if not request.content.at_eof():
                # The body was refused unread (too large, wrongly encoded): say the connection
                # closes, so the client does not send its next request on it.
                response.force_close()
            return response
        except web.HTTPException as error:
            status = error.status
            raise
        finally:
            done(request)
            begun.leave()
            metrics.child(metrics.requests, verb, str(status)).inc()
            metrics.child(metrics.latency, verb).observe(time.perf_counter() - started)

    return answer
