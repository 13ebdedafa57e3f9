"""The vector index port: what the vectors projection needs from a vector engine.

Adapters: :mod:`projections.qdrant_client_index` (qdrant-client: a server, or its
local mode), :mod:`projections.qdrant_edge_index` (the Qdrant engine in-process) and
:mod:`projections.vector_remote` (read-only, over HTTP, to the process owning an
embedded index).

Point ids are memory ids: UUID strings. Ids coming out of the engine (search,
scroll) are in canonical lowercase hyphenated form; ``retrieve`` keys its result by
the ids as given. Distance is cosine; engines store vectors L2-normalised, so
``retrieve`` gives back the normalised vector. Timestamps are float epoch seconds, UTC.

This module also holds :class:`PathOwnerLock`, the advisory lock both embedded
adapters take so that one storage path has one owning process.
"""

from __future__ import annotations

import errno
import fcntl
import os
import re
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal, Protocol

import numpy as np

__all__ = [
    "PAYLOAD_INDEXES",
    "PathOwnerLock",
    "VectorFilter",
    "VectorHit",
    "VectorIndex",
    "VectorIndexError",
    "VectorIndexUnreachableError",
    "VectorPoint",
    "canonical_id",
    "dense_vector",
    "selects_nothing",
]

PAYLOAD_INDEXES: Final[Mapping[str, Literal["keyword", "float"]]] = {
    "subject_id": "keyword",
    "purpose": "keyword",
    "status": "keyword",
    "scope_key": "keyword",
    "kind": "keyword",
    "derived_from": "keyword",
    "expires_at": "float",
}
"""Payload field -> index type that ``ensure_collection`` creates where the engine supports it."""


class VectorIndexError(Exception):
    """Any failure of a vector index: engine error, unreachable server, wrong dimension, lock held.

    Attributes:
        collection: the collection concerned, when known.
        memory_id: the memory (point) id concerned, when known.
    """

    def __init__(self, message: str, *, collection: str | None = None, memory_id: str | None = None) -> None:
        super().__init__(message)
        self.collection = collection
        self.memory_id = memory_id


class VectorIndexUnreachableError(VectorIndexError):
    """The index could not be reached at all (connection refused or timed out: a Qdrant
    server or the owner of an embedded index is down), as opposed to an engine that
    answered with an error. Nothing was read or changed; the same call may succeed once
    the store is back."""


@dataclass(frozen=True)
class VectorPoint:
    """One point: a memory's embedding and its filterable payload.

    Attributes:
        memory_id: UUID string (UUIDv7), used directly as the point id.
        vector: the embedding; its length is the collection's dimension.
        payload: JSON-able mapping; keys written by the vectors projection are memory_id,
            subject_id, purpose, scope_type, scope_id, scope_key, kind, status,
            revision (int), expires_at (float epoch seconds or None), model (str),
            derived_from (list of memory ids), content_hmac (str or None).
    """

    memory_id: str
    vector: tuple[float, ...]
    payload: Mapping[str, Any]


@dataclass(frozen=True)
class VectorHit:
    """One search result: ``score`` is the cosine similarity (higher is closer, at most 1.0)."""

    memory_id: str
    score: float
    payload: dict[str, Any]


@dataclass(frozen=True)
class VectorFilter:
    """Payload filter applied inside the engine during a search; all given clauses must hold.

    Attributes:
        subject_id: payload ``subject_id`` equals this.
        purpose: payload ``purpose`` equals this, unless None.
        statuses: payload ``status`` is one of these (an empty tuple selects nothing).
        scope_keys: payload ``scope_key`` ("document:D", "workspace:W", "subject:S") is one
            of these, unless None (an empty tuple selects nothing).
        not_expired_at: epoch seconds UTC; excludes points whose ``expires_at`` <= this.
            Points with ``expires_at`` null or absent pass. None disables the clause.
        kinds: payload ``kind`` is one of these, unless None (an empty tuple selects nothing).
    """

    subject_id: str
    purpose: str | None = None
    statuses: tuple[str, ...] = ("active",)
    scope_keys: tuple[str, ...] | None = None
    not_expired_at: float | None = None
    kinds: tuple[str, ...] | None = None


