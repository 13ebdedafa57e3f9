"""The bodies of the memory tool route (``POST /v1/subjects/{subject_id}/memory-tool``)
and of the ``memory`` MCP tool: the commands of the Anthropic API's memory tool
(``memory_20250818``: ``view``, ``create``, ``str_replace``, ``insert``, ``delete``,
``rename``, with the fields the model sends) and what a command did.

Two fields are this ledger's own, both optional, so the model's input is a valid body as
it is: ``purpose`` (whose tree of files, default ``agent_memory``: each purpose has its
own ``/memories``) and ``content_sha256``, a precondition on a command that changes a
file: the SHA-256 (hex) of the file's UTF-8 bytes as the caller last saw it; the command
is refused with 409 when the file has changed since. The path rules and size limits are
the memory tool's (``workers.memtool.paths``); here are only bounds that keep a body small.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, TypeAdapter

from workers.wire.models import EventRef, LogPosition, Request, Response

DEFAULT_PURPOSE = "agent_memory"
"""The purpose of memory tool files when a command names none."""

_Path = Annotated[str, Field(max_length=4096, description="a path under /memories, e.g. /memories/notes.md")]
_Text = Annotated[str, Field(max_length=1_048_576)]
_Sha256 = Annotated[
    str | None,
    Field(
        default=None,
        pattern=r"^[0-9a-f]{64}$",
        description="refuse the command (409) unless the file's SHA-256 (hex, of its UTF-8 bytes) is this",
    ),
]
_Purpose = Annotated[
    str, Field(default=DEFAULT_PURPOSE, min_length=1, max_length=512, description="whose tree of files")
]


class MemoryView(Request):
    """A directory's files (two levels deep) or a file's lines, numbered from 1;
    ``view_range``: ``[first, last]`` lines, ``last`` -1 for the end."""

    command: Literal["view"]
    path: _Path
    view_range: list[Annotated[int, Field(strict=True)]] | None = Field(default=None, min_length=2, max_length=2)
    purpose: _Purpose


class MemoryCreate(Request):
    """A new file holding ``file_text``. An existing file is replaced only with its
    ``content_sha256`` (the caller saw what it overwrites)."""

    command: Literal["create"]
    path: _Path
    file_text: _Text
    content_sha256: _Sha256
    purpose: _Purpose


class MemoryStrReplace(Request):
    """Replace the one occurrence of ``old_str`` in a file with ``new_str``."""

    command: Literal["str_replace"]
    path: _Path
    old_str: _Text
    new_str: _Text
    content_sha256: _Sha256
    purpose: _Purpose


class MemoryInsert(Request):
    """Insert ``insert_text`` as lines after line ``insert_line`` (0: at the top)."""

    command: Literal["insert"]
    path: _Path
    insert_line: int = Field(ge=-(2**31), le=2**31, strict=True)
    insert_text: _Text
    content_sha256: _Sha256
    purpose: _Purpose


class MemoryDelete(Request):
    """Erase a file, or a directory and every file under it, with every earlier revision
    (an erasure: it needs the erase scope, and returns its request id for ``trace``)."""

    command: Literal["delete"]
    path: _Path
    content_sha256: _Sha256
    purpose: _Purpose


class MemoryRename(Request):
    """Move a file or a directory to ``new_path``, which must not exist."""

    command: Literal["rename"]
    old_path: _Path
    new_path: _Path
    content_sha256: _Sha256
    purpose: _Purpose


MemoryCommand = Annotated[
    MemoryView | MemoryCreate | MemoryStrReplace | MemoryInsert | MemoryDelete | MemoryRename,
    Field(discriminator="command"),
]
"""One memory tool command, told apart by its ``command`` field."""

MEMORY_COMMAND: TypeAdapter[MemoryCommand] = TypeAdapter(MemoryCommand)
"""Validates a memory tool command (the model's tool input) into its model."""


class MemoryFileOut(Response):
    """A file as the ledger holds it: the memory that is its current revision."""

    path: str
    memory_id: str
    revision: int
    content_sha256: str
    size_bytes: int


class MemoryToolResult(Response):
    """What a command did. ``output``: the text for the model (a listing, numbered lines,
    or what changed); ``files``: the file viewed, or the files written, with their
    memories and SHA-256; ``erased`` and ``request_id``: the memories a ``delete``
    erased and its erasure request (``trace`` follows it store by store); ``events`` and
    ``positions``: what the command appended to the log (none for ``view``)."""

    command: str
    output: str
    path: str
    files: list[MemoryFileOut] = Field(default_factory=list)
    erased: list[str] = Field(default_factory=list)
    request_id: str | None = None
    events: list[EventRef] = Field(default_factory=list)
    positions: list[LogPosition] = Field(default_factory=list)
