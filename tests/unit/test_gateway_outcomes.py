"""How the gateway answers a command the ledger could not see through: not written (a
store down: safe to send again), or recorded with the log's acknowledgement lost
(acknowledged as pending, never an error that invites a second recording)."""

from __future__ import annotations

import pytest

from ledger.errors import AcknowledgementLostError, NotWrittenError, OutcomeUnknownError
from ledger.service import CommandResult
from workers.gateway.errors import UnavailableError
from workers.gateway.service import recorded, translate


def test_a_command_not_written_is_a_store_down_with_retry_after() -> None:
    err = translate(NotWrittenError("write", "connection refused"))
    assert isinstance(err, UnavailableError)
    assert err.retry_after_s is not None and err.retry_after_s > 0
    assert "not written" in str(err) and "safe to run it again" in str(err)


def test_a_command_whose_outcome_is_unknown_says_how_to_find_out() -> None:
    err = translate(OutcomeUnknownError("erase", "connection reset", "cmd-1", ("e1",)))
    assert isinstance(err, UnavailableError)
    assert "outcome unknown" in str(err) and "cmd-1" in str(err)


def test_a_recorded_command_whose_acknowledgement_was_lost_is_acknowledged_as_pending() -> None:
    def run() -> CommandResult:
        raise AcknowledgementLostError(
            "write", "broker down", ("e1", "e2"), memory_id="m1", event_types=("MemoryWritten", "MemoryConfirmed")
        )

    out = recorded(run)
    assert out.pending and out.positions == [] and out.memory_id == "m1"
    assert [(e.event_id, e.type) for e in out.events] == [("e1", "MemoryWritten"), ("e2", "MemoryConfirmed")]


def test_a_pending_erasure_still_says_what_it_reached() -> None:
    def run() -> CommandResult:
        raise AcknowledgementLostError(
            "erase", "broker refused", ("e1",), request_id="er-1", event_types=("ErasureRequested",),
            affected=("m1", "m2"), reinstated=("m0",), earlier_versions=("m3",), rivals_reinstated=("m4",),
        )  # fmt: skip

    out = recorded(run)
    assert out.pending and out.request_id == "er-1" and out.affected == ["m1", "m2"]
    assert (out.reinstated, out.earlier_versions, out.rivals_reinstated) == (["m0"], ["m3"], ["m4"])


def test_a_command_acknowledged_by_the_log_is_not_pending() -> None:
    out = recorded(lambda: CommandResult(events=(), positions=(), memory_id="m1"))
    assert not out.pending and out.memory_id == "m1"


@pytest.mark.parametrize("error", [NotWrittenError("write", "x"), ValueError("x")])
def test_other_errors_pass_through_recorded(error: Exception) -> None:
    def run() -> CommandResult:
        raise error

    with pytest.raises(type(error)):
        recorded(run)
