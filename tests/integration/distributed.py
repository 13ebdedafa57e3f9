"""Settings for in-process services in the distributed mode: Kafka (unique topics), a
fresh Postgres database, Redis, a local Qdrant index (qdrant-client local mode) and the
hashing embedder."""

from __future__ import annotations

import socket
import uuid
from pathlib import Path

from ledger.crypto import new_master_key
from workers.settings import Settings


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def distributed_settings(
    tmp_path: Path, kafka_bootstrap: str, dsn: str, redis_url: str, master_key: str | None = None
) -> Settings:
    """Settings whose topics (events, DLQ, tombstones) and consumer groups are new."""
    tag = uuid.uuid4().hex[:10]
    return Settings(
        data_dir=tmp_path / "data",
        kafka_bootstrap=kafka_bootstrap,
        postgres_dsn=dsn,
        redis_url=redis_url,
        topic=f"memory.events.{tag}",
        dlq_topic=f"memory.dlq.{tag}",
        tombstone_topic=f"memory.tombstones.{tag}",
        partitions=3,
        consumer_group_prefix=f"memledger-test-{tag}",
        qdrant_path=tmp_path / "qdrant",
        vector_query_url=f"http://127.0.0.1:{free_port()}",  # where a vectors worker would answer
        vector_engine="client",
        embedder="hashing",
        master_key=master_key or new_master_key(),
    )
