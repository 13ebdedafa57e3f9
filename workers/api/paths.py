"""Path parameters that may hold any character of an identifier, ``/`` included.

A subject id may contain ``/`` (the ledger's identifier rule allows it, and the CLI and the
MCP tools take one), so the client sends it percent-encoded in its path segment
(``team%2Falpha``). ASGI servers hand the application the *decoded* path, where that
``%2F`` is a ``/`` like any other and the route is not found. :class:`SegmentPaths`
routes on the raw path instead: each segment decoded on its own, with ``%`` and ``/``
escaped again inside it, so a segment stays one segment; route parameters declared as
``{name:segment}`` (:class:`SegmentConvertor`) undo that escape, so the route gets the
value the client encoded.
"""

from __future__ import annotations

from typing import ClassVar
from urllib.parse import unquote

from starlette.convertors import Convertor, register_url_convertor
from starlette.types import ASGIApp, Receive, Scope, Send

CONVERTOR = "segment"
"""The name of the convertor in route templates: ``/subjects/{subject_id:segment}``."""


def escape(value: str) -> str:
    """``value`` (a decoded segment) with ``%`` and ``/`` escaped: one path segment."""
    return value.replace("%", "%25").replace("/", "%2F")


def routing_path(raw_path: bytes) -> str:
    """The path to route on for ``raw_path`` (the request target's path, still encoded):
    each ``/``-separated segment percent-decoded (UTF-8, as servers decode a path) and
    then escaped (:func:`escape`)."""
    return "/".join(escape(unquote(part)) for part in raw_path.decode("latin-1").split("/"))


class SegmentConvertor(Convertor[str]):
    """One path segment (no ``/``), its :func:`escape` undone."""

    regex: ClassVar[str] = "[^/]+"

    def convert(self, value: str) -> str:
        return value.replace("%2F", "/").replace("%25", "%")

    def to_string(self, value: str) -> str:
        return escape(value)


register_url_convertor(CONVERTOR, SegmentConvertor())


class SegmentPaths:
    """ASGI middleware: route HTTP requests on :func:`routing_path` of their raw path
    (``scope["path"]`` replaced; a server that gives no ``raw_path`` gets its decoded
    path escaped as one would be, so ``%`` means the same in both). An application
    mounted under a ``root_path`` is left as it is."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and not scope.get("root_path"):
            raw = scope.get("raw_path")
            path = scope["path"]
            scope["path"] = routing_path(raw) if raw else "/".join(escape(p) for p in path.split("/"))
        await self.app(scope, receive, send)
