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

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
from rank_bm25 import BM25Okapi

from contracts import MemoryWrite, Provenance, Retention, Scope
from workers.bootstrap import Services

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

PURPOSE = "conversation_memory"
WRITER = "locomo-ingest"
BATCH_SIZE = 200
DEFAULT_KS: tuple[int, ...] = (1, 5, 10, 25)
EVALUATED_CATEGORIES = frozenset({1, 2, 3, 4})

ATTRIBUTION = (
    'Data: LoCoMo (Maharana et al., "Evaluating Very Long-Term Conversational Memory of LLM Agents", '
    "ACL 2024), 8 of its 10 conversations; CC BY-NC 4.0."
)

#: The baselines published in the data README (../shared/data/locomo/README.md), measured
#: on the same 8 conversations with the same metric: retriever -> {k: recall@k}.
PUBLISHED_BASELINES: dict[str, dict[int, float]] = {
    "BM25 (rank_bm25, lowercase word tokens)": {1: 0.242, 5: 0.436, 10: 0.512, 25: 0.612},
    "dense, all-MiniLM-L6-v2 (int8 ONNX), cosine": {1: 0.159, 5: 0.373, 10: 0.452, 25: 0.586},
    "reciprocal rank fusion of the two (k=60)": {1: 0.217, 5: 0.458, 10: 0.559, 25: 0.680},
}

ProgressFn = Callable[[str, int, int], None]


# -- errors ------------------------------------------------------------------------------


class LocomoFormatError(ValueError):
    """The file is not in the LoCoMo shape. ``conversation`` is the ``sample_id`` (or
    ``#<index>`` when it has none, ``None`` for the file as a whole), ``field`` the JSON
    path inside it, ``rule`` what was expected."""

    def __init__(self, field: str, rule: str, conversation: str | None = None, path: Path | None = None) -> None:
        where = f"{path}: " if path is not None else ""
        conv = f"conversation {conversation}: " if conversation is not None else ""
        super().__init__(f"{where}{conv}{field}: {rule}")
        self.field = field
        self.rule = rule
        self.conversation = conversation
        self.path = path


class AlreadyIngestedError(ValueError):
    """Ingesting would duplicate memories: these subjects already have (non-erased) memories."""

    def __init__(self, subject_ids: Sequence[str]) -> None:
        names = ", ".join(repr(s) for s in subject_ids)
        super().__init__(
            f"subject {names} already has memories in this ledger; ingesting again would duplicate them "
            "(erase the subject or use a fresh data directory)"
        )
        self.subject_ids = tuple(subject_ids)


class NotIngestedError(ValueError):
    """The benchmark needs conversations that were ingested first."""

    def __init__(self, subject_ids: Sequence[str]) -> None:
        names = ", ".join(repr(s) for s in subject_ids)
        super().__init__(f"subject {names} has no memories in this ledger; run the LoCoMo ingest first")
        self.subject_ids = tuple(subject_ids)


# -- the data ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Turn:
    """One utterance; ``dia_id`` like ``"D3:13"`` (session 3, turn 13)."""

    dia_id: str
    speaker: str
    text: str
    blip_caption: str | None = None

    @property
    def document(self) -> str:
        """``"speaker: text"``, plus ``" [image: caption]"`` when the turn shared an image
        (the text the data README's baselines index, and the memory's content)."""
        doc = f"{self.speaker}: {self.text}"
        if self.blip_caption:
            doc += f" [image: {self.blip_caption}]"
        return doc


@dataclass(frozen=True)
class Session:
    """Session ``number`` held at ``date_time`` (aware, UTC; see :func:`parse_session_datetime`)."""

    number: int
    date_time: datetime
    turns: tuple[Turn, ...]


@dataclass(frozen=True)
class Observation:
    """A generated observation about ``speaker`` in session ``session``; ``evidence`` are
    normalised dia_ids (some may name no turn)."""

    session: int
    speaker: str
    text: str
    evidence: tuple[str, ...]


@dataclass(frozen=True)
class Question:
    """A QA annotation. ``evidence``: normalised dia_ids, possibly empty or naming no turn;
    ``answer`` is ``None`` for adversarial questions (category 5) without one."""

    question: str
    answer: str | None
    evidence: tuple[str, ...]
    category: int


@dataclass(frozen=True)
class Conversation:
    """One LoCoMo conversation. ``summaries`` maps a session number to its summary."""

    sample_id: str
    speakers: tuple[str, str]
    sessions: tuple[Session, ...]
    summaries: Mapping[int, str]
    observations: tuple[Observation, ...]
    qa: tuple[Question, ...]

    @property
    def turns(self) -> tuple[Turn, ...]:
        """Every turn, in session then turn order."""
        return tuple(t for s in self.sessions for t in s.turns)

    def session(self, number: int) -> Session | None:
        return next((s for s in self.sessions if s.number == number), None)


