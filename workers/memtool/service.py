"""The memory tool of the Anthropic API (``memory_20250818``) backed by the ledger,
transport-independent: the HTTP route of ``memledger serve`` and the ``memory`` MCP tool
are thin over :class:`MemoryTool`.

One command runs as: take the tree's lock (``Gateway.serialised``, so that commands on one
subject's files for one purpose run one at a time across API processes), read the tree
from the ledger's own state (``Gateway.live_memories``), decide (``workers.memtool.plan``,
no I/O), and carry the plan out through the gateway, which authorises, rate-limits and
audits each step: a new file is a ``write``, an edit, overwrite or rename a
``supersede`` of the file's current memory (a directory's files in one transaction),
``delete`` an erasure of the files' memories and every earlier revision, whose request
id ``trace`` follows.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Final

from ledger.service import new_id
from workers import wire
from workers.gateway import Caller, Gateway
from workers.memtool import paths
from workers.memtool.files import FILE_REF, File, Tree
from workers.memtool.plan import Plan, Put, decide

KIND: Final = "fact"
VERACITY: Final = "inferred"
"""A file is the agent's own note: recorded as inferred by an agent (confidence 0.7)."""

ERASURE_REASON = "deleted with the memory tool"
ERASURE_BASIS = "deletion by the agent (memory tool)"


class MemoryTool:
    """The memory tool over ``gateway``."""

    def __init__(self, gateway: Gateway) -> None:
        self.gateway = gateway

    def execute(self, caller: Caller, subject_id: str, command: wire.MemoryCommand) -> wire.MemoryToolResult:
        """Run ``command`` on ``subject_id``'s files for ``command.purpose``.

        Raises:
            ForbiddenError: the key may not read the subject (or not write, or not
                erase, for a command that does).
            InvalidRequestError, NotFoundError, ConflictError: the refusals of
                ``workers.memtool.plan`` (nothing was written).
            RateLimitedError, UnavailableError.
        """
        caller = caller.through(f"{caller.via} {command.command}".strip())
        self.gateway.authorise(caller, "read", subject_id)
        with self.gateway.serialised("memory-tool " + json.dumps([subject_id, command.purpose])):
            live = self.gateway.live_memories(caller, subject_id, command.purpose, paths.ROOT + "/")
            plan = decide(command, Tree.of(live))
            return self._carry_out(caller, subject_id, command.purpose, plan)

    def _carry_out(self, caller: Caller, subject_id: str, purpose: str, plan: Plan) -> wire.MemoryToolResult:
        result = wire.MemoryToolResult(command=plan.command, output=plan.output, path=plan.path)
        if plan.viewed is not None:
            result.files.append(_file_out(plan.viewed))
        if plan.puts:
            acks = self._put(caller, subject_id, purpose, plan.puts)
            for put, acked in zip(plan.puts, acks, strict=True):
                result.files.append(_file_out(File(put.path, acked.memory_id or "", 1, put.content)))
                _add(result, acked)
        if plan.erase:
            acked = self._erase(caller, subject_id, plan.erase)
            result.erased = list(acked.affected)
            result.request_id = acked.request_id
            result.output += _trace_hint(acked.request_id)
            _add(result, acked)
        return result

    def _put(self, caller: Caller, subject_id: str, purpose: str, puts: Sequence[Put]) -> list[wire.CommandAck]:
        """Write the plan's files: a new memory for a new file, a supersession for a new
        revision (several in one transaction)."""
        new = [p for p in puts if p.old is None]
        if new:
            assert len(puts) == 1, "a plan creates one file at a time"
            memory = wire.WriteMemory(
                content=new[0].content,
                purpose=purpose,
                kind=KIND,
                key=new[0].path,
                source_ref=FILE_REF + new_id(),
                veracity=VERACITY,
            )
            return [self.gateway.write(caller, subject_id, memory)]
        replacements = [(p.old.memory_id, _revision(p, p.old)) for p in puts if p.old is not None]
        return list(self.gateway.supersede_many(caller, subject_id, replacements).results)

    def _erase(self, caller: Caller, subject_id: str, files: Sequence[File]) -> wire.CommandAck:
        """Erase the files' memories and every earlier revision of each (same ``source_ref``)."""
        refs = [f.file_ref for f in files if f.file_ref is not None]
        earlier = self.gateway.revisions(caller, subject_id, refs) if refs else []
        ids = list(dict.fromkeys([m for f in files for m in f.memory_ids] + earlier))
        # built, not validated: the wire's bound on memory_ids (1,000) keeps request bodies small,
        # and an often edited file has more revisions than that; the ledger's command takes them all
        request = wire.Erase.model_construct(
            memory_ids=ids, whole_subject=False, source=None, reason=ERASURE_REASON, legal_basis=ERASURE_BASIS
        )
        return self.gateway.erase(caller, subject_id, request)


def _revision(put: Put, old: File) -> wire.Supersede:
    """The supersession that makes ``put`` the new revision of ``old``: same file identity
    (a file written elsewhere gets one now), the path as its key."""
    return wire.Supersede(
        content=put.content, key=put.path, source_ref=old.file_ref or FILE_REF + new_id(), veracity=VERACITY
    )


def _file_out(f: File) -> wire.MemoryFileOut:
    """A file as the result lists it (a file just written is a new memory: revision 1)."""
    return wire.MemoryFileOut(
        path=f.path, memory_id=f.memory_id, revision=f.revision, content_sha256=f.sha256, size_bytes=f.size_bytes
    )


def _add(result: wire.MemoryToolResult, acked: wire.CommandAck) -> None:
    result.events.extend(acked.events)
    result.positions.extend(acked.positions)


def retry_record(result: wire.MemoryToolResult) -> wire.MemoryToolResult:
    """What an idempotency record keeps of a command's result: what it appended and
    erased (events, positions, the erasure request), not its output, path or files, which
    hold the files' text and names: an erasure of the files must leave nothing of them
    in the gateway's tables."""
    return result.model_copy(update={"output": "", "path": "", "files": []})


def retry_answer(command: wire.MemoryCommand, record: wire.MemoryToolResult) -> wire.MemoryToolResult:
    """The answer to a retry of ``command`` (same Idempotency-Key, same request) from the
    first attempt's ``retry_record``: its events, positions and erasure request, the path
    of the request, and an output that says nothing was done again (no files: their text
    was not kept)."""
    path = command.new_path if isinstance(command, wire.MemoryRename) else command.path
    output = (
        f"A retry of an earlier {record.command} of {path} with this Idempotency-Key: it was done then,"
        " and nothing was done again."
    )
    if record.request_id is not None:
        output += _trace_hint(record.request_id)
    return record.model_copy(update={"output": output, "path": path})


def _trace_hint(request_id: str | None) -> str:
    return f" Erasure request {request_id}: trace it to see every store it reached."
