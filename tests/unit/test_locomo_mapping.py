"""workers.locomo without a ledger: parsing, the mapping to MemoryWrite, the recall@k metric.

Every input is a small hand-made file in the LoCoMo shape (no real LoCoMo data here).
"""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from contracts import MemoryWrite
from workers.locomo import (
    ATTRIBUTION,
    PURPOSE,
    WRITER,
    Conversation,
    LocomoFormatError,
    RecallBenchReport,
    RetrieverScores,
    Turn,
    bm25_rankings,
    build_writes,
    derived_writes,
    evaluated_questions,
    load_conversations,
    mean_recall_at_k,
    normalize_evidence,
    parse_session_datetime,
    recall_at_k,
    tokenize,
    turn_writes,
)


def _sample(**overrides: Any) -> dict[str, Any]:
    """One conversation in the LoCoMo shape: two sessions (listed out of order), a date
    without a session, captions, summaries, observations with good and bad evidence, QA."""
    conv: dict[str, Any] = {
        "sample_id": "conv-t",
        "conversation": {
            "speaker_a": "Ann",
            "speaker_b": "Bob",
            "session_2_date_time": "9:05 am on 3 June, 2023",
            "session_2": [
                {"speaker": "Ann", "dia_id": "D2:1", "text": "I adopted a puppy called Rex."},
                {
                    "speaker": "Bob",
                    "dia_id": "D2:2",
                    "text": "Look at this!",
                    "img_url": ["http://example.invalid/x.jpg"],
                    "blip_caption": "a photo of a red kayak on a lake",
                    "query": "kayak",
                },
            ],
            "session_1_date_time": "1:56 pm on 8 May, 2023",
            "session_1": [
                {"speaker": "Ann", "dia_id": "D1:1", "text": "I started painting sunsets."},
                {"speaker": "Bob", "dia_id": "D1:2", "text": "Nice, I go swimming on Sundays."},
                {"speaker": "Ann", "dia_id": "D1:3", "text": "Swimming sounds fun."},
            ],
            "session_3_date_time": "10:00 am on 1 July, 2023",
        },
        "session_summary": {
            "session_1_summary": "Ann paints sunsets; Bob swims on Sundays.",
            "session_2_summary": "Ann adopted Rex; Bob showed his kayak.",
        },
        "observation": {
            "session_1_observation": {
                "Ann": [
                    ["Ann paints sunsets.", "D1:1"],
                    ["Ann likes swimming.", ["D1:3", "D9:9"]],
                    ["Ann said something unrecorded.", "D7:1"],
                ],
                "Bob": [["Bob swims weekly.", "D1:2, D1:3"], ["Bob is malformed.", 42]],
            },
            "session_2_observation": {"Ann": [["Ann has a dog named Rex.", "D:2:1"]]},
        },
        "event_summary": {},
        "qa": [
            {"question": "What does Ann paint?", "answer": "sunsets", "evidence": ["D1:1"], "category": 4},
            {"question": "When did Ann adopt Rex?", "answer": 2023, "evidence": ["D2:1; D1:1"], "category": 2},
            {"question": "Is Ann an ally?", "answer": "yes", "evidence": [], "category": 3},
            {"question": "What is Bob's cat called?", "adversarial_answer": "Tom", "evidence": ["D1:2"], "category": 5},
        ],
    }
    conv.update(overrides)
    return conv


