"""Commands for agents: ``mcp``, the MCP server over stdio."""

from __future__ import annotations

import typer

from workers.cli import util as cliutil


def mcp() -> None:
    """Serve the ledger's MCP tools (remember, recall, get, list, history, forget, trace,
    and the memory tool) on stdin and stdout, for an MCP client that starts this command.
    The tools act as the principal of MEMLEDGER_API_KEY. Through memledger serve when it
    owns the data directory (or at MEMLEDGER_SERVE_URL); otherwise on the stores
    themselves, for as long as the client keeps it running."""
    from workers.mcp.stdio import run_stdio

    run_stdio(cliutil.settings())


def register(app: typer.Typer) -> None:
    app.command()(mcp)
