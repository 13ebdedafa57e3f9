"""What the CLI prints and how it reads its arguments, without stores: erase's positional
arguments, counts in the singular and plural in trace and erasure-report, and the
provenance each recalled item shows in text."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from ledger.errors import InvalidCommandError
from ledger.service import CommandResult
from projections.conflicts import Conflict, ConflictMember
from projections.erasure_report import ErasureReport, ErasureSummary
from projections.recall import RecallResult
from projections.trace import ReinstatedRival, StoreTrace, TraceReport, render_text
from projections.trace_html import render_html
from projections.wording import counted, one_line
from tests.builders import recall_item
from workers.cli.data import render_conflicts
from workers.cli.recall_text import render_recall, utc_text
from workers.cli.root import _describe_erasure, _result, check_erase_selection, erase_target

# -- erase's arguments --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("arguments", "subject_opt", "expected"),
    [
        (["alice", "m-1", "m-2"], None, ("alice", ("m-1", "m-2"))),
        (["alice"], None, ("alice", ())),
        (["alice"], "alice", ("alice", ("alice",))),  # the subject's name given again is a memory id
        (["alice", "m-1"], "alice", ("alice", ("alice", "m-1"))),
        (["m-1", "m-2"], "alice", ("alice", ("m-1", "m-2"))),
        (["bob", "m-1"], "alice", ("alice", ("bob", "m-1"))),
        ([], "alice", ("alice", ())),
    ],
)
def test_erase_target_with_subject_option_keeps_every_argument_as_an_id(
    arguments: list[str], subject_opt: str | None, expected: tuple[str, tuple[str, ...]]
) -> None:
    assert erase_target(arguments, subject_opt) == expected


def test_erase_target_without_any_subject_is_a_usage_error() -> None:
    with pytest.raises(InvalidCommandError, match="subject: missing"):
        erase_target([], None)


def test_an_erase_that_names_no_memory_says_the_lone_argument_was_read_as_the_subject() -> None:
    who, ids = erase_target(["01a2-memory"], None)
    with pytest.raises(InvalidCommandError, match=r"memory_ids: none given \('01a2-memory' is read as the subject\)"):
        check_erase_selection(who, ids, whole_subject=False, source=None)
    check_erase_selection("alice", (), whole_subject=True, source=None)  # --all names them all
    check_erase_selection("alice", (), whole_subject=False, source="turn-1")
    check_erase_selection("alice", ("m-1",), whole_subject=False, source=None)


# -- counts -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("n", "expected"),
    [(0, "0 memories"), (1, "1 memory"), (2, "2 memories")],
)
def test_counted_agrees_with_the_number(n: int, expected: str) -> None:
    assert counted(n, "memory", "memories") == expected
    assert counted(n, "request") == expected.replace("memory", "request").replace("memories", "requests")


def _trace(memory_ids: list[str]) -> TraceReport:
    return TraceReport(
        request_id="er-1",
        subject_id="alice",
        request_kind="memories",
        memory_ids=memory_ids,
        requested_at="2026-11-29T10:00:00+00:00",
        requested_by="cli",
        reason="asked",
        legal_basis="gdpr-art-17",
        log_partition=0,
        log_offset=7,
        stores=[StoreTrace(store="facts", status="applied", probe="absent")],
        verdict="complete",
    )


def test_trace_text_counts_its_memories_in_the_singular_and_plural() -> None:
    assert render_text(_trace(["m-1"])).splitlines()[0] == "erasure er-1  subject alice  (memories, 1 memory)"
    assert render_text(_trace(["m-1", "m-2"])).splitlines()[0].endswith("(memories, 2 memories)")


def test_trace_text_and_html_list_the_claims_reinstated_because_their_rival_was_erased() -> None:
    report = _trace(["m-1"])
    assert "rival" not in render_text(report) and 'id="rivals"' not in render_html(report)
    report.rivals_reinstated = [ReinstatedRival("m-2", "needs_confirmation", True)]
    text = render_text(report).splitlines()
    at = text.index("claims reinstated because the request erased their last rival in a conflict:")
    assert text[at + 1] == "  m-2  needs_confirmation, holds content" and text[-1] == "verdict: complete"
    html = render_html(report)
    assert '<table id="rivals" data-rivals="1">' in html and '<tr data-memory="m-2" data-holds-content="true">' in html


def test_erase_says_which_claim_it_reinstated_because_it_erased_its_rival() -> None:
    r = CommandResult((), (), request_id="er-1", affected=("m-1",), rivals_reinstated=("m-2",))
    assert _result(r)["rivals_reinstated"] == ["m-2"]
    assert _describe_erasure(r, "alice").splitlines()[1] == (
        "memory m-2: the rival it was in conflict with was erased; it is no longer disputed"
        " and needs confirmation (memledger confirm)"
    )


def _summary(request_id: str) -> ErasureSummary:
    return ErasureSummary(
        request_id=request_id,
        subject_id="alice",
        request_kind="memories",
        requested_at="2026-11-29T10:00:00+00:00",
        requested_by="cli",
        legal_basis="gdpr-art-17",
        memories=1,
        verdict="complete",
        pending_stores=(),
        failed_stores=(),
    )


def test_erasure_report_text_counts_requests_in_the_singular_and_plural() -> None:
    one = ErasureReport(since="2026-11-01", until=None, requests=(_summary("er-1"),), withheld=1)
    assert one.render().splitlines()[-1] == (
        "1 request: 1 complete, 0 pending, 0 failed (1 request of subjects you may not erase left out)"
    )
    two = ErasureReport(since="2026-11-01", until=None, requests=(_summary("er-1"), _summary("er-2")), withheld=2)
    assert two.render().splitlines()[-1].startswith("2 requests: 2 complete")
    assert two.render().endswith("(2 requests of subjects you may not erase left out)")


# -- recall text --------------------------------------------------------------------------


def test_recall_text_shows_writer_time_kind_confidence_scope_and_references() -> None:
    prov = {
        "writer": "support-agent",
        "written_at": "2026-11-29T12:30:05.5+02:00",  # shown in UTC
        "turn_id": "turn-3",
        "tool_call_id": "call-7",
        "source_ref": "crm",
        "consent_ref": "c-9",
        "derived_from": [],
    }
    item = recall_item(
        "m-1",
        kind="preference",
        confidence=0.6,
        key="answer_length",
        scope={"type": "document", "id": "guide"},
        provenance=prov,
        expires_at="2027-01-01T00:00:00+00:00",
        matched_by=["fts", "vector"],
        tokens=4,
    )
    assert render_recall(RecallResult(items=[item], tokens=4)).splitlines() == [
        "1 memory, 4 tokens:",
        "  1. 0.0300 preference: text of m-1",
        "     by support-agent at 2026-11-29T10:30:05Z; confidence 0.60; scope document:guide; key answer_length",
        "     turn turn-3; tool call call-7; source crm; consent c-9",
        "     id m-1 rev 1; expires 2027-01-01T00:00:00Z; 4 tokens; matched by fts+vector",
    ]
    past = RecallResult(items=[item], tokens=4, as_of="2026-11-29T08:00:00.25+00:00")
    assert render_recall(past).splitlines()[0] == "1 memory as of 2026-11-29T08:00:00Z, 4 tokens:"


def test_recall_text_leaves_out_absent_references_and_shows_a_summarys_sources_with_theirs() -> None:
    source = recall_item(
        "m-src", provenance={"writer": "w", "written_at": "2026-11-29T09:00:00Z", "turn_id": "t-1"}, tokens=1
    )
    summary = recall_item(
        "m-sum",
        kind="summary",
        confidence=0.7,
        needs_confirmation=True,
        derived_from=["m-src", "m-other"],
        grouped=[source],
        conflicts=["cf-1"],
    )
    lines = render_recall(RecallResult(items=[summary], cached=True, degraded=["vector"], tokens=4)).splitlines()
    assert lines == [
        "1 memory (from cache), 4 tokens:",
        "  1. 0.0300 summary [unconfirmed]: text of m-sum",
        "     by w at 2026-11-29T10:00:00Z; confidence 0.70; scope subject",
        "     derived from m-src, m-other",
        "     id m-sum rev 1; 0 tokens; matched by fts",
        "     in conflict cf-1 (see: memledger conflicts alice)",
        "     + source fact: text of m-src",
        "       by w at 2026-11-29T09:00:00Z; confidence 1.00; scope subject",
        "       turn t-1",
        "       id m-src rev 1; 1 token; matched by fts",
        "note: ranked without vector (unreachable)",
    ]
    assert render_recall(RecallResult(items=[])) == "no memories recalled"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("2026-11-29T23:59:59.9-01:00", "2026-11-30T00:59:59Z"),
        (None, "?"),
        ("yesterday", "yesterday"),
        ("2026-11-29T10:00:00", "2026-11-29T10:00:00"),  # no zone: shown as given, not guessed
    ],
)
def test_utc_text(value: str | None, expected: str) -> None:
    assert utc_text(value) == expected


def test_recall_text_cannot_be_forged_by_a_memorys_text() -> None:
    forged = "Fay line one\n  9. 0.9999 fact: FORGED\r\u202eevil\u200b"
    item = recall_item("m-1", content=forged, provenance={"writer": "w\nby admin", "turn_id": "t\n1"})
    lines = render_recall(RecallResult(items=[item])).splitlines()
    assert len(lines) == 5  # header, headline, who, references, identity
    assert lines[1].endswith("fact: Fay line one\\n  9. 0.9999 fact: FORGED\\r\\u202eevil\\u200b")
    assert lines[2].startswith("     by w\\nby admin at ") and lines[3] == "     turn t\\n1"
    assert one_line("naïve café, 日本語 ok") == "naïve café, 日本語 ok"


def test_conflicts_text_shows_markup_in_a_memorys_text_as_it_is() -> None:
    member = ConflictMember("m-1", "needs_confirmation", "[/bold] [red]not red", "tool", {"source_ref": "[b]x"}, None)
    conflict = Conflict("cf-1", "k", "p", {"type": "subject", "id": "alice"}, datetime(2026, 11, 29, tzinfo=UTC), True)
    conflict.members.append(member)
    text = render_conflicts([conflict], "alice")
    assert "[/bold] [red]not red" in text and "source_ref [b]x" in text


def test_conflicts_text_shows_invisible_and_control_characters_escaped() -> None:
    source = {"source_ref": "doc\u2067x"}
    member = ConflictMember("m-1", "needs_confirmation", "claim C \u202eRLO\r", "tool", source, None)
    conflict = Conflict(
        "cf-1", "b\u202eidi", "p", {"type": "subject", "id": "alice"}, datetime(2026, 11, 29, tzinfo=UTC), True
    )
    conflict.members.append(member)
    text = render_conflicts([conflict], "alice")
    assert "key b\\u202eidi" in text and "claim C \\u202eRLO\\r" in text and "doc\\u2067x" in text
    assert not any(ch in text for ch in "\u202e\u2067\r")


def test_a_store_failure_of_several_lines_is_said_in_one() -> None:
    import psycopg

    from workers.cli.root import _describe

    lost = psycopg.OperationalError(
        "consuming input failed: server closed the connection unexpectedly\n"
        "\tThis probably means the server terminated abnormally\n\tbefore or while processing the request."
    )
    assert _describe(lost) == (
        "consuming input failed: server closed the connection unexpectedly This probably means the server"
        " terminated abnormally before or while processing the request."
    )


def test_recall_weights_must_be_finite_and_turn_at_least_one_ranker_on() -> None:
    from pydantic import ValidationError

    from workers.settings import Settings

    for weights, rule in (
        ({"fts": float("inf")}, "between 0 and 1000"),
        ({"fts": 1e308}, "between 0 and 1000"),
        ({}, "at least one ranker"),
        ({"fts": 0.0, "vector": 0.0}, "at least one ranker"),
        ({"fts": "1"}, "valid number"),  # a weight is a JSON number: not a string, not true
        ({"fts": True}, "valid number"),
    ):
        with pytest.raises(ValidationError, match=rule):
            Settings(recall_weights=weights)
    assert Settings(recall_weights={"fts": 2.0}).recall_weights == {"fts": 2.0}
    assert Settings(recall_weights={"fts": 2}).recall_weights == {"fts": 2.0}


def test_a_setting_that_is_not_json_is_named_by_its_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    from pydantic_settings import SettingsError

    from workers.cli.root import _describe
    from workers.settings import Settings

    monkeypatch.setenv("MEMLEDGER_RECALL_WEIGHTS", '{"fts": 1')
    with pytest.raises(SettingsError) as refused:
        Settings()
    said = _describe(refused.value)
    assert said == "MEMLEDGER_RECALL_WEIGHTS: not valid JSON (this setting is a JSON object or list)"


@pytest.mark.parametrize(
    ("variable", "value", "said"),
    [
        ("MEMLEDGER_RECALL_MMR_LAMBDA", "abc", "MEMLEDGER_RECALL_MMR_LAMBDA: Input should be a valid number"),
        ("MEMLEDGER_RECALL_WEIGHTS", '{"fts": "x"}', "MEMLEDGER_RECALL_WEIGHTS.fts: Input should be a valid number"),
        ("MEMLEDGER_RECALL_WEIGHTS", '{"lexical": 1}', "MEMLEDGER_RECALL_WEIGHTS: unknown ranker(s) ['lexical']"),
        ("MEMLEDGER_API_RECALL_BURST", "0", "MEMLEDGER_API_RECALL_BURST: Input should be greater than or equal to 1"),
    ],
)
def test_a_refused_setting_is_named_by_its_variable(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], variable: str, value: str, said: str
) -> None:
    """The CLI names the environment variable a user set, not the settings' field."""
    from workers.cli.root import run_args

    monkeypatch.setenv("MEMLEDGER_DATA_DIR", "/nonexistent/never-opened")
    monkeypatch.setenv(variable, value)
    assert run_args(["versions"]) == 2
    line = capsys.readouterr().err.strip()
    assert line.startswith(f"error: {said}") and "\n" not in line and "Traceback" not in line


