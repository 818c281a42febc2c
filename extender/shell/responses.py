"""A verb's answer as sent: one write when small, in slices as its client takes them when large, and
let go of once sent (docs/reliability.md, "Memory under load")."""

from __future__ import annotations

from aiohttp import web

JSON = "application/json"
ANSWER_SLICE_BYTES = 256 * 1024


class JsonAnswer(web.Response):
    """A JSON answer that lets go of its body once sent: aiohttp keeps a keep-alive
    connection's last response until the connection's next request (a full-Nodes answer
    echoes megabytes)."""

    def __init__(self, body: bytes) -> None:
        super().__init__(body=body, content_type=JSON)

    async def write_eof(self, data: bytes = b"") -> None:
        await super().write_eof(data)
        self.body = None


class SlicedAnswer(web.StreamResponse):
    """A large JSON answer sent in slices, each after the client took the one before, and let
    go of once sent. In one write the transport kept a copy of whatever the client had not taken
    yet: a client that never reads held twice a 34 MiB answer."""

    def __init__(self, body: bytes) -> None:
        super().__init__(headers={"Content-Type": JSON})
        self.content_length = len(body)
        self._answer = body

    async def write_eof(self, data: bytes = b"") -> None:
        answer, self._answer = self._answer, b""
        try:
            for start in range(0, len(answer), ANSWER_SLICE_BYTES):
                # Copies, not views: a failed write's traceback keeps a slice, and a view its whole answer.
                await self.write(answer[start : start + ANSWER_SLICE_BYTES])  # waits while the client lags
        finally:
            del answer  # the same for this frame
        await super().write_eof(data)


def answer(body: bytes) -> web.StreamResponse:
    """The answer to a verb: one write when small (most: a few hundred bytes), in slices when large."""
    return JsonAnswer(body) if len(body) <= ANSWER_SLICE_BYTES else SlicedAnswer(body)
