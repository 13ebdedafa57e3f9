"""Erasure through the CLI on the embedded default: erase --source, trace --html,
erasure-report, reapply-tombstones, and their errors."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.e2e.conftest import Cli

pytestmark = pytest.mark.e2e

PURPOSE = "technical_writing"


def test_erase_by_source_trace_html_report_and_reapply(embedded_cli: Cli, tmp_path: Path) -> None:
    cli = embedded_cli
    gone = cli.json("write", "alice", "Alice's IBAN is DE89 3704", "--purpose", PURPOSE, "--turn-id", "turn-3")
    keep = cli.json("write", "alice", "Alice prefers dark mode", "--purpose", PURPOSE, "--source-ref", "doc-1")

    text = cli.run("erase", "--subject", "alice", "--source", "turn-3", "--reason", "subject asked").stdout
    match = re.search(r"erasure (er-\S+): 1 memory", text)
    assert match, text
    request = match.group(1)

    page = tmp_path / "trace.html"
    proc = cli.run("trace", request, "--html", str(page))
    assert "verdict: complete" in proc.stdout and "source: turn-3" in proc.stdout
    html = page.read_text(encoding="utf-8")
    assert html.startswith("<!DOCTYPE html>") and 'data-verdict="complete"' in html
    assert gone["memory_id"] in html and keep["memory_id"] not in html

    by_json = cli.json("erase", "alice", "--source", "doc-1", "--reason", "document withdrawn")
    assert by_json["affected"] == [keep["memory_id"]] and by_json["request_id"].startswith("er-")

    report = cli.json("erasure-report", "--since", "2000-01-01")
    assert [(r["request_id"], r["request_kind"], r["memories"], r["verdict"]) for r in report["requests"]] == [
        (request, "source", 1, "complete"),
        (by_json["request_id"], "source", 1, "complete"),
    ]
    assert report["totals"]["complete"] == 2 and report["withheld"] == 0
    assert "2 requests: 2 complete" in cli.run("erasure-report", "--since", "2000-01-01T00:00:00Z").stdout
    assert cli.json("erasure-report", "--since", "2000-01-01", "--until", "2000-01-02")["requests"] == []

    run = cli.json("reapply-tombstones", "all")
    assert [s["store"] for s in run["stores"]] == ["facts", "vectors", "cache", "summaries"]
    assert all(s["tombstones"] == 2 and s["items_removed"] == 0 for s in run["stores"])  # nothing restored
    assert "facts" in cli.run("reapply-tombstones", "facts").stdout


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (("erase", "alice", "m-1", "--source", "turn-1"), "memory_ids: give exactly one of"),
        (("erase", "--source", "turn-1"), "subject"),
        (("erase", "alice", "--subject", "bob", "--source", "turn-1"), "subject"),
        (("erase", "--subject", "alice", "--source", "turn-404"), "source_ref"),
        (("erasure-report", "--since", "2026-01-01T00:00:00"), "since"),
        (("erasure-report", "--since", "last week"), "since"),
        (("erasure-report", "--since", "2026-02-01", "--until", "2026-01-01"), "until"),
        (("reapply-tombstones", "ledger"), "store"),
        (("trace", "er-unknown", "--html", "/nonexistent-dir/x.html"), "request_id"),
    ],
)
def test_bad_erasure_input_is_a_clear_error(embedded_cli: Cli, args: tuple[str, ...], expected: str) -> None:
    proc = embedded_cli.run(*args, check=False)
    assert proc.returncode == 2, proc.stderr
    assert expected in proc.stderr
    assert "Traceback" not in proc.stderr
