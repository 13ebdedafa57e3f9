"""The memory tool without I/O: the path rules (examples and a property over arbitrary
text), what each command plans on a tree of files, and what the model reads back."""

from __future__ import annotations

import unicodedata
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from workers import wire
from workers.gateway import ConflictError, GatewayError, InvalidRequestError, NotFoundError
from workers.memtool import paths, render
from workers.memtool.files import File, Tree
from workers.memtool.plan import decide


@pytest.mark.parametrize(
    ("given_path", "canonical"),
    [
        ("/memories", "/memories"),
        ("/memories/", "/memories"),
        ("/memories/notes", "/memories/notes"),
        ("/memories/notes/", "/memories/notes"),
        ("/memories/a b/été.md", "/memories/a b/été.md"),
        ("/memories/v1.2/x..y.md", "/memories/v1.2/x..y.md"),
    ],
)
def test_good_paths_are_canonical(given_path: str, canonical: str) -> None:
    assert paths.parse(given_path) == canonical


@pytest.mark.parametrize(
    ("bad", "words"),
    [
        ("", "must be a path under /memories"),
        ("/etc/passwd", "must start with /memories/"),
        ("/memoriesX/a", "must start with /memories/"),
        ("memories/a", "must start with /memories/"),
        ("/memories/../a", "'.' or '..'"),
        ("/memories/a/./b", "'.' or '..'"),
        ("/memories/...", "'.' or '..'"),
        ("/memories/\uff0e\uff0e/a", "'.' or '..'"),  # fullwidth full stops
        ("/memories/\u2025/a", "'.' or '..'"),  # two dot leader
        ("/memories/%2e%2e/a", "'%'"),
        ("/memories/%252e/a", "'%'"),
        ("/memories/a\\b", "'\\'"),
        ("/memories/a\uff0fb", "reads as '/'"),  # fullwidth solidus
        ("/memories//a", "empty name"),
        ("/memories/.env", "hidden"),
        ("/memories/a\x00b", "control or invisible"),
        ("/memories/a\u200bb", "control or invisible"),  # zero width space
        ("/memories/\u202eexe.txt", "control or invisible"),  # right-to-left override
        ("/memories/ a", "white space"),
        ("/memories/" + "é" * 128, "255 bytes"),
        ("/memories/" + "a/" * 17 + "f", "16 names deep"),
        ("/memories/" + "abcdefgh/" * 57, "512 bytes"),
    ],
)
def test_bad_paths_are_refused_naming_the_rule(bad: str, words: str) -> None:
    with pytest.raises(InvalidRequestError) as refused:
        paths.parse(bad, "new_path")
    assert refused.value.field == "new_path" and words in refused.value.rule


@given(st.text(max_size=80).map(lambda s: "/memories/" + s))
def test_whatever_is_accepted_stays_under_memories_in_any_spelling(candidate: str) -> None:
    try:
        parsed = paths.parse(candidate)
    except GatewayError:
        return
    names = parsed.split("/")[2:]
    assert parsed == "/memories" or parsed.startswith("/memories/")
    for name in names:
        folded = unicodedata.normalize("NFKC", name)
        assert folded.strip(".") and not folded.startswith(".") and "/" not in folded and "\\" not in folded
    assert "%" not in parsed and paths.parse(parsed) == parsed


def tree(**files: str) -> Tree:
    return Tree(File(p, f"m-{i}", 1, c, f"memory-file:{i}") for i, (p, c) in enumerate(files.items()))


def cmd(**fields: Any) -> wire.MemoryCommand:
    return wire.MEMORY_COMMAND.validate_python(fields)


FILES = {"/memories/notes/a.md": "one\ntwo\nthree\n", "/memories/notes/deep/b.md": "bee", "/memories/top.md": "top"}


def test_view_lists_two_levels_and_numbers_lines() -> None:
    t = tree(**FILES)
    listing = decide(cmd(command="view", path="/memories"), t).output.splitlines()
    assert listing[1:] == [
        "20B\t/memories",
        "17B\t/memories/notes/",
        "14B\t/memories/notes/a.md",
        "3B\t/memories/notes/deep/",
        "3B\t/memories/top.md",
    ]
    shown = decide(cmd(command="view", path="/memories/notes/a.md", view_range=[2, 3]), t)
    assert shown.output.splitlines()[1:] == ["     2\ttwo", "     3\tthree"] and shown.viewed is not None
    assert shown.viewed.sha256 in shown.output


