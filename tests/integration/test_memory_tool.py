"""The memory tool over the gateway, on the test services: every command against the
ledger's real state, the events it appends, its refusals (nothing written), and an
erasure that reaches every revision of a file."""

from __future__ import annotations

from typing import Any

import pytest

from tests.integration.conftest import caller
from workers import wire
from workers.bootstrap import Services
from workers.gateway import Caller, ConflictError, ForbiddenError, Gateway, InvalidRequestError, NotFoundError
from workers.memtool.service import MemoryTool

pytestmark = pytest.mark.integration


def run(tool: MemoryTool, who: Caller, subject: str, **command: Any) -> wire.MemoryToolResult:
    return tool.execute(who, subject, wire.MEMORY_COMMAND.validate_python(command))


def test_every_command_changes_files_through_events(gateway: Gateway, svc: Services) -> None:
    tool, alice = MemoryTool(gateway), caller(gateway, "alice")
    made = run(tool, alice, "alice", command="create", path="/memories/notes/prefs.md", file_text="tea\ncoffee\n")
    assert [e.type for e in made.events] == ["MemoryWritten"] and made.positions
    first = made.files[0]
    assert first.path == "/memories/notes/prefs.md" and first.size_bytes == len("tea\ncoffee\n")

    listing = run(tool, alice, "alice", command="view", path="/memories")
    assert "/memories/notes/\n" in listing.output + "\n" and "/memories/notes/prefs.md" in listing.output
    assert listing.events == []
    shown = run(tool, alice, "alice", command="view", path="/memories/notes/prefs.md", view_range=[2, -1])
    assert shown.output.endswith("     2\tcoffee") and shown.files[0].content_sha256 == first.content_sha256

    edited = run(
        tool, alice, "alice", command="str_replace", path="/memories/notes/prefs.md", old_str="tea", new_str="green tea"
    )
    assert {e.type for e in edited.events} == {"MemoryWritten", "MemorySuperseded"}
    assert "green tea" in edited.output
    inserted = run(
        tool, alice, "alice", command="insert", path="/memories/notes/prefs.md", insert_line=0, insert_text="# Drinks"
    )
    moved = run(tool, alice, "alice", command="rename", old_path="/memories/notes", new_path="/memories/drinks")
    assert moved.files[0].path == "/memories/drinks/prefs.md"
    head = svc.ledger.head(svc.principal(), "alice", moved.files[0].memory_id)
    assert head.key == "/memories/drinks/prefs.md" and head.veracity == "inferred"
    assert head.source_ref is not None and head.source_ref.startswith("memory-file:")

    content = run(tool, alice, "alice", command="view", path="/memories/drinks/prefs.md").output
    assert "# Drinks" in content and "green tea" in content and "coffee" in content

    revisions = [made, edited, inserted, moved]
    gone = run(tool, alice, "alice", command="delete", path="/memories/drinks")
    assert gone.request_id is not None and gone.request_id.startswith("er-")
    assert set(gone.erased) == {r.files[0].memory_id for r in revisions}  # every revision, not only the last
    with pytest.raises(NotFoundError):
        run(tool, alice, "alice", command="view", path="/memories/drinks/prefs.md")
    report = gateway.trace(caller(gateway, "alice"), gone.request_id)
    assert report.subject_id == "alice" and set(report.memory_ids) == set(gone.erased)


def test_refusals_name_the_field_and_write_nothing(gateway: Gateway, svc: Services) -> None:
    tool, alice = MemoryTool(gateway), caller(gateway, "alice")
    made = run(tool, alice, "alice", command="create", path="/memories/a.md", file_text="one\none\n")
    sha = made.files[0].content_sha256
    refusals: list[tuple[dict[str, Any], type[Exception], str]] = [
        ({"command": "create", "path": "/memories/a.md", "file_text": "x"}, ConflictError, "path"),
        ({"command": "create", "path": "/memories/a.md/b", "file_text": "x"}, ConflictError, "path"),
        ({"command": "create", "path": "/memories/b.md", "file_text": "   "}, InvalidRequestError, "file_text"),
        ({"command": "create", "path": "/memories/b.md", "file_text": "x" * 65_537}, InvalidRequestError, "file_text"),
        ({"command": "create", "path": "/memories/../b.md", "file_text": "x"}, InvalidRequestError, "path"),
        (
            {"command": "str_replace", "path": "/memories/a.md", "old_str": "one", "new_str": "2"},
            ConflictError,
            "old_str",
        ),
        (
            {"command": "str_replace", "path": "/memories/a.md", "old_str": "zzz", "new_str": "2"},
            ConflictError,
            "old_str",
        ),
        (
            {"command": "str_replace", "path": "/memories/a.md", "old_str": "one\none\n", "new_str": ""},
            InvalidRequestError,
            "new_str",
        ),
        (
            {"command": "insert", "path": "/memories/a.md", "insert_line": 9, "insert_text": "x"},
            InvalidRequestError,
            "insert_line",
        ),
        (
            {
                "command": "insert",
                "path": "/memories/a.md",
                "insert_line": 0,
                "insert_text": "x",
                "content_sha256": "0" * 64,
            },
            ConflictError,
            "content_sha256",
        ),
        ({"command": "view", "path": "/memories/nothing"}, NotFoundError, "path"),
        ({"command": "delete", "path": "/memories"}, InvalidRequestError, "path"),
        ({"command": "rename", "old_path": "/memories/a.md", "new_path": "/memories/a.md"}, ConflictError, "new_path"),
        ({"command": "rename", "old_path": "/memories/x", "new_path": "/memories/y"}, NotFoundError, "old_path"),
    ]
    before = svc.log.end_offsets()
    for command, error, field in refusals:
        with pytest.raises(error) as caught:
            run(tool, alice, "alice", **command)
        assert caught.value.field == field, (command, caught.value)
    assert svc.log.end_offsets() == before
    replaced = run(tool, alice, "alice", command="create", path="/memories/a.md", file_text="two", content_sha256=sha)
    assert replaced.output.startswith("Replaced")


def test_another_subjects_files_are_refused_and_audited(gateway: Gateway) -> None:
    tool, alice, bob = MemoryTool(gateway), caller(gateway, "alice"), caller(gateway, "bob")
    run(tool, alice, "alice", command="create", path="/memories/secret.md", file_text="alice's secret")
    for command in (
        {"command": "view", "path": "/memories"},
        {"command": "view", "path": "/memories/secret.md"},
        {"command": "delete", "path": "/memories/secret.md"},
    ):
        with pytest.raises(ForbiddenError) as caught:
            run(tool, bob, "alice", **command)
        assert "secret" not in str(caught.value)
    entries, _ = gateway.audit_log.list(100, None, "alice")
    refused = [e for e in entries if e.outcome == "refused" and e.principal == "agent-bob"]
    assert len(refused) == 3 and all("secret" not in e.reason for e in refused)
    assert run(tool, bob, "bob", command="view", path="/memories").output.count("\n") == 1  # bob's own tree is empty


def test_delete_needs_the_erase_scope(gateway: Gateway) -> None:
    tool, writer = MemoryTool(gateway), caller(gateway, "carol", ("read", "write"))
    run(tool, writer, "carol", command="create", path="/memories/keep.md", file_text="kept")
    with pytest.raises(ForbiddenError):
        run(tool, writer, "carol", command="delete", path="/memories/keep.md")
    assert "keep.md" in run(tool, writer, "carol", command="view", path="/memories").output
