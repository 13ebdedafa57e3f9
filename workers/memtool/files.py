"""Files of the memory tool as memories of the ledger.

A file is a live memory of the subject for the tree's purpose, in the subject's own
scope, whose ``key`` is the file's path (the key is the unit of supersession, so each
edit supersedes the file's previous revision). Its ``source_ref`` is the file's identity,
``memory-file:<UUIDv7>``, given when the memory tool creates it and kept by every
revision and rename, so that ``delete`` can erase every revision, not only the current
one. Directories are not stored: a directory exists while a file lies below it, and
``/memories`` always exists.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cached_property

from ledger.service import LiveMemory
from workers.gateway.errors import GatewayError
from workers.memtool import paths

FILE_REF = "memory-file:"
"""Prefix of the ``source_ref`` that names a file across its revisions."""

MAX_FILES = 1000
"""The most files one tree (subject and purpose) holds."""


@dataclass(frozen=True)
class File:
    """A file: ``memory_id`` is its current revision (the newest live memory at the
    path); ``others``, any other live memory at the same path (a conflict written outside
    the memory tool, replaced or erased with the file); ``file_ref`` its identity, when
    the memory tool wrote it."""

    path: str
    memory_id: str
    revision: int
    content: str
    file_ref: str | None = None
    others: tuple[str, ...] = ()

    @cached_property
    def sha256(self) -> str:
        """SHA-256 (hex) of the content's UTF-8 bytes: the ``content_sha256`` precondition."""
        return hashlib.sha256(self.content.encode("utf-8")).hexdigest()

    @property
    def size_bytes(self) -> int:
        """The content's size in bytes of UTF-8."""
        return len(self.content.encode("utf-8"))

    @property
    def memory_ids(self) -> tuple[str, ...]:
        """Every live memory at the path: the current revision first."""
        return (self.memory_id, *self.others)


class Tree:
    """The files of one subject and purpose, by path."""

    def __init__(self, files: Iterable[File]) -> None:
        self._files = {f.path: f for f in files}

    @classmethod
    def of(cls, memories: Sequence[LiveMemory]) -> Tree:
        """The tree of the live memories whose keys are paths (``Ledger.live`` under
        ``/memories/``); a key that breaks the path rules (written by another way in) is
        no file and is left out."""
        by_path: dict[str, list[LiveMemory]] = {}
        for m in memories:
            key = m.head.key or ""
            if _is_path(key):
                by_path.setdefault(key, []).append(m)
        files = []
        for path, found in by_path.items():
            found.sort(key=lambda m: m.head.memory_id)  # UUIDv7: time-ordered, the newest last
            newest = found[-1]
            ref = newest.head.source_ref
            files.append(
                File(
                    path=path,
                    memory_id=newest.head.memory_id,
                    revision=newest.head.revision,
                    content=newest.content,
                    file_ref=ref if ref is not None and ref.startswith(FILE_REF) else None,
                    others=tuple(m.head.memory_id for m in found[:-1]),
                )
            )
        return cls(files)

    def __len__(self) -> int:
        return len(self._files)

    def file(self, path: str) -> File | None:
        """The file at ``path`` (canonical), if there is one."""
        return self._files.get(path)

    def is_dir(self, path: str) -> bool:
        """Whether ``path`` is a directory: the root, or a path some file lies below."""
        return path == paths.ROOT or any(p.startswith(path + "/") for p in self._files)

    def exists(self, path: str) -> bool:
        """Whether ``path`` is a file or a directory."""
        return path in self._files or self.is_dir(path)

    def under(self, directory: str) -> list[File]:
        """Every file below ``directory``, by path."""
        return sorted((f for p, f in self._files.items() if p.startswith(directory + "/")), key=lambda f: f.path)


def _is_path(key: str) -> bool:
    try:
        return paths.parse(key) == key and key != paths.ROOT
    except GatewayError:
        return False
