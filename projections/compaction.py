"""Compaction: rewriting the files in which erased, redacted and revoked content outlives
its removal.

Removing a row or a point does not remove its bytes. PostgreSQL keeps old row versions
and index entries in the table files until the table is rewritten (``VACUUM FULL``), its
statistics may sample a value (``pg_statistic``), and its WAL keeps every change until
the segments are removed; Qdrant keeps deleted points in its segments and WAL; Redis
keeps deleted keys in its RDB dump or AOF until they are rewritten. ``compact`` rewrites
each of them, records what it did in ``compactions``, and ``trace`` reads that record for
its ``disk`` row (``last_complete``).

Steps, each reported with its outcome (``done``, ``nothing`` to do, ``busy``: its lock
was not granted within the wait, ``skipped``: this deployment cannot do it, with the
reason, ``failed``: with the error):

- ``postgres`` ``snapshots``: a wait, at most ``snapshot_wait_s`` seconds, until no other
  session of the database holds a snapshot older than the compaction: ``VACUUM FULL``
  copies every row version such a snapshot may still see ("recently dead"), so while one
  is open the removed rows stay in the new files (``busy`` then; the rewrites still run);
- ``postgres``: ``VACUUM (FULL, ANALYZE)`` of every table given (a new file, indexes
  rebuilt, statistics sampled from live rows only), each waiting at most
  ``lock_timeout_s`` seconds for its exclusive lock; then ``VACUUM FULL pg_statistic``
  (superuser only) so that statistics sampled before leave its file too;
- ``wal``: a WAL switch and a checkpoint, after which the segments written before are
  removed (``wal_recycle = off``; with ``on``, PostgreSQL's default, they are renamed for
  reuse and keep their bytes until overwritten, so the step is ``skipped``). On a server
  this process owns (the embedded one) ``wal_recycle`` is turned off and segments already
  recycled ahead are passed through, one switch each, so that they are written over;
- ``vectors``: ``VectorIndex.compact`` of every collection given;
- ``cache``: the Redis dump rewritten (``SAVE`` for the embedded server, ``BGSAVE`` for a
  server with RDB persistence) and its AOF rewritten when it has one.

A compaction is ``complete`` when every step is ``done`` or has ``nothing`` to do.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

import psycopg
from psycopg.types.json import Jsonb
from psycopg_pool import ConnectionPool

from contracts import iso_utc, utc_now
from ledger.pgschema import ensure_schema, wait_for_older_snapshots
from projections.vector_index import VectorIndex

SCHEMA_SQL = """
CREATE TABLE IF NOT EXISTS compactions (
    compaction_id  text PRIMARY KEY,
    started_at     timestamptz NOT NULL,
    finished_at    timestamptz NOT NULL,
    complete       boolean NOT NULL,
    steps          jsonb NOT NULL
);
CREATE INDEX IF NOT EXISTS compactions_started ON compactions (started_at);
"""

DONE_STATUSES = ("done", "nothing")
"""Outcomes of a step that leave nothing to do."""

MAX_RECYCLED_SEGMENTS = 256
"""At most this many WAL segments recycled ahead are written over (16 MB each: 4 GB)."""

Progress = Callable[[str, int, int], None]
"""``progress(step, done, total)``, called before each step."""


@dataclass(frozen=True)
class CompactionStep:
    """One step: ``store`` (``postgres``, ``wal``, ``vectors``, ``cache``), ``target``
    (a table, a collection, ``redis``), ``status`` (see the module), ``detail`` in words
    and ``seconds`` it took."""

    store: str
    target: str
    status: str
    detail: str
    seconds: float


@dataclass
class CompactionReport:
    """What one compaction did. Times are ISO 8601 UTC."""

    compaction_id: str
    started_at: str
    finished_at: str
    complete: bool
    steps: list[CompactionStep] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def render(self) -> str:
        """A plain-text table, for terminals."""
        lines = [f"compaction {self.compaction_id}: {'complete' if self.complete else 'partial'}"]
        lines += [f"{s.store:<9} {s.target:<28} {s.status:<8} {s.seconds:>7.2f} s  {s.detail}" for s in self.steps]
        return "\n".join(lines)


@dataclass
class CompactTargets:
    """What to compact. ``tables``: trusted table names (absent ones are left out);
    ``indexes``: vector collections this process owns, or, for one it cannot reach, the
    collection's name and why (a ``skipped`` step); ``redis``: the cache's client, or
    ``None``; ``own_server``: the PostgreSQL server is this deployment's own (the
    embedded one), so its WAL settings may be changed; ``embedded_redis``: the Redis
    server is the embedded one (``SAVE`` it)."""

    tables: Sequence[str]
    indexes: Sequence[VectorIndex | tuple[str, str]] = ()
    redis: Any | None = None
    own_server: bool = False
    embedded_redis: bool = False
    lock_timeout_s: float = 5.0
    redis_wait_s: float = 60.0
    snapshot_wait_s: float = 30.0


def install(conn: psycopg.Connection) -> None:
    """Create ``compactions`` if missing."""
    ensure_schema(conn, "compactions", SCHEMA_SQL)


def compact(
    pool: ConnectionPool, targets: CompactTargets, compaction_id: str, progress: Progress | None = None
) -> CompactionReport:
    """Run every step on ``targets``, record the report in ``compactions`` and return it.
    A step's failure is reported, not raised, and the other steps still run.

    Raises:
        psycopg.Error: the report could not be recorded (or PostgreSQL cannot be reached).
    """
    started = utc_now()
    with pool.connection() as conn:
        install(conn)
        tables = [t for t in targets.tables if conn.execute("SELECT to_regclass(%s)", (t,)).fetchone() != (None,)]
    total = len(tables) + 3 + len(targets.indexes) + (targets.redis is not None)
    done = 0

    def step(name: str) -> None:
        nonlocal done
        done += 1
        if progress is not None:
            progress(name, done, total)

    steps: list[CompactionStep] = []
    with pool.connection() as conn:
        conn.autocommit = True
        try:
            step("wait for older snapshots")
            steps.append(_snapshots(conn, targets.snapshot_wait_s))
            conn.execute(f"SET lock_timeout = '{int(targets.lock_timeout_s * 1000)}ms'")
            for table in tables:
                step(f"VACUUM FULL {table}")
                steps.append(_vacuum_full(conn, table))
            step("VACUUM FULL pg_statistic")
            steps.append(_statistics(conn))
            step("WAL switch and checkpoint")
            steps.append(_wal(conn, targets.own_server))
        finally:
            conn.execute("RESET lock_timeout")
            conn.autocommit = False
    for index in targets.indexes:
        step(f"compact {index[0] if isinstance(index, tuple) else index.collection}")
        steps.append(_vectors(index))
    if targets.redis is not None:
        step("rewrite the Redis dump")
        steps.append(_redis(targets.redis, targets.embedded_redis, targets.redis_wait_s))
    report = CompactionReport(
        compaction_id=compaction_id,
        started_at=iso_utc(started),
        finished_at=iso_utc(utc_now()),
        complete=all(s.status in DONE_STATUSES for s in steps),
        steps=steps,
    )
    with pool.connection() as conn, conn.transaction():
        conn.execute(
            "INSERT INTO compactions (compaction_id, started_at, finished_at, complete, steps)"
            " VALUES (%s, %s, %s, %s, %s)",
            (compaction_id, started, report.finished_at, report.complete, Jsonb([asdict(s) for s in steps])),
        )
    return report


@dataclass(frozen=True)
class LastCompaction:
    """The compactions that started after a moment: the first complete one's finish
    time (ISO 8601 UTC), if any, and the last partial one's steps that were not done."""

    complete_at: str | None
    partial_at: str | None = None
    left: tuple[str, ...] = ()


