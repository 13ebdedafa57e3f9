"""LoCoMo data: the dataclasses, errors, session dates, evidence ids, and :func:`load_conversations`."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ATTRIBUTION = (
    'Data: LoCoMo (Maharana et al., "Evaluating Very Long-Term Conversational Memory of LLM Agents", '
    "ACL 2024), 8 of its 10 conversations; CC BY-NC 4.0."
)


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
