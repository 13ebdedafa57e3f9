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


@pytest.mark.parametrize(
    ("error", "runs"),
    [
        (errors.SerializationFailure("could not serialize access"), retry.ATTEMPTS),  # retried, then raised
        (errors.UniqueViolation("duplicate key"), 1),  # not retried
    ],
)
def test_the_failure_is_raised_after_the_last_attempt_or_at_once_if_not_retried(error: Exception, runs: int) -> None:
    calls: list[None] = []

    @retry_aborted
    def command() -> None:
        calls.append(None)
        raise error

    with pytest.raises(type(error)):
        command()
    assert len(calls) == runs
