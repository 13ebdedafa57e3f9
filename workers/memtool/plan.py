"""What a memory tool command does, decided from the tree of files it read (no I/O).

``decide(command, tree)`` returns a :class:`Plan`: the files to write (each a new
memory, or a new revision superseding the file's current one), the files to erase, the
file viewed, and the text for the model; or raises the refusal. The service
(``workers.memtool.service``) reads the tree, calls this, and carries the plan out
through the gateway.

Refusals: ``InvalidRequestError`` (422) for input that breaks a rule by itself (a path
rule, an empty text, a line number out of range), ``NotFoundError`` (404) for a path
that does not exist, ``ConflictError`` (409) for a command that does not fit the files
as they are (the path exists already, ``old_str`` is not there exactly once, a stale
``content_sha256``).
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import TypeAdapter, ValidationError

from contracts.types import Content
from workers import wire
from workers.gateway.errors import ConflictError, InvalidRequestError, NotFoundError
from workers.memtool import paths, render
from workers.memtool.files import MAX_FILES, File, Tree

_CONTENT: TypeAdapter[str] = TypeAdapter(Content)


@dataclass(frozen=True)
class Put:
    """Write ``content`` at ``path``: a new file, or a new revision of ``old``."""

    path: str
    content: str
    old: File | None = None


@dataclass(frozen=True)
class Plan:
    """What one command does. ``output`` is the text for the model."""

    command: str
    path: str
    output: str
    puts: tuple[Put, ...] = ()
    erase: tuple[File, ...] = ()
    viewed: File | None = None


def decide(command: wire.MemoryCommand, tree: Tree) -> Plan:
    """The plan of ``command`` on ``tree``. Raises the refusals listed above, naming the field."""
    if isinstance(command, wire.MemoryView):
        return _view(command, tree)
    if isinstance(command, wire.MemoryCreate):
        return _create(command, tree)
    if isinstance(command, wire.MemoryStrReplace):
        return _str_replace(command, tree)
    if isinstance(command, wire.MemoryInsert):
        return _insert(command, tree)
    if isinstance(command, wire.MemoryDelete):
        return _delete(command, tree)
    return _rename(command, tree)


def _view(cmd: wire.MemoryView, tree: Tree) -> Plan:
    path = paths.parse(cmd.path)
    found = tree.file(path)
    if found is None:
        if not tree.is_dir(path):
            raise _missing("path", path)
        if cmd.view_range is not None:
            raise InvalidRequestError("view_range", f"applies to a file; {path} is a directory")
        return Plan("view", path, render.listing(tree, path))
    first, last = _view_range(cmd.view_range, len(render.split_lines(found.content)))
    return Plan("view", path, render.file_view(found, first, last), viewed=found)


def _view_range(view_range: list[int] | None, line_count: int) -> tuple[int, int | None]:
    if view_range is None:
        return 1, None
    first, last = view_range
    if not 1 <= first <= line_count:
        raise InvalidRequestError("view_range", f"the first line must be between 1 and {line_count}, got {first}")
    if last != -1 and last < first:
        raise InvalidRequestError("view_range", f"the last line must be -1 (the end) or at least {first}, got {last}")
    return first, None if last == -1 else last


def _create(cmd: wire.MemoryCreate, tree: Tree) -> Plan:
    path = _file_path(cmd.path, "path")
    text = _text(cmd.file_text, "file_text")
    _check_parents(tree, path, "path")
    if tree.is_dir(path):
        raise ConflictError("path", f"{path} is a directory")
    existing = tree.file(path)
    if existing is None:
        if cmd.content_sha256 is not None:
            raise ConflictError("content_sha256", f"{path} does not exist: there is no content to match")
        if len(tree) >= MAX_FILES:
            raise ConflictError("path", f"this tree holds {MAX_FILES} files, the most it may: delete some first")
        return Plan("create", path, f"Created {path}.", puts=(Put(path, text),))
    if cmd.content_sha256 is None:
        raise ConflictError(
            "path",
            f"{path} already exists: edit it with str_replace or insert, or create it again with"
            f" content_sha256 {existing.sha256} (its content now) to replace it",
        )
    _check_sha(existing, cmd.content_sha256)
    return Plan("create", path, f"Replaced the content of {path}.", puts=(Put(path, text, existing),))


def _str_replace(cmd: wire.MemoryStrReplace, tree: Tree) -> Plan:
    found = _existing_file(tree, cmd.path, cmd.content_sha256)
    if not cmd.old_str:
        raise InvalidRequestError("old_str", "must not be empty: give the exact text to replace")
    count = found.content.count(cmd.old_str)
    if count == 0:
        raise ConflictError("old_str", f"does not appear verbatim in {found.path}: nothing was replaced")
    if count > 1:
        at = _lines_of(found.content, cmd.old_str)
        raise ConflictError(
            "old_str",
            f"appears {count} times in {found.path} (lines {', '.join(map(str, at))}): include more of the"
            " surrounding text so that it appears once; nothing was replaced",
        )
    offset = found.content.index(cmd.old_str)
    new = found.content.replace(cmd.old_str, cmd.new_str, 1)
    text = _text(new, "new_str", "the file would hold no text: delete it instead")
    first = found.content[:offset].count("\n")
    snippet = render.around(text, first, first + cmd.new_str.count("\n"))
    output = f"Edited {found.path}. The lines around the change:\n{snippet}"
    return Plan("str_replace", found.path, output, puts=(Put(found.path, text, found),))


def _insert(cmd: wire.MemoryInsert, tree: Tree) -> Plan:
    found = _existing_file(tree, cmd.path, cmd.content_sha256)
    lines = render.split_lines(found.content)
    if not 0 <= cmd.insert_line <= len(lines):
        raise InvalidRequestError(
            "insert_line", f"must be between 0 and {len(lines)} (the lines of {found.path}), got {cmd.insert_line}"
        )
    lines.insert(cmd.insert_line, cmd.insert_text.removesuffix("\n"))
    text = _text("\n".join(lines) + "\n", "insert_text")
    added = cmd.insert_text.removesuffix("\n").count("\n")
    snippet = render.around(text, cmd.insert_line, cmd.insert_line + added)
    output = f"Inserted into {found.path} after line {cmd.insert_line}. The lines around it:\n{snippet}"
    return Plan("insert", found.path, output, puts=(Put(found.path, text, found),))


def _delete(cmd: wire.MemoryDelete, tree: Tree) -> Plan:
    path = paths.parse(cmd.path)
    if path == paths.ROOT:
        raise InvalidRequestError("path", f"is {paths.ROOT} itself, which always exists: delete what is under it")
    found = tree.file(path)
    if found is not None:
        if cmd.content_sha256 is not None:
            _check_sha(found, cmd.content_sha256)
        return Plan("delete", path, f"Deleted {path} and its earlier revisions.", erase=(found,))
    if not tree.is_dir(path):
        raise _missing("path", path)
    if cmd.content_sha256 is not None:
        raise InvalidRequestError("content_sha256", f"applies to a file; {path} is a directory")
    files = tuple(tree.under(path))
    output = f"Deleted {path}: {len(files)} {'file' if len(files) == 1 else 'files'} and their earlier revisions."
    return Plan("delete", path, output, erase=files)


def _rename(cmd: wire.MemoryRename, tree: Tree) -> Plan:
    old = paths.parse(cmd.old_path, "old_path")
    new = paths.parse(cmd.new_path, "new_path")
    if paths.ROOT in (old, new):
        field = "old_path" if old == paths.ROOT else "new_path"
        raise InvalidRequestError(field, f"is {paths.ROOT} itself, which cannot move")
    if not tree.exists(old):
        raise _missing("old_path", old)
    if tree.exists(new):
        raise ConflictError("new_path", f"{new} already exists: nothing was moved")
    if paths.is_within(new, old):
        raise InvalidRequestError("new_path", f"is inside {old}: a directory cannot move into itself")
    _check_parents(tree, new, "new_path")
    found = tree.file(old)
    if found is not None:
        if cmd.content_sha256 is not None:
            _check_sha(found, cmd.content_sha256)
        return Plan("rename", new, f"Moved {old} to {new}.", puts=(Put(new, found.content, found),))
    if cmd.content_sha256 is not None:
        raise InvalidRequestError("content_sha256", f"applies to a file; {old} is a directory")
    puts = tuple(Put(paths.parse(paths.moved(f.path, old, new), "new_path"), f.content, f) for f in tree.under(old))
    return Plan("rename", new, f"Moved {old} to {new} ({len(puts)} files).", puts=puts)


# -- rules ---------------------------------------------------------------------------------


def _file_path(value: str, field: str) -> str:
    path = paths.parse(value, field)
    if path == paths.ROOT:
        raise InvalidRequestError(field, f"is the {paths.ROOT} directory itself: name a file under it")
    return path


def _existing_file(tree: Tree, value: str, sha: str | None) -> File:
    path = paths.parse(value)
    found = tree.file(path)
    if found is None:
        if tree.is_dir(path):
            raise InvalidRequestError("path", f"{path} is a directory, not a file")
        raise _missing("path", path)
    if sha is not None:
        _check_sha(found, sha)
    return found


def _check_parents(tree: Tree, path: str, field: str) -> None:
    for directory in paths.ancestors(path):
        if tree.file(directory) is not None:
            raise ConflictError(field, f"{directory} is a file: it cannot hold {path}")


def _check_sha(found: File, sha: str) -> None:
    if found.sha256 != sha:
        raise ConflictError(
            "content_sha256",
            f"{found.path} changed since it was read: its content_sha256 is now {found.sha256}; view it again",
        )


def _text(value: str, field: str, empty_rule: str = "must hold some text: the ledger keeps no empty memory") -> str:
    """``value`` if the ledger can hold it as a memory's text (1 to 65,536 characters,
    not only white space, no control character but tab, newline and carriage return)."""
    if not value.strip():
        raise InvalidRequestError(field, empty_rule)
    try:
        return _CONTENT.validate_python(value)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        rule = str(first["msg"]).removeprefix("Value error, ")
        if first["type"] == "string_too_long":
            rule = "the file would be longer than 65,536 characters, the most a memory holds"
        raise InvalidRequestError(field, rule) from None


def _lines_of(content: str, needle: str) -> list[int]:
    """The 1-based lines where each occurrence of ``needle`` starts."""
    out, start = [], content.find(needle)
    while start != -1:
        out.append(content[:start].count("\n") + 1)
        start = content.find(needle, start + 1)
    return out


def _missing(field: str, path: str) -> NotFoundError:
    return NotFoundError(field, f"{path} does not exist")
