"""A command aborted by PostgreSQL to break a deadlock runs again; other errors and
the last failure pass through."""

from __future__ import annotations

import pytest
from psycopg import errors

from ledger import retry
from ledger.retry import retry_aborted


@pytest.fixture(autouse=True)
def no_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(retry, "BACKOFF_S", 0.0)


def test_a_deadlocked_command_runs_again_and_returns_its_result() -> None:
    calls: list[int] = []

    @retry_aborted
    def command(x: int) -> int:
        calls.append(x)
        if len(calls) < 3:
            raise errors.DeadlockDetected("deadlock detected")
        return x * 2

    assert command(21) == 42 and calls == [21, 21, 21]


def test_the_last_failure_is_raised_after_every_attempt() -> None:
    calls: list[None] = []

    @retry_aborted
    def command() -> None:
        calls.append(None)
        raise errors.SerializationFailure("could not serialize access")

    with pytest.raises(errors.SerializationFailure):
        command()
    assert len(calls) == retry.ATTEMPTS


def test_other_errors_are_not_retried() -> None:
    calls: list[None] = []

    @retry_aborted
    def command() -> None:
        calls.append(None)
        raise errors.UniqueViolation("duplicate key")

    with pytest.raises(errors.UniqueViolation):
        command()
    assert len(calls) == 1