def _write_file(tmp_path: Path, data: Any, name: str = "locomo.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return path


def _load_one(tmp_path: Path, **overrides: Any) -> Conversation:
    (conv,) = load_conversations(_write_file(tmp_path, [_sample(**overrides)]))
    return conv


class FakeLedger:
    """Assigns memory ids m1, m2, ... and records the batches it was given."""

    def __init__(self) -> None:
        self.batches: list[list[MemoryWrite]] = []
        self.by_id: dict[str, MemoryWrite] = {}

    def __call__(self, batch: list[MemoryWrite]) -> list[str]:
        self.batches.append(batch)
        ids = []
        for cmd in batch:
            mid = f"m{len(self.by_id) + 1}"
            self.by_id[mid] = cmd
            ids.append(mid)
        return ids

    def id_of_turn(self, dia_id: str) -> str:
        return next(m for m, c in self.by_id.items() if c.kind == "fact" and c.provenance.turn_id == dia_id)


# -- dates and text -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1:56 pm on 8 May, 2023", datetime(2023, 5, 8, 13, 56, tzinfo=UTC)),
        ("12:05 am on 1 January, 2024", datetime(2024, 1, 1, 0, 5, tzinfo=UTC)),
        ("12:30 pm on 29 February, 2024", datetime(2024, 2, 29, 12, 30, tzinfo=UTC)),
        ("9:00 AM on 15 Sept, 2023", datetime(2023, 9, 15, 9, 0, tzinfo=UTC)),
    ],
)
def test_session_dates_are_read_as_utc(text: str, expected: datetime) -> None:
    parsed = parse_session_datetime(text)
    assert parsed == expected
    assert parsed.utcoffset() is not None and parsed.utcoffset() == expected.utcoffset()


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("8 May 2023", "is not like"),
        ("13:56 pm on 8 May, 2023", "not a 12-hour clock hour"),
        ("1:56 pm on 30 February, 2023", "day is out of range"),
        ("1:56 pm on 8 Maytember, 2023", "unknown month 'Maytember'"),
    ],
)
def test_bad_session_dates_are_refused(text: str, reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        parse_session_datetime(text)


def test_turn_document_adds_the_image_caption() -> None:
    assert Turn("D1:1", "Ann", "Hi there").document == "Ann: Hi there"
    captioned = Turn("D1:2", "Bob", "Look!", blip_caption="a photo of a kayak")
    assert captioned.document == "Bob: Look! [image: a photo of a kayak]"


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("D1:3", ("D1:3",)),
        (["D1:3", "D2:4"], ("D1:3", "D2:4")),
        ("D8:6; D9:17", ("D8:6", "D9:17")),
        ("D26:14, D26:34, D26:42", ("D26:14", "D26:34", "D26:42")),
        ("D:11:26", ("D11:26",)),
        (["D1:3", "D1:3"], ("D1:3",)),
        (["D1:18", "D", "D1:20"], ("D1:18", "D", "D1:20")),
        ([], ()),
    ],
)
def test_evidence_ids_are_normalised(raw: str | list[str], expected: tuple[str, ...]) -> None:
    assert normalize_evidence(raw) == expected


# -- loading ------------------------------------------------------------------------------


def test_load_parses_the_locomo_shape(tmp_path: Path) -> None:
    conv = _load_one(tmp_path)
    assert conv.sample_id == "conv-t"
    assert conv.speakers == ("Ann", "Bob")
    assert [s.number for s in conv.sessions] == [1, 2]  # sorted; session_3 has a date but no turns
    assert conv.sessions[0].date_time == datetime(2023, 5, 8, 13, 56, tzinfo=UTC)
    assert [t.dia_id for t in conv.turns] == ["D1:1", "D1:2", "D1:3", "D2:1", "D2:2"]
    assert conv.turns[4].blip_caption == "a photo of a red kayak on a lake"
    assert conv.turns[0].blip_caption is None
    assert conv.summaries == {
        1: "Ann paints sunsets; Bob swims on Sundays.",
        2: "Ann adopted Rex; Bob showed his kayak.",
    }
    assert len(conv.observations) == 6
    assert conv.observations[3].evidence == ("D1:2", "D1:3")
    assert conv.observations[4].evidence == ()  # malformed evidence (a number): no evidence
    assert conv.observations[5].evidence == ("D2:1",)
    assert [q.category for q in conv.qa] == [4, 2, 3, 5]
    assert conv.qa[1].answer == "2023" and conv.qa[1].evidence == ("D2:1", "D1:1")
    assert conv.qa[3].answer is None


