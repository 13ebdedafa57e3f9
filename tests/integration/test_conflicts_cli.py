"""``memledger conflicts``: conflicts the ledger detected, as the facts projection holds
them, through the CLI (embedded mode on the test Postgres and Redis); an inference written
``--confirmed`` opens none, its confirmation being an event of its own."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from workers.cli.root import app

pytestmark = pytest.mark.integration


@pytest.fixture
def cli(tmp_path: Path, fresh_dsn: str, redis_url: str, redis_client: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv("MEMLEDGER_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("MEMLEDGER_POSTGRES_DSN", fresh_dsn)
    monkeypatch.setenv("MEMLEDGER_REDIS_URL", redis_url)
    monkeypatch.setenv("MEMLEDGER_EMBEDDER", "hashing")
    monkeypatch.setenv("MEMLEDGER_VECTOR_ENGINE", "client")
    runner = CliRunner()

    def run(*args: str) -> Any:
        result = runner.invoke(app, list(args), catch_exceptions=False)
        assert result.exit_code == 0, result.output
        return json.loads(result.stdout) if "--json" in args else result.stdout

    return run


def _claim(cli: Any, content: str, source: str) -> str:
    out = cli(
        "write", "alice", content, "--purpose", "writing", "--key", "answer_length",
        "--veracity", "tool", "--source-ref", source, "--confirmed", "--json",
    )  # fmt: skip
    return str(out["memory_id"])


def test_conflicts_lists_open_conflicts_with_their_members_and_resolved_ones_on_request(cli: Any) -> None:
    a = _claim(cli, "Alice wants short answers", "crm")
    b = _claim(cli, "Alice wants long answers", "survey")
    [conflict] = cli("conflicts", "alice", "--json")
    assert conflict["open"] and conflict["key"] == "answer_length" and conflict["purpose"] == "writing"
    members = {m["memory_id"]: m for m in conflict["members"]}
    assert set(members) == {a, b}
    assert members[a]["status"] == "needs_confirmation" and members[a]["content"] == "Alice wants short answers"
    assert members[b]["source"]["source_ref"] == "survey" and members[b]["veracity"] == "tool"
    text = cli("conflicts", "alice")
    assert f"{conflict['conflict_id']} (open)" in text and "Alice wants long answers" in text
    cli("confirm", "alice", a)  # the subject confirms one claim: the other is superseded by it
    assert cli("conflicts", "alice", "--json") == []
    [resolved] = cli("conflicts", "alice", "--all", "--json")
    assert not resolved["open"]
    assert {m["memory_id"]: m["status"] for m in resolved["members"]} == {a: "active", b: "superseded"}
    assert cli("conflicts", "bob") == "no conflicts for bob\n"


def test_conflicts_needs_a_read_grant(cli: Any) -> None:
    from ledger.errors import NotAuthorisedError

    result = CliRunner().invoke(app, ["--principal", "nobody", "conflicts", "alice"])
    assert isinstance(result.exception, NotAuthorisedError)


def test_a_third_claim_merges_the_open_conflict_into_one_among_all_three(cli: Any) -> None:
    a = _claim(cli, "Alice wants short answers", "crm")
    b = _claim(cli, "Alice wants long answers", "survey")
    [first] = cli("conflicts", "alice", "--json")
    c = _claim(cli, "Alice wants medium answers", "support-ticket")
    [merged] = cli("conflicts", "alice", "--json")  # one open conflict, not two
    assert merged["open"] and {m["memory_id"] for m in merged["members"]} == {a, b, c}
    earlier = next(x for x in cli("conflicts", "alice", "--all", "--json") if x["conflict_id"] == first["conflict_id"])
    assert not earlier["open"] and earlier["merged_into"] == merged["conflict_id"]
    cli("confirm", "alice", c)
    assert cli("conflicts", "alice", "--json") == []


def test_supersede_takes_what_it_does_not_say_from_the_memory_it_replaces(cli: Any) -> None:
    doc = cli(
        "write", "alice", "Use British spelling in D1", "--purpose", "writing", "--scope", "document:D1",
        "--key", "spelling", "--sensitivity", "personal", "--consent-ref", "consent-1", "--json",
    )["memory_id"]  # fmt: skip
    wide = cli("write", "alice", "Use American spelling", "--purpose", "writing", "--key", "spelling", "--json")
    new = cli("supersede", doc, "alice", "Use Australian spelling in D1", "--json")
    assert [e["type"] for e in new["events"]] == ["MemoryWritten", "MemorySuperseded"]  # only the one it names
    [item] = cli("recall", "alice", "spelling", "--purpose", "writing", "--scope", "document:D1", "--json")["items"]
    assert item["memory_id"] == new["memory_id"] and item["scope"] == {"type": "document", "id": "D1"}
    assert item["key"] == "spelling" and item["sensitivity"] == "personal"
    assert item["provenance"]["consent_ref"] == "consent-1"
    subject_wide = cli("recall", "alice", "American spelling", "--purpose", "writing", "--json")["items"]
    assert wide["memory_id"] in [i["memory_id"] for i in subject_wide]


def test_an_inference_written_confirmed_is_confirmed_in_the_log_and_opens_no_conflict(cli: Any) -> None:
    a = _claim(cli, "Alice wants short answers", "crm")
    source = cli("write", "alice", "Alice skims long replies", "--purpose", "writing", "--json")["memory_id"]
    args = ("write", "alice", "Alice wants long answers", "--purpose", "writing", "--key", "answer_length")
    args += ("--kind", "inference", "--derived-from", source, "--confirmed")
    out = cli(*args, "--json")
    assert [e["type"] for e in out["events"]] == ["MemoryWritten", "MemoryConfirmed", "MemorySuperseded"]
    assert cli("conflicts", "alice", "--all", "--json") == []  # the subject's confirmation settled the key
    text = cli(*args[:2], "Alice wants detailed answers", *args[3:])
    assert f"(revision 1), confirmed (revision 2); superseded {out['memory_id']} at " in text
    assert a not in text  # superseded by the first confirmed inference already
