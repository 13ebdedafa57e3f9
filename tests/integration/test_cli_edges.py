"""Edges of the ``memledger`` command line, run as a user runs it (``workers.cli.root.run_args``:
exit status and one line on stderr) in the embedded mode on the test Postgres and Redis:
erase's positional arguments, a consent withdrawal that matches nothing, the counts in
trace and erasure-report, and the provenance recall prints."""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest

from workers.cli import root as cli

pytestmark = pytest.mark.integration

PURPOSE = "technical_writing"

Run = Callable[..., tuple[int, str, str]]


@pytest.fixture
def run(
    tmp_path: Path,
    fresh_dsn: str,
    redis_url: str,
    redis_client: Any,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> Run:
    """``run(*args)``: ``memledger ARGS`` through the console entry's error handling;
    returns (exit status, stdout, stderr)."""
    monkeypatch.setenv("MEMLEDGER_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("MEMLEDGER_POSTGRES_DSN", fresh_dsn)
    monkeypatch.setenv("MEMLEDGER_REDIS_URL", redis_url)
    monkeypatch.setenv("MEMLEDGER_EMBEDDER", "hashing")
    monkeypatch.setenv("MEMLEDGER_VECTOR_ENGINE", "client")

    def invoke(*args: str) -> tuple[int, str, str]:
        capsys.readouterr()
        monkeypatch.setattr(sys, "argv", ["memledger", *args])
        code = cli.run_args()
        out, err = capsys.readouterr()
        return code, out, err

    return invoke


def ok(run: Run, *args: str) -> Any:
    """The output of a command that must succeed (parsed when ``--json`` is given)."""
    code, out, err = run(*args)
    assert code == 0, err
    return json.loads(out) if "--json" in args else out


def refused(run: Run, *args: str) -> str:
    """The stderr of a command that must be refused as a user error: status 2, one
    ``error:`` line, no stack trace."""
    code, out, err = run(*args)
    assert code == 2, (out, err)
    assert "Traceback" not in err and err.startswith("error: "), err
    return err


def write(run: Run, subject: str, text: str, *options: str) -> str:
    return str(ok(run, "write", subject, text, "--purpose", PURPOSE, *options, "--json")["memory_id"])


def count(dsn: str, sql: str) -> int:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(sql).fetchone()
    assert row is not None
    return int(row[0])


# -- erase ------------------------------------------------------------------------------


def test_with_subject_every_argument_is_a_memory_id_even_the_subjects_name(run: Run, fresh_dsn: str) -> None:
    kept = write(run, "alice", "Alice's desk is 4F")
    err = refused(run, "erase", "--subject", "alice", "alice")
    assert "memory_ids: no memory 'alice' of this subject" in err
    err = refused(run, "erase", "--subject", "alice", "alice", kept)  # not "erase kept, drop alice"
    assert "no memory 'alice'" in err
    assert count(fresh_dsn, "SELECT count(*) FROM erasure_requests") == 0
    assert ok(run, "erase", "--subject", "alice", kept, "--json")["affected"] == [kept]


def test_without_subject_option_the_first_argument_is_the_subject(run: Run) -> None:
    a = write(run, "alice", "Alice's badge is 77")
    b = write(run, "alice", "Alice's locker is 12")
    assert ok(run, "erase", "alice", a, b, "--json")["affected"] == [a, b]
    assert "subject: missing" in run("erase")[2]


# -- revoke-consent -----------------------------------------------------------------------


def test_a_withdrawal_matching_no_memory_is_refused_unless_allowed(run: Run, fresh_dsn: str) -> None:
    mid = write(run, "alice", "Alice prefers short answers", "--consent-ref", "c-1")
    events = count(fresh_dsn, "SELECT count(*) FROM memory_events")
    err = refused(run, "revoke-consent", "alice", "--purpose", "technical_writting")
    assert err.strip() == (
        "error: purpose: 'technical_writting' matches no memory of subject 'alice'; give --allow-unmatched"
        " to withdraw consent before anything was written under it"
    )
    err = refused(run, "revoke-consent", "alice", "--consent-ref", "c-l")
    assert err.startswith("error: consent_ref: 'c-l' matches no memory of subject 'alice'")
    assert count(fresh_dsn, "SELECT count(*) FROM memory_events") == events
    assert count(fresh_dsn, "SELECT count(*) FROM consent_revocations") == 0
    write(run, "alice", "Alice writes in British English")  # the purpose is not blocked

    recorded = ok(run, "revoke-consent", "alice", "--purpose", "marketing", "--allow-unmatched", "--json")
    assert recorded["affected"] == [] and [e["type"] for e in recorded["events"]] == ["ConsentRevoked"]
    assert "withdrew consent for 'marketing'" in refused(
        run, "write", "alice", "Alice likes promos", "--purpose", "marketing"
    )
    assert ok(run, "revoke-consent", "alice", "--consent-ref", "c-1", "--json")["affected"] == [mid]


# -- the names refusals give ------------------------------------------------------------


def test_refusals_name_the_clis_own_fields(run: Run, fresh_dsn: str) -> None:
    write(run, "rita", "Rita likes tea")
    events = count(fresh_dsn, "SELECT count(*) FROM memory_events")
    card = ("write", "rita", "Rita's card is 4111 1111 1111 1111", "--purpose", PURPOSE)
    err = refused(run, *card)  # screening raises it to personal
    assert err.startswith("error: consent_ref: the content holds personal data (payment card number)"), err
    assert "a personal memory requires a consent reference or --basis 'contract'" in err
    assert "provenance." not in err and "retention." not in err
    err = refused(run, "write", "rita", "Rita likes tea", "--purpose", PURPOSE, "--expires-at", "2001-01-01T00:00:00Z")
    assert err.strip() == "error: expires_at: must be in the future (UTC)"
    err = refused(run, "write", "rita", "Rita likes tea", "--purpose", PURPOSE, "--derived-from", "no-such-memory")
    assert err.startswith("error: derived_from: "), err
    assert count(fresh_dsn, "SELECT count(*) FROM memory_events") == events


def test_a_permission_refusal_names_the_subject_field(run: Run) -> None:
    write(run, "rita", "Rita likes tea")
    err = refused(run, "--principal", "stranger", "memories", "rita")
    assert err.strip() == "error: subject_id: principal 'stranger' may not read memories of subject 'rita'"
    err = refused(run, "--principal", "stranger", "write", "rita", "Rita likes coffee", "--purpose", PURPOSE)
    assert err.strip() == "error: subject_id: principal 'stranger' may not write memories of subject 'rita'"


def test_what_screening_did_and_what_a_revocation_appended_are_said_in_full(run: Run) -> None:
    card = ("write", "rita", "Rita's card is 4111 1111 1111 1111", "--purpose", PURPOSE, "--consent-ref", "c-1")
    out = ok(run, *card)
    assert out.rstrip().endswith("; screening: class raised from internal to personal (holds payment card number)")
    tea = write(run, "rita", "Rita likes tea")
    err = refused(run, "redact", "rita", tea, "Rita's mail is rita@example.com")
    assert "replacement: holds personal data (email address), which an internal memory may not:" in err, err
    out = ok(run, "revoke-consent", "rita", "--consent-ref", "c-1")
    assert re.fullmatch(
        r"consent revoked: 1 memory now revoked at partition \d+ offset \d+(, partition \d+ offset \d+)*\n", out
    )


# -- times in --json --------------------------------------------------------------------

ISO_UTC = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,6})?Z")


