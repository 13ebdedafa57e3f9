"""Shadow rebuild, atomic swap, rollback and retirement of projection versions.

``rebuild(svc, "facts", 2)`` registers ``facts_v2`` as ``building``; it is then applied
from offset 0 (its own positions, ``projection_positions`` row ``facts_v2``) while
``facts_v1`` keeps serving and keeps being applied, until it reaches the live end of the
log; then the stable names swap to it (:func:`swap_to`). Who applies it: the rebuild
itself, and in the distributed mode also its own worker (consumer group
``<prefix>.facts_v2``, started by the ``memledger worker`` supervisor as soon as the
registry lists it; the two serialise on the version's positions), which keeps it up to
date after the swap. A vectors version on a local index has one owner: the rebuild
when it gets the collection's lock first (the worker waits for it), else the worker,
whose progress the rebuild then watches. Events and erasures that arrive
during the rebuild reach both versions: v1 is applied live, and v2 reads them from the
log.

The swap never makes recall staler: in one Postgres transaction it takes the registry
lock, locks the serving version's position rows (its appliers wait at their next
commit, so it cannot move on), applies to the new version everything up to the log's
end (at least as far as the serving version got), and only then updates the registry
and recreates the stable views. Against a Qdrant server the alias ``memories`` is
switched right after the commit (readers of this project resolve the collection through
the registry, so they never see the alias lag).

When the version cannot be applied in this process (vectors owned by a vectors worker,
no Qdrant server), the swap waits, up to ``wait_s``, for its worker to get as far as the
serving version.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass, replace
from urllib.parse import urlparse

import psycopg

from projections import base, versions
from projections.base import Projection
from projections.errors import VersionError
from projections.runner import RetryPolicy
from projections.vector_index import VectorIndexError
from projections.vectors import VectorsProjection, visible_positions
from projections.versions import EmbedderSpec, VersionInfo
from workers.bootstrap import Services, vector_query_url

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RebuildProgress:
    """Where a rebuild is, after a batch. ``position``: records of the log the version
    has applied (sum over partitions); ``end``: records in the log; ``lag = end -
    position``; ``rate``: records applied per second since the start; ``eta_s``: lag /
    rate, seconds (None before the first batch)."""

    projection: str
    applied: int
    position: int
    end: int
    lag: int
    rate: float
    eta_s: float | None


@dataclass(frozen=True)
class SwapResult:
    """The outcome of a rebuild, rollback or swap: ``serving`` serves now, ``previous``
    served before and is kept (and applied) until retired. ``events``: records applied
    by this command; ``seconds``: its wall time."""

    projection: str
    serving: int
    previous: int
    events: int
    seconds: float
    embedder: dict[str, object] | None = None

    def to_dict(self) -> dict[str, object]:
        out = asdict(self)
        out["events_per_s"] = round(self.events / self.seconds, 1) if self.seconds else None
        return out


def _progress_of(
    projection_id: str, done: dict[int, int], svc: Services, applied: int, started: float
) -> RebuildProgress:
    ends = svc.log.end_offsets()
    position = sum(min(end, done.get(p, -1) + 1) for p, end in ends.items())
    end = sum(ends.values())
    elapsed = max(time.monotonic() - started, 1e-9)
    rate = applied / elapsed
    lag = max(0, end - position)
    return RebuildProgress(projection_id, applied, position, end, lag, rate, lag / rate if rate > 0 else None)


def _embedder_spec(svc: Services, name: str, embedder: str | None) -> EmbedderSpec | None:
    if name != "vectors":
        if embedder is not None:
            raise VersionError("embedder", "only the vectors projection has an embedder")
        return None
    if embedder is None:
        current = svc.stores.serving()["vectors"].embedder
        assert current is not None
        embedder = current.name
    built = svc.stores.embedder(embedder)
    return EmbedderSpec(embedder, built.dim, built.model_name)


def _applies_here(svc: Services, info: VersionInfo) -> bool:
    """Whether this process can apply ``info``'s version. Postgres and Redis projections
    always (appliers serialise on the positions, so its worker may run too); vectors when
    this process owns the index (embedded), the index is a Qdrant server, or no other
    process holds the version's local collection (otherwise its worker applies it)."""
    if info.name != "vectors" or svc.settings.qdrant_url:
        return True
    return svc.stores.adopt(info.version)


