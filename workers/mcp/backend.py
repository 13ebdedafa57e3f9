"""What the MCP tools call: the operations of the ledger for one authenticated caller,
either in this process through the gateway (``/mcp`` in ``memledger serve``; ``memledger
mcp`` when it opens the stores itself) or through a running ``memledger serve`` with the
Python client (``memledger mcp`` on a data directory ``serve`` owns, or given its URL).

Either way the authorisation, the audit log and the ledger's rules are the gateway's:
a backend only carries the call there. Refusals are ``workers.gateway.errors`` in this
process and ``workers.client.errors`` through ``serve``; ``workers.mcp.errors`` turns
both into the same tool error.
"""

from __future__ import annotations

from typing import Protocol

from workers import wire
from workers.client import LedgerClient
from workers.gateway import Caller, Gateway
from workers.memtool.service import MemoryTool


class Backend(Protocol):
    """The ledger as the MCP tools see it, for one caller: each method is the gateway
    operation of the same name (``memory`` is ``Gateway.memory``, ``memories``
    ``Gateway.memories``, ``memory_tool`` ``MemoryTool.execute``), with its refusals.
    Blocking calls: the tools run in worker threads."""

    def write(self, subject_id: str, req: wire.WriteMemory) -> wire.CommandAck: ...

    def recall(self, subject_id: str, req: wire.Recall) -> wire.RecallResult: ...

    def memory(self, subject_id: str, memory_id: str) -> wire.MemoryDetail: ...

    def memories(self, subject_id: str, include_all: bool, limit: int, after: str | None) -> wire.MemoryPage: ...

    def erase(self, subject_id: str, req: wire.Erase) -> wire.CommandAck: ...

    def trace(self, request_id: str) -> wire.TraceOut: ...

    def memory_tool(self, subject_id: str, command: wire.MemoryCommand) -> wire.MemoryToolResult: ...


class GatewayBackend:
    """The gateway of this process, for ``caller`` (authenticated by the transport)."""

    def __init__(self, gateway: Gateway, caller: Caller) -> None:
        self._gateway = gateway
        self._caller = caller

    def write(self, subject_id: str, req: wire.WriteMemory) -> wire.CommandAck:
        return self._gateway.write(self._caller, subject_id, req)

    def recall(self, subject_id: str, req: wire.Recall) -> wire.RecallResult:
        return self._gateway.recall(self._caller, subject_id, req)

    def memory(self, subject_id: str, memory_id: str) -> wire.MemoryDetail:
        return self._gateway.memory(self._caller, subject_id, memory_id)

    def memories(self, subject_id: str, include_all: bool, limit: int, after: str | None) -> wire.MemoryPage:
        return self._gateway.memories(self._caller, subject_id, include_all=include_all, limit=limit, after=after)

    def erase(self, subject_id: str, req: wire.Erase) -> wire.CommandAck:
        return self._gateway.erase(self._caller, subject_id, req)

    def trace(self, request_id: str) -> wire.TraceOut:
        return self._gateway.trace(self._caller, request_id)

    def memory_tool(self, subject_id: str, command: wire.MemoryCommand) -> wire.MemoryToolResult:
        return MemoryTool(self._gateway).execute(self._caller, subject_id, command)


class ClientBackend:
    """A running ``memledger serve``, through ``client`` (which carries the API key)."""

    def __init__(self, client: LedgerClient) -> None:
        self._client = client

    def write(self, subject_id: str, req: wire.WriteMemory) -> wire.CommandAck:
        return self._client.write(subject_id, **req.model_dump(exclude_unset=True))

    def recall(self, subject_id: str, req: wire.Recall) -> wire.RecallResult:
        return self._client.recall(
            subject_id,
            req.query,
            req.purpose,
            k=req.k,
            now=req.now,
            scope=req.scope,
            include_unconfirmed=req.include_unconfirmed,
            after=req.wait_for,
            wait_timeout_s=req.wait_timeout_s,
        )

    def memory(self, subject_id: str, memory_id: str) -> wire.MemoryDetail:
        return self._client.memory(subject_id, memory_id)

    def memories(self, subject_id: str, include_all: bool, limit: int, after: str | None) -> wire.MemoryPage:
        return self._client.memories(subject_id, include_all=include_all, limit=limit, after_id=after)

    def erase(self, subject_id: str, req: wire.Erase) -> wire.CommandAck:
        return self._client.erase(subject_id, req.memory_ids, source=req.source, reason=req.reason)

    def trace(self, request_id: str) -> wire.TraceOut:
        return self._client.trace(request_id)

    def memory_tool(self, subject_id: str, command: wire.MemoryCommand) -> wire.MemoryToolResult:
        return self._client.memory_tool(subject_id, command)
