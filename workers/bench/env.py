"""Where a benchmark runs: the services' addresses, a fresh database and topic names per
run (so runs do not disturb each other), the services built for it, and the faust
worker processes it starts."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import psycopg
from psycopg import sql

from ledger.crypto import new_master_key
from projections import embedding_queue
from workers.bootstrap import Services, build
from workers.settings import Settings

Progress = Callable[[str, int, int], None]
"""``progress(stage, done, total)``: called as a benchmark advances."""


@dataclass(frozen=True)
class BenchTargets:
    """Where the services are: Kafka bootstrap, an admin DSN (used to create the
    run's database) and a Redis URL."""

    kafka: str
    postgres_dsn: str
    redis_url: str

    @classmethod
    def from_env(cls) -> BenchTargets:
        """From ``MEMLEDGER_TEST_*`` (as ``deploy/services.sh env`` prints them).

        Raises:
            ValueError: a variable is missing, naming it.
        """
        names = ("MEMLEDGER_TEST_KAFKA_BOOTSTRAP", "MEMLEDGER_TEST_POSTGRES_DSN", "MEMLEDGER_TEST_REDIS_URL")
        missing = [n for n in names if not os.environ.get(n)]
        if missing:
            raise ValueError(
                f'{", ".join(missing)}: not set; run `make services-up` and eval "$(bash deploy/services.sh env)"'
            )
        return cls(*(os.environ[n] for n in names))


@contextmanager
def bench_environment(targets: BenchTargets, data_dir: Path, embedder: str) -> Iterator[dict[str, str]]:
    """A fresh database and topic names; yields the ``MEMLEDGER_*`` environment for them.
    The database is dropped afterwards."""
    tag = uuid.uuid4().hex[:8]
    db = f"memledger_bench_{tag}"
    with psycopg.connect(targets.postgres_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(db)))
    env = {
        "MEMLEDGER_KAFKA_BOOTSTRAP": targets.kafka,
        "MEMLEDGER_POSTGRES_DSN": psycopg.conninfo.make_conninfo(targets.postgres_dsn, dbname=db),
        "MEMLEDGER_REDIS_URL": targets.redis_url,
        "MEMLEDGER_TOPIC": f"memory.events.bench-{tag}",
        "MEMLEDGER_DLQ_TOPIC": f"memory.dlq.bench-{tag}",
        "MEMLEDGER_TOMBSTONE_TOPIC": f"memory.tombstones.bench-{tag}",
        "MEMLEDGER_DATA_DIR": str(data_dir / tag),
        "MEMLEDGER_QDRANT_PATH": str(data_dir / tag / "qdrant"),
        "MEMLEDGER_MASTER_KEY": new_master_key(),
        "MEMLEDGER_EMBEDDER": embedder,
        "MEMLEDGER_VECTOR_QUERY_URL": "http://127.0.0.1:16399",
        "MEMLEDGER_CONSUMER_GROUP_PREFIX": f"memledger-bench-{tag}",
        "MEMLEDGER_METRICS_PORT": "0",  # the worker's /metrics on any free port: runs do not collide
    }
    try:
        yield env
    finally:
        with psycopg.connect(targets.postgres_dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(db)))


def services_for(env: dict[str, str], own_vectors: bool = False) -> Services:
    """The services of a run's ``MEMLEDGER_*`` environment (see ``bench_environment``)."""
    fields = {k.removeprefix("MEMLEDGER_").lower(): v for k, v in env.items()}
    return build(Settings.model_validate(fields), own_vectors=own_vectors)


def start_worker(env: dict[str, str], log_path: Path, *args: str) -> subprocess.Popen[bytes]:
    """``memledger worker ARGS`` (no ``args``: every projection) for the run's
    environment, in a session of its own, its output in ``log_path``."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "wb") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "workers", "worker", *args],
            env={**os.environ, **env},
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def stop_worker(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the worker's process group, SIGKILL after 60 s."""
    import signal

    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=60)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def wait_caught_up(svc: Services, names: tuple[str, ...], timeout_s: float, progress: Progress | None = None) -> None:
    """Block until the named projections' positions reach the end of the log.

    Raises:
        TimeoutError: not caught up within ``timeout_s`` seconds.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        ends = svc.log.end_offsets()
        total = sum(ends.values())
        with svc.pool.connection() as conn:
            rows = conn.execute('SELECT projection, partition, "offset" FROM projection_positions').fetchall()
        done = {(p, part): off for p, part, off in rows}
        serving = svc.stores.serving()
        if "vectors" in names:  # caught up once every write has its point, none queued for embedding
            with svc.pool.connection() as conn:
                first = embedding_queue.first_pending(conn, serving["vectors"].version)
            for part, offset in first.items():
                key = (serving["vectors"].id, part)
                done[key] = min(done.get(key, -1), offset - 1)
        applied = min(
            sum(min(end, done.get((serving[n].id, part), -1) + 1) for part, end in ends.items()) for n in names
        )
        if progress is not None:
            progress("projections catching up", applied, total)
        if applied >= total:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"projections {names} still {total - applied} events behind after {timeout_s}s")
        time.sleep(0.5)
