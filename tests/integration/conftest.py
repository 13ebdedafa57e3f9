"""Fixtures of the integration tests: the whole system built on the test services (the
event log in PostgreSQL, Redis, a local Qdrant engine) with the fast hashing embedder."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from contracts import utc_now
from tests.builders import PURPOSE
from workers.bootstrap import Services, build
from workers.gateway import Caller, Gateway
from workers.settings import Settings


def local_settings(data_dir: Path, postgres_dsn: str, redis_url: str, **overrides: Any) -> Settings:
    """Settings for one test: its own database and data directory, qdrant-client's local
    engine, the hashing embedder; ``overrides`` replace any field."""
    fields: dict[str, Any] = {
        "data_dir": data_dir,
        "postgres_dsn": postgres_dsn,
        "redis_url": redis_url,
        "vector_engine": "client",
        "embedder": "hashing",
        **overrides,
    }
    return Settings(**fields)


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released), for an unreachable store."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def svc(tmp_path: Path, fresh_dsn: str, redis_url: str, redis_client: Any) -> Iterator[Services]:
    """Services on a fresh database and a flushed Redis, closed afterwards."""
    services = build(local_settings(tmp_path / "data", fresh_dsn, redis_url))
    yield services
    services.close()


def recall_ids(svc: Services, query: str, subject: str = "alice", **kw: Any) -> list[str]:
    """Ids recalled for ``PURPOSE`` at now, each top-level item followed by the sources
    grouped under it."""
    result = svc.recall.recall(svc.principal(), subject, PURPOSE, query, utc_now(), **kw)
    return [m.memory_id for i in result.items for m in i.members()]


def one(svc: Services, sql: str, *params: Any) -> Any:
    """The single value (or row) an SQL query returns, ``None`` for no row."""
    with svc.pool.connection() as conn:
        row = conn.execute(sql, params).fetchone()
    return None if row is None else row[0] if len(row) == 1 else row


@pytest.fixture
def gateway(svc: Services) -> Iterator[Gateway]:
    """The gateway (``memledger serve``'s application layer) over ``svc``, closed afterwards."""
    gw = Gateway(svc)
    yield gw
    gw.close()


def caller(gateway: Gateway, subject: str, scopes: tuple[str, ...] = ("read", "write", "erase")) -> Caller:
    """An API key of principal ``agent-<subject>`` for ``subject`` alone, authenticated."""
    _, token = gateway.keys.create(f"agent-{subject}", scopes, [subject])
    return gateway.authenticate(token, "test")
