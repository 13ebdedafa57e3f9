"""The report of ``memledger eval recall``: one row per baseline and variant, with every
measure overall and per question category, tokens per query and latency."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rich.console import Console
from rich.table import Table

from workers.locomo.data import ATTRIBUTION
from workers.recall_eval.dataset import CATEGORY_NAMES
from workers.recall_eval.measures import MEASURES

__all__ = ["EvalReport", "Row"]


@dataclass(frozen=True)
class Row:
    """One retriever's results: ``measures`` (name -> mean over queries, see
    :data:`~workers.recall_eval.measures.MEASURES`), the same per category, the mean
    tokens of the top 10 results' text per query, and the per-query latency (ms)."""

    name: str
    group: str
    measures: Mapping[str, float]
    per_category: Mapping[int, Mapping[str, float]]
    tokens_per_query: float
    latency_ms_p50: float
    latency_ms_p99: float
    """NaN when not measured (a variant that reused the query embeddings)."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "group": self.group,
            "measures": {k: round(v, 4) for k, v in self.measures.items()},
            "per_category": {
                str(c): {"name": CATEGORY_NAMES.get(c, str(c)), **{k: round(v, 4) for k, v in m.items()}}
                for c, m in self.per_category.items()
            },
            "tokens_per_query_at_10": round(self.tokens_per_query, 1),
            "latency_ms_p50": None if math.isnan(self.latency_ms_p50) else round(self.latency_ms_p50, 2),
            "latency_ms_p99": None if math.isnan(self.latency_ms_p99) else round(self.latency_ms_p99, 2),
        }


@dataclass(frozen=True)
class EvalReport:
    """Every row of one evaluation run, with what it ran on."""

    path: str
    conversations: int
    queries: int
    config: Mapping[str, Any]
    embedder: str
    rows: Sequence[Row]
    seconds: float
    notes: list[str] = field(default_factory=list)

    def row(self, name: str) -> Row:
        """The row called ``name``.

        Raises:
            KeyError: no such row.
        """
        for r in self.rows:
            if r.name == name:
                return r
        raise KeyError(name)

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "conversations": self.conversations,
            "queries": self.queries,
            "embedder": self.embedder,
            "ranking": dict(self.config),
            "rows": [r.to_dict() for r in self.rows],
            "seconds": round(self.seconds, 1),
            "metric": (
                "ir-measures over evidence turns: R@k = share of a question's evidence turns in its top k "
                "(the data README's recall@k), MRR, nDCG@10; questions of categories 1-4"
            ),
            "notes": self.notes,
            "attribution": ATTRIBUTION,
        }

    def render(self, console: Console) -> None:
        """Print the overall table, then R@10 and R@25 per category."""
        table = Table(
            title=f"recall on {self.conversations} LoCoMo conversation(s), {self.queries:,} questions (categories 1-4)",
            caption=f"embedder {self.embedder}; cache bypassed; tokens of the top 10 per query; latency per query"
            " (- : not timed, the query embedding was reused)",
        )
        table.add_column("retriever")
        for name in (*MEASURES, "tok@10", "p50 ms", "p99 ms"):
            table.add_column(name, justify="right")
        group = None
        for r in self.rows:
            if group is not None and r.group != group:
                table.add_section()
            group = r.group
            table.add_row(
                r.name,
                *(f"{r.measures[m]:.3f}" for m in MEASURES),
                f"{r.tokens_per_query:.0f}",
                "-" if math.isnan(r.latency_ms_p50) else f"{r.latency_ms_p50:.1f}",
                "-" if math.isnan(r.latency_ms_p99) else f"{r.latency_ms_p99:.1f}",
            )
        console.print(table)
        categories = sorted({c for r in self.rows for c in r.per_category})
        per = Table(title="R@10 / R@25 per question category")
        per.add_column("retriever")
        for c in categories:
            per.add_column(f"{c} {CATEGORY_NAMES.get(c, '')}".strip(), justify="right")
        for r in self.rows:
            per.add_row(
                r.name,
                *(
                    f"{r.per_category[c]['R@10']:.3f} / {r.per_category[c]['R@25']:.3f}" if c in r.per_category else "-"
                    for c in categories
                ),
            )
        console.print(per)
        for note in self.notes:
            console.print(note)
        console.print(f"{self.seconds:.0f} s. {ATTRIBUTION}")
