"""The anthropic SDK adapter without a server: the bodies it sends for the model's tool
input (the purpose, the content_sha256 of a file it saw), what it forgets, and how a
refusal reaches the model. The ledger's side is a recording httpx transport."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest
from anthropic.lib.tools import ToolError

from workers import wire
from workers.client import AsyncLedgerClient, LedgerClient, RetryPolicy
from workers.memtool.adapter import AsyncLedgerMemoryTool, LedgerMemoryTool

SHA = "a" * 64
STALE = "b" * 64
PROBLEM = {"title": "Conflict", "status": 409, "detail": "content_sha256: changed", "field": "content_sha256"}


class FakeRoute:
    """``POST /v1/subjects/{subject}/memory-tool``: records each body, answers as the route would."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        self.bodies.append(body)
        path = body.get("path") or body.get("new_path")
        if body.get("content_sha256") == STALE:
            return httpx.Response(409, json=PROBLEM, headers={"content-type": "application/problem+json"})
        files = [] if body["command"] == "delete" else [
            {"path": path, "memory_id": "m", "revision": 1, "content_sha256": SHA, "size_bytes": 3}
        ]  # fmt: skip
        result = wire.MemoryToolResult(command=body["command"], output=f"did {body['command']}", path=path, files=files)
        return httpx.Response(200, json=result.model_dump(mode="json"))


def test_the_sync_tool_sends_what_the_model_saw() -> None:
    route = FakeRoute()
    client = LedgerClient("http://ledger", "mlk_t", transport=httpx.MockTransport(route), retry=RetryPolicy(attempts=1))
    tool = LedgerMemoryTool(client, "alice", purpose="notes")
    assert tool.to_dict() == {"type": "memory_20250818", "name": "memory"}
    assert tool.call({"command": "view", "path": "/memories/a.md"}) == "did view"
    tool.call({"command": "str_replace", "path": "/memories/a.md", "old_str": "x", "new_str": "y"})
    tool.call({"command": "insert", "path": "/memories/b.md", "insert_line": 0, "insert_text": "z"})  # never seen
    tool.call({"command": "rename", "old_path": "/memories/a.md", "new_path": "/memories/c.md"})
    tool.call({"command": "delete", "path": "/memories/c.md"})
    tool.call({"command": "create", "path": "/memories/c.md", "file_text": "again"})  # forgotten with the delete
    sent = [(b["command"], b.get("content_sha256")) for b in route.bodies]
    assert sent == [
        ("view", None),
        ("str_replace", SHA),
        ("insert", None),
        ("rename", SHA),
        ("delete", SHA),
        ("create", None),
    ]
    assert {b["purpose"] for b in route.bodies} == {"notes"}
    with pytest.raises(ToolError) as malformed:
        tool.call({"command": "insert", "path": "/memories/b.md"})  # no insert_line: the model's mistake
    assert str(malformed.value).startswith("error: insert.insert_line: ")
    client.close()


def test_a_stale_edit_is_a_tool_error_and_is_forgotten() -> None:
    route = FakeRoute()
    client = LedgerClient("http://ledger", "mlk_t", transport=httpx.MockTransport(route), retry=RetryPolicy(attempts=1))
    tool = LedgerMemoryTool(client, "alice")
    tool.call({"command": "view", "path": "/memories/a.md"})
    tool._seen._sha["/memories/a.md"] = STALE  # as if another agent changed the file since
    with pytest.raises(ToolError) as stale:
        tool.call({"command": "str_replace", "path": "/memories/a.md", "old_str": "x", "new_str": "y"})
    assert str(stale.value) == "error: content_sha256: changed"
    tool.call({"command": "str_replace", "path": "/memories/a.md", "old_str": "x", "new_str": "y"})
    assert route.bodies[-1].get("content_sha256") is None  # no stale precondition sent again
    client.close()


def test_the_async_tool_does_the_same() -> None:
    route = FakeRoute()

    async def run() -> list[str]:
        async with AsyncLedgerClient("http://ledger", "mlk_t", transport=httpx.MockTransport(route)) as client:
            tool = AsyncLedgerMemoryTool(client, "alice")
            first = await tool.call({"command": "create", "path": "/memories/a.md", "file_text": "x"})
            second = await tool.call(
                {"command": "insert", "path": "/memories/a.md", "insert_line": 1, "insert_text": "y"}
            )
            return [str(first), str(second)]

    assert asyncio.run(run()) == ["did create", "did insert"]
    assert [b.get("content_sha256") for b in route.bodies] == [None, SHA]
