"""The registry of projection versions: which version of each projection serves readers.

Every projection has a name (``facts``, ``vectors``, ``cache``, ``summaries``) and a
version N, and its storage carries the version: ``facts_vN``/``facts_history_vN``/
``facts_conflicts_vN`` and ``summaries_vN`` tables in Postgres, a ``memories_vN`` vector
collection, a ``memledger:cache_vN:`` Redis key prefix. Readers go through stable names:

* Postgres: the views ``facts``, ``facts_history``, ``facts_conflicts`` and ``summaries``,
  each ``SELECT * FROM <table>_vN`` of the serving version. A swap drops and recreates
  them in the same transaction that updates this registry, so a reader sees the old
  version or the new one, never a mix or nothing.
* Vectors: the registry itself (``serving("vectors")`` names the collection and the
  embedder that built it), because a query must be embedded with the model of the
  collection it reads; against a Qdrant server the alias ``memories`` is also switched
  (one ``update_collection_aliases`` call) for outside readers. qdrant-edge has no
  aliases, so there the registry is the only way.
* Cache: the registry names the key prefix recall uses.

``projection_versions`` (one row per name and version) is the source of truth. States:

``building``  a rebuild (``memledger replay --to-version N``) is filling it from offset 0;
``serving``   readers read it (exactly one per name);
``previous``  it served before the last swap; still kept up to date, so that
              ``rollback`` can swap back at once;
``retired``   its storage was dropped (``memledger retire``); its number is not reused.

Distributed workers run every version that is not retired, one consumer group each
(``<prefix>.facts_v2``): a ``building`` version is built by its own worker from offset 0
while ``memledger replay`` watches its progress and swaps. In the embedded mode the
replay command applies the building version itself, and every command applies the
``serving`` and ``previous`` versions in-process. Times are ``timestamptz`` (UTC).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Final

import psycopg

from contracts import iso_utc
from ledger.pgschema import ensure_schema
from projections import facts, summaries
from projections.errors import VersionError

NAMES: Final = ("facts", "vectors", "cache", "summaries")
STATES: Final = ("building", "serving", "previous", "retired")
LIVE_STATES: Final = ("serving", "previous")
"""States whose versions the workers keep applying."""

STABLE_VIEWS: Final[Mapping[str, tuple[tuple[str, str], ...]]] = {
    "facts": (
        ("facts", "facts_v{v}"),
        ("facts_history", "facts_history_v{v}"),
        ("facts_conflicts", "facts_conflicts_v{v}"),
    ),
    "summaries": (("summaries", "summaries_v{v}"),),
}
"""Per projection: (stable view, versioned table pattern) pairs."""

VECTOR_ALIAS: Final = "memories"
"""The Qdrant alias of the serving vectors collection (on a Qdrant server only)."""

_REGISTRY_LOCK: Final = 0x6D6C7276  # "mlrv": serialises every change to the registry

SCHEMA_SQL = """
CREATE TABLE IF NOT EXISTS projection_versions (
    name        text NOT NULL,
    version     integer NOT NULL CHECK (version >= 1),
    state       text NOT NULL CHECK (state IN ('building', 'serving', 'previous', 'retired')),
    embedder    text,
    dim         integer,
    model       text,
    created_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
    swapped_at  timestamptz,
    retired_at  timestamptz,
    PRIMARY KEY (name, version)
);
CREATE UNIQUE INDEX IF NOT EXISTS projection_versions_one_serving ON projection_versions (name)
    WHERE state = 'serving';
"""


@dataclass(frozen=True)
class EmbedderSpec:
    """What built a vectors version: the configuration name (``build_embedder``'s
    argument, e.g. ``"minilm"``, ``"hashing-256"``), the vector length and the model
    name recorded on every point."""

    name: str
    dim: int
    model: str


@dataclass(frozen=True)
class VersionInfo:
    """One row of ``projection_versions``. ``embedder`` is set for vectors versions only.
    ``swapped_at``: when it last became serving or stopped serving."""

    name: str
    version: int
    state: str
    embedder: EmbedderSpec | None
    created_at: datetime
    swapped_at: datetime | None
    retired_at: datetime | None

    @property
    def id(self) -> str:
        """``name_vN``: the projection id (positions, consumer group suffix)."""
        return f"{self.name}_v{self.version}"

    def to_dict(self) -> dict[str, object]:
        e = self.embedder
        return {
            "name": self.name,
            "version": self.version,
            "id": self.id,
            "state": self.state,
            "embedder": None if e is None else {"name": e.name, "dim": e.dim, "model": e.model},
            "created_at": iso_utc(self.created_at),
            "swapped_at": None if self.swapped_at is None else iso_utc(self.swapped_at),
            "retired_at": None if self.retired_at is None else iso_utc(self.retired_at),
        }


def collection_name(version: int) -> str:
    """The vector collection of vectors version ``version``: ``memories_vN``."""
    return f"memories_v{version}"


def check_name(name: str) -> str:
    """``name`` if it is a projection name; ``facts_v1`` style ids are refused too.

    Raises:
        VersionError: on ``projection``, naming the allowed names.
    """
    if name not in NAMES:
        raise VersionError("projection", f"must be one of {', '.join(NAMES)}, not {name!r}")
    return name


_COLUMNS = "name, version, state, embedder, dim, model, created_at, swapped_at, retired_at"


def _info(row: tuple[object, ...]) -> VersionInfo:
    name, version, state, embedder, dim, model, created, swapped, retired = row
    spec = None if embedder is None else EmbedderSpec(str(embedder), int(str(dim)), str(model))
    return VersionInfo(str(name), int(str(version)), str(state), spec, created, swapped, retired)  # type: ignore[arg-type]


def lock(conn: psycopg.Connection) -> None:
    """Take the registry's transaction-scoped advisory lock (call inside a transaction)."""
    conn.execute("SELECT pg_advisory_xact_lock(%s)", (_REGISTRY_LOCK,))