def rebuild(
    svc: Services,
    name: str,
    to_version: int | None = None,
    embedder: str | None = None,
    progress: Callable[[RebuildProgress], None] | None = None,
    retry: RetryPolicy | None = None,
    batch_size: int = 500,
    wait_s: float = 120.0,
) -> SwapResult:
    """Build version ``to_version`` (default: one above every registered version) of
    projection ``name`` from offset 0 while the serving version keeps serving, follow
    the log to its live end, swap. A version left ``building`` by an interrupted rebuild
    is resumed from its positions. ``embedder`` (vectors only; default the serving
    version's): the embedder name of the new collection.

    Raises:
        VersionError: bad name, version or embedder (see ``versions.begin_build``), or
            the swap could not align the versions.
        ProjectionStalledError: a store stayed down beyond ``retry``.
    """
    [result] = rebuild_many(svc, [name], to_version, embedder, progress, retry, batch_size, wait_s)
    return result


def rebuild_many(
    svc: Services,
    names: Sequence[str],
    to_version: int | None = None,
    embedder: str | None = None,
    progress: Callable[[RebuildProgress], None] | None = None,
    retry: RetryPolicy | None = None,
    batch_size: int = 500,
    wait_s: float = 120.0,
) -> list[SwapResult]:
    """``rebuild`` for several projections (each name once, in the order given) in ONE
    pass over the log: every record is read, decoded and opened once and fanned out to
    each new version (``Services.fan_out``); then each one is swapped in turn. A version
    this process cannot apply (vectors whose local collection another process holds) is
    followed as its worker builds it. ``to_version`` only with one name; ``embedder``
    applies to vectors (refused when vectors is not among ``names``). Progress names the
    versions together and counts what all of them have applied.

    Raises:
        VersionError: as ``rebuild``; also several names with ``to_version``, a name
            given twice, or no name (nothing is registered then).
        ProjectionStalledError: a store stayed down beyond ``retry``.
    """
    started = time.monotonic()
    for name in names:
        versions.check_name(name)
    if not names or len(set(names)) != len(names):
        raise VersionError("projection", "name each projection once")
    if to_version is not None and len(names) > 1:
        raise VersionError("to_version", "give it with one projection only (each projection has its own versions)")
    if embedder is not None and "vectors" not in names:
        raise VersionError("embedder", "only the vectors projection has an embedder")
    specs = {name: _embedder_spec(svc, name, embedder if name == "vectors" else None) for name in names}
    with svc.pool.connection() as conn:
        infos = [versions.begin_build(conn, name, to_version, specs[name]) for name in names]
    with ExitStack() as stack:
        here = [info for info in infos if _applies_here(svc, info)]
        for info in here:
            stack.enter_context(_serving_queries(svc, info))
        applied = dict.fromkeys((info.id for info in infos), 0)
        if here:
            done = _build_here(svc, here, progress, retry, batch_size, started)
            applied.update(dict.fromkeys((info.id for info in here), done))
        for info in infos:
            if info not in here:
                applied[info.id] = _follow_worker(svc, info, progress, wait_s, started)
        results = []
        for info in infos:
            projection = svc.stores.projection(info) if info in here else None
            previous, during = swap_to(svc, info, projection, wait_s=wait_s, retry=retry)
            e = info.embedder
            results.append(
                SwapResult(
                    projection=info.name,
                    serving=info.version,
                    previous=previous,
                    events=applied[info.id] + during,
                    seconds=round(time.monotonic() - started, 3),
                    embedder=None if e is None else {"name": e.name, "dim": e.dim, "model": e.model},
                )
            )
    return results


