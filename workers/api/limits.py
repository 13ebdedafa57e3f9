"""Request body size limit: 413 before the route reads a byte too many."""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from workers.api.problems import problem


class _TooLarge(Exception):
    pass


class BodyLimit:
    """ASGI middleware: a request whose ``Content-Length`` or streamed body exceeds
    ``max_bytes`` gets a 413 problem document, and the route never sees the body."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = dict(scope.get("headers") or []).get(b"content-length")
        if length is not None and (not length.isdigit() or int(length) > self.max_bytes):
            await self._refuse(scope, receive, send)
            return
        seen = 0
        started = False

        async def counted() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    raise _TooLarge
            return message

        async def tracked(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, counted, tracked)
        except _TooLarge:
            if not started:
                await self._refuse(scope, receive, send)

    async def _refuse(self, scope: Scope, receive: Receive, send: Send) -> None:
        rule = f"must be at most {self.max_bytes} bytes"
        response = problem(413, "body", rule, instance=scope.get("path"))
        await response(scope, receive, send)
