"""Log set-up for the command line: plain text for people, JSON lines for collectors."""

from __future__ import annotations

import logging
import sys
from datetime import UTC, datetime

import msgspec

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


def configure(level: str, log_format: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if log_format == "json" else logging.Formatter(TEXT_FORMAT))
    logging.basicConfig(level=level.upper(), handlers=[handler], force=True)
