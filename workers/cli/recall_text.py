"""The text ``memledger recall`` prints: per item its score, kind and text, then the
provenance needed to judge it (writer and the agent's own label, when it was written in UTC, confidence, scope,
key, the turn, tool call, source and consent it came from, what it was derived from),
then its id, revision, expiry, its length in tokens and the rankers that found it; the
first line says how many, their tokens in all, and the past time judged (``--as-of``).
``--json`` prints the whole ``RecallResult`` instead."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from projections.evidence import RecallItem
from projections.recall import RecallResult
from projections.wording import counted, one_line

_REFERENCES = (("turn_id", "turn"), ("tool_call_id", "tool call"), ("source_ref", "source"), ("consent_ref", "consent"))
"""Provenance references shown when present, with their labels, in this order."""


def render_recall(result: RecallResult) -> str:
    """The recalled items as lines for a terminal (``no memories recalled`` when empty);
    a summary's sources recalled with it follow it, indented, each with its own provenance."""
    if not result.items:
        return "no memories recalled"
    when = f" as of {utc_text(result.as_of)}" if result.as_of else ""
    cached = " (from cache)" if result.cached else ""
    lines = [f"{counted(len(result.items), 'memory', 'memories')}{when}{cached}, {counted(result.tokens, 'token')}:"]
    for n, item in enumerate(result.items, start=1):
        lines.append(f"{n:>3}. {item.score:.4f} {_headline(item)}")
        lines += [f"     {line}" for line in _details(item)]
        if item.conflicts:
            lines.append(f"     in conflict {', '.join(item.conflicts)} (see: memledger conflicts {item.subject_id})")
        for source in item.grouped:
            lines.append(f"     + source {_headline(source)}")
            lines += [f"       {line}" for line in _details(source)]
    if result.degraded:
        lines.append(f"note: ranked without {', '.join(result.degraded)} (unreachable)")
    return "\n".join(lines)


def _headline(item: RecallItem) -> str:
    flag = " [unconfirmed]" if item.needs_confirmation else ""
    return f"{item.kind}{flag}: {one_line(item.content)}"


def _details(item: RecallItem) -> list[str]:
    """Who wrote it, when, how sure, where it applies; where it came from (when known);
    its identity and how it was found."""
    prov = item.provenance
    writer = one_line(str(prov.get("writer") or "?"))
    if prov.get("agent"):
        writer += f" (agent {one_line(str(prov['agent']))})"
    who = f"by {writer} at {utc_text(prov.get('written_at'))}; confidence {item.confidence:.2f}"
    who += f"; scope {one_line(_scope(item.scope))}" + (f"; key {one_line(item.key)}" if item.key else "")
    lines = [who]
    origin = [f"{label} {one_line(str(prov[name]))}" for name, label in _REFERENCES if prov.get(name)]
    if item.derived_from:
        origin.append(f"derived from {', '.join(item.derived_from)}")
    if origin:
        lines.append("; ".join(origin))
    expires = f"; expires {utc_text(item.expires_at)}" if item.expires_at else ""
    lines.append(
        f"id {item.memory_id} rev {item.revision}{expires}; {counted(item.tokens, 'token')};"
        f" matched by {'+'.join(item.matched_by) or '-'}"
    )
    return lines


def _scope(scope: dict[str, str]) -> str:
    if not scope or scope.get("type") == "subject":
        return "subject"
    return f"{scope.get('type')}:{scope.get('id')}"


def utc_text(value: Any) -> str:
    """An ISO 8601 time (string or aware datetime) as UTC to the second,
    ``2026-11-29T22:17:53Z``; ``?`` when missing, the value itself when it is not an
    aware time."""
    if value is None:
        return "?"
    moment = value
    if isinstance(value, str):
        try:
            moment = datetime.fromisoformat(value)
        except ValueError:
            return value
    if not isinstance(moment, datetime) or moment.tzinfo is None:
        return str(value)
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
