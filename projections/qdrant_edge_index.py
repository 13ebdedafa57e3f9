""":class:`~projections.vector_index.VectorIndex` on qdrant-edge: the Qdrant engine in-process.

One collection is one edge shard in the directory ``<path>/<collection>``; the shard
keeps a write-ahead log, so points survive close and reopen (and a crash).

One process per shard: the engine ``flock``s its WAL, and a second opener (another
process, or a second ``EdgeShard.load`` here) fails with a bare ``Exception`` ("failed
to open WAL ...: WouldBlock"). Before touching the engine, :class:`QdrantEdgeIndex`
takes its own lock, ``<path>/<collection>.memledger-owner.lock`` holding the owner's
pid, so a second opener gets a :class:`VectorIndexError` naming the owner - even
before the shard exists, when the engine has nothing to lock yet.

Payload indexes: keyword and float indexes are created and persisted in the shard.

``compact`` rewrites the shard from its live points into ``<collection>.compacting``,
then swaps the directories by renames (the old one goes to ``<collection>.old`` and is
deleted): the engine keeps deleted points' payloads in its WAL and segments otherwise. An
interrupted swap is finished, or an unfinished rewrite dropped, when the index is opened.
"""

from __future__ import annotations

import re
import shutil
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import qdrant_edge as qe

from projections.vector_index import (
    PAYLOAD_INDEXES,
    PathOwnerLock,
    VectorFilter,
    VectorHit,
    VectorIndexError,
    VectorPoint,
    canonical_id,
    points_by_given_id,
    selects_nothing,
    vectors_by_given_id,
)
from projections.wording import counted

if TYPE_CHECKING:
    from qdrant_edge import ConditionType, PointId

__all__ = ["QdrantEdgeIndex"]

_SCROLL_PAGE = 256
_SCHEMA = {"keyword": qe.PayloadSchemaType.Keyword, "float": qe.PayloadSchemaType.Float}
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")


def _match(key: str, values: Sequence[str]) -> qe.FieldCondition:
    return qe.FieldCondition(key, match=qe.MatchAny(list(values)))


def _equals(key: str, value: str) -> qe.FieldCondition:
    return qe.FieldCondition(key, match=qe.MatchValue(value))


def _search_filter(flt: VectorFilter) -> qe.Filter:
    must: list[ConditionType] = [_equals("subject_id", flt.subject_id), _match("status", flt.statuses)]
    if flt.purpose is not None:
        must.append(_equals("purpose", flt.purpose))
    if flt.scope_keys is not None:
        must.append(_match("scope_key", flt.scope_keys))
    if flt.kinds is not None:
        must.append(_match("kind", flt.kinds))
    if flt.not_expired_at is not None:
        alive: list[ConditionType] = [
            qe.IsEmptyCondition("expires_at"),
            qe.FieldCondition("expires_at", range=qe.RangeFloat(gt=flt.not_expired_at)),
        ]
        must.append(qe.Filter(should=alive))
    return qe.Filter(must=must)


def _config(dim: int) -> qe.EdgeConfig:
    return qe.EdgeConfig(vectors=qe.EdgeVectorParams(size=dim, distance=qe.Distance.Cosine))


