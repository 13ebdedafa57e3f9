"""``memledger mcp``: the MCP server over stdio, for an MCP client that starts it (a
desktop assistant, an agent framework).

Its tools act as the principal of one API key fixed by configuration
(``MEMLEDGER_API_KEY``; never a tool argument), checked at every call as ``serve``
checks it (a revoked key stops working at once). Where the ledger is:

- ``MEMLEDGER_SERVE_URL``, or in the embedded default a ``memledger serve`` that owns the
  data directory (its ``serve.json``): through that ``serve``, with the Python client;
- otherwise it opens the stores itself: in the distributed mode as a stateless API
  process (as ``serve`` there); in the embedded default it owns the data directory,
  as any embedded command does, and applies the projections in the background as
  ``serve`` would, for as long as the MCP client keeps it running. Other commands on
  that data directory cannot open its stores meanwhile: run ``memledger serve`` first
  when several agents or the CLI use it at the same time.

The stores are opened at the first tool call (after the MCP handshake), inside the stdio
transport, which points file descriptor 1 at stderr while it serves, so nothing the
embedded servers print can reach the protocol stream.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

import anyio
from mcp.server.mcpserver import Context

from workers.client import LedgerClient
from workers.gateway import Gateway, InvalidRequestError
from workers.mcp.backend import Backend, ClientBackend, GatewayBackend
from workers.mcp.server import build_server
from workers.settings import Settings

log = logging.getLogger(__name__)


class LedgerAccess:
    """The backend of every tool call of this process, opened once on first use."""

    def __init__(self, settings: Settings, token: str) -> None:
        self.settings = settings
        self._token = token
        self._lock = threading.Lock()
        self._backend_of: Callable[[str], Backend] | None = None
        self._closers: list[Callable[[], None]] = []
        self.where = ""

    def backend(self, tool: str) -> Backend:
        """The backend of a call of ``tool`` (opening the ledger at the first call)."""
        with self._lock:
            if self._backend_of is None:
                self._backend_of = self._open()
            return self._backend_of(tool)

    def _open(self) -> Callable[[str], Backend]:
        url = self._serve_url()
        if url is not None:
            client = LedgerClient(url, self._token)
            self._closers.append(client.close)
            self.where = f"memledger serve at {url}"
            return lambda tool: ClientBackend(client)
        from workers.bootstrap import PROJECTION_NAMES, build
        from workers.serve.projector import Projector

        embedded = self.settings.mode == "embedded"
        svc = build(self.settings, own_vectors=embedded, projections=PROJECTION_NAMES if embedded else ())
        self._closers.append(svc.close)
        gateway = Gateway(svc)
        self._closers.append(gateway.close)
        if embedded:
            projector = Projector(svc)
            projector.start()
            self._closers.append(projector.stop)
        self.where = f"data directory {self.settings.data_dir}" if embedded else "the distributed stores"
        return lambda tool: GatewayBackend(gateway, gateway.authenticate(self._token, f"mcp {tool}"))

    def _serve_url(self) -> str | None:
        if self.settings.serve_url:
            return self.settings.serve_url
        if self.settings.mode != "embedded":
            return None
        from workers.serve import files

        info = files.read(self.settings.data_dir)
        return None if info is None else info.url

    def close(self) -> None:
        """Close what was opened, last first."""
        with self._lock:
            while self._closers:
                try:
                    self._closers.pop()()
                except Exception as exc:  # closing goes on: each store stops on its own
                    log.warning("closing the ledger: %s", exc)


def api_key(settings: Settings) -> str:
    """The API key the tools act with.

    Raises:
        InvalidRequestError: field ``api_key``, when none is configured.
    """
    token = settings.api_key.get_secret_value().strip() if settings.api_key is not None else ""
    if not token:
        raise InvalidRequestError(
            "api_key",
            "set MEMLEDGER_API_KEY to an API key (memledger keys create PRINCIPAL --scope read --scope write"
            " --subject 'user-*'): the MCP tools act as its principal",
        )
    return token


def run_stdio(settings: Settings) -> None:
    """Serve MCP on stdin and stdout until the client closes stdin.

    Raises:
        InvalidRequestError: no API key configured.
    """
    access = LedgerAccess(settings, api_key(settings))

    def backend_of(ctx: Context[Any, Any], tool: str) -> Backend:
        return access.backend(tool)

    server = build_server(backend_of)
    try:
        anyio.run(server.run_stdio_async)
    finally:
        access.close()