def times(data: Any, path: str = "") -> dict[str, str]:
    """Every value of a key ending in ``_at`` (or named ``at``, ``since``, ``until``) in ``data``, by its path."""
    found: dict[str, str] = {}
    items = data.items() if isinstance(data, dict) else enumerate(data) if isinstance(data, list) else []
    for k, v in items:
        where = f"{path}.{k}"
        if isinstance(k, str) and (k.endswith("_at") or k in ("at", "since", "until")) and v is not None:
            found[where] = v
        found |= times(v, where)
    return found


def test_every_time_in_json_output_is_iso_8601_utc_with_z(run: Run) -> None:
    old = write(run, "alice", "Alice uses Python 3.11", "--key", "python_version")
    ok(run, "supersede", old, "alice", "Alice uses Python 3.12")
    gone = write(run, "alice", "Alice's phone is 555-0100")
    request = ok(run, "erase", "alice", gone, "--json")["request_id"]
    ok(run, "keys", "create", "support-agent", "--scope", "read", "--subject", "alice")
    outputs = {
        "memories": ok(run, "memories", "alice", "--all", "--json"),
        "recall": ok(run, "recall", "alice", "Python", "--purpose", PURPOSE, "--json"),
        "trace": ok(run, "trace", request, "--json"),
        "erasure-report": ok(run, "erasure-report", "--since", "2000-01-01", "--json"),
        "keys": ok(run, "keys", "list", "--json"),
        "versions": ok(run, "versions", "--json"),
    }
    for command, data in outputs.items():
        found = times(data)
        assert found, command
        bad = {where: v for where, v in found.items() if not (isinstance(v, str) and ISO_UTC.fullmatch(v))}
        assert bad == {}, command
    assert times(outputs["memories"])[".memories.0.first_written_at"]


