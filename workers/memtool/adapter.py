"""The anthropic SDK's memory tool backed by the ledger: subclasses of its
``BetaAbstractMemoryTool`` (and ``BetaAsyncAbstractMemoryTool``) that send every command
the model gives to ``memledger serve``'s memory tool route, as one subject's files::

    from anthropic import Anthropic
    from workers.client import LedgerClient
    from workers.memtool.adapter import LedgerMemoryTool

    memory = LedgerMemoryTool(LedgerClient("http://127.0.0.1:8765", token), subject_id="alice")
    runner = Anthropic().beta.messages.tool_runner(
        model=MODEL, max_tokens=1024, tools=[memory], messages=[...]
    )

Needs ``pip install 'memory-ledger[anthropic]'`` and the client's dependencies only (no
server). The tool remembers the ``content_sha256`` of each file as the model last saw it
(viewed or wrote it) and sends it with the next command that changes that file, so an
edit made from a stale view (another agent changed the file meanwhile) is refused and
the model is told to view the file again. A refusal reaches the model as a tool error
(``anthropic.lib.tools.ToolError``): ``error: <field>: <rule>``.
"""

from __future__ import annotations

from typing import Any

from anthropic.lib.tools import BetaAbstractMemoryTool, BetaAsyncAbstractMemoryTool, ToolError
from anthropic.types.beta import (
    BetaCacheControlEphemeralParam,
    BetaMemoryTool20250818Command,
)
from pydantic import ValidationError

from workers import wire
from workers.client import ApiError, AsyncLedgerClient, LedgerClient, TransportError


class SeenFiles:
    """The SHA-256 of each file as the model last saw it, and the request bodies that
    carry them (shared by the sync and the async tool)."""

    def __init__(self, purpose: str) -> None:
        self.purpose = purpose
        self._sha: dict[str, str] = {}

    def body(self, command: BetaMemoryTool20250818Command) -> dict[str, Any]:
        """The route's body for the model's ``command``, with the precondition of the
        file it changes when that file was seen."""
        body: dict[str, Any] = command.model_dump(exclude_none=True)
        body["purpose"] = self.purpose
        target = body.get("old_path") if body["command"] == "rename" else body.get("path")
        if body["command"] != "view" and target in self._sha:
            body["content_sha256"] = self._sha[target]
        return body

    def learn(self, body: dict[str, Any], result: wire.MemoryToolResult) -> str:
        """Record what ``result`` showed of the files; returns the text for the model."""
        gone = body.get("old_path") if body["command"] == "rename" else body.get("path")
        if body["command"] in ("delete", "rename") and isinstance(gone, str):
            self._sha = {p: s for p, s in self._sha.items() if p != gone and not p.startswith(gone + "/")}
        for f in result.files:
            self._sha[f.path] = f.content_sha256
        return result.output

    def refusal(self, body: dict[str, Any], exc: ApiError | TransportError | ValidationError) -> ToolError:
        """The tool error of a refusal (or of a command the model shaped wrong); a stale
        precondition is forgotten, so the model's next view makes the file editable again."""
        if isinstance(exc, ValidationError):
            first = exc.errors(include_url=False)[0]
            field = ".".join(str(p) for p in first["loc"]) or "command"  # as the HTTP route names it
            return ToolError(f"error: {field}: {str(first['msg']).removeprefix('Value error, ')}")
        if isinstance(exc, TransportError):
            return ToolError(f"error: serve: the memory store did not answer ({exc}); try again later")
        if exc.field == "content_sha256":
            self._sha.pop(str(body.get("old_path") or body.get("path")), None)
        return ToolError(f"error: {exc.problem.detail}")


class LedgerMemoryTool(BetaAbstractMemoryTool):
    """The memory tool of ``subject_id`` through ``client`` (its API key must grant read
    and write on the subject, and erase for ``delete``); ``purpose`` picks the tree of
    files (and is what recall of these memories asks for)."""

    def __init__(
        self,
        client: LedgerClient,
        subject_id: str,
        *,
        purpose: str = wire.DEFAULT_PURPOSE,
        cache_control: BetaCacheControlEphemeralParam | None = None,
    ) -> None:
        super().__init__(cache_control=cache_control)
        self.client = client
        self.subject_id = subject_id
        self._seen = SeenFiles(purpose)
        self.last_result: wire.MemoryToolResult | None = None

    def _run(self, command: BetaMemoryTool20250818Command) -> str:
        body = self._seen.body(command)
        try:
            self.last_result = self.client.memory_tool(self.subject_id, body)
        except (ApiError, TransportError, ValidationError) as exc:
            raise self._seen.refusal(body, exc) from None
        return self._seen.learn(body, self.last_result)

    # every command goes the same way: the route decides what it does
    view = create = str_replace = insert = delete = rename = _run


class AsyncLedgerMemoryTool(BetaAsyncAbstractMemoryTool):
    """``LedgerMemoryTool`` for the SDK's async tool runner, through ``AsyncLedgerClient``."""

    def __init__(
        self,
        client: AsyncLedgerClient,
        subject_id: str,
        *,
        purpose: str = wire.DEFAULT_PURPOSE,
        cache_control: BetaCacheControlEphemeralParam | None = None,
    ) -> None:
        super().__init__(cache_control=cache_control)
        self.client = client
        self.subject_id = subject_id
        self._seen = SeenFiles(purpose)
        self.last_result: wire.MemoryToolResult | None = None

    async def _run(self, command: BetaMemoryTool20250818Command) -> str:
        body = self._seen.body(command)
        try:
            self.last_result = await self.client.memory_tool(self.subject_id, body)
        except (ApiError, TransportError, ValidationError) as exc:
            raise self._seen.refusal(body, exc) from None
        return self._seen.learn(body, self.last_result)

    view = create = str_replace = insert = delete = rename = _run