def last_complete(conn: psycopg.Connection, after: datetime) -> LastCompaction:
    """What compaction did after ``after`` (UTC): see ``LastCompaction``. Works on a
    database without ``compactions`` (nothing was ever compacted)."""
    if conn.execute("SELECT to_regclass('compactions')").fetchone() == (None,):
        return LastCompaction(None)
    row = conn.execute(
        "SELECT finished_at FROM compactions WHERE complete AND started_at >= %s ORDER BY started_at LIMIT 1",
        (after,),
    ).fetchone()
    if row is not None:
        return LastCompaction(iso_utc(row[0]))
    partial = conn.execute(
        "SELECT finished_at, steps FROM compactions WHERE started_at >= %s ORDER BY started_at DESC LIMIT 1",
        (after,),
    ).fetchone()
    if partial is None:
        return LastCompaction(None)
    steps = partial[1] if isinstance(partial[1], list) else json.loads(partial[1])
    left = tuple(f"{s['target']}: {s['detail']}" for s in steps if s["status"] not in DONE_STATUSES)
    return LastCompaction(None, iso_utc(partial[0]), left)


# -- steps --------------------------------------------------------------------------------


def _timed(store: str, target: str, run: Callable[[], tuple[str, str]]) -> CompactionStep:
    started = time.monotonic()
    try:
        status, detail = run()
    except Exception as exc:  # psycopg, vector index, Redis or OS errors: reported, the next step runs
        status, detail = "failed", f"{type(exc).__name__}: {str(exc).strip()[:300]}"
    return CompactionStep(store, target, status, detail, round(time.monotonic() - started, 3))


def _snapshots(conn: psycopg.Connection, wait_s: float) -> CompactionStep:
    def run() -> tuple[str, str]:
        if n := wait_for_older_snapshots(conn, wait_s):
            return "busy", (
                f"{n} session(s) still hold a snapshot older than the compaction after {wait_s:.0f} s: the rows "
                "they may see stay in the rewritten files; run compact again when they have ended"
            )
        return "done", "no snapshot older than the compaction is open"

    return _timed("postgres", "snapshots", run)