# -- counts in trace and erasure-report -------------------------------------------------


def test_trace_and_erasure_report_count_one_memory_and_one_request_in_the_singular(run: Run) -> None:
    mid = write(run, "alice", "Alice's phone is 555-0100")
    request = ok(run, "erase", "alice", mid, "--json")["request_id"]
    header = ok(run, "trace", request).splitlines()[0]
    assert header.endswith("(memories, 1 memory)"), header
    report = ok(run, "erasure-report", "--since", "2000-01-01")
    assert report.rstrip().endswith("1 request: 1 complete, 0 pending, 0 failed"), report


# -- recall -----------------------------------------------------------------------------


def test_recall_text_shows_the_provenance_of_each_item(run: Run) -> None:
    write(
        run, "alice", "Alice prefers short answers", "--kind", "preference", "--key", "answer_length",
        "--turn-id", "turn-3", "--source-ref", "crm", "--consent-ref", "c-9", "--agent", "support-agent",
        "--veracity", "imported",
    )  # fmt: skip
    write(run, "alice", "Alice wants short answers in this guide", "--scope", "document:guide", "--tool-call-id", "t-7")
    args = ("recall", "alice", "short answers", "--purpose", PURPOSE, "--scope", "document:guide")
    items = {i["memory_id"]: i for i in ok(run, *args, "--json")["items"]}
    blocks = re.split(r"\n(?=\s+\d+\. )", ok(run, *args).rstrip())
    tokens = sum(i["tokens"] for i in items.values())
    assert blocks[0] == f"2 memories (from cache), {tokens} tokens:" and len(blocks) == 3  # the --json call cached it
    for block in blocks[1:]:
        head, *details = block.splitlines()
        found = re.search(r"^id (\S+) rev 1; expires \S+Z; (\d+) tokens?; matched by \S+$", details[-1].strip())
        assert found, block
        item = items[found.group(1)]
        assert int(found.group(2)) == item["tokens"]
        prov = item["provenance"]
        assert head.endswith(f"{item['kind']}: {item['content']}")
        written = prov["written_at"][:19]  # to the second, in UTC (the CLI writes it in UTC)
        writer = prov["writer"] + (f" (agent {prov['agent']})" if prov.get("agent") else "")
        assert details[0].strip().startswith(f"by {writer} at {written}Z; confidence {item['confidence']:.2f}")
    text = "\n".join(blocks)
    assert "by cli (agent support-agent) at" in text and "confidence 0.60; scope subject; key answer_length" in text
    assert "turn turn-3; source crm; consent c-9" in text
    assert "scope document:guide" in text and "tool call t-7" in text


# -- supersede and confirm --------------------------------------------------------------


def test_supersede_records_where_the_replacement_came_from(run: Run) -> None:
    old = write(run, "alice", "Alice uses Python 3.11", "--key", "python_version", "--turn-id", "t-1")
    new = ok(
        run, "supersede", old, "alice", "Alice uses Python 3.12",
        "--turn-id", "t-9", "--tool-call-id", "call-4", "--source-ref", "pyproject", "--json",
    )["memory_id"]  # fmt: skip
    items = ok(run, "recall", "alice", "Python version", "--purpose", PURPOSE, "--json")["items"]
    [replacement] = [i for i in items if i["memory_id"] == new]
    assert replacement["key"] == "python_version"  # taken from the old memory
    prov = replacement["provenance"]
    assert (prov["turn_id"], prov["tool_call_id"], prov["source_ref"]) == ("t-9", "call-4", "pyproject")


