"""The SQL recall runs, and its rows as ranking candidates.

Every query applies recall's rules inside PostgreSQL (DESIGN.md, invariant 4): only the
subject's memories, for the purpose, in the scopes asked, with text (a revoked or expired
memory's text is gone), not expired at the time judged, not tombstoned, with a status
among those asked. Summaries also need every source, directly or through other
summaries, active and unexpired then.

The time judged is ``now``, or ``as_of`` (:meth:`RecallQueries.for_time`): then a memory's
status is the one it had at ``as_of`` (the last status-changing event at or before it in
``facts_history``, else the status it was written with), it must have been recorded at or
before ``as_of`` (ledger time: the event's ``occurred_at``, not ``provenance.written_at``),
expiry is judged at ``as_of``, and whatever was erased, revoked, expired or redacted since
stays out: tombstones and the current row count, never an old one (the facts table keeps
no replaced text).

Full-text scoring (``fts_scoring``): Okapi BM25 (Robertson and Zaragoza, "The Probabilistic
Relevance Framework: BM25 and Beyond", 2009), ``sum over query terms t in d of
idf(t) * tf * (k1 + 1) / (tf + k1 * (1 - b + b * dl / avgdl))`` with Lucene's
``idf = ln(1 + (N - df + 0.5) / (df + 0.5))``, over PostgreSQL's ``english`` lexemes (the
stored ``tsv``: stemmed, stop words removed); ``N``, ``df`` and ``avgdl`` are counted over the
memories the rules let this query see (so the statistics never include another subject's
or an erased memory), ``dl`` is the number of distinct lexemes of the memory and ``tf``
the number of positions of the term in it (what ``ts_rank_cd`` with every weight 1 gives
for a one-term query: each occurrence is a cover of weight 1). Or
PostgreSQL's ``ts_rank`` / ``ts_rank_cd`` of the memory against the query's lexemes
joined by OR.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import psycopg
from psycopg.rows import dict_row

from projections.facts import FactsTables
from projections.ranking.candidates import Candidate, Neighbour
from projections.ranking.config import FtsScoring

__all__ = ["LexicalHits", "RecallQueries"]

RANKED_STATUSES: Final = ("active", "needs_confirmation")
"""Statuses of the memories ranking may read (returned or not: an unconfirmed inference
may lift its sources); what may be returned is decided by the request."""

_TERMS = """
terms AS MATERIALIZED (
  SELECT DISTINCT t.lexeme,
         ('''' || replace(replace(t.lexeme, '\\', '\\\\'), '''', '''''') || '''')::tsquery AS tsq
    FROM unnest(to_tsvector('english', %(query)s)) t),
any_term AS MATERIALIZED (
  SELECT CASE WHEN count(*) = 0 THEN NULL ELSE string_agg(tsq::text, ' | ')::tsquery END AS tsq FROM terms)"""
"""The query's ``english`` lexemes, each as a one-term tsquery (quoted, so no lexeme is
parsed as an operator), and all of them joined by OR (NULL when the query has none)."""

_BM25 = """
stats AS MATERIALIZED (SELECT count(*)::float8 AS n, greatest(avg(dl), 1.0)::float8 AS avgdl FROM pool),
hits AS MATERIALIZED (
  SELECT p.memory_id, p.status, p.derived, p.dl::float8 AS dl, t.lexeme,
         ts_rank_cd('{1,1,1,1}', p.tsv, t.tsq, 0)::float8 AS tf
    FROM pool p JOIN terms t ON p.tsv @@ t.tsq),