def ensure_registry(conn: psycopg.Connection, vectors_embedder: Callable[[], EmbedderSpec]) -> None:
    """Create the registry if missing; register version 1 as serving for every name that
    has no row (vectors v1 with the embedder ``vectors_embedder()`` describes, called only
    then); create the serving versions'
    Postgres tables and the stable views where missing. Cheap when all exist (no lock)."""
    ensure_schema(conn, "projection_versions", SCHEMA_SQL)
    if _complete(conn):
        return
    with conn.transaction():
        lock(conn)
        for name in NAMES:
            if conn.execute("SELECT 1 FROM projection_versions WHERE name = %s", (name,)).fetchone() is None:
                spec = vectors_embedder() if name == "vectors" else None
                conn.execute(
                    "INSERT INTO projection_versions (name, version, state, embedder, dim, model, swapped_at)"
                    " VALUES (%s, 1, 'serving', %s, %s, %s, clock_timestamp())",
                    (name, *((spec.name, spec.dim, spec.model) if spec else (None, None, None))),
                )
        for name, views in STABLE_VIEWS.items():
            if any(_missing(conn, view) for view, _ in views):
                version = serving(conn, name).version
                ensure_tables(conn, name, version)
                point_views(conn, name, version)


def _missing(conn: psycopg.Connection, relation: str) -> bool:
    return conn.execute("SELECT to_regclass(%s)", (relation,)).fetchone() == (None,)


def _complete(conn: psycopg.Connection) -> bool:
    row = conn.execute("SELECT count(DISTINCT name) FROM projection_versions WHERE state = 'serving'").fetchone()
    if row is None or int(row[0]) < len(NAMES):
        return False
    return not any(_missing(conn, view) for views in STABLE_VIEWS.values() for view, _ in views)


def ensure_tables(conn: psycopg.Connection, name: str, version: int) -> None:
    """Create the Postgres tables of ``name`` version ``version`` if missing (facts and
    summaries; other names keep nothing in Postgres)."""
    if name == "facts":
        ensure_schema(conn, facts.FactsTables(version).conflicts, facts.schema_sql(version))
    elif name == "summaries":
        ensure_schema(conn, summaries.schema_marker(version), summaries.schema_sql(version))


def point_views(conn: psycopg.Connection, name: str, version: int) -> None:
    """Make the stable views of ``name`` select from version ``version`` (DROP VIEW and
    CREATE VIEW, so that a changed column list is accepted). Run it inside the
    transaction that records the swap: readers then see one version or the other."""
    for view, pattern in STABLE_VIEWS.get(name, ()):
        conn.execute(f"DROP VIEW IF EXISTS {view}")
        conn.execute(f"CREATE VIEW {view} AS SELECT * FROM {pattern.format(v=version)}")


def versions(conn: psycopg.Connection, name: str | None = None) -> list[VersionInfo]:
    """Every registered version (of ``name``, or of all), by name then version."""
    where, params = ("WHERE name = %s", (name,)) if name else ("", ())
    rows = conn.execute(f"SELECT {_COLUMNS} FROM projection_versions {where} ORDER BY name, version", params)
    return [_info(r) for r in rows.fetchall()]


def serving(conn: psycopg.Connection, name: str) -> VersionInfo:
    """The serving version of ``name``.

    Raises:
        VersionError: the registry has no serving version of ``name``.
    """
    row = conn.execute(
        f"SELECT {_COLUMNS} FROM projection_versions WHERE name = %s AND state = 'serving'", (name,)
    ).fetchone()
    if row is None:
        raise VersionError("projection", f"{name} has no serving version")
    return _info(row)


def serving_all(conn: psycopg.Connection) -> dict[str, VersionInfo]:
    """The serving version of every projection, in one query.

    Raises:
        VersionError: a projection has no serving version.
    """
    rows = conn.execute(f"SELECT {_COLUMNS} FROM projection_versions WHERE state = 'serving'").fetchall()
    found = {info.name: info for info in map(_info, rows)}
    missing = [n for n in NAMES if n not in found]
    if missing:
        raise VersionError("projection", f"{', '.join(missing)} has no serving version")
    return found


