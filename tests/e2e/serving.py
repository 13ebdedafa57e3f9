"""A real ``memledger serve`` process for tests: started, waited for, stopped; and the
environments of the embedded default and of the distributed mode (Kafka, PostgreSQL,
Redis of the test services, with ``memledger worker`` for the projections)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import psycopg
from psycopg import sql

from tests.e2e.conftest import Cli, _base_env, free_port, wait_until


@dataclass
class Served:
    """A running ``serve`` and the CLI of its environment."""

    cli: Cli
    url: str
    proc: subprocess.Popen[bytes]
    log: Path
    port: int

    def logs(self) -> str:
        return self.log.read_text(errors="replace")[-4000:]

    def key(self, principal: str, subjects: list[str], scopes: tuple[str, ...] = ("read", "write", "erase")) -> str:
        """A new API key (made with ``memledger keys create``), its token."""
        args = ["keys", "create", principal, *(f"--scope={s}" for s in scopes)]
        args += [f"--subject={s}" for s in subjects]
        return str(self.cli.json(*args)["token"])


def base_env(root: Path) -> dict[str, str]:
    """The environment of the embedded default in ``root`` (``root/data``, hashing embedder)."""
    return _base_env(root)


def start(env: dict[str, str], root: Path, port: int | None = None, timeout_s: float = 120) -> Served:
    """Start ``memledger serve`` on loopback and wait until ``/healthz`` answers."""
    port = port or free_port()
    log = root / f"serve-{port}-{time.monotonic_ns()}.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "workers", "serve", "--port", str(port)],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    served = Served(Cli(env), f"http://127.0.0.1:{port}", proc, log, port)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"memledger serve exited with {proc.returncode}:\n{served.logs()}")
        try:
            if httpx.get(served.url + "/healthz", timeout=2).status_code == 200:
                return served
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    stop(served, signal.SIGKILL)
    raise AssertionError(f"memledger serve did not answer within {timeout_s}s:\n{served.logs()}")


def stop(served: Served, sig: int = signal.SIGTERM, timeout_s: float = 60) -> int:
    """Signal ``serve`` and wait for it; returns its exit status."""
    if served.proc.poll() is None:
        served.proc.send_signal(sig)
    try:
        return served.proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(served.proc.pid, signal.SIGKILL)
        return served.proc.wait(timeout=30)


@contextmanager
def database(pg_dsn: str) -> Iterator[str]:
    """A new database on the test server for a whole module, dropped afterwards."""
    name = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield psycopg.conninfo.make_conninfo(pg_dsn, dbname=name)
    finally:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def distributed_env(root: Path, dsn: str, kafka: str, redis_url: str) -> dict[str, str]:
    tag = uuid.uuid4().hex[:10]
    env = base_env(root)
    env.update(
        MEMLEDGER_KAFKA_BOOTSTRAP=kafka,
        MEMLEDGER_POSTGRES_DSN=dsn,
        MEMLEDGER_REDIS_URL=redis_url,
        MEMLEDGER_TOPIC=f"memory.events.{tag}",
        MEMLEDGER_DLQ_TOPIC=f"memory.dlq.{tag}",
        MEMLEDGER_TOMBSTONE_TOPIC=f"memory.tombstones.{tag}",
        MEMLEDGER_PARTITIONS="2",
        MEMLEDGER_QDRANT_PATH=str(root / "qdrant"),
        MEMLEDGER_CONSUMER_GROUP_PREFIX=f"memledger-test-{tag}",
        MEMLEDGER_VECTOR_QUERY_URL=f"http://127.0.0.1:{free_port()}",
    )
    return env


@contextmanager
def embedded(root: Path, env: Mapping[str, str] | None = None) -> Iterator[Served]:
    """``serve`` on the embedded default in ``root`` (``env`` added to its environment)."""
    served = start(base_env(root) | dict(env or {}), root)
    try:
        yield served
    finally:
        stop(served)


@contextmanager
def distributed(
    root: Path, pg_dsn: str, kafka: str, redis_url: str, env: Mapping[str, str] | None = None
) -> Iterator[Served]:
    """``serve`` in the distributed mode on a database of its own, with ``memledger
    worker``, once every store answers (the vectors worker too)."""
    with database(pg_dsn) as dsn:
        served = start(distributed_env(root, dsn, kafka, redis_url) | dict(env or {}), root)
        worker = served.cli.start_worker()
        try:
            ready = lambda: httpx.get(served.url + "/readyz", timeout=5).status_code == 200  # noqa: E731
            wait_until(ready, 180, "every store to answer (the vectors worker)", served.cli.worker_logs)
            yield served
        finally:
            stop(served)
            served.cli.kill(worker, 15)