class QdrantEdgeIndex:
    """One collection (cosine, one unnamed dense vector) as a qdrant-edge shard under ``path``.

    Opening takes the owner lock and loads an existing shard; a new one is created by
    ``ensure_collection``. Calls are serialised by a lock, so the index may be shared
    between threads. Engine errors are raised as :class:`VectorIndexError`.
    """

    def __init__(self, path: str | Path, collection: str) -> None:
        """Open collection ``collection`` under directory ``path`` (created if absent).

        Raises:
            VectorIndexError: if ``collection`` is not a plain directory name, if another
                process (or another open index in this process) owns the shard, or if
                the engine cannot load it.
        """
        if not _NAME.fullmatch(collection):
            raise VectorIndexError(f"collection name {collection!r} is not a plain directory name")
        self.collection = collection
        self.path = Path(path)
        self.shard_path = self.path / collection
        self._lock = threading.RLock()
        self._owner_lock: PathOwnerLock | None = PathOwnerLock(
            self.path / f"{collection}.memledger-owner.lock",
            what=f"qdrant-edge shard {self.shard_path}",
            collection=collection,
        )
        self._shard: qe.EdgeShard | None = None
        self._dim: int | None = None  # known once opened with a config
        self._rewrite = self.path / f"{collection}.compacting"
        self._replaced = self.path / f"{collection}.old"
        try:
            self._finish_compaction()
            if self._has_data():
                with self._engine("open"):
                    self._shard = qe.EdgeShard.load(str(self.shard_path))
        except BaseException:
            self.close()
            raise

    def _has_data(self) -> bool:
        return self.shard_path.is_dir() and any(self.shard_path.iterdir())

    def _finish_compaction(self) -> None:
        """After a ``compact`` that was cut short (the owner lock is held): a rewrite whose
        swap did not happen is complete only if the shard directory is gone (it is renamed
        away only once the rewrite is closed), so it is moved in; otherwise it is dropped."""
        if self._rewrite.exists():
            if self.shard_path.exists():
                shutil.rmtree(self._rewrite)
            else:
                self._rewrite.rename(self.shard_path)
        if self._replaced.exists():
            shutil.rmtree(self._replaced)

    @contextmanager
    def _engine(self, op: str, memory_id: str | None = None) -> Iterator[None]:
        with self._lock:
            if self._owner_lock is None:
                raise VectorIndexError(f"{op}: index on {self.collection!r} is closed", collection=self.collection)
            try:
                yield
            except VectorIndexError:
                raise
            except Exception as exc:
                raise VectorIndexError(
                    f"{op} on collection {self.collection!r} failed: {exc}",
                    collection=self.collection,
                    memory_id=memory_id,
                ) from exc

    def _open_shard(self, op: str) -> qe.EdgeShard:
        if self._shard is None:
            raise VectorIndexError(
                f"{op}: collection {self.collection!r} does not exist (call ensure_collection)",
                collection=self.collection,
            )
        return self._shard

    def _id(self, memory_id: object) -> str:
        return canonical_id(memory_id, collection=self.collection)

    def ensure_collection(self, dim: int) -> None:
        """Create the shard for ``dim``-d cosine vectors if absent; add missing payload indexes.

        Raises:
            VectorIndexError: if it exists with another dimension or distance (the engine
                refuses the config; the shard stays open as it was).
        """
        if dim < 1:
            raise VectorIndexError(f"dimension must be positive, not {dim}", collection=self.collection)
        with self._engine("ensure_collection"):
            if self._dim is not None and self._dim != dim:
                raise VectorIndexError(
                    f"collection {self.collection!r} exists with {self._dim}-d vectors, not {dim}-d",
                    collection=self.collection,
                )
            if self._dim is None:
                self._open_with(dim)
            shard = self._open_shard("ensure_collection")
            present = shard.info().payload_schema
            for field, kind in PAYLOAD_INDEXES.items():
                if field not in present:
                    shard.update(qe.UpdateOperation.create_field_index(field, _SCHEMA[kind]))

    def _open_with(self, dim: int) -> None:
        """(Re)open the shard with a ``dim`` config; the engine checks it against the stored one."""
        if self._shard is not None:
            self._shard.close()
            self._shard = None
        if not self._has_data():
            self._shard = qe.EdgeShard.create(str(self.shard_path), _config(dim))
        else:
            try:
                self._shard = qe.EdgeShard.load(str(self.shard_path), _config(dim))
            except Exception as exc:
                self._shard = qe.EdgeShard.load(str(self.shard_path))
                raise VectorIndexError(
                    f"collection {self.collection!r} exists with another vector config than {dim}-d cosine: {exc}",
                    collection=self.collection,
                ) from exc
        self._dim = dim

    def upsert(self, points: Sequence[VectorPoint]) -> None:
        """Insert or replace ``points`` (whole vector and payload)."""
        batch = [qe.Point(self._id(p.memory_id), list(map(float, p.vector)), dict(p.payload)) for p in points]
        if batch:
            with self._engine("upsert"):
                self._open_shard("upsert").update(qe.UpdateOperation.upsert_points(batch))

    def set_payload(self, memory_id: str, payload: Mapping[str, Any]) -> None:
        """Set the given keys on point ``memory_id``, keeping the others; no-op if it is absent."""
        point_id = self._id(memory_id)
        # by filter: the engine raises "No point with id" when set_payload names an absent id
        ids: set[PointId] = {point_id}
        op = qe.UpdateOperation.set_payload_by_filter(qe.Filter(must=[qe.HasIdCondition(ids)]), dict(payload))
        with self._engine("set_payload", point_id):
            self._open_shard("set_payload").update(op)

    def delete(self, memory_ids: Sequence[str]) -> None:
        """Delete these points; absent ones are ignored."""
        ids: list[PointId] = [self._id(m) for m in memory_ids]
        if ids:
            with self._engine("delete"):
                self._open_shard("delete").update(qe.UpdateOperation.delete_points(ids))

    def _scroll(self, op: str, flt: qe.Filter | None) -> list[str]:
        ids: list[str] = []
        offset: PointId | None = None
        with self._engine(op):
            shard = self._open_shard(op)
            while True:
                request = qe.ScrollRequest(
                    offset=offset, limit=_SCROLL_PAGE, filter=flt, with_payload=False, with_vector=False
                )
                records, offset = shard.scroll(request)
                ids.extend(self._id(r.id) for r in records)
                if offset is None:
                    return ids

    def find_derived_from(self, memory_ids: Sequence[str]) -> list[str]:
        """Ids of the points whose payload ``derived_from`` holds any of ``memory_ids``."""
        sources = [self._id(m) for m in memory_ids]
        if not sources:
            return []
        return self._scroll("find_derived_from", qe.Filter(must=[_match("derived_from", sources)]))

    def _records(
        self, op: str, memory_ids: Sequence[str], *, with_payload: bool
    ) -> tuple[dict[str, str], list[qe.Record]]:
        """The canonical ids of ``memory_ids`` mapped to their spelling as given, and the
        shard's records of the present ones, with vectors (none read when there are no ids)."""
        given = {self._id(m): m for m in memory_ids}
        ids: list[PointId] = list(given)
        if not ids:
            return given, []
        with self._engine(op):
            return given, self._open_shard(op).retrieve(ids, with_payload=with_payload, with_vector=True)

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
        request = qe.QueryRequest(
            limit=limit,
            query=qe.Query.Nearest(list(map(float, vector))),
            filter=_search_filter(flt),
            with_payload=True if payload_keys is None else qe.PayloadSelector.Include(list(payload_keys)),
            with_vector=False,
        )
        with self._engine("search"):
            points = self._open_shard("search").query(request)
        return [VectorHit(self._id(p.id), float(p.score), dict(p.payload or {})) for p in points]

    def scroll_ids(self, subject_id: str | None = None) -> list[str]:
        """All point ids, or those of one subject."""
        flt = None if subject_id is None else qe.Filter(must=[_equals("subject_id", subject_id)])
        return self._scroll("scroll_ids", flt)

    def count(self) -> int:
        """Exact number of points."""
        with self._engine("count"):
            return self._open_shard("count").count(qe.CountRequest(exact=True))

    def compact(self) -> str:
        """Rewrite the shard from its live points (vectors, payloads, payload indexes)
        into new storage and delete the old directory, WAL and segments included."""
        with self._engine("compact"):
            shard = self._open_shard("compact")
            if self._dim is None:
                raise VectorIndexError(f"compact: call ensure_collection on {self.collection!r} first")
            ids: list[PointId] = list(self._scroll("compact", None))
            if self._rewrite.exists():
                shutil.rmtree(self._rewrite)
            fresh = qe.EdgeShard.create(str(self._rewrite), _config(self._dim))
            try:
                for field, kind in PAYLOAD_INDEXES.items():
                    fresh.update(qe.UpdateOperation.create_field_index(field, _SCHEMA[kind]))
                for start in range(0, len(ids), _SCROLL_PAGE):
                    records = shard.retrieve(ids[start : start + _SCROLL_PAGE], with_payload=True, with_vector=True)
                    batch = [qe.Point(r.id, r.vector, r.payload or {}) for r in records if r.vector is not None]
                    if batch:
                        fresh.update(qe.UpdateOperation.upsert_points(batch))
                fresh.flush()
            finally:
                fresh.close()
            shard.close()
            self._shard = None
            self.shard_path.rename(self._replaced)
            self._rewrite.rename(self.shard_path)
            self._shard = qe.EdgeShard.load(str(self.shard_path), _config(self._dim))
            shutil.rmtree(self._replaced)
            return f"rewrote {counted(len(ids), 'point')} into new storage (old segments and WAL deleted)"

    def drop_collection(self) -> None:
        """Close the shard and delete its directory; no-op if absent. The owner lock is kept."""
        with self._engine("drop_collection"):
            if self._shard is not None:
                self._shard.close()
                self._shard = None
            self._dim = None
            if self.shard_path.exists():
                shutil.rmtree(self.shard_path)

    def close(self) -> None:
        """Flush and close the shard, then release the owner lock. Idempotent."""
        with self._lock:
            shard, self._shard = self._shard, None
            lock, self._owner_lock = self._owner_lock, None
            try:
                if shard is not None:
                    shard.flush()
                    shard.close()
            except Exception as exc:
                raise VectorIndexError(
                    f"close of collection {self.collection!r} failed: {exc}", collection=self.collection
                ) from exc
            finally:
                if lock is not None:
                    lock.release()
