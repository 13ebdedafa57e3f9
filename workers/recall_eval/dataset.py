"""The evaluation set: LoCoMo questions with their evidence turns, as queries and qrels.

A query is one question of categories 1-4 with at least one evidence id
(:func:`workers.locomo.evaluated_questions`: 1,224 over the 8 development
conversations); its relevant documents are its evidence turns (dia ids), each of
relevance 1. An evidence id that names no turn stays in the qrels, so it counts as
missed, as in the data README's baselines.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from workers.locomo.data import Conversation, load_conversations
from workers.locomo.recall_bench import evaluated_questions

__all__ = ["CATEGORY_NAMES", "EvalQuery", "EvalSet", "load_eval_set"]

CATEGORY_NAMES: Mapping[int, str] = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
"""The reasoning type of LoCoMo's question categories 1-4, as the LoCoMo release's own evaluation
code treats them (its paper lists the types in another order)."""


@dataclass(frozen=True)
class EvalQuery:
    """One question: ``qid`` (``<sample_id>/<n>``, n = its place among the conversation's
    evaluated questions), the subject that holds the conversation, the question text,
    its category and its evidence dia ids."""

    qid: str
    subject_id: str
    text: str
    category: int
    evidence: tuple[str, ...]


@dataclass(frozen=True)
class EvalSet:
    """The conversations and their queries, in file order."""

    path: str
    conversations: tuple[Conversation, ...]
    queries: tuple[EvalQuery, ...]

    def qrels(self, queries: Sequence[EvalQuery] | None = None) -> dict[str, dict[str, int]]:
        """``qid -> {dia_id: 1}`` for ``queries`` (default: all), as ir-measures reads qrels."""
        return {q.qid: dict.fromkeys(q.evidence, 1) for q in (self.queries if queries is None else queries)}

    def categories(self) -> list[int]:
        """The categories that have queries, ascending."""
        return sorted({q.category for q in self.queries})


def load_eval_set(path: Path, limit: int | None = None) -> EvalSet:
    """The evaluation set of the LoCoMo file at ``path`` (its first ``limit`` conversations).

    Raises:
        FileNotFoundError, LocomoFormatError: see :func:`workers.locomo.load_conversations`.
        ValueError: no conversation has a question to evaluate.
    """
    convs = tuple(load_conversations(path, limit))
    queries = tuple(
        EvalQuery(f"{c.sample_id}/{n}", c.sample_id, q.question, q.category, tuple(q.evidence))
        for c in convs
        for n, q in enumerate(evaluated_questions(c))
    )
    if not queries:
        raise ValueError(f"{path}: no questions of categories 1-4 with evidence to evaluate")
    return EvalSet(str(path), convs, queries)