def test_load_limit(tmp_path: Path) -> None:
    path = _write_file(tmp_path, [_sample(), _sample(sample_id="conv-u")])
    assert [c.sample_id for c in load_conversations(path)] == ["conv-t", "conv-u"]
    assert [c.sample_id for c in load_conversations(path, limit=1)] == ["conv-t"]


def test_missing_file_names_the_path(tmp_path: Path) -> None:
    path = tmp_path / "nowhere" / "locomo8.json"
    with pytest.raises(FileNotFoundError, match=str(path)):
        load_conversations(path)


def test_not_json_and_not_a_list(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(LocomoFormatError, match="not valid JSON"):
        load_conversations(bad)
    with pytest.raises(LocomoFormatError, match="expected a JSON list"):
        load_conversations(_write_file(tmp_path, {"sample_id": "x"}))


def _broken(mutate: Any) -> dict[str, Any]:
    data = _sample()
    mutate(data)
    return data


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (lambda d: d.pop("conversation"), "conversation: missing"),
        (lambda d: d["conversation"].pop("session_1_date_time"), "conversation.session_1_date_time: missing"),
        (lambda d: d["conversation"].update(session_1_date_time="yesterday"), "conversation.session_1_date_time"),
        (lambda d: d["conversation"]["session_1"][1].pop("dia_id"), r"conversation.session_1\[1\].dia_id: missing"),
        (
            lambda d: d["conversation"]["session_2"][0].update(dia_id="D1:1"),
            r"conversation.session_2\[0\].dia_id: 'D1:1' repeats conversation.session_1\[0\]",
        ),
        (lambda d: d["conversation"].update(session_1="oops"), "conversation.session_1: expected a list"),
        (lambda d: d["conversation"].pop("speaker_b"), "conversation.speaker_b: missing"),
        (lambda d: d["qa"][0].update(category="four"), r"qa\[0\].category: expected an integer"),
        (lambda d: d["qa"][0].update(evidence="D1:1"), r"qa\[0\].evidence: expected a list"),
        (
            lambda d: d["observation"]["session_1_observation"]["Ann"].append(["only text"]),
            r"observation.session_1_observation.Ann\[3\]: expected \[text, evidence\]",
        ),
        (lambda d: d["session_summary"].update(summary_of_1="x"), "session_summary.summary_of_1"),
    ],
)
def test_malformed_conversations_name_conversation_and_field(tmp_path: Path, mutate: Any, field: str) -> None:
    path = _write_file(tmp_path, [_broken(mutate)])
    with pytest.raises(LocomoFormatError, match=f"conversation conv-t: {field}") as info:
        load_conversations(path)
    assert info.value.conversation == "conv-t"
    assert str(path) in str(info.value)


def test_malformed_sample_id_is_named_by_position(tmp_path: Path) -> None:
    with pytest.raises(LocomoFormatError, match="conversation #1: sample_id"):
        load_conversations(_write_file(tmp_path, [_sample(), _sample(sample_id="")]))
    with pytest.raises(LocomoFormatError, match="conversation conv-t: sample_id: appears more than once"):
        load_conversations(_write_file(tmp_path, [_sample(), _sample()]))


# -- mapping ------------------------------------------------------------------------------


def test_turns_become_confirmed_stated_facts(tmp_path: Path) -> None:
    conv = _load_one(tmp_path)
    writes = turn_writes(conv)
    assert [dia for dia, _ in writes] == ["D1:1", "D1:2", "D1:3", "D2:1", "D2:2"]
    _, cmd = writes[4]
    assert cmd.kind == "fact"
    assert cmd.subject_id == "conv-t"
    assert cmd.content == "Bob: Look at this! [image: a photo of a red kayak on a lake]"
    assert cmd.purpose == PURPOSE == "conversation_memory"
    assert (cmd.scope.type, cmd.scope.id) == ("subject", "conv-t")
    p = cmd.provenance
    assert p.writer == WRITER == "locomo-ingest"
    assert p.written_at == datetime(2023, 6, 3, 9, 5, tzinfo=UTC)
    assert p.turn_id == "D2:2"
    assert p.source_ref == "locomo:conv-t:session_2"
    assert p.consent_ref == "locomo:conv-t"
    assert p.derived_from == ()
    assert cmd.sensitivity == "personal"
    assert cmd.retention.basis == "consent" and cmd.retention.expires_at is None
    assert cmd.veracity == "stated" and cmd.confirmed is True


