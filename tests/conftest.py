"""Shared fixtures. Service addresses come from environment variables, set by
``deploy/services.sh env`` (``make test`` starts nothing itself; ``.ci/run`` and
``make services-up`` do):

- ``MEMLEDGER_TEST_POSTGRES_DSN``  e.g. postgresql://postgres@127.0.0.1:55432/memledger
- ``MEMLEDGER_TEST_REDIS_URL``     e.g. redis://127.0.0.1:16379/0
- ``MEMLEDGER_TEST_KAFKA_BOOTSTRAP`` e.g. 127.0.0.1:19092

``make test`` runs the suite on ``TEST_WORKERS`` pytest-xdist workers (default 2), one test
file per worker at a time (``--dist loadfile``, so a module's served processes start once).

A test that needs a service whose variable is unset is skipped with the reason, except
under CI (``CI=true``), where that is a failure: CI must never skip silently.

Hypothesis profiles: ``ci`` (loaded under ``CI=true``) derandomises every property test,
so CI runs the same examples each time, keeps no example database and sets no deadline
(tests never assert wall-clock times; the machines are shared); ``dev`` (the default
elsewhere) draws new examples each run and replays failures from the local example
database. ``HYPOTHESIS_PROFILE`` picks one explicitly. Example budgets are set per test.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
from hypothesis import settings as hypothesis_settings
from psycopg import sql
from psycopg_pool import ConnectionPool

from ledger.crypto import Keyring
from tests import leaks

REPO = Path(__file__).resolve().parent.parent

hypothesis_settings.register_profile("ci", derandomize=True, database=None, deadline=None, print_blob=True)
hypothesis_settings.register_profile("dev", print_blob=True)
hypothesis_settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI") else "dev"))
_KAFKA_LEAKS = pytest.StashKey[leaks.KafkaSocketLeaks]()


@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    config.stash[_KAFKA_LEAKS] = leaks.install()  # after pytest's own unraisable hook


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    hook = config.stash.get(_KAFKA_LEAKS, None)
    if hook is not None and hook.count:
        terminalreporter.write_line(
            f"kafka-python left {hook.count} socket(s) to the test broker open (tolerated: see tests/leaks.py)"
        )


@pytest.fixture(autouse=True)
def _collect_garbage() -> Iterator[None]:
    """Whatever a test leaked is finalised, and reported, in that test's teardown."""
    yield
    leaks.collect_garbage()


def _service(var: str) -> str:
    value = os.environ.get(var)
    if not value:
        message = f"{var} is not set: start the services with `make services-up` and export `deploy/services.sh env`"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return value


@pytest.fixture(scope="session")
def pg_dsn() -> str:
    return _service("MEMLEDGER_TEST_POSTGRES_DSN")


@pytest.fixture(scope="session")
def redis_url() -> str:
    """The test Redis; under pytest-xdist each worker gets a database of its own (``gwN``
    uses the configured database number + N + 1), since tests flush their database."""
    url = _service("MEMLEDGER_TEST_REDIS_URL")
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    if not worker.startswith("gw"):
        return url
    parts = urlsplit(url)
    base = int(parts.path.strip("/") or 0)
    return urlunsplit(parts._replace(path=f"/{base + int(worker[2:]) + 1}"))


@pytest.fixture(scope="session")
def kafka_bootstrap() -> str:
    return _service("MEMLEDGER_TEST_KAFKA_BOOTSTRAP")


@pytest.fixture
def fresh_dsn(pg_dsn: str) -> Iterator[str]:
    """A new, empty database on the test server, dropped afterwards."""
    name = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    dsn = psycopg.conninfo.make_conninfo(pg_dsn, dbname=name)
    yield dsn
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


@pytest.fixture
def pool(fresh_dsn: str) -> Iterator[ConnectionPool]:
    with ConnectionPool(fresh_dsn, min_size=1, max_size=6, open=True) as p:
        yield p


@pytest.fixture
def redis_client(redis_url: str) -> Iterator[object]:
    import redis

    client = redis.Redis.from_url(redis_url)
    client.flushdb()
    yield client
    client.flushdb()
    client.close()


@pytest.fixture
def kafka_topic(kafka_bootstrap: str) -> str:
    """A unique topic name (created by the code under test, or by the test)."""
    return f"memory.events.t{uuid.uuid4().hex[:10]}"


@pytest.fixture
def keyring() -> Keyring:
    return Keyring(os.urandom(32))


@pytest.fixture(scope="session")
def locomo_path() -> Path:
    """The LoCoMo file: ``MEMLEDGER_LOCOMO_PATH`` or ``../shared/data/locomo/locomo8.json``."""
    path = Path(os.environ.get("MEMLEDGER_LOCOMO_PATH", REPO.parent / "shared" / "data" / "locomo" / "locomo8.json"))
    if not path.exists():
        pytest.skip(f"LoCoMo data not found at {path} (set MEMLEDGER_LOCOMO_PATH)")
    return path