def test_a_retried_supersession_answers_repeat_without_confirmed_given(run: Run, fresh_dsn: str) -> None:
    old = write(run, "vic", "Vic lives in Oslo", "--key", "city", "--turn-id", "t-54")
    args = ("supersede", old, "vic", "Vic lives in Bergen", "--turn-id", "t-55")
    first = ok(run, *args, "--json")
    events = count(fresh_dsn, "SELECT count(*) FROM memory_events")
    again = ok(run, *args, "--json")  # `confirmed` left to its default both times
    assert again["memory_id"] == first["memory_id"] and again["events"] == []
    assert again["first_event_ids"] == [e["event_id"] for e in first["events"]]
    assert again["repeat"].startswith("a retry of a supersession recorded at")
    assert ok(run, *args).startswith("a retry of a supersession recorded at")
    assert count(fresh_dsn, "SELECT count(*) FROM memory_events") == events
    # another choice of `confirmed` in the same turn is another command, refused on the state
    assert "is superseded" in refused(run, *args, "--unconfirmed")


def test_another_subjects_memory_is_unknown_not_revealed(run: Run) -> None:
    bobs = write(run, "bob", "Bob drinks tea")
    err = refused(run, "confirm", "alice", bobs)
    assert f"no memory {bobs!r} of this subject" in err and "another subject" not in err


def test_supersede_of_an_inference_keeps_its_sources_and_leaves_it_unconfirmed(run: Run) -> None:
    source = write(run, "dana", "Dana lives in France")
    guess = write(run, "dana", "Dana probably lives in Lyon", "--kind", "inference", "--derived-from", source)
    out = ok(run, "supersede", guess, "dana", "Dana probably lives in Lille", "--json")
    assert [e["type"] for e in out["events"]][:2] == ["MemoryWritten", "MemorySuperseded"]
    items = ok(run, "recall", "dana", "Lille", "--purpose", PURPOSE, "--include-unconfirmed", "--json")["items"]
    [replacement] = [i for i in items if i["memory_id"] == out["memory_id"]]
    assert replacement["provenance"]["derived_from"] == [source]
    assert replacement["needs_confirmation"]  # the guess it replaced was not confirmed either


def test_a_query_longer_than_the_limit_is_refused_naming_the_field(run: Run) -> None:
    write(run, "alice", "Alice likes tea")
    err = refused(run, "recall", "alice", "tea " * 1250, "--purpose", PURPOSE)
    assert "query: is 5000 characters; at most 4096 are accepted" in err
    err = refused(run, "recall", "alice", "tea\x01", "--purpose", PURPOSE)  # PostgreSQL's text refuses NUL
    assert "query: must not contain control characters" in err


# -- memories ---------------------------------------------------------------------------


def test_memories_lists_status_revision_key_and_supersession(run: Run) -> None:
    old = write(run, "alice", "Alice uses Python 3.11", "--key", "python_version", "--agent", "planner")
    new = ok(run, "supersede", old, "alice", "Alice uses Python 3.12", "--json")["memory_id"]
    gone = write(run, "alice", "Alice's phone is 555-0100")
    request = ok(run, "erase", "alice", gone, "--json")["request_id"]
    text = ok(run, "memories", "alice")
    assert text.splitlines() == [
        "1 memory of alice:",
        f"  {new} active rev 1 fact key python_version ({PURPOSE})",
        f"      supersedes {old}",
        "      Alice uses Python 3.12",
    ]
    every = {m["memory_id"]: m for m in ok(run, "memories", "alice", "--all", "--json")["memories"]}
    assert every[old]["status"] == "superseded" and every[old]["superseded_by"] == new and every[old]["revision"] == 2
    assert every[old]["provenance"]["agent"] == "planner" and every[old]["provenance"]["writer"] == "cli"
    assert every[gone]["status"] == "erased" and every[gone]["erased_by"] == request and every[gone]["content"] is None
    assert f"  {gone} erased by {request} at " in ok(run, "memories", "alice", "--all")
    # an erase-only principal sees the statuses, not the text nor the other sealed fields (the key)
    grants = Path(os.environ["MEMLEDGER_DATA_DIR"]) / "grants.toml"
    grants.write_text(grants.read_text() + '\n[principals.dpo]\ngrants = [{ subjects = ["*"], actions = ["erase"] }]\n')
    listed = ok(run, "--principal", "dpo", "memories", "alice", "--json")["memories"]
    assert [m["memory_id"] for m in listed] == [new]
    assert listed[0]["content"] is None and listed[0]["key"] is None and listed[0]["scope"]["id"] is None
    every = ok(run, "--principal", "dpo", "memories", "alice", "--all", "--json")["memories"]
    assert [m["key"] for m in every] == [None, None, None]
    text = ok(run, "--principal", "dpo", "memories", "alice", "--all")
    assert "python_version" not in text and f"  {old} superseded rev 2 fact ({PURPOSE})" in text
    assert "may not read" in refused(run, "--principal", "stranger", "memories", "alice")