def test_build_writes_wires_summaries_and_observations_to_turn_ids(tmp_path: Path) -> None:
    conv = _load_one(tmp_path)
    fake = FakeLedger()
    counts = build_writes(conv, fake, batch_size=2)

    # turns first, in batches of 2; then the derived memories
    kinds = [[c.kind for c in b] for b in fake.batches]
    assert kinds[:3] == [["fact", "fact"], ["fact", "fact"], ["fact"]]
    assert all(k != "fact" for b in kinds[3:] for k in b)
    assert all(len(b) <= 2 for b in fake.batches)
    assert counts.batches == len(fake.batches)
    assert (counts.turns, counts.summaries, counts.observations) == (5, 2, 4)
    assert counts.skipped_observations == 2  # "D7:1" names no turn; evidence 42 is malformed
    assert counts.dropped_evidence == 1  # "D9:9" dropped, its observation kept
    assert counts.skipped_summaries == 0

    t = fake.id_of_turn
    summaries = [c for c in fake.by_id.values() if c.kind == "summary"]
    assert [s.provenance.derived_from for s in summaries] == [
        (t("D1:1"), t("D1:2"), t("D1:3")),
        (t("D2:1"), t("D2:2")),
    ]
    assert summaries[1].provenance.source_ref == "locomo:conv-t:session_2"
    assert summaries[1].provenance.written_at == datetime(2023, 6, 3, 9, 5, tzinfo=UTC)
    assert summaries[1].provenance.turn_id is None

    inferences = {c.content: c for c in fake.by_id.values() if c.kind == "inference"}
    assert set(inferences) == {
        "Ann paints sunsets.",
        "Ann likes swimming.",
        "Bob swims weekly.",
        "Ann has a dog named Rex.",
    }
    assert inferences["Ann paints sunsets."].provenance.derived_from == (t("D1:1"),)
    assert inferences["Ann likes swimming."].provenance.derived_from == (t("D1:3"),)
    assert inferences["Bob swims weekly."].provenance.derived_from == (t("D1:2"), t("D1:3"))
    assert inferences["Ann has a dog named Rex."].provenance.derived_from == (t("D2:1"),)
    rex = inferences["Ann has a dog named Rex."]
    assert rex.confirmed is False and rex.veracity == "inferred"
    assert rex.provenance.source_ref == "locomo:conv-t:session_2"
    assert rex.sensitivity == "personal" and rex.retention.basis == "consent"


def test_derived_writes_skip_what_names_no_written_turn(tmp_path: Path) -> None:
    conv = _load_one(tmp_path)
    derived = derived_writes(conv, {"D1:1": "a"})  # only one turn was written
    assert [s.provenance.derived_from for s in derived.summaries] == [("a",)]
    assert derived.skipped_summaries == 1  # session 2 has no written turn
    assert [o.content for o in derived.observations] == ["Ann paints sunsets."]
    assert derived.skipped_observations == 5


def test_build_writes_checks_the_writer(tmp_path: Path) -> None:
    conv = _load_one(tmp_path)
    with pytest.raises(ValueError, match="returned 1 memory ids for 5 commands"):
        build_writes(conv, lambda batch: ["only-one"])
    with pytest.raises(ValueError, match="batch_size"):
        build_writes(conv, FakeLedger(), batch_size=0)


# -- the metric ---------------------------------------------------------------------------


