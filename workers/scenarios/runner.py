"""Running scenarios against a built system and measuring what recall returned.

Every number comes from the actual recall output (and, for conflicts, from the read
side's conflict listing): nothing is assumed from the scenario's expectations.

Per recall check, with *returned* the top-level items and *seen* those plus the sources
grouped under a summary:

- precision: relevant returned items / returned items (the fraction of recalled items
  that the check expected);
- recall: expected-relevant labels seen / expected-relevant labels;
- stale: distinct memories seen that are not current: a label the check names as stale,
  or an item whose own status is not ``active`` (``needs_confirmation`` is allowed only
  when asked for), or whose ``expires_at`` is at or before the check's ``now`` (its
  ``as_of``, for a check of what was current at a past instant);
- out of scope: distinct memories seen that the check names as another purpose's or
  scope's, or whose own purpose or scope is not the one asked for;
- undetected conflicts: slots (purpose, scope, key) with two or more ``active`` items in
  the result; slots of the subject with two or more ``active`` rows in the facts table at
  a check (recall keeps one answer per key, so a conflict the ledger missed would not
  show in the result; each slot counted once per scenario); expected conflicts missing
  from the open ones of ``projections.conflicts.list_conflicts``;
- context cost: tokens of the recalled text (contents of the returned items and of the
  sources grouped with them), counted with a real tokenizer, special tokens excluded.

A check also fails when a recalled text holds one of its ``forbidden_text`` strings.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from typing import Any

from contracts import (
    EraseMemories,
    MemoryWrite,
    RedactMemory,
    RevokeConsent,
    SummaryDerived,
    utc_now,
)
from ledger.errors import InvalidCommandError
from ledger.policy import SENSITIVITY_ORDER
from ledger.service import CommandResult
from projections.conflicts import list_conflicts
from projections.facts import STABLE, FactsTables
from workers.bootstrap import Services
from workers.scenarios.model import (
    Advance,
    Confirm,
    ConflictCheck,
    Erase,
    Mark,
    RecallCheck,
    Redact,
    Revoke,
    Scenario,
    Supersede,
    Sweep,
    Wait,
    Write,
)

TokenCounter = Callable[[str], int]
"""Text -> number of tokens."""


@dataclass
class CheckReport:
    """One recall check: what came back (by label) and its measures."""

    what: str
    query: str
    purpose: str
    scopes: list[str]
    include_unconfirmed: bool
    now: str
    as_of: str | None = None
    """The instant recalled (ISO 8601), for a check that asks what was current then."""
    returned: list[str] = field(default_factory=list)
    """Labels of the top-level items, in rank order (``?kind:memory_id`` for unlabelled ones)."""
    grouped: list[str] = field(default_factory=list)
    """Labels of sources returned grouped under a summary."""
    relevant_expected: int = 0
    relevant_seen: int = 0
    relevant_returned: int = 0
    stale: list[str] = field(default_factory=list)
    out_of_scope: list[str] = field(default_factory=list)
    undetected_conflicts: list[str] = field(default_factory=list)
    tokens: int = 0
    cached: bool = False
    degraded: list[str] = field(default_factory=list)
    """Stores recall had to do without (``vectors``, ``cache``), as recall reported them."""
    failures: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.failures


@dataclass
class ScenarioReport:
    """One scenario: its checks and the totals over them."""

    name: str
    description: str
    subject_id: str
    positive: bool
    checks: list[CheckReport] = field(default_factory=list)
    duplicates: int = 0
    """Restatements that created a new memory instead of reinforcing the old one."""
    conflict_failures: int = 0
    """Expected conflicts missing from the conflict listing, and slots with two active
    memories in the facts table (both counted as undetected conflicts)."""
    failures: list[str] = field(default_factory=list)
    """Failures outside recall checks: restatements, conflict listing, refused commands."""
    seconds: float = 0.0

    @property
    def queries(self) -> int:
        return len(self.checks)

    @property
    def stale(self) -> int:
        return sum(len(c.stale) for c in self.checks)

    @property
    def out_of_scope(self) -> int:
        return sum(len(c.out_of_scope) for c in self.checks)

    @property
    def undetected_conflicts(self) -> int:
        return sum(len(c.undetected_conflicts) for c in self.checks) + self.conflict_failures

    @property
    def tokens(self) -> int:
        return sum(c.tokens for c in self.checks)

    @property
    def passed(self) -> bool:
        return not self.failures and all(c.passed for c in self.checks)

    def all_failures(self) -> list[str]:
        return self.failures + [f"{c.what}: {f}" for c in self.checks for f in c.failures]


@dataclass(frozen=True)
class Totals:
    """Micro-averaged measures over a set of checks (None where undefined)."""

    queries: int
    precision: float | None
    recall: float | None
    stale: int
    out_of_scope: int
    undetected_conflicts: int
    duplicates: int
    tokens: int
    tokens_per_query: float | None


def totals(reports: Sequence[ScenarioReport]) -> Totals:
    """Sum the checks of ``reports``: precision over every returned item, recall over
    every expected-relevant label, tokens per query over every recall check."""
    checks = [c for r in reports for c in r.checks]
    returned = sum(len(c.returned) for c in checks)
    expected = sum(c.relevant_expected for c in checks)
    tokens = sum(c.tokens for c in checks)
    return Totals(
        queries=len(checks),
        precision=round(sum(c.relevant_returned for c in checks) / returned, 4) if returned else None,
        recall=round(sum(c.relevant_seen for c in checks) / expected, 4) if expected else None,
        stale=sum(r.stale for r in reports),
        out_of_scope=sum(r.out_of_scope for r in reports),
        undetected_conflicts=sum(r.undetected_conflicts for r in reports),
        duplicates=sum(r.duplicates for r in reports),
        tokens=tokens,
        tokens_per_query=round(tokens / len(checks), 2) if checks else None,
    )


_MARK_GAP_S = 0.005
"""Seconds of real time on each side of a :class:`Mark`."""


class ScenarioFailedError(Exception):
    """A step could not be carried out (a refused command, an unknown label)."""


@dataclass(frozen=True)
class _Seen:
    memory_id: str
    kind: str
    content: str
    status: str
    key: str | None
    purpose: str
    scope: str
    needs_confirmation: bool
    confidence: float
    expires_at: str | None
    sensitivity: str


def _seen(item: Any) -> _Seen:
    """A recalled item (``RecallItem``, or the dict form of one) as the fields judged here."""
    get: Callable[[str, Any], Any] = item.get if isinstance(item, dict) else lambda n, d: getattr(item, n, d)
    scope = get("scope", None) or {}
    return _Seen(
        memory_id=str(get("memory_id", "")),
        kind=str(get("kind", "")),
        content=str(get("content", "") or ""),
        status=str(get("status", "")),
        key=get("key", None),
        purpose=str(get("purpose", "")),
        scope=f"{scope.get('type')}:{scope.get('id')}" if isinstance(scope, dict) else str(scope),
        needs_confirmation=bool(get("needs_confirmation", False)),
        confidence=float(get("confidence", 0.0) or 0.0),
        expires_at=get("expires_at", None),
        sensitivity=str(get("sensitivity", "")),
    )


def _grouped(item: Any) -> list[Any]:
    raw = item.get("grouped") if isinstance(item, dict) else getattr(item, "grouped", None)
    return list(raw or ())


class ScenarioRunner:
    """Runs scenarios on ``svc``, each on a fresh subject ``scn-<name>-<run id>``.

    ``sync`` brings the read side up to date before each check (default:
    ``svc.catch_up()``, the projections in-process over the log); ``count_tokens``
    measures context cost; ``facts`` names the facts tables whose conflicts are read.
    """

    def __init__(
        self,
        svc: Services,
        count_tokens: TokenCounter,
        sync: Callable[[], object] | None = None,
        run_id: str | None = None,
        facts: FactsTables | None = None,
    ) -> None:
        self._svc = svc
        self._count = count_tokens
        self._sync: Callable[[], object] = sync or svc.catch_up
        self.run_id = run_id or uuid.uuid4().hex[:10]
        self._facts = facts or STABLE

    def run(self, scenario: Scenario) -> ScenarioReport:
        """Carry out every step; a step that fails ends the scenario as failed (the
        checks run so far are kept)."""
        started = time.monotonic()
        run = _Run(self, scenario, f"scn-{scenario.name}-{self.run_id}")
        try:
            for step in scenario.steps:
                run.step(step)
        except Exception as exc:  # a refused command or an unreachable store fails the scenario, not the suite
            run.report.failures.append(f"step failed: {type(exc).__name__}: {exc}")
        run.report.seconds = round(time.monotonic() - started, 3)
        return run.report

    def run_all(
        self, scenarios: Iterable[Scenario], progress: Callable[[ScenarioReport], None] | None = None
    ) -> list[ScenarioReport]:
        reports = []
        for scenario in scenarios:
            reports.append(self.run(scenario))
            if progress is not None:
                progress(reports[-1])
        return reports


class _Run:
    """The state of one scenario run: label <-> memory id, the scenario clock."""

    def __init__(self, runner: ScenarioRunner, scenario: Scenario, subject_id: str) -> None:
        self.r = runner
        self.svc = runner._svc
        self.subject = subject_id
        self.ids: dict[str, str] = {}
        self.labels: dict[str, str] = {}
        self.offset = timedelta(0)
        self.marks: dict[str, datetime] = {}
        self.slots_reported: set[str] = set()
        self.report = ScenarioReport(scenario.name, scenario.description, subject_id, scenario.positive)

    # -- steps ----------------------------------------------------------------------------

    def now(self) -> datetime:
        return utc_now() + self.offset

    def step(self, step: object) -> None:
        principal = self.svc.principal()
        ledger = self.svc.ledger
        if isinstance(step, Write) and step.refused is not None:
            self._refused(step)
        elif isinstance(step, Write):
            result = ledger.write(principal, self._command(step))
            self._written(step, result)
        elif isinstance(step, Supersede):
            result = ledger.supersede(principal, self._id(step.old), self._command(step.new))
            self._written(step.new, result)
        elif isinstance(step, Confirm):
            self._derived(ledger.confirm(principal, self.subject, self._id(step.label)))
        elif isinstance(step, Revoke):
            cmd = RevokeConsent(subject_id=self.subject, consent_ref=step.consent_ref, purpose=step.purpose)
            self._derived(ledger.revoke_consent(principal, cmd))
        elif isinstance(step, Erase):
            cmd_e = EraseMemories(
                subject_id=self.subject,
                memory_ids=tuple(self._id(label) for label in step.labels),
                reason="scenario suite",
                with_history=step.with_history,
            )
            self._derived(ledger.erase(principal, cmd_e))
        elif isinstance(step, Redact):
            self._derived(
                ledger.redact(
                    principal, self.subject, RedactMemory(memory_id=self._id(step.label), replacement=step.content)
                )
            )
        elif isinstance(step, Mark):
            time.sleep(_MARK_GAP_S)  # the steps before it recorded strictly earlier
            self.marks[step.name] = utc_now()
            time.sleep(_MARK_GAP_S)  # the steps after it record strictly later
        elif isinstance(step, Advance):
            self.offset += timedelta(seconds=step.seconds)
        elif isinstance(step, Wait):
            time.sleep(step.seconds)
        elif isinstance(step, Sweep):
            for result in ledger.sweep(principal, self.now()):
                self._derived(result)
        elif isinstance(step, RecallCheck):
            self.report.checks.append(self._recall(step))
        elif isinstance(step, ConflictCheck):
            self._conflicts(step)
        else:
            raise ScenarioFailedError(f"unknown step {step!r}")

    def _id(self, label: str) -> str:
        if label not in self.ids:
            raise ScenarioFailedError(f"label {label!r} names no memory written so far")
        return self.ids[label]

    def _label(self, memory_id: str, kind: str = "") -> str:
        return self.labels.get(memory_id, f"?{kind}:{memory_id}")

    def _command(self, w: Write) -> MemoryWrite:
        scope: dict[str, str]
        if w.scope == "subject":
            scope = {"type": "subject", "id": self.subject}
        else:
            kind, _, ident = w.scope.partition(":")
            scope = {"type": kind, "id": ident}
        now = utc_now()
        return MemoryWrite.model_validate(
            {
                "subject_id": self.subject,
                "kind": w.kind,
                "content": w.content,
                "purpose": w.purpose,
                "scope": scope,
                "key": w.key,
                "sensitivity": w.sensitivity,
                "retention": {
                    "basis": w.basis,
                    "expires_at": now + timedelta(seconds=w.expires_in_s) if w.expires_in_s is not None else None,
                },
                "provenance": {
                    "writer": "memledger.scenarios",
                    "written_at": now,
                    "turn_id": w.turn or f"{self.report.name}/{w.label}",
                    "consent_ref": w.consent_ref,
                    "source_ref": w.source_ref,
                    "derived_from": tuple(self._id(label) for label in w.derived_from),
                },
                "confirmed": w.confirmed,
                "confidence": w.confidence,
                "veracity": w.veracity,
            }
        )

    def _refused(self, w: Write) -> None:
        """A write the ledger must refuse, naming ``w.refused``, appending nothing."""
        before = self.svc.log.end_offsets()
        try:
            result = self.svc.ledger.write(self.svc.principal(), self._command(w))
        except InvalidCommandError as exc:
            if exc.field != w.refused:
                self.report.failures.append(f"write {w.label!r} refused naming {exc.field!r}, not {w.refused!r}")
        else:
            self.report.failures.append(f"write {w.label!r} was admitted as memory {result.memory_id}")
        if self.svc.log.end_offsets() != before:
            self.report.failures.append(f"refused write {w.label!r} appended to the log")

    def _written(self, w: Write, result: CommandResult) -> None:
        if result.memory_id is None:
            raise ScenarioFailedError(f"write {w.label!r}: the ledger returned no memory id")
        if w.retry_of is not None and (result.memory_id != self.ids.get(w.retry_of) or result.events):
            self.report.duplicates += 1
            self.report.failures.append(
                f"retry {w.label!r} of {w.retry_of!r} appended {len(result.events)} event(s) and answered with"
                f" memory {result.memory_id} instead of nothing and {self.ids.get(w.retry_of)}"
            )
        if w.same_as is not None and result.memory_id != self.ids.get(w.same_as):
            self.report.duplicates += 1
            self.report.failures.append(
                f"restatement {w.label!r} of {w.same_as!r} created memory {result.memory_id}"
                f" instead of reinforcing {self.ids.get(w.same_as)}"
            )
        if w.distinct_from is not None and result.memory_id == self.ids.get(w.distinct_from):
            self.report.failures.append(
                f"write {w.label!r} answered with the memory of {w.distinct_from!r} ({result.memory_id})"
                " instead of creating a new one"
            )
        if result.memory_id not in self.labels:
            self.labels[result.memory_id] = w.label
        self.ids[w.label] = result.memory_id
        self._derived(result)

    def _derived(self, result: CommandResult) -> None:
        """Name the summaries the ledger regenerated: ``<label>'`` replaces ``<label>``."""
        for event in result.events:
            if isinstance(event, SummaryDerived) and event.replaces in self.labels:
                label = self.labels[event.replaces] + "'"
                self.ids[label] = event.memory_id
                self.labels[event.memory_id] = label

    # -- checks ---------------------------------------------------------------------------

    def _recall(self, check: RecallCheck) -> CheckReport:
        self.r._sync()
        self._two_current_answers()
        now = self.now()
        as_of = None
        if check.as_of is not None:
            if check.as_of not in self.marks:
                raise ScenarioFailedError(f"as_of {check.as_of!r} names no mark made so far")
            as_of = self.marks[check.as_of]
        result = self.svc.recall.recall(
            self.svc.principal(),
            self.subject,
            check.purpose,
            check.query,
            now,
            k=check.k,
            scope_keys=check.scopes,
            include_unconfirmed=check.include_unconfirmed,
            as_of=as_of,
        )
        rep = CheckReport(
            what=check.what,
            query=check.query,
            purpose=check.purpose,
            scopes=list(check.scopes),
            include_unconfirmed=check.include_unconfirmed,
            now=now.isoformat(),
            as_of=None if as_of is None else as_of.isoformat(),
            cached=result.cached,
            degraded=list(result.degraded),
        )
        judged = as_of or now
        top = [_seen(i) for i in result.items]
        grouped = [_seen(g) for i in result.items for g in _grouped(i)]
        everything = {s.memory_id: s for s in top + grouped}
        rep.returned = [self._label(s.memory_id, s.kind) for s in top]
        rep.grouped = [self._label(s.memory_id, s.kind) for s in grouped]
        rep.tokens = sum(self.r._count(s.content) for s in top + grouped if s.content)

        relevant = {self.ids[label] for label in (*check.relevant, *check.flagged) if label in self.ids}
        unknown = [label for label in (*check.relevant, *check.flagged) if label not in self.ids]
        for label in unknown:
            rep.failures.append(f"expected {label!r}, but no memory of that name was ever written")
        rep.relevant_expected = len(relevant) + len(unknown)
        rep.relevant_seen = len(relevant & everything.keys())
        rep.relevant_returned = sum(1 for s in top if s.memory_id in relevant)
        missing = [self._label(m) for m in relevant if m not in everything]
        if missing:
            rep.failures.append(f"relevant not recalled: {', '.join(sorted(missing))}")

        allowed_status = {"active", "needs_confirmation"} if check.include_unconfirmed else {"active"}
        allowed_scopes = {f"subject:{self.subject}", *check.scopes}
        stale_ids = {self.ids[label] for label in check.stale if label in self.ids}
        oos_ids = {self.ids[label] for label in check.out_of_scope if label in self.ids}
        for memory_id, s in everything.items():
            reasons = []
            if memory_id in stale_ids:
                reasons.append("no longer current")
            if s.status not in allowed_status:
                reasons.append(f"status {s.status}")
            if s.expires_at is not None and datetime.fromisoformat(s.expires_at) <= judged:
                reasons.append(f"expired at {s.expires_at}")
            if reasons:
                rep.stale.append(f"{self._label(memory_id, s.kind)} ({'; '.join(reasons)})")
            scope_reasons = []
            if memory_id in oos_ids:
                scope_reasons.append("another purpose or scope")
            if s.purpose != check.purpose:
                scope_reasons.append(f"purpose {s.purpose}")
            if s.scope not in allowed_scopes:
                scope_reasons.append(f"scope {s.scope}")
            if scope_reasons:
                rep.out_of_scope.append(f"{self._label(memory_id, s.kind)} ({'; '.join(scope_reasons)})")
        if rep.stale:
            rep.failures.append(f"stale returned: {', '.join(rep.stale)}")
        if rep.out_of_scope:
            rep.failures.append(f"out of scope returned: {', '.join(rep.out_of_scope)}")

        for label in check.flagged:
            s_flag = everything.get(self.ids.get(label, ""))
            if s_flag is not None and not s_flag.needs_confirmation:
                rep.failures.append(f"{label} recalled without the needs_confirmation mark")
        if not check.include_unconfirmed:
            marked = [self._label(s.memory_id, s.kind) for s in everything.values() if s.needs_confirmation]
            if marked:
                rep.failures.append(f"needs_confirmation items without include_unconfirmed: {', '.join(marked)}")

        slots: dict[tuple[str, str, str], set[str]] = {}
        for s in everything.values():
            if s.key is not None and s.status == "active":
                slots.setdefault((s.purpose, s.scope, s.key), set()).add(s.memory_id)
        for (purpose, scope, key), members in sorted(slots.items()):
            if len(members) > 1:
                names = ", ".join(sorted(self._label(m) for m in members))
                rep.undetected_conflicts.append(f"{purpose}/{scope}/{key}: {names}")
        if rep.undetected_conflicts:
            rep.failures.append(f"two current answers for one key: {'; '.join(rep.undetected_conflicts)}")

        for text in check.forbidden_text:
            holding = [self._label(s.memory_id, s.kind) for s in everything.values() if text in s.content]
            if holding:
                rep.failures.append(
                    f"text {text!r} erased, revoked or redacted since, recalled in {', '.join(holding)}"
                )
        if check.expect_empty and top:
            rep.failures.append(f"expected nothing, got {len(top)} item(s): {', '.join(rep.returned)}")
        for label, floor in check.min_confidence:
            s_conf = everything.get(self.ids.get(label, ""))
            if s_conf is not None and not s_conf.confidence > floor:
                rep.failures.append(f"{label}: confidence {s_conf.confidence} not above {floor}")
        for label, ceiling in check.max_confidence:
            s_conf = everything.get(self.ids.get(label, ""))
            if s_conf is not None and s_conf.confidence > ceiling:
                rep.failures.append(f"{label}: confidence {s_conf.confidence} above {ceiling}")
        for label, least in check.min_sensitivity:
            s_cls = everything.get(self.ids.get(label, ""))
            if s_cls is not None and SENSITIVITY_ORDER.index(s_cls.sensitivity) < SENSITIVITY_ORDER.index(least):
                rep.failures.append(f"{label}: sensitivity {s_cls.sensitivity}, not at least {least}")
        return rep

    def _two_current_answers(self) -> None:
        """Slots of the subject with two or more ``active`` memories, not expired at the
        scenario's now, in the facts table."""
        with self.svc.pool.connection() as conn:
            rows = conn.execute(
                f"SELECT purpose, scope_type || ':' || scope_id, key, array_agg(memory_id ORDER BY memory_id)"
                f" FROM {self.r._facts.facts} WHERE subject_id = %s AND status = 'active' AND key IS NOT NULL"
                " AND kind <> 'summary' AND (expires_at IS NULL OR expires_at > %s) GROUP BY 1, 2, 3"
                " HAVING count(*) > 1",
                (self.subject, self.now()),
            ).fetchall()
        for purpose, scope, key, members in rows:
            slot = f"{purpose}/{scope}/{key}"
            if slot not in self.slots_reported:
                self.slots_reported.add(slot)
                self.report.conflict_failures += 1
                names = ", ".join(sorted(self._label(m) for m in members))
                self.report.failures.append(f"two active memories for {slot} in {self.r._facts.facts}: {names}")

    def _conflicts(self, check: ConflictCheck) -> None:
        self.r._sync()
        self._two_current_answers()
        listed = [
            {m.memory_id for m in c.members}
            for c in list_conflicts(self.svc.pool, self.r._facts, self.subject)
            if c.open
        ]
        for group in check.open:
            ids = {self._id(label) for label in group}
            if not any(ids <= members for members in listed):
                self.report.conflict_failures += 1
                self.report.failures.append(
                    f"{check.what}: conflict of {', '.join(group)} not listed (open: "
                    + ("; ".join(", ".join(sorted(self._label(m) for m in c)) for c in listed) or "none")
                    + ")"
                )
        for label in check.closed:
            memory_id = self._id(label)
            if any(memory_id in members for members in listed):
                self.report.failures.append(f"{check.what}: {label} is still in an open conflict")


def report_dict(report: ScenarioReport) -> dict[str, Any]:
    """A scenario report as JSON-ready data, measures included."""
    t = totals([report])
    return {
        "name": report.name,
        "description": report.description,
        "subject_id": report.subject_id,
        "kind": "positive" if report.positive else "negative",
        "passed": report.passed,
        "measures": asdict(t),
        "failures": report.all_failures(),
        "seconds": report.seconds,
        "checks": [{**asdict(c), "passed": c.passed} for c in report.checks],
    }