def test_memories_lists_live_summaries_with_the_facts(run: Run) -> None:
    fact = write(run, "emu", "Emu likes rowing")
    summary = write(run, "emu", "Emu likes rowing (summary)", "--kind", "summary", "--derived-from", fact)
    listed = {m["memory_id"]: m for m in ok(run, "memories", "emu", "--json")["memories"]}
    assert set(listed) == {fact, summary}
    assert listed[summary]["kind"] == "summary" and listed[summary]["status"] == "active"
    assert listed[summary]["content"] == "Emu likes rowing (summary)"
    ok(run, "erase", "emu", summary)
    every = {m["memory_id"]: m for m in ok(run, "memories", "emu", "--all", "--json")["memories"]}
    assert every[summary]["status"] == "erased" and every[summary]["content"] is None
    assert [m["memory_id"] for m in ok(run, "memories", "emu", "--json")["memories"]] == [fact]


def test_a_replay_stopped_by_an_unreadable_erasure_says_the_version_stays_building(run: Run) -> None:
    from workers.bootstrap import build
    from workers.settings import Settings

    ok(run, "write", "alice", "Alice prefers tea", "--purpose", PURPOSE)
    svc = build(Settings())
    try:
        newer = b'{"type": "ErasureRequested", "schema_version": 99, "subject_id": "alice", "request_id": "er-x"}'
        at = svc.log.append("alice", newer)
    finally:
        svc.close()
    code, out, err = run("replay", "facts")
    assert code == 1 and out == "" and "Traceback" not in err, err
    lines = err.strip().splitlines()
    assert lines[0].startswith("error: replay stopped: projection facts_v2 stalled at partition")
    assert f"offset {at.offset}" in lines[0] and "ErasureRequested v99" in lines[0]
    assert lines[1] == (
        "  facts_v2 stays building (the serving version still serves): run `memledger replay facts` again to"
        " resume it from its positions once the cause is fixed, or `memledger retire facts --version 2`"
    )
    code, out, _ = run("versions", "--json")
    assert (
        code == 0
        and {"id": "facts_v2", "state": "building"}.items()
        <= next(v for v in json.loads(out) if v["id"] == "facts_v2").items()
    )


def test_a_store_that_cannot_be_reached_exits_1_with_one_line(run: Run, monkeypatch: pytest.MonkeyPatch) -> None:
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("MEMLEDGER_POSTGRES_DSN", f"postgresql://postgres@127.0.0.1:{port}/nothing?connect_timeout=2")
    code, out, err = run("memories", "alice")
    assert code == 1 and out == "" and "Traceback" not in err, err
    (line,) = err.strip().splitlines()
    assert line.startswith("error: ") and line.endswith("(a store failed, not the input; run it again once it answers)")


@pytest.mark.parametrize(
    ("step", "said", "recorded"),
    [
        ("decided", "write: not written (interrupted before its commit): nothing was recorded", False),
        ("staged", "write: not written (interrupted before its commit): nothing was recorded", False),
        ("committed", "write: written (interrupted after its commit): it stands", True),
    ],
)
def test_an_interrupted_command_says_whether_it_was_written(
    run: Run, fresh_dsn: str, monkeypatch: pytest.MonkeyPatch, step: str, said: str, recorded: bool
) -> None:
    from ledger.service import Ledger

    def interrupt(self: Ledger, command: str, at: str, conn: Any) -> None:
        if at == step:
            raise KeyboardInterrupt  # what SIGINT raises in the main thread (workers.interrupts)

    monkeypatch.setattr(Ledger, "_fault", interrupt)
    code, out, err = run("write", "alice", "Alice prefers green tea", "--purpose", PURPOSE)
    assert code == 130 and out == "" and "Traceback" not in err, err
    (line,) = err.strip().splitlines()
    assert line.startswith(f"interrupted: {said}"), line
    with psycopg.connect(fresh_dsn) as conn:  # the ledger's own record of the subject's memories
        heads = conn.execute("SELECT count(*) FROM ledger_memories WHERE subject_id = 'alice'").fetchone()
    assert heads == (1 if recorded else 0,)