df AS MATERIALIZED (SELECT lexeme, count(*)::float8 AS df FROM hits GROUP BY lexeme),
scored AS MATERIALIZED (
  SELECT h.memory_id, h.status, h.derived,
         sum(ln(1.0::float8 + (s.n - d.df + 0.5::float8) / (d.df + 0.5::float8))
             * h.tf * (%(k1)s::float8 + 1.0::float8)
             / (h.tf + %(k1)s::float8 * (1.0::float8 - %(b)s::float8 + %(b)s::float8 * h.dl / s.avgdl))
             ORDER BY h.lexeme) AS score
    FROM hits h JOIN df d USING (lexeme) CROSS JOIN stats s
   GROUP BY h.memory_id, h.status, h.derived)"""
"""Okapi BM25 of every memory of ``pool`` that holds a query term, summed over its terms
in lexeme order (so equal texts get bit-equal scores whatever order the rows come in).
No join of two row sets on memory id: the planner, which cannot estimate these sets,
would nest loops."""

_TS_RANK = """
scored AS MATERIALIZED (
  SELECT p.memory_id, p.status, p.derived, {function}(p.tsv, q.tsq)::float8 AS score
    FROM pool p, any_term q WHERE p.tsv @@ q.tsq)"""

_LIGHT = """f.memory_id, f.kind, st.status, f.key, f.scope_type, f.scope_id, f.derived_from,
  f.provenance->>'source_ref' AS source_ref, f.written_at, f.confidence, f.confirmed"""
"""The columns a :class:`Candidate` is made of, from a facts row ``f`` and its status ``st``."""

_SUMMARY_LIGHT = """f.memory_id, 'summary' AS kind, 'active' AS status, f.key, f.scope_type, f.scope_id,
  f.derived_from, f.provenance->>'source_ref' AS source_ref, f.written_at, f.confidence, f.confirmed"""

_FULL = """f.memory_id, f.subject_id, f.kind, f.content, st.status, f.confirmed, f.confidence, f.key,
  f.purpose, f.scope_type, f.scope_id, f.provenance, st.revision, f.expires_at, f.sensitivity, f.derived_from"""
"""A facts row under the names ``projections.evidence.item_from_row`` reads, its status
and revision the ones at the time judged."""

_SUMMARY_FULL = """f.memory_id, f.subject_id, 'summary' AS kind, f.content, 'active' AS status, f.confirmed,
  f.confidence, f.key, f.purpose, f.scope_type, f.scope_id, f.provenance, f.revision, f.expires_at,
  f.sensitivity, f.derived_from"""


_GENERIC_PLANS = "SET LOCAL plan_cache_mode = force_generic_plan"
"""Sent first in recall's pipelines (no round trip of its own; it holds until the
transaction ends): PostgreSQL otherwise plans the full-text and neighbour queries again
on every call (it judged their generic plans costlier than re-planning; measured here,
the generic plans ran as fast or faster, and the planning cost 0.5-2 ms per query), while
the parameters of the plans do not change their shapes: one subject's rows by index."""


def _status_at(alias: str, history: str) -> str:
    """SQL: the status memory ``alias`` had at ``%(as_of)s``: that of the last event at or
    before it that set one, else the status it was written with (an inference is written
    ``needs_confirmation`` unless confirmed at once, which a ``MemoryConfirmed`` after
    ``as_of`` shows it was not by then)."""
    return f"""coalesce(
    (SELECT h.status FROM {history} h
      WHERE h.memory_id = {alias}.memory_id AND h.occurred_at <= %(as_of)s AND h.status IS NOT NULL
      ORDER BY h.revision DESC LIMIT 1),
    CASE WHEN {alias}.kind = 'inference' AND (NOT {alias}.confirmed OR EXISTS (
           SELECT 1 FROM {history} c WHERE c.memory_id = {alias}.memory_id
              AND c.event_type = 'MemoryConfirmed' AND c.occurred_at > %(as_of)s))
         THEN 'needs_confirmation' ELSE 'active' END)"""


def _revision_at(alias: str, history: str) -> str:
    """SQL: the revision memory ``alias`` had at ``%(as_of)s``: the last one the history
    recorded at or before it (a supersession, confirmation or reinforcement since bumped
    the row's own)."""
    return f"""coalesce(
    (SELECT max(h.revision) FROM {history} h WHERE h.memory_id = {alias}.memory_id AND h.occurred_at <= %(as_of)s),
    {alias}.revision)"""