_MONTHS = {
    name: i
    for i, names in enumerate(
        [
            ("january", "jan"),
            ("february", "feb"),
            ("march", "mar"),
            ("april", "apr"),
            ("may",),
            ("june", "jun"),
            ("july", "jul"),
            ("august", "aug"),
            ("september", "sep", "sept"),
            ("october", "oct"),
            ("november", "nov"),
            ("december", "dec"),
        ],
        start=1,
    )
    for name in names
}
_DATE_RE = re.compile(
    r"\s*(\d{1,2}):(\d{2})\s*([ap])\.?\s*m\.?\s+on\s+(\d{1,2})\s+([A-Za-z]+)\.?,?\s+(\d{4})\s*", re.IGNORECASE
)
_DIA_RE = re.compile(r"D:?(\d+):(\d+)")


def parse_session_datetime(text: str) -> datetime:
    """Parse a LoCoMo session time such as ``"1:56 pm on 8 May, 2023"``.

    The data gives local wall-clock time with no zone; it is read as UTC (there is
    nothing better to read it as, and every timestamp in the ledger is UTC). Month names
    are English, parsed without the process locale.

    Returns:
        An aware ``datetime`` in UTC.

    Raises:
        ValueError: ``text`` is not in that shape or names no valid date.
    """
    match = _DATE_RE.fullmatch(text)
    if match is None:
        raise ValueError(f"{text!r} is not like '1:56 pm on 8 May, 2023'")
    hour, minute, half, day, month_name, year = match.groups()
    month = _MONTHS.get(month_name.lower())
    if month is None:
        raise ValueError(f"{text!r}: unknown month {month_name!r}")
    h = int(hour)
    if not 1 <= h <= 12:
        raise ValueError(f"{text!r}: hour {h} is not a 12-hour clock hour")
    h = h % 12 + (12 if half.lower() == "p" else 0)
    try:
        return datetime(int(year), month, int(day), h, int(minute), tzinfo=UTC)
    except ValueError as exc:
        raise ValueError(f"{text!r}: {exc}") from None


def normalize_evidence(raw: str | Sequence[str]) -> tuple[str, ...]:
    """Normalised dia_ids from an evidence value (one string or a list of strings).

    A string may hold several ids separated by commas, semicolons or blanks; ``D:11:26``
    becomes ``D11:26``; anything else is kept verbatim (and then names no turn).
    Duplicates are dropped, order kept.
    """
    items = [raw] if isinstance(raw, str) else list(raw)
    out: list[str] = []
    for item in items:
        for piece in re.split(r"[,;\s]+", item.strip()):
            if not piece:
                continue
            m = _DIA_RE.fullmatch(piece)
            out.append(f"D{int(m.group(1))}:{int(m.group(2))}" if m else piece)
    return tuple(dict.fromkeys(out))


class _Reader:
    """Field access with errors that name the conversation and the JSON path."""

    def __init__(self, conversation: str, path: Path | None) -> None:
        self.conversation = conversation
        self.path = path

    def error(self, where: str, rule: str) -> LocomoFormatError:
        return LocomoFormatError(where, rule, self.conversation, self.path)

    def obj(self, value: object, where: str) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.error(where, f"expected an object, got {type(value).__name__}")
        return value

    def lst(self, value: object, where: str) -> list[Any]:
        if not isinstance(value, list):
            raise self.error(where, f"expected a list, got {type(value).__name__}")
        return value

    def text(self, value: object, where: str, allow_empty: bool = False) -> str:
        if not isinstance(value, str):
            raise self.error(where, f"expected a string, got {type(value).__name__}")
        if not allow_empty and not value.strip():
            raise self.error(where, "must not be empty")
        return value

    def key(self, parent: dict[str, Any], key: str, where: str) -> Any:
        if key not in parent:
            raise self.error(f"{where}.{key}" if where else key, "missing")
        return parent[key]


def _parse_turn(r: _Reader, raw: object, where: str) -> Turn:
    t = r.obj(raw, where)
    caption = t.get("blip_caption")
    if caption is not None and not isinstance(caption, str):
        raise r.error(f"{where}.blip_caption", f"expected a string, got {type(caption).__name__}")
    return Turn(
        dia_id=r.text(r.key(t, "dia_id", where), f"{where}.dia_id").strip(),
        speaker=r.text(r.key(t, "speaker", where), f"{where}.speaker").strip(),
        text=r.text(r.key(t, "text", where), f"{where}.text", allow_empty=True),
        blip_caption=(caption.strip() or None) if caption else None,
    )


def _session_number(key: str, suffix: str) -> int | None:
    m = re.fullmatch(rf"session_(\d+){suffix}", key)
    return int(m.group(1)) if m else None


