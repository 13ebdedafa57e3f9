""":class:`~projections.vector_index.VectorIndex` on qdrant-client: a Qdrant server, or local mode.

Local mode (``for_path``) is qdrant-client's pure-Python engine persisted in SQLite under
a directory. It allows one process per directory: qdrant-client itself takes a
``flock`` on ``<path>/.lock`` and raises ``RuntimeError`` for a second opener (leaking
the lock file handle). :meth:`QdrantClientIndex.for_path` takes its own lock first
(``<path>/.memledger-owner.lock``, holding the owner's pid), so a second process, or a
second index on the same path in this process, gets a :class:`VectorIndexError`
naming the owner and the engine is never touched.

Local mode has no payload indexes (qdrant-client warns and ignores them), so
``ensure_collection`` creates them only against a server. Filters run inside the
engine in both modes.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
from qdrant_client import QdrantClient, models
from qdrant_client.http.exceptions import ResponseHandlingException

from projections.vector_index import (
    PAYLOAD_INDEXES,
    PathOwnerLock,
    VectorFilter,
    VectorHit,
    VectorIndexError,
    VectorIndexUnreachableError,
    VectorPoint,
    canonical_id,
    points_by_given_id,
    selects_nothing,
    vectors_by_given_id,
)

__all__ = ["QdrantClientIndex"]

_SCROLL_PAGE = 256
_SCHEMA = {"keyword": models.PayloadSchemaType.KEYWORD, "float": models.PayloadSchemaType.FLOAT}


def _match(key: str, values: Sequence[str]) -> models.FieldCondition:
    return models.FieldCondition(key=key, match=models.MatchAny(any=list(values)))


def _equals(key: str, value: str) -> models.FieldCondition:
    return models.FieldCondition(key=key, match=models.MatchValue(value=value))


def _search_filter(flt: VectorFilter) -> models.Filter:
    must: list[models.Condition] = [_equals("subject_id", flt.subject_id), _match("status", flt.statuses)]
    if flt.purpose is not None:
        must.append(_equals("purpose", flt.purpose))
    if flt.scope_keys is not None:
        must.append(_match("scope_key", flt.scope_keys))
    if flt.kinds is not None:
        must.append(_match("kind", flt.kinds))
    if flt.not_expired_at is not None:
        alive: list[models.Condition] = [
            models.IsEmptyCondition(is_empty=models.PayloadField(key="expires_at")),
            models.FieldCondition(key="expires_at", range=models.Range(gt=flt.not_expired_at)),
        ]
        must.append(models.Filter(should=alive))
    return models.Filter(must=must)


class QdrantClientIndex:
    """One Qdrant collection (cosine, one unnamed dense vector) through a :class:`QdrantClient`.

    Calls are serialised by a lock, so the index may be shared between threads (e.g. with
    a :class:`~projections.vector_remote.VectorQueryServer`). Every engine error is raised
    as :class:`VectorIndexError` carrying the collection name; a server that cannot be
    reached (refused, timed out) as :class:`VectorIndexUnreachableError`.
    """

    def __init__(self, client: QdrantClient, collection: str) -> None:
        """Wrap ``client``; the caller keeps ownership of it (``close`` does not close it)."""
        self.client = client
        self.collection = collection
        options = client.init_options
        self.local_mode = options.get("path") is not None or options.get("location") == ":memory:"
        self._lock = threading.RLock()
        self._closed = False
        self._owns_client = False
        self._owner_lock: PathOwnerLock | None = None

    @classmethod
    def for_url(cls, url: str, collection: str, *, api_key: str | None = None) -> QdrantClientIndex:
        """An index on a Qdrant server at ``url`` (e.g. ``http://localhost:6333``); closes its client."""
        index = cls(QdrantClient(url=url, api_key=api_key), collection)
        index._owns_client = True
        return index

    @classmethod
    def for_path(cls, path: str | Path, collection: str) -> QdrantClientIndex:
        """An index in qdrant-client local mode under directory ``path`` (or ``":memory:"``).

        Raises:
            VectorIndexError: if another process (or another open index in this process)
                owns ``path``.
        """
        if str(path) == ":memory:":
            index = cls(QdrantClient(location=":memory:"), collection)
            index._owns_client = True
            return index
        root = Path(path)
        what = f"qdrant-client local storage {root}"
        lock = PathOwnerLock(root / ".memledger-owner.lock", what=what, collection=collection)
        try:
            # our lock serialises every call, so SQLite's same-thread check is not needed
            client = QdrantClient(path=str(root), force_disable_check_same_thread=True)
        except RuntimeError as exc:  # qdrant-client's own lock, held by a foreign process
            lock.release()
            raise VectorIndexError(f"{what} is owned by another process: {exc}", collection=collection) from exc
        index = cls(client, collection)
        index._owns_client = True
        index._owner_lock = lock
        return index

    @contextmanager
    def _engine(self, op: str, memory_id: str | None = None) -> Iterator[None]:
        with self._lock:
            if self._closed:
                raise VectorIndexError(f"{op}: index on {self.collection!r} is closed", collection=self.collection)
            try:
                yield
            except VectorIndexError:
                raise
            except ResponseHandlingException as exc:
                if isinstance(exc.source, httpx.TransportError):  # refused, timed out: nothing answered
                    raise VectorIndexUnreachableError(
                        f"{op} on collection {self.collection!r}: Qdrant unreachable: {exc}",
                        collection=self.collection,
                        memory_id=memory_id,
                    ) from exc
                raise VectorIndexError(
                    f"{op} on collection {self.collection!r} failed: {exc}",
                    collection=self.collection,
                    memory_id=memory_id,
                ) from exc
            except Exception as exc:
                raise VectorIndexError(
                    f"{op} on collection {self.collection!r} failed: {exc}",
                    collection=self.collection,
                    memory_id=memory_id,
                ) from exc

    def _id(self, memory_id: object) -> str:
        return canonical_id(memory_id, collection=self.collection)

    def ensure_collection(self, dim: int) -> None:
        """Create the collection for ``dim``-d cosine vectors if absent; add missing payload indexes.

        Raises:
            VectorIndexError: if it exists with another dimension, distance or vector layout.
        """
        if dim < 1:
            raise VectorIndexError(f"dimension must be positive, not {dim}", collection=self.collection)
        with self._engine("ensure_collection"):
            if not self.client.collection_exists(self.collection):
                self.client.create_collection(
                    self.collection,
                    vectors_config=models.VectorParams(size=dim, distance=models.Distance.COSINE),
                )
            info = self.client.get_collection(self.collection)
            params = info.config.params.vectors
            if not (
                isinstance(params, models.VectorParams)
                and params.size == dim
                and params.distance == models.Distance.COSINE
            ):
                raise VectorIndexError(
                    f"collection {self.collection!r} exists with vectors {params!r}, not {dim}-d cosine",
                    collection=self.collection,
                )
            if self.local_mode:
                return
            for field, kind in PAYLOAD_INDEXES.items():
                if field not in info.payload_schema:
                    self.client.create_payload_index(self.collection, field, field_schema=_SCHEMA[kind], wait=True)

    def upsert(self, points: Sequence[VectorPoint]) -> None:
        """Insert or replace ``points`` (whole vector and payload); waits until applied."""
        structs = [
            models.PointStruct(id=self._id(p.memory_id), vector=list(map(float, p.vector)), payload=dict(p.payload))
            for p in points
        ]
        if structs:
            with self._engine("upsert"):
                self.client.upsert(self.collection, points=structs, wait=True)

    def set_payload(self, memory_id: str, payload: Mapping[str, Any]) -> None:
        """Set the given keys on point ``memory_id``, keeping the others; no-op if it is absent."""
        point_id = self._id(memory_id)
        # selecting by filter makes an absent point a no-op rather than an error
        ids: list[models.ExtendedPointId] = [point_id]
        selector = models.Filter(must=[models.HasIdCondition(has_id=ids)])
        with self._engine("set_payload", point_id):
            self.client.set_payload(self.collection, payload=dict(payload), points=selector, wait=True)

    def delete(self, memory_ids: Sequence[str]) -> None:
        """Delete these points; absent ones are ignored."""
        ids: list[models.ExtendedPointId] = [self._id(m) for m in memory_ids]
        if ids:
            with self._engine("delete"):
                self.client.delete(self.collection, points_selector=models.PointIdsList(points=ids), wait=True)

    def _scroll(self, op: str, flt: models.Filter | None) -> list[str]:
        ids: list[str] = []
        offset: models.ExtendedPointId | None = None
        with self._engine(op):
            while True:
                records, offset = self.client.scroll(
                    self.collection,
                    scroll_filter=flt,
                    limit=_SCROLL_PAGE,
                    offset=offset,
                    with_payload=False,
                    with_vectors=False,
                )
                ids.extend(self._id(r.id) for r in records)
                if offset is None:
                    return ids

    def find_derived_from(self, memory_ids: Sequence[str]) -> list[str]:
        """Ids of the points whose payload ``derived_from`` holds any of ``memory_ids``."""
        sources = [self._id(m) for m in memory_ids]
        if not sources:
            return []
        return self._scroll("find_derived_from", models.Filter(must=[_match("derived_from", sources)]))

    def _records(
        self, op: str, memory_ids: Sequence[str], *, with_payload: bool
    ) -> tuple[dict[str, str], list[models.Record]]:
        """The canonical ids of ``memory_ids`` mapped to their spelling as given, and the
        engine's records of the present ones, with vectors (none read when there are no ids)."""
        given = {self._id(m): m for m in memory_ids}
        ids: list[models.ExtendedPointId] = list(given)
        if not ids:
            return given, []
        with self._engine(op):
            return given, self.client.retrieve(self.collection, ids, with_payload=with_payload, with_vectors=True)

    def retrieve(self, memory_ids: Sequence[str]) -> dict[str, VectorPoint]:
        """The present points among ``memory_ids``, keyed by the ids as given (vectors normalised)."""
        given, records = self._records("retrieve", memory_ids, with_payload=True)
        return points_by_given_id(((self._id(r.id), r.vector, r.payload) for r in records), given, self.collection)

    def vectors(self, memory_ids: Sequence[str]) -> dict[str, list[float]]:
        """The vectors of the present points among ``memory_ids``, keyed by the ids as given."""
        given, records = self._records("vectors", memory_ids, with_payload=False)
        return vectors_by_given_id(((self._id(r.id), r.vector) for r in records), given, self.collection)

    def search(
        self, vector: Sequence[float], flt: VectorFilter, limit: int, payload_keys: Sequence[str] | None = None
    ) -> list[VectorHit]:
        """Up to ``limit`` points matching ``flt`` (filtered inside the engine), nearest
        first; with ``payload_keys``, only those keys of each payload."""
        if limit < 1 or selects_nothing(flt):
            return []
        with self._engine("search"):
            result = self.client.query_points(
                self.collection,
                query=list(map(float, vector)),
                query_filter=_search_filter(flt),
                limit=limit,
                with_payload=True if payload_keys is None else list(payload_keys),
                with_vectors=False,
            )
        return [VectorHit(self._id(p.id), float(p.score), dict(p.payload or {})) for p in result.points]

    def scroll_ids(self, subject_id: str | None = None) -> list[str]:
        """All point ids, or those of one subject."""
        flt = None if subject_id is None else models.Filter(must=[_equals("subject_id", subject_id)])
        return self._scroll("scroll_ids", flt)

    def count(self) -> int:
        """Exact number of points."""
        with self._engine("count"):
            return self.client.count(self.collection, exact=True).count

    def point_alias(self, alias: str) -> None:
        """Make ``alias`` name this collection, in ONE ``update_collection_aliases`` call
        (delete the alias, create it again: Qdrant applies the list atomically, so a reader
        of the alias sees the old collection or this one, never neither).

        Raises:
            VectorIndexError: the collection does not exist or the engine refused.
        """
        with self._engine("point_alias"):
            current = {a.alias_name for a in self.client.get_aliases().aliases}
            ops: list[models.AliasOperations] = []
            if alias in current:
                ops.append(models.DeleteAliasOperation(delete_alias=models.DeleteAlias(alias_name=alias)))
            ops.append(
                models.CreateAliasOperation(
                    create_alias=models.CreateAlias(collection_name=self.collection, alias_name=alias)
                )
            )
            self.client.update_collection_aliases(change_aliases_operations=ops)

    def drop_collection(self) -> None:
        """Delete the collection and its points; no-op if absent."""
        with self._engine("drop_collection"):
            if self.client.collection_exists(self.collection):
                self.client.delete_collection(self.collection)

    def compact(self) -> str:
        """Local mode: ``VACUUM`` the collection's SQLite file, so that deleted points
        leave it. A server optimises its segments itself (when deleted points exceed its
        ``optimizers_config.deleted_threshold``), and keeps them in its WAL until it
        rotates: nothing is forced there."""
        with self._engine("compact"):
            if not self.client.collection_exists(self.collection):
                raise VectorIndexError(f"compact: collection {self.collection!r} does not exist")
            root = self.client.init_options.get("path")
            if root is None:
                if self.local_mode:
                    return "in memory: nothing on disk"
                return "Qdrant server: not forced (it optimises deleted points on its own schedule)"
            storage = Path(root) / "collection" / self.collection / "storage.sqlite"
            with contextlib.closing(sqlite3.connect(storage)) as db:
                db.execute("VACUUM")
            return f"rewrote {storage.name} (SQLite VACUUM)"

    def close(self) -> None:
        """Close the client if this index created it, and release the path lock. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            try:
                if self._owns_client:
                    self.client.close()
            finally:
                if self._owner_lock is not None:
                    self._owner_lock.release()