@contextmanager
def _serving_queries(svc: Services, info: VersionInfo) -> Iterator[None]:
    """While this process holds a new vectors version's local collection (distributed
    mode, no Qdrant server), answer vector queries for it where its worker will
    (``vector_query_url(settings, N)``), so that recall right after the swap finds it;
    its worker takes the collection and the port over when this process exits."""
    if info.name != "vectors" or svc.settings.mode == "embedded" or svc.settings.qdrant_url:
        yield
        return
    from projections.vector_remote import VectorQueryServer

    url = urlparse(vector_query_url(svc.settings, info.version))
    server = VectorQueryServer(svc.stores.index(info.version), host=url.hostname or "127.0.0.1", port=url.port or 0)
    try:
        server.start()
    except VectorIndexError as exc:  # recall ranks without vectors until its worker answers
        log.warning("%s: not answering vector queries meanwhile: %s", info.id, exc)
        yield
        return
    try:
        yield
    finally:
        server.stop()


def _build_here(
    svc: Services,
    infos: Sequence[VersionInfo],
    progress: Callable[[RebuildProgress], None] | None,
    retry: RetryPolicy | None,
    batch_size: int,
    started: float,
) -> int:
    """Apply the log to the building versions in this process, in one pass for all of
    them, until they reach the end; returns the records read."""
    fan = svc.fan_out([svc.stores.projection(info) for info in infos], retry)
    label = "+".join(fan.ids)
    applied = 0

    def step(n: int) -> None:
        nonlocal applied
        applied += n
        if progress is not None:
            progress(_progress_of(label, fan.positions(), svc, applied, started))

    while True:
        handled = fan.catch_up(svc.log, batch_size, progress=step)
        if handled == 0 or _progress_of(label, fan.positions(), svc, applied, started).lag == 0:
            break
    if progress is not None:
        progress(_progress_of(label, fan.positions(), svc, applied, started))
    return applied


def _follow_worker(
    svc: Services,
    info: VersionInfo,
    progress: Callable[[RebuildProgress], None] | None,
    wait_s: float,
    started: float,
    poll_s: float = 0.5,
) -> int:
    """Watch the building version's worker (consumer group ``<prefix>.<id>``, started by
    ``memledger worker``'s supervisor) until it reaches the live end; returns the records
    it applied meanwhile.

    Raises:
        VersionError: it made no progress for ``wait_s`` seconds (no worker running?).
    """

    def positions() -> dict[int, int]:
        with svc.pool.connection() as conn:
            return base.load_positions(conn, info.id)

    first = _progress_of(info.id, positions(), svc, 0, started)
    last_move, last_position = time.monotonic(), first.position
    while True:
        now = _progress_of(info.id, positions(), svc, 0, started)
        current = replace(now, applied=now.position - first.position)
        current = replace(current, rate=current.applied / max(time.monotonic() - started, 1e-9))
        current = replace(current, eta_s=current.lag / current.rate if current.rate > 0 else None)
        if progress is not None:
            progress(current)
        if current.lag == 0:
            return current.applied
        if current.position != last_position:
            last_move, last_position = time.monotonic(), current.position
        elif time.monotonic() - last_move > wait_s:
            raise VersionError(
                "to_version",
                f"{info.id} made no progress for {wait_s:.0f}s: is `memledger worker` running? (it stays"
                f" building: run replay again to resume, or retire {info.name} --version {info.version})",
            )
        time.sleep(poll_s)