def _parse_conversation(raw: object, index: int, path: Path | None) -> Conversation:
    if not isinstance(raw, dict):
        raise LocomoFormatError(f"[{index}]", f"expected an object, got {type(raw).__name__}", f"#{index}", path)
    sid = raw.get("sample_id")
    if not isinstance(sid, str) or not sid.strip():
        raise LocomoFormatError("sample_id", "missing or not a non-empty string", f"#{index}", path)
    r = _Reader(sid.strip(), path)
    conv = r.obj(r.key(raw, "conversation", ""), "conversation")
    speakers = (
        r.text(r.key(conv, "speaker_a", "conversation"), "conversation.speaker_a").strip(),
        r.text(r.key(conv, "speaker_b", "conversation"), "conversation.speaker_b").strip(),
    )
    # Sessions are the ``session_N`` lists; a ``session_N_date_time`` without its list
    # (the source has some) describes no turns and is ignored.
    sessions: list[Session] = []
    seen: dict[str, str] = {}
    for n, key in sorted((n, key) for key in conv if (n := _session_number(key, "")) is not None):
        value = conv[key]
        where = f"conversation.{key}"
        date_key = f"{key}_date_time"
        date_text = r.text(r.key(conv, date_key, "conversation"), f"conversation.{date_key}")
        try:
            when = parse_session_datetime(date_text)
        except ValueError as exc:
            raise r.error(f"conversation.{date_key}", str(exc)) from None
        turns = tuple(_parse_turn(r, t, f"{where}[{i}]") for i, t in enumerate(r.lst(value, where)))
        for i, t in enumerate(turns):
            if t.dia_id in seen:
                raise r.error(f"{where}[{i}].dia_id", f"{t.dia_id!r} repeats {seen[t.dia_id]}")
            seen[t.dia_id] = f"{where}[{i}]"
        sessions.append(Session(n, when, turns))
    if not sessions:
        raise r.error("conversation", "has no session_N turn lists")

    summaries: dict[int, str] = {}
    for key, value in r.obj(raw.get("session_summary", {}), "session_summary").items():
        n = _session_number(key, "_summary")
        if n is None:
            raise r.error(f"session_summary.{key}", "expected keys like session_N_summary")
        text = r.text(value, f"session_summary.{key}", allow_empty=True)
        if text.strip():
            summaries[n] = text.strip()

    observations: list[Observation] = []
    for key, value in r.obj(raw.get("observation", {}), "observation").items():
        n = _session_number(key, "_observation")
        if n is None:
            raise r.error(f"observation.{key}", "expected keys like session_N_observation")
        for speaker, items in r.obj(value, f"observation.{key}").items():
            where = f"observation.{key}.{speaker}"
            for i, item in enumerate(r.lst(items, where)):
                if not isinstance(item, list) or len(item) != 2:
                    raise r.error(f"{where}[{i}]", "expected [text, evidence]")
                text = r.text(item[0], f"{where}[{i}][0]")
                ev = item[1]
                # Malformed evidence is not fatal: the observation then has none and is skipped.
                ok = isinstance(ev, str) or (isinstance(ev, list) and all(isinstance(e, str) for e in ev))
                evidence = normalize_evidence(ev) if ok else ()
                observations.append(Observation(n, speaker, text.strip(), evidence))

    questions: list[Question] = []
    for i, item in enumerate(r.lst(raw.get("qa", []), "qa")):
        where = f"qa[{i}]"
        q = r.obj(item, where)
        category = r.key(q, "category", where)
        if not isinstance(category, int) or isinstance(category, bool):
            raise r.error(f"{where}.category", f"expected an integer, got {category!r}")
        raw_evidence = r.lst(q.get("evidence", []), f"{where}.evidence")
        for j, e in enumerate(raw_evidence):
            r.text(e, f"{where}.evidence[{j}]", allow_empty=True)
        answer = q.get("answer")
        questions.append(
            Question(
                question=r.text(r.key(q, "question", where), f"{where}.question").strip(),
                answer=None if answer is None else str(answer),
                evidence=normalize_evidence(raw_evidence),
                category=category,
            )
        )
    return Conversation(r.conversation, speakers, tuple(sessions), summaries, tuple(observations), tuple(questions))


