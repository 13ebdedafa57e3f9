"""The MCP server of the ledger (the ``mcp`` package, 2.x): the tools of
``workers.mcp.tools``, with every refusal answered as a tool error that names the field."""

from __future__ import annotations

from typing import Any

from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import CallToolResult, InputRequiredResult

from workers.mcp.errors import problem_of, tool_error
from workers.mcp.tools import BackendOf, build_tools

NAME = "memory-ledger"

INSTRUCTIONS = """\
An event-sourced memory ledger. Every tool names the subject whose memories it touches;
your API key decides which subjects you may read, write or erase. remember writes a
memory (purpose, optional key and scope) and answers with its event ids and log
positions; recall returns what is usable for a purpose and task, with provenance; get,
list and history read memories and their content-free history; forget erases for good
(confirm=true, erase scope) and trace follows the erasure store by store. memory is the
file-based memory tool (view, create, str_replace, insert, delete, rename under
/memories); pass a file's content_sha256 from view to refuse a stale edit."""


class LedgerMcpServer(MCPServer[Any]):
    """``MCPServer`` whose tool refusals are problem documents (``workers.mcp.errors``)."""

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context[Any, Any] | None = None
    ) -> CallToolResult | InputRequiredResult:
        """Call tool ``name``; a refusal of the ledger, or arguments that break a rule,
        become a tool error with ``isError`` (no exception reaches the transport)."""
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:
            problem = problem_of(exc.__cause__) if exc.__cause__ is not None else None
            if problem is None:
                raise
            return tool_error(problem)


def build_server(backend_of: BackendOf, version: str = "1") -> LedgerMcpServer:
    """The server with every tool bound to ``backend_of``."""
    return LedgerMcpServer(
        NAME,
        title="memory-ledger",
        instructions=INSTRUCTIONS,
        version=version,
        tools=build_tools(backend_of),
        log_level="WARNING",
    )