def selects_nothing(flt: VectorFilter) -> bool:
    """True when a match-any clause of ``flt`` is an empty tuple, so no point can match.

    Adapters answer such a search with ``[]`` without asking the engine.
    """
    return not flt.statuses or flt.scope_keys == () or flt.kinds == ()


_CANONICAL_UUID: Final = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
"""A UUID as ``str(uuid.UUID(...))`` spells it."""


def canonical_id(memory_id: object, *, collection: str | None = None) -> str:
    """Return ``memory_id`` (a UUID string or :class:`uuid.UUID`) as a canonical UUID string.

    Raises:
        VectorIndexError: if it is not a UUID.
    """
    if type(memory_id) is str and _CANONICAL_UUID.fullmatch(memory_id):
        return memory_id  # already canonical (the engines' own ids): a quarter of the cost of parsing it
    try:
        return str(memory_id if isinstance(memory_id, uuid.UUID) else uuid.UUID(str(memory_id)))
    except ValueError:
        raise VectorIndexError(
            f"memory id {memory_id!r} is not a UUID", collection=collection, memory_id=str(memory_id)
        ) from None


def dense_vector(value: object, *, collection: str, memory_id: str) -> tuple[float, ...]:
    """Return an engine's stored vector (a list of numbers, or ``{"": [...]}``) as a tuple of floats.

    Raises:
        VectorIndexError: if it is not one dense vector.
    """
    if isinstance(value, Mapping):
        value = value.get("")
    if isinstance(value, list):
        array = np.asarray(value) if value else np.zeros(0)
        if array.ndim == 1 and array.dtype.kind in "biuf":  # numbers (bool counts, as an int)
            return tuple(array.astype(np.float64).tolist())
    raise VectorIndexError(
        f"point {memory_id} has no single dense vector (got {type(value).__name__})",
        collection=collection,
        memory_id=memory_id,
    )


class VectorIndex(Protocol):
    """A collection of :class:`VectorPoint` under cosine distance.

    Every method raises :class:`VectorIndexError` on failure, and every method but
    ``ensure_collection``, ``drop_collection`` and ``close`` raises it when the
    collection does not exist.
    """

    collection: str

    def ensure_collection(self, dim: int) -> None:
        """Create the collection for ``dim``-long vectors if absent, and its payload indexes.

        Idempotent. Raises VectorIndexError if it exists with another dimension.
        """
        ...

    def upsert(self, points: Sequence[VectorPoint]) -> None:
        """Insert or wholly replace these points (vector and payload)."""
        ...

    def set_payload(self, memory_id: str, payload: Mapping[str, Any]) -> None:
        """Set the given payload keys on one point, keeping the others; no-op if it is absent."""
        ...

    def delete(self, memory_ids: Sequence[str]) -> None:
        """Delete these points; absent ones are ignored."""
        ...

    def find_derived_from(self, memory_ids: Sequence[str]) -> list[str]:
        """Ids of the points whose payload ``derived_from`` contains any of ``memory_ids``."""
        ...

    def retrieve(self, memory_ids: Sequence[str]) -> dict[str, VectorPoint]:
        """The present points among ``memory_ids``, keyed by the ids as given, with vector and payload."""
        ...

    def vectors(self, memory_ids: Sequence[str]) -> dict[str, list[float]]:
        """The vectors of the present points among ``memory_ids``, keyed by the ids as
        given, without their payloads (what ``retrieve`` gives, for a fraction of its cost)."""
        ...

    def search(
        self, vector: Sequence[float], flt: VectorFilter, limit: int, payload_keys: Sequence[str] | None = None
    ) -> list[VectorHit]:
        """Up to ``limit`` points matching ``flt``, nearest (highest cosine) first.
        ``payload_keys``: each hit's payload holds only these keys (those it has); None
        gives the whole payload. Reading fewer keys is cheaper."""
        ...

    def scroll_ids(self, subject_id: str | None = None) -> list[str]:
        """All point ids, or those whose payload ``subject_id`` is ``subject_id``."""
        ...

    def count(self) -> int:
        """Exact number of points in the collection."""
        ...

    def drop_collection(self) -> None:
        """Delete the collection and all its points; no-op if absent."""
        ...

    def compact(self) -> str:
        """Rewrite the collection's storage so that deleted points leave its files (an
        engine keeps a deleted point's vector and payload in its segments and write-ahead
        log until it optimises or rotates them); the live points stay as they are.
        Returns what was done, in words, or why the engine cannot be made to do it now
        (a Qdrant server optimises on its own schedule). Raises VectorIndexError (the
        collection must exist; an index this process does not own cannot be compacted)."""
        ...

    def close(self) -> None:
        """Release the engine and any lock; the index is unusable afterwards. Idempotent."""
        ...