def test_a_usage_error_never_quotes_an_argument_read_as_an_option(capsys: pytest.CaptureFixture[str]) -> None:
    """A text that starts with '-' (a private key's first line) is read as an option, and the
    usage error is printed before any screening: it says so without the text."""
    from workers.cli.root import run_args

    key = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n-----END OPENSSH PRIVATE KEY-----"
    assert run_args(["write", "s", key, "--purpose", "support"], prog_name="memledger") == 2
    said = capsys.readouterr().err
    assert "b3BlbnNzaC1rZXktdjEAAAAA" not in said and "BEGIN" not in said
    assert "an argument that starts with '-' was read as an option (not shown here: it may hold data)" in said
    assert run_args(["write", "s", "x", "--purpose", "support", "--api-key=SECRET123"], prog_name="memledger") == 2
    said = capsys.readouterr().err
    assert "No such option: --api-key" in said and "SECRET123" not in said  # an option's name is shown
    unquoted = ["write", "s", "my", "key", "AKIAIOSFODNN7EXAMPLE", "--purpose", "support"]  # words of an unquoted text
    assert run_args(unquoted, prog_name="memledger") == 2
    said = capsys.readouterr().err
    assert "AKIAIOSFODNN7EXAMPLE" not in said and "got more arguments than the command takes" in said