def test_recall_at_k_on_hand_made_rankings() -> None:
    ranking = ["D1:1", "D2:5", "D3:3", "D1:2"]
    assert recall_at_k(ranking, ["D2:5"], 1) == 0.0
    assert recall_at_k(ranking, ["D2:5"], 2) == 1.0
    assert recall_at_k(ranking, ["D1:1", "D1:2"], 1) == 0.5
    assert recall_at_k(ranking, ["D1:1", "D1:2"], 4) == 1.0
    assert recall_at_k(ranking, ["D1:1", "D1:2"], 100) == 1.0  # k beyond the ranking
    assert recall_at_k(ranking, ["D1:1", "D9:9"], 4) == 0.5  # an id naming no turn is a miss
    assert recall_at_k(ranking, ["D1:1", "D1:1"], 1) == 1.0  # duplicates count once
    assert recall_at_k([None, "D1:1"], ["D1:1"], 1) == 0.0  # a non-turn item takes a place
    with pytest.raises(ValueError, match="evidence"):
        recall_at_k(ranking, [], 1)
    with pytest.raises(ValueError, match="k"):
        recall_at_k(ranking, ["D1:1"], 0)


def test_mean_recall_averages_over_questions() -> None:
    rankings: list[list[str | None]] = [["a", "b", "c"], ["x", "y", "z"]]
    evidences = [["a", "c"], ["q"]]
    assert mean_recall_at_k(rankings, evidences, (1, 3)) == {1: 0.25, 3: 0.5}
    with pytest.raises(ValueError, match="2 rankings for 1 questions"):
        mean_recall_at_k(rankings, evidences[:1], (1,))


def test_evaluated_questions_are_categories_1_to_4_with_evidence(tmp_path: Path) -> None:
    conv = _load_one(tmp_path)
    assert [q.question for q in evaluated_questions(conv)] == ["What does Ann paint?", "When did Ann adopt Rex?"]


def test_bm25_ranks_the_matching_turn_first(tmp_path: Path) -> None:
    conv = _load_one(tmp_path)
    assert tokenize("Ann's kayak, RED!") == ["ann", "s", "kayak", "red"]
    (swim,), (kayak,) = bm25_rankings(conv, ["swimming Sundays"], 1), bm25_rankings(conv, ["red kayak"], 1)
    assert swim == ["D1:2"]
    assert kayak == ["D2:2"]  # found through the image caption
    (full,) = bm25_rankings(conv, ["painting"], 25)
    assert sorted(full) == sorted(t.dia_id for t in conv.turns)  # depth beyond the turns: all of them


def test_bench_report_renders_and_serialises() -> None:
    report = RecallBenchReport(
        path="locomo.json",
        ks=(1, 5, 10, 25),
        rows=(
            RetrieverScores("ledger", {1: 0.1, 5: 0.2, 10: 0.3, 25: 0.4}, 3),
            RetrieverScores("BM25", {1: 0.2, 5: 0.4, 10: 0.5, 25: 0.6}, 3),
        ),
        conversations=1,
        questions=3,
        questions_without_evidence=1,
        unmatched_evidence=0,
        latency_ms_p50=5.0,
        latency_ms_p99=9.0,
        latency_ms_mean=5.5,
        ledger_cached=0,
        seconds=0.1,
        embedder="hashing",
    )
    text = report.render()
    assert "R@1" in text and "R@25" in text and "questions" in text
    assert "0.612" in text  # the README's BM25 R@25, for reference
    assert "CC BY-NC 4.0" in text and "Maharana" in text
    data = json.loads(json.dumps(report.to_dict()))
    assert data["rows"][1] == {"name": "BM25", "questions": 3, "R@1": 0.2, "R@5": 0.4, "R@10": 0.5, "R@25": 0.6}
    assert "CPU" not in text and data["cpu_ms_per_call"] is None
    measured = replace(report, cpu_ms_per_call=4.25)
    assert "this process's CPU 4.2 ms per call" in measured.render()
    assert measured.to_dict()["cpu_ms_per_call"] == 4.25
    assert data["attribution"] == ATTRIBUTION