def swap_to(
    svc: Services,
    info: VersionInfo,
    projection: Projection | None,
    wait_s: float = 120.0,
    retry: RetryPolicy | None = None,
) -> tuple[int, int]:
    """Make ``info``'s version serve, never staler than the version it replaces; returns
    (the version that served before, records applied here during the swap).

    ``projection``: apply the version here up to the log's end while the serving version
    is frozen; ``None``: wait up to ``wait_s`` seconds for its worker to get as far.

    Raises:
        VersionError: the version is not building or previous, or did not get as far as
            the serving version in time.
    """
    applied = 0
    with svc.pool.connection() as conn, conn.transaction():
        versions.lock(conn)
        old = versions.serving(conn, info.name)
        if old.version == info.version:
            raise VersionError("version", f"{info.id} is serving already")
        conn.execute("SELECT 1 FROM projection_positions WHERE projection = %s FOR UPDATE", (old.id,))
        frozen = base.load_positions(conn, old.id)
        deadline = time.monotonic() + wait_s
        while True:
            if projection is not None:
                applied += svc.runner_for(projection, retry).catch_up(svc.log)
                while isinstance(projection, VectorsProjection) and projection.embed_pending():
                    pass  # writes its worker queued for embedding: points before the swap
            behind = _behind(conn, info, frozen)
            if not behind:
                break
            if projection is not None or time.monotonic() > deadline:
                raise VersionError(
                    "version",
                    f"{info.id} is behind {old.id} on partitions {sorted(behind)}; is its worker running?"
                    " (nothing was swapped)",
                )
            time.sleep(0.2)
        versions.swap(conn, info.name, info.version)
    _point_alias(svc, info)
    return old.version, applied


def _behind(conn: psycopg.Connection, info: VersionInfo, frozen: dict[int, int]) -> dict[int, int]:
    """Partitions where ``info``'s version has applied less than ``frozen`` (read on a
    fresh snapshot: the caller's transaction is READ COMMITTED); for vectors, what it has
    applied is what has its points (none still queued for embedding)."""
    if info.name == "vectors":
        mine = visible_positions(conn, info.id, info.version)
    else:
        mine = base.load_positions(conn, info.id)
    return {p: o for p, o in frozen.items() if mine.get(p, -1) < o}


def _point_alias(svc: Services, info: VersionInfo) -> None:
    """Against a Qdrant server, point the alias ``memories`` at the serving collection."""
    if info.name != "vectors" or not svc.settings.qdrant_url:
        return
    from projections.qdrant_client_index import QdrantClientIndex

    index = svc.stores.index(info.version)
    if isinstance(index, QdrantClientIndex):
        index.point_alias(versions.VECTOR_ALIAS)


def rollback(svc: Services, name: str, wait_s: float = 120.0, retry: RetryPolicy | None = None) -> SwapResult:
    """Swap ``name`` back to the version that served before the last swap (kept up to
    date since by the workers; what it missed is applied first).

    Raises:
        VersionError: no previous version (never swapped, or retired), or it could not
            catch up with the serving version in time.
    """
    started = time.monotonic()
    with svc.pool.connection() as conn:
        target = versions.rollback_target(conn, name)
    projection = svc.stores.projection(target) if _applies_here(svc, target) else None
    previous, applied = swap_to(svc, target, projection, wait_s=wait_s, retry=retry)
    return SwapResult(name, target.version, previous, applied, round(time.monotonic() - started, 3))


def retire(svc: Services, name: str, version: int, wait_s: float = 30.0) -> VersionInfo:
    """Mark ``version`` of ``name`` retired, then drop its storage (tables, collection or
    key prefix) and positions. Erasure receipts are kept. Workers stop applying it (the
    supervisor stops its worker within a few seconds).

    Raises:
        VersionError: no such version, or it is serving; or its local collection is still
            held by another process after ``wait_s`` seconds (the registry already says
            retired: run retire again to drop it).
    """
    with svc.pool.connection() as conn, conn.transaction():
        versions.lock(conn)
        info = versions.mark_retired(conn, name, version)
    deadline = time.monotonic() + wait_s
    while name == "vectors" and not svc.stores.adopt(version):  # dropping a collection needs its lock
        if time.monotonic() > deadline:
            raise VersionError(
                "version",
                f"{info.id} is retired but another process still holds its collection; run retire again later",
            )
        time.sleep(1.0)
    svc.stores.projection(info).drop()
    svc.stores.forget(name, version)
    return info