def test_edits_plan_new_revisions_of_the_file() -> None:
    t = tree(**FILES)
    replaced = decide(cmd(command="str_replace", path="/memories/notes/a.md", old_str="two", new_str="2"), t)
    assert [(p.path, p.content, p.old.memory_id if p.old else None) for p in replaced.puts] == [
        ("/memories/notes/a.md", "one\n2\nthree\n", "m-0")
    ]
    inserted = decide(cmd(command="insert", path="/memories/top.md", insert_line=1, insert_text="after\n"), t)
    assert inserted.puts[0].content == "top\nafter\n"
    moved = decide(cmd(command="rename", old_path="/memories/notes", new_path="/memories/old"), t)
    assert [p.path for p in moved.puts] == ["/memories/old/a.md", "/memories/old/deep/b.md"]
    assert [f.path for f in decide(cmd(command="delete", path="/memories/notes"), t).erase] == [
        "/memories/notes/a.md",
        "/memories/notes/deep/b.md",
    ]
    made = decide(cmd(command="create", path="/memories/new/c.md", file_text="c"), t)
    assert made.puts[0].old is None


@pytest.mark.parametrize(
    ("command", "error", "field"),
    [
        ({"command": "view", "path": "/memories/none"}, NotFoundError, "path"),
        ({"command": "view", "path": "/memories/notes", "view_range": [1, 2]}, InvalidRequestError, "view_range"),
        ({"command": "view", "path": "/memories/top.md", "view_range": [5, -1]}, InvalidRequestError, "view_range"),
        ({"command": "create", "path": "/memories", "file_text": "x"}, InvalidRequestError, "path"),
        ({"command": "create", "path": "/memories/notes", "file_text": "x"}, ConflictError, "path"),
        ({"command": "create", "path": "/memories/top.md/x", "file_text": "x"}, ConflictError, "path"),
        ({"command": "create", "path": "/memories/top.md", "file_text": "x"}, ConflictError, "path"),
        ({"command": "create", "path": "/memories/c.md", "file_text": "a\x07b"}, InvalidRequestError, "file_text"),
        ({"command": "create", "path": "/memories/c.md", "file_text": "x", "content_sha256": "0" * 64}, ConflictError,
         "content_sha256"),
        ({"command": "str_replace", "path": "/memories/notes", "old_str": "a", "new_str": "b"}, InvalidRequestError,
         "path"),
        ({"command": "str_replace", "path": "/memories/top.md", "old_str": "", "new_str": "b"}, InvalidRequestError,
         "old_str"),
        ({"command": "insert", "path": "/memories/top.md", "insert_line": -1, "insert_text": "x"}, InvalidRequestError,
         "insert_line"),
        ({"command": "delete", "path": "/memories/notes", "content_sha256": "0" * 64}, InvalidRequestError,
         "content_sha256"),
        ({"command": "delete", "path": "/memories/none"}, NotFoundError, "path"),
        ({"command": "rename", "old_path": "/memories", "new_path": "/memories/x"}, InvalidRequestError, "old_path"),
        ({"command": "rename", "old_path": "/memories/notes", "new_path": "/memories/notes/in"}, InvalidRequestError,
         "new_path"),
        ({"command": "rename", "old_path": "/memories/top.md", "new_path": "/memories/notes"}, ConflictError,
         "new_path"),
        ({"command": "rename", "old_path": "/memories/notes", "new_path": "/memories/top.md/x"}, ConflictError,
         "new_path"),
    ],
)  # fmt: skip
def test_refusals_name_the_field(command: dict[str, Any], error: type[GatewayError], field: str) -> None:
    with pytest.raises(error) as refused:
        decide(cmd(**command), tree(**FILES))
    assert refused.value.field == field


def test_a_sha_precondition_must_match_the_file() -> None:
    t = tree(**FILES)
    current = t.file("/memories/top.md")
    assert current is not None
    ok = decide(cmd(command="create", path="/memories/top.md", file_text="new", content_sha256=current.sha256), t)
    assert ok.puts[0].old is current and ok.output.startswith("Replaced")
    with pytest.raises(ConflictError) as stale:
        decide(cmd(command="delete", path="/memories/top.md", content_sha256="f" * 64), t)
    assert current.sha256 in stale.value.rule and "view it again" in stale.value.rule


@pytest.mark.parametrize(
    ("size", "shown"), [(0, "0B"), (512, "512B"), (1536, "1.5K"), (2 * 1024**2, "2M"), (3 * 1024**3, "3G")]
)
def test_sizes_read_as_the_sdk_shows_them(size: int, shown: str) -> None:
    assert render.human_size(size) == shown
