"""Comparing a projection's rows and points with a fold of the log: the tables each
Postgres projection has, one :class:`Difference` per differing row, column, payload field
or vector, and the rendering of values (memory text only as a fingerprint).

Used by ``memledger verify`` (:mod:`projections.verify`) and the reference checks
(:mod:`projections.reference.check`).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from projections.errors import VerifyError
from projections.facts import FactsTables
from projections.vector_index import VectorPoint

VECTOR_COSINE_MIN = 0.9999
"""Live and folded vectors of a point with a lower cosine similarity differ."""

VALUE_CHARS = 80
"""Longest rendering of a value in a difference (longer ones are cut, with ``…``)."""

CONTENT_COLUMNS = frozenset({"content"})
"""Columns holding memory text: fingerprinted, never printed."""


@dataclass(frozen=True)
class Difference:
    """One difference between the live projection and a fold of the log (the
    projection's own apply code, or the reference).

    Attributes:
        table: the table (or vector collection) holding it.
        subject_id: whose row it is.
        key: the row's key: ``memory_id``, ``memory_id@revision`` (history) or ``conflict_id``.
        memory_id: the memory concerned, or ``None`` (a conflict row).
        column: the column or payload field, ``"(row)"`` when the row exists on one side
            only, ``"vector"`` for a vector.
        live: the live value, rendered (``None``: absent).
        fold: the folded value, rendered (``None``: absent).
        against: what the live value was compared with: ``"fold"`` (the projection's own
            apply code) or ``"reference"`` (``projections.reference``).
    """

    table: str
    subject_id: str
    key: str
    memory_id: str | None
    column: str
    live: str | None
    fold: str | None
    against: str = "fold"

    def to_dict(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "subject_id": self.subject_id,
            "key": self.key,
            "memory_id": self.memory_id,
            "column": self.column,
            "live": self.live,
            "fold": self.fold,
            "against": self.against,
        }


def render_value(column: str, value: Any) -> str | None:
    """A difference's value as text: ``None`` stays ``None``; memory text becomes
    ``sha256:<12 hex> (<n> chars)``; anything else is compact JSON cut to ``VALUE_CHARS``."""
    if value is None:
        return None
    if column in CONTENT_COLUMNS:
        text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
        return f"sha256:{hashlib.sha256(text.encode()).hexdigest()[:12]} ({len(text)} chars)"
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)
    return text if len(text) <= VALUE_CHARS else text[: VALUE_CHARS - 1] + "…"


@dataclass(frozen=True)
class TableSpec:
    """A table to compare: its name and key columns (each row has a ``subject_id``)."""

    name: str
    keys: tuple[str, ...]

    def key_of(self, row: Mapping[str, Any]) -> str:
        return "@".join(str(row[k]) for k in self.keys)

    def memory_of(self, row: Mapping[str, Any]) -> str | None:
        value = row.get("memory_id")
        return None if value is None else str(value)


def tables_of(name: str, version: int) -> tuple[TableSpec, ...]:
    """The tables of Postgres projection ``name`` at ``version``.

    Raises:
        VerifyError: ``name`` is not a Postgres projection verify knows.
    """
    if name == "facts":
        t = FactsTables(version)
        return (
            TableSpec(t.facts, ("memory_id",)),
            TableSpec(t.history, ("memory_id", "revision")),
            TableSpec(t.conflicts, ("conflict_id",)),
        )
    if name == "summaries":
        return (TableSpec(f"summaries_v{version}", ("memory_id",)),)
    raise VerifyError(f"projection: {name!r} is not a Postgres projection (facts or summaries)")


def compare_rows(
    table: str,
    live: Mapping[str, Mapping[str, Any]],
    folded: Mapping[str, Mapping[str, Any]],
    spec: TableSpec | None = None,
) -> list[Difference]:
    """Every difference between two ``{key: row}`` maps: rows on one side only (column
    ``(row)``), then differing columns of rows on both, in key and column order."""
    out: list[Difference] = []
    for key in sorted(set(live) | set(folded)):
        a, b = live.get(key), folded.get(key)
        row = a if a is not None else b
        assert row is not None
        subject = str(row.get("subject_id"))
        memory = spec.memory_of(row) if spec else (str(row["memory_id"]) if row.get("memory_id") else None)
        if a is None or b is None:
            out.append(
                Difference(table, subject, key, memory, "(row)", "present" if a else None, "present" if b else None)
            )
            continue
        for column in sorted(set(a) | set(b)):
            if a.get(column) != b.get(column):
                out.append(
                    Difference(
                        table,
                        subject,
                        key,
                        memory,
                        column,
                        render_value(column, a.get(column)),
                        render_value(column, b.get(column)),
                    )
                )
    return out


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    """Cosine similarity of two vectors (0.0 if either is zero or their lengths differ)."""
    if len(a) != len(b):
        return 0.0
    na = math.sqrt(sum(x * x for x in a))
    nb = math.sqrt(sum(x * x for x in b))
    if na == 0.0 or nb == 0.0:
        return 0.0
    return sum(x * y for x, y in zip(a, b, strict=True)) / (na * nb)


def _payload_checksums(points: Mapping[str, VectorPoint]) -> dict[str, str]:
    by_subject: dict[str, list[str]] = defaultdict(list)
    for memory_id, point in sorted(points.items()):
        by_subject[str(point.payload.get("subject_id"))].append(
            json.dumps([memory_id, dict(point.payload)], sort_keys=True, default=str)
        )
    return {s: hashlib.md5("\n".join(rows).encode()).hexdigest() for s, rows in by_subject.items()}


def compare_points(
    collection: str, live: Mapping[str, VectorPoint], folded: Mapping[str, VectorPoint]
) -> tuple[set[str], list[Difference]]:
    """Subjects whose payload checksums differ, and every difference: points on one side
    only, differing payload fields, and vectors with cosine below ``VECTOR_COSINE_MIN``
    (every point on both sides is checked, whatever the checksums say)."""
    a_sums, b_sums = _payload_checksums(live), _payload_checksums(folded)
    differing = {s for s in set(a_sums) | set(b_sums) if a_sums.get(s) != b_sums.get(s)}
    out: list[Difference] = []
    for memory_id in sorted(set(live) | set(folded)):
        a, b = live.get(memory_id), folded.get(memory_id)
        point = a if a is not None else b
        assert point is not None
        subject = str(point.payload.get("subject_id"))
        differ = partial(Difference, collection, subject, memory_id, memory_id)  # + column, live, fold
        if a is None or b is None:
            out.append(differ("(row)", "present" if a else None, "present" if b else None))
            continue
        if subject in differing:
            out += [
                differ(column, render_value(column, a.payload.get(column)), render_value(column, b.payload.get(column)))
                for column in sorted(set(a.payload) | set(b.payload))
                if a.payload.get(column) != b.payload.get(column)
            ]
        similarity = cosine(a.vector, b.vector)
        if similarity < VECTOR_COSINE_MIN:
            differing.add(subject)
            out.append(differ("vector", f"cosine {similarity:.6f}", "reference"))
    return differing, out