def load_conversations(path: Path, limit: int | None = None) -> list[Conversation]:
    """Read a LoCoMo JSON file (a list of conversations, the shape of ``locomo10.json``).

    Args:
        path: the file.
        limit: only the first ``limit`` conversations (all when ``None``).

    Returns:
        The conversations in file order; sessions sorted by number, turns in file order.

    Raises:
        FileNotFoundError: no file at ``path`` (the message names it).
        LocomoFormatError: not JSON, or not the LoCoMo shape: the message names the
            conversation (``sample_id``) and the field (e.g. ``conversation.session_3[4].dia_id``).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"LoCoMo data file not found: {path}")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise LocomoFormatError("(file)", f"not valid JSON: {exc}", path=path) from None
    if not isinstance(data, list):
        raise LocomoFormatError(
            "(file)", f"expected a JSON list of conversations, got {type(data).__name__}", path=path
        )
    if limit is not None:
        if limit < 1:
            raise ValueError(f"limit: must be at least 1, got {limit}")
        data = data[:limit]
    convs = [_parse_conversation(raw, i, path) for i, raw in enumerate(data)]
    ids = [c.sample_id for c in convs]
    dup = sorted({s for s in ids if ids.count(s) > 1})
    if dup:
        raise LocomoFormatError("sample_id", "appears more than once in the file", dup[0], path)
    return convs


# -- the mapping -------------------------------------------------------------------------


def _source_ref(sample_id: str, session: int) -> str:
    return f"locomo:{sample_id}:session_{session}"


def _write(
    conv: Conversation,
    session: int,
    written_at: datetime,
    kind: str,
    content: str,
    *,
    turn_id: str | None = None,
    derived_from: Sequence[str] = (),
    confirmed: bool,
    veracity: str,
) -> MemoryWrite:
    return MemoryWrite.model_validate(
        {
            "subject_id": conv.sample_id,
            "kind": kind,
            "content": content,
            "purpose": PURPOSE,
            "scope": Scope(type="subject", id=conv.sample_id),
            "provenance": Provenance(
                writer=WRITER,
                written_at=written_at,
                turn_id=turn_id,
                source_ref=_source_ref(conv.sample_id, session),
                consent_ref=f"locomo:{conv.sample_id}",
                derived_from=tuple(derived_from),
            ),
            "sensitivity": "personal",
            "retention": Retention(basis="consent"),
            "confirmed": confirmed,
            "veracity": veracity,
        }
    )


def turn_writes(conv: Conversation) -> list[tuple[str, MemoryWrite]]:
    """One ``fact`` per turn, as ``(dia_id, command)`` in turn order.

    The content is :attr:`Turn.document`; ``provenance.turn_id`` is the dia_id,
    ``written_at`` the session's time; stated by the speaker and confirmed.
    """
    return [
        (
            t.dia_id,
            _write(
                conv, s.number, s.date_time, "fact", t.document, turn_id=t.dia_id, confirmed=True, veracity="stated"
            ),
        )
        for s in conv.sessions
        for t in s.turns
    ]


@dataclass(frozen=True)
class DerivedWrites:
    """The commands that refer to turns by memory id, and what could not be mapped.

    ``skipped_summaries``: summaries of a session with no turns; ``skipped_observations``:
    observations none of whose evidence names a written turn; ``dropped_evidence``:
    evidence ids (of observations that were kept) that name no turn.
    """

    summaries: list[MemoryWrite]
    observations: list[MemoryWrite]
    skipped_summaries: int = 0
    skipped_observations: int = 0
    dropped_evidence: int = 0


def derived_writes(conv: Conversation, memory_ids: Mapping[str, str]) -> DerivedWrites:
    """Summaries and observations of ``conv``, wired to the turns' memory ids.

    Args:
        memory_ids: dia_id -> memory id of every written turn (what the ledger assigned).

    A session summary becomes a ``summary`` derived from the memory ids of the session's
    turns (the ledger records it as ``SummaryDerived``); an observation an unconfirmed
    ``inference`` (veracity ``inferred``) derived from its evidence turns' memory ids.
    Both are generated text, so summaries are ``inferred`` and unconfirmed too.
    """
    summaries: list[MemoryWrite] = []
    skipped_summaries = 0
    for number, text in sorted(conv.summaries.items()):
        session = conv.session(number)
        sources = [memory_ids[t.dia_id] for t in session.turns if t.dia_id in memory_ids] if session else []
        if session is None or not sources:
            skipped_summaries += 1
            continue
        summaries.append(
            _write(
                conv,
                number,
                session.date_time,
                "summary",
                text,
                derived_from=sources,
                confirmed=False,
                veracity="inferred",
            )
        )
    observations: list[MemoryWrite] = []
    skipped = dropped = 0
    for obs in conv.observations:
        session = conv.session(obs.session)
        sources = list(dict.fromkeys(memory_ids[e] for e in obs.evidence if e in memory_ids))
        if not sources:
            skipped += 1
            continue
        dropped += sum(1 for e in obs.evidence if e not in memory_ids)
        # An observation of a session with no turns list still has a date only if the
        # session exists; otherwise date it like its latest evidence turn's session.
        when = session.date_time if session is not None else _latest_evidence_time(conv, obs.evidence)
        observations.append(
            _write(
                conv,
                obs.session,
                when,
                "inference",
                obs.text,
                derived_from=sources,
                confirmed=False,
                veracity="inferred",
            )
        )
    return DerivedWrites(summaries, observations, skipped_summaries, skipped, dropped)


def _latest_evidence_time(conv: Conversation, evidence: Iterable[str]) -> datetime:
    wanted = set(evidence)
    times = [s.date_time for s in conv.sessions for t in s.turns if t.dia_id in wanted]
    return max(times) if times else conv.sessions[-1].date_time


@dataclass(frozen=True)
class MappingCounts:
    """What :func:`build_writes` wrote for one conversation (counts of commands)."""

    turns: int
    summaries: int
    observations: int
    skipped_summaries: int
    skipped_observations: int
    dropped_evidence: int
    batches: int


def _chunks(items: Sequence[MemoryWrite], size: int) -> Iterable[list[MemoryWrite]]:
    for start in range(0, len(items), size):
        yield list(items[start : start + size])


def build_writes(
    conv: Conversation,
    write_batch: Callable[[list[MemoryWrite]], Sequence[str]],
    batch_size: int = BATCH_SIZE,
) -> MappingCounts:
    """Map ``conv`` to ``MemoryWrite`` batches and hand each to ``write_batch``.

    Memory ids are assigned by the ledger, so this runs in two steps: the turns first
    (batches of at most ``batch_size``), collecting dia_id -> memory id from what
    ``write_batch`` returns, then the summaries and observations that refer to them.

    Args:
        write_batch: writes one batch and returns the memory ids, one per command, in
            order (``[r.memory_id for r in ledger.write_many(principal, batch)]``; a test
            may pass a fake that assigns ids).
        batch_size: commands per batch, at least 1.

    Raises:
        ValueError: ``write_batch`` returned a different number of ids than commands.
        Whatever ``write_batch`` raises (the ledger's errors).
    """
    if batch_size < 1:
        raise ValueError(f"batch_size: must be at least 1, got {batch_size}")
    batches = 0

    def send(batch: list[MemoryWrite]) -> list[str]:
        nonlocal batches
        ids = list(write_batch(batch))
        batches += 1
        if len(ids) != len(batch):
            raise ValueError(f"write_batch returned {len(ids)} memory ids for {len(batch)} commands")
        return ids

    turns = turn_writes(conv)
    memory_ids: dict[str, str] = {}
    for start in range(0, len(turns), batch_size):
        chunk = turns[start : start + batch_size]
        ids = send([cmd for _, cmd in chunk])
        memory_ids.update((dia_id, mid) for (dia_id, _), mid in zip(chunk, ids, strict=True))
    derived = derived_writes(conv, memory_ids)
    for batch in _chunks([*derived.summaries, *derived.observations], batch_size):
        send(batch)
    return MappingCounts(
        turns=len(turns),
        summaries=len(derived.summaries),
        observations=len(derived.observations),
        skipped_summaries=derived.skipped_summaries,
        skipped_observations=derived.skipped_observations,
        dropped_evidence=derived.dropped_evidence,
        batches=batches,
    )


# -- ingest ------------------------------------------------------------------------------


@dataclass(frozen=True)
class IngestReport:
    """What :func:`ingest` did. ``memories`` counts written memories per kind (``fact``,
    ``summary``, ``inference``); seconds are wall-clock; ``catch_up_seconds`` is ``None``
    when projections were not run here (distributed mode)."""

    path: str
    conversations: int
    memories: dict[str, int]
    events_appended: int
    batches: int
    skipped_summaries: int
    skipped_observations: int
    dropped_evidence: int
    write_seconds: float
    catch_up_seconds: float | None = None
    catch_up_records: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "attribution": ATTRIBUTION}

    def render(self) -> str:
        m = self.memories
        lines = [
            f"Ingested {self.conversations} LoCoMo conversation(s) from {self.path}",
            f"  facts (turns)            {m.get('fact', 0):>7,}",
            f"  summaries                {m.get('summary', 0):>7,}",
            f"  inferences (observations){m.get('inference', 0):>7,}",
            f"  skipped observations     {self.skipped_observations:>7,}  (no evidence naming a turn)",
            f"  dropped evidence ids     {self.dropped_evidence:>7,}  (named no turn; observation kept)",
            f"  events appended          {self.events_appended:>7,}  in {self.batches} batches, "
            f"{self.write_seconds:.1f} s",
        ]
        if self.skipped_summaries:
            lines.append(f"  skipped summaries        {self.skipped_summaries:>7,}  (session without turns)")
        if self.catch_up_seconds is not None:
            lines.append(
                f"  projections caught up    {self.catch_up_records or 0:>7,}  records, {self.catch_up_seconds:.1f} s"
            )
        lines.append(ATTRIBUTION)
        return "\n".join(lines)


def _live_memory_counts(services: Services, subject_ids: Sequence[str]) -> dict[str, int]:
    with services.pool.connection() as conn:
        rows = conn.execute(
            "SELECT subject_id, count(*) FROM ledger_memories"
            " WHERE subject_id = ANY(%s) AND status <> 'erased' GROUP BY subject_id",
            (list(subject_ids),),
        ).fetchall()
    return {str(r[0]): int(r[1]) for r in rows}


def ingest(
    services: Services,
    path: Path,
    progress: ProgressFn | None = None,
    limit: int | None = None,
    batch_size: int = BATCH_SIZE,
) -> IngestReport:
    """Write the LoCoMo conversations at ``path`` into the ledger (see :func:`build_writes`).

    Each conversation's ``sample_id`` is the subject. Commands go through
    ``services.ledger.write_many`` as ``services.principal()``, ``batch_size`` at a time
    (one transaction and one log batch each). In the embedded mode the in-process
    projections are then caught up (``services.catch_up()``), timed separately.

    Args:
        progress: called as ``progress("ingest", conversations_done, conversations_total)``
            after each conversation, and ``progress("project <id>", done, total)`` during the catch-up.
        limit: only the first ``limit`` conversations.

    Raises:
        FileNotFoundError, LocomoFormatError: see :func:`load_conversations` (before
            anything is written).
        AlreadyIngestedError: a subject already has memories that are not erased; it
            names them, and nothing is written. (The check is not atomic with the writes:
            two concurrent ingests of one file are not prevented.)
        NotAuthorisedError: the principal has no ``write`` grant for a subject.
        Ledger errors (``EventLogError`` ...): conversations before the failing batch
            stay written.
    """
    convs = load_conversations(path, limit)
    existing = _live_memory_counts(services, [c.sample_id for c in convs])
    if existing:
        raise AlreadyIngestedError(sorted(existing))
    principal = services.principal()
    events = 0

    def write_batch(batch: list[MemoryWrite]) -> list[str]:
        nonlocal events
        results = services.ledger.write_many(principal, batch)
        events += sum(len(r.events) for r in results)
        ids = [r.memory_id for r in results]
        if any(i is None for i in ids):
            raise RuntimeError("the ledger returned a write result without a memory id")
        return [i for i in ids if i is not None]

    totals = {"fact": 0, "summary": 0, "inference": 0}
    batches = skipped_s = skipped_o = dropped = 0
    started = time.perf_counter()
    for done, conv in enumerate(convs, start=1):
        counts = build_writes(conv, write_batch, batch_size)
        totals["fact"] += counts.turns
        totals["summary"] += counts.summaries
        totals["inference"] += counts.observations
        batches += counts.batches
        skipped_s += counts.skipped_summaries
        skipped_o += counts.skipped_observations
        dropped += counts.dropped_evidence
        if progress is not None:
            progress("ingest", done, len(convs))
    write_seconds = time.perf_counter() - started
    catch_up_seconds: float | None = None
    catch_up_records: int | None = None
    if services.settings.mode == "embedded":
        started = time.perf_counter()
        catch_up_records = services.catch_up(progress)
        catch_up_seconds = time.perf_counter() - started
    return IngestReport(
        path=str(path),
        conversations=len(convs),
        memories=totals,
        events_appended=events,
        batches=batches,
        skipped_summaries=skipped_s,
        skipped_observations=skipped_o,
        dropped_evidence=dropped,
        write_seconds=round(write_seconds, 3),
        catch_up_seconds=None if catch_up_seconds is None else round(catch_up_seconds, 3),
        catch_up_records=catch_up_records,
    )


# -- the metric --------------------------------------------------------------------------


def recall_at_k(ranking: Sequence[str | None], evidence: Sequence[str], k: int) -> float:
    """Evidence-turn recall@k of one question: the share of its (distinct) evidence ids
    found among the first ``k`` entries of ``ranking``.

    This is the data README's metric (../shared/data/locomo/README.md, "Retrieval
    baselines"): "share of a question's evidence turns found in the top k of that
    conversation's turns". An evidence id that names no turn can never be found and
    counts as missed (that is how the README's numbers were computed). ``None`` entries
    in ``ranking`` are results that are not turns: they take a place but match nothing.

    Raises:
        ValueError: ``evidence`` is empty (such a question is not evaluated) or ``k < 1``.
    """
    if k < 1:
        raise ValueError(f"k: must be at least 1, got {k}")
    wanted = set(evidence)
    if not wanted:
        raise ValueError("evidence: a question without evidence ids cannot be scored")
    top = {r for r in ranking[:k] if r is not None}
    return len(wanted & top) / len(wanted)


def mean_recall_at_k(
    rankings: Sequence[Sequence[str | None]], evidences: Sequence[Sequence[str]], ks: Sequence[int]
) -> dict[int, float]:
    """The mean of :func:`recall_at_k` over questions (one ranking per question), per k.

    Raises:
        ValueError: different numbers of rankings and evidences, no questions, or as
            :func:`recall_at_k`.
    """
    if len(rankings) != len(evidences):
        raise ValueError(f"{len(rankings)} rankings for {len(evidences)} questions")
    if not rankings:
        raise ValueError("no questions to score")
    return {k: sum(recall_at_k(r, e, k) for r, e in zip(rankings, evidences, strict=True)) / len(rankings) for k in ks}


def evaluated_questions(conv: Conversation) -> list[Question]:
    """The questions the metric is computed over: categories 1-4 with at least one
    evidence id (category 5 is adversarial; two category 1-4 questions of the source have
    an empty evidence list and are left out, giving the README's 1,224)."""
    return [q for q in conv.qa if q.category in EVALUATED_CATEGORIES and q.evidence]


_TOKEN_RE = re.compile(r"\w+")


def tokenize(text: str) -> list[str]:
    """Lowercase word tokens, as the README's BM25 baseline: ``re.findall(r"\\w+", text.lower())``."""
    return _TOKEN_RE.findall(text.lower())


def bm25_rankings(conv: Conversation, queries: Sequence[str], depth: int) -> list[list[str]]:
    """For each query, the dia_ids of the ``depth`` best turns of ``conv`` under BM25
    (``rank_bm25.BM25Okapi`` with its default parameters over :attr:`Turn.document`,
    :func:`tokenize`); ties keep turn order."""
    turns = conv.turns
    bm25 = BM25Okapi([tokenize(t.document) for t in turns])
    out: list[list[str]] = []
    for query in queries:
        scores = bm25.get_scores(tokenize(query))
        order = np.argsort(-scores, kind="stable")[:depth]
        out.append([turns[int(i)].dia_id for i in order])
    return out


# -- the benchmark -----------------------------------------------------------------------


@dataclass(frozen=True)
class RetrieverScores:
    """Mean evidence-turn recall@k of one retriever over ``questions`` questions."""

    name: str
    recall: dict[int, float]
    questions: int


@dataclass(frozen=True)
class RecallBenchReport:
    """The result of :func:`bench_recall`.

    ``rows``: the ledger's recall, then BM25 measured in the same run.
    ``unmatched_evidence``: evidence ids of evaluated questions that name no turn (always
    missed). Latencies are per recall call in milliseconds (``ledger_cached`` of those
    calls were answered by the recall cache, e.g. a question asked twice).
    """

    path: str
    ks: tuple[int, ...]
    rows: tuple[RetrieverScores, ...]
    conversations: int
    questions: int
    questions_without_evidence: int
    unmatched_evidence: int
    latency_ms_p50: float
    latency_ms_p99: float
    latency_ms_mean: float
    ledger_cached: int
    seconds: float
    embedder: str
    published: dict[str, dict[int, float]] = field(default_factory=lambda: dict(PUBLISHED_BASELINES))

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["rows"] = [
            {"name": r.name, "questions": r.questions, **{f"R@{k}": round(v, 4) for k, v in r.recall.items()}}
            for r in self.rows
        ]
        d["published"] = {name: {f"R@{k}": v for k, v in vals.items()} for name, vals in self.published.items()}
        d["metric"] = (
            "evidence-turn recall@k: share of a question's evidence turns found in the top k of that "
            "conversation's turns, averaged over questions of categories 1-4 (data README)"
        )
        d["attribution"] = ATTRIBUTION
        return d

    def render(self) -> str:
        heads = [f"R@{k}" for k in self.ks]
        width = max(len(r.name) for r in self.rows)
        width = max(width, *(len(name) + 2 for name in self.published), 24)
        lines = [
            f"LoCoMo evidence-turn recall@k: {self.conversations} conversation(s), {self.questions:,} questions "
            "(categories 1-4)",
            "",
            f"{'retriever':<{width}}  " + "  ".join(f"{h:>6}" for h in heads) + f"  {'questions':>9}",
        ]
        for r in self.rows:
            vals = "  ".join(f"{r.recall[k]:>6.3f}" for k in self.ks)
            lines.append(f"{r.name:<{width}}  {vals}  {r.questions:>9,}")
        lines.append("published baselines (data README, same 8 conversations and metric):")
        for name, published in self.published.items():
            cells = "  ".join(f"{published[k]:>6.3f}" if k in published else f"{'-':>6}" for k in self.ks)
            lines.append(f"{'  ' + name:<{width}}  {cells}  {1224:>9,}")
        lines += [
            "",
            f"ledger recall latency: p50 {self.latency_ms_p50:.1f} ms, p99 {self.latency_ms_p99:.1f} ms "
            f"(mean {self.latency_ms_mean:.1f} ms, {self.questions:,} calls, {self.ledger_cached} from cache)",
            f"evidence ids naming no turn (counted as missed): {self.unmatched_evidence}; "
            f"questions without evidence left out: {self.questions_without_evidence}",
            ATTRIBUTION,
        ]
        return "\n".join(lines)


def bench_recall(
    services: Services,
    path: Path,
    ks: Sequence[int] = DEFAULT_KS,
    progress: ProgressFn | None = None,
    limit: int | None = None,
    now: datetime | None = None,
) -> RecallBenchReport:
    """Evidence-turn recall@k of the ledger's recall next to BM25, on conversations
    already ingested with :func:`ingest` (and projected).

    The metric is the data README's (see :func:`recall_at_k`), averaged over the
    questions of :func:`evaluated_questions`. For each question:

    * ledger: ``services.recall.recall(principal, subject_id=sample_id,
      purpose="conversation_memory", query=question, now=now, k=max(ks))``; each item's
      ``provenance["turn_id"]`` is its turn (items of another kind than ``fact`` hold
      their place but match no turn). Each call is timed (milliseconds, wall clock).
    * BM25: :func:`bm25_rankings` over the conversation's turn documents.

    Args:
        ks: the cut-offs, each in 1..1000.
        progress: called as ``progress("recall", questions_done, questions_total)``.
        limit: only the first ``limit`` conversations.
        now: the recall time (aware); default the current UTC time, after every session.

    Raises:
        FileNotFoundError, LocomoFormatError: see :func:`load_conversations`.
        NotIngestedError: a conversation's subject has no memories in the ledger.
        ValueError: ``ks`` empty or out of range, or ``now`` naive.
        NotAuthorisedError: the principal has no ``read`` grant for a subject.
    """
    ks = tuple(sorted(set(ks)))
    if not ks or ks[0] < 1 or ks[-1] > 1000:
        raise ValueError(f"ks: give cut-offs between 1 and 1000, got {ks}")
    now = now or datetime.now(UTC)
    if now.tzinfo is None or now.utcoffset() is None:
        raise ValueError("now: must be timezone-aware (UTC)")
    depth = ks[-1]
    convs = load_conversations(path, limit)
    present = _live_memory_counts(services, [c.sample_id for c in convs])
    missing = [c.sample_id for c in convs if c.sample_id not in present]
    if missing:
        raise NotIngestedError(missing)
    principal = services.principal()
    per_conv = [(c, evaluated_questions(c)) for c in convs]
    total = sum(len(qs) for _, qs in per_conv)
    ledger_rankings: list[list[str | None]] = []
    bm25_all: list[list[str]] = []
    evidences: list[tuple[str, ...]] = []
    latencies: list[float] = []
    cached = unmatched = without = done = 0
    started = time.perf_counter()
    for conv, questions in per_conv:
        turn_ids = {t.dia_id for t in conv.turns}
        without += sum(1 for q in conv.qa if q.category in EVALUATED_CATEGORIES and not q.evidence)
        unmatched += sum(1 for q in questions for e in q.evidence if e not in turn_ids)
        bm25_all += bm25_rankings(conv, [q.question for q in questions], depth)
        for q in questions:
            t0 = time.perf_counter()
            result = services.recall.recall(
                principal, subject_id=conv.sample_id, purpose=PURPOSE, query=q.question, now=now, k=depth
            )
            latencies.append((time.perf_counter() - t0) * 1000.0)
            cached += int(result.cached)
            ledger_rankings.append(
                [str(i.provenance.get("turn_id")) if i.kind == "fact" else None for i in result.items]
            )
            evidences.append(q.evidence)
            done += 1
            if progress is not None:
                progress("recall", done, total)
    seconds = time.perf_counter() - started
    if not evidences:
        raise ValueError(f"{path}: no questions of categories 1-4 with evidence to score")
    lat = np.asarray(latencies)
    return RecallBenchReport(
        path=str(path),
        ks=ks,
        rows=(
            RetrieverScores(
                f"ledger recall (fts + vector {services.settings.embedder}, rrf)",
                mean_recall_at_k(ledger_rankings, evidences, ks),
                len(evidences),
            ),
            RetrieverScores("BM25 (rank_bm25, this run)", mean_recall_at_k(bm25_all, evidences, ks), len(evidences)),
        ),
        conversations=len(convs),
        questions=len(evidences),
        questions_without_evidence=without,
        unmatched_evidence=unmatched,
        latency_ms_p50=round(float(np.percentile(lat, 50)), 3),
        latency_ms_p99=round(float(np.percentile(lat, 99)), 3),
        latency_ms_mean=round(float(lat.mean()), 3),
        ledger_cached=cached,
        seconds=round(seconds, 3),
        embedder=services.settings.embedder,
    )