def test_a_cli_time_utc_cannot_hold_is_refused_naming_the_option() -> None:
    import typer

    from workers.cli.util import parse_time

    with pytest.raises(typer.BadParameter, match=r"^as_of: must be a time UTC can hold: between 0001-01-01 and"):
        parse_time("0001-01-01T00:30:00+01:00", "as_of")
    moment = parse_time("0001-01-01T00:00:00Z", "as_of")
    assert moment is not None and moment.year == 1


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["replay", "facts", "--to-version", "999999999999999999999"], "less than or equal to 1000000"),
        (["worker", "--poll-interval-s", "-1"], "greater than or equal to 0.01"),
    ],
)
def test_out_of_range_options_are_refused_before_anything_starts(
    capsys: pytest.CaptureFixture[str], args: list[str], said: str
) -> None:
    from workers.cli.root import run_args

    assert run_args(args, prog_name="memledger") == 2
    assert said in capsys.readouterr().err


def test_a_command_whose_acknowledgement_was_lost_still_answers_json_on_stdout(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Exit 3 (written, do not run it again) and, with --json, what it produced, as the
    HTTP API's pending acknowledgement: a script learns the request id and the memories."""
    import json

    from ledger.errors import AcknowledgementLostError
    from workers.cli import root

    lost = AcknowledgementLostError(
        "erase", "the broker refused", ("e1",), request_id="er-1", event_types=("ErasureRequested",), affected=("m1",)
    )

    def raising(*_: object) -> None:
        raise lost

    monkeypatch.setattr(root, "_run_noting_interruptions", raising)
    assert root.run_args(["erase", "s", "m1", "--json"]) == 3
    out, err = capsys.readouterr()
    answer = json.loads(out)
    assert answer["pending"] is True and answer["request_id"] == "er-1" and answer["affected"] == ["m1"]
    assert answer["events"] == [{"event_id": "e1", "type": "ErasureRequested"}]
    assert err.startswith("error: erase: written, acknowledgement lost")
    assert root.run_args(["erase", "s", "m1"]) == 3 and capsys.readouterr().out == ""  # text: the error line only


def test_a_postgresql_that_gives_no_connection_is_named() -> None:
    from psycopg_pool import PoolTimeout

    from workers.cli.root import _describe

    said = _describe(PoolTimeout("couldn't get a connection after 30.00 sec"))
    assert said.startswith("PostgreSQL: couldn't get a connection after 30.00 sec (is it running")


def test_the_last_line_of_an_interrupted_process_says_what_the_ledger_recorded(monkeypatch: pytest.MonkeyPatch) -> None:
    import signal

    from ledger import service
    from workers.interrupts import last_line as interrupted_line

    monkeypatch.setattr(service, "committed", [])
    monkeypatch.setattr(service, "interruptions", [])
    assert interrupted_line(signal.SIGTERM) == (
        "interrupted by SIGTERM: stopped before the ledger recorded anything (running it again is safe)"
    )
    service.committed.append("write")  # the signal came as the command cleaned up, after its commit
    assert interrupted_line(signal.SIGTERM) == (
        "interrupted by SIGTERM: stopped after the ledger recorded the write: it stands (do not run it again)"
    )
    service.committed.extend(["write", "erase"])
    assert "recorded 3 commands (write, erase): it stands" in interrupted_line(signal.SIGINT)
    service.interruptions.append("write: not written (interrupted before its commit): ...")
    assert interrupted_line(signal.SIGINT) == (
        "interrupted by SIGINT: stopped (what was already appended to the log stays there)"
    )
