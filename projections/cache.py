"""The cache projection (Redis): recall results per subject, purpose and query, with TTL.

Every event of a subject that changes one of its memories deletes that subject's cache
entries with an explicit DEL (never left to TTL) and bumps the subject's generation
counter. Recall stores a result only if the generation it read before computing is still
current (checked atomically in a Lua script), so a result computed before an event can
never be stored after it. An entry's TTL never goes beyond the earliest ``expires_at`` of
what it holds.

Revision-guarded (``projections.marks``): the cache keeps, per subject, a hash of marks
(memory id -> ``revision|status``, no content, no TTL). An event changes the cache only
if it is newer than the mark of one of its memories (an older event delivered again
deletes nothing); an erasure delivered again still deletes every entry that holds one of
its memories, and only those (a whole-subject erasure deletes every entry of its subject
where it is first applied: ``base.whole_subject_erasures``). A result holding a memory at a revision
older than that memory's mark is never stored: recall reading a fact table that lags
behind the cache cannot put back what an event already invalidated. Marks and
invalidation are one Lua script, run before the position is stored in Postgres; run
again after a crash, it finds the marks advanced and changes nothing (invariant 2).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Collection, Mapping, Sequence
from typing import Any

import redis
from psycopg_pool import ConnectionPool

from contracts import ErasureRequested, Event, touched_memories
from ledger.eventlog import LogPosition
from projections import base, marks
from projections.opening import OpenedContent

_PUT_LUA = """
local current = redis.call('GET', KEYS[1]) or '0'
if current ~= ARGV[1] then return 0 end
for i = 4, #ARGV, 2 do
  local mark = redis.call('HGET', KEYS[4], ARGV[i])
  if mark and tonumber(string.match(mark, '^(%d+)')) > tonumber(ARGV[i + 1]) then return 0 end
end
redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[3])
redis.call('SADD', KEYS[3], KEYS[2])
return 1
"""
"""KEYS: generation, entry, entry set, marks. ARGV: generation read, value, TTL (ms),
then (memory id, revision) pairs of what the value holds."""

_APPLY_LUA = """
local changed = ARGV[1] == '1'
local erased = tonumber(ARGV[2])
for i = 3 + erased, #ARGV, 3 do
  local mark = redis.call('HGET', KEYS[3], ARGV[i])
  local revision, status = -1, ''
  if mark then
    local r, st = string.match(mark, '^(%d+)|(.*)$')
    revision, status = tonumber(r), st
  end
  if tonumber(ARGV[i + 1]) > revision then
    if ARGV[i + 2] ~= '' then status = ARGV[i + 2] end
    redis.call('HSET', KEYS[3], ARGV[i], ARGV[i + 1] .. '|' .. status)
    changed = true
  end
end
local removed = 0
if changed then
  for _, k in ipairs(redis.call('SMEMBERS', KEYS[2])) do removed = removed + redis.call('DEL', k) end
  redis.call('DEL', KEYS[2])
  redis.call('INCR', KEYS[1])
  return removed
end
if erased == 0 then return -1 end
for _, k in ipairs(redis.call('SMEMBERS', KEYS[2])) do
  local v = redis.call('GET', k)
  local hit = not v
  for j = 3, 2 + erased do
    if v and string.find(v, ARGV[j], 1, true) then hit = true end
  end
  if hit then
    removed = removed + redis.call('DEL', k)
    redis.call('SREM', KEYS[2], k)
  end