class PathOwnerLock:
    """An exclusive, non-blocking ``flock`` on ``lock_path`` holding the owner's pid.

    Both embedded engines allow one process per storage path; taking this lock before
    opening the engine turns a second opener into a clear :class:`VectorIndexError`
    instead of an engine crash. The lock is released by :meth:`release` or when the
    process dies. A second opener inside the same process is refused as well.
    """

    def __init__(self, lock_path: Path, *, what: str, collection: str | None = None) -> None:
        """Take the lock.

        Args:
            lock_path: the lock file (created if absent, with its parent directories).
            what: the guarded storage, for error messages (e.g. the storage path).
            collection: put on the error, when known.

        Raises:
            VectorIndexError: if another process (or another open index here) holds it.
        """
        lock_path.parent.mkdir(parents=True, exist_ok=True)
        self.path = lock_path
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            owner = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "unknown"
            os.close(fd)
            if exc.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                raise VectorIndexError(f"cannot lock {lock_path}: {exc}", collection=collection) from exc
            who = (
                f"another open index in this process (pid {owner})"
                if owner == str(os.getpid())
                else f"another process (pid {owner})"
            )
            raise VectorIndexError(
                f"{what} is owned by {who}; only one process may open it: "
                "stop it (for example the vectors worker) or let it answer vector queries for this one",
                collection=collection,
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
        self._fd: int | None = fd

    def release(self) -> None:
        """Release the lock (the file stays). Idempotent."""
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.ftruncate(fd, 0)
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)


def vectors_by_given_id(
    records: Iterable[tuple[str, Any]], given: Mapping[str, str], collection: str
) -> dict[str, list[float]]:
    """Engine records' vectors keyed by the ids as the caller gave them. ``records``
    yields (canonical id, engine vector); ``given`` maps canonical ids to the caller's
    spelling.

    Raises:
        VectorIndexError: a record holds no dense vector.
    """
    found: dict[str, list[float]] = {}
    for canon, raw_vector in records:
        mid = given.get(canon, canon)
        value = raw_vector.get("") if isinstance(raw_vector, Mapping) else raw_vector
        if type(value) is list and value and type(value[0]) is float:
            found[mid] = value  # the engine's own list of floats (its f32 values): nothing to convert
        else:
            found[mid] = list(dense_vector(raw_vector, collection=collection, memory_id=mid))
    return found


def points_by_given_id(
    records: Iterable[tuple[str, Any, Mapping[str, Any] | None]], given: Mapping[str, str], collection: str
) -> dict[str, VectorPoint]:
    """Engine records as ``VectorPoint``s keyed by the ids as the caller gave them.

    ``records`` yields (canonical id, engine vector, payload); ``given`` maps canonical
    ids to the caller's spelling.

    Raises:
        VectorIndexError: a record holds no dense vector.
    """
    found: dict[str, VectorPoint] = {}
    for canon, raw_vector, payload in records:
        mid = given.get(canon, canon)
        vector = dense_vector(raw_vector, collection=collection, memory_id=mid)
        found[mid] = VectorPoint(memory_id=mid, vector=vector, payload=dict(payload or {}))
    return found