def live(conn: psycopg.Connection, name: str) -> list[VersionInfo]:
    """The versions of ``name`` that workers apply: the serving one first, then the
    previous ones, newest first."""
    found = [v for v in versions(conn, name) if v.state in LIVE_STATES]
    return sorted(found, key=lambda v: (v.state != "serving", -v.version))


def running(conn: psycopg.Connection, name: str) -> list[VersionInfo]:
    """The versions of ``name`` that distributed workers run: every one not retired
    (a ``building`` one included: its worker is the rebuild's consumer group)."""
    return [v for v in versions(conn, name) if v.state != "retired"]


def begin_build(conn: psycopg.Connection, name: str, version: int | None, embedder: EmbedderSpec | None) -> VersionInfo:
    """Register ``version`` of ``name`` as ``building`` (default: one above every
    registered version) and return it. A version already ``building`` is resumed
    (returned as is) when ``version`` names it or is None.

    Raises:
        VersionError: ``version`` exists in another state or is below 1, another version
            of ``name`` is building, or ``embedder`` is missing for vectors / given for
            another projection.
    """
    check_name(name)
    if (embedder is None) == (name == "vectors"):
        raise VersionError("embedder", "required for vectors, and only for vectors")
    with conn.transaction():
        lock(conn)
        known = versions(conn, name)
        building = [v for v in known if v.state == "building"]
        if building and version in (None, building[0].version):
            if name == "vectors" and building[0].embedder != embedder:
                raise VersionError(
                    "embedder", f"{building[0].id} is being built with {building[0].embedder}, not {embedder}"
                )
            return building[0]
        if building:
            raise VersionError(
                "to_version",
                f"{building[0].id} is being built; finish it (replay {name} --to-version {building[0].version})"
                f" or retire it (retire {name} --version {building[0].version}) first",
            )
        top = max((v.version for v in known), default=0)
        target = top + 1 if version is None else version
        if target < 1 or target <= top:
            raise VersionError("to_version", f"must be above every existing version of {name} (highest: {top})")
        spec = embedder
        conn.execute(
            "INSERT INTO projection_versions (name, version, state, embedder, dim, model) VALUES (%s, %s, 'building',"
            " %s, %s, %s)",
            (name, target, *((spec.name, spec.dim, spec.model) if spec else (None, None, None))),
        )
        ensure_tables(conn, name, target)
        row = conn.execute(
            f"SELECT {_COLUMNS} FROM projection_versions WHERE name = %s AND version = %s", (name, target)
        ).fetchone()
        assert row is not None
        return _info(row)


def swap(conn: psycopg.Connection, name: str, version: int) -> int:
    """Make ``version`` of ``name`` serve and the serving one ``previous``, and point the
    stable views at it; returns the version that served before. Run it inside a
    transaction holding :func:`lock` (one transaction: registry and views change together).

    Raises:
        VersionError: ``version`` is not building or previous.
    """
    row = conn.execute(
        "SELECT state FROM projection_versions WHERE name = %s AND version = %s", (name, version)
    ).fetchone()
    if row is None or row[0] not in ("building", "previous"):
        state = "unknown" if row is None else row[0]
        raise VersionError("version", f"{name} v{version} is {state}; only a building or previous version can serve")
    before = serving(conn, name).version
    conn.execute(
        "UPDATE projection_versions SET state = 'previous', swapped_at = clock_timestamp()"
        " WHERE name = %s AND state = 'serving'",
        (name,),
    )
    conn.execute(
        "UPDATE projection_versions SET state = 'serving', swapped_at = clock_timestamp()"
        " WHERE name = %s AND version = %s",
        (name, version),
    )
    point_views(conn, name, version)
    return before


def rollback_target(conn: psycopg.Connection, name: str) -> VersionInfo:
    """The version a rollback swaps back to: the ``previous`` one that stopped serving
    last.

    Raises:
        VersionError: ``name`` has no previous version (never swapped, or retired).
    """
    row = conn.execute(
        f"SELECT {_COLUMNS} FROM projection_versions WHERE name = %s AND state = 'previous'"
        " ORDER BY swapped_at DESC NULLS LAST, version DESC LIMIT 1",
        (check_name(name),),
    ).fetchone()
    if row is None:
        raise VersionError("projection", f"{name} has no previous version to roll back to")
    return _info(row)


def mark_retired(conn: psycopg.Connection, name: str, version: int) -> VersionInfo:
    """Record ``version`` of ``name`` as retired (its storage is dropped by the caller,
    after this commits: readers never resolve to it again). Run it inside a transaction
    holding :func:`lock`.

    Raises:
        VersionError: no such version, or it is the serving one.
    """
    row = conn.execute(
        f"SELECT {_COLUMNS} FROM projection_versions WHERE name = %s AND version = %s", (check_name(name), version)
    ).fetchone()
    if row is None:
        raise VersionError("version", f"{name} has no version {version}")
    info = _info(row)
    if info.state == "serving":
        raise VersionError("version", f"{info.id} is serving; swap to another version first (replay or rollback)")
    conn.execute(
        "UPDATE projection_versions SET state = 'retired', retired_at = clock_timestamp()"
        " WHERE name = %s AND version = %s",
        (name, version),
    )
    return info
