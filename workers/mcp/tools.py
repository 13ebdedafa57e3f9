"""The MCP tools: remember, recall, get, list, history, forget, trace, and ``memory``, the
Anthropic API's memory tool. Each is thin: it builds the wire request from its arguments,
calls the caller's backend (``backend_of(ctx, tool name)``: the transport decides who
the caller is, never an argument) and returns the wire answer as structured content,
event ids and log positions included. Bad arguments and refusals come back as tool
errors naming the field (``workers.mcp.errors``); an argument a tool does not take (a
misspelt ``sensitivty``) is refused naming it, as the HTTP API refuses an extra field,
rather than ignored (``closed``).

The subject is an argument of every tool (the key's grants decide whether it may be
touched, as the URL's subject does over HTTP); the writer of what a tool writes is the
key's principal, and ``agent`` only a label beside it.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Annotated, Any, Literal

from mcp.server.mcpserver import Context
from mcp.server.mcpserver.tools import Tool
from mcp_types import CallToolResult, TextContent, ToolAnnotations
from pydantic import BaseModel, ConfigDict, Field

from workers import wire
from workers.gateway import InvalidRequestError
from workers.mcp.backend import Backend
from workers.wire.models import Basis, Kind, Sensitivity

BackendOf = Callable[[Context[Any, Any], str], Backend]
"""The backend of a tool call: its context (the transport's request) and the tool's name."""

Subject = Annotated[str, Field(min_length=1, max_length=512, description="whose memories (the key must be granted it)")]
MemoryId = Annotated[str, Field(min_length=1, max_length=512, description="a memory id (UUIDv7)")]
Purpose = Annotated[str, Field(min_length=1, max_length=512, description="what the memory may be used for")]

READ_ONLY = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False)
ADDITIVE = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=False)
DESTRUCTIVE = ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=False, open_world_hint=False)


class History(BaseModel):
    """A memory's status and its content-free history, oldest revision first."""

    memory_id: str
    status: str
    history: list[wire.HistoryEntry]


def build_tools(backend_of: BackendOf) -> list[Tool]:
    """Every tool, bound to ``backend_of``."""

    def remember(
        ctx: Context[Any, Any],
        subject_id: Subject,
        content: Annotated[str, Field(description="the memory's text")],
        purpose: Purpose,
        kind: Kind = "fact",
        key: Annotated[str | None, Field(description="the attribute it answers (the unit of supersession)")] = None,
        scope: Annotated[str, Field(description="subject, document:ID or workspace:ID")] = "subject",
        sensitivity: Sensitivity = "internal",
        expires_at: Annotated[datetime | None, Field(description="ISO 8601 with a zone")] = None,
        basis: Basis = "indefinite",
        consent_ref: str | None = None,
        turn_id: str | None = None,
        tool_call_id: str | None = None,
        source_ref: str | None = None,
        derived_from: Annotated[list[str] | None, Field(description="sources of an inference")] = None,
        confirmed: bool = False,
        agent: Annotated[str | None, Field(description="the calling agent's own label")] = None,
    ) -> wire.CommandAck:
        """Remember something about a subject: one memory, answered once the log has
        its events (their ids and log positions: pass the positions as recall's
        wait_for to read your own write). A memory with the key of a live one
        supersedes it when the subject stated it; the same statement again raises the
        confidence of the one already held."""
        fields = {
            "content": content,
            "purpose": purpose,
            "kind": kind,
            "key": key,
            "scope": scope,
            "sensitivity": sensitivity,
            "expires_at": expires_at,
            "basis": basis,
            "consent_ref": consent_ref,
            "turn_id": turn_id,
            "tool_call_id": tool_call_id,
            "source_ref": source_ref,
            "derived_from": derived_from or [],
            "confirmed": confirmed,
            "agent": agent,
        }
        req = wire.WriteMemory.model_validate({k: v for k, v in fields.items() if v is not None})
        return backend_of(ctx, "remember").write(subject_id, req)

    def recall(
        ctx: Context[Any, Any],
        subject_id: Subject,
        query: Annotated[str, Field(description="what the task needs to know")],
        purpose: Purpose,
        k: Annotated[int, Field(ge=1, le=1000)] = 10,
        scope: Annotated[list[str] | None, Field(description="the task's document:ID or workspace:ID")] = None,
        include_unconfirmed: bool = False,
        now: Annotated[datetime | None, Field(description="judge expiry at this time (ISO 8601, zone)")] = None,
        wait_for: Annotated[list[wire.LogPosition] | None, Field(description="positions to read after")] = None,
        wait_timeout_s: Annotated[float, Field(ge=0, le=60)] = 5.0,
    ) -> wire.RecallResult:
        """Recall a subject's memories for a task: only this purpose and scope, nothing
        revoked, superseded, expired or erased, each item with its provenance."""
        req = wire.Recall(
            query=query,
            purpose=purpose,
            k=k,
            now=now,
            scope=scope or [],
            include_unconfirmed=include_unconfirmed,
            wait_for=wait_for or [],
            wait_timeout_s=wait_timeout_s,
        )
        return backend_of(ctx, "recall").recall(subject_id, req)

    def get(ctx: Context[Any, Any], subject_id: Subject, memory_id: MemoryId) -> wire.MemoryDetail:
        """One memory of the subject, with its status and content-free history."""
        return backend_of(ctx, "get").memory(subject_id, memory_id)

    def list_(
        ctx: Context[Any, Any],
        subject_id: Subject,
        include_all: Annotated[bool, Field(description="every status, erased included")] = False,
        limit: Annotated[int, Field(ge=1, le=500)] = 100,
        after: Annotated[str | None, Field(description="next_after of the previous page")] = None,
    ) -> wire.MemoryPage:
        """A page of the subject's memories with status, key, revision and what
        superseded what (live ones unless include_all)."""
        return backend_of(ctx, "list").memories(subject_id, include_all, limit, after)

    def history(ctx: Context[Any, Any], subject_id: Subject, memory_id: MemoryId) -> History:
        """A memory's history, revision by revision: event, status, log position; no content."""
        found = backend_of(ctx, "history").memory(subject_id, memory_id)
        return History(memory_id=found.memory.memory_id, status=found.memory.status, history=found.history)

    def forget(
        ctx: Context[Any, Any],
        subject_id: Subject,
        memory_ids: Annotated[list[str] | None, Field(description="the memories to erase")] = None,
        source: Annotated[str | None, Field(description="or: a turn, tool call or source they came from")] = None,
        reason: Annotated[str, Field(min_length=1, max_length=512)] = "erasure requested by the subject",
        confirm: Annotated[bool, Field(description="must be true: the erasure cannot be undone")] = False,
        with_history: Annotated[
            bool,
            Field(
                description="also erase every earlier version: those they superseded, through any chain, and the"
                " earlier memories of their key, no longer live, that still hold content"
            ),
        ] = False,
    ) -> wire.CommandAck:
        """Erase memories of the subject, and everything derived from them, for good:
        their keys are destroyed, no replay brings them back. Needs the erase scope and
        confirm=true; returns the erasure's request_id, which trace follows store by store.
        Without with_history an earlier version whose replacement is erased awaits
        confirmation again (listed in reinstated); those still holding content are listed
        in earlier_versions; a claim left alone in its key by the erasure of its rival in a
        conflict awaits confirmation, no longer disputed (listed in rivals_reinstated)."""
        if not confirm:
            raise InvalidRequestError(
                "confirm", "must be true: forget erases the memories and what was derived from them, irreversibly"
            )
        req = wire.Erase(memory_ids=memory_ids or [], source=source, reason=reason, with_history=with_history)
        return backend_of(ctx, "forget").erase(subject_id, req)

    def trace(
        ctx: Context[Any, Any],
        request_id: Annotated[str, Field(min_length=1, max_length=512, description="an erasure's request id")],
    ) -> wire.TraceOut:
        """Where an erasure was applied, store by store (applied at, log offset, live
        probes), and the verdict. Needs the erase scope on the request's subject."""
        return backend_of(ctx, "trace").trace(request_id)

    def memory(
        ctx: Context[Any, Any],
        subject_id: Subject,
        command: Literal["view", "create", "str_replace", "insert", "delete", "rename"],
        path: str | None = None,
        file_text: str | None = None,
        old_str: str | None = None,
        new_str: str | None = None,
        insert_line: int | None = None,
        insert_text: str | None = None,
        old_path: str | None = None,
        new_path: str | None = None,
        view_range: list[int] | None = None,
        content_sha256: Annotated[str | None, Field(description="refuse unless the file is still this")] = None,
        purpose: Purpose = wire.DEFAULT_PURPOSE,
    ) -> CallToolResult:
        """The memory tool (as Anthropic's memory_20250818): files under /memories that
        are memories of the subject. view a directory or a file's numbered lines;
        create a file; str_replace a unique text; insert lines after insert_line;
        delete (an erasure, with a request id to trace); rename a file or directory.
        A file's content_sha256 (given by view) refuses a stale edit."""
        args = {
            "command": command,
            "path": path,
            "file_text": file_text,
            "old_str": old_str,
            "new_str": new_str,
            "insert_line": insert_line,
            "insert_text": insert_text,
            "old_path": old_path,
            "new_path": new_path,
            "view_range": view_range,
            "content_sha256": content_sha256,
            "purpose": purpose,
        }
        parsed = wire.MEMORY_COMMAND.validate_python({k: v for k, v in args.items() if v is not None})
        result = backend_of(ctx, "memory").memory_tool(subject_id, parsed)
        return CallToolResult(
            content=[TextContent(type="text", text=result.output)], structured_content=result.model_dump(mode="json")
        )

    tools = [
        closed(tool)
        for tool in (
            Tool.from_function(remember, annotations=ADDITIVE),
            Tool.from_function(recall, annotations=READ_ONLY),
            Tool.from_function(get, annotations=READ_ONLY),
            Tool.from_function(list_, name="list", annotations=READ_ONLY),
            Tool.from_function(history, annotations=READ_ONLY),
            Tool.from_function(forget, annotations=DESTRUCTIVE),
            Tool.from_function(trace, annotations=READ_ONLY),
            Tool.from_function(memory, annotations=DESTRUCTIVE),
        )
    ]
    memory_tool = tools[-1]
    memory_tool.fn_metadata.output_model = wire.MemoryToolResult  # the text is the output, the structure the result
    memory_tool.fn_metadata.output_schema = wire.MemoryToolResult.model_json_schema()
    return tools


def closed(tool: Tool) -> Tool:
    """``tool`` refusing arguments it does not take: its arguments model (the SDK's
    ignores unknown keys) forbids extra fields, so a call with one fails validation with
    ``<argument>: Extra inputs are not permitted``, answered as a tool error naming it,
    and its input schema says ``additionalProperties: false``. Returns ``tool``, changed."""
    model = tool.fn_metadata.arg_model  # made for this tool alone (``func_metadata``)
    model.model_config = model.model_config | ConfigDict(extra="forbid")
    model.model_rebuild(force=True)
    tool.parameters = model.model_json_schema(by_alias=True)
    return tool
