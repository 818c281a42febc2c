"""Log set-up for the command line: plain text for people, JSON lines for collectors."""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

import msgspec
from aiohttp.http_exceptions import HttpProcessingError

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
_json = msgspec.json.Encoder()


class JsonFormatter(logging.Formatter):
    """One JSON object a line: ``time``, ``level``, ``logger``, ``message`` (and ``exception``).

    The message is a JSON string, so a newline or quote that a request smuggled
    into a logged value cannot forge a second record.
    """

    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return _json.encode(entry).decode()


# Per message, in each window: this many lines pass, the rest are counted and said in one line.
REPEATS_PASSED = 10
REPEAT_WINDOW_SECONDS = 10.0
_MAX_MESSAGES = 1000  # messages tracked at once; templates come from the code, so few


@dataclass
class _Window:
    started: float
    passed: int = 0
    suppressed: int = 0
    example: logging.LogRecord | None = None


class RepeatLimiter(logging.Handler):
    """Passes records to ``target``, at most ``REPEATS_PASSED`` per message in each window of
    ``REPEAT_WINDOW_SECONDS``; the rest are counted, and one line says how many were left out.

    A message is its logger, level and template (``log.warning("bad %s request", ...)`` is one
    message whatever its arguments), so a flood of one error (asyncio's ``accept()`` failing
    on every connection while file descriptors run out, a client repeating a bad request)
    writes a few lines a window, not millions."""

    def __init__(
        self,
        target: logging.Handler,
        *,
        passed: int = REPEATS_PASSED,
        window_seconds: float = REPEAT_WINDOW_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__()
        self.target = target
        self._passed = passed
        self._window = window_seconds
        self._clock = clock
        self._windows: dict[tuple[str, int, str], _Window] = {}
        self._timer: threading.Timer | None = None

    def emit(self, record: logging.LogRecord) -> None:
        key = (record.name, record.levelno, str(record.msg))
        now = self._clock()
        with self.lock:  # type: ignore[union-attr] # created by Handler.__init__
            window = self._windows.get(key)
            if window is None or now - window.started >= self._window:
                if window is not None:
                    self._say_suppressed(window, now)
                if len(self._windows) >= _MAX_MESSAGES:
                    self._flush_locked(now, every=True)
                window = self._windows[key] = _Window(now)
            if window.passed >= self._passed:
                window.suppressed += 1
                window.example = record
                self._arm_timer()
                return
            window.passed += 1
        self.target.handle(record)

    def flush(self) -> None:
        with self.lock:  # type: ignore[union-attr]
            self._flush_locked(self._clock(), every=False)
        self.target.flush()

    def close(self) -> None:
        with self.lock:  # type: ignore[union-attr]
            self._flush_locked(self._clock(), every=True)
            if self._timer is not None:
                self._timer.cancel()
        self.target.close()
        super().close()

    def _flush_locked(self, now: float, *, every: bool) -> None:
        for key, window in list(self._windows.items()):
            if every or now - window.started >= self._window:
                self._say_suppressed(window, now)
                del self._windows[key]

    def _say_suppressed(self, window: _Window, now: float) -> None:
        example = window.example
        if not window.suppressed or example is None:
            return
        summary = logging.makeLogRecord(
            {
                "name": example.name,
                "levelno": example.levelno,
                "levelname": example.levelname,
                "msg": "%d more like this in the last %.0f s, the last: %s",
                "args": (window.suppressed, now - window.started, example.getMessage()[:500]),
            }
        )
        window.suppressed, window.example = 0, None
        self.target.handle(summary)

    def _arm_timer(self) -> None:
        """Say what a window left out once it ends, even when nothing else is logged."""
        if self._timer is not None and self._timer.is_alive():
            return
        self._timer = threading.Timer(self._window, self._window_ended)
        self._timer.daemon = True
        self._timer.start()

    def _window_ended(self) -> None:
        with self.lock:  # type: ignore[union-attr]
            self._timer = None
            self._flush_locked(self._clock(), every=False)
            if any(window.suppressed for window in self._windows.values()):
                self._arm_timer()


class BadHttpIsOneLine(logging.Filter):
    """aiohttp logs a request it cannot parse (a bad request line, an oversized header)
    as an ERROR with a traceback, after answering it 400: a client's mistake, so one
    WARNING line naming it."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        if isinstance(error, HttpProcessingError):
            record.exc_info, record.exc_text = None, None
            record.levelno, record.levelname = logging.WARNING, "WARNING"
            record.msg, record.args = "bad HTTP request: %s", (" ".join(str(error.message).split())[:200],)
        return True


_BAD_HTTP_IS_ONE_LINE = BadHttpIsOneLine()  # one instance: a second configure() adds no second filter


def configure(level: str, log_format: str) -> None:
    """The process's logging, once at its start (``cli.main``): the handler and its format, and
    aiohttp's parse errors as one line (``BadHttpIsOneLine``)."""
    logging.getLogger("aiohttp.server").addFilter(_BAD_HTTP_IS_ONE_LINE)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if log_format == "json" else logging.Formatter(TEXT_FORMAT))
    logging.basicConfig(level=level.upper(), handlers=[RepeatLimiter(handler)], force=True)
