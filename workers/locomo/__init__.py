"""LoCoMo: ingest its conversations as an agent service would, and measure recall on them.

LoCoMo (Maharana et al., "Evaluating Very Long-Term Conversational Memory of LLM
Agents", ACL 2024; data licensed CC BY-NC 4.0) holds very long multi-session
conversations between two invented personas, with generated session summaries,
generated observations (inferences with their evidence turns) and question-answer
annotations naming the evidence turns. The data file is read from where it lies
(``../shared/data/locomo/locomo8.json``); it is never copied into the repository.

* :func:`load_conversations` parses and checks the file.
* :func:`build_writes` maps one conversation to ``MemoryWrite`` commands: every turn a
  ``fact``, every session summary a ``summary`` derived from the session's turns, every
  observation an unconfirmed ``inference`` derived from its evidence turns.
* :func:`ingest` writes them through the ledger (and, embedded, projects them).
* :func:`bench_recall` measures evidence-turn recall@k of the ledger's recall next to a
  BM25 baseline computed in the same run.

Evidence ids are normalised the same way everywhere (:func:`normalize_evidence`): a
string may hold several ids separated by commas, semicolons or blanks
(``"D8:6; D9:17"``), and ``"D:11:26"`` is read as ``D11:26``. An id that still names no
turn stays as it is: an observation drops it, a question counts it as missed.
"""

from workers.locomo.data import (
    ATTRIBUTION,
    AlreadyIngestedError,
    Conversation,
    LocomoFormatError,
    NotIngestedError,
    Observation,
    Question,
    Session,
    Turn,
    load_conversations,
    normalize_evidence,
    parse_session_datetime,
)
from workers.locomo.ingest import IngestReport, ingest
from workers.locomo.mapping import (
    PURPOSE,
    WRITER,
    DerivedWrites,
    MappingCounts,
    build_writes,
    derived_writes,
    turn_writes,
)
from workers.locomo.recall_bench import (
    DEFAULT_KS,
    PUBLISHED_BASELINES,
    RecallBenchReport,
    RetrieverScores,
    bench_recall,
    bm25_rankings,
    evaluated_questions,
    mean_recall_at_k,
    recall_at_k,
    tokenize,
)

__all__ = [
    "ATTRIBUTION",
    "DEFAULT_KS",
    "PUBLISHED_BASELINES",
    "PURPOSE",
    "WRITER",
    "AlreadyIngestedError",
    "Conversation",
    "DerivedWrites",
    "IngestReport",
    "LocomoFormatError",
    "MappingCounts",
    "NotIngestedError",
    "Observation",
    "Question",
    "RecallBenchReport",
    "RetrieverScores",
    "Session",
    "Turn",
    "bench_recall",
    "bm25_rankings",
    "build_writes",
    "derived_writes",
    "evaluated_questions",
    "ingest",
    "load_conversations",
    "mean_recall_at_k",
    "normalize_evidence",
    "parse_session_datetime",
    "recall_at_k",
    "tokenize",
    "turn_writes",
]
