"""What an erasure does to the versions a memory superseded, and to its rivals.

A memory's earlier versions (``earlier_of``) are:

- the memories it superseded, directly or through a chain of supersessions (the head
  table links each superseded memory to the one that replaced it, ``superseded_by``), of
  any status;
- the memories of its slot (same subject, purpose, scope and ``key``; not summaries)
  recorded before it that were no longer live when it was written, so nothing linked
  them to it, and that still hold content: a revoked one whose keys a consent grace
  period keeps, one past its ``expires_at`` that no sweep has expired yet, one left
  superseded by a memory that is not live any more (the earlier versions of a live
  memory of the slot are that memory's, not its). "Before" is the ledger's order:
  memory ids are UUIDv7s the ledger makes when it records a write, in time order (the
  provenance ``written_at`` is the writer's word, not the ledger's). A live memory of the
  slot is a rival claim (a conflict), not an earlier version;
- and, in turn, the earlier versions of each of those.

Erasing a memory leaves them, with their content, unless the erasure asks for its
history too (``EraseMemories.with_history``): then every one is erased with it. The rule
for what they become (``reinstatements``):

- when a *live* memory (``active`` or ``needs_confirmation``) is erased, the nearest
  earlier version that is not erased, found by walking back from it through the versions
  already erased or erased by the same request (``A <- B <- C``: ``B`` erased, then
  ``C``: ``A``), is live again as ``needs_confirmation`` (``MemoryReinstated``, reason
  ``replacement_erased``, naming the erased live memory): the slot keeps a claim, but
  only the subject can say that the old value is true again; it is recalled only with
  unconfirmed memories until ``confirm`` makes it ``active``;
- it is not when the memory erased was itself superseded (the slot's answer is the
  memory that replaced that one), revoked or expired (their slot had no live answer
  before the erasure either), when it is a summary (it restates sources that had been
  invalidated), when it is not ``superseded`` any more (revoked, expired: the walk stops
  at it, an older version behind it stays as it is), when it holds no content any more
  (its keys were destroyed) or has passed its ``expires_at``.

The earlier versions that still hold content are recorded with the erasure request, and
``erase`` and ``trace`` list them, so that nobody believes an attribute forgotten while
an older value of it is kept.

A live memory erased while it was in conflict (``ConflictDetected``: the live claims of
one slot, all ``needs_confirmation``) takes its dispute with it: when the erasure leaves
its slot with one live claim of those it had, that claim is reinstated (``rivals_left``;
``MemoryReinstated``, reason ``rival_erased``, naming the erased rival): still
``needs_confirmation``, recalled only with unconfirmed memories until ``confirm`` makes
it ``active``, but no longer stuck in a conflict that nothing lists any more. With two or
more claims left the conflict stays open and ``conflicts`` lists it: nothing is
reinstated.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

import psycopg

from contracts import MemorySuperseded, UnknownEventError, decode_event
from ledger import state
from ledger.eventlog import EventLog, iter_records


@dataclass(frozen=True)
class Reinstatement:
    """An earlier version that becomes ``needs_confirmation`` because ``replacement``,
    the memory that superseded it, is erased."""

    head: state.MemoryHead
    replacement: str


def reinstatements(
    erased: Mapping[str, state.MemoryHead], earlier: Sequence[state.MemoryHead], now: datetime
) -> list[Reinstatement]:
    """Which of ``earlier`` (the heads of the erased memories' earlier versions, of any
    status: ``ledger.erasure.earlier_versions``) are reinstated, by the rule of this module;
    ``erased`` are the heads of the memories being erased, as they were before the
    erasure, and ``now`` is UTC. No I/O.

    A candidate's later versions are followed through ``superseded_by`` links: past the
    versions erased (before, or by this request) to the first that is not, which must be
    a live memory of this request for the candidate to be reinstated."""
    known = {h.memory_id: h for h in earlier}
    out: list[Reinstatement] = []
    for head in earlier:
        if head.memory_id in erased or head.status != "superseded":
            continue
        if head.kind == "summary" or head.sealed_content is None:
            continue
        if head.expires_at is not None and head.expires_at <= now:
            continue
        replacement = _erased_live_successor(head, erased, known)
        if replacement is not None:
            out.append(Reinstatement(head, replacement))
    return out


def _erased_live_successor(
    head: state.MemoryHead, erased: Mapping[str, state.MemoryHead], known: Mapping[str, state.MemoryHead]
) -> str | None:
    """The live memory of the request that ``head`` is the nearest version before that is
    not erased, or ``None``: ``head``'s later versions are walked while each is erased
    (before: status ``erased``; or by the request, whatever its status was), and the last
    must be live."""
    seen = {head.memory_id}
    link = head.superseded_by
    while link is not None and link not in seen:
        seen.add(link)
        later = erased.get(link)
        if later is not None and later.status in state.ACTIVE_STATUSES:
            return link
        if later is None:
            later = known.get(link)
            if later is None or later.status != "erased":
                return None  # a version that is not erased holds the slot (or an unknown one)
        link = later.superseded_by
    return None  # the chain ends (or loops) without a live memory of the request


@dataclass(frozen=True)
class RivalReinstatement:
    """A claim left alone in its slot, still ``needs_confirmation``, because ``rival``,
    a live claim of the same slot it was in conflict with, is erased."""

    head: state.MemoryHead
    rival: str


def rivals_left(
    erased: Mapping[str, state.MemoryHead], claims: Iterable[state.MemoryHead], now: datetime
) -> list[RivalReinstatement]:
    """Which live claims are reinstated because their rival is erased, by the rule of
    this module: ``erased`` are the heads of the memories being erased, as they were
    before the erasure; ``claims`` the live heads of the slots of the live ones among
    them, as before the erasure (``ledger.erasure.slot_claims``: the erased included or
    not); ``now`` is UTC. Per slot of an erased live memory: when exactly one claim is
    left live and it awaits confirmation, it is reinstated, naming the first erased
    rival (by memory id). Ordered by slot, then id. No I/O."""
    gone: dict[tuple[str, str, str, str, str], list[str]] = {}
    for h in erased.values():
        slot = slot_of(h)
        if slot is not None and _live(h, now):
            gone.setdefault(slot, []).append(h.memory_id)
    left: dict[tuple[str, str, str, str, str], dict[str, state.MemoryHead]] = {}
    for h in claims:
        slot = slot_of(h)
        if slot in gone and h.memory_id not in erased and _live(h, now):
            left.setdefault(slot, {})[h.memory_id] = h
    out: list[RivalReinstatement] = []
    for slot in sorted(gone):
        alone = list(left.get(slot, {}).values())
        if len(alone) == 1 and alone[0].status == "needs_confirmation" and alone[0].sealed_content is not None:
            out.append(RivalReinstatement(alone[0], min(gone[slot])))
    return out


def earlier_of(named: Sequence[state.MemoryHead], candidates: Iterable[state.MemoryHead], now: datetime) -> list[str]:
    """The ids of the earlier versions (by the rule of this module) of any of ``named``,
    among ``candidates`` (heads of the same subject: those the chains and the slots of
    ``named``, and of the earlier versions found, lead to), the ``named`` ids left out,
    sorted; ``now`` is UTC. No I/O: the caller reads the candidates
    (``ledger.erasure.earlier_versions``) until no new earlier version needs others."""
    heads = {h.memory_id: h for h in candidates}
    replaced: dict[str, list[str]] = {}
    for h in heads.values():
        if h.superseded_by is not None:
            replaced.setdefault(h.superseded_by, []).append(h.memory_id)
    named_ids = {h.memory_id for h in named}
    found: set[str] = set()
    frontier = list(named)
    while frontier:
        later = frontier.pop()
        linked = replaced.get(later.memory_id, [])
        unlinked = [h.memory_id for h in heads.values() if _left_in_slot(h, later, heads, now)]
        for memory_id in (*linked, *unlinked):
            if memory_id not in found and memory_id not in named_ids:
                found.add(memory_id)
                frontier.append(heads[memory_id])
    return sorted(found)


def slot_of(head: state.MemoryHead) -> tuple[str, str, str, str, str] | None:
    """The slot of ``head`` (subject, purpose, scope type, scope id, key), or ``None`` for
    a memory that has none: a summary, a memory without ``key``, an erased one (its head
    forgot the key and scope id)."""
    if head.kind == "summary" or head.key is None or head.scope_id is None:
        return None
    return (head.subject_id, head.purpose, head.scope_type, head.scope_id, head.key)


def _left_in_slot(
    head: state.MemoryHead, later: state.MemoryHead, heads: Mapping[str, state.MemoryHead], now: datetime
) -> bool:
    """``head`` is an earlier version of ``later`` that no link names: of its slot,
    recorded before it, not live at ``now``, not erased, still holding content, and not
    the earlier version of another live memory (a rival's history is the rival's)."""
    slot = slot_of(head)
    if slot is None or slot != slot_of(later) or head.memory_id >= later.memory_id:
        return False
    if head.status == "erased" or head.sealed_content is None or _live(head, now):
        return False
    return not _superseded_by_live(head, heads, now)


def _superseded_by_live(head: state.MemoryHead, heads: Mapping[str, state.MemoryHead], now: datetime) -> bool:
    """``head``'s later versions, followed through ``superseded_by`` links among
    ``heads``, reach a live memory (an unknown one, or a loop, ends the walk: no)."""
    seen = {head.memory_id}
    link = head.superseded_by
    while link is not None and link not in seen:
        seen.add(link)
        later = heads.get(link)
        if later is None:
            return False
        if _live(later, now):
            return True
        link = later.superseded_by
    return False


def _live(head: state.MemoryHead, now: datetime) -> bool:
    """``head`` may be used at ``now``: ``active`` or ``needs_confirmation``, not expired."""
    return head.status in state.ACTIVE_STATUSES and (head.expires_at is None or head.expires_at > now)


def holding_content(heads: Mapping[str, state.MemoryHead], memory_ids: Sequence[str]) -> list[str]:
    """The ids among ``memory_ids`` whose heads still hold content (their keys are not
    destroyed), in the given order."""
    return [m for m in memory_ids if m in heads and heads[m].sealed_content is not None]


LINKS_MARKER = "ledger_schema_supersession_links"
"""Exists once the head table's ``superseded_by`` links were backfilled from the log."""


