"""The cache projection (Redis): recall results per subject, purpose and query, with TTL.

Every event of a subject deletes that subject's cache entries with an explicit DEL
(never left to TTL) and bumps the subject's generation counter. Recall stores a result
only if the generation it read before computing is still current (checked atomically in
a Lua script), so a result computed before an event can never be stored after it.
An entry's TTL never goes beyond the earliest ``expires_at`` of what it holds.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Sequence
from typing import Any

import redis
from psycopg_pool import ConnectionPool

from contracts import ErasureRequested, Event
from ledger.eventlog import LogPosition
from projections import base

_PUT_LUA = """
local current = redis.call('GET', KEYS[1]) or '0'
if current ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[3])
redis.call('SADD', KEYS[3], KEYS[2])
return 1
"""

_INVALIDATE_LUA = """
local keys = redis.call('SMEMBERS', KEYS[2])
local removed = 0
for _, k in ipairs(keys) do removed = removed + redis.call('DEL', k) end
redis.call('DEL', KEYS[2])
redis.call('INCR', KEYS[1])
return removed
"""


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
        self._invalidate = client.register_script(_INVALIDATE_LUA)

    @property
    def client(self) -> redis.Redis:
        """The Redis client (for maintenance: ``memledger compact`` rewrites the server's dump)."""
        return self._r

    def _gen_key(self, subject_id: str) -> str:
        return f"{self.prefix}subject:{subject_id}:gen"

    def _set_key(self, subject_id: str) -> str:
        return f"{self.prefix}subject:{subject_id}:keys"

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
        """Store ``value`` for ``ttl_s`` seconds (rounded up to ms) if ``generation`` is
        still current; returns whether it was stored. A TTL <= 0 stores nothing."""
        if ttl_s <= 0:
            return False
        ttl_ms = max(1, math.ceil(ttl_s * 1000))
        stored = self._put(
            keys=[self._gen_key(subject_id), key, self._set_key(subject_id)],
            args=[generation, json.dumps(value), ttl_ms],
        )
        return bool(stored)

    def invalidate(self, subject_id: str) -> int:
        """Delete every entry of the subject; returns how many keys were deleted."""
        return int(self._invalidate(keys=[self._gen_key(subject_id), self._set_key(subject_id)]))

    def entries(self, subject_id: str) -> list[str]:
        """Live entry keys of the subject (for probes)."""
        members = self._r.smembers(self._set_key(subject_id))
        keys = [m.decode() if isinstance(m, bytes) else str(m) for m in members]
        return [k for k in keys if self._r.exists(k)]

    def drop_subject(self, subject_id: str) -> int:
        """Delete every cached recall result of the subject, found by scanning its key
        prefix (so entries its key set does not list count too), and bump its generation.
        Returns how many keys were deleted."""
        pattern = f"{self.prefix}recall:{_glob_escape(subject_id)}:*"
        deleted = sum(int(self._r.delete(k)) for k in self._r.scan_iter(match=pattern, count=500))
        return deleted + self.invalidate(subject_id)

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

    def apply_batch(self, items: Sequence[tuple[Event, LogPosition]]) -> None:
        """Invalidate each touched subject once, then store receipts and positions."""
        todo = self.pending(items)
        removed = {subject: self.cache.invalidate(subject) for subject in dict.fromkeys(e.subject_id for e, _ in todo)}
        for event, _ in todo:
            if isinstance(event, ErasureRequested) and event.request_kind == "subject":
                removed[event.subject_id] += self.cache.drop_subject(event.subject_id)  # entries its set does not list
        self.commit_positions(todo, "cache", lambda e: removed.get(e.subject_id, 0))