end
return removed
"""
"""KEYS: generation, entry set, marks. ARGV: '1' to invalidate whatever the marks say,
the number of erased memory ids that follow, those ids, then (memory id, revision,
status or '') triples in log order ('': the event leaves the status). A triple newer than
its mark invalidates the subject (every entry deleted, the generation bumped); if none
is, only the entries naming an erased id are deleted (an erasure's removals always
apply; the other results stay). Returns the entries deleted, or -1 when nothing changed."""


def held_revisions(value: Any) -> list[tuple[str, int]]:
    """The (memory id, revision) pairs a recall result holds: its items and the items
    grouped under them (items without both are left out)."""
    out: list[tuple[str, int]] = []
    for item in value if isinstance(value, list) else []:
        for held in (item, *(item.get("grouped") or [])) if isinstance(item, dict) else ():
            if isinstance(held, dict) and isinstance(held.get("revision"), int) and held.get("memory_id"):
                out.append((str(held["memory_id"]), int(held["revision"])))
    return out


def _glob_escape(text: str) -> str:
    """``text`` with Redis glob metacharacters escaped, for a ``SCAN MATCH`` pattern."""
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)


class RecallCache:
    """Read-through cache of recall results in Redis under ``memledger:cache_v{version}:``."""

    def __init__(self, client: redis.Redis, version: int = 1, default_ttl_s: float = 300.0) -> None:
        self._r = client
        self.prefix = f"memledger:cache_v{version}:"
        self.default_ttl_s = default_ttl_s
        self._put = client.register_script(_PUT_LUA)
        self._apply = client.register_script(_APPLY_LUA)

    @property
    def client(self) -> redis.Redis:
        """The Redis client (for maintenance: ``memledger compact`` rewrites the server's dump)."""
        return self._r

    def _gen_key(self, subject_id: str) -> str:
        return f"{self.prefix}subject:{subject_id}:gen"

    def _set_key(self, subject_id: str) -> str:
        return f"{self.prefix}subject:{subject_id}:keys"

    def _marks_key(self, subject_id: str) -> str:
        return f"{self.prefix}subject:{subject_id}:marks"

    def entry_key(self, subject_id: str, request: dict[str, Any]) -> str:
        """The key of a recall request (SHA-256 of its canonical JSON)."""
        digest = hashlib.sha256(json.dumps(request, sort_keys=True).encode()).hexdigest()[:32]
        return f"{self.prefix}recall:{subject_id}:{digest}"

    def generation(self, subject_id: str) -> str:
        """The subject's current generation; read it before computing a result."""
        value = self._r.get(self._gen_key(subject_id))
        return value.decode() if isinstance(value, bytes) else str(value or "0")

    def get(self, key: str) -> Any | None:
        raw = self._r.get(key)
        return None if raw is None else json.loads(raw)

    def put(self, subject_id: str, key: str, generation: str, value: Any, ttl_s: float) -> bool:
        """Store ``value`` (a recall result: a list of items, each a dict with
        ``memory_id``, ``revision`` and ``grouped`` items) for ``ttl_s`` seconds (rounded
        up to ms) if ``generation`` is still current and no item holds a memory at a
        revision older than the cache's mark for it; returns whether it was stored. A TTL
        <= 0 stores nothing."""
        if ttl_s <= 0:
            return False
        ttl_ms = max(1, math.ceil(ttl_s * 1000))
        held = [a for memory_id, revision in held_revisions(value) for a in (memory_id, revision)]
        stored = self._put(
            keys=[self._gen_key(subject_id), key, self._set_key(subject_id), self._marks_key(subject_id)],
            args=[generation, json.dumps(value), ttl_ms, *held],
        )
        return bool(stored)

    def marks(self, subject_id: str) -> dict[str, tuple[int, str | None]]:
        """The subject's marks: memory id -> (revision, status or ``None``)."""
        out: dict[str, tuple[int, str | None]] = {}
        for raw_id, raw in self._r.hgetall(self._marks_key(subject_id)).items():
            memory_id = raw_id.decode() if isinstance(raw_id, bytes) else str(raw_id)
            text = raw.decode() if isinstance(raw, bytes) else str(raw)
            revision, _, status = text.partition("|")
            out[memory_id] = (int(revision), status or None)
        return out

    def invalidate(self, subject_id: str) -> int:
        """Delete every entry of the subject (and bump its generation); returns how many
        keys were deleted."""
        return self.apply_many({subject_id: ()}, everything=(subject_id,))[subject_id]

    def apply_many(
        self,
        changes: Mapping[str, Sequence[tuple[str, int, str | None]]],
        erased: Mapping[str, Sequence[str]] | None = None,
        everything: Collection[str] = (),
    ) -> dict[str, int]:
        """For each subject of ``changes``: advance its marks with its changes ((memory
        id, revision, status or ``None`` to keep it), in log order) and, if one of them was
        newer than its mark or the subject is in ``everything``, delete every entry of the
        subject and bump its generation; else delete the entries holding one of
        ``erased[subject]`` (the memories its erasures name, whose removals always apply).
        One pipeline: one round trip to Redis for all the subjects. Returns subject ->
        entries deleted (-1 when nothing changed).

        Raises:
            redis.RedisError: Redis failed (some subjects may be done: each script is
                idempotent, the caller retries them all).
        """
        subjects = list(changes)
        if not subjects:
            return {}
        pipe = self._r.pipeline(transaction=False)
        for subject in subjects:
            ids = (erased or {}).get(subject, ())
            args: list[str | int] = ["1" if subject in everything else "0", len(ids), *ids]
            for memory_id, revision, status in changes[subject]:
                args += [memory_id, revision, status or ""]
            keys = [self._gen_key(subject), self._set_key(subject), self._marks_key(subject)]
            self._apply(keys=keys, args=args, client=pipe)
        return {subject: int(n) for subject, n in zip(subjects, pipe.execute(), strict=True)}

    def entries(self, subject_id: str) -> list[str]:
        """Live entry keys of the subject (for probes)."""
        members = self._r.smembers(self._set_key(subject_id))
        keys = [m.decode() if isinstance(m, bytes) else str(m) for m in members]
        return [k for k in keys if self._r.exists(k)]

    def all_entries(self, subject_id: str) -> list[str]:
        """Every cached recall result key of the subject, listed in its entry set or not
        (found by scanning its key prefix: an entry restored from a backup, say). The
        pattern ends with the 32 hex digits of ``entry_key``, so that subject ``a`` does
        not match the entries of subject ``a:b``."""
        pattern = f"{self.prefix}recall:{_glob_escape(subject_id)}:" + "[0-9a-f]" * 32
        return [k.decode() if isinstance(k, bytes) else str(k) for k in self._r.scan_iter(match=pattern, count=500)]

    def drop_unlisted(self, subject_id: str) -> int:
        """Delete every cached recall result of the subject that its entry set does not
        list (:meth:`all_entries`), after :meth:`apply_many` with ``everything`` deleted the
        listed ones. Returns how many keys were deleted."""
        listed = set(self.entries(subject_id))
        return sum(int(self._r.delete(k)) for k in self.all_entries(subject_id) if k not in listed)

    def purge_memories(self, memory_ids: set[str]) -> tuple[int, list[str]]:
        """Delete every cached recall result holding any of ``memory_ids`` (found by
        scanning, so entries restored from a backup count too) and bump the generation
        of their subjects. Returns (entries deleted, the memory ids found)."""
        deleted = 0
        found: set[str] = set()
        subjects: set[str] = set()
        head = f"{self.prefix}recall:"
        for raw in self._r.scan_iter(match=f"{head}*", count=500):
            key = raw.decode() if isinstance(raw, bytes) else str(raw)
            hits = {str(i.get("memory_id")) for i in self.get(key) or []} & memory_ids
            if hits:
                found |= hits
                deleted += int(self._r.delete(key))
                subjects.add(key[len(head) :].rsplit(":", 1)[0])
        for subject in subjects:
            deleted += self.invalidate(subject)
        return deleted, sorted(found)

    def drop_all(self) -> int:
        """Delete every key under this cache's prefix (for a rebuild)."""
        removed = 0
        for key in self._r.scan_iter(match=f"{self.prefix}*", count=500):
            removed += int(self._r.delete(key))
        return removed


class CacheProjection(base.PositionedProjection):
    """Drops a subject's cached recall results on every event of that subject."""

    name = "cache"

    def __init__(self, pool: ConnectionPool, cache: RecallCache, version: int = 1) -> None:
        super().__init__(pool, version)
        self.cache = cache

    def reset(self) -> None:
        self.cache.drop_all()
        with self._pool.connection() as conn, conn.transaction():
            base.clear_positions(conn, self.id)

    def drop(self) -> None:
        """Delete every key under this version's prefix and its positions (retiring it)."""
        self.reset()

    def apply_batch(self, items: Sequence[tuple[Event, LogPosition]], opened: OpenedContent | None = None) -> None:
        """Advance each touched subject's marks and invalidate it once if an event was
        newer than a mark (else drop the entries holding a memory the batch erases), one
        Redis pipeline for the whole batch; a whole-subject erasure, where it is first
        applied (``base.whole_subject_erasures``), drops every entry of its subject, its
        entry set's and any other under its prefix. Then store receipts and positions in
        one transaction (``opened`` is not read: the cache holds no text of its own)."""
        todo = self.pending(items)
        if not todo:
            return
        whole: set[LogPosition] = set()
        if any(isinstance(e, ErasureRequested) and e.request_kind == "subject" for e, _ in todo):
            with self._pool.connection() as conn:
                whole = base.whole_subject_erasures(conn, "cache", self.id, todo)
        changes: dict[str, list[tuple[str, int, str | None]]] = {}
        erased: dict[str, list[str]] = {}
        everything: list[str] = []
        for event, position in todo:
            found = changes.setdefault(event.subject_id, [])
            found += [(r.memory_id, r.revision, marks.mark_status(event, None)) for r in touched_memories(event)]
            if isinstance(event, ErasureRequested):
                erased.setdefault(event.subject_id, []).extend(r.memory_id for r in event.affected)
                if position in whole:
                    everything.append(event.subject_id)
        removed = {s: max(0, n) for s, n in self.cache.apply_many(changes, erased, everything).items()}
        for subject in dict.fromkeys(everything):
            removed[subject] += self.cache.drop_unlisted(subject)
        self.commit_positions(todo, "cache", lambda e: removed.get(e.subject_id, 0))