def _recorded(alias: str, history: str) -> str:
    """SQL: memory ``alias`` was recorded (its first event) at or before ``%(as_of)s``."""
    return (
        f"EXISTS (SELECT 1 FROM {history} w WHERE w.memory_id = {alias}.memory_id"
        " AND w.revision = 1 AND w.occurred_at <= %(as_of)s)"
    )


def _scope_and_life(alias: str) -> str:
    return f"""{alias}.subject_id = %(subject)s AND {alias}.purpose = %(purpose)s
  AND ({alias}.scope_type || ':' || {alias}.scope_id) = ANY(%(scopes)s)
  AND ({alias}.expires_at IS NULL OR {alias}.expires_at > %(at)s)
  AND NOT EXISTS (SELECT 1 FROM tombstones t WHERE t.memory_id = {alias}.memory_id)"""


@dataclass(frozen=True)
class LexicalHits:
    """What full-text search found: memories recall may return, derived memories
    (lineage seeds) and summaries, each best first, as candidates."""

    hits: list[Candidate]
    seeds: list[Candidate]
    summaries: list[Candidate]


class RecallQueries:
    """The SQL of recall over ``facts`` (tables or stable views) and ``summaries``,
    judged at ``now`` or, :meth:`for_time` with ``as_of``, at a past time.

    Every method takes ``params``: ``subject``, ``purpose``, ``scopes`` (``"type:id"``
    strings), ``statuses`` (those the caller may be returned), ``at`` (the time judged,
    aware) and, judging ``as_of``, ``as_of`` (the same time).
    """

    def __init__(self, facts: FactsTables, summaries: str, as_of: bool = False) -> None:
        self._facts = facts
        self._summaries = summaries
        self.as_of = as_of
        history = facts.history
        status = _status_at("f", history) if as_of else "f.status"
        revision = _revision_at("f", history) if as_of else "f.revision"
        self._from = f"{facts.facts} f CROSS JOIN LATERAL (SELECT {status} AS status, {revision} AS revision) st"
        recorded = f"\n  AND f.status NOT IN ('revoked', 'expired', 'erased') AND {_recorded('f', history)}"
        self._rules = (
            f"{_scope_and_life('f')}\n  AND f.kind <> 'summary' AND f.content IS NOT NULL"
            f"{recorded if as_of else ''}\n  AND st.status = ANY(%(statuses)s)"
        )
        source_status = _status_at("src", history) if as_of else "src.status"
        summary_recorded = f"\n  AND {_recorded('f', history)}" if as_of else ""
        invalid_source = f"{source_status} <> 'active' OR src.expires_at <= %(at)s OR src.content IS NULL"
        # the direct sources first (index lookups); the recursion only for a summary made
        # from summaries, which the summaries projection allows but rarely holds
        self._summary_rules = f"""{_scope_and_life("f")}{summary_recorded}
  AND NOT EXISTS (SELECT 1 FROM {facts.facts} src WHERE src.memory_id = ANY(f.derived_from) AND ({invalid_source}))
  AND (NOT EXISTS (SELECT 1 FROM {summaries} s2 WHERE s2.memory_id = ANY(f.derived_from)) OR NOT EXISTS (
    WITH RECURSIVE lineage(memory_id) AS (
      SELECT unnest(f.derived_from)
      UNION
      SELECT unnest(inner_s.derived_from) FROM {summaries} inner_s JOIN lineage l ON inner_s.memory_id = l.memory_id
    )
    SELECT 1 FROM lineage l JOIN {facts.facts} src ON src.memory_id = l.memory_id WHERE {invalid_source}
    UNION ALL
    SELECT 1 FROM lineage l JOIN {summaries} inner_s ON inner_s.memory_id = l.memory_id
     WHERE inner_s.expires_at <= %(at)s))"""

    def for_time(self, as_of: bool) -> RecallQueries:
        """These queries judging at ``as_of`` (True) or at ``now`` (False)."""
        return self if as_of == self.as_of else RecallQueries(self._facts, self._summaries, as_of)

    # -- full text ---------------------------------------------------------------------------

    def _lexical_sql(self, scoring: FtsScoring, rules: str, frm: str, status: str) -> str:
        """The CTEs up to ``scored`` (``memory_id``, ``status``, ``derived``, ``score``):
        the pool holds only what scoring reads, the rows' other columns are read for the
        few memories returned (:meth:`_best_rows`). ``status``: the SQL of a row's status."""
        score = _BM25 if scoring == "bm25" else _TS_RANK.format(function=scoring)
        return f"""WITH {_TERMS},
pool AS MATERIALIZED (
  SELECT f.memory_id, {status} AS status, cardinality(f.derived_from) > 0 AS derived, f.tsv, length(f.tsv) AS dl
    FROM {frm} WHERE {rules}),{score}"""

    @staticmethod
    def _best_rows(best: str, table: str, light: str) -> str:
        """The CTE ``best`` (``role``, ``memory_id``, ``status``, ``score``) joined back to
        ``table`` for the columns of a :class:`Candidate` (``light``), best first."""
        return f""",
best AS MATERIALIZED ({best})
SELECT b.role, {light}, b.score
  FROM best b JOIN {table} f ON f.memory_id = b.memory_id CROSS JOIN LATERAL (SELECT b.status) st
 ORDER BY b.score DESC, b.memory_id
"""

    def lexical(
        self,
        conn: psycopg.Connection,
        params: Mapping[str, Any],
        scoring: FtsScoring,
        depth: int,
        seeds: int,
        summaries: int,
    ) -> LexicalHits:
        """Full-text search for ``params["query"]``: the best ``depth`` memories whose
        status is in ``params["statuses"]``, the best ``seeds`` derived memories of any
        status ranking reads, and the best ``summaries`` summaries (one round trip).
        ``params`` also needs ``k1`` and ``b`` for BM25."""
        ranked = {**params, "statuses": list(RANKED_STATUSES), "returned": list(params["statuses"])}
        facts = self._lexical_sql(scoring, self._rules, self._from, "st.status") + self._best_rows(
            """
(SELECT 'hit' AS role, memory_id, status, score FROM scored
  WHERE status = ANY(%(returned)s) ORDER BY score DESC, memory_id LIMIT %(depth)s)
UNION ALL
(SELECT 'seed' AS role, memory_id, status, score FROM scored
  WHERE derived ORDER BY score DESC, memory_id LIMIT %(seeds)s)""",
            self._facts.facts,
            _LIGHT,
        )
        summary_sql = self._lexical_sql(
            scoring, self._summary_rules, f"{self._summaries} f", "'active'"
        ) + self._best_rows(
            """
SELECT 'summary' AS role, memory_id, status, score FROM scored ORDER BY score DESC, memory_id LIMIT %(summaries)s""",
            self._summaries,
            _SUMMARY_LIGHT,
        )
        with conn.pipeline(), conn.cursor(row_factory=dict_row) as cur_f, conn.cursor(row_factory=dict_row) as cur_s:
            conn.execute(_GENERIC_PLANS)
            cur_f.execute(facts, {**ranked, "depth": depth, "seeds": seeds})
            cur_s.execute(summary_sql, {**ranked, "summaries": summaries})
            rows = cur_f.fetchall() + cur_s.fetchall()
        return LexicalHits(
            hits=[_candidate(r) for r in rows if r["role"] == "hit"],
            seeds=[_candidate(r) for r in rows if r["role"] == "seed"],
            summaries=[_candidate(r) for r in rows if r["role"] == "summary"],
        )

    # -- rows ----------------------------------------------------------------------------------

    def candidates(
        self,
        conn: psycopg.Connection,
        params: Mapping[str, Any],
        ids: Sequence[str],
        anchors: Sequence[str],
        width: int,
    ) -> tuple[dict[str, Candidate], list[Neighbour]]:
        """The rows of those of ``ids`` (memories or summaries) that ranking may read,
        and the neighbours of ``anchors``: the memories within ``width`` places of each in
        its source (same ``provenance.source_ref``, in memory id order, which is the order
        the ledger recorded them: UUIDv7), among those ranking may read. One round trip."""
        ranked = {**params, "statuses": list(RANKED_STATUSES), "ids": list(ids), "anchors": list(anchors)}
        rows_sql = f"""
SELECT {_LIGHT} FROM {self._from} WHERE f.memory_id = ANY(%(ids)s) AND {self._rules}
UNION ALL
SELECT {_SUMMARY_LIGHT} FROM {self._summaries} f WHERE f.memory_id = ANY(%(ids)s) AND {self._summary_rules}
"""
        neighbours_sql = f"""
WITH anchor AS MATERIALIZED (
  SELECT f.memory_id, f.provenance->>'source_ref' AS source_ref FROM {self._facts.facts} f
   WHERE f.memory_id = ANY(%(anchors)s) AND f.subject_id = %(subject)s AND f.provenance->>'source_ref' IS NOT NULL),
live AS MATERIALIZED (
  SELECT {_LIGHT}, row_number() OVER (PARTITION BY f.provenance->>'source_ref' ORDER BY f.memory_id) AS place
    FROM {self._from}
   WHERE f.provenance->>'source_ref' = ANY(ARRAY(SELECT source_ref FROM anchor)) AND {self._rules}),
placed AS MATERIALIZED (
  SELECT l.memory_id AS anchor, l.source_ref, l.place FROM live l WHERE l.memory_id = ANY(%(anchors)s))
SELECT p.anchor, abs(n.place - p.place) AS distance, n.*
  FROM placed p JOIN live n
    ON n.source_ref = p.source_ref AND n.memory_id <> p.anchor AND abs(n.place - p.place) <= %(width)s
"""
        with conn.pipeline(), conn.cursor(row_factory=dict_row) as cur_r, conn.cursor(row_factory=dict_row) as cur_n:
            conn.execute(_GENERIC_PLANS)
            cur_r.execute(rows_sql, ranked)
            if anchors and width > 0:
                cur_n.execute(neighbours_sql, {**ranked, "width": width})
            found = cur_r.fetchall()
            near = cur_n.fetchall() if anchors and width > 0 else []
        rows = {r["memory_id"]: _candidate(r) for r in found}
        for r in near:
            rows.setdefault(r["memory_id"], _candidate(r))
        return rows, [Neighbour(r["anchor"], r["memory_id"], int(r["distance"])) for r in near]

    def items(
        self, conn: psycopg.Connection, params: Mapping[str, Any], ids: Sequence[str]
    ) -> dict[str, dict[str, Any]]:
        """The whole rows (text and provenance) of those of ``ids`` that may be returned
        (status in ``params["statuses"]``), by id, as ``item_from_row`` reads them."""
        sql = f"""
SELECT {_FULL} FROM {self._from} WHERE f.memory_id = ANY(%(ids)s) AND {self._rules}
UNION ALL
SELECT {_SUMMARY_FULL} FROM {self._summaries} f WHERE f.memory_id = ANY(%(ids)s) AND {self._summary_rules}
"""
        with conn.cursor(row_factory=dict_row) as cur:
            cur.execute(sql, {**params, "ids": list(ids)})
            return {r["memory_id"]: r for r in cur.fetchall()}


def _candidate(row: Mapping[str, Any]) -> Candidate:
    """A :class:`Candidate` from a row with the columns of ``_LIGHT``."""
    return Candidate(
        memory_id=row["memory_id"],
        kind=row["kind"],
        status=row["status"],
        key=row["key"],
        scope={"type": row["scope_type"], "id": row["scope_id"]},
        derived_from=list(row["derived_from"] or ()),
        source_ref=row["source_ref"],
        written_at=row["written_at"],
        confidence=float(row["confidence"]),
        confirmed=bool(row["confirmed"]),
    )
