"""The MCP server of the ledger (the ``mcp`` package, 2.x): ``tools`` holds the tools
(remember, recall, get, list, history, forget, trace and the memory tool), ``server`` the
server that answers refusals as tool errors (``errors``), ``backend`` what the tools call
(the gateway in this process, or ``memledger serve`` through the Python client), ``http``
the streamable HTTP transport mounted at ``/mcp`` of ``serve``, and ``stdio`` ``memledger
mcp``. Nothing is imported here."""
