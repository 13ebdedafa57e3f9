"""The scenario runner measures what recall actually returned: fed a recall that breaks
the rules, it counts the stale item, the second answer for a key, the duplicate and the
tokens, and fails the scenario. No services: a fake ledger and a fake recall."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from contracts import utc_now
from ledger.service import CommandResult
from projections.evidence import RecallItem
from projections.recall import RecallResult
from workers.scenarios import ScenarioRunner, totals
from workers.scenarios.model import RecallCheck, Scenario, Write


@dataclass
class FakeLedger:
    written: dict[str, Any] = field(default_factory=dict)
    reuse: dict[str, str] = field(default_factory=dict)

    def write(self, principal: object, cmd: Any) -> CommandResult:
        memory_id = self.reuse.get(cmd.content) or str(uuid.uuid4())
        self.written[memory_id] = cmd
        return CommandResult(events=(), positions=(), memory_id=memory_id)


@dataclass
class FakeRecall:
    ledger: FakeLedger
    expired: set[str] = field(default_factory=set)

    def recall(self, principal: object, subject_id: str, purpose: str, query: str, now: Any, **kw: Any) -> RecallResult:
        items = []
        for memory_id, cmd in self.ledger.written.items():
            expires = (now - timedelta(seconds=1)).isoformat() if cmd.content in self.expired else None
            items.append(
                RecallItem(
                    memory_id=memory_id,
                    subject_id=subject_id,
                    kind=cmd.kind,
                    content=cmd.content,
                    score=0.1,
                    status="active",
                    confirmed=True,
                    confidence=1.0,
                    key=cmd.key,
                    purpose=cmd.purpose,
                    scope={"type": cmd.scope.type, "id": cmd.scope.id},
                    provenance={},
                    revision=1,
                    expires_at=expires,
                    sensitivity="internal",
                    needs_confirmation=False,
                )
            )
        return RecallResult(items)


class FakePool:
    """The facts table of a consistent ledger: no slot with two active memories."""

    @contextmanager
    def connection(self) -> Iterator[Any]:
        class Conn:
            def execute(self, sql: str, params: Any) -> Any:
                class Cursor:
                    def fetchall(self) -> list[Any]:
                        return []

                return Cursor()

        yield Conn()


class FakeLog:
    """A log whose end moves with every write the fake ledger admits."""

    def __init__(self, ledger: FakeLedger) -> None:
        self._ledger = ledger

    def end_offsets(self) -> dict[int, int]:
        return {0: len(self._ledger.written)}


class FakeServices:
    def __init__(self, expired: set[str] | None = None) -> None:
        self.ledger = FakeLedger()
        self.recall = FakeRecall(self.ledger, expired or set())
        self.pool = FakePool()
        self.log = FakeLog(self.ledger)

    def principal(self) -> object:
        return object()

    def catch_up(self) -> int:
        return 0


def words(text: str) -> int:
    return len(text.split())


def run(scenario: Scenario, svc: FakeServices) -> Any:
    return ScenarioRunner(svc, words).run(scenario)  # type: ignore[arg-type]


def test_a_returned_stale_item_and_a_second_answer_for_a_key_are_counted() -> None:
    scenario = Scenario(
        "t",
        "t",
        (
            Write("old", "short answers please", key="answer_length"),
            Write("new", "long answers please now", key="answer_length"),
            RecallCheck("after the change", "how long", relevant=("new",), stale=("old",)),
        ),
    )
    report = run(scenario, FakeServices())
    (check,) = report.checks
    assert not report.passed
    assert len(check.stale) == 1 and check.stale[0].startswith("old")
    assert len(check.undetected_conflicts) == 1
    assert check.tokens == 3 + 4
    t = totals([report])
    assert (t.precision, t.recall, t.stale, t.undetected_conflicts, t.tokens_per_query) == (0.5, 1.0, 1, 1, 7.0)


def test_expired_at_now_is_stale_even_when_the_scenario_does_not_name_it() -> None:
    scenario = Scenario(
        "t", "t", (Write("a", "sprint target is staging"), RecallCheck("later", "target", relevant=("a",)))
    )
    report = run(scenario, FakeServices(expired={"sprint target is staging"}))
    assert report.stale == 1 and not report.passed
    assert "expired at" in report.checks[0].stale[0]


def test_a_restatement_that_creates_a_new_memory_is_a_duplicate_and_an_empty_check_must_be_empty() -> None:
    scenario = Scenario(
        "t",
        "t",
        (
            Write("a", "prefers tabs"),
            Write("b", "Prefers tabs.", same_as="a"),
            RecallCheck("other purpose", "tabs", purpose="other", expect_empty=True, out_of_scope=("a",)),
        ),
    )
    report = run(scenario, FakeServices())
    assert report.duplicates == 1
    assert report.out_of_scope == 2  # both items: another purpose than the one asked for
    assert any("expected nothing" in f for f in report.all_failures())


def test_a_clean_result_passes_with_full_relevance() -> None:
    svc = FakeServices()
    scenario = Scenario("t", "t", (Write("a", "prefers tabs", key="indent"), RecallCheck("q", "tabs", relevant=("a",))))
    report = run(scenario, svc)
    assert report.passed, report.all_failures()
    assert totals([report]).precision == 1.0
    assert report.subject_id.startswith("scn-t-")
    assert (utc_now() - svc.ledger.written[next(iter(svc.ledger.written))].provenance.written_at).total_seconds() < 60


def test_a_retry_answered_with_a_new_memory_is_a_duplicate_and_an_admitted_refusal_fails() -> None:
    scenario = Scenario(
        "t",
        "t",
        (
            Write("a", "indents with four spaces", turn="turn-1"),
            Write("a-retry", "indents with four spaces", turn="turn-1", retry_of="a"),
            Write("key", "key AKIAIOSFODNN7EXAMPLE", refused="content"),
        ),
    )
    report = run(scenario, FakeServices())  # a ledger with no retry or screening rule
    assert report.duplicates == 1 and not report.passed
    failures = report.all_failures()
    assert any("retry 'a-retry' of 'a'" in f for f in failures)
    assert any("write 'key' was admitted" in f for f in failures)
    assert any("refused write 'key' appended to the log" in f for f in failures)