def backfill_links(conn: psycopg.Connection, log: EventLog) -> int:
    """Once per ledger (a marker table records it): link the superseded heads of a
    ledger made before the head table kept ``superseded_by`` to the memory that replaced
    them, from the ``MemorySuperseded`` events in the log (read whole, partition by
    partition, only when such heads exist; the last supersession of a memory wins).
    Runs in its own transaction on ``conn``; returns the heads linked.

    Raises:
        EventLogError: the log could not be read (nothing is marked: the next start tries again).
    """
    if conn.execute("SELECT to_regclass(%s)", (LINKS_MARKER,)).fetchone() != (None,):
        return 0
    row = conn.execute(
        "SELECT EXISTS (SELECT 1 FROM ledger_memories WHERE status = 'superseded' AND superseded_by IS NULL)"
    ).fetchone()
    links: dict[str, str] = {}
    if row is not None and row[0]:
        for record in iter_records(log):
            if b'"MemorySuperseded"' not in record.value:
                continue
            try:
                event = decode_event(record.value)
            except UnknownEventError:
                continue  # the projections dead-letter it; it links nothing
            if isinstance(event, MemorySuperseded):
                links[event.memory_id] = event.superseded_by
    with conn.transaction():
        linked = 0
        if links:
            linked = conn.execute(
                "UPDATE ledger_memories m SET superseded_by = l.by FROM unnest(%s::text[], %s::text[]) AS l(id, by)"
                " WHERE m.memory_id = l.id AND m.superseded_by IS NULL",
                (list(links), list(links.values())),
            ).rowcount
        conn.execute(f"CREATE TABLE IF NOT EXISTS {LINKS_MARKER} (applied_at timestamptz NOT NULL DEFAULT now())")
    return linked