def _vacuum_full(conn: psycopg.Connection, table: str) -> CompactionStep:
    def run() -> tuple[str, str]:
        try:
            conn.execute(f"VACUUM (FULL, ANALYZE) {table}")
        except psycopg.errors.LockNotAvailable:
            return "busy", "its lock was not granted within the wait: run compact again when it is quieter"
        return "done", "rewritten with its indexes; statistics sampled from live rows"

    return _timed("postgres", table, run)


def _superuser(conn: psycopg.Connection) -> bool:
    row = conn.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user").fetchone()
    return bool(row and row[0])


def _statistics(conn: psycopg.Connection) -> CompactionStep:
    def run() -> tuple[str, str]:
        if not _superuser(conn):
            return "skipped", "needs a superuser: statistics sampled before the erasure may stay in pg_statistic"
        try:
            conn.execute("VACUUM FULL pg_statistic")
        except psycopg.errors.LockNotAvailable:
            return "busy", "its lock was not granted within the wait"
        return "done", "rewritten: statistics sampled from removed rows are gone"

    return _timed("postgres", "pg_statistic", run)


def _wal(conn: psycopg.Connection, own_server: bool) -> CompactionStep:
    def run() -> tuple[str, str]:
        if not _superuser(conn):
            return "skipped", "needs a superuser (pg_switch_wal, CHECKPOINT): old WAL segments stay until recycled"
        if own_server:
            conn.execute("ALTER SYSTEM SET wal_recycle = off")
            conn.execute("ALTER SYSTEM SET wal_init_zero = on")
            conn.execute("SELECT pg_reload_conf()")
            time.sleep(0.2)  # the checkpointer reads the new setting on its next cycle
        row = conn.execute("SELECT current_setting('wal_recycle')").fetchone()
        recycle = row is not None and row[0] == "on"
        conn.execute("SELECT pg_switch_wal()")
        conn.execute("CHECKPOINT")
        passed = 0
        if own_server:
            for _ in range(_recycled_ahead(conn)):
                conn.execute("CHECKPOINT")  # something to switch away from
                conn.execute("SELECT pg_switch_wal()")
                passed += 1
            conn.execute("CHECKPOINT")
        if recycle:
            return "skipped", (
                "switched and checkpointed, but wal_recycle = on: old segments are renamed for reuse and keep"
                " their bytes until overwritten (set wal_recycle = off on the server)"
            )
        ahead = f"; {passed} segments recycled ahead written over" if passed else ""
        return "done", f"switched and checkpointed: segments written before are removed{ahead}"

    return _timed("wal", "pg_wal", run)


def _recycled_ahead(conn: psycopg.Connection) -> int:
    """How many WAL segment files lie ahead of the current one (recycled: they hold the
    bytes of older segments until written over), at most ``MAX_RECYCLED_SEGMENTS``."""
    row = conn.execute(
        "SELECT count(*) FROM pg_ls_waldir() WHERE name ~ '^[0-9A-F]{24}$'"
        " AND name > pg_walfile_name(pg_current_wal_insert_lsn())"
    ).fetchone()
    return min(int(row[0]) if row else 0, MAX_RECYCLED_SEGMENTS)


def _vectors(index: VectorIndex | tuple[str, str]) -> CompactionStep:
    if isinstance(index, tuple):
        return CompactionStep("vectors", index[0], "skipped", index[1], 0.0)

    def run() -> tuple[str, str]:
        detail = index.compact()
        if detail.startswith("in memory"):
            return "nothing", detail
        return ("done" if detail.startswith("rewrote") else "skipped"), detail

    return _timed("vectors", index.collection, run)


def _redis(client: Any, embedded: bool, wait_s: float) -> CompactionStep:
    def run() -> tuple[str, str]:
        if embedded:
            client.save()
            return "done", "dump rewritten (SAVE): deleted keys left it"
        try:
            save = client.config_get("save").get("save", "")
            aof = client.config_get("appendonly").get("appendonly", "no") == "yes"
        except Exception:  # CONFIG is often disabled on managed servers: try both
            save, aof = "unknown", True
        if not save and not aof:
            return "nothing", "no RDB or AOF persistence configured: the server keeps nothing on disk"
        done: list[str] = []
        if save:
            _wait_idle(client, "rdb_bgsave_in_progress", wait_s)
            client.bgsave()
            _wait_idle(client, "rdb_bgsave_in_progress", wait_s)
            done.append("dump rewritten (BGSAVE)")
        if aof:
            _wait_idle(client, "aof_rewrite_in_progress", wait_s)
            client.bgrewriteaof()
            _wait_idle(client, "aof_rewrite_in_progress", wait_s)
            done.append("AOF rewritten (BGREWRITEAOF)")
        return "done", "; ".join(done)

    return _timed("cache", "redis", run)


def _wait_idle(client: Any, flag: str, wait_s: float) -> None:
    """Wait until INFO persistence says ``flag`` is 0, at most ``wait_s`` seconds.

    Raises:
        TimeoutError: still in progress after ``wait_s`` seconds.
    """
    deadline = time.monotonic() + wait_s
    while int(client.info("persistence").get(flag, 0)):
        if time.monotonic() > deadline:
            raise TimeoutError(f"Redis {flag} still set after {wait_s} s")
        time.sleep(0.1)
